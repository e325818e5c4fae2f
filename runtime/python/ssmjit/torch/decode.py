"""The decode ops: the selective state update (mamba_ssm's drop-in, and ssmjit's L-token form)
and the fused speculative decode step of a Mamba-2 layer. They update their states in place and
have no backward."""
from typing import Optional

import torch
from torch import Tensor

from ._call import call, dt_clamp, empty, fail

_STATE_WRITES = {"final": 0, "none": 1, "per_token": 2}
_PARTS = {"replay_and_verify": 0, "replay": 1, "verify": 2}


@torch.library.custom_op("ssmjit::selective_state_update", mutates_args=("state",))
def selective_state_update_op(state: Tensor, x: Tensor, dt: Tensor, A: Tensor, B: Tensor,
                              C: Tensor, D: Optional[Tensor], z: Optional[Tensor],
                              dt_bias: Optional[Tensor], dt_softplus: bool,
                              state_batch_indices: Optional[Tensor],
                              dst_state_indices: Optional[Tensor], dt_min: float, dt_max: float,
                              state_write: int, tokens: bool) -> Tensor:
    out = torch.empty_like(x)
    call("selective_state_update_tokens" if tokens else "selective_state_update", x.device,
         state=state, x=x, dt=dt, A=A, B=B, C=C, D=D, z=z, dt_bias=dt_bias,
         state_batch_indices=state_batch_indices, dst_state_indices=dst_state_indices, out=out,
         dt_softplus=dt_softplus, dt_min=dt_min, dt_max=dt_max, state_write=state_write)
    return out


@selective_state_update_op.register_fake
def _(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, state_batch_indices, dst_state_indices,
      dt_min, dt_max, state_write, tokens):
    return torch.empty_like(x)


def _per_head(t, name, axes, function):
    """mamba_ssm passes Mamba-2's per-head dt, A, D and dt_bias broadcast over the head dim (and
    A over dstate) with stride 0; ssmjit takes one value per head. The trailing `axes` axes must
    be broadcast (or of size 1): anything else would differ, so it is refused."""
    if t is None:
        return None
    for a in range(t.dim() - axes, t.dim()):
        if t.shape[a] != 1 and t.stride(a) != 0:
            fail(f"{function}: {name} of shape {tuple(t.shape)} varies along dim {a} (stride "
                 f"{t.stride(a)}): ssmjit's Mamba-2 form takes one {name} per head; pass it "
                 f"broadcast there (stride 0, as Mamba2 does with repeat) or per head")
    return t[(Ellipsis,) + (0,) * axes]


def _mamba2_per_head(state, x, dt, A, D, dt_bias, function):
    if state.dim() != 4:
        return dt, A, D, dt_bias
    return (_per_head(dt, "dt", dt.dim() - x.dim() + 1, function),
            _per_head(A, "A", A.dim() - 1, function),
            _per_head(D, "D", D.dim() - 1, function) if D is not None else None,
            _per_head(dt_bias, "dt_bias", dt_bias.dim() - 1, function) if dt_bias is not None
            else None)


def selective_state_update(state, x, dt, A, B, C, D=None, z=None, dt_bias=None,
                           dt_softplus=False, state_batch_indices=None):
    """mamba_ssm's selective_state_update (one token). Mamba-1: state (batch or slots, dim, N),
    x, dt, z (batch, dim), A (dim, N), B, C (batch, N), D, dt_bias (dim,). Mamba-2: state (slots,
    H, P, N), x, z (batch, H, P), B, C (batch, G, N), and dt (batch, H, P), A (H, P, N), D,
    dt_bias (H, P) broadcast over P (and N), or per head: dt (batch, H), A, D, dt_bias (H,).
    state is updated in place; state_batch_indices (batch,) picks slots (-1: a pad row)."""
    dt, A, D, dt_bias = _mamba2_per_head(state, x, dt, A, D, dt_bias, "selective_state_update")
    return selective_state_update_op(state, x, dt, A, B, C, D, z, dt_bias, bool(dt_softplus),
                                     state_batch_indices, None, 0.0, 0.0, 0, False)


