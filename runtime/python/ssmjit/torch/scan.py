"""The Mamba-1 selective scan: forward and backward (autograd), dense, packed (cu_seqlens) and
slot forms, with mamba_ssm's drop-in selective_scan_fn."""
from typing import Optional, Tuple

import torch
from torch import Tensor

from ._call import call, empty, given_contiguous, like, unit_last_stride
from ._scan_gradients import given_gradients, gradient_outputs


def _nseq(u, cu_seqlens):
    return u.shape[0] if cu_seqlens is None else cu_seqlens.shape[0] - 1


def _forward_outputs(u, A, cu_seqlens, return_final_states):
    out = torch.empty(u.shape, dtype=u.dtype, device=u.device)
    final = (torch.empty((_nseq(u, cu_seqlens), A.shape[0], A.shape[1]), dtype=torch.float32,
                         device=u.device) if return_final_states else empty(u))
    return out, final


@torch.library.custom_op("ssmjit::selective_scan_fwd", mutates_args=())
def selective_scan_fwd(u: Tensor, delta: Tensor, A: Tensor, B: Tensor, C: Tensor,
                       D: Optional[Tensor], z: Optional[Tensor], delta_bias: Optional[Tensor],
                       delta_softplus: bool, cu_seqlens: Optional[Tensor], max_seqlen: int,
                       initial_states: Optional[Tensor], return_final_states: bool,
                       serial_seqlen: int) -> Tuple[Tensor, Tensor]:
    out, final = _forward_outputs(u, A, cu_seqlens, return_final_states)
    fields = dict(u=u, delta=delta, A=A, B=B, C=C, D=D, z=z, delta_bias=delta_bias,
                  delta_softplus=delta_softplus, cu_seqlens=cu_seqlens, max_seqlen=max_seqlen,
                  initial_states=initial_states, out=out,
                  final_states=final if return_final_states else None, serial_seqlen=serial_seqlen)
    call("selective_scan", u.device, **fields)
    return out, final


@selective_scan_fwd.register_fake
def _(u, delta, A, B, C, D, z, delta_bias, delta_softplus, cu_seqlens, max_seqlen, initial_states,
      return_final_states, serial_seqlen):
    return _forward_outputs(u, A, cu_seqlens, return_final_states)


@torch.library.custom_op("ssmjit::selective_scan_bwd", mutates_args=())
def selective_scan_bwd(u: Tensor, delta: Tensor, A: Tensor, B: Tensor, C: Tensor,
                       D: Optional[Tensor], z: Optional[Tensor], delta_bias: Optional[Tensor],
                       delta_softplus: bool, cu_seqlens: Optional[Tensor], max_seqlen: int,
                       initial_states: Optional[Tensor], dout: Tensor,
                       dfinal_states: Optional[Tensor], need_dinitial: bool
                       ) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor,
                                  Tensor]:
    grads = gradient_outputs(u, delta, A, B, C, D, z, delta_bias, initial_states, need_dinitial)
    du, ddelta, dA, dB, dC, dD, dz, ddelta_bias, dinitial = given_gradients(
        grads, D, z, delta_bias, need_dinitial)
    fields = dict(u=u, delta=delta, A=A, B=B, C=C, D=D, z=z, delta_bias=delta_bias,
                  delta_softplus=delta_softplus, cu_seqlens=cu_seqlens, max_seqlen=max_seqlen,
                  initial_states=initial_states, dout=dout, dfinal_states=dfinal_states,
                  du=du, ddelta=ddelta, dA=dA, dB=dB, dC=dC, dD=dD, dz=dz,
                  ddelta_bias=ddelta_bias, dinitial_states=dinitial)
    call("selective_scan_backward", u.device, **fields)
    return grads


@selective_scan_bwd.register_fake
def _(u, delta, A, B, C, D, z, delta_bias, delta_softplus, cu_seqlens, max_seqlen, initial_states,
      dout, dfinal_states, need_dinitial):
    return gradient_outputs(u, delta, A, B, C, D, z, delta_bias, initial_states, need_dinitial)


def _setup_context(ctx, inputs, output):
    (u, delta, A, B, C, D, z, delta_bias, delta_softplus, cu_seqlens, max_seqlen, initial_states,
     _, _) = inputs
    ctx.save_for_backward(u, delta, A, B, C, D, z, delta_bias, cu_seqlens, initial_states)
    ctx.delta_softplus = delta_softplus
    ctx.max_seqlen = max_seqlen


