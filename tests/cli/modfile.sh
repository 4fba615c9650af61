#!/usr/bin/env bash
# tests/cli/modfile.sh -- module files on disk: `kiln run` validates a module's size and ELF
# headers before mapping it (a truncated module is an error naming the file, exit 1, never a
# signal), and `kiln compile` writes its output to a temporary file renamed into place (an old
# module is replaced whole; a failed compile leaves it untouched and no temporary file behind).
#   bash tests/cli/modfile.sh PATH_TO_KILN
set -u
KILN=${1:?usage: modfile.sh PATH_TO_KILN}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0

fail() {
    echo "FAIL: $*" >&2
    fails=$((fails + 1))
}

cat >"$T/a.kg" <<'KG'
input  A: f32[16, 32]
weight B: f32[32, 8]
C[i, j] += A[i, k] * B[k, j]
output C
KG
cat >"$T/b.kg" <<'KG'
input  x: f32[64]
y[i] = x[i] * 2.0
output y
KG

"$KILN" compile "$T/a.kg" -o "$T/m.so" --no-db 2>"$T/err" || {
    echo "FAIL: compile a.kg: $(cat "$T/err")" >&2
    exit 1
}
"$KILN" run "$T/m.so" --check >"$T/out" 2>&1 || fail "run of the whole module: $(cat "$T/out")"

# a truncated module: header only, half, all but the last byte (and a few more); the seed of
# the extra cut is printed so a failure can be replayed
size=$(stat -c %s "$T/m.so")
seed=${SEED:-$RANDOM}
echo "seed $seed"
extra=$((64 + seed * 7919 % (size - 64)))
for n in 64 100 $((size / 2)) $((size - 4096)) $((size - 1)) $extra; do
    [ "$n" -gt 0 ] && [ "$n" -lt "$size" ] || continue
    head -c "$n" "$T/m.so" >"$T/cut.so"
    "$KILN" run "$T/cut.so" >"$T/out" 2>"$T/err"
    rc=$?
    if [ "$rc" != 1 ]; then
        fail "run of $n of $size bytes: exit $rc, want 1 (stderr: $(head -c 300 "$T/err"))"
    elif ! grep -Eq "^kiln: (error: )?$T/cut.so: not a complete kiln module \\(truncated: the file has $n bytes" "$T/err"; then
        fail "run of $n of $size bytes: stderr: $(head -c 300 "$T/err")"
    fi
done
: >"$T/empty.so"
"$KILN" run "$T/empty.so" >/dev/null 2>"$T/err"
rc=$?
[ "$rc" = 1 ] && grep -q "empty.so: not a complete kiln module" "$T/err" \
    || fail "run of an empty file: exit $rc, stderr: $(cat "$T/err")"

# compile over an old module: the new one replaces it whole (same bytes as a fresh compile)
"$KILN" compile "$T/b.kg" -o "$T/fresh.so" --no-db 2>/dev/null || fail "compile b.kg"
cp "$T/m.so" "$T/old.so"
"$KILN" compile "$T/b.kg" -o "$T/m.so" --no-db 2>"$T/err" || fail "recompile: $(cat "$T/err")"
cmp -s "$T/m.so" "$T/fresh.so" || fail "the recompiled module differs from a fresh compile"
"$KILN" run "$T/m.so" >"$T/out" 2>&1 || fail "run of the recompiled module: $(cat "$T/out")"
grep -q "^y " "$T/out" || fail "the recompiled module is not b.kg's: $(cat "$T/out")"

# a module being used keeps its bytes: the rename gives the path a new file
exec 3<"$T/m.so"
"$KILN" compile "$T/a.kg" -o "$T/m.so" --no-db 2>/dev/null || fail "compile a.kg again"
cmp -s /dev/fd/3 "$T/fresh.so" || fail "the open old module was rewritten in place"
exec 3<&-

# the same for an object file, which the backend writes itself (in place, before the rename)
"$KILN" compile "$T/a.kg" -o "$T/m.o" --no-db 2>/dev/null || fail "compile a.kg to m.o"
cp "$T/m.o" "$T/old.o"
exec 3<"$T/m.o"
"$KILN" compile "$T/b.kg" -o "$T/m.o" --no-db 2>/dev/null || fail "compile b.kg to m.o"
cmp -s /dev/fd/3 "$T/old.o" || fail "the open old object file was rewritten in place"
cmp -s "$T/m.o" "$T/old.o" && fail "m.o was not replaced"
exec 3<&-

# a failed compile (bad schedule) leaves the previous output and no temporary file
cp "$T/m.so" "$T/before.so"
printf '{"steps": [{"op": "split", "stage": "C", "iter": "nosuch", "factors": [4]}]}' \
    >"$T/bad.json"
"$KILN" compile "$T/a.kg" -o "$T/m.so" --schedule "$T/bad.json" >/dev/null 2>"$T/err"
rc=$?
[ "$rc" = 1 ] || fail "compile with a bad schedule: exit $rc, want 1 ($(cat "$T/err"))"
cmp -s "$T/m.so" "$T/before.so" || fail "a failed compile changed the previous output"
# a compile failing in the linker step (the output's directory is a file) leaves nothing
"$KILN" compile "$T/a.kg" -o "$T/m.so/x.so" --no-db >/dev/null 2>&1 \
    && fail "compile into a path under a regular file succeeded"
left=$(find "$T" -name '*.tmp-*')
[ -z "$left" ] || fail "temporary files left behind: $left"

if [ "$fails" -gt 0 ]; then
    echo "$fails failure(s)" >&2
    exit 1
fi
echo "modfile: all passed"
