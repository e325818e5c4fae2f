"""The gradients the selective scan's and SSD's backwards share, in one order: the two per-token
inputs (u, delta / x, dt), A, B, C, then the optional D, z, the dt bias and the initial states."""
import torch

from ._call import empty


def gradient_outputs(x, dt, A, B, C, D, z, dt_bias, initial_states, need_dinitial):
    """The nine gradient tensors, each like its input; an empty placeholder for an input not given
    (and for the initial states when their gradient is not wanted)."""
    def opt(t):
        return torch.empty_like(t) if t is not None else empty(x)
    return (torch.empty_like(x), torch.empty_like(dt), torch.empty_like(A), torch.empty_like(B),
            torch.empty_like(C), opt(D), opt(z), opt(dt_bias),
            torch.zeros_like(initial_states) if need_dinitial else empty(x))


def given_gradients(grads, D, z, dt_bias, need_dinitial):
    """The nine gradients with None in place of each placeholder."""
    dx, ddt, dA, dB, dC, dD, dz, ddt_bias, dinitial = grads
    return (dx, ddt, dA, dB, dC, dD if D is not None else None, dz if z is not None else None,
            ddt_bias if dt_bias is not None else None, dinitial if need_dinitial else None)
