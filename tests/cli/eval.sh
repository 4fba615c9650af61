#!/usr/bin/env bash
# tests/cli/eval.sh -- `kiln eval` and `kiln inspect` end to end: seeded runs are reproducible
# and seeds differ; --out writes .npy files NumPy loads with the right shape and values (the
# NumPy checks are skipped when /usr/bin/python3 has no numpy); --save-inputs + --inputs
# replays a run exactly; bad .npy inputs (missing, wrong shape, garbage, truncated, Fortran
# order, unsupported dtype, non-integral values for an integer argument) fail with exit 1 and
# a message naming the file and the problem; an out-of-bounds load at run time is reported
# with its location; inspect's numbers for a matmul are exact.
#   bash tests/cli/eval.sh PATH_TO_KILN
set -u
KILN=${1:?usage: eval.sh PATH_TO_KILN}
PY=/usr/bin/python3
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0

fail() {
    echo "FAIL: $*" >&2
    fails=$((fails + 1))
}

# expect RC STREAM PATTERN -- CMD...
expect() {
    local rc=$1 stream=$2 pat=$3
    shift 4
    "$@" >"$T/out" 2>"$T/err"
    local got=$?
    if [ "$got" != "$rc" ]; then
        fail "$*: exit $got, want $rc (stderr: $(head -c 300 "$T/err"))"
        return
    fi
    if ! grep -Eq -- "$pat" "$T/$stream"; then
        fail "$*: std$stream does not match '$pat': $(head -c 300 "$T/$stream")"
    fi
}

