#!/usr/bin/env bash
# tests/cli/cuda_run.sh -- `kiln run` of a module compiled with --target cuda. Without a CUDA
# driver: the exact error and exit status 1, nothing on stdout. With the stand-in driver of
# tests/cuda_fake (the build's fake_cuda/libcuda.so.1, which checks the driver calls and runs
# no kernel): the device is opened, the buffers uploaded and downloaded, the outputs printed
# (NaN: never written, which --check reports), and --bench times the prepared call and the plain
# one with CUDA events (1 ms per launch on the fake: the prepared call launches the matmul only,
# the plain call the weight packing too). With a real GPU: --check passes.
#   bash tests/cli/cuda_run.sh PATH_TO_KILN    (exit 77: no NVRTC to build the module)
set -u
KILN=${1:?usage: cuda_run.sh PATH_TO_KILN}
FAKE=$(cd "$(dirname "$KILN")" && pwd)/fake_cuda
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0

fail() {
    echo "FAIL: $*" >&2
    fails=$((fails + 1))
}

cat >"$T/mm.kg" <<'KG'
input x: f32[8, 16]
weight w: f32[16, 16]
y[i, j] += x[i, k] * w[k, j]
output y
KG
echo '{"steps": [{"op": "pack", "stage": "w", "dim": 1, "factor": 4, "outer": 0}]}' >"$T/s.json"
if ! "$KILN" compile "$T/mm.kg" -o "$T/mm.so" --schedule "$T/s.json" \
    --target "cuda -arch=sm_80" 2>"$T/err"; then
    if grep -q "no NVRTC" "$T/err"; then
        echo "skip: no NVRTC: $(cat "$T/err")"
        exit 77
    fi
    echo "FAIL: kiln compile --target cuda: $(cat "$T/err")" >&2
    exit 1
fi

# Is there a real driver? (the dynamic loader's cache or LD_LIBRARY_PATH)
real_driver=0
if ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
    real_driver=1
fi
IFS=: read -r -a dirs <<<"${LD_LIBRARY_PATH:-}"
for d in "${dirs[@]}"; do
    [ -n "$d" ] && [ -e "$d/libcuda.so.1" ] && real_driver=1
done

if [ "$real_driver" = 0 ]; then
    want="kiln: error: cannot run $T/mm.so (target \"cuda -arch=sm_80\"): no CUDA driver (libcuda.so.1: cannot open shared object file: No such file or directory)"
    for opt in "" --check --bench; do
        "$KILN" run "$T/mm.so" $opt >"$T/out" 2>"$T/err"
        rc=$?
        [ "$rc" = 1 ] || fail "run $opt without a driver: exit $rc, want 1"
        [ "$(cat "$T/err")" = "$want" ] || fail "run $opt without a driver: stderr
$(cat "$T/err")
want
$want"
        [ -s "$T/out" ] && fail "run $opt without a driver wrote to stdout: $(cat "$T/out")"
    done
else
    echo "note: a CUDA driver is installed: the no-driver message is not checked"
fi

# The stand-in driver
if [ ! -e "$FAKE/libcuda.so.1" ]; then
    fail "no stand-in driver at $FAKE/libcuda.so.1 (target kiln_fake_cuda)"
else
    LD_LIBRARY_PATH="$FAKE${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$KILN" run "$T/mm.so" \
        >"$T/out" 2>"$T/err" || fail "run on the fake driver: $(cat "$T/err")"
    grep -q '^inputs: random, seed 0$' "$T/out" || fail "run on the fake: $(cat "$T/out")"
    grep -q '^y  f32\[8, 16\]  sum=nan  l2=nan  hash=' "$T/out" ||
        fail "run on the fake: outputs: $(cat "$T/out")"
    LD_LIBRARY_PATH="$FAKE${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$KILN" run "$T/mm.so" --bench \
        --repeat 3 --min-time 0.01 >"$T/out" 2>"$T/err" ||
        fail "run --bench on the fake driver: $(cat "$T/err")"
    grep -q '^bench: 1 ms per call (median of 3, min 1 ms, max 1 ms; device: kiln fake CUDA device (sm_80), CUDA events, median of [0-9]* calls each)$' "$T/out" ||
        fail "run --bench on the fake: the prepared call: $(cat "$T/out")"
    grep -q '^bench: prepare .* ms once (0.001024 MB of weight-derived buffers); kiln_call, which recomputes them in every call: 2 ms per call (median of 3)$' "$T/out" ||
        fail "run --bench on the fake: the plain call: $(cat "$T/out")"
    grep -q '^bench: memory .* MB peak per call on the device' "$T/out" ||
        fail "run --bench on the fake: memory: $(cat "$T/out")"
    LD_LIBRARY_PATH="$FAKE${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$KILN" run "$T/mm.so" --check \
        >"$T/out" 2>"$T/err"
    rc=$?
    [ "$rc" = 1 ] || fail "run --check on the fake (no kernel runs): exit $rc, want 1"
    grep -q '128 of 128 elements differ, 128 never written' "$T/out" ||
        fail "run --check on the fake: $(cat "$T/out")"
fi

# A real GPU: the module's results against the reference interpreter
if [ "$real_driver" = 1 ]; then
    "$KILN" compile "$T/mm.kg" -o "$T/gpu.so" --schedule "$T/s.json" --target cuda 2>"$T/err" ||
        fail "kiln compile --target cuda: $(cat "$T/err")"
    "$KILN" run "$T/gpu.so" --check --bench --repeat 3 --min-time 0.05 >"$T/out" 2>"$T/err"
    rc=$?
    if grep -q "no CUDA device" "$T/err"; then
        echo "note: a driver but no CUDA device: $(cat "$T/err")"
    else
        [ "$rc" = 0 ] || fail "run --check --bench on the GPU: exit $rc: $(cat "$T/err") $(cat "$T/out")"
        grep -q '^PASS$' "$T/out" || fail "run --check on the GPU: $(cat "$T/out")"
        grep -q '^bench: .* ms per call (median of 3, .*; device: .*, CUDA events' "$T/out" ||
            fail "run --bench on the GPU: $(cat "$T/out")"
        cat "$T/out"
    fi
fi

if [ "$fails" -ne 0 ]; then
    echo "$fails failure(s)" >&2
    exit 1
fi
echo "cuda_run: ok"
