"""GPU tests of ssmjit.torch: every op against the float64 references (reference.py, small sizes),
gradients against the references' autograd and torch.autograd.gradcheck (fp32 inputs: the kernels
take no fp64), torch.library.opcheck, torch.compile(fullgraph=True) over Mamba blocks, a CUDA graph
replay, and the peers (mamba_ssm, causal_conv1d) where they are installed."""
import importlib.util

import pytest
import torch
import torch.nn.functional as F

import ssmjit
import ssmjit.torch as st
import reference as ref
from blocks import Mamba1Block, Mamba2Block
from reference import f64, rel_err

pytestmark = pytest.mark.gpu
CUDA = "cuda"
I32 = torch.int32


def randn(*shape, dtype=torch.float32, scale=1.0, grad=False):
    t = (torch.randn(*shape, device=CUDA) * scale).to(dtype)
    return t.requires_grad_(grad)


def decay_A(*shape, grad=False):
    return (-torch.exp(torch.randn(*shape, device=CUDA) * 0.5)).requires_grad_(grad)


def cu_seqlens(lengths):
    return torch.tensor([0] + list(torch.tensor(lengths).cumsum(0)), dtype=I32, device=CUDA)


def backward_pairs(outputs, ref_outputs):
    """Random output gradients; backward through both; nothing returned (grads land in .grad)."""
    loss, ref_loss = 0, 0
    for o, r in zip(outputs, ref_outputs):
        g = torch.randn_like(o, dtype=torch.float32)
        loss = loss + (o.float() * g).sum()
        ref_loss = ref_loss + (r * g.double()).sum()
    loss.backward()
    ref_loss.backward()


def assert_grads(inputs, ref_inputs, tol):
    for i, (t, r) in enumerate(zip(inputs, ref_inputs)):
        assert t.grad is not None, f"input {i} has no gradient"
        assert rel_err(t.grad, r.grad) < tol, f"input {i}: {rel_err(t.grad, r.grad)}"


def close(actual, expected):
    """Two ssmjit calls that run the same arithmetic (another form of one call)."""
    torch.testing.assert_close(actual, expected, rtol=1e-6, atol=1e-6)


def has(module):
    return importlib.util.find_spec(module) is not None


# ---- causal_conv1d ---------------------------------------------------------------------------

@pytest.mark.parametrize("channel_last", [False, True])
@pytest.mark.parametrize("silu", [False, True])
def test_conv_forward(channel_last, silu):
    torch.manual_seed(0)
    B, D, L, W = 2, 64, 37, 4
    x = randn(B, L, D).transpose(1, 2) if channel_last else randn(B, D, L)
    w, b, init = randn(D, W), randn(D), randn(B, D, W - 1)
    out, final = st.causal_conv1d_fn(x, w, b, initial_states=init, return_final_states=True,
                                     activation="silu" if silu else None)
    expected, expected_final = ref.conv(f64(x), f64(w), f64(b), silu, f64(init))
    assert out.stride() == x.stride()
    assert rel_err(out, expected) < 1e-5
    assert torch.equal(final.double(), expected_final)


def test_conv_backward():
    torch.manual_seed(1)
    B, D, L, W = 2, 32, 29, 4
    inputs = [randn(B, D, L, grad=True), randn(D, W, grad=True), randn(D, grad=True),
              randn(B, D, W - 1, grad=True)]
    x, w, b, init = inputs
    out, final = st.causal_conv1d_fn(x, w, b, initial_states=init, return_final_states=True,
                                     activation="silu")
    r = [f64(t) for t in inputs]
    backward_pairs((out, final), ref.conv(r[0], r[1], r[2], True, r[3]))
    assert_grads(inputs, r, 1e-4)


def test_conv_gradcheck():
    torch.manual_seed(2)
    inputs = (randn(1, 3, 7, grad=True), randn(3, 3, grad=True), randn(3, grad=True))
    assert torch.autograd.gradcheck(lambda x, w, b: st.causal_conv1d_fn(x, w, b, activation="silu"),
                                    inputs, eps=1e-3, atol=1e-2, rtol=1e-2)


