#!/usr/bin/env bash
# scripts/example.sh -- README's first command: sets up a fresh machine, builds kiln, and runs
# its main job on a bundled example: inspect the ResNet basic block and evaluate it with the
# reference interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh build
ex=${1:-examples/resnet_block.kg}
./build/kiln inspect "$ex"
./build/kiln eval "$ex" --seed 1
