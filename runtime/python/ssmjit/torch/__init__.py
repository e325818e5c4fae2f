"""ssmjit's ops for PyTorch.

torch.library custom ops (namespace ssmjit, with fake implementations for torch.compile and CUDA
graphs; the scans and the conv with autograd through ssmjit's backward kernels), and functions
with the names, signatures and semantics of the peers', so that code written for them runs with
an import swap:

    from ssmjit.torch import selective_scan_fn, selective_state_update        # mamba_ssm
    from ssmjit.torch import mamba_chunk_scan_combined                        # mamba_ssm (SSD)
    from ssmjit.torch import causal_conv1d_fn, causal_conv1d_update           # causal_conv1d

ssmjit's own forms: packed rows (cu_seqlens; *_packed, causal_conv1d_varlen), state slots
(*_slots, in place, for prefill into a state cache), the L-token state update and the fused
speculative decode step. Arguments of the peers that ssmjit does not take raise ssmjit.Error
naming them. Ops run on the caller's current CUDA stream; check_device_errors() reports bad
slots or cu_seqlens found on the device.
"""
import torch as _torch

from .._ssmjit import Error
from ._call import _stream
from .. import _ssmjit
from .conv import (causal_conv1d_fn, causal_conv1d_slots, causal_conv1d_update,
                   causal_conv1d_varlen)
from .decode import mamba2_decode_step, selective_state_update, selective_state_update_tokens
from .scan import selective_scan_fn, selective_scan_packed, selective_scan_slots
from .ssd import mamba_chunk_scan_combined, ssd_packed, ssd_slots


def check_device_errors(device=None):
    """Synchronises the current stream and raises ssmjit.Error if a kernel since the last check
    found a bad index (a slot, cu_seqlens, seq_pos)."""
    device = _torch.device("cuda") if device is None else _torch.device(device)
    _ssmjit.check_device_errors(_stream(device))


__all__ = [
    "Error", "check_device_errors",
    "selective_scan_fn", "selective_scan_packed", "selective_scan_slots",
    "selective_state_update", "selective_state_update_tokens", "mamba2_decode_step",
    "mamba_chunk_scan_combined", "ssd_packed", "ssd_slots",
    "causal_conv1d_fn", "causal_conv1d_update", "causal_conv1d_varlen", "causal_conv1d_slots",
]