def test_conv_packed_equals_each_sequence():
    torch.manual_seed(3)
    lengths, D, W = [5, 17, 1, 9], 32, 4
    x, w, b = randn(1, D, sum(lengths), grad=True), randn(D, W), randn(D)
    init = randn(len(lengths), D, W - 1, grad=True)
    cu = cu_seqlens(lengths)
    out, final = st.causal_conv1d_varlen(x, w, cu, b, init, True, activation="silu")
    refs, ref_finals, r_x, r_init = [], [], f64(x), f64(init)
    for i, (s, e) in enumerate(zip(cu[:-1].tolist(), cu[1:].tolist())):
        o, f = ref.conv(r_x[:, :, s:e], f64(w), f64(b), True, r_init[i:i + 1])
        refs.append(o)
        ref_finals.append(f)
    expected = torch.cat(refs, dim=-1)
    assert rel_err(out, expected) < 1e-5
    assert torch.equal(final.double(), torch.cat(ref_finals))
    backward_pairs((out, final), (expected, torch.cat(ref_finals)))
    assert_grads([x, init], [r_x, r_init], 1e-4)
    seq_idx = torch.repeat_interleave(torch.arange(len(lengths), device=CUDA),
                                      torch.tensor(lengths, device=CUDA)).to(I32)[None]
    by_seq_idx = st.causal_conv1d_fn(x.detach(), w, b, seq_idx=seq_idx, activation="silu")
    close(by_seq_idx, st.causal_conv1d_varlen(x.detach(), w, cu, b, activation="silu"))


@pytest.mark.parametrize("tokens", [None, 3])
def test_conv_update(tokens):
    torch.manual_seed(4)
    B, D, W, S = 3, 64, 4, 5
    x = randn(B, D) if tokens is None else randn(B, D, tokens)
    w, b, state = randn(D, W), randn(D), randn(S, D, W - 1)
    idx = torch.tensor([4, 0, 2], dtype=I32, device=CUDA)
    before = state.clone()
    out = st.causal_conv1d_update(x, state, w, b, "silu", conv_state_indices=idx)
    x3 = x[..., None] if tokens is None else x
    expected, new_state = ref.conv_update(f64(x3), f64(before[idx.long()]), f64(w), f64(b), True)
    assert out.shape == x.shape
    assert rel_err(out, expected.reshape(out.shape)) < 1e-5
    assert torch.equal(state[idx.long()].double(), new_state)
    untouched = [1, 3]
    assert torch.equal(state[untouched], before[untouched])


def test_conv_slots():
    torch.manual_seed(5)
    lengths, D, W = [6, 11], 32, 4
    x, w = randn(1, D, sum(lengths)), randn(D, W)
    states = randn(4, D, W - 1)
    before = states.clone()
    cu = cu_seqlens(lengths)
    read = torch.tensor([3, -1], dtype=I32, device=CUDA)
    write = torch.tensor([1, 2], dtype=I32, device=CUDA)
    out = st.causal_conv1d_slots(x, w, states, activation="silu", cu_seqlens=cu,
                                 initial_state_indices=read, final_state_indices=write)
    init = torch.stack([before[3], torch.zeros_like(before[3])])
    exp_out, exp_final = st.causal_conv1d_varlen(x, w, cu, initial_states=init,
                                                 return_final_states=True, activation="silu")
    close(out, exp_out)
    close(states[1:3], exp_final)
    assert torch.equal(states[[0, 3]], before[[0, 3]])


# ---- Mamba-1 selective scan --------------------------------------------------------------------

def scan_inputs(b=2, d=16, L=40, N=8, G=2, varying=True, grad=False):
    u, delta = randn(b, d, L, grad=grad), randn(b, d, L, scale=0.5, grad=grad)
    A = decay_A(d, N, grad=grad)
    B = randn(b, G, N, L, grad=grad) if varying else randn(d, N, grad=grad)
    C = randn(b, G, N, L, grad=grad) if varying else randn(d, N, grad=grad)
    D, z, bias = randn(d, grad=grad), randn(b, d, L, grad=grad), randn(d, scale=0.5, grad=grad)
    return [u, delta, A, B, C, D, z, bias]


@pytest.mark.parametrize("varying", [True, False])
def test_scan_forward_backward(varying):
    torch.manual_seed(6)
    inputs = scan_inputs(varying=varying, grad=True)
    out, last = st.selective_scan_fn(*inputs, delta_softplus=True, return_last_state=True)
    r = [f64(t) for t in inputs]
    expected, expected_last = ref.scan(*r, delta_softplus=True)
    assert rel_err(out, expected) < 1e-4
    assert rel_err(last, expected_last) < 1e-4
    backward_pairs((out, last), (expected, expected_last))
    assert_grads(inputs, r, 1e-3)


