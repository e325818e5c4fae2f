#!/usr/bin/env python3
"""Builds the peers' CUDA extensions (causal-conv1d's causal_conv1d_cuda and mamba_ssm's
selective_scan_cuda) from their PyPI source packages, for the GPU this machine has only, so that
benchmarks and tests can run them beside ssmjit.

Usage: python3 scripts/peers/build_cuda_peers.py SRC BUILD
  SRC   a folder holding the unpacked sdists causal_conv1d-*/ and mamba_ssm-*/
  BUILD where the two .so files go (kept between calls on one machine: built once)
Prints the PYTHONPATH to use: BUILD, then both packages' Python sources.
Their own setup.py files build for ten architectures (tens of minutes); this builds the same
sources with the same nvcc flags for one, through torch.utils.cpp_extension (ninja, MAX_JOBS).
"""
import glob
import os
import sys
from concurrent.futures import ThreadPoolExecutor

import torch
from torch.utils import cpp_extension

NVCC_FLAGS = [
    "-O3", "-std=c++17",
    "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
    "-U__CUDA_NO_BFLOAT16_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "-U__CUDA_NO_BFLOAT162_OPERATORS__", "-U__CUDA_NO_BFLOAT162_CONVERSIONS__",
    "--expt-relaxed-constexpr", "--expt-extended-lambda", "--use_fast_math",
]


def package_dir(src, name):
    # Folders only: the sdists' archives may lie beside them.
    found = sorted(p for p in glob.glob(os.path.join(src, name + "-*")) if os.path.isdir(p))
    if not found:
        sys.exit(f"build_cuda_peers: no {name}-* folder in {src} (unpack its sdist there)")
    return found[-1]


def build(name, root, sources, build_dir):
    out = os.path.join(build_dir, name)
    os.makedirs(out, exist_ok=True)
    cpp_extension.load(
        name=name, sources=[os.path.join(root, s) for s in sources],
        extra_include_paths=[os.path.dirname(os.path.join(root, sources[0]))],
        extra_cflags=["-O3", "-std=c++17"], extra_cuda_cflags=NVCC_FLAGS,
        build_directory=out, verbose=False)
    return out


def main():
    src, build_dir = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    major, minor = torch.cuda.get_device_capability()
    os.environ["TORCH_CUDA_ARCH_LIST"] = f"{major}.{minor}"
    conv = package_dir(src, "causal_conv1d")
    mamba = package_dir(src, "mamba_ssm")
    scan = ["csrc/selective_scan/selective_scan.cpp"] + [
        f"csrc/selective_scan/selective_scan_{k}.cu" for k in
        ["fwd_fp32", "fwd_fp16", "fwd_bf16"] +
        [f"bwd_{t}_{c}" for t in ("fp32", "fp16", "bf16") for c in ("real", "complex")]]
    jobs = [("causal_conv1d_cuda", conv, ["csrc/causal_conv1d.cpp", "csrc/causal_conv1d_fwd.cu",
                                          "csrc/causal_conv1d_bwd.cu", "csrc/causal_conv1d_update.cu"]),
            ("selective_scan_cuda", mamba, scan)]
    with ThreadPoolExecutor(2) as pool:
        outs = list(pool.map(lambda j: build(j[0], j[1], j[2], build_dir), jobs))
    print(os.pathsep.join(outs + [conv, mamba]))


if __name__ == "__main__":
    main()
