# The embedded default manifest: prewarm compiles it all, a second run finds it all cached, and
# --print-default prints a manifest that reads back to the same kernels.
source "$(dirname "$0")/lib.sh"

run first 0 "$TOOL" prewarm --jobs 2
n=$(summary kernels first.out)
[ "$n" -ge 30 ] && [ "$n" -le 60 ] || fail "default manifest: expected 30-60 kernels, got $n"
expect_eq "first run: compiled" "$n" "$(summary compiled first.out)" first.out
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