def test_scan_gradcheck():
    torch.manual_seed(7)
    inputs = tuple(scan_inputs(b=1, d=2, L=5, N=2, G=1, grad=True))
    assert torch.autograd.gradcheck(
        lambda *a: st.selective_scan_fn(*a, delta_softplus=True), inputs, eps=1e-3, atol=1e-2,
        rtol=1e-2)


def test_scan_packed_with_states():
    torch.manual_seed(8)
    lengths, d, N = [7, 30, 1, 12], 16, 8
    T = sum(lengths)
    u, delta, A, B, C, D, z, bias = scan_inputs(b=1, d=d, L=T, N=N, G=1, grad=True)
    init = randn(len(lengths), d, N, grad=True)
    cu = cu_seqlens(lengths)
    out, final = st.selective_scan_packed(u, delta, A, B, C, cu, D, z, bias, True, init, True)
    r = [f64(t) for t in (u, delta, A, B, C, D, z, bias, init)]
    outs, finals = [], []
    for i, (s, e) in enumerate(zip(cu[:-1].tolist(), cu[1:].tolist())):
        o, h = ref.scan(r[0][..., s:e], r[1][..., s:e], r[2], r[3][..., s:e], r[4][..., s:e], r[5],
                        r[6][..., s:e], r[7], True, r[8][i:i + 1])
        outs.append(o)
        finals.append(h)
    expected, expected_final = torch.cat(outs, -1), torch.cat(finals)
    assert rel_err(out, expected) < 1e-4 and rel_err(final, expected_final) < 1e-4
    backward_pairs((out, final), (expected, expected_final))
    assert_grads([u, delta, A, B, C, D, z, bias, init], r, 1e-3)


def test_scan_slots():
    torch.manual_seed(9)
    lengths, d, N = [9, 4], 16, 8
    u, delta, A, B, C, D, z, bias = scan_inputs(b=1, d=d, L=sum(lengths), N=N, G=1)
    states = randn(3, d, N)
    before = states.clone()
    cu = cu_seqlens(lengths)
    out = st.selective_scan_slots(u, delta, A, B, C, states, D, z, bias, True, cu,
                                  torch.tensor([2, -1], dtype=I32, device=CUDA),
                                  torch.tensor([2, 0], dtype=I32, device=CUDA))
    init = torch.stack([before[2], torch.zeros_like(before[2])])
    exp_out, exp_final = st.selective_scan_packed(u, delta, A, B, C, cu, D, z, bias, True, init, True)
    close(out, exp_out)
    close(states[[2, 0]], exp_final)
    assert torch.equal(states[1], before[1])


# ---- Mamba-2 SSD --------------------------------------------------------------------------------

def ssd_inputs(b=2, L=100, H=4, P=16, G=2, N=16, grad=False):
    x, dt = randn(b, L, H, P, grad=grad), randn(b, L, H, scale=0.5, grad=grad)
    A = decay_A(H, grad=grad)
    B, C = randn(b, L, G, N, grad=grad), randn(b, L, G, N, grad=grad)
    D, z, dt_bias = randn(H, grad=grad), randn(b, L, H, P, grad=grad), randn(H, scale=0.5, grad=grad)
    return [x, dt, A, B, C, D, z, dt_bias]


def test_ssd_forward_backward():
    torch.manual_seed(10)
    x, dt, A, B, C, D, z, dt_bias = inputs = ssd_inputs(grad=True)
    init = randn(2, 4, 16, 16, grad=True)
    out, final = st.mamba_chunk_scan_combined(x, dt, A, B, C, 64, D, z, dt_bias, init,
                                              dt_softplus=True, return_final_states=True)
    r = [f64(t) for t in inputs + [init]]
    expected, expected_final = ref.ssd(*r[:8], dt_softplus=True, initial_states=r[8])
    assert rel_err(out, expected) < 1e-4 and rel_err(final, expected_final) < 1e-4
    backward_pairs((out, final), (expected, expected_final))
    assert_grads(inputs + [init], r, 1e-3)


