#!/usr/bin/env bash
# tests/cli/f32_overflow.sh -- an f32 result that overflows to inf is inf in the reference
# interpreter too: `kiln eval` prints inf, and a module compiled with the default schedule
# passes `kiln run --check` (a value an f32 tensor stores beyond the f32 range is inf in the
# interpreter as in compiled code), and a finite f32 result next to it still checks. The
# project's own tests/golden/print/literals.kg (1e300 * x in f32) checks too.
#   bash tests/cli/f32_overflow.sh PATH_TO_KILN
set -u
KILN=${1:?usage: f32_overflow.sh PATH_TO_KILN}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
fail() {
    echo "FAIL: $*" >&2
    fails=$((fails + 1))
}

# exp(min(x, 0) + 100) is at least exp(90) for any sane input: beyond f32 (3.4e38), finite in
# double; times 1e30 it is 2.7e73 in double and inf in f32.
cat >"$T/big.kg" <<'EOF'
input x: f32[16]
y[i] = exp(min(x[i], 0) + 100) * 1e30
z[i] = x[i] * 0.001
output y
output z
EOF

"$KILN" eval "$T/big.kg" --seed 1 >"$T/eval" 2>&1 || fail "kiln eval: $(cat "$T/eval")"
grep -q 'inf' "$T/eval" || fail "kiln eval does not print inf for y: $(head -c 300 "$T/eval")"

if "$KILN" compile "$T/big.kg" -o "$T/big.so" --no-db >"$T/compile" 2>&1; then
    "$KILN" run "$T/big.so" --check --seed 1 >"$T/run" 2>&1 \
        || fail "kiln run --check: $(cat "$T/run")"
    grep -q 'check y: .*PASS' "$T/run" || fail "no PASS for y: $(cat "$T/run")"
    grep -q 'check z: .*PASS' "$T/run" || fail "no PASS for z: $(cat "$T/run")"
else
    fail "kiln compile: $(cat "$T/compile")"
fi

cd "$(dirname "$0")/../.." || exit 1
if "$KILN" compile tests/golden/print/literals.kg -o "$T/lit.so" --no-db >"$T/compile" 2>&1; then
    "$KILN" run "$T/lit.so" --check --seed 2 >"$T/run" 2>&1 \
        || fail "literals.kg: kiln run --check: $(cat "$T/run")"
else
    fail "literals.kg: kiln compile: $(cat "$T/compile")"
fi

[ "$fails" = 0 ] && echo "f32_overflow.sh: all passed"
[ "$fails" = 0 ]
