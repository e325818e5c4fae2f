"""ssmjit: JIT-generated Mamba-1 / Mamba-2 GPU kernels.

`ssmjit.torch` holds the PyTorch ops (custom ops with fake implementations and autograd, and
drop-in replacements for mamba_ssm's and causal-conv1d's functions). This module holds the
extension's error type; importing it needs no GPU.
"""
from ._ssmjit import Error  # noqa: F401  ssmjit::Error, a ValueError with a `kind`

__all__ = ["Error"]
__version__ = "0.1.0"
