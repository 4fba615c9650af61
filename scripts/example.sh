#!/usr/bin/env bash
# scripts/example.sh -- README's first command: sets up a fresh machine, builds kiln, and runs
# its main job on a bundled example (default: the ResNet basic block): inspect the graph,
# evaluate it with the reference interpreter, compile it to a shared object, then run that
# object, checking it against the interpreter and timing it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh build
ex=${1:-examples/resnet_block.kg}
out=${TMPDIR:-/tmp}/kiln_example_$$.so
trap 'rm -f "$out"' EXIT
./build/kiln inspect "$ex"
./build/kiln eval "$ex" --seed 1
./build/kiln compile "$ex" -o "$out"
./build/kiln run "$out" --check --bench
