#!/usr/bin/env bash
# tests/cli/reduce.sh -- the reductions of ir/lib_reduce.c in compiled code: a graph using
# every one of them (f32, f64 and i32, whose inputs in [-4, 4] have many ties for argmax and
# argmin) is compiled with `kiln compile` and `kiln run --check` compares each output with
# the reference interpreter, on a fresh random seed (printed) and seed 0.
#   bash tests/cli/reduce.sh PATH_TO_KILN
set -u
KILN=${1:?usage: reduce.sh PATH_TO_KILN}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
seed=${SEED:-$((RANDOM * 32768 + RANDOM))}
echo "seed $seed (replay with SEED=$seed)"

for dt in f32 f64 i32; do
    {
        echo "input x: $dt[3, 7, 5]"
        echo "a = reduce_sum(x, axes=[0, -1], keepdims=0)"
        echo "b = reduce_max(x)"
        echo "c = reduce_min(x, axes=1)"
        echo "d = reduce_prod(x, axes=[0, 2])"
        echo "e = argmax(x, axis=1)"
        echo "f = argmin(x, axis=-1, keepdims=0, select_last_index=1)"
        echo "g = argmax(x, axis=0, keepdims=0, select_last_index=1)"
        echo "h = cumsum(x, axis=1, exclusive=1)"
        echo "k = cumsum(x, axis=2, reverse=1)"
        echo "m = reduce_max(x, keepdims=0)"
        if [ "$dt" != i32 ]; then
            echo "n = reduce_mean(x, axes=[1, 2])"
        fi
        for o in a b c d e f g h k m; do echo "output $o"; done
        if [ "$dt" != i32 ]; then echo "output n"; fi
    } >"$T/r_$dt.kg"
    if ! "$KILN" compile "$T/r_$dt.kg" -o "$T/r_$dt.so" >"$T/out" 2>&1; then
        echo "FAIL: compile $dt: $(tail -3 "$T/out")" >&2
        fails=$((fails + 1))
        continue
    fi
    for s in 0 "$seed"; do
        if ! "$KILN" run "$T/r_$dt.so" --check --seed "$s" >"$T/out" 2>&1; then
            echo "FAIL: run --check $dt seed $s:" >&2
            grep -v PASS "$T/out" | tail -8 >&2
            fails=$((fails + 1))
        fi
    done
done

if [ "$fails" -ne 0 ]; then
    echo "$fails failure(s)" >&2
    exit 1
fi
echo "reduce: all passed"
