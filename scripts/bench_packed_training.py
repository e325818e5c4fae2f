#!/usr/bin/env python3
"""Times a training step (forward, backward, AdamW) of a Mamba-1 or Mamba-2 block stack, random
init, on one batch of sequences of mixed lengths, several ways: padded to the longest, one
sequence at a time, and packed into one row with ssmjit's packed ops (cu_seqlens: the state and
the conv window restart at each sequence) -- issue 48's packed-training measurement. With mamba_ssm
and causal_conv1d installed, also the Mamba-2 packed step through their kernels (seq_idx; their
Mamba-1 scan takes no packing).

Usage: python3 scripts/bench_packed_training.py [--arch mamba1,mamba2] [--layers 24] [--d-model 768]
       [--sequences 8] [--min-len 16] [--max-len 8192] [--steps 3] [--seed 0] [--serial-seqlen 2048]
Lengths are 16 * (max/min)^(u^2) for uniform u (most short, a long tail), the longest set to
--max-len. Activations bf16 (autocast), parameters and SSM states fp32; the loss is the mean square
of the stack's output over the real tokens. Prints per way: ms per step, tokens/s (real tokens),
padding fraction, peak memory; a way that runs out of memory says so. The first steps compile
ssmjit's kernels (the scan backward's first compile takes ~20 s): they are not timed.
"""
import argparse
import math
import time

import torch
import torch.nn.functional as F
from torch import nn

import ssmjit.torch as st


class SsmjitOps:
    """The mixers' conv and scans through ssmjit: dense rows (cu None) or one packed row."""
    name = "ssmjit"

    def __init__(self, serial_seqlen):
        self.serial_seqlen = serial_seqlen

    def conv(self, x, w, b, cu, seq_idx):
        if cu is None:
            return st.causal_conv1d_fn(x, w, b, activation="silu")
        return st.causal_conv1d_varlen(x, w, cu, b, activation="silu")

    def scan(self, u, delta, A, B, C, D, z, delta_bias, cu):
        if cu is None:
            return st.selective_scan_fn(u, delta, A, B, C, D, z, delta_bias, True)
        return st.selective_scan_packed(u, delta, A, B, C, cu, D, z, delta_bias, True,
                                        serial_seqlen=self.serial_seqlen)

    def ssd(self, x, dt, A, B, C, chunk, D, dt_bias, cu, seq_idx):
        if cu is None:
            return st.mamba_chunk_scan_combined(x, dt, A, B, C, chunk, D, None, dt_bias,
                                                dt_softplus=True)
        return st.ssd_packed(x, dt, A, B, C, cu, chunk, D, None, dt_bias, True)


class PeerOps:
    """mamba_ssm's and causal_conv1d's kernels; packed rows through seq_idx (Mamba-2 only)."""
    name = "mamba_ssm"

    def __init__(self):
        from causal_conv1d import causal_conv1d_fn
        from mamba_ssm.ops.selective_scan_interface import selective_scan_fn
        from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined
        self.conv_fn, self.scan_fn, self.ssd_fn = (causal_conv1d_fn, selective_scan_fn,
                                                   mamba_chunk_scan_combined)

    def conv(self, x, w, b, cu, seq_idx):
        if seq_idx is not None:  # causal_conv1d takes seq_idx in the channel-last memory order
            x = x.transpose(1, 2).contiguous().transpose(1, 2)
        return self.conv_fn(x, w, b, seq_idx=seq_idx, activation="silu")

    def scan(self, u, delta, A, B, C, D, z, delta_bias, cu):
        if cu is not None:
            raise NotImplementedError("mamba_ssm's selective_scan_fn takes no packed rows")
        return self.scan_fn(u, delta, A, B, C, D, z, delta_bias, True)

    def ssd(self, x, dt, A, B, C, chunk, D, dt_bias, cu, seq_idx):
        return self.ssd_fn(x, dt, A, B, C, chunk, D, None, dt_bias, seq_idx=seq_idx,
                           dt_softplus=True)


