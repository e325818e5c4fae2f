#!/usr/bin/env python3
"""Where a decode step's device time goes, from Nsight Compute's per-kernel durations.

Usage: ncu --csv --metrics gpu__time_duration.sum --graph-profiling node --clock-control none
         --cache-control none ssmjit bench-model --prefill '' --decode-batch 1 ... > ncu.csv
       python3 scripts/decode-breakdown.py ncu.csv [LAYERS]
(ncu's defaults, base clocks and a flushed cache per kernel, make small kernels slower than in a
step.)
Groups every kernel into cuBLASLt GEMMs and ssmjit's kernels (by name), counts the steps by the
embedding kernel (one a step) and prints the device time a step and a layer per group: the sum of
kernel times that a graph replay cannot beat (it removes only the gaps between launches).
"""
import collections
import csv
import sys

OURS = ("embedding", "rms_norm", "causal_conv1d", "selective_state_update", "mamba2_decode_step",
        "sample_", "ssd_", "selective_scan")


def group(name):
    if any(name.startswith(p) for p in OURS):
        return "ssmjit " + name.split("(")[0].split("_v")[0]
    return "GEMM (cuBLASLt)" if any(k in name for k in ("gemm", "xmma", "cutlass", "sm90", "Kernel")) else "other " + name[:40]


def main(path, layers=None):
    rows = [r for r in csv.reader(open(path)) if r]
    hdr = next(i for i, r in enumerate(rows) if r[0] == "ID")
    cols = rows[hdr]
    us = collections.defaultdict(float)
    count = collections.Counter()
    for r in rows[hdr + 1:]:
        if len(r) != len(cols):
            continue
        d = dict(zip(cols, r))
        if d["Metric Name"] != "gpu__time_duration.sum":
            continue
        scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}[d["Metric Unit"]]
        g = group(d["Kernel Name"])
        us[g] += float(d["Metric Value"].replace(",", "")) * scale
        count[g] += 1
    steps = count.get("ssmjit embedding", 0)
    if not steps:
        sys.exit("no embedding kernel in the profile: not a model decode run")
    total = sum(us.values()) / steps
    print(f"{steps} steps profiled; device time a step: {total:.1f} us")
    for g in sorted(us, key=us.get, reverse=True):
        line = f"  {g:40s} {us[g] / steps:9.1f} us a step ({count[g] // steps} launches)"
        if layers:
            line += f", {us[g] / steps / layers:7.2f} us a layer"
        print(line)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else None)
