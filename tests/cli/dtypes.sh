#!/usr/bin/env bash
# tests/cli/dtypes.sh -- the integer dtypes u8, u16, u32, u64 and i16 in compiled code and in
# .npy files. For each, a graph with wrapping arithmetic, unsigned (or signed) compares,
# floordiv/floormod, min/max, casts to and from f32, f64, i64 and i8 (float -> int saturates),
# reductions, argmax/argmin and max_pool2d is compiled with `kiln compile`, and `kiln run --check` compares
# every output with the reference interpreter on seed 0 and a fresh random seed (printed).
# Then the .npy side: `kiln eval --save-inputs` writes each argument in its own dtype (read
# back by NumPy: dtype and values), `--inputs` replays them to the same outputs, and arrays
# NumPy writes in these dtypes are read (the NumPy part is skipped without numpy). Last, f16 and
# bf16 (computed in f32 by the LLVM backend) compiled and checked the same way.
#   bash tests/cli/dtypes.sh PATH_TO_KILN
set -u
KILN=${1:?usage: dtypes.sh PATH_TO_KILN}
PY=${KILN_PYTHON:-/usr/bin/python3}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
seed=${SEED:-$((RANDOM * 32768 + RANDOM))}
echo "seed $seed (replay with SEED=$seed)"

for dt in u8 u16 u32 u64 i16; do
    # random inputs: unsigned in [0, 8], i16 in [-4, 4]; the subtractions wrap below zero.
    # argmax/argmin read the inputs themselves: the interpreter holds u64 values above 2^53
    # rounded (as i64), which would make ties of distinct values there.
    cat >"$T/d_$dt.kg" <<EOF
