#!/usr/bin/env bash
# Writes the CUDA C++ of every kernel variant the CPU tests and the default pre-warm manifest
# generate into DIR (one file a specialisation, SSMJIT_DUMP_DIR), so that a refactoring can show
# that the generated code did not change:
#   scripts/generated-cuda.sh DIR [BUILD]     (BUILD defaults to ./build, already built)
#   scripts/generated-cuda.sh --compare OLD NEW
# --compare reports specialisations only in one of the two and those whose source differs beyond
# its first line (which names the build id); it exits non-zero on any difference.
set -euo pipefail
if [ "${1:-}" = "--compare" ]; then
  old=$2 new=$3 status=0
  comm -23 <(ls "$old" | sort) <(ls "$new" | sort) | sed 's/^/only in old: /' | grep . && status=1
  comm -13 <(ls "$old" | sort) <(ls "$new" | sort) | sed 's/^/only in new: /' | grep . && status=1
  n=0 same=0
  for f in $(comm -12 <(ls "$old" | sort) <(ls "$new" | sort)); do
    n=$((n + 1))
    if cmp -s <(tail -n +2 "$old/$f") <(tail -n +2 "$new/$f"); then same=$((same + 1))
    else echo "differs: $f"; status=1; fi
  done
  echo "generated-cuda: $same of $n common specialisations identical"
  exit $status
fi
dir=$(realpath -m "${1:?usage: generated-cuda.sh DIR [BUILD] | --compare OLD NEW}")
build=$(realpath "${2:-build}")
mkdir -p "$dir"
cache=$(mktemp -d)
trap 'rm -rf "$cache"' EXIT
export SSMJIT_DUMP_DIR=$dir SSMJIT_CACHE_DIR=$cache
ctest --test-dir "$build" -LE gpu -j"$(nproc)" >"$dir.ctest.log" 2>&1 || echo "generated-cuda: some CPU tests failed (see $dir.ctest.log)" >&2
"$build/tools/ssmjit" prewarm --jobs "$(nproc)" >/dev/null
echo "generated-cuda: $(ls "$dir" | wc -l) specialisations in $dir"
