#!/usr/bin/env bash
# scripts/train_costmodel.sh -- measures the cost model's corpus and trains the shipped model.
#
# Writes the corpus (tuner/model/corpus.py: one .kg workload per file), tunes each workload
# with `kiln tune` into one records database (one run per workload; the database resumes, so an
# interrupted run continues where it stopped and a finished workload is skipped), then trains
# the cost model on every record with `kiln costmodel train`. With --holdout P it also trains on
# the workloads outside a P% held-out share and evaluates on the held-out ones
# (`kiln costmodel eval --holdout P`), which is how transfer to unseen workloads is measured.
#
# usage: scripts/train_costmodel.sh [--kiln PATH] [--trials N] [--threads T] [--db FILE]
#            [--corpus DIR] [-o FILE] [--seed S] [--holdout P] [--tune-only] [--train-only]
#   --kiln     the kiln binary (default build/kiln)
#   --trials   programs measured per workload (default 64)
#   --threads  threads of the measured programs (default 2)
#   --db       the records database (default build/costmodel/corpus.db)
#   --corpus   where the .kg files are written (default build/costmodel/corpus)
#   -o         the model file (default tuner/model/cpu.kcm)
#   --holdout  also report transfer to a held-out P% of the workloads (default 0: no)
# KILN_TUNE_PREFIX (environment): a command put before each `kiln tune` (e.g. `nice -n 10`).
set -euo pipefail
cd "$(dirname "$0")/.."

kiln=build/kiln trials=64 threads=2 db=build/costmodel/corpus.db corpus=build/costmodel/corpus
out=tuner/model/cpu.kcm seed=1 holdout=0 tune=1 train=1
usage() { sed -n '/^# usage/,/^# KILN_TUNE/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
    --kiln) kiln=$2; shift 2 ;;
    --trials) trials=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --db) db=$2; shift 2 ;;
    --corpus) corpus=$2; shift 2 ;;
    -o) out=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --holdout) holdout=$2; shift 2 ;;
    --tune-only) train=0; shift ;;
    --train-only) tune=0; shift ;;
    -h | --help) usage ;;
    *) echo "train_costmodel.sh: unknown option '$1'" >&2; usage ;;
    esac
done
[ -x "$kiln" ] || { echo "train_costmodel.sh: no kiln binary at $kiln (build first)" >&2; exit 1; }
read -r -a prefix <<< "${KILN_TUNE_PREFIX:-}"

mkdir -p "$corpus" "$(dirname "$db")"
mapfile -t files < <(/usr/bin/python3 tuner/model/corpus.py "$corpus")

if [ "$tune" = 1 ]; then
    i=0
    for f in "${files[@]}"; do
        i=$((i + 1))
        echo "== [$i/${#files[@]}] $(basename "$f" .kg)"
        "${prefix[@]}" "$kiln" tune "$f" --trials "$trials" --threads "$threads" --seed "$seed" \
            --db "$db" --quiet
    done
fi

if [ "$train" = 1 ]; then
    if [ "$holdout" != 0 ]; then
        held=$(mktemp "${TMPDIR:-/tmp}/kiln_holdout_XXXXXX.kcm")
        trap 'rm -f "$held"' EXIT
        echo "== transfer: trained without the held-out $holdout% of the workloads"
        "$kiln" costmodel train "$db" -o "$held" --seed "$seed" --holdout "$holdout"
        "$kiln" costmodel eval "$held" "$db" --holdout "$holdout"
    fi
    echo "== the model: every workload"
    "$kiln" costmodel train "$db" -o "$out" --seed "$seed"
fi
