#!/usr/bin/env bash
# First-call compile times on this host, one kernel at a time: the kernels that the conv and norm
# benches use (recorded with SSMJIT_RECORD, at their default shapes) and those of the manifests
# given, each compiled alone into an empty cache by `prewarm -j JOBS`. A first call compiles its
# missing kernels at once, so its wall time is about that of its longest kernel.
# Usage: scripts/first-call-times.sh PREFIX [MANIFEST...]   (PREFIX: an install tree; the benches
# need a GPU; JOBS defaults to the core count)
set -euo pipefail
prefix=$1
shift
bin="$prefix/bin/ssmjit"
jobs=${JOBS:-$(nproc)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
SSMJIT_RECORD="$work/rec.jsonl" SSMJIT_CACHE_DIR="$work/warm" "$bin" bench-conv --update-batch 64 --update-tokens 1 \
  --iters 1 --trials 1 > /dev/null
SSMJIT_RECORD="$work/rec.jsonl" SSMJIT_CACHE_DIR="$work/warm" "$bin" bench-norm --iters 1 --trials 1 > /dev/null
# The manifests' kernels, recorded by compiling them once.
for m in "$@"; do
  SSMJIT_RECORD="$work/rec.jsonl" SSMJIT_CACHE_DIR="$work/warm" "$bin" prewarm -q -j "$jobs" "$m" > /dev/null
done
sort -u "$work/rec.jsonl" > "$work/kernels.jsonl"
printf '%-48s %8s\n' kernel seconds
while IFS= read -r line; do
  printf '%s\n' "$line" > "$work/one.jsonl"
  # The kernel, and the bindings that tell a bench's variants apart.
  kernel=$(printf '%s' "$line" | python3 -c '
import json, sys
r = json.load(sys.stdin)
b = dict(r["bindings"])
tags = [k.split(":")[-1] for k in ("meta:channel_last", "has_cu", "has_z") if b.get(k)]
tags += ["N %d" % b["meta:dstate"]] if "meta:dstate" in b else []
print(r["kernel"] + (" (" + ", ".join(tags) + ")" if tags else ""))')
  rm -rf "$work/cold"
  secs=$(SSMJIT_CACHE_DIR="$work/cold" "$bin" prewarm -q -j "$jobs" "$work/one.jsonl" |
    sed -n 's/.* in \([0-9.]*\) s with .*/\1/p')
  printf '%-48s %8s\n' "$kernel" "$secs"
done < "$work/kernels.jsonl"
