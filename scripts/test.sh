#!/usr/bin/env bash
# scripts/test.sh -- README's test command: sets up a fresh machine, builds kiln with warnings
# as errors and runs the whole test suite (C unit/property tests, CLI tests, NumPy/PyTorch
# oracle tests).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# PyTorch 2 from PyPI for the torch.compile backend's tests (KILN_TORCH=off: not installed, those
# tests skip); a failure fails CI (CI=true) and only warns elsewhere
if [ "${KILN_TORCH:-on}" != off ] && ! scripts/setup_torch.sh; then
  if [ "${CI:-}" = true ]; then exit 1; fi
  echo "test: warning: .venv-torch not built; the torch.compile tests will skip"
fi
scripts/build.sh build
ctest --test-dir build --output-on-failure -j"$(nproc)"