def test_ssd_dt_limit_and_headdim_D():
    torch.manual_seed(11)
    x, dt, A, B, C, _, _, dt_bias = ssd_inputs(b=1, L=70)
    D = randn(4, 16)
    out = st.mamba_chunk_scan_combined(x, dt, A, B, C, 64, D, None, dt_bias, dt_softplus=True,
                                       dt_limit=(0.2, 0.9))
    expected, _ = ref.ssd(f64(x), f64(dt), f64(A), f64(B), f64(C), f64(D), None, f64(dt_bias), True,
                          (0.2, 0.9))
    assert rel_err(out, expected) < 1e-4


def test_ssd_gradcheck():
    torch.manual_seed(12)
    inputs = tuple(ssd_inputs(b=1, L=6, H=2, P=4, G=1, N=4, grad=True))
    assert torch.autograd.gradcheck(
        lambda *a: st.mamba_chunk_scan_combined(*a[:5], 64, *a[5:], dt_softplus=True), inputs,
        eps=1e-3, atol=1e-2, rtol=1e-2)


def test_ssd_packed_varlen_states():
    torch.manual_seed(13)
    lengths = [70, 3, 130]
    x, dt, A, B, C, D, z, dt_bias = inputs = ssd_inputs(b=1, L=sum(lengths), grad=True)
    cu = cu_seqlens(lengths)
    seq_idx = torch.repeat_interleave(torch.arange(3, device=CUDA),
                                      torch.tensor(lengths, device=CUDA)).to(I32)[None]
    out, varlen = st.mamba_chunk_scan_combined(x, dt, A, B, C, 64, D, z, dt_bias, seq_idx=seq_idx,
                                               cu_seqlens=cu, dt_softplus=True,
                                               return_varlen_states=True)
    r = [f64(t) for t in inputs]
    outs, finals = [], []
    for s, e in zip(cu[:-1].tolist(), cu[1:].tolist()):
        o, h = ref.ssd(r[0][:, s:e], r[1][:, s:e], r[2], r[3][:, s:e], r[4][:, s:e], r[5],
                       r[6][:, s:e], r[7], True)
        outs.append(o)
        finals.append(h)
    expected, expected_final = torch.cat(outs, 1), torch.cat(finals)
    assert rel_err(out, expected) < 1e-4 and rel_err(varlen, expected_final) < 1e-4
    init = randn(3, 4, 16, 16, grad=True)
    out2, final2 = st.ssd_packed(x, dt, A, B, C, cu, 64, D, z, dt_bias, True, initial_states=init,
                                 return_final_states=True)
    r_init = f64(init)
    outs, finals = [], []
    for i, (s, e) in enumerate(zip(cu[:-1].tolist(), cu[1:].tolist())):
        o, h = ref.ssd(r[0][:, s:e], r[1][:, s:e], r[2], r[3][:, s:e], r[4][:, s:e], r[5],
                       r[6][:, s:e], r[7], True, initial_states=r_init[i:i + 1])
        outs.append(o)
        finals.append(h)
    expected, expected_final = torch.cat(outs, 1), torch.cat(finals)
    assert rel_err(out2, expected) < 1e-4 and rel_err(final2, expected_final) < 1e-4
    backward_pairs((out2, final2), (expected, expected_final))
    assert_grads(inputs + [init], r + [r_init], 1e-3)


def test_ssd_slots():
    torch.manual_seed(14)
    lengths = [65, 20]
    x, dt, A, B, C, D, z, dt_bias = ssd_inputs(b=1, L=sum(lengths))
    states = randn(3, 4, 16, 16)
    before = states.clone()
    cu = cu_seqlens(lengths)
    out = st.ssd_slots(x, dt, A, B, C, states, 64, D, z, dt_bias, True, cu_seqlens=cu,
                       initial_state_indices=torch.tensor([1, -1], dtype=I32, device=CUDA),
                       final_state_indices=torch.tensor([1, 0], dtype=I32, device=CUDA))
    init = torch.stack([before[1], torch.zeros_like(before[1])])
    exp_out, exp_final = st.ssd_packed(x, dt, A, B, C, cu, 64, D, z, dt_bias, True,
                                       initial_states=init, return_final_states=True)
    close(out, exp_out)
    close(states[[1, 0]], exp_final)
    assert torch.equal(states[2], before[2])


