#!/usr/bin/env python3
"""mamba_ssm's Mamba2 mixer layer (its nn.Module) forward and backward, bf16, the peer of
`ssmjit bench-parallel --backward` on one GPU: the same shape (default Mamba-2 2.7B's heads with G 8)
on B sequences of L tokens, weights' gradients by autograd. Prints ms per forward and per
forward + backward (median of CUDA-event timings, scripts/peers/timing.py).

Two paths: --path triton runs the module with use_mem_eff_path off (in_proj, the conv as torch's
nn.Conv1d unless causal_conv1d is importable, the Triton SSD and gated RMSNorm, out_proj); --path
fused its default use_mem_eff_path (mamba_split_conv1d_scan_combined: needs causal_conv1d's CUDA
extension, scripts/peers/build_cuda_peers.py).
Usage: PYTHONPATH=<mamba_ssm sdist>:<einops>:scripts/peers python3 mamba2_layer_train.py [options]"""
import argparse

import torch
import triton_only  # noqa: F401  (mamba_ssm's modules without its package __init__'s CUDA imports)
from timing import median_ms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, default=2560)
    ap.add_argument("--heads", type=int, default=80, help="d_inner / headdim")
    ap.add_argument("--headdim", type=int, default=64)
    ap.add_argument("--dstate", type=int, default=128)
    ap.add_argument("--ngroups", type=int, default=8)
    ap.add_argument("--shape", default="8x2048", help="BxL")
    ap.add_argument("--path", default="triton", choices=["triton", "fused"])
    a = ap.parse_args()
    from mamba_ssm.modules.mamba2 import Mamba2

    dev, bf = "cuda", torch.bfloat16
    b, l = (int(v) for v in a.shape.split("x"))
    torch.manual_seed(0)
    layer = Mamba2(d_model=a.hidden, d_state=a.dstate, d_conv=4, expand=a.heads * a.headdim // a.hidden,
                   headdim=a.headdim, ngroups=a.ngroups, chunk_size=256, use_mem_eff_path=a.path == "fused",
                   device=dev, dtype=bf)
    u = torch.randn(b, l, a.hidden, device=dev, dtype=bf, requires_grad=True)
    dout = torch.randn(b, l, a.hidden, device=dev, dtype=bf)

    def forward():
        with torch.no_grad():
            layer(u)

    def step():
        layer(u).backward(dout)

    print(f"mamba_ssm Mamba2 layer ({a.path} path), hidden {a.hidden}, {a.heads} heads x {a.headdim}, state "
          f"{a.dstate}, groups {a.ngroups}, bf16, {b}x{l}, {torch.cuda.get_device_name()}")
    fwd, both = median_ms(forward, trials=10), median_ms(step, trials=10)
    print(f"forward {fwd:.3f} ms, forward + backward {both:.3f} ms (backward {both - fwd:.3f} ms)", flush=True)


if __name__ == "__main__":
    main()
