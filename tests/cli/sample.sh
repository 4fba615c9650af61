#!/usr/bin/env bash
# tests/cli/sample.sh -- `kiln sample`: help, usage errors (exit 2), specs the library refuses
# (exit 1), a run writing .py and .kg files that kiln itself reads back, and reproducibility.
#   bash tests/cli/sample.sh PATH_TO_KILN
set -u
KILN=${1:?usage: sample.sh PATH_TO_KILN}
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

expect 0 out '^usage: kiln sample' -- "$KILN" sample --help
expect 0 out '^usage: kiln sample' -- "$KILN" help sample
expect 0 out '^  sample ' -- "$KILN" --help
expect 2 err 'give at least one placeholder' -- "$KILN" sample
expect 2 err "placeholder '3x3' is not C,K,H,W" -- "$KILN" sample -p 3x3
expect 2 err "placeholder '0,8,8' is not" -- "$KILN" sample -p 0,8,8
expect 2 err '-n must be in 1' -- "$KILN" sample -p 8,8,8 -n 0
expect 2 err '--max-tries must be in 1' -- "$KILN" sample -p 8,8,8 --max-tries 0
expect 2 err '--flops wants LO:HI' -- "$KILN" sample -p 8,8,8 --flops 2:1
expect 2 err '--params wants LO:HI' -- "$KILN" sample -p 8,8,8 --params x
expect 2 err '-p needs a value' -- "$KILN" sample -p
expect 2 err "unknown argument '--frob'" -- "$KILN" sample -p 8,8,8 --frob
expect 1 err 'must be divisible by stride 2' -- "$KILN" sample -p 8,7,8 --stride 2
expect 1 err 'stride must be 1 or 2' -- "$KILN" sample -p 8,8,8 --stride 3
expect 1 err 'max ops must be in' -- "$KILN" sample -p 8,8,8 --max-ops 0
expect 1 err 'reference window must be 1, 3, 5 or 7' -- "$KILN" sample -p 8,8,8 --ref-k 4
expect 2 err '--max-tries needs a value' -- "$KILN" sample -p 8,8,8 --max-tries
expect 2 err '--ref-k needs a value' -- "$KILN" sample -p 8,8,8 --ref-k
expect 1 err 'no further kernel' -- "$KILN" sample -p 8,8,8 --flops 0:0.000001 -n 1 --max-tries 2000

# a run: one line per kernel, throughput on stderr, files kiln reads back
expect 0 err 'kernels/s on one thread' -- "$KILN" sample -p 8,12,8,8 -p 16,24,4,4 -n 5 --seed 4 --out "$T/k"
[ "$(wc -l <"$T/out")" = 5 ] || fail "5 kernels listed: $(cat "$T/out")"
for k in 1 2 3 4 5; do
    [ -s "$T/k/k000$k.py" ] || fail "k000$k.py missing"
    for p in 1 2; do
        expect 0 out 'total' -- "$KILN" inspect "$T/k/k000${k}_p$p.kg"
    done
done
grep -q 'class Kernel(nn.Module)' "$T/k/k0001.py" || fail "k0001.py has no Kernel module"
# --json: one object per kernel, naming its files
expect 0 out '^\{"kernel": 1, "hash": "[0-9a-f]{16}", "flops": ' -- "$KILN" sample -p 8,8,8 -n 2 --json --out "$T/j"
[ "$(grep -c '"kg": \[' "$T/out")" = 2 ] || fail "--json lines lack their files: $(cat "$T/out")"
# same seed, same kernels
"$KILN" sample -p 8,12,8,8 -p 16,24,4,4 -n 5 --seed 4 >"$T/a" 2>/dev/null
"$KILN" sample -p 8,12,8,8 -p 16,24,4,4 -n 5 --seed 4 >"$T/b" 2>/dev/null
cmp -s "$T/a" "$T/b" || fail "same seed gave different kernels"
"$KILN" sample -p 8,12,8,8 -p 16,24,4,4 -n 5 --seed 5 >"$T/c" 2>/dev/null
cmp -s "$T/a" "$T/c" && fail "different seeds gave the same kernels"

if [ "$fails" != 0 ]; then
    echo "$fails failures" >&2
    exit 1
fi
echo "sample.sh: all passed"
