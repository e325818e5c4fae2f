#!/usr/bin/env bash
# The installed tree as a host program sees it: `cmake --install` into a fresh prefix, the example in
# examples/host_program configured with find_package(ssmjit) against it, built and run (without a
# GPU it says so and exits 0; with one it checks a decode step against the float64 reference), and
# libssmjit.so needing no LLVM/MLIR at run time.
set -euo pipefail
BUILD=$1 SRC=$2 WORK=$3
rm -rf "$WORK" && mkdir -p "$WORK"
cmake --install "$BUILD" --prefix "$WORK/prefix" > "$WORK/install.log"
cmake -S "$SRC/examples/host_program" -B "$WORK/example" -G Ninja -DCMAKE_PREFIX_PATH="$WORK/prefix" \
  > "$WORK/configure.log" || { cat "$WORK/configure.log"; exit 1; }
cmake --build "$WORK/example" > "$WORK/build.log" || { cat "$WORK/build.log"; exit 1; }
if ldd "$WORK/prefix/lib/libssmjit.so" | grep -Ei 'llvm|mlir'; then
  echo "FAIL: libssmjit.so needs LLVM/MLIR shared libraries at run time" >&2
  exit 1
fi
"$WORK/example/host_example"
echo PASS
