"""float64 references of the ops, written in plain torch (small sizes only: they loop over
tokens). Inputs are promoted to float64; autograd through them gives the reference gradients."""
import torch
import torch.nn.functional as F


def f64(t):
    return None if t is None else t.detach().double().requires_grad_(t.requires_grad)


def conv(x, weight, bias=None, silu=False, initial_states=None):
    """x (B, D, L); weight (D, W); initial_states (B, D, W-1). Returns out, final_states."""
    W = weight.shape[1]
    if initial_states is None:
        initial_states = x.new_zeros(x.shape[0], x.shape[1], W - 1)
    xp = torch.cat([initial_states, x], dim=-1)
    out = sum(weight[None, :, k, None] * xp[:, :, k:k + x.shape[-1]] for k in range(W))
    if bias is not None:
        out = out + bias[None, :, None]
    return (F.silu(out) if silu else out), xp[:, :, -(W - 1):]


def conv_update(x, conv_state, weight, bias=None, silu=False):
    """x (B, D, L) new tokens; conv_state (B, D, W-1). Returns out, the new state."""
    return conv(x, weight, bias, silu, conv_state)


def _softplus(dt):
    return torch.where(dt > 20, dt, torch.log1p(torch.exp(dt)))


def scan(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False,
         initial_states=None):
    """mamba_ssm's selective_scan: u, delta, z (b, d, L); A (d, N); B, C (d, N) or (b, G, N, L).
    Returns out, final state (b, d, N)."""
    b, d, L = u.shape
    dt = delta + delta_bias[None, :, None] if delta_bias is not None else delta
    if delta_softplus:
        dt = _softplus(dt)

    def per_channel(M):  # (b, d, N, L)
        if M.dim() == 2:
            return M[None, :, :, None].expand(b, d, M.shape[1], L)
        return M.repeat_interleave(d // M.shape[1], dim=1)
    Bc, Cc = per_channel(B), per_channel(C)
    h = initial_states if initial_states is not None else u.new_zeros(b, d, A.shape[1])
    ys = []
    for t in range(L):
        h = torch.exp(dt[:, :, t, None] * A) * h + dt[:, :, t, None] * Bc[..., t] * u[:, :, t, None]
        ys.append((h * Cc[..., t]).sum(-1))
    y = torch.stack(ys, dim=-1)
    if D is not None:
        y = y + D[None, :, None] * u
    if z is not None:
        y = y * F.silu(z)
    return y, h


def ssd(x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus=False, dt_limit=None,
        initial_states=None):
    """The SSD recurrence token by token: x, z (b, L, H, P); dt (b, L, H); A (H,); B, C (b, L, G,
    N); D (H,) or (H, P); initial_states (b, H, P, N). Returns out, final state (b, H, P, N)."""
    b, L, H, P = x.shape
    G, N = B.shape[2], B.shape[3]
    dt = dt + dt_bias if dt_bias is not None else dt
    if dt_softplus:
        dt = _softplus(dt)
    if dt_limit is not None:
        dt = dt.clamp(dt_limit[0], dt_limit[1])
    Bh = B.repeat_interleave(H // G, dim=2)  # (b, L, H, N)
    Ch = C.repeat_interleave(H // G, dim=2)
    S = initial_states if initial_states is not None else x.new_zeros(b, H, P, N)
    ys = []
    for t in range(L):
        decay = torch.exp(dt[:, t] * A)[:, :, None, None]
        S = decay * S + (dt[:, t, :, None] * x[:, t])[..., None] * Bh[:, t, :, None, :]
        ys.append((S * Ch[:, t, :, None, :]).sum(-1))
    y = torch.stack(ys, dim=1)
    if D is not None:
        y = y + (D[:, None] if D.dim() == 1 else D) * x
    if z is not None:
        y = y * F.silu(z)
    return y, S


def state_update(state, x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus=False):
    """One Mamba-2 token per row, per-head dt / A / D / dt_bias: state (b, H, P, N); x, z (b, H,
    P); dt (b, H); A (H,); B, C (b, G, N). Returns out, the new state."""
    H, G = x.shape[1], B.shape[1]
    dt = dt + dt_bias if dt_bias is not None else dt
    if dt_softplus:
        dt = _softplus(dt)
    Bh = B.repeat_interleave(H // G, dim=1)[:, :, None, :]
    Ch = C.repeat_interleave(H // G, dim=1)[:, :, None, :]
    state = torch.exp(dt * A)[..., None, None] * state + (dt[..., None] * x)[..., None] * Bh
    y = (state * Ch).sum(-1)
    if D is not None:
        y = y + D[:, None] * x
    if z is not None:
        y = y * F.silu(z)
    return y, state


def rel_err(actual, expected):
    """The relative L2 error of actual against the float64 expected."""
    a, e = actual.detach().double(), expected.detach().double()
    return ((a - e).norm() / e.norm().clamp_min(1e-30)).item()
