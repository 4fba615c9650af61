#!/usr/bin/env bash
# tests/cli/examples.sh -- every examples/*.kg parses, `kiln inspect` (text and JSON) runs on
# it, and `kiln eval` evaluates it to finite outputs.
#   bash tests/cli/examples.sh PATH_TO_KILN       (run from the repository root)
set -u
KILN=${1:?usage: examples.sh PATH_TO_KILN}
cd "$(dirname "$0")/../.." || exit 1
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
fail() {
    echo "FAIL: $*" >&2
    fails=$((fails + 1))
}

n=0
for f in examples/*.kg; do
    n=$((n + 1))
    "$KILN" inspect "$f" >"$T/inspect" 2>&1 || fail "kiln inspect $f: $(cat "$T/inspect")"
    grep -q '^  total ' "$T/inspect" || fail "kiln inspect $f prints no total"
    "$KILN" inspect --json "$f" >"$T/json" 2>&1 || fail "kiln inspect --json $f"
    if [ -x /usr/bin/python3 ]; then
        /usr/bin/python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$T/json" \
            || fail "kiln inspect --json $f is not JSON"
    fi
    "$KILN" eval "$f" --seed 3 >"$T/a" 2>&1 || fail "kiln eval $f: $(cat "$T/a")"
    grep -Eqi 'nan|inf' "$T/a" && fail "kiln eval $f: non-finite output: $(cat "$T/a")"
    grep -q 'hash=' "$T/a" || fail "kiln eval $f printed no output: $(cat "$T/a")"
done
[ "$n" -ge 5 ] || fail "expected at least 5 examples, found $n"

if [ "$fails" -ne 0 ]; then
    echo "$fails failure(s)" >&2
    exit 1
fi
echo "examples.sh: $n examples passed"
