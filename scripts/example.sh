#!/usr/bin/env bash
# scripts/example.sh -- README's first command: sets up a fresh machine, builds kiln, and runs
# its main job on a bundled example (default: the ResNet basic block): inspect the graph,
# evaluate it with the reference interpreter, compile it untuned (each task's schedule predicted
# by the cost model shipped in the library, nothing measured) and run it
# (checked against the interpreter, timed), then autotune it with a small budget
# (KILN_EXAMPLE_TRIALS, default 48), list the records, and compile and run the tuned version.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh build
ex=${1:-examples/resnet_block.kg}
out=${TMPDIR:-/tmp}/kiln_example_$$.so
db=${TMPDIR:-/tmp}/kiln_example_$$.db
trap 'rm -f "$out" "$db" "$db-wal" "$db-shm"' EXIT
./build/kiln inspect "$ex"
./build/kiln eval "$ex" --seed 1
echo "== untuned (schedules predicted by the shipped cost model)"
./build/kiln compile "$ex" --no-db -o "$out"
./build/kiln run "$out" --check --bench
echo "== autotuning"
./build/kiln tune "$ex" --trials "${KILN_EXAMPLE_TRIALS:-48}" --batch 8 --db "$db"
./build/kiln records "$db"
echo "== tuned"
./build/kiln compile "$ex" --db "$db" -o "$out"
./build/kiln run "$out" --check --bench
