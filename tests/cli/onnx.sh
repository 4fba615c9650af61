#!/usr/bin/env bash
# tests/cli/onnx.sh -- ONNX models through the command line: `kiln onnx-test` over a fixed set
# of ONNX's own node tests (one or more per supported op; every one must PASS) with its output
# format and exit status, shape inputs bound to the data set's values; a model with an
# unsupported op is a SKIP with the reason, a truncated model a FAIL, never a crash; a model cut
# just before its opset_import, or with opset 10^6, is an error; `kiln inspect`, `kiln eval` and
# `kiln compile` accept .onnx files (compile --save-weights writes the initializers as .npy), and
# inspect shows a model simplified unless --no-simplify (fewer statements); usage errors exit 2.
# Skipped (exit 0 with a note) when Debian's libonnx-testdata is not installed.
#   bash tests/cli/onnx.sh PATH_TO_KILN
set -u
KILN=${1:?usage: onnx.sh PATH_TO_KILN}
DATA=/usr/share/libonnx-testdata/data/node
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
fail() {
    echo "FAIL: $*" >&2
    fails=$((fails + 1))
}
if [ ! -d "$DATA" ]; then
    echo "skip: libonnx-testdata is not installed"
    exit 0
fi

TESTS="test_abs test_add_bcast test_averagepool_2d_pads_count_include_pad test_averagepool_1d_default
test_basic_conv_with_padding test_conv_with_strides_and_asymmetric_padding test_conv_with_autopad_same
test_batchnorm_epsilon test_clip_default_inbounds test_concat_3d_axis_negative_2 test_constant
test_convtranspose_pads test_convtranspose_1d test_div_bcast test_dropout_default test_einsum_batch_matmul
test_einsum_transpose test_flatten_negative_axis1 test_gemm_all_attributes test_gemm_transposeA
test_globalaveragepool test_globalmaxpool test_identity test_leakyrelu test_logsoftmax_axis_1
test_logsoftmax_large_number test_matmul_4d test_max_int32 test_maxpool_2d_pads test_maxpool_2d_ceil
test_maxpool_2d_dilations test_maxpool_2d_same_lower test_mul_bcast test_pow_bcast_array test_relu
test_shape_start_1 test_sigmoid test_softmax_axis_0 test_softmax_default_axis test_sub_bcast
test_sum_two_inputs test_tanh test_transpose_all_permutations_3 test_unsqueeze_axis_3
test_clip_splitbounds test_convtranspose_output_shape test_dropout_default_mask test_reshape_negative_dim
test_slice_neg_steps test_squeeze test_unsqueeze_unsorted_axes test_edge_pad test_prelu_broadcast
test_reduce_mean_default_axes_keepdims_random test_reduce_sum_square_do_not_keepdims_random test_reduce_sum_keepdims_random
test_hardswish test_elu test_selu_default test_celu test_softplus test_softsign
test_gather_0 test_gather_negative_indices test_gather_elements_negative_indices test_where_long_example
test_equal_bcast test_less_equal_bcast test_greater test_greater_equal test_and_bcast3v2d test_or4d
test_xor2d test_not_3d test_cast_FLOAT_to_DOUBLE test_castlike_FLOAT_to_DOUBLE test_expand_dim_changed
test_tile_precomputed test_tril test_triu_neg
test_resize_upsample_scales_linear test_resize_downsample_scales_cubic_A_n0p5_exclude_outside
test_resize_tf_crop_and_resize test_resize_upsample_sizes_nearest_round_prefer_ceil_asymmetric
test_resize_downsample_sizes_linear_pytorch_half_pixel test_upsample_nearest"
dirs=()
for t in $TESTS; do dirs+=("$DATA/$t"); done
n=$(echo $TESTS | wc -w)
"$KILN" onnx-test "${dirs[@]}" >"$T/out" 2>"$T/err"
rc=$?
[ "$rc" = 0 ] || fail "onnx-test over $n node tests: exit $rc: $(grep -v ^PASS "$T/out" | head -5) $(head -c 300 "$T/err")"
tail -1 "$T/out" | grep -qx "$n passed, 0 failed, 0 skipped" || fail "summary: $(tail -1 "$T/out")"
[ "$(grep -c '^PASS test_' "$T/out")" = "$n" ] || fail "expected $n PASS lines"
# shapes passed as inputs are bound to the data set's values, and the PASS line says so
grep -q "^PASS test_slice_neg_steps (.*bound to test_data_set_0's values: starts, ends, axes, steps)" \
    "$T/out" || fail "no binding note: $(grep test_slice_neg_steps "$T/out")"