# ---- decode -----------------------------------------------------------------------------------

def test_state_update_mamba2_broadcast_and_slots():
    torch.manual_seed(15)
    b, H, P, N, G, S = 3, 4, 16, 32, 2, 6
    state = randn(S, H, P, N)
    before = state.clone()
    x, z = randn(b, H, P), randn(b, H, P)
    dt_h, A_h, D_h, bias_h = randn(b, H, scale=0.5), decay_A(H), randn(H), randn(H, scale=0.5)
    B, C = randn(b, G, N), randn(b, G, N)
    idx = torch.tensor([5, 1, 3], dtype=I32, device=CUDA)
    out = st.selective_state_update(
        state, x, dt_h[..., None].expand(b, H, P), A_h[:, None, None].expand(H, P, N), B, C,
        D_h[:, None].expand(H, P), z, bias_h[:, None].expand(H, P), True, idx)
    expected, new_state = ref.state_update(f64(before[idx.long()]), f64(x), f64(dt_h), f64(A_h),
                                           f64(B), f64(C), f64(D_h), f64(z), f64(bias_h), True)
    assert rel_err(out, expected) < 1e-5
    assert rel_err(state[idx.long()], new_state) < 1e-5
    assert torch.equal(state[[0, 2, 4]], before[[0, 2, 4]])


def test_state_update_mamba1():
    torch.manual_seed(16)
    b, d, N = 3, 32, 16
    state, x, dt, z = randn(b, d, N), randn(b, d), randn(b, d, scale=0.5), randn(b, d)
    A, B, C, D, bias = decay_A(d, N), randn(b, N), randn(b, N), randn(d), randn(d, scale=0.5)
    before = state.clone()
    out = st.selective_state_update(state, x, dt, A, B, C, D, z, bias, True)
    expected, h = ref.scan(f64(x)[..., None], f64(dt)[..., None], f64(A), f64(B)[:, None, :, None],
                           f64(C)[:, None, :, None], f64(D), f64(z)[..., None], f64(bias), True,
                           f64(before))
    assert rel_err(out, expected[..., 0]) < 1e-5 and rel_err(state, h) < 1e-5


@pytest.mark.parametrize("state_write", ["final", "none"])
def test_state_update_tokens(state_write):
    torch.manual_seed(17)
    b, L, H, P, N, G = 2, 3, 4, 16, 32, 1
    state = randn(b, H, P, N)
    before = state.clone()
    x, dt, B, C = randn(b, L, H, P), randn(b, L, H, scale=0.5), randn(b, L, G, N), randn(b, L, G, N)
    A, D, bias = decay_A(H), randn(H), randn(H, scale=0.5)
    out = st.selective_state_update_tokens(state, x, dt, A, B, C, D, None, bias, True,
                                           state_write=state_write)
    s, ys = f64(before), []
    for t in range(L):
        y, s = ref.state_update(s, f64(x[:, t]), f64(dt[:, t]), f64(A), f64(B[:, t]), f64(C[:, t]),
                                f64(D), None, f64(bias), True)
        ys.append(y)
    assert rel_err(out, torch.stack(ys, 1)) < 1e-5
    if state_write == "final":
        assert rel_err(state, s) < 1e-5
    else:
        assert torch.equal(state, before)


def _decode_reference(conv_state, ssm_state, xbc, dt, w, cb, A, D, dt_bias, H, P, G, N):
    """One row's tokens through the conv and the SSM, float64: (y (L, H, P), conv state, ssm)."""
    post, conv_state = ref.conv_update(xbc.T[None], conv_state[None], w, cb, True)
    post, conv_state = post[0].T, conv_state[0]
    s, ys = ssm_state[None], []
    for t in range(xbc.shape[0]):
        xh = post[t, :H * P].reshape(1, H, P)
        Bt = post[t, H * P:H * P + G * N].reshape(1, G, N)
        Ct = post[t, H * P + G * N:].reshape(1, G, N)
        y, s = ref.state_update(s, xh, dt[t][None], A, Bt, Ct, D, None, dt_bias, True)
        ys.append(y[0])
    return torch.stack(ys), conv_state, s[0]


