#!/usr/bin/env bash
# scripts/test.sh -- README's test command: sets up a fresh machine, builds kiln with warnings
# as errors and runs the whole test suite (C unit/property tests, CLI tests, NumPy/PyTorch
# oracle tests).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh build
ctest --test-dir build --output-on-failure -j"$(nproc)"
