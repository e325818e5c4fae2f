#!/usr/bin/env bash
# Installs, builds and runs every test. Without a GPU the gpu-labelled tests are reported as
# skipped, each with the reason; with one they run.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
ctest --test-dir build --output-on-failure -j"$(nproc)"