def test_mamba2_decode_step():
    torch.manual_seed(18)
    S, H, P, N, G, W, L, b = 3, 2, 8, 16, 1, 4, 2, 2
    Dc = H * P + 2 * G * N
    conv_state, ssm_state = randn(S, Dc, W - 1), randn(S, H, P, N)
    xbc_cache, dt_cache = torch.zeros(S, L, Dc, device=CUDA), torch.zeros(S, L, H, device=CUDA)
    cached, arrivals = torch.zeros(S, dtype=I32, device=CUDA), torch.zeros(S, dtype=I32, device=CUDA)
    w, cb, A, D, dt_bias = randn(Dc, W), randn(Dc), decay_A(H), randn(H), randn(H, scale=0.5)
    slots = torch.tensor([2, 0], dtype=I32, device=CUDA)
    conv0, ssm0 = conv_state.clone(), ssm_state.clone()
    args = dict(conv_bias=cb, D=D, dt_bias=dt_bias, state_indices=slots)
    xbc1, dt1 = randn(b, L, Dc), randn(b, L, H, scale=0.5)
    y1 = st.mamba2_decode_step(conv_state, ssm_state, xbc_cache, dt_cache, cached, arrivals, w, A,
                               xBC=xbc1, dt=dt1, parts="verify", **args)
    assert torch.equal(conv_state, conv0) and torch.equal(ssm_state, ssm0)
    accepted = torch.tensor([1, 2], dtype=I32, device=CUDA)
    xbc2, dt2 = randn(b, L, Dc), randn(b, L, H, scale=0.5)
    y2 = st.mamba2_decode_step(conv_state, ssm_state, xbc_cache, dt_cache, cached, arrivals, w, A,
                               xBC=xbc2, dt=dt2, num_accepted=accepted, **args)
    for row, slot in enumerate(slots.tolist()):
        params = (f64(w), f64(cb), f64(A), f64(D), f64(dt_bias), H, P, G, N)
        y, _, _ = _decode_reference(f64(conv0[slot]), f64(ssm0[slot]), f64(xbc1[row]),
                                    f64(dt1[row]), *params)
        assert rel_err(y1[row], y) < 1e-4
        c = accepted[row].item()
        _, conv_c, ssm_c = _decode_reference(f64(conv0[slot]), f64(ssm0[slot]), f64(xbc1[row, :c]),
                                             f64(dt1[row, :c]), *params)
        assert rel_err(conv_state[slot], conv_c) < 1e-6 and rel_err(ssm_state[slot], ssm_c) < 1e-4
        y, _, _ = _decode_reference(conv_c, ssm_c, f64(xbc2[row]), f64(dt2[row]), *params)
        assert rel_err(y2[row], y) < 1e-4
    assert torch.equal(conv_state[1], conv0[1]) and torch.equal(ssm_state[1], ssm0[1])
    st.check_device_errors()


def test_device_error_reported():
    torch.manual_seed(19)
    B, D, W = 2, 16, 4
    state = randn(2, D, W - 1)
    st.causal_conv1d_update(randn(B, D), state, randn(D, W), conv_state_indices=torch.tensor(
        [0, 7], dtype=I32, device=CUDA))
    with pytest.raises(ssmjit.Error):
        st.check_device_errors()


# ---- torch.library.opcheck, torch.compile, CUDA graphs -----------------------------------------

def test_opcheck():
    torch.manual_seed(20)
    ops = torch.ops.ssmjit
    cu = cu_seqlens([5, 11])
    x, w, b = randn(1, 16, 16, grad=True), randn(16, 4, grad=True), randn(16, grad=True)
    torch.library.opcheck(ops.causal_conv1d_fwd, (x, w, b, True, cu, None, None, True))
    u, delta, A, B, C, D, z, bias = scan_inputs(b=1, L=16, G=1, grad=True)
    torch.library.opcheck(ops.selective_scan_fwd,
                          (u, delta, A, B, C, D, z, bias, True, cu, 0, None, True, 0))
    x, dt, A, B, C, D, z, dt_bias = ssd_inputs(b=1, L=16, grad=True)
    for keep_y in (False, True):
        torch.library.opcheck(ops.ssd_fwd, (x, dt, A, B, C, 64, D, z, dt_bias, True, 0.0, 0.0, cu,
                                            None, True, keep_y))
    torch.library.opcheck(ops.causal_conv1d_update,
                          (randn(2, 1, 16), randn(2, 16, 3), randn(16, 4), None, True, None, True))
    torch.library.opcheck(ops.selective_state_update,
                          (randn(2, 4, 8, 16), randn(2, 4, 8), randn(2, 4), decay_A(4),
                           randn(2, 1, 16), randn(2, 1, 16), None, None, None, True, None, None,
                           0.0, 0.0, 0, False))


