# Shared by the tool tests (sourced): the tool under test, a fresh work directory with its own
# cache, no recording, and checks that print what they expected and what came.
#   usage: bash <test>.sh <path of ssmjit> <work directory (wiped)>
set -euo pipefail
TOOL=$(realpath "$1")
WORK=$2
rm -rf "$WORK"
mkdir -p "$WORK"
cd "$WORK"
export SSMJIT_CACHE_DIR=$WORK/cache
unset SSMJIT_RECORD SSMJIT_ALWAYS_COMPILE SSMJIT_CACHE_MAX_BYTES SSMJIT_NVRTC_OPTIONS SSMJIT_FORCE_PTX

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# run NAME RC CMD...: runs CMD with stdout in NAME.out and stderr in NAME.err; fails with both
# shown unless it exits RC.
run() {
  local name=$1 want=$2
  shift 2
  local rc=0
  "$@" >"$name.out" 2>"$name.err" || rc=$?
  if [ "$rc" != "$want" ]; then
    echo "FAIL: '$*' exited $rc, expected $want" >&2
    echo "--- stdout:" >&2; cat "$name.out" >&2
    echo "--- stderr:" >&2; cat "$name.err" >&2
    exit 1
  fi
}

# expect_eq WHAT EXPECTED ACTUAL [FILE shown on failure]
expect_eq() {
  if [ "$2" != "$3" ]; then
    echo "FAIL: $1: expected '$2', got '$3'" >&2
    [ $# -ge 4 ] && { echo "--- $4:" >&2; cat "$4" >&2; }
    exit 1
  fi
  echo "ok: $1 = $3"
}

# expect_grep WHAT PATTERN FILE: FILE has a line matching PATTERN (extended regex).
expect_grep() {
  grep -Eq -- "$2" "$3" || { echo "FAIL: $1: no line matching '$2' in $3:" >&2; cat "$3" >&2; exit 1; }
  echo "ok: $1"
}

# summary FIELD FILE: a number of prewarm's summary line
#   "prewarm: N kernels: C compiled, H cached, F failed in X s with J jobs (S s summed over the
#   kernels, the longest T s); cache ..."
# FIELD: kernels, compiled, cached, failed or seconds.
summary() {
  local line
  line=$(grep -E '^prewarm: [0-9]+ kernels?: ' "$2" || true)
  [ -n "$line" ] || { echo "FAIL: no prewarm summary line in $2:" >&2; cat "$2" >&2; exit 1; }
  case $1 in
    kernels) sed -E 's/^prewarm: ([0-9]+) kernel.*/\1/' <<<"$line" ;;
    compiled) sed -E 's/.* ([0-9]+) compiled,.*/\1/' <<<"$line" ;;
    cached) sed -E 's/.* ([0-9]+) cached,.*/\1/' <<<"$line" ;;
    failed) sed -E 's/.* ([0-9]+) failed in.*/\1/' <<<"$line" ;;
    seconds) sed -E 's/.* failed in ([0-9.]+) s .*/\1/' <<<"$line" ;;
  esac
}

# rows RESULT FILE: table rows of prewarm whose result (the last column) is RESULT ("compiled",
# "cached (disk)").
rows() {
  grep -c -- "  $1\$" "$2" || true
}

# cache_entries DIR: the entry count `ssmjit cache ls` reports.
cache_entries() {
  "$TOOL" cache ls --dir "$1" >ls.out 2>ls.err || fail "cache ls --dir $1 exited $?: $(cat ls.err)"
  sed -nE 's/^([0-9]+) entr(y|ies), .*/\1/p' ls.out
}