# a suite directory: tests one level down, SKIP with the reason for unsupported ops
mkdir -p "$T/suite"
cp -r "$DATA/test_relu" "$DATA/test_det_2d" "$T/suite/"
"$KILN" onnx-test "$T/suite" >"$T/out" 2>&1 || fail "suite run failed: $(cat "$T/out")"
grep -q "^SKIP test_det_2d: .*(Det, opset [0-9]*): op Det is not supported" "$T/out" \
    || fail "no SKIP line for Det: $(cat "$T/out")"
tail -1 "$T/out" | grep -qx "1 passed, 0 failed, 1 skipped" || fail "suite summary: $(tail -1 "$T/out")"

# a truncated model: FAIL with a message, exit 1
mkdir -p "$T/bad/test_trunc"
cp -r "$DATA/test_relu/test_data_set_0" "$T/bad/test_trunc/"
head -c 20 "$DATA/test_relu/model.onnx" >"$T/bad/test_trunc/model.onnx"
"$KILN" onnx-test "$T/bad/test_trunc" >"$T/out" 2>&1
[ $? = 1 ] || fail "truncated model: want exit 1"
grep -q "^FAIL test_trunc: .*not a valid ONNX model" "$T/out" || fail "truncated: $(cat "$T/out")"
"$KILN" compile "$T/bad/test_trunc/model.onnx" -o "$T/x.so" 2>"$T/err"
[ $? = 1 ] || fail "compile of a truncated model: want exit 1"
grep -q "model.onnx: error: not a valid ONNX model" "$T/err" || fail "compile msg: $(cat "$T/err")"

# test_relu's model cut just before its opset_import (valid protobuf), and with opset 10^6:
# errors naming the file, never read as opset 1 or accepted
/usr/bin/python3 - "$DATA/test_relu/model.onnx" "$T/noopset.onnx" "$T/bigopset.onnx" <<'PYEOF' \
    || fail "could not write the opset models"
import sys
b = open(sys.argv[1], "rb").read()
def varint(i):
    r = s = 0
    while True:
        c = b[i]; i += 1; r |= (c & 0x7f) << s; s += 7
        if c < 0x80: return r, i
i = 0
while True:  # top-level fields of the ModelProto, up to the first opset_import (field 8)
    k, j = varint(i)
    if k >> 3 == 8: break
    if k & 7 == 0: _, j = varint(j)
    else: n, j = varint(j); j += n
    i = j
open(sys.argv[2], "wb").write(b[:i])
op = bytes([0x0a, 0x00, 0x10]) + bytes([0xc0, 0x84, 0x3d])  # domain "", version 1000000
open(sys.argv[3], "wb").write(b[:i] + bytes([0x42, len(op)]) + op)
PYEOF
"$KILN" compile "$T/noopset.onnx" -o "$T/x.so" 2>"$T/err"
[ $? = 1 ] || fail "compile without opset_import: want exit 1"
grep -q "noopset.onnx: error: no opset_import for the default ONNX domain; the file may be truncated" \
    "$T/err" || fail "no opset_import msg: $(cat "$T/err")"
"$KILN" compile "$T/bigopset.onnx" -o "$T/x.so" 2>"$T/err"
[ $? = 1 ] || fail "compile with opset 1000000: want exit 1"
grep -q "bigopset.onnx: error: .*opset is 1000000" "$T/err" || fail "opset msg: $(cat "$T/err")"

# a wrong expected output is a FAIL naming the element
mkdir -p "$T/wrong/test_w"
cp -r "$DATA/test_relu/model.onnx" "$DATA/test_relu/test_data_set_0" "$T/wrong/test_w/"
cp "$DATA/test_abs/test_data_set_0/output_0.pb" "$T/wrong/test_w/test_data_set_0/output_0.pb"
"$KILN" onnx-test "$T/wrong/test_w" >"$T/out" 2>&1
[ $? = 1 ] || fail "wrong output: want exit 1"
grep -q "^FAIL test_w: .*output .* elements differ" "$T/out" || fail "wrong output: $(cat "$T/out")"

# inspect / eval / compile / run on an .onnx file
M="$DATA/test_gemm_all_attributes/model.onnx"
"$KILN" inspect "$M" >"$T/out" 2>&1 || fail "inspect: $(cat "$T/out")"
grep -q "^outputs" "$T/out" || fail "inspect output: $(cat "$T/out")"
# inspect shows a model simplified, as compile uses it (the same report on stderr), and as
# imported with --no-simplify: a Linear's bias add folds, and (when Debian's python3-onnx can
# write the model) a Conv + BatchNormalization becomes one statement
stmts() { sed -n 's/^.*: \([0-9]*\) statements\{0,1\},.*$/\1/p' "$1" | head -1; }
inspect_fewer() {
    "$KILN" inspect "$1" >"$T/out" 2>"$T/rep" || fail "inspect $1: $(cat "$T/rep")"
    grep -q "^kiln inspect: simplify: folded .*statements $2 -> $3 " "$T/rep" \
        || fail "inspect simplify report for $1: $(cat "$T/rep")"
    "$KILN" inspect "$1" --no-simplify >"$T/out0" 2>"$T/err" || fail "inspect --no-simplify: $(cat "$T/err")"
    grep -q "simplify:" "$T/err" && fail "inspect --no-simplify printed a report: $(cat "$T/err")"
    [ "$(stmts "$T/out")" = "$3" ] && [ "$(stmts "$T/out0")" = "$2" ] \
        || fail "inspect $1: want $3 statements simplified, $2 as imported: $(head -1 "$T/out") / $(head -1 "$T/out0")"
}
inspect_fewer "$DATA/../pytorch-converted/test_Linear/model.onnx" 2 1
if /usr/bin/python3 -c 'import onnx' 2>/dev/null; then
    /usr/bin/python3 - "$T/convbn.onnx" <<'PYEOF' || fail "could not write the Conv + BN model"
