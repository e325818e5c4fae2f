"""Calls into the extension: torch tensors as descriptors, the caller's current CUDA stream,
workspaces from torch's allocator."""
import torch

from .. import _ssmjit
from .._ssmjit import Error

# (DLPack type code, bits) per torch dtype; the extension refuses what ssmjit does not take, naming
# the argument.
_DTYPES = {
    torch.float32: (2, 32), torch.float16: (2, 16), torch.bfloat16: (4, 16), torch.float64: (2, 64),
    torch.int32: (0, 32), torch.int64: (0, 64), torch.int16: (0, 16), torch.int8: (0, 8),
    torch.uint8: (1, 8), torch.bool: (6, 8),
}
_DEVICES = {"cpu": 1, "cuda": 2}  # kDLCPU, kDLCUDA; anything else is refused by the extension


def _descriptor(t):
    if not isinstance(t, torch.Tensor):
        return t
    code, bits = _DTYPES.get(t.dtype, (255, t.element_size() * 8))
    return (t.data_ptr(), code, bits, tuple(t.shape), tuple(t.stride()),
            _DEVICES.get(t.device.type, 0), t.device.index or 0)


def _stream(device):
    return torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0


def call(op, device, **fields):
    """Runs the extension's op on `device`'s current stream; None fields are left undefined. An op
    that takes a workspace gets a float32 one of the size it asks for these fields (at least one
    element). ssmjit launches in the thread's current CUDA context, so `device` is made current
    first."""
    run = getattr(_ssmjit, op)
    descriptors = {k: _descriptor(v) for k, v in fields.items() if v is not None}
    workspace_size = getattr(_ssmjit, op + "_workspace_size", None)
    if workspace_size is not None:
        ws = torch.empty(max(1, workspace_size(descriptors)), dtype=torch.float32, device=device)
        descriptors["workspace"] = _descriptor(ws)  # ws lives until the op has returned
    if device.type == "cuda" and device.index is not None \
            and device.index != torch.cuda.current_device():
        with torch.cuda.device(device):
            run(descriptors, _stream(device))
    else:
        run(descriptors, _stream(device))


def fail(message):
    raise Error(message)


def unsupported(function, **arguments):
    """Raises naming every argument of the peer's signature that ssmjit does not take and that the
    caller set (a value other than its default)."""
    names = [name for name, is_set in arguments.items() if is_set]
    if names:
        fail(f"{function}: argument(s) {', '.join(names)} not supported by ssmjit")


def unit_last_stride(t):
    """t, copied if its last axis is not unit-stride (the kernels read rows along it)."""
    return t if t is None or t.stride(-1) == 1 or t.shape[-1] == 1 else t.contiguous()


def like(grad, ref):
    """The incoming gradient in ref's memory layout (autograd may hand it expanded or permuted)."""
    if grad.stride() == ref.stride():
        return grad
    return torch.empty_like(ref).copy_(grad)


def dt_clamp(dt_limit):
    """mamba_ssm's dt_limit as ssmjit's (dt_min, dt_max): (0, inf) is no clamp."""
    lo, hi = dt_limit
    if lo == 0.0 and hi == float("inf"):
        return 0.0, 0.0
    return float(lo), min(float(hi), 3.0e38)


def empty(ref):
    """The placeholder a custom op returns for an output it was not asked for (ref's device)."""
    return ref.new_empty(0)


def given(t):
    """t, or None for a placeholder (an empty gradient of an output nobody asked for)."""
    return None if t is None or t.numel() == 0 else t


def given_contiguous(t):
    """given(t), contiguous: an incoming gradient the kernels read as a plain array."""
    t = given(t)
    return t.contiguous() if t is not None else None
