"""The Mamba-2 SSD chunked scan: forward and backward (autograd), dense, packed (cu_seqlens) and
slot forms, with mamba_ssm's drop-in mamba_chunk_scan_combined."""
from typing import Optional, Tuple

import torch
from torch import Tensor

from ._call import (call, dt_clamp, empty, fail, given_contiguous, like, unit_last_stride,
                    unsupported)
from ._scan_gradients import given_gradients, gradient_outputs


def _forward_outputs(x, B, cu_seqlens, return_final_states, keep_y):
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    nseq = x.shape[0] if cu_seqlens is None else cu_seqlens.shape[0] - 1
    final = (torch.empty((nseq, x.shape[2], x.shape[3], B.shape[3]), dtype=torch.float32,
                         device=x.device) if return_final_states else empty(x))
    # y before the gate (fp32), kept for the backward, which then does not recompute it.
    y = (torch.empty(x.shape, dtype=torch.float32, device=x.device) if keep_y
         else empty(x).float())
    return out, final, y


@torch.library.custom_op("ssmjit::ssd_fwd", mutates_args=())
def ssd_fwd(x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor, chunk_size: int,
            D: Optional[Tensor], z: Optional[Tensor], dt_bias: Optional[Tensor], dt_softplus: bool,
            dt_min: float, dt_max: float, cu_seqlens: Optional[Tensor],
            initial_states: Optional[Tensor], return_final_states: bool,
            keep_y: bool) -> Tuple[Tensor, Tensor, Tensor]:
    out, final, y = _forward_outputs(x, B, cu_seqlens, return_final_states, keep_y)
    fields = dict(x=x, dt=dt, A=A, B=B, C=C, chunk_size=chunk_size, D=D, z=z, dt_bias=dt_bias,
                  dt_softplus=dt_softplus, dt_min=dt_min, dt_max=dt_max, cu_seqlens=cu_seqlens,
                  initial_states=initial_states, out=out, y=y if keep_y else None,
                  final_states=final if return_final_states else None)
    call("ssd", x.device, **fields)
    return out, final, y


@ssd_fwd.register_fake
def _(x, dt, A, B, C, chunk_size, D, z, dt_bias, dt_softplus, dt_min, dt_max, cu_seqlens,
      initial_states, return_final_states, keep_y):
    return _forward_outputs(x, B, cu_seqlens, return_final_states, keep_y)


@torch.library.custom_op("ssmjit::ssd_bwd", mutates_args=())
def ssd_bwd(x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor, chunk_size: int,
            D: Optional[Tensor], z: Optional[Tensor], dt_bias: Optional[Tensor], dt_softplus: bool,
            dt_min: float, dt_max: float, cu_seqlens: Optional[Tensor],
            initial_states: Optional[Tensor], dout: Tensor, dfinal_states: Optional[Tensor],
            need_dinitial: bool, y: Optional[Tensor]
            ) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    grads = gradient_outputs(x, dt, A, B, C, D, z, dt_bias, initial_states, need_dinitial)
    dx, ddt, dA, dB, dC, dD, dz, ddt_bias, dinitial = given_gradients(
        grads, D, z, dt_bias, need_dinitial)
    fields = dict(x=x, dt=dt, A=A, B=B, C=C, chunk_size=chunk_size, D=D, z=z, dt_bias=dt_bias,
                  dt_softplus=dt_softplus, dt_min=dt_min, dt_max=dt_max, cu_seqlens=cu_seqlens,
                  initial_states=initial_states, y=y, dout=dout, dfinal_states=dfinal_states,
                  dx=dx, ddt=ddt, dA=dA, dB=dB, dC=dC, dD=dD, dz=dz, ddt_bias=ddt_bias,
                  dinitial_states=dinitial)
    call("ssd_backward", x.device, **fields)
    return grads


@ssd_bwd.register_fake
def _(x, dt, A, B, C, chunk_size, D, z, dt_bias, dt_softplus, dt_min, dt_max, cu_seqlens,
      initial_states, dout, dfinal_states, need_dinitial, y):
    return gradient_outputs(x, dt, A, B, C, D, z, dt_bias, initial_states, need_dinitial)


def _setup_context(ctx, inputs, output):
    (x, dt, A, B, C, chunk_size, D, z, dt_bias, dt_softplus, dt_min, dt_max, cu_seqlens,
     initial_states, _, keep_y) = inputs
    y = output[2] if keep_y else None
    ctx.save_for_backward(x, dt, A, B, C, D, z, dt_bias, cu_seqlens, initial_states, y)
    ctx.scalars = (chunk_size, dt_softplus, dt_min, dt_max)


def _backward(ctx, dout, dfinal, _dy):
    x, dt, A, B, C, D, z, dt_bias, cu_seqlens, initial_states, y = ctx.saved_tensors
    chunk_size, dt_softplus, dt_min, dt_max = ctx.scalars
    need_dinitial = initial_states is not None and ctx.needs_input_grad[13]
    grads = ssd_bwd(
        x, dt, A, B, C, chunk_size, D, z, dt_bias, dt_softplus, dt_min, dt_max, cu_seqlens,
        initial_states, like(dout, x), given_contiguous(dfinal), need_dinitial, y)
    dx, ddt, dA, dB, dC, dD, dz, ddt_bias, dinitial = given_gradients(
        grads, D, z, dt_bias, need_dinitial)
    return (dx, ddt, dA, dB, dC, None, dD, dz, ddt_bias, None, None, None, None, dinitial, None,
            None)


ssd_fwd.register_autograd(_backward, setup_context=_setup_context)


def _inputs(x, B, C, z):
    return unit_last_stride(x), unit_last_stride(B), unit_last_stride(C), unit_last_stride(z)


