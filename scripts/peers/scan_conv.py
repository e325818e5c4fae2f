#!/usr/bin/env python3
"""Times mamba_ssm's CUDA selective scan and causal-conv1d's CUDA conv, forward and backward,
beside `ssmjit bench-scan` and `ssmjit bench-conv` (their default shapes).

Usage: PYTHONPATH=<the peers' built extensions and Python sources: build_cuda_peers.py prints it>
       python3 scripts/peers/scan_conv.py [--dim 5120] [--dstate 16] [--conv-dim 5376] [--width 4]
       [--shapes 8x2048,1x16384]
bf16 u, delta, z, B, C (B, C varying, one group); fp32 A, D, delta_bias; softplus. The conv: bf16
x, fp32 weight and bias, silu, channel-first (B, D, L) and channel-last (a (B, L, D) tensor
transposed). Backward = one backward through autograd from a saved forward (the forward is not
timed in it); "bare" = the extension's backward entry point alone (selective_scan_cuda.bwd,
causal_conv1d_cuda.causal_conv1d_bwd) on saved inputs, as ssmjit's benches time theirs. Median of
CUDA-event timings over back-to-back calls.
"""
import argparse

import torch  # first: the extensions below link against its libraries
import causal_conv1d_cuda
import selective_scan_cuda
from causal_conv1d import causal_conv1d_fn
from mamba_ssm.ops.selective_scan_interface import selective_scan_fn
from timing import median_ms


def fwd_bwd_ms(forward, inputs):
    fwd = median_ms(lambda: forward(*inputs), trials=7)

    def backward():
        out = forward(*inputs)
        out.backward(grad)
    with torch.no_grad():
        grad = torch.randn_like(forward(*inputs))
    both = median_ms(backward, trials=7)
    return fwd, both - fwd


def scan_case(b, length, d, n):
    bf = dict(device="cuda", dtype=torch.bfloat16)
    u, z = (torch.randn(b, d, length, **bf, requires_grad=True) for _ in range(2))
    delta = (0.5 * torch.randn(b, d, length, **bf)).requires_grad_()
    A = (-torch.rand(d, n, device="cuda") - 0.5).requires_grad_()
    B, C = (torch.randn(b, 1, n, length, **bf, requires_grad=True) for _ in range(2))
    D = torch.randn(d, device="cuda", requires_grad=True)
    bias = (0.1 * torch.randn(d, device="cuda")).requires_grad_()
    fwd, bwd = fwd_bwd_ms(lambda *t: selective_scan_fn(*t, delta_softplus=True), (u, delta, A, B, C, D, z, bias))
    with torch.no_grad():
        out, x, *_ = selective_scan_cuda.fwd(u, delta, A, B, C, D, z, bias, True)
        dout = torch.randn_like(out)
        bare = median_ms(lambda: selective_scan_cuda.bwd(u, delta, A, B, C, D, z, bias, dout, x, out, None, True,
                                                         False), trials=7)
    return fwd, bwd, bare


def conv_case(b, length, d, w, layout):
    x = torch.randn(b, d, length, device="cuda", dtype=torch.bfloat16)
    if layout == "cl":
        x = torch.randn(b, length, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    x.requires_grad_()
    weight = torch.randn(d, w, device="cuda", requires_grad=True)
    bias = torch.randn(d, device="cuda", requires_grad=True)
    fwd, bwd = fwd_bwd_ms(lambda *t: causal_conv1d_fn(*t, activation="silu"), (x, weight, bias))
    with torch.no_grad():
        dout = torch.randn_like(x)
        dx, dweight, dbias = torch.empty_like(x), torch.empty_like(weight), torch.empty_like(bias)

        def bare_bwd():
            dweight.zero_()
            dbias.zero_()
            causal_conv1d_cuda.causal_conv1d_bwd(x, weight, bias, dout, None, None, None, dx, dweight, dbias, None,
                                                 True)
        bare = median_ms(bare_bwd, trials=7)
    return fwd, bwd, bare


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dim", type=int, default=5120)
    p.add_argument("--dstate", type=int, default=16)
    p.add_argument("--conv-dim", type=int, default=5376)
    p.add_argument("--width", type=int, default=4)
    p.add_argument("--shapes", default="8x2048,1x16384")
    a = p.parse_args()
    print(f"device: {torch.cuda.get_device_name()}")
    print("| case (bf16) | forward ms | backward ms | bare backward ms |\n|---|---|---|---|")
    for shape in a.shapes.split(","):
        b, length = map(int, shape.split("x"))
        f, bw, bare = scan_case(b, length, a.dim, a.dstate)
        print(f"| mamba_ssm selective_scan_fn D {a.dim} N {a.dstate} {shape} | {f:.3f} | {bw:.3f} | {bare:.3f} |")
    for layout in ("cf", "cl"):
        f, bw, bare = conv_case(8, 2048, a.conv_dim, a.width, layout)
        print(f"| causal_conv1d_fn {layout} D {a.conv_dim} W {a.width} 8x2048 | {f:.3f} | {bw:.3f} | {bare:.3f} |")


if __name__ == "__main__":
    main()
