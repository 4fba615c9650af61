#!/usr/bin/env bash
# tests/cli/embed.sh -- modules with their weights built in (embedded) and as arguments
# (--external-weights). A small ONNX model with random weights (Conv + bias, Relu, Flatten,
# MatMul + bias; the seed is printed) is compiled both ways; `kiln run --check` passes on both
# (for the embedded one the reference interpreter gets the weights from the module); through
# the Python package the embedded module is called with x alone, the external one with the
# weights --save-weights wrote, and both match a NumPy evaluation of the model; the metadata
# lists the embedded weights (the same as the external module's weight arguments) and only x
# and y as "args"; passing the weights to the embedded module is refused with a message; the
# cuda target keeps the weights as arguments and says so. Skips (77) without /usr/bin/python3's
# numpy and onnx.
#   bash tests/cli/embed.sh PATH_TO_KILN
set -u
KILN=${1:?usage: embed.sh PATH_TO_KILN}
PY=/usr/bin/python3
if ! "$PY" -c "import numpy, onnx" 2>/dev/null; then
    echo "skip: /usr/bin/python3 lacks numpy or onnx"
    exit 77
fi
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
SEED=${KILN_SEED:-$(od -An -N2 -tu2 /dev/urandom | tr -d ' ')}
echo "seed $SEED (replay with KILN_SEED=$SEED)"
fails=0
fail() {
    echo "FAIL: $*" >&2
    fails=$((fails + 1))
}

"$PY" - "$T" "$SEED" <<'PYEOF' || { echo "FAIL: building the model"; exit 1; }
import sys
import numpy as np
from onnx import TensorProto, helper, numpy_helper, save
tmp, seed = sys.argv[1], int(sys.argv[2])
r = np.random.default_rng(seed)
w = r.uniform(-1, 1, (4, 3, 3, 3)).astype(np.float32)
b = r.uniform(-1, 1, (4,)).astype(np.float32)
w2 = r.uniform(-1, 1, (256, 5)).astype(np.float32)
b2 = r.uniform(-1, 1, (1, 5)).astype(np.float32)
x = r.uniform(-1, 1, (1, 3, 8, 8)).astype(np.float32)
nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("Flatten", ["r"], ["f"]),
         helper.make_node("MatMul", ["f", "w2"], ["m"]),
         helper.make_node("Add", ["m", "b2"], ["y"])]
g = helper.make_graph(nodes, "embed",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])],
                      [numpy_helper.from_array(a, n)
                       for a, n in ((w, "w"), (b, "b"), (w2, "w2"), (b2, "b2"))])
save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), tmp + "/m.onnx")
# the NumPy oracle, in float64
xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
conv = np.zeros((1, 4, 8, 8))
for i in range(3):
    for j in range(3):
        conv += np.einsum("nchw,kc->nkhw", xp[:, :, i:i + 8, j:j + 8], w[:, :, i, j])
conv += b.reshape(1, 4, 1, 1)
y = np.maximum(conv, 0).reshape(1, 256) @ w2.astype(np.float64) + b2
np.save(tmp + "/x.npy", x)
np.save(tmp + "/want.npy", y)
PYEOF

"$KILN" compile "$T/m.onnx" -o "$T/emb.so" --no-db 2>"$T/err" || fail "compile: $(cat "$T/err")"
grep -q "weights (.* MB) built into .*emb.so" "$T/err" || fail "no embedding note: $(cat "$T/err")"
"$KILN" compile "$T/m.onnx" -o "$T/ext.so" --no-db --external-weights --save-weights "$T/w" \
    2>"$T/err" || fail "compile --external-weights: $(cat "$T/err")"
grep -q "built into" "$T/err" && fail "--external-weights still embedded: $(cat "$T/err")"
for m in emb ext; do
    "$KILN" run "$T/$m.so" --check --seed "$SEED" >"$T/out" 2>&1 || fail "run --check $m: $(cat "$T/out")"
    grep -q "^PASS" "$T/out" || fail "run --check $m did not pass: $(cat "$T/out")"
done
grep -q "weights: the module's own" <("$KILN" run "$T/emb.so" 2>&1) \
    || fail "kiln run does not say the embedded weights are used"

# a sanitizer build's modules need its runtime, which /usr/bin/python3 has not loaded
if grep -q __asan_ "$T/emb.so"; then
    echo "skip the Python checks: the modules are built with AddressSanitizer"
else
PYTHONPATH=python "$PY" - "$T" <<'PYEOF' || fail "Python checks"
import sys
import numpy as np
import kiln
import kiln.nets
tmp = sys.argv[1]
x, want = np.load(tmp + "/x.npy"), np.load(tmp + "/want.npy")
emb, ext = kiln.load(tmp + "/emb.so"), kiln.load(tmp + "/ext.so")
assert [a["name"] for a in emb.metadata["args"]] == ["x", "y"], emb.metadata["args"]
ext_weights = [a.name for a in ext.args if a.role == "weight"]
assert ext_weights, ext.metadata["args"]
assert "embedded" not in ext.metadata
assert [e["name"] for e in emb.embedded] == ext_weights, (emb.embedded, ext_weights)
assert all(e["role"] == "weight" and e["dtype"] == "f32" for e in emb.embedded), emb.embedded
assert emb.metadata["weights_bytes"] == ext.metadata["weights_bytes"] > 0
got_emb = np.asarray(emb(kiln.aligned(x)), dtype=np.float64)
got_ext = np.asarray(ext(*kiln.nets.module_args(ext, x, tmp + "/w")), dtype=np.float64)
for name, got in (("embedded", got_emb), ("external", got_ext)):
    err = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
    print("%s: max|kiln - numpy| / max|numpy| = %.3g" % (name, err))
    assert err <= 1e-5, (name, err)
try:
    emb(*kiln.nets.module_args(ext, x, tmp + "/w"))
except kiln.Error as e:
    assert "built in" in str(e) or "expected 1 input" in str(e), str(e)
else:
    raise AssertionError("the embedded module accepted its weights as arguments")
PYEOF
fi

"$KILN" compile "$T/m.onnx" -o "$T/c.cu" --no-db --target cuda 2>"$T/err" \
    || fail "compile --target cuda: $(cat "$T/err")"
grep -q "cuda target does not embed weights" "$T/err" || fail "no cuda note: $(cat "$T/err")"

if [ "$fails" -ne 0 ]; then
    echo "$fails failure(s)"
    exit 1
fi
echo "embed.sh: all passed"
