"""Makes mamba_ssm's Triton ops importable without its package __init__, which imports the
package's CUDA extensions (selective_scan_cuda, causal_conv1d): a machine that only runs the
Triton peers need not build them. Import this module before `from mamba_ssm.ops.triton...`."""
import importlib.util
import sys
import types

if "mamba_ssm" not in sys.modules:
    _spec = importlib.util.find_spec("mamba_ssm")
    if _spec is None:
        sys.exit("triton_only: mamba_ssm is not on PYTHONPATH (its unpacked sdist's folder)")
    _pkg = types.ModuleType("mamba_ssm")
    _pkg.__path__ = list(_spec.submodule_search_locations)
    sys.modules["mamba_ssm"] = _pkg