@pytest.mark.parametrize("block", [Mamba1Block, Mamba2Block])
def test_compile_fullgraph(block):
    torch.manual_seed(21)
    model = block().to(CUDA)
    h = randn(2, 48, 32)
    eager = model(h)
    eager.sum().backward()
    eager_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    compiled = torch.compile(model, fullgraph=True)
    out = compiled(h)
    out.sum().backward()
    assert rel_err(out, eager) < 1e-4
    for p, g in zip(model.parameters(), eager_grads):
        assert rel_err(p.grad, g) < 1e-3


def test_compile_decode_fullgraph():
    """A Mamba-2 decode step (the conv update, then the state update, both states in place, slots
    picked per row) compiled with fullgraph: the in-place updates survive functionalization."""
    torch.manual_seed(27)
    b, H, P, N, G, W = 3, 4, 16, 32, 1, 4
    Dc = H * P + 2 * G * N
    conv_w, A, D, dt_bias = randn(Dc, W), decay_A(H), randn(H), randn(H, scale=0.5)

    def step(xBC, dt, conv_state, ssm_state, slots):
        xBC = st.causal_conv1d_update(xBC, conv_state, conv_w, None, "silu",
                                      conv_state_indices=slots)
        x, B, C = xBC.split([H * P, G * N, G * N], dim=-1)
        return st.selective_state_update(ssm_state, x.reshape(b, H, P), dt, A,
                                         B.reshape(b, G, N), C.reshape(b, G, N), D, None, dt_bias,
                                         True, slots)
    conv_state, ssm_state = randn(5, Dc, W - 1), randn(5, H, P, N)
    slots = torch.tensor([4, 0, 2], dtype=I32, device=CUDA)
    xBC, dt = randn(b, Dc), randn(b, H, scale=0.5)
    eager_conv, eager_ssm = conv_state.clone(), ssm_state.clone()
    eager = step(xBC, dt, eager_conv, eager_ssm, slots)
    out = torch.compile(step, fullgraph=True)(xBC, dt, conv_state, ssm_state, slots)
    close(out, eager)
    close(conv_state, eager_conv)
    close(ssm_state, eager_ssm)


def test_cuda_graph_replay():
    torch.manual_seed(22)
    b, H, P, N = 2, 4, 16, 32
    state, x, dt = randn(b, H, P, N), randn(b, H, P), randn(b, H, scale=0.5)
    A, B, C = decay_A(H), randn(b, 1, N), randn(b, 1, N)
    start = state.clone()
    st.selective_state_update(state, x, dt, A, B, C, dt_softplus=True)  # compiles the kernel
    state.copy_(start)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = st.selective_state_update(state, x, dt, A, B, C, dt_softplus=True)
    state.copy_(start)
    graph.replay()
    expected, new_state = ref.state_update(f64(start), f64(x), f64(dt), f64(A), f64(B), f64(C),
                                           dt_softplus=True)
    torch.cuda.synchronize()
    assert rel_err(out, expected) < 1e-5 and rel_err(state, new_state) < 1e-5


# ---- the peers, on the same inputs (bf16 activations, as they run in models) -------------------

def peer_leaves(inputs):
    """Two independent copies of a scan's inputs as leaves that need a gradient, the activations
    (u/x, delta/dt, B, C, z) in bf16: ours and the peer's."""
    inputs = [t.to(torch.bfloat16) if i in (0, 1, 3, 4, 6) else t for i, t in enumerate(inputs)]
    return ([t.detach().clone().requires_grad_() for t in inputs],
            [t.detach().clone().requires_grad_() for t in inputs])


def assert_peer_grads(out, pout, ours, theirs):
    """One random gradient through both outputs: every input's gradient agrees with the peer's."""
    g = torch.randn_like(out)
    out.backward(g)
    pout.backward(g)
    for a, p in zip(ours, theirs):
        assert rel_err(a.grad, p.grad) < 3e-2