# mknpy FILE HEADER NBYTES [DATA]: a version 1.0 .npy file with the given header dict and
# NBYTES zero bytes of data, or DATA (a printf format) when given; the header is padded to 64
# bytes as NumPy does.
mknpy() {
    local f=$1 h=$2 n=$3 data=${4:-}
    local pad=$(((64 - (10 + ${#h} + 1) % 64) % 64))
    local hdr
    hdr="$h$(printf '%*s' "$pad" '')"
    local len=$((${#hdr} + 1))
    {
        printf '\x93NUMPY\x01\x00'
        printf "\\x$(printf %02x $((len & 255)))\\x$(printf %02x $((len >> 8)))"
        printf '%s\n' "$hdr"
        if [ -n "$data" ]; then
            printf "$data"
        else
            head -c "$n" /dev/zero
        fi
    } >"$f"
}

cat >"$T/g.kg" <<'KG'
input  a: f32[4, 8]
weight b: f32[8, 3]
input  n: i32[3]
C[i, j] += a[i, k] * b[k, j]
y = relu(C)
z[j] = i32(y[0, j] * 4.0) + n[j]
output y
output z
KG

# reproducible, and seeds differ
"$KILN" eval "$T/g.kg" --seed 7 >"$T/s7a" 2>&1 || fail "eval --seed 7: $(cat "$T/s7a")"
"$KILN" eval "$T/g.kg" --seed 7 >"$T/s7b" 2>&1 || fail "eval --seed 7 (again)"
"$KILN" eval "$T/g.kg" --seed 8 >"$T/s8" 2>&1 || fail "eval --seed 8"
"$KILN" eval "$T/g.kg" >"$T/s0" 2>&1 || fail "eval (default seed)"
"$KILN" eval "$T/g.kg" --seed 0 >"$T/s0b" 2>&1 || fail "eval --seed 0"
cmp -s "$T/s7a" "$T/s7b" || fail "two runs with --seed 7 differ"
cmp -s "$T/s7a" "$T/s8" && fail "--seed 7 and --seed 8 give the same output"
cmp -s "$T/s0" "$T/s0b" || fail "the default seed is not 0"
grep -Eq '^y  f32\[4, 3\]  sum=[-0-9.e+]+  l2=[0-9.e+]+  hash=[0-9a-f]{16}$' "$T/s7a" \
    || fail "output line for y: $(cat "$T/s7a")"
grep -Eq '^z  i32\[3\]  sum=-?[0-9]+  l2=' "$T/s7a" || fail "output line for z: $(cat "$T/s7a")"

# --out and --save-inputs write .npy files; --inputs replays them exactly
expect 0 out '^y ' -- "$KILN" eval "$T/g.kg" --seed 7 --out "$T/o/deep" --save-inputs
for f in y z a b n; do
    [ -s "$T/o/deep/$f.npy" ] || fail "--out/--save-inputs did not write $f.npy"
done
# each written beside its name and renamed into place: nothing else is left, and the mode is
# what the umask gives a new file
left=$(find "$T/o/deep" -type f ! -name '*.npy')
[ -z "$left" ] || fail "--out left temporary files: $left"
want=$(printf '%o' $((0666 & ~$(umask))))
got=$(stat -c %a "$T/o/deep/y.npy")
[ "$got" = "$want" ] || fail "y.npy has mode $got, want $want"
expect 0 out '^y ' -- "$KILN" eval "$T/g.kg" --inputs "$T/o/deep" --out "$T/o2"
sed 1d "$T/out" >"$T/replay"
sed 1d "$T/s7a" >"$T/orig"
cmp -s "$T/replay" "$T/orig" || fail "--inputs replay differs: $(cat "$T/replay") vs $(cat "$T/orig")"
cmp -s "$T/o/deep/y.npy" "$T/o2/y.npy" || fail "replayed y.npy differs"

if "$PY" -c 'import numpy' 2>/dev/null; then
    "$PY" - "$T/o/deep" <<'PYEOF' || fail "numpy check of the .npy files"
import sys
import numpy as np
d = sys.argv[1]
a, b, n = (np.load(f"{d}/{k}.npy") for k in "abn")
y, z = np.load(f"{d}/y.npy"), np.load(f"{d}/z.npy")
assert y.dtype == np.float64 and y.shape == (4, 3), (y.dtype, y.shape)
assert z.shape == (3,) and a.shape == (4, 8) and b.shape == (8, 3) and n.shape == (3,)
assert (a == a.astype(np.float32)).all(), "f32 inputs are rounded to f32"
assert ((-1 <= a) & (a < 1)).all() and set(np.unique(n)) <= set(range(-4, 5))
want = np.maximum(a @ b, 0)
assert np.allclose(y, want, rtol=1e-12, atol=1e-12), abs(y - want).max()
zw = np.trunc(y[0] * 4.0) + n
assert (z == zw).all(), (z, zw)
PYEOF
    # NumPy-written inputs of other dtypes are converted; ints must be integral
    "$PY" - "$T/np" <<'PYEOF' || fail "writing numpy inputs"
import os, sys
import numpy as np
d = sys.argv[1]
os.makedirs(d)
np.save(f"{d}/a.npy", np.arange(32, dtype=np.float64).reshape(4, 8) / 8)
np.save(f"{d}/b.npy", np.ones((8, 3), dtype=np.float16))
np.save(f"{d}/n.npy", np.array([1, -2, 3], dtype=np.int8))
os.makedirs(f"{d}/v23")  # format versions 2.0 and 3.0
np.save(f"{d}/v23/a.npy", np.zeros((4, 8), dtype=np.float32))
with open(f"{d}/v23/b.npy", "wb") as f:
    np.lib.format.write_array(f, np.full((8, 3), 0.5), version=(2, 0))
with open(f"{d}/v23/n.npy", "wb") as f:
    np.lib.format.write_array(f, np.array([7, 8, 9], dtype=np.int64), version=(3, 0))
os.makedirs(f"{d}/frac")
np.save(f"{d}/frac/a.npy", np.zeros((4, 8), dtype=np.float32))
np.save(f"{d}/frac/b.npy", np.zeros((8, 3), dtype=np.float32))
np.save(f"{d}/frac/n.npy", np.array([1.5, 0, 0]))
os.makedirs(f"{d}/fortran")
np.save(f"{d}/fortran/a.npy", np.asfortranarray(np.zeros((4, 8), dtype=np.float32)))
PYEOF
    expect 0 out '^y  f32\[4, 3\]  sum=' -- "$KILN" eval "$T/g.kg" --inputs "$T/np"
    expect 0 out '^z  i32\[3\]  sum=24  l2=' -- "$KILN" eval "$T/g.kg" --inputs "$T/np/v23"
    expect 1 err "frac/n.npy: element 0 is 1.5, which argument n \(i32\) cannot hold" -- \
        "$KILN" eval "$T/g.kg" --inputs "$T/np/frac"
    expect 1 err "fortran/a.npy: fortran_order is True; only C order is supported" -- \
        "$KILN" eval "$T/g.kg" --inputs "$T/np/fortran"
else
    echo "eval.sh: numpy missing, skipping the NumPy checks"
fi

# bad inputs: each names the file and the problem
mkdir -p "$T/bad"
cp "$T/o/deep/b.npy" "$T/o/deep/n.npy" "$T/bad/"
expect 1 err "^kiln: $T/bad/a.npy: No such file or directory" -- \
    "$KILN" eval "$T/g.kg" --inputs "$T/bad"
cp "$T/o/deep/b.npy" "$T/bad/a.npy"
expect 1 err "^kiln: $T/bad/a.npy: shape \[8, 3\] does not match argument a: f32\[4, 8\]" -- \
    "$KILN" eval "$T/g.kg" --inputs "$T/bad"
printf 'this is not an npy file at all\n' >"$T/bad/a.npy"
expect 1 err "^kiln: $T/bad/a.npy: not a .npy file" -- "$KILN" eval "$T/g.kg" --inputs "$T/bad"
head -c 200 "$T/o/deep/a.npy" >"$T/bad/a.npy"
expect 1 err "^kiln: $T/bad/a.npy: truncated data" -- "$KILN" eval "$T/g.kg" --inputs "$T/bad"
head -c 30 "$T/o/deep/a.npy" >"$T/bad/a.npy"
expect 1 err "^kiln: $T/bad/a.npy: truncated header" -- "$KILN" eval "$T/g.kg" --inputs "$T/bad"
: >"$T/bad/a.npy"
expect 1 err "^kiln: $T/bad/a.npy: not a .npy file" -- "$KILN" eval "$T/g.kg" --inputs "$T/bad"
mknpy "$T/bad/a.npy" "{'descr': '<f4', 'fortran_order': True, 'shape': (4, 8), }" 128
expect 1 err "fortran_order is True" -- "$KILN" eval "$T/g.kg" --inputs "$T/bad"
mknpy "$T/bad/a.npy" "{'descr': '<c16', 'fortran_order': False, 'shape': (4, 8), }" 512
expect 1 err "unsupported dtype '<c16'" -- "$KILN" eval "$T/g.kg" --inputs "$T/bad"
mknpy "$T/bad/a.npy" "{'descr': '>f4', 'fortran_order': False, 'shape': (4, 8), }" 128
expect 1 err "^kiln: $T/bad/a.npy: dtype '>f4' is big-endian; kiln reads little-endian .npy files only \\(convert with a.astype\\('<f4'\\)\\)" -- \
    "$KILN" eval "$T/g.kg" --inputs "$T/bad"
mknpy "$T/bad/a.npy" "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 8), }" 129
expect 1 err "1 bytes after the data" -- "$KILN" eval "$T/g.kg" --inputs "$T/bad"
mknpy "$T/bad/a.npy" "{'descr': '<f4', 'shape': (4, 8), }" 128
expect 1 err "missing key 'fortran_order'" -- "$KILN" eval "$T/g.kg" --inputs "$T/bad"
mknpy "$T/bad/a.npy" "{'descr': '<f4', 'fortran_order': False, 'shape': (4, -8), }" 128
expect 1 err "a.npy: header: shape holds something other than a non-negative integer" -- \
    "$KILN" eval "$T/g.kg" --inputs "$T/bad"
mknpy "$T/bad/a.npy" "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999, 99999999999), }" 0
expect 1 err "shape is too large" -- "$KILN" eval "$T/g.kg" --inputs "$T/bad"
mknpy "$T/bad/a.npy" "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 8), }" 128
expect 0 out '^y ' -- "$KILN" eval "$T/g.kg" --inputs "$T/bad" # zeros: fine
mknpy "$T/bad/n.npy" "{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }" 3
expect 0 out '^z ' -- "$KILN" eval "$T/g.kg" --inputs "$T/bad"
mknpy "$T/bad/n.npy" "{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }" 3 '\x01\x02\x00'
expect 1 err "n.npy: boolean element 1 holds the byte 2, not 0 or 1" -- \
    "$KILN" eval "$T/g.kg" --inputs "$T/bad"

# --out into something that is not a directory
: >"$T/file"
expect 1 err "^kiln: cannot create $T/file" -- "$KILN" eval "$T/g.kg" --out "$T/file"

# a load that can leave its tensor inside select: rejected before anything runs, by eval and
# by compile alike (compiled code would read past the tensor); bounded by the guard, accepted
cat >"$T/gather.kg" <<'KG'
input x: f32[3]
input idx: i32[5]
y[i] = select(idx[i] >= 0, x[i64(idx[i])], 0.0)
KG
for cmd in "eval $T/gather.kg --seed 5" "compile $T/gather.kg -o $T/gather.so"; do
  # shellcheck disable=SC2086
  expect 1 err "^kiln: $T/gather.kg:3:28: error: index idx\[i\] of x \(dimension 0\) ranges over \[0, 2147483647\], outside \[0, 2\]$" \
      -- "$KILN" $cmd
done
[ ! -e "$T/gather.so" ] || fail "compile wrote $T/gather.so for a rejected graph"
sed -i 's/idx\[i\] >= 0,/idx[i] >= 0 \&\& idx[i] < 3,/' "$T/gather.kg"
expect 0 out '^y +f32\[5\]' -- "$KILN" eval "$T/gather.kg" --seed 5
expect 0 err '^memory: ' -- "$KILN" compile "$T/gather.kg" -o "$T/gather.so"

# inspect: exact statistics of a matmul in JSON, and the text table
cat >"$T/mm.kg" <<'KG'
input  a: f32[64, 128]
weight b: f32[128, 32]
C[i, j] += a[i, k] * b[k, j]
output C
KG
expect 0 out '"flops": 524288, "bytes": 57344, "params": 4096' -- "$KILN" inspect --json "$T/mm.kg"
expect 0 out '^  C +compute +\[64, 32\] +f32 +524.3 kFLOP +56.0 KiB +4,096$' -- "$KILN" inspect "$T/mm.kg"
expect 0 out '^  total +524.3 kFLOP +56.0 KiB +4,096$' -- "$KILN" inspect "$T/mm.kg"
expect 0 out 'hash [0-9a-f]{16}' -- "$KILN" inspect "$T/mm.kg"
if "$PY" -c 'import json' 2>/dev/null; then
    "$KILN" inspect --json "$T/g.kg" | "$PY" -c '
import json, sys
d = json.load(sys.stdin)
assert [s["output"] for s in d["statements"]] == ["C", "y", "z"], d["statements"]
assert [a["name"] for a in d["arguments"]] == ["a", "b", "n"]
assert [a["kind"] for a in d["arguments"]] == ["input", "weight", "input"]
assert [o["name"] for o in d["outputs"]] == ["y", "z"]
assert d["total"]["params"] == 24 and len(d["hash"]) == 16
' || fail "inspect --json is not the expected JSON"
fi

if [ "$fails" -ne 0 ]; then
    echo "$fails failure(s)" >&2
    exit 1
fi
echo "eval.sh: all passed"
