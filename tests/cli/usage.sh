#!/usr/bin/env bash
# tests/cli/usage.sh -- the kiln command's Unix habits: --help and --version on stdout with
# exit 0 (for the command and every subcommand, also as `kiln help CMD`); unknown commands and
# options, missing arguments and bad option values on stderr with exit 2; a missing or
# unparsable file on stderr as `kiln: ...` with exit 1.
#   bash tests/cli/usage.sh PATH_TO_KILN
set -u
KILN=${1:?usage: usage.sh PATH_TO_KILN}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0

fail() {
    echo "FAIL: $*" >&2
    fails=$((fails + 1))
}

# expect RC STREAM PATTERN -- CMD...: runs CMD, checks its exit status and that STREAM
# (out or err) matches the extended regex PATTERN.
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

expect 0 out '^usage: kiln' -- "$KILN" --help
expect 0 out '^usage: kiln' -- "$KILN" -h
expect 0 out '^usage: kiln' -- "$KILN" help
expect 0 out '^kiln [0-9]+\.[0-9]+\.[0-9]+$' -- "$KILN" --version
expect 2 err 'usage: kiln' -- "$KILN"
expect 2 err "unknown command 'frobnicate'" -- "$KILN" frobnicate
expect 2 err "unknown option '--frob'" -- "$KILN" --frob
expect 2 err "unknown command 'frobnicate'" -- "$KILN" help frobnicate

for cmd in inspect eval compile run; do
    expect 0 out "^usage: kiln $cmd" -- "$KILN" "$cmd" --help
    expect 0 out "^usage: kiln $cmd" -- "$KILN" "$cmd" -h
    expect 0 out "^usage: kiln $cmd" -- "$KILN" help "$cmd"
    expect 2 err "." -- "$KILN" "$cmd" --no-such-flag
    [ -s "$T/out" ] && fail "$cmd --no-such-flag wrote to stdout"
done
# every command is listed by --help
for cmd in inspect eval compile run; do
    expect 0 out "^  $cmd " -- "$KILN" --help
done

cat >"$T/mm.kg" <<'KG'
input a: f32[4, 8]
weight b: f32[8, 3]
C[i, j] += a[i, k] * b[k, j]
output C
KG
expect 2 err "kiln inspect: missing FILE.kg" -- "$KILN" inspect
expect 2 err "kiln eval: missing FILE.kg" -- "$KILN" eval
expect 2 err "unknown option '--frob'" -- "$KILN" eval "$T/mm.kg" --frob
expect 2 err "more than one file" -- "$KILN" inspect "$T/mm.kg" "$T/mm.kg"
expect 2 err "--seed needs a value" -- "$KILN" eval "$T/mm.kg" --seed
expect 2 err "--seed needs a non-negative integer, not 'abc'" -- "$KILN" eval "$T/mm.kg" --seed abc
expect 2 err "--seed needs a non-negative integer" -- "$KILN" eval "$T/mm.kg" --seed -3
expect 2 err "--save-inputs needs --out DIR" -- "$KILN" eval "$T/mm.kg" --save-inputs
expect 2 err "Try 'kiln help eval'" -- "$KILN" eval "$T/mm.kg" --inputs

# failures: exit 1 with "kiln: " and the reason
expect 1 err "^kiln: $T/missing.kg: No such file or directory" -- "$KILN" inspect "$T/missing.kg"
expect 1 err "^kiln: $T/missing.kg: No such file or directory" -- "$KILN" eval "$T/missing.kg"
printf 'input a: f32[4, 8]\nb = frobnicate(a)\n' >"$T/bad.kg"
expect 1 err "^kiln: $T/bad.kg:2:[0-9]+: error: " -- "$KILN" inspect "$T/bad.kg"
expect 1 err "^kiln: $T/bad.kg:2:[0-9]+: error: " -- "$KILN" eval "$T/bad.kg"
expect 1 err "^kiln: $T: " -- "$KILN" inspect "$T"
# compiling's temporary files go to $TMPDIR (the command passes it to the library)
expect 1 err "cannot create a directory in $T/no-such-dir" -- env TMPDIR="$T/no-such-dir" \
    "$KILN" compile "$T/mm.kg" -o "$T/mm.so"
mkdir "$T/tmp"
expect 0 err "memory:" -- env TMPDIR="$T/tmp" "$KILN" compile "$T/mm.kg" -o "$T/mm.so"
[ -z "$(ls -A "$T/tmp")" ] || fail "kiln compile left files in TMPDIR: $(ls -A "$T/tmp")"

if [ "$fails" -ne 0 ]; then
    echo "$fails failure(s)" >&2
    exit 1
fi
echo "usage.sh: all passed"
