#!/usr/bin/env bash
# Installs the dependencies (Debian packages) and builds into ./build (Release with debug info).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j"$(nproc)"
