#!/usr/bin/env bash
# Installs every build and test dependency from Debian's packages. The CUDA 13 toolkit (NVRTC,
# headers) is expected at /usr/local/cuda, as on the project's machines.
set -euo pipefail
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
pkgs=(cmake ninja-build g++ ccache
      libmlir-22-dev mlir-22-tools llvm-22-dev libzstd-dev zlib1g-dev
      libfmt-dev libgtest-dev libgmock-dev libcli11-dev nlohmann-json3-dev libdlpack-dev
      clang libclang-rt-14-dev)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
if [ ! -x /usr/local/cuda/bin/nvcc ] && [ ! -f /usr/local/cuda/include/nvrtc.h ]; then
  echo "install-deps: the CUDA 13 toolkit (NVRTC, headers) was not found at /usr/local/cuda" >&2
  exit 1
fi
