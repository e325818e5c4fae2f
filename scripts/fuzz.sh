#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) with clang and ASan/UBSan and runs each for a while;
# fails on any crash, leak, sanitizer report or broken round trip, printing the input that did it.
#   scripts/fuzz.sh [SECONDS_PER_TARGET=20] [BUILD_DIR=build/fuzz] [TARGET...]
# targets: blob manifest safetensors
# Everything (binaries, seeds, the growing corpus, logs, crash inputs) lives in BUILD_DIR/TARGET/, so
# targets can run in parallel; the corpus persists between runs. FUZZ_CXX overrides clang++.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
secs="${1:-20}"
build="${2:-$root/build/fuzz}"
shift $(($# < 2 ? $# : 2))
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(blob manifest safetensors)

die() { echo "fuzz.sh: $*" >&2; exit 1; }
[[ "$secs" =~ ^[0-9]+$ && "$secs" -gt 0 ]] || die "SECONDS_PER_TARGET must be a positive integer, got '$secs'"
CXX="${FUZZ_CXX:-clang++}"
command -v "$CXX" >/dev/null ||
  die "$CXX not found: install clang and libclang-rt-14-dev (scripts/install-deps.sh)"
flags=(-std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -I"$root" -I"$root/compiler/include" -I"$root/runtime/include")
# Each target links only what it tests.
declare -A sources=(
  [blob]="cache/Blob.cpp compiler/Hash.cpp"
  [manifest]="cache/Manifest.cpp compiler/Specialization.cpp compiler/Hash.cpp"
  [safetensors]="runtime/model/Safetensors.cpp runtime/Tensor.cpp"
)
for t in "${targets[@]}"; do
  [ -n "${sources[$t]+x}" ] || die "unknown target '$t' (known: ${!sources[*]})"
done
headers=(cache/Blob.h cache/Manifest.h compiler/CompiledKernel.h compiler/Specialization.h compiler/Hash.h
         runtime/include/ssmjit/error.h runtime/model/Safetensors.h runtime/include/ssmjit/tensor.h)
mkdir -p "$build"
build="$(cd "$build" && pwd)"

# True when $1 is missing or older than any of the other files (paths relative to the repo root).
stale() {
  local out="$1" f
  shift
  [ -e "$out" ] || return 0
  for f in "$@" "${headers[@]}" scripts/fuzz.sh; do [ "$root/$f" -nt "$out" ] && return 0; done
  return 1
}

build_target() {
  local t="$1" dir="$build/$1" src
  read -r -a src <<<"${sources[$t]}"
  local bin="$dir/fuzz_$t" seeder="$dir/make_seeds"
  if stale "$bin" "tests/fuzz/fuzz_$t.cpp" "${src[@]}"; then
    echo "fuzz.sh: building $bin"
    "$CXX" "${flags[@]}" "$root/tests/fuzz/fuzz_$t.cpp" "${src[@]/#/$root/}" -o "$bin.tmp" || return 1
    mv "$bin.tmp" "$bin"
  fi
  if stale "$seeder" tests/fuzz/make_seeds.cpp cache/Blob.cpp compiler/Hash.cpp; then
    "$CXX" -std=c++17 -O1 -I"$root" -I"$root/compiler/include" -I"$root/runtime/include" "$root/tests/fuzz/make_seeds.cpp" \
      "$root/cache/Blob.cpp" "$root/compiler/Hash.cpp" -o "$seeder.tmp" || return 1
    mv "$seeder.tmp" "$seeder"
  fi
}

# libFuzzer must link: say so plainly rather than with a linker error.
probe="$(mktemp -d "$build/.probe.XXXXXX")"  # its own: fuzz tests may start side by side
trap 'rm -rf "$probe"' EXIT
echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }' >"$probe/p.cpp"
"$CXX" -fsanitize=fuzzer "$probe/p.cpp" -o "$probe/p" 2>"$probe/log" ||
  die "$CXX cannot link libFuzzer (install libclang-rt-14-dev): $(head -c 400 "$probe/log")"

export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}"
failed=0
for t in "${targets[@]}"; do
  dir="$build/$t"
  mkdir -p "$dir/corpus" "$dir/seeds" "$dir/crashes"
  build_target "$t" || die "$t: build failed"
  rm -rf "$dir/seeds" && mkdir -p "$dir/seeds"
  args=()
  if [ "$t" = manifest ]; then
    "$dir/make_seeds" manifest "$dir/seeds" "$dir/manifest.dict"
    cp "$root/tools/default_manifest.json" "$dir/seeds/"
    args+=(-dict="$dir/manifest.dict")
  elif [ "$t" = safetensors ]; then
    "$dir/make_seeds" safetensors "$dir/seeds" "$dir/safetensors.dict"
    args+=(-dict="$dir/safetensors.dict")
  else
    "$dir/make_seeds" blob "$dir/seeds"
  fi
  log="$dir/fuzz.log"
  start=$SECONDS
  rc=0
  # The first directory is the corpus libFuzzer adds to; the seeds are read only.
  "$dir/fuzz_$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=8192 -print_final_stats=1 \
    -artifact_prefix="$dir/crashes/" "${args[@]}" "$dir/corpus" "$dir/seeds" >"$log" 2>&1 || rc=$?
  took=$((SECONDS - start))
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
  cov="$(grep -Eo 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+' "$log" | tail -1 || true)"
  if [ "$rc" -ne 0 ]; then
    failed=1
    echo "fuzz.sh: $t: FAILED (exit $rc) after ${took}s; log: $log" >&2
    tail -n 40 "$log" >&2
    sed -n 's/.*Test unit written to //p' "$log" | sort -u | while read -r f; do
      echo "fuzz.sh: reproduce: $dir/fuzz_$t $f" >&2
    done
  else
    echo "fuzz.sh: $t: ok: ${execs:-?} execs in ${took}s, ${cov:-no coverage line} (corpus $dir/corpus)"
  fi
done
exit "$failed"