@pytest.mark.skipif(not has("mamba_ssm"), reason="mamba_ssm is not installed")
def test_peer_selective_scan_fn():
    from mamba_ssm.ops.selective_scan_interface import selective_scan_fn as peer
    torch.manual_seed(23)
    ours, theirs = peer_leaves(scan_inputs(b=2, d=64, L=256, N=16, G=1))
    out, last = st.selective_scan_fn(*ours, delta_softplus=True, return_last_state=True)
    pout, plast = peer(*theirs, delta_softplus=True, return_last_state=True)
    assert rel_err(out, pout) < 2e-2 and rel_err(last, plast) < 1e-2
    assert_peer_grads(out, pout, ours, theirs)


@pytest.mark.skipif(not has("mamba_ssm"), reason="mamba_ssm is not installed")
def test_peer_mamba_chunk_scan_combined():
    from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined as peer
    torch.manual_seed(24)
    ours, theirs = peer_leaves(ssd_inputs(b=2, L=256, H=8, P=64, G=1, N=64))
    out, final = st.mamba_chunk_scan_combined(*ours[:5], 64, *ours[5:], dt_softplus=True,
                                              return_final_states=True)
    pout, pfinal = peer(*theirs[:5], 64, *theirs[5:], dt_softplus=True, return_final_states=True)
    assert rel_err(out, pout) < 2e-2 and rel_err(final, pfinal) < 2e-2
    assert_peer_grads(out, pout, ours, theirs)


@pytest.mark.skipif(not has("mamba_ssm"), reason="mamba_ssm is not installed")
def test_peer_selective_state_update():
    from mamba_ssm.ops.triton.selective_state_update import selective_state_update as peer
    torch.manual_seed(25)
    b, H, P, N = 4, 8, 64, 64
    state = randn(b, H, P, N)
    x, z = randn(b, H, P, dtype=torch.bfloat16), randn(b, H, P, dtype=torch.bfloat16)
    dt = randn(b, H, dtype=torch.bfloat16)[..., None].expand(b, H, P)
    A = decay_A(H)[:, None, None].expand(H, P, N)
    D, bias = randn(H)[:, None].expand(H, P), randn(H)[:, None].expand(H, P)
    B, C = randn(b, 1, N, dtype=torch.bfloat16), randn(b, 1, N, dtype=torch.bfloat16)
    peer_state = state.clone()
    out = st.selective_state_update(state, x, dt, A, B, C, D, z, bias, True)
    pout = peer(peer_state, x, dt, A, B, C, D, z, bias, True)
    assert rel_err(out, pout) < 1e-2 and rel_err(state, peer_state) < 1e-4


@pytest.mark.skipif(not has("causal_conv1d"), reason="causal_conv1d is not installed")
def test_peer_causal_conv1d():
    from causal_conv1d import causal_conv1d_fn as peer_fn, causal_conv1d_update as peer_update
    torch.manual_seed(26)
    B, D, L, W = 2, 128, 200, 4
    x = randn(B, L, D, dtype=torch.bfloat16).transpose(1, 2)
    w, b = randn(D, W), randn(D)
    init = randn(B, W - 1, D, dtype=torch.bfloat16).transpose(1, 2)  # channel-last, as the peer wants
    ours = [t.detach().clone().requires_grad_() for t in (x, w, b, init)]
    theirs = [t.detach().clone().requires_grad_() for t in (x, w, b, init)]
    out, final = st.causal_conv1d_fn(*ours[:3], initial_states=ours[3], return_final_states=True,
                                     activation="silu")
    pout, pfinal = peer_fn(*theirs[:3], initial_states=theirs[3], return_final_states=True,
                           activation="silu")
    assert rel_err(out, pout) < 1e-2 and torch.equal(final, pfinal)
    g = torch.randn_like(out)
    out.backward(g)
    pout.backward(g)
    for a, p in zip(ours, theirs):
        assert rel_err(a.grad, p.grad) < 2e-2
    state = randn(B, D, W - 1, dtype=torch.bfloat16)
    peer_state = state.clone()
    xt = randn(B, D, dtype=torch.bfloat16)
    out = st.causal_conv1d_update(xt, state, w, b, "silu")
    pout = peer_update(xt, peer_state, w, b, "silu")
    assert rel_err(out, pout) < 1e-2 and torch.equal(state, peer_state)
