#!/usr/bin/env bash
# tests/cli/pipeline.sh -- the graph pipeline through the command line (kiln_graph_optimize):
# on a small residual network (conv 3x3 + batch norm + relu, conv 3x3, add, relu; 16x16, so
# every pass changes it) `--dump-after PASS` prints the graph after that pass in .kg text on
# stderr, for compile, tune, inspect and eval, and the text parses (`kiln inspect` of it);
# simplify folds the batch norm, channels-last converts the statements, winograd rewrites both
# convolutions; `--no-channels-last` and `--no-winograd` switch a pass off (its dump is then
# absent); an unknown pass name is a usage error (exit 2) naming the valid ones.
# The model is written by a few lines of Python (standard library only: protobuf by hand);
# skipped (exit 0 with a note) without python3.
#   bash tests/cli/pipeline.sh PATH_TO_KILN
set -u
KILN=${1:?usage: pipeline.sh PATH_TO_KILN}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
fail() {
    echo "FAIL: $*" >&2
    fails=$((fails + 1))
}
PY=$(command -v python3 || true)
if [ -z "$PY" ]; then
    echo "skip: no python3 to write the ONNX model"
    exit 0
fi
"$PY" - "$T/res.onnx" <<'PYEOF' || { echo "FAIL: could not write the model" >&2; exit 1; }
import random, struct, sys

def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])

def field(num, wire, payload):
    key = varint(num << 3 | wire)
    if wire == 0:
        return key + varint(payload)
    return key + varint(len(payload)) + payload

def s(num, text):
    return field(num, 2, text.encode() if isinstance(text, str) else text)

def ints_attr(name, vals):  # AttributeProto: name 1, ints 8, type 20 (INTS = 7)
    return b"".join([s(1, name)] + [field(8, 0, v) for v in vals] + [field(20, 0, 7)])

def float_attr(name, v):  # f 2 (fixed32), type 20 (FLOAT = 1)
    return s(1, name) + varint(2 << 3 | 5) + struct.pack("<f", v) + field(20, 0, 1)

def node(op, ins, outs, attrs=()):  # NodeProto: input 1, output 2, name 3, op_type 4, attribute 5
    return b"".join([s(1, i) for i in ins] + [s(2, o) for o in outs] + [s(3, outs[0]), s(4, op)]
                    + [s(5, a) for a in attrs])

def tensor(name, dims, vals):  # TensorProto: dims 1, data_type 2 (FLOAT = 1), name 8, raw_data 9
    return b"".join([field(1, 0, d) for d in dims] + [field(2, 0, 1), s(8, name),
                    s(9, struct.pack("<%df" % len(vals), *vals))])

def value_info(name, dims):  # ValueInfoProto: name 1, type 2 -> tensor_type 1 -> elem 1, shape 2
    shape = b"".join(s(1, field(1, 0, d)) for d in dims)
    return s(1, name) + s(2, s(1, field(1, 0, 1) + s(2, shape)))

r = random.Random(0)
C = 8
def rnd(n, lo=-1.0, hi=1.0):
    return [r.uniform(lo, hi) for _ in range(n)]
conv = [ints_attr("pads", [1, 1, 1, 1]), ints_attr("kernel_shape", [3, 3])]
nodes = [node("Conv", ["x", "w1"], ["c1"], conv),
         node("BatchNormalization", ["c1", "g", "b", "m", "v"], ["n1"], [float_attr("epsilon", 1e-5)]),
         node("Relu", ["n1"], ["r1"]),
         node("Conv", ["r1", "w2", "b2"], ["c2"], conv),
         node("Add", ["c2", "x"], ["a"]),
         node("Relu", ["a"], ["y"])]
inits = [tensor("w1", [C, C, 3, 3], rnd(C * C * 9, -0.2, 0.2)), tensor("g", [C], rnd(C, 0.5, 1.5)),
         tensor("b", [C], rnd(C)), tensor("m", [C], rnd(C)), tensor("v", [C], rnd(C, 0.5, 1.5)),
         tensor("w2", [C, C, 3, 3], rnd(C * C * 9, -0.2, 0.2)), tensor("b2", [C], rnd(C))]
graph = b"".join([s(1, n) for n in nodes] + [s(2, "res")] + [s(5, t) for t in inits]
                 + [s(11, value_info("x", [1, C, 16, 16])), s(12, value_info("y", [1, C, 16, 16]))])
model = field(1, 0, 7) + s(8, field(2, 0, 13)) + s(7, graph)  # ir_version, opset_import, graph
open(sys.argv[1], "wb").write(model)
PYEOF
M=$T/res.onnx

