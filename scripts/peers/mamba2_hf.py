#!/usr/bin/env python3
"""Makes a random Mamba-2 checkpoint with Hugging Face transformers and records what transformers
computes with it, for ssmjit's model test (tests/test_mamba2_model_gpu.cpp) and benchmark.

Usage: python3 scripts/peers/mamba2_hf.py --out DIR [--shape tiny|780m|2.7b] [--layers N] [--groups G]
       [--steps 32] [--bench [--reps 5] [--kernels torch,mamba_ssm]]
Writes DIR/config.json and DIR/model.safetensors (save_pretrained) and DIR/expected.json: the
prompts, each prompt's last-token logits from transformers' own forward in float32 and bfloat16,
and its greedy continuation of --steps tokens (float32). Weights are drawn at random with scales
that keep every layer's activations of order one (std 1/sqrt(fan in) for the projections), so that
logits spread and greedy choices are not near ties. With --bench, also times transformers' prefill
(1x2048, 8x2048) and decode steps (batch 1, 16, 64) on the same checkpoint.
transformers 5 fetches its fast kernels from the Hugging Face Hub, which the device cannot reach;
without them it takes its PyTorch path (--kernels torch). --kernels mamba_ssm puts mamba_ssm's
Triton SSD and state update and causal-conv1d's CUDA conv (importable from PYTHONPATH) in place of
that path's four functions, then checks the logits against the PyTorch path's before timing. Each
kernel set named is timed in turn.
"""
import argparse
import inspect
import json
import math
import os
import time

import torch
from transformers import Mamba2Config, Mamba2ForCausalLM

SHAPES = {
    # hidden, heads, head_dim, state, groups, vocab, layers, chunk
    "tiny": (64, 4, 32, 16, 1, 512, 2, 64),
    "780m": (1536, 48, 64, 128, 1, 50288, 48, 256),
    "2.7b": (2560, 80, 64, 128, 1, 50288, 64, 256),
}
PROMPT_LENGTHS = [5, 17, 70, 300]


def make_config(shape, layers, groups_override=0):
    hidden, heads, head_dim, state, groups, vocab, default_layers, chunk = SHAPES[shape]
    groups = groups_override or groups
    return Mamba2Config(
        vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers or default_layers, num_heads=heads,
        head_dim=head_dim, state_size=state, n_groups=groups, expand=heads * head_dim // hidden, conv_kernel=4,
        chunk_size=chunk, tie_word_embeddings=True, use_bias=False, use_conv_bias=True, residual_in_fp32=True,
        rms_norm=True, layer_norm_epsilon=1e-5, time_step_limit=(0.0, float("inf")))


@torch.no_grad()
def randomize(model, seed):
    g = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():
        if name.endswith("A_log"):
            v = torch.log(torch.rand(p.shape, generator=g) * 15 + 1)
        elif name.endswith("dt_bias"):
            dt = torch.exp(torch.rand(p.shape, generator=g) * (math.log(0.1) - math.log(0.001)) + math.log(0.001))
            v = dt + torch.log(-torch.expm1(-dt))  # inverse softplus
        elif name.endswith("norm.weight") or name.endswith("norm_f.weight"):
            v = 1 + 0.1 * torch.randn(p.shape, generator=g)
        elif p.dim() == 1:
            v = 0.1 * torch.randn(p.shape, generator=g)
        else:
            fan_in = p[0].numel()
            v = torch.randn(p.shape, generator=g) / math.sqrt(fan_in)
        p.copy_(v)


@torch.no_grad()
def last_logits(model, prompts):
    return [model(torch.tensor([p], device="cuda")).logits[0, -1].float().cpu().tolist() for p in prompts]


@torch.no_grad()
def greedy(model, prompt, steps):
    out = model.generate(torch.tensor([prompt], device="cuda"), max_new_tokens=steps, min_new_tokens=steps,
                         do_sample=False, eos_token_id=None, pad_token_id=0)
    return out[0, len(prompt):].tolist()


def time_ms(fn, reps=5):
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / reps * 1e3


