"""causal_conv1d: forward, backward (autograd), the decode update and the slot form, with
causal-conv1d's drop-ins (causal_conv1d_fn, causal_conv1d_update)."""
from typing import Optional, Tuple

import torch
from torch import Tensor

from ._call import call, empty, fail, given_contiguous, like, unsupported


def _silu(activation, function):
    if activation not in (None, "silu", "swish"):
        raise NotImplementedError(f"{function}: activation must be None, silu, or swish")
    return activation in ("silu", "swish")


def _nseq(x, cu_seqlens):
    return x.shape[0] if cu_seqlens is None else cu_seqlens.shape[0] - 1


def _forward_outputs(x, weight, cu_seqlens, return_final_states):
    out = torch.empty_like(x)
    final = (x.new_empty((_nseq(x, cu_seqlens), x.shape[1], weight.shape[1] - 1))
             if return_final_states else empty(x))
    return out, final


@torch.library.custom_op("ssmjit::causal_conv1d_fwd", mutates_args=())
def causal_conv1d_fwd(x: Tensor, weight: Tensor, bias: Optional[Tensor], silu: bool,
                      cu_seqlens: Optional[Tensor], seq_pos: Optional[Tensor],
                      initial_states: Optional[Tensor],
                      return_final_states: bool) -> Tuple[Tensor, Tensor]:
    out, final = _forward_outputs(x, weight, cu_seqlens, return_final_states)
    call("causal_conv1d", x.device, x=x, weight=weight, bias=bias, out=out, silu=silu,
         cu_seqlens=cu_seqlens, seq_pos=seq_pos, initial_states=initial_states,
         final_states=final if return_final_states else None)
    return out, final


@causal_conv1d_fwd.register_fake
def _(x, weight, bias, silu, cu_seqlens, seq_pos, initial_states, return_final_states):
    return _forward_outputs(x, weight, cu_seqlens, return_final_states)


def _backward_outputs(x, weight, bias, initial_states, need_dinitial):
    return (torch.empty_like(x), torch.empty_like(weight),
            torch.empty_like(bias) if bias is not None else empty(x),
            torch.zeros_like(initial_states) if need_dinitial else empty(x))


@torch.library.custom_op("ssmjit::causal_conv1d_bwd", mutates_args=())
def causal_conv1d_bwd(x: Tensor, weight: Tensor, bias: Optional[Tensor], dout: Tensor, silu: bool,
                      cu_seqlens: Optional[Tensor], seq_pos: Optional[Tensor],
                      initial_states: Optional[Tensor], dfinal_states: Optional[Tensor],
                      need_dinitial: bool) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    dx, dweight, dbias, dinitial = _backward_outputs(x, weight, bias, initial_states, need_dinitial)
    fields = dict(x=x, weight=weight, bias=bias, dout=dout, silu=silu, cu_seqlens=cu_seqlens,
                  seq_pos=seq_pos, initial_states=initial_states, dfinal_states=dfinal_states,
                  dx=dx, dweight=dweight, dbias=dbias if bias is not None else None,
                  dinitial_states=dinitial if need_dinitial else None)
    call("causal_conv1d_backward", x.device, **fields)
    return dx, dweight, dbias, dinitial


@causal_conv1d_bwd.register_fake
def _(x, weight, bias, dout, silu, cu_seqlens, seq_pos, initial_states, dfinal_states, need_dinitial):
    return _backward_outputs(x, weight, bias, initial_states, need_dinitial)


def _setup_context(ctx, inputs, output):
    x, weight, bias, silu, cu_seqlens, seq_pos, initial_states, _ = inputs
    ctx.save_for_backward(x, weight, bias, cu_seqlens, seq_pos, initial_states)
    ctx.silu = silu


def _backward(ctx, dout, dfinal):
    x, weight, bias, cu_seqlens, seq_pos, initial_states = ctx.saved_tensors
    need_dinitial = initial_states is not None and ctx.needs_input_grad[6]
    dx, dweight, dbias, dinitial = causal_conv1d_bwd(
        x, weight, bias, like(dout, x), ctx.silu, cu_seqlens, seq_pos, initial_states,
        given_contiguous(dfinal), need_dinitial)
    return (dx, dweight, dbias if bias is not None else None, None, None, None,
            dinitial if need_dinitial else None, None)


causal_conv1d_fwd.register_autograd(_backward, setup_context=_setup_context)


@torch.library.custom_op("ssmjit::causal_conv1d_update", mutates_args=("conv_state",))
def causal_conv1d_update_op(x: Tensor, conv_state: Tensor, weight: Tensor, bias: Optional[Tensor],
                            silu: bool, state_indices: Optional[Tensor], commit: bool) -> Tensor:
    out = torch.empty_like(x)
    call("causal_conv1d_update", x.device, conv_state=conv_state, x=x, weight=weight, bias=bias,
         state_indices=state_indices, out=out, silu=silu, commit=commit)
    return out


@causal_conv1d_update_op.register_fake
def _(x, conv_state, weight, bias, silu, state_indices, commit):
    return torch.empty_like(x)


