#!/usr/bin/env bash
# Writes the CUDA C++ of every kernel variant the CPU tests and the default pre-warm manifest
# generate into DIR (one file a specialisation, SSMJIT_DUMP_DIR), so that a refactoring can show
# that the generated code did not change:
#   scripts/generated-cuda.sh DIR [BUILD]     (BUILD defaults to ./build, already built)
#   scripts/generated-cuda.sh --compare OLD NEW
# --compare reports specialisations only in one of the two and those whose source differs beyond
# its first line (which names the build id and the bindings); it exits non-zero on any difference.
set -euo pipefail
if [ "${1:-}" = "--compare" ]; then
  # A file's name hashes its specialisation's canonical string (line 1), whose bindings follow the
  # binding order: specialisations are matched by kernel, arch and sorted bindings instead.
  exec python3 - "$2" "$3" <<'PY'
import os, sys
def load(d):
    out = {}
    for f in sorted(os.listdir(d)):
        with open(os.path.join(d, f)) as fh:
            first, body = fh.readline(), fh.read()
        parts = first.split(': ', 1)[-1].strip().split(';')
        out[';'.join(parts[:2] + sorted(parts[2:]))] = (f, body)
    return out
old, new = load(sys.argv[1]), load(sys.argv[2])
for k in sorted(old.keys() - new.keys()): print('only in old:', old[k][0])
for k in sorted(new.keys() - old.keys()): print('only in new:', new[k][0])
common = sorted(old.keys() & new.keys())
differ = [k for k in common if old[k][1] != new[k][1]]
for k in differ: print('differs:', old[k][0], new[k][0])
print(f'generated-cuda: {len(common) - len(differ)} of {len(common)} common specialisations identical')
sys.exit(1 if differ or old.keys() != new.keys() else 0)
PY
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