def _backward(ctx, dout, dfinal):
    u, delta, A, B, C, D, z, delta_bias, cu_seqlens, initial_states = ctx.saved_tensors
    need_dinitial = initial_states is not None and ctx.needs_input_grad[11]
    grads = selective_scan_bwd(
        u, delta, A, B, C, D, z, delta_bias, ctx.delta_softplus, cu_seqlens, ctx.max_seqlen,
        initial_states, like(dout, u), given_contiguous(dfinal), need_dinitial)
    du, ddelta, dA, dB, dC, dD, dz, ddelta_bias, dinitial = given_gradients(
        grads, D, z, delta_bias, need_dinitial)
    return (du, ddelta, dA, dB, dC, dD, dz, ddelta_bias, None, None, None, dinitial, None, None)


selective_scan_fwd.register_autograd(_backward, setup_context=_setup_context)


def _grouped(BC):
    """mamba_ssm's B / C: constant (D, N), or time-varying (batch, N, L) / (batch, G, N L)."""
    if BC.dim() == 3:
        BC = BC.unsqueeze(1)
    return unit_last_stride(BC)


def selective_scan_fn(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False,
                      return_last_state=False):
    """mamba_ssm's selective_scan_fn: u, delta, z (batch, dim, L); A (dim, N) fp32; B, C (dim, N)
    fp32 or (batch, N, L) / (batch, G, N, L); D, delta_bias (dim,) fp32. Returns out, or (out,
    last_state) with last_state (batch, dim, N) fp32 (its gradient is carried too)."""
    out, last = selective_scan_fwd(unit_last_stride(u), unit_last_stride(delta), A, _grouped(B),
                                   _grouped(C), D, unit_last_stride(z), delta_bias,
                                   bool(delta_softplus), None, 0, None, bool(return_last_state), 0)
    return (out, last) if return_last_state else out


def selective_scan_packed(u, delta, A, B, C, cu_seqlens, D=None, z=None, delta_bias=None,
                          delta_softplus=False, initial_states=None, return_final_states=False,
                          max_seqlen=0, serial_seqlen=0):
    """ssmjit's packed form: u, delta, z (1, dim, T) and B, C (1, G, N, T) hold the sequences
    [cu_seqlens[i], cu_seqlens[i+1]); the state restarts at each (from initial_states[i], (nseq,
    dim, N), if given). Returns out, or (out, final_states (nseq, dim, N) fp32). Differentiable,
    initial and final states included."""
    out, final = selective_scan_fwd(unit_last_stride(u), unit_last_stride(delta), A, _grouped(B),
                                    _grouped(C), D, unit_last_stride(z), delta_bias,
                                    bool(delta_softplus), cu_seqlens, int(max_seqlen),
                                    initial_states, bool(return_final_states), int(serial_seqlen))
    return (out, final) if return_final_states else out


@torch.library.custom_op("ssmjit::selective_scan_slots", mutates_args=("states",))
def selective_scan_slots_op(u: Tensor, delta: Tensor, A: Tensor, B: Tensor, C: Tensor,
                            D: Optional[Tensor], z: Optional[Tensor], delta_bias: Optional[Tensor],
                            delta_softplus: bool, cu_seqlens: Optional[Tensor], states: Tensor,
                            initial_state_indices: Optional[Tensor],
                            final_state_indices: Optional[Tensor], serial_seqlen: int) -> Tensor:
    out = torch.empty(u.shape, dtype=u.dtype, device=u.device)
    fields = dict(u=u, delta=delta, A=A, B=B, C=C, D=D, z=z, delta_bias=delta_bias,
                  delta_softplus=delta_softplus, cu_seqlens=cu_seqlens, initial_states=states,
                  initial_state_indices=initial_state_indices, final_states=states,
                  final_state_indices=final_state_indices, out=out, serial_seqlen=serial_seqlen)
    call("selective_scan", u.device, **fields)
    return out


@selective_scan_slots_op.register_fake
def _(u, delta, A, B, C, D, z, delta_bias, delta_softplus, cu_seqlens, states,
      initial_state_indices, final_state_indices, serial_seqlen):
    return torch.empty(u.shape, dtype=u.dtype, device=u.device)


def selective_scan_slots(u, delta, A, B, C, states, D=None, z=None, delta_bias=None,
                         delta_softplus=False, cu_seqlens=None, initial_state_indices=None,
                         final_state_indices=None, serial_seqlen=0):
    """ssmjit's slot form (prefill into a state cache): sequence i starts from
    states[initial_state_indices[i]] (-1: zeros) and its final state is written in place to
    states[final_state_indices[i]] (-1: not written); without indices, slot i. Forward only."""
    return selective_scan_slots_op(unit_last_stride(u), unit_last_stride(delta), A, _grouped(B),
                                   _grouped(C), D, unit_last_stride(z), delta_bias,
                                   bool(delta_softplus), cu_seqlens, states, initial_state_indices,
                                   final_state_indices, int(serial_seqlen))