# the report: every pass changed the graph
"$KILN" inspect "$M" >"$T/out" 2>"$T/err" || fail "inspect: $(cat "$T/err")"
grep -q "^kiln inspect: simplify: folded 1 batch norm, .*; channels-last: [1-9][0-9]* statements, 2 transposes added; winograd: 2 convolutions$" \
    "$T/err" || fail "inspect report: $(cat "$T/err")"

# --dump-after PASS: the graph after that pass, on stderr, in .kg text that parses
for pass in simplify channels-last winograd; do
    "$KILN" inspect "$M" --dump-after "$pass" >"$T/out" 2>"$T/err" \
        || fail "inspect --dump-after $pass: $(cat "$T/err")"
    grep -q "^# kiln inspect: graph after $pass$" "$T/err" || fail "no dump header for $pass: $(cat "$T/err")"
    [ "$(grep -c '^# kiln inspect: graph after' "$T/err")" = 1 ] || fail "$pass: more than one dump"
    sed -n '/^# kiln inspect: graph after/,/^output /p' "$T/err" >"$T/$pass.kg"
    "$KILN" inspect "$T/$pass.kg" >/dev/null 2>"$T/err2" || fail "dump after $pass does not parse: $(cat "$T/err2")"
done
grep -q "batch_norm" "$T/simplify.kg" && fail "batch norm left after simplify: $(cat "$T/simplify.kg")"
grep -q 'layout="nhwc"' "$T/simplify.kg" && fail "nhwc before channels-last"
grep -q 'layout="nhwc"' "$T/channels-last.kg" || fail "no nhwc after channels-last: $(cat "$T/channels-last.kg")"
grep -q "winograd_input" "$T/channels-last.kg" && fail "winograd before its pass"
grep -q "winograd_input" "$T/winograd.kg" || fail "no winograd_input after winograd: $(cat "$T/winograd.kg")"

# compile, tune and eval take the same options; a pass switched off prints no dump
"$KILN" compile "$M" -o "$T/m.so" --no-db --dump-after winograd 2>"$T/err" \
    || fail "compile --dump-after: $(cat "$T/err")"
grep -q "^# kiln compile: graph after winograd$" "$T/err" || fail "compile dump: $(cat "$T/err")"
"$KILN" eval "$M" --dump-after channels-last >/dev/null 2>"$T/err" || fail "eval --dump-after: $(cat "$T/err")"
grep -q "^# kiln eval: graph after channels-last$" "$T/err" || fail "eval dump: $(cat "$T/err")"
"$KILN" tune "$M" --trials 1 --db "$T/t.db" --quiet --dump-after simplify >/dev/null 2>"$T/err" \
    || fail "tune --dump-after: $(cat "$T/err")"
grep -q "^# kiln tune: graph after simplify$" "$T/err" || fail "tune dump: $(cat "$T/err")"
"$KILN" inspect "$M" --no-winograd --dump-after winograd >/dev/null 2>"$T/err" || fail "--no-winograd: $(cat "$T/err")"
grep -q "graph after" "$T/err" && fail "--no-winograd still dumped: $(cat "$T/err")"
grep -q "winograd: 0 convolutions$" "$T/err" || fail "--no-winograd report: $(cat "$T/err")"
"$KILN" inspect "$M" --no-channels-last --dump-after winograd >/dev/null 2>"$T/err" \
    || fail "--no-channels-last: $(cat "$T/err")"
grep -q "channels-last: 0 statements, 0 transposes added; winograd: 2 convolutions$" "$T/err" \
    || fail "--no-channels-last report: $(cat "$T/err")"
grep -q 'layout="nhwc"' "$T/err" && fail "--no-channels-last left nhwc statements"

# an unknown pass: usage error naming the valid ones; a missing name too
for cmd in compile tune inspect eval; do
    "$KILN" "$cmd" "$M" --dump-after fold >/dev/null 2>"$T/err"
    rc=$?
    [ "$rc" = 2 ] || fail "$cmd --dump-after fold: exit $rc, want 2"
    grep -q "^kiln $cmd: --dump-after: unknown pass 'fold' (passes: simplify, channels-last, winograd)$" \
        "$T/err" || fail "$cmd bad pass message: $(cat "$T/err")"
done
"$KILN" inspect "$M" --dump-after >/dev/null 2>"$T/err"
[ $? = 2 ] || fail "--dump-after without a name: want exit 2"
"$KILN" compile --help | grep -q -- "--dump-after PASS" || fail "compile --help lacks --dump-after"

if [ "$fails" -ne 0 ]; then
    echo "$fails failure(s)"
    exit 1
fi
echo "ok"
