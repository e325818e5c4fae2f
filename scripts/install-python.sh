#!/usr/bin/env bash
# Makes .venv (PYTHON, default python3) with torch and pytest from PyPI and installs the Python
# package ssmjit into it (`pip install .`: scikit-build-core runs the project's CMake in build-py/),
# so that CTest's python_package test runs the package's CPU tests instead of skipping.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || "${PYTHON:-python3}" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q torch pytest
export CCACHE_BASEDIR="$PWD"
CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" .venv/bin/python -m pip install -q .
