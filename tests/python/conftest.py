"""pytest setup for the Python package: `gpu` tests skip (with the reason) without CUDA."""
import pytest
import torch


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="no CUDA device: the GPU tests of ssmjit.torch need one")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
