# SSMJIT_RECORD: a workload (demo, without a GPU) records the specialisations it uses; prewarm of
# that file into a fresh cache compiles exactly those, and the workload then loads them all from it.
source "$(dirname "$0")/lib.sh"

SSMJIT_RECORD=$WORK/rec.jsonl SSMJIT_CACHE_DIR=$WORK/A run demo1 0 "$TOOL" demo --no-gpu --seed 1
[ -s rec.jsonl ] || fail "demo with SSMJIT_RECORD wrote nothing to rec.jsonl"
n=$(sort -u rec.jsonl | grep -c .)
echo "ok: rec.jsonl has $n distinct specialisations"

SSMJIT_CACHE_DIR=$WORK/B run prewarm 0 "$TOOL" prewarm --jobs 2 rec.jsonl
expect_eq "prewarm of the recording: kernels" "$n" "$(summary kernels prewarm.out)" prewarm.out
expect_eq "prewarm of the recording: compiled" "$n" "$(summary compiled prewarm.out)" prewarm.out

SSMJIT_CACHE_DIR=$WORK/B run demo2 0 "$TOOL" demo --no-gpu --seed 1
expect_eq "demo after prewarm: kernels loaded from the disk cache" "$n" \
  "$(grep -c 'loaded from the disk cache' demo2.out || true)" demo2.out
expect_eq "demo after prewarm: kernels compiled" 0 "$(grep -c 'compiled in' demo2.out || true)" demo2.out
echo "PASS"
