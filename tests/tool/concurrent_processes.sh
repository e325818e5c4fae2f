# Eight prewarm processes at once into one cache directory: all succeed, the cache holds exactly
# the 20 kernels, every blob verifies, no temp file is left, and a ninth run finds all 20 cached.
source "$(dirname "$0")/lib.sh"

: >m20.json  # JSON Lines: 16 one-token and 4 two-token kernels, all distinct
for h in 2 4; do for n in 8 16; do for st in fp32 bf16; do for in in fp32 bf16; do
  echo "{\"op\": \"ssu\", \"heads\": $h, \"head-dim\": 8, \"dstate\": $n, \"batch\": 2, \"state-dtype\": \"$st\", \"input-dtype\": \"$in\", \"archs\": [\"sm_80\"]}" >>m20.json
done; done; done; done
for st in fp32 bf16; do for in in fp32 bf16; do
  echo "{\"op\": \"ssu-tokens\", \"tokens\": 2, \"heads\": 2, \"head-dim\": 8, \"dstate\": 8, \"batch\": 2, \"state-dtype\": \"$st\", \"input-dtype\": \"$in\", \"archs\": [\"sm_80\"]}" >>m20.json
done; done

pids=()
for i in 1 2 3 4 5 6 7 8; do
  "$TOOL" prewarm --jobs 1 --quiet m20.json >"p$i.out" 2>"p$i.err" &
  pids+=($!)
done
for i in 1 2 3 4 5 6 7 8; do
  rc=0
  wait "${pids[$((i - 1))]}" || rc=$?
  [ "$rc" = 0 ] || { cat "p$i.out" "p$i.err" >&2; fail "prewarm process $i exited $rc, expected 0"; }
  expect_eq "process $i: kernels" 20 "$(summary kernels "p$i.out")" "p$i.out"
done

run verify 0 "$TOOL" cache verify --dir "$SSMJIT_CACHE_DIR"
expect_eq "cache ls entries" 20 "$(cache_entries "$SSMJIT_CACHE_DIR")"
stray=$(find "$SSMJIT_CACHE_DIR" -mindepth 1 \( -name '.tmp*' -o ! -name '*.sjk' \) -print)
expect_eq "files in the cache directory other than blobs" "" "$stray"

run ninth 0 "$TOOL" prewarm --jobs 2 --quiet m20.json
expect_eq "ninth run: cached" 20 "$(summary cached ninth.out)" ninth.out
echo "PASS"