def _dt_bias(n):
    """mamba_ssm's dt init: softplus^-1 of dt log-uniform in [1e-3, 1e-1]."""
    dt = torch.exp(torch.rand(n) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
    return dt + torch.log(-torch.expm1(-dt))


class Mamba1Mixer(nn.Module):
    def __init__(self, d, d_state=16, expand=2, d_conv=4):
        super().__init__()
        E, self.N, self.R = expand * d, d_state, math.ceil(d / 16)
        self.in_proj = nn.Linear(d, 2 * E, bias=False)
        self.conv_weight = nn.Parameter(torch.randn(E, d_conv) / math.sqrt(d_conv))
        self.conv_bias = nn.Parameter(torch.zeros(E))
        self.x_proj = nn.Linear(E, self.R + 2 * d_state, bias=False)
        self.dt_proj = nn.Linear(self.R, E)
        with torch.no_grad():
            self.dt_proj.bias.copy_(_dt_bias(E))
        self.A_log = nn.Parameter(torch.log(torch.arange(1, d_state + 1.0)).repeat(E, 1))
        self.D = nn.Parameter(torch.ones(E))
        self.out_proj = nn.Linear(E, d, bias=False)

    def forward(self, h, ops, cu, seq_idx):  # h (b, L, d)
        x, z = self.in_proj(h).transpose(1, 2).chunk(2, dim=1)
        x = ops.conv(x, self.conv_weight, self.conv_bias, cu, seq_idx)
        dt, B, C = self.x_proj(x.transpose(1, 2)).split([self.R, self.N, self.N], dim=-1)
        dt = (dt @ self.dt_proj.weight.T).transpose(1, 2)
        y = ops.scan(x, dt, -torch.exp(self.A_log.float()), B.transpose(1, 2).unsqueeze(1),
                     C.transpose(1, 2).unsqueeze(1), self.D.float(), z,
                     self.dt_proj.bias.float(), cu)
        return self.out_proj(y.transpose(1, 2))


class Mamba2Mixer(nn.Module):
    def __init__(self, d, d_state=128, headdim=64, expand=2, ngroups=1, d_conv=4, chunk=256):
        super().__init__()
        E = expand * d
        self.E, self.H, self.P, self.N, self.G, self.chunk = E, E // headdim, headdim, d_state, \
            ngroups, chunk
        Dc = E + 2 * ngroups * d_state
        self.in_proj = nn.Linear(d, E + Dc + self.H, bias=False)
        self.conv_weight = nn.Parameter(torch.randn(Dc, d_conv) / math.sqrt(d_conv))
        self.conv_bias = nn.Parameter(torch.zeros(Dc))
        self.dt_bias = nn.Parameter(_dt_bias(self.H))
        self.A_log = nn.Parameter(torch.log(torch.rand(self.H) * 15 + 1))
        self.D = nn.Parameter(torch.ones(self.H))
        self.norm = nn.RMSNorm(E, eps=1e-5)
        self.out_proj = nn.Linear(E, d, bias=False)

    def forward(self, h, ops, cu, seq_idx):  # h (b, L, d)
        b, L, _ = h.shape
        E, H, P, N, G = self.E, self.H, self.P, self.N, self.G
        z, xBC, dt = self.in_proj(h).split([E, E + 2 * G * N, H], dim=-1)
        xBC = ops.conv(xBC.transpose(1, 2), self.conv_weight, self.conv_bias, cu,
                       seq_idx).transpose(1, 2)
        x, B, C = xBC.split([E, G * N, G * N], dim=-1)
        y = ops.ssd(x.reshape(b, L, H, P), dt, -torch.exp(self.A_log.float()),
                    B.reshape(b, L, G, N), C.reshape(b, L, G, N), self.chunk, self.D.float(),
                    self.dt_bias.float(), cu, seq_idx)
        return self.out_proj(self.norm(y.reshape(b, L, E) * F.silu(z)))


class Stack(nn.Module):
    def __init__(self, mixer, d, layers):
        super().__init__()
        self.norms = nn.ModuleList(nn.RMSNorm(d, eps=1e-5) for _ in range(layers))
        self.mixers = nn.ModuleList(mixer(d) for _ in range(layers))
        self.norm_f = nn.RMSNorm(d, eps=1e-5)

    def forward(self, h, ops, cu=None, seq_idx=None):
        for norm, mixer in zip(self.norms, self.mixers):
            h = h + mixer(norm(h), ops, cu, seq_idx)
        return self.norm_f(h)


def lengths_of(n, lo, hi, generator):
    u = torch.rand(n, generator=generator)
    lengths = (lo * (hi / lo) ** (u * u)).long().clamp(lo, hi)
    lengths[0] = hi
    return lengths.tolist()


def batches(lengths, d, device, generator):
    """The per-sequence inputs, and the three layouts of them: padded, one by one, packed."""
    seqs = [torch.randn(L, d, generator=generator).to(device) for L in lengths]
    Lmax = max(lengths)
    padded = torch.zeros(len(lengths), Lmax, d, device=device)
    mask = torch.zeros(len(lengths), Lmax, 1, device=device)
    for i, s in enumerate(seqs):
        padded[i, :len(s)] = s
        mask[i, :len(s)] = 1
    cu = torch.tensor([0] + list(torch.tensor(lengths).cumsum(0)), dtype=torch.int32,
                      device=device)
    seq_idx = torch.repeat_interleave(torch.arange(len(lengths), device=device),
                                      torch.tensor(lengths, device=device)).to(torch.int32)[None]
    return seqs, padded, mask, torch.cat(seqs)[None], cu, seq_idx


def step_fns(model, ops, data):
    seqs, padded, mask, packed, cu, seq_idx = data
    tokens = packed.shape[1]

    def run_padded():
        out = model(padded, ops)
        (out.float().pow(2) * mask).sum().div(tokens * out.shape[-1]).backward()

    def run_one_by_one():
        for s in seqs:
            model(s[None], ops).float().pow(2).sum().div(tokens * s.shape[-1]).backward()

    def run_packed():
        out = model(packed, ops, cu, seq_idx)
        out.float().pow(2).mean().backward()
    return {"padded": run_padded, "one by one": run_one_by_one, "packed": run_packed}


def time_step(opt, run, steps):
    for _ in range(2):  # compiles the kernels, warms the allocator and the autotuners
        run()
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(steps):
        run()
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps, torch.cuda.max_memory_allocated()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arch", default="mamba1,mamba2")
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--d-model", type=int, default=768)
    p.add_argument("--sequences", type=int, default=8)
    p.add_argument("--min-len", type=int, default=16)
    p.add_argument("--max-len", type=int, default=8192)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--serial-seqlen", type=int, default=2048)
    a = p.parse_args()
    g = torch.Generator().manual_seed(a.seed)
    lengths = lengths_of(a.sequences, a.min_len, a.max_len, g)
    tokens = sum(lengths)
    pad = 1 - tokens / (len(lengths) * max(lengths))
    print(f"{len(lengths)} sequences, {tokens} tokens, lengths {sorted(lengths)}")
    data = batches(lengths, a.d_model, "cuda", g)
    peer = None
    try:
        peer = PeerOps()
    except ImportError as e:
        print(f"mamba_ssm / causal_conv1d not importable ({e}): their packed step is left out")
    print(f"{'arch':8} {'way':22} {'ms/step':>9} {'tokens/s':>10} {'padding':>8} {'peak GiB':>9}")
    for arch in a.arch.split(","):
        mixer = {"mamba1": Mamba1Mixer, "mamba2": Mamba2Mixer}[arch]
        torch.manual_seed(a.seed)
        model = Stack(mixer, a.d_model, a.layers).cuda()
        params = sum(p.numel() for p in model.parameters())
        print(f"{arch}: {params / 1e6:.0f}M parameters in {a.layers} layers")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        ways = [(f"{k} (ssmjit)", v, pad if k == "padded" else 0.0)
                for k, v in step_fns(model, SsmjitOps(a.serial_seqlen), data).items()]
        if peer is not None:
            fns = step_fns(model, peer, data)
            ways.append(("padded (mamba_ssm)", fns["padded"], pad))
            if arch == "mamba2":
                ways.append(("packed (mamba_ssm)", fns["packed"], 0.0))
        for name, run, padding in ways:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                try:
                    seconds, peak = time_step(opt, run, a.steps)
                except torch.OutOfMemoryError:
                    opt.zero_grad(set_to_none=True)
                    torch.cuda.empty_cache()
                    print(f"{arch:8} {name:22} {'out of memory':>9}")
                    continue
            print(f"{arch:8} {name:22} {seconds * 1e3:9.1f} {tokens / seconds:10.0f} "
                  f"{padding:8.1%} {peak / 2**30:9.2f}")
        del model, opt
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
