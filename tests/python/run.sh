#!/usr/bin/env bash
# The Python package's tests under CTest: PYTHON (default: the repo's .venv) must have ssmjit and
# torch installed (`pip install .`, README "Using it from PyTorch"); without them the test is
# skipped with the reason (exit 77). Arguments go to pytest (CTest passes -m "not gpu").
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
python="${PYTHON:-$here/../../.venv/bin/python}"
if [[ ! -x "$python" ]]; then
  echo "SKIPPED: no Python at $python (set PYTHON, or make the .venv: README 'Using it from PyTorch')"
  exit 77
fi
if ! "$python" -c "import ssmjit.torch, pytest" 2>/dev/null; then
  echo "SKIPPED: $python lacks ssmjit, torch or pytest (pip install '.[test]' torch)"
  exit 77
fi
cd "$here"
exec "$python" -m pytest -p no:cacheprovider -q "$@" .