input a: $dt[4, 33]
input b: $dt[4, 33]
input f: f32[4, 33]
input q: $dt[1, 2, 6, 6]
x[i, j] = a[i, j] * b[i, j] - a[i, j] + $dt(7)
y[i, j] = select(a[i, j] < b[i, j], (a[i, j] - b[i, j]) // (b[i, j] * b[i, j] + $dt(1)), a[i, j] % (b[i, j] * b[i, j] + $dt(1)))
z[i, j] = max(a[i, j] - b[i, j], b[i, j]) + min(a[i, j] - $dt(5), b[i, j])
c[i, j] = f32(a[i, j] - b[i, j]) + f[i, j]
d[i, j] = $dt(f[i, j] * 300.0) + $dt(i64(a[i, j]) - 6) + $dt(f64(b[i, j]) * 1.5)
e[i, j] = i8(a[i, j] - b[i, j]) + i8(a[i, j] <= b[i, j])
s = reduce_sum(x, axes=[1])
m = reduce_max(z, axes=[0])
n = reduce_min(z, axes=[1])
k = argmax(a, axis=1)
l = argmin(b, axis=0, keepdims=0)
p = max_pool2d(q, kernel=3, stride=2, padding=1)
output x
output y
output z
output c
output d
output e
output s
output m
output n
output k
output l
output p
EOF
    if ! "$KILN" compile "$T/d_$dt.kg" -o "$T/d_$dt.so" >"$T/out" 2>&1; then
        echo "FAIL: compile $dt: $(tail -3 "$T/out")" >&2
        fails=$((fails + 1))
        continue
    fi
    for s in 0 "$seed"; do
        if ! "$KILN" run "$T/d_$dt.so" --check --seed "$s" >"$T/out" 2>&1; then
            echo "FAIL: run --check $dt seed $s:" >&2
            grep -v PASS "$T/out" | tail -8 >&2
            fails=$((fails + 1))
        fi
    done
    # --save-inputs + --inputs replays the run exactly
    if ! "$KILN" eval "$T/d_$dt.kg" --seed "$seed" --out "$T/o_$dt" --save-inputs >"$T/e1" 2>&1 \
        || ! "$KILN" eval "$T/d_$dt.kg" --inputs "$T/o_$dt" >"$T/e2" 2>&1 \
        || ! diff <(grep -v '^inputs' "$T/e1") <(grep -v '^inputs' "$T/e2") >/dev/null; then
        echo "FAIL: $dt: --save-inputs/--inputs did not replay the run" >&2
        fails=$((fails + 1))
    fi
done

# f16 and bf16 in compiled code: stored as half / bf16 bits, computed in f32, rounded by casts
# and stores (the interpreters round there too)
for dt in f16 bf16; do
    cat >"$T/h_$dt.kg" <<EOF
input a: $dt[4, 37]
input b: $dt[4, 37]
input c: f32[4, 37]
x[i, j] = a[i, j] * b[i, j] + a[i, j]
y[i, j] = f32(a[i, j]) * c[i, j] + f32(x[i, j])
z[i, j] = $dt(c[i, j] * 3.0) - b[i, j]
w[i, j] = select(a[i, j] < b[i, j], exp(a[i, j]), max(a[i, j], b[i, j]))
n[i, j] = i32(a[i, j] * $dt(10.0)) + i32(f64(b[i, j]) * 100.0)
s = reduce_sum(x, axes=[1])
m = reduce_max(z, axes=[0])
k = argmax(b, axis=1)
output x
output y
output z
output w
output n
output s
output m
output k
EOF
    if ! "$KILN" compile "$T/h_$dt.kg" -o "$T/h_$dt.so" >"$T/out" 2>&1; then
        echo "FAIL: compile $dt: $(tail -3 "$T/out")" >&2
        fails=$((fails + 1))
        continue
    fi
    for s in 0 "$seed"; do
        if ! "$KILN" run "$T/h_$dt.so" --check --seed "$s" >"$T/out" 2>&1; then
            echo "FAIL: run --check $dt seed $s:" >&2
            grep -v PASS "$T/out" | tail -8 >&2
            fails=$((fails + 1))
        fi
    done
done

if "$PY" -c 'import numpy' 2>/dev/null; then
    # the saved inputs have the arguments' dtypes; NumPy-written arrays of every new dtype are
    # read exactly (values at the ends of each range), and out-of-range values are refused
    if ! "$PY" - "$T" <<'PYEOF'; then
import sys
import numpy as np
d = sys.argv[1]
for dt, npdt in [("u8", np.uint8), ("u16", np.uint16), ("u32", np.uint32), ("u64", np.uint64),
                 ("i16", np.int16)]:
    a = np.load(f"{d}/o_{dt}/a.npy")
    assert a.dtype == npdt, (dt, a.dtype)
    assert a.shape == (4, 33) and a.min() >= (0 if dt[0] == "u" else -4) and a.max() <= 8
    assert np.load(f"{d}/o_{dt}/f.npy").dtype == np.float64  # float arguments: float64
    info = np.iinfo(npdt)
    hi = info.max if dt != "u64" else 2**64 - 2048  # the largest u64 a double holds exactly
    v = np.array([[info.min, 1, hi - 1 if dt != "u64" else 2**63, hi]], dtype=npdt)
    np.save(f"{d}/v_{dt}.npy", v)
    with open(f"{d}/v_{dt}.kg", "w") as f:
        f.write(f"input v: {dt}[1, 4]\ny[i, j] = v[i, j]\noutput y\n")
    import os
    os.makedirs(f"{d}/v_{dt}", exist_ok=True)
    os.rename(f"{d}/v_{dt}.npy", f"{d}/v_{dt}/v.npy")
PYEOF
        echo "FAIL: numpy check of the saved inputs" >&2
        fails=$((fails + 1))
    fi
    for dt in u8 u16 u32 u64 i16; do
        if ! "$KILN" eval "$T/v_$dt.kg" --inputs "$T/v_$dt" --out "$T/w_$dt" --save-inputs \
            >"$T/out" 2>&1; then
            echo "FAIL: $dt: reading a NumPy array: $(tail -2 "$T/out")" >&2
            fails=$((fails + 1))
            continue
        fi
        if ! "$PY" - "$T" "$dt" <<'PYEOF'; then
import sys
import numpy as np
d, dt = sys.argv[1], sys.argv[2]
v, w = np.load(f"{d}/v_{dt}/v.npy"), np.load(f"{d}/w_{dt}/v.npy")
assert w.dtype == v.dtype and (w == v).all(), (v, w)
y = np.load(f"{d}/w_{dt}/y.npy")
assert (y == v.astype(np.float64)).all(), (v, y)
PYEOF
            echo "FAIL: $dt: .npy round trip" >&2
            fails=$((fails + 1))
        fi
    done
    # a value outside the argument's dtype is refused, naming the element
    "$PY" -c "import numpy as np; np.save('$T/v_u8/v.npy', np.array([[0, 1, 2, 256]], dtype=np.uint16))"
    if "$KILN" eval "$T/v_u8.kg" --inputs "$T/v_u8" >"$T/out" 2>&1 \
        || ! grep -q "256" "$T/out"; then
        echo "FAIL: a u16 value 256 for a u8 argument was not refused: $(cat "$T/out")" >&2
        fails=$((fails + 1))
    fi
else
    echo "numpy checks skipped (no numpy in $PY)"
fi

if [ "$fails" -ne 0 ]; then
    echo "$fails failure(s)" >&2
    exit 1
fi
echo "dtypes: all passed"