@torch.library.custom_op("ssmjit::causal_conv1d_slots", mutates_args=("conv_states",))
def causal_conv1d_slots_op(x: Tensor, weight: Tensor, bias: Optional[Tensor], silu: bool,
                           cu_seqlens: Optional[Tensor], conv_states: Tensor,
                           initial_state_indices: Optional[Tensor],
                           final_state_indices: Optional[Tensor]) -> Tensor:
    out = torch.empty_like(x)
    call("causal_conv1d", x.device, x=x, weight=weight, bias=bias, out=out, silu=silu,
         cu_seqlens=cu_seqlens, initial_states=conv_states,
         initial_state_indices=initial_state_indices, final_states=conv_states,
         final_state_indices=final_state_indices)
    return out


@causal_conv1d_slots_op.register_fake
def _(x, weight, bias, silu, cu_seqlens, conv_states, initial_state_indices, final_state_indices):
    return torch.empty_like(x)


def seq_idx_positions(seq_idx):
    """Each token's position in its sequence from causal-conv1d's seq_idx (1, T): 0 where the
    sequence index changes (and at the start), one more than the token before elsewhere."""
    t = torch.arange(seq_idx.shape[-1], device=seq_idx.device)
    starts = torch.ones_like(seq_idx, dtype=torch.bool)
    starts[:, 1:] = seq_idx[:, 1:] != seq_idx[:, :-1]
    first = torch.where(starts, t, torch.zeros_like(t)).cummax(dim=-1).values
    return (t - first).to(torch.int32)


def causal_conv1d_fn(x, weight, bias=None, seq_idx=None, initial_states=None,
                     return_final_states=False, final_states_out=None, activation=None):
    """causal_conv1d.causal_conv1d_fn: x (batch, dim, seqlen) in either memory order, weight
    (dim, width), bias (dim,), seq_idx (1, seqlen) for a packed row, initial_states (batch, dim,
    width - 1). Returns out, or (out, final_states) with return_final_states."""
    silu = _silu(activation, "causal_conv1d_fn")
    seq_pos = None
    if seq_idx is not None:
        if x.shape[0] != 1:
            fail(f"causal_conv1d_fn: seq_idx needs batch 1 (one packed row), got x of shape "
                 f"{tuple(x.shape)}")
        if initial_states is not None or return_final_states:
            fail("causal_conv1d_fn: seq_idx with initial_states or return_final_states is not "
                 "supported by ssmjit: use causal_conv1d_varlen (cu_seqlens) for per-sequence states")
        seq_pos = seq_idx_positions(seq_idx)
    out, final = causal_conv1d_fwd(x, weight, bias, silu, None, seq_pos, initial_states,
                                   return_final_states or final_states_out is not None)
    if final_states_out is not None:
        final_states_out.copy_(final)
        final = final_states_out
    return (out, final) if return_final_states else out


def causal_conv1d_varlen(x, weight, cu_seqlens, bias=None, initial_states=None,
                         return_final_states=False, activation=None):
    """ssmjit's packed form: x (1, dim, T) holds the sequences [cu_seqlens[i], cu_seqlens[i+1]);
    initial_states and the final states (nseq, dim, width - 1), one per sequence. Differentiable
    in x, weight, bias and initial_states."""
    silu = _silu(activation, "causal_conv1d_varlen")
    out, final = causal_conv1d_fwd(x, weight, bias, silu, cu_seqlens, None, initial_states,
                                   return_final_states)
    return (out, final) if return_final_states else out


def causal_conv1d_slots(x, weight, conv_states, bias=None, activation=None, cu_seqlens=None,
                        initial_state_indices=None, final_state_indices=None):
    """ssmjit's slot form (prefill into a state cache): sequence i starts from
    conv_states[initial_state_indices[i]] (-1: zeros) and its final state is written in place to
    conv_states[final_state_indices[i]] (-1: not written); without indices, slot i. Forward only."""
    silu = _silu(activation, "causal_conv1d_slots")
    return causal_conv1d_slots_op(x, weight, bias, silu, cu_seqlens, conv_states,
                                  initial_state_indices, final_state_indices)


def causal_conv1d_update(x, conv_state, weight, bias=None, activation=None, cache_seqlens=None,
                         conv_state_indices=None):
    """causal_conv1d.causal_conv1d_update: x (batch, dim) or (batch, dim, seqlen); conv_state
    (batch or slots, dim, width - 1), updated in place; conv_state_indices (batch,) (-1: a pad
    row, skipped)."""
    silu = _silu(activation, "causal_conv1d_update")
    unsupported("causal_conv1d_update", cache_seqlens=cache_seqlens is not None)
    if conv_state.shape[-1] != weight.shape[-1] - 1:
        fail(f"causal_conv1d_update: conv_state has state_len {conv_state.shape[-1]}, ssmjit takes "
             f"width - 1 = {weight.shape[-1] - 1} (the last width - 1 tokens)")
    unsqueeze = x.dim() == 2
    if unsqueeze:
        x = x.unsqueeze(-1)
    out = causal_conv1d_update_op(x.transpose(1, 2), conv_state, weight, bias, silu,
                                  conv_state_indices, True).transpose(1, 2)
    return out.squeeze(-1) if unsqueeze else out
