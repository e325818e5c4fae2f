#!/usr/bin/env python3
"""Times mamba_ssm's Triton SSD (mamba_chunk_scan_combined) beside `ssmjit bench-ssd`.

Usage: PYTHONPATH=<dir holding mamba_ssm's Python sources and einops> python3 scripts/peers/ssd.py
       [--shapes 8x2048,1x16384] [--heads 80] [--headdim 64] [--dstate 128] [--ngroups 1]
       [--chunk 256] [--backward] [--no-z]
Inputs as ssmjit's bench: bf16 x, dt, B, C, z; fp32 A, D, dt_bias; dt_softplus; the median of
CUDA-event timings over back-to-back calls, after the autotuner's warm-up.
"""
import argparse

import torch
import triton_only  # noqa: F401  (before mamba_ssm: its Triton ops without its CUDA extensions)
from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined
from timing import median_ms


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", default="1x2048,8x2048,1x16384,4x8192")
    p.add_argument("--heads", type=int, default=80)
    p.add_argument("--headdim", type=int, default=64)
    p.add_argument("--dstate", type=int, default=128)
    p.add_argument("--ngroups", type=int, default=1)
    p.add_argument("--chunk", type=int, default=256)
    p.add_argument("--backward", action="store_true")
    p.add_argument("--no-z", action="store_true", help="without the gate z (the Mamba-2 layer's call)")
    a = p.parse_args()
    dev, bf = "cuda", torch.bfloat16
    H, P, N, G = a.heads, a.headdim, a.dstate, a.ngroups
    print(f"mamba_ssm Triton SSD, H {H} P {P} N {N} G {G} chunk {a.chunk}, bf16, {torch.cuda.get_device_name()}")
    for shape in a.shapes.split(","):
        b, l = (int(v) for v in shape.split("x"))
        g = torch.Generator(device=dev).manual_seed(0)
        x = torch.randn(b, l, H, P, device=dev, dtype=bf, generator=g)
        z = None if a.no_z else torch.randn(b, l, H, P, device=dev, dtype=bf, generator=g)
        dt = (torch.rand(b, l, H, device=dev, generator=g) - 4.0).to(bf)
        B = torch.randn(b, l, G, N, device=dev, dtype=bf, generator=g)
        C = torch.randn(b, l, G, N, device=dev, dtype=bf, generator=g)
        A = -torch.rand(H, device=dev, generator=g) * 4 - 0.5
        D = torch.randn(H, device=dev, generator=g)
        dt_bias = torch.rand(H, device=dev, generator=g) - 2.0
        args = dict(D=D, z=z, dt_bias=dt_bias, dt_softplus=True)
        fwd = median_ms(lambda: mamba_chunk_scan_combined(x, dt, A, B, C, a.chunk, **args))
        line = f"{b}x{l}: fwd {fwd:.3f} ms"
        if a.backward:
            leaves = [None if t is None else t.detach().requires_grad_()
                      for t in (x, dt, A, B, C, D, z, dt_bias)]
            xs, dts, As, Bs, Cs, Ds, zs, dbs = leaves
            dout = torch.randn(b, l, H, P, device=dev, dtype=bf, generator=g)

            def step():
                out = mamba_chunk_scan_combined(xs, dts, As, Bs, Cs, a.chunk, D=Ds, z=zs, dt_bias=dbs,
                                                dt_softplus=True)
                out.backward(dout)

            line += f", fwd+bwd {median_ms(step):.3f} ms"
        print(line, flush=True)


if __name__ == "__main__":
    main()