def selective_state_update_tokens(state, x, dt, A, B, C, D=None, z=None, dt_bias=None,
                                  dt_softplus=False, state_batch_indices=None,
                                  dst_state_indices=None, state_write="final",
                                  dt_limit=(0.0, float("inf"))):
    """ssmjit's L-token update (speculative decoding's verify): x, dt, B, C, z with a token axis
    after the batch axis (L <= 32). state_write: "final" (the state after the last token, in
    place), "none" (verify only) or "per_token" (the state after token t into slot
    dst_state_indices[b, t]). Per-head arguments as selective_state_update's."""
    if state_write not in _STATE_WRITES:
        fail(f"selective_state_update_tokens: state_write is {state_write!r}, expected one of "
             f"{', '.join(_STATE_WRITES)}")
    dt, A, D, dt_bias = _mamba2_per_head(state, x, dt, A, D, dt_bias,
                                         "selective_state_update_tokens")
    dt_min, dt_max = dt_clamp(dt_limit)
    return selective_state_update_op(state, x, dt, A, B, C, D, z, dt_bias, bool(dt_softplus),
                                     state_batch_indices, dst_state_indices, dt_min, dt_max,
                                     _STATE_WRITES[state_write], True)


@torch.library.custom_op("ssmjit::mamba2_decode_step",
                         mutates_args=("conv_state", "ssm_state", "xbc_cache", "dt_cache",
                                       "cached_tokens", "arrivals"))
def mamba2_decode_step_op(conv_state: Tensor, ssm_state: Tensor, xbc_cache: Tensor,
                          dt_cache: Tensor, cached_tokens: Tensor, arrivals: Tensor,
                          conv_weight: Tensor, conv_bias: Optional[Tensor], A: Tensor,
                          D: Optional[Tensor], dt_bias: Optional[Tensor], dt_softplus: bool,
                          dt_min: float, dt_max: float, state_indices: Optional[Tensor],
                          num_accepted: Optional[Tensor], xBC: Optional[Tensor],
                          dt: Optional[Tensor], z: Optional[Tensor], parts: int) -> Tensor:
    y = _step_output(ssm_state, xBC)
    call("mamba2_decode_step", ssm_state.device, conv_state=conv_state, ssm_state=ssm_state,
         xbc_cache=xbc_cache, dt_cache=dt_cache, cached_tokens=cached_tokens, arrivals=arrivals,
         conv_weight=conv_weight, conv_bias=conv_bias, A=A, D=D, dt_bias=dt_bias,
         dt_softplus=dt_softplus, dt_min=dt_min, dt_max=dt_max, state_indices=state_indices,
         num_accepted=num_accepted, xBC=xBC, dt=dt, z=z, y=y if xBC is not None else None,
         parts=parts)
    return y


def _step_output(ssm_state, xBC):
    if xBC is None:
        return empty(ssm_state)
    _, H, P, _ = ssm_state.shape
    return torch.empty((xBC.shape[0], xBC.shape[1], H, P), dtype=xBC.dtype, device=xBC.device)


@mamba2_decode_step_op.register_fake
def _(conv_state, ssm_state, xbc_cache, dt_cache, cached_tokens, arrivals, conv_weight, conv_bias,
      A, D, dt_bias, dt_softplus, dt_min, dt_max, state_indices, num_accepted, xBC, dt, z, parts):
    return _step_output(ssm_state, xBC)


def mamba2_decode_step(conv_state, ssm_state, xbc_cache, dt_cache, cached_tokens, arrivals,
                       conv_weight, A, xBC=None, dt=None, num_accepted=None, conv_bias=None,
                       D=None, dt_bias=None, z=None, state_indices=None, dt_softplus=True,
                       dt_limit=(0.0, float("inf")), parts="replay_and_verify"):
    """ssmjit's speculative decode step of one Mamba-2 mixer layer (ssmjit/ops.h,
    mamba2_decode_step): replay the num_accepted[b] cached drafts of the last verify into the conv
    and SSM states and commit them, then verify the new drafts xBC (batch, L, Dc) pre-conv and dt
    (batch, L, H) raw from the corrected state. Returns y (batch, L, H, P) (an empty tensor for
    parts="replay"). The six state tensors are updated in place; parts: "replay_and_verify",
    "replay" or "verify"."""
    if parts not in _PARTS:
        fail(f"mamba2_decode_step: parts is {parts!r}, expected one of {', '.join(_PARTS)}")
    dt_min, dt_max = dt_clamp(dt_limit)
    return mamba2_decode_step_op(conv_state, ssm_state, xbc_cache, dt_cache, cached_tokens,
                                 arrivals, conv_weight, conv_bias, A, D, dt_bias,
                                 bool(dt_softplus), dt_min, dt_max, state_indices, num_accepted,
                                 xBC, dt, z, _PARTS[parts])
