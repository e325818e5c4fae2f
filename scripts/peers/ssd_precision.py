#!/usr/bin/env python3
"""Measures the errors of mamba_ssm's Triton SSD (mamba_chunk_scan_combined), forward and
gradients, against a float64 reference, with the metric and inputs of ssmjit's SSD GPU tests.

Usage: PYTHONPATH=<dir holding mamba_ssm's Python sources and einops> python3 scripts/peers/ssd_precision.py
       [--cases 2x1000x8,1x2048x80] [--seed 44]
A case is BATCHxLENGTHxHEADS at P 64, N 128, G 1, chunk 256, bf16 x, dt, B, C, z (and dout),
fp32 A, D (H,), dt_bias, initial states; dt_softplus. Inputs as the tests draw them (tools/problems/
SsdProblem.cpp): x, B, C, D, dout, initial states U(-1, 1), dt U(-3, 1), A U(-2, -0.25), z U(-2, 2),
dt_bias U(-0.5, 0.5). The reference reads the same values in float64 (the quadratic form over whole
sequences, autograd for the gradients) and is rounded to each result's dtype before the
comparison; the error is the relative L2 norm, as the tests' `[ measured ]` lines report it.
"""
import argparse

import torch
import torch.nn.functional as F
import triton_only  # noqa: F401  (before mamba_ssm: its Triton ops without its CUDA extensions)
from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined


def uniform(shape, lo, hi, dtype, gen):
    return (torch.rand(shape, device="cuda", generator=gen, dtype=torch.float64) * (hi - lo) + lo).to(dtype)


def reference(x, dt, A, B, C, D, z, dt_bias, init):
    """out = (y) * silu(z), y_t = sum_{s<=t} (C_t . B_s) exp(cum_t - cum_s) dt_s x_s
    + C_t . exp(cum_t) init + D x_t, per head (G 1), float64."""
    dtp = F.softplus(dt + dt_bias)                       # (b, l, h)
    cum = torch.cumsum(dtp * A, dim=1)                   # (b, l, h)
    L = x.shape[1]
    causal = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()
    seg = cum[:, :, None, :] - cum[:, None, :, :]        # (b, t, s, h)
    decay = torch.exp(seg.masked_fill(~causal[None, :, :, None], float("-inf")))
    cb = torch.einsum("btn,bsn->bts", C[:, :, 0], B[:, :, 0])
    m = cb[..., None] * decay * dtp[:, None, :, :]       # (b, t, s, h)
    y = torch.einsum("btsh,bshp->bthp", m, x)
    y = y + torch.einsum("bth,bhpn,btn->bthp", torch.exp(cum), init, C[:, :, 0])
    y = y + D[None, None, :, None] * x
    return y * F.silu(z)


def recurrence(x, dt, A, B, C, D, z, dt_bias, init):
    """The same out by the state recurrence h_t = exp(dt_t A) h_{t-1} + dt_t x_t B_t^T, token by
    token: a check of reference() on a small case."""
    dtp = F.softplus(dt + dt_bias)
    h, ys = init.clone(), []
    for t in range(x.shape[1]):
        a = torch.exp(dtp[:, t] * A)                                      # (b, h)
        h = a[:, :, None, None] * h + torch.einsum("bh,bhp,bn->bhpn", dtp[:, t], x[:, t], B[:, t, 0])
        ys.append(torch.einsum("bhpn,bn->bhp", h, C[:, t, 0]) + D[None, :, None] * x[:, t])
    return torch.stack(ys, dim=1) * F.silu(z)


def check_reference():
    gen = torch.Generator(device="cuda").manual_seed(1)
    b, L, H, P, N = 2, 37, 3, 4, 8
    args = [uniform(s, lo, hi, torch.float64, gen) for s, lo, hi in [
        ((b, L, H, P), -1, 1), ((b, L, H), -3, 1), ((H,), -2, -0.25), ((b, L, 1, N), -1, 1),
        ((b, L, 1, N), -1, 1), ((H,), -1, 1), ((b, L, H, P), -2, 2), ((H,), -0.5, 0.5), ((b, H, P, N), -1, 1)]]
    err = rel_l2(reference(*args), recurrence(*args))
    assert err < 1e-12, f"the quadratic reference disagrees with the recurrence: {err:.3e}"


def rel_l2(got, ref):
    ref_r = ref.to(got.dtype).double()
    return ((got.double() - ref_r).norm() / ref_r.norm()).item()


def run(b, L, H, seed):
    P, N, G, Q = 64, 128, 1, 256
    bf = torch.bfloat16
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = uniform((b, L, H, P), -1, 1, bf, gen)
    dt = uniform((b, L, H), -3, 1, bf, gen)
    A = uniform((H,), -2, -0.25, torch.float32, gen)
    B = uniform((b, L, G, N), -1, 1, bf, gen)
    C = uniform((b, L, G, N), -1, 1, bf, gen)
    D = uniform((H,), -1, 1, torch.float32, gen)
    z = uniform((b, L, H, P), -2, 2, bf, gen)
    dt_bias = uniform((H,), -0.5, 0.5, torch.float32, gen)
    init = uniform((b, H, P, N), -1, 1, torch.float32, gen)
    dout = uniform((b, L, H, P), -1, 1, bf, gen)
    names = ["x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_states"]
    leaves = [x, dt, A, B, C, D, z, dt_bias, init]

    ours = [t.clone().requires_grad_() for t in leaves]
    out = mamba_chunk_scan_combined(ours[0], ours[1], ours[2], ours[3], ours[4], Q, D=ours[5], z=ours[6],
                                    dt_bias=ours[7], initial_states=ours[8], dt_softplus=True)
    out.backward(dout)

    ref = [t.double().requires_grad_() for t in leaves]
    out_ref = reference(*ref)
    out_ref.backward(dout.double())

    print(f"mamba_ssm Triton SSD, {b}x{L}, H {H} P {P} N {N} G {G} chunk {Q}, bf16, "
          f"{torch.cuda.get_device_name()}: relative L2 error against float64")
    print(f"  out  {rel_l2(out.detach(), out_ref.detach()):.3e}")
    for n, t, r in zip(names, ours, ref):
        print(f"  d{n:<15s}{rel_l2(t.grad, r.grad):.3e}  ({str(t.grad.dtype).replace('torch.', '')})")
    if A.shape[0] <= 8:
        print("  dA   " + " ".join(f"{g:+.4g}/{r:+.4g}" for g, r in zip(ours[2].grad.tolist(), ref[2].grad.tolist())))


def cases(text):
    """--cases: comma-separated BATCHxLENGTHxHEADS, each a positive integer."""
    out = []
    for case in text.split(","):
        parts = case.split("x")
        if len(parts) != 3 or not all(v.isdigit() and int(v) > 0 for v in parts):
            raise argparse.ArgumentTypeError(f"expected BATCHxLENGTHxHEADS (positive integers, e.g. 2x1000x8), got '{case}'")
        out.append(tuple(int(v) for v in parts))
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--cases", type=cases, default="2x1000x8,1x2048x80")
    p.add_argument("--seed", type=int, default=44)
    a = p.parse_args()
    check_reference()
    for b, L, H in a.cases:
        run(b, L, H, a.seed)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