def use_mamba_ssm_kernels():
    """transformers' Mamba-2 mixer calls these four module functions; the hub would supply them."""
    from causal_conv1d import causal_conv1d_fn, causal_conv1d_update
    from mamba_ssm.ops.triton.selective_state_update import selective_state_update
    from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined
    import transformers.models.mamba2.modeling_mamba2 as m
    m.causal_conv1d_fn, m.causal_conv1d_update = causal_conv1d_fn, causal_conv1d_update
    m.mamba2_selective_state_update, m.mamba2_chunk_scan = selective_state_update, mamba_chunk_scan_combined


@torch.no_grad()
def bench(model, vocab, reps):
    rows = []
    def row(label, fn):
        try:
            rows.append(label + ": " + fn())
        except torch.OutOfMemoryError:
            rows.append(label + ": out of GPU memory")
        torch.cuda.empty_cache()

    # A prefill for generation needs each prompt's last logits only, as ssmjit's computes them; where
    # the forward takes logits_to_keep, transformers skips lm_head on the other tokens too.
    keep = {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}

    def prefill(b, l):
        ids = torch.randint(0, vocab, (b, l), device="cuda")
        ms = time_ms(lambda: model(ids, use_cache=False, **keep), reps)
        which = "last-token logits" if keep else "every token's logits"
        return f"{ms:.2f} ms, {b * l / ms * 1e3:.0f} tokens/s ({which})"

    def decode(b, steps=32):
        ids = torch.randint(0, vocab, (b, 16), device="cuda")
        ms = time_ms(lambda: model.generate(ids, max_new_tokens=steps, min_new_tokens=steps, do_sample=False,
                                            eos_token_id=None, pad_token_id=0), reps=2)
        return f"{ms / steps:.3f} ms a step (with the prefill of 16), {b * steps / ms * 1e3:.0f} tokens/s"

    for b, l in [(1, 2048), (8, 2048)]:
        row(f"prefill {b}x{l}", lambda: prefill(b, l))
    for b in [1, 16, 64]:
        row(f"generate batch {b}", lambda: decode(b))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--shape", default="tiny", choices=sorted(SHAPES))
    ap.add_argument("--layers", type=int, default=0, help="0: the shape's own depth")
    ap.add_argument("--groups", type=int, default=0,
                    help="n_groups (0: the shape's own); tensor parallelism over t ranks needs G %% t == 0")
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--reps", type=int, default=5, help="timed prefills a shape with --bench")
    ap.add_argument("--kernels", default="torch", help="transformers' kernels for --bench: torch, mamba_ssm or both")
    a = ap.parse_args()
    config = make_config(a.shape, a.layers, a.groups)
    torch.manual_seed(a.seed)
    model = Mamba2ForCausalLM(config)
    randomize(model, a.seed)
    model.save_pretrained(a.out, safe_serialization=True)
    g = torch.Generator().manual_seed(a.seed + 1)
    prompts = [torch.randint(0, config.vocab_size, (n,), generator=g).tolist() for n in PROMPT_LENGTHS]
    model = model.cuda().eval()
    expected = {"shape": a.shape, "prompts": prompts, "logits_fp32": last_logits(model, prompts),
                "greedy_fp32": [greedy(model, p, a.steps) for p in prompts]}
    model = model.to(torch.bfloat16)
    expected["logits_bf16"] = last_logits(model, prompts)
    expected["greedy_bf16"] = [greedy(model, p, a.steps) for p in prompts]
    with open(os.path.join(a.out, "expected.json"), "w") as f:
        json.dump(expected, f)
    print(f"wrote {a.out}: {a.shape}, {config.num_hidden_layers} layers, transformers {__import__('transformers').__version__}")
    for kernels in a.kernels.split(",") if a.bench else []:
        if kernels == "mamba_ssm":
            use_mamba_ssm_kernels()
            got = torch.tensor(last_logits(model, prompts))
            ref = torch.tensor(expected["logits_bf16"])
            rel = ((got - ref).abs().amax(-1) / ref.abs().amax(-1)).max().item()
            print(f"mamba_ssm kernels in place: bf16 logits against the PyTorch path's, max rel {rel:.2e}")
        elif kernels != "torch":
            raise SystemExit(f"--kernels: expected torch or mamba_ssm, got {kernels!r}")
        for row in bench(model, config.vocab_size, a.reps):
            print(f"transformers ({kernels}) bf16 " + row)


if __name__ == "__main__":
    main()