def _training(*tensors):
    """Whether autograd will run the backward: then the forward keeps y for it."""
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def mamba_chunk_scan_combined(x, dt, A, B, C, chunk_size, D=None, z=None, dt_bias=None,
                              initial_states=None, seq_idx=None, cu_seqlens=None,
                              dt_softplus=False, dt_limit=(0.0, float("inf")),
                              return_final_states=False, return_varlen_states=False,
                              state_dtype=None):
    """mamba_ssm.ops.triton.ssd_combined.mamba_chunk_scan_combined: x, z (batch, L, H, P); dt
    (batch, L, H); A (H,); B, C (batch, L, G, N); D (H,) or (H, P); dt_bias (H,); initial_states
    (batch, H, P, N). A packed row (batch 1) passes seq_idx and cu_seqlens together (the same
    boundaries: ssmjit restarts the state at each cu_seqlens start, and its chunks start there).
    Returns out, (out, final_states), (out, varlen_states) or (out, final_states, varlen_states)."""
    unsupported("mamba_chunk_scan_combined", state_dtype=state_dtype is not None)
    if chunk_size not in (64, 128, 256):
        fail(f"mamba_chunk_scan_combined: chunk_size is {chunk_size}, ssmjit takes 64, 128 or 256")
    packed = cu_seqlens is not None
    if packed != (seq_idx is not None):
        fail("mamba_chunk_scan_combined: ssmjit needs seq_idx and cu_seqlens together (a packed "
             f"row, the state restarting at each sequence); got only "
             f"{'cu_seqlens' if packed else 'seq_idx'}")
    if return_varlen_states and not packed:
        fail("mamba_chunk_scan_combined: return_varlen_states needs cu_seqlens")
    if packed and initial_states is not None:
        fail("mamba_chunk_scan_combined: initial_states with seq_idx / cu_seqlens is not supported "
             "by ssmjit: use ssd_packed (one initial state per sequence)")
    dt_min, dt_max = dt_clamp(dt_limit)
    x, B, C, z = _inputs(x, B, C, z)
    out, final, _ = ssd_fwd(x, dt, A, B, C, int(chunk_size), D, z, dt_bias, bool(dt_softplus),
                            dt_min, dt_max, cu_seqlens, initial_states,
                            bool(return_final_states or return_varlen_states),
                            _training(x, dt, A, B, C, D, z, dt_bias, initial_states))
    if not (return_final_states or return_varlen_states):
        return out
    result = (out,)
    if return_final_states:
        result += (final[-1:] if packed else final,)  # a packed row's state: its last sequence's
    if return_varlen_states:
        result += (final,)
    return result


def ssd_packed(x, dt, A, B, C, cu_seqlens, chunk_size=256, D=None, z=None, dt_bias=None,
               dt_softplus=False, dt_limit=(0.0, float("inf")), initial_states=None,
               return_final_states=False):
    """ssmjit's packed form: x, z (1, T, H, P), dt (1, T, H), B, C (1, T, G, N) hold the sequences
    [cu_seqlens[i], cu_seqlens[i+1]), each chunked from its own start; initial_states and the
    final states (nseq, H, P, N). Differentiable, initial and final states included."""
    dt_min, dt_max = dt_clamp(dt_limit)
    x, B, C, z = _inputs(x, B, C, z)
    out, final, _ = ssd_fwd(x, dt, A, B, C, int(chunk_size), D, z, dt_bias, bool(dt_softplus),
                            dt_min, dt_max, cu_seqlens, initial_states, bool(return_final_states),
                            _training(x, dt, A, B, C, D, z, dt_bias, initial_states))
    return (out, final) if return_final_states else out


@torch.library.custom_op("ssmjit::ssd_slots", mutates_args=("states",))
def ssd_slots_op(x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor, chunk_size: int,
                 D: Optional[Tensor], z: Optional[Tensor], dt_bias: Optional[Tensor],
                 dt_softplus: bool, dt_min: float, dt_max: float, cu_seqlens: Optional[Tensor],
                 states: Tensor, initial_state_indices: Optional[Tensor],
                 final_state_indices: Optional[Tensor]) -> Tensor:
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    fields = dict(x=x, dt=dt, A=A, B=B, C=C, chunk_size=chunk_size, D=D, z=z, dt_bias=dt_bias,
                  dt_softplus=dt_softplus, dt_min=dt_min, dt_max=dt_max, cu_seqlens=cu_seqlens,
                  initial_states=states, initial_state_indices=initial_state_indices,
                  final_states=states, final_state_indices=final_state_indices, out=out)
    call("ssd", x.device, **fields)
    return out


@ssd_slots_op.register_fake
def _(x, dt, A, B, C, chunk_size, D, z, dt_bias, dt_softplus, dt_min, dt_max, cu_seqlens, states,
      initial_state_indices, final_state_indices):
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def ssd_slots(x, dt, A, B, C, states, chunk_size=256, D=None, z=None, dt_bias=None,
              dt_softplus=False, dt_limit=(0.0, float("inf")), cu_seqlens=None,
              initial_state_indices=None, final_state_indices=None):
    """ssmjit's slot form (prefill into a state cache, (S, H, P, N)): sequence i starts from
    states[initial_state_indices[i]] (-1: zeros) and its final state is written in place to
    states[final_state_indices[i]] (-1: not written); without indices, slot i. Forward only."""
    dt_min, dt_max = dt_clamp(dt_limit)
    x, B, C, z = _inputs(x, B, C, z)
    return ssd_slots_op(x, dt, A, B, C, int(chunk_size), D, z, dt_bias, bool(dt_softplus), dt_min,
                        dt_max, cu_seqlens, states, initial_state_indices, final_state_indices)
