#!/usr/bin/env bash
# Installs, builds and runs every test, the Python package's included. Without a GPU the
# gpu-labelled tests are reported as skipped, each with the reason; with one they run.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build.sh
./scripts/install-python.sh
ctest --test-dir build --output-on-failure -j"$(nproc)"
