#!/usr/bin/env bash
# scripts/build.sh [BUILD_DIR] [extra cmake args...] -- configures and builds kiln.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
cmake -S . -B "$dir" -G Ninja -DKILN_WERROR=ON "$@" >/dev/null
cmake --build "$dir"
