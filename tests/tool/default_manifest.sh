# The embedded default manifest: prewarm compiles it all (the SSD entries' kernels among them), a
# second run finds it all cached, and --print-default prints a manifest that reads back to the
# same kernels.
source "$(dirname "$0")/lib.sh"

run first 0 "$TOOL" prewarm --jobs 2
n=$(summary kernels first.out)
[ "$n" -ge 95 ] && [ "$n" -le 130 ] || fail "default manifest: expected 95-130 kernels (with the SSD backward heads), got $n"
# The SSD entries: Mamba-2 2.7B's, 1.3B's and 780M's heads (H 80, 64, 48), dense and packed, four
# launches each (chunk_state passes the states), all distinct (the heads a group, H / G, bind by value).
expect_eq "SSD kernels listed" 24 "$(grep -Ec 'ssd H(80|64|48) P64 N128 G1 chunk 256' first.out || true)" first.out
# Every listed kernel is distinct (the entries' heads and options differ where the kernels read
# them): all compiled on the first run.
expect_eq "first run: compiled" "$n" "$(summary compiled first.out)" first.out
expect_eq "first run: failed" 0 "$(summary failed first.out)" first.out
echo "TIMING: default manifest, $n kernels, --jobs 2: first run $(summary seconds first.out) s"

run second 0 "$TOOL" prewarm --jobs 2
expect_eq "second run: cached" "$n" "$(summary cached second.out)" second.out
echo "TIMING: default manifest, $n kernels, --jobs 2: second run $(summary seconds second.out) s"

run print 0 "$TOOL" prewarm --print-default
run fromfile 0 "$TOOL" prewarm --jobs 2 print.out
expect_eq "printed default manifest: kernels" "$n" "$(summary kernels fromfile.out)" fromfile.out
expect_eq "printed default manifest: cached" "$n" "$(summary cached fromfile.out)" fromfile.out
expect_eq "cache ls entries" "$n" "$(cache_entries "$SSMJIT_CACHE_DIR")"
echo "PASS"