import sys
import numpy as np
from onnx import TensorProto, helper, numpy_helper, save
r = np.random.default_rng(0)
init = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in [
    ("W", r.standard_normal((4, 3, 3, 3))), ("s", r.random(4) + 0.5),
    ("b", r.standard_normal(4)), ("m", r.standard_normal(4)), ("v", r.random(4) + 0.5)]]
g = helper.make_graph(
    [helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]),
     helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["y"])], "convbn",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], init)
save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), sys.argv[1])
PYEOF
    inspect_fewer "$T/convbn.onnx" 2 1
    grep -q "folded 1 batch norm," "$T/rep" || fail "inspect: no batch norm folded: $(cat "$T/rep")"
    # a shape read from a double initializer beyond int64 (a fuzzing find: the cast was
    # undefined behaviour): an error naming the node, not a shape
    /usr/bin/python3 - "$T/hugeshape.onnx" <<'PYEOF' || fail "could not write the Reshape model"
import sys
from onnx import TensorProto, helper, save
g = helper.make_graph(
    [helper.make_node("Reshape", ["x", "s"], ["y"])], "huge",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6])],
    [helper.make_tensor("s", TensorProto.DOUBLE, [1], [1e19])])
save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), sys.argv[1])
PYEOF
    "$KILN" inspect "$T/hugeshape.onnx" >"$T/out" 2>&1 && fail "a shape of 1e19 was accepted"
    grep -q "node 0 .*Reshape.*value 0 is 1e+19, not an integer of int64's range" "$T/out" \
        || fail "huge shape: $(cat "$T/out")"
else
    echo "note: /usr/bin/python3 has no onnx module; Conv + BN inspect check skipped"
fi
"$KILN" eval "$M" --seed 3 >"$T/out" 2>&1 || fail "eval: $(cat "$T/out")"
grep -q "sum=" "$T/out" || fail "eval output: $(cat "$T/out")"
"$KILN" compile "$M" -o "$T/g.so" --save-weights "$T/w" 2>"$T/err" || fail "compile: $(cat "$T/err")"
ls "$T/w"/*.npy >/dev/null 2>&1 || fail "--save-weights wrote no .npy"
grep -q "^kiln compile: simplify: folded " "$T/err" || fail "compile simplify report: $(cat "$T/err")"
"$KILN" compile "$M" -o "$T/g0.so" --no-simplify 2>"$T/err" || fail "--no-simplify: $(cat "$T/err")"
grep -q "simplify:" "$T/err" && fail "--no-simplify printed a report: $(cat "$T/err")"
"$KILN" eval "$M" --seed 3 --no-simplify -v >"$T/out" 2>&1 || fail "eval --no-simplify: $(cat "$T/out")"
"$KILN" run "$T/g.so" --check >"$T/out" 2>&1 || fail "run --check: $(cat "$T/out")"
"$KILN" run "$T/g.so" --bench --repeat 1 --min-time 0.01 >"$T/out" 2>&1 || fail "run --bench: $(cat "$T/out")"
grep -q "per call" "$T/out" || fail "bench output: $(cat "$T/out")"

# usage errors
"$KILN" onnx-test >/dev/null 2>"$T/err"
[ $? = 2 ] || fail "onnx-test without DIR: want exit 2"
grep -q "missing DIR" "$T/err" || fail "usage msg: $(cat "$T/err")"
"$KILN" onnx-test --rtol x "$DATA/test_relu" >/dev/null 2>&1
[ $? = 2 ] || fail "--rtol x: want exit 2"
"$KILN" onnx-test --help | grep -q "usage: kiln onnx-test" || fail "--help"
"$KILN" onnx-test "$T/nonexistent" >/dev/null 2>"$T/err"
[ $? = 1 ] || fail "missing dir: want exit 1"

if [ "$fails" -ne 0 ]; then
    echo "$fails failure(s)"
    exit 1
fi
echo "onnx.sh: all passed ($n node tests)"
