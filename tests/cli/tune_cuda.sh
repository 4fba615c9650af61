#!/usr/bin/env bash
# tests/cli/tune_cuda.sh -- kiln tune --target cuda from the command line, on any machine: the
# help names the cuda target; without a CUDA device (the fake driver of tests/measure/fake_cuda.c
# told to have none) and, where the machine has no driver, without a driver, it fails at once
# with the error and exit status 1, the database neither created nor changed; records of the
# cuda target are applied by kiln compile --target cuda --db. (Tuning on a GPU, emulated: test_tune
# tune_gpu_emulated; on a real one: see tuner/README.md.)
#   bash tests/cli/tune_cuda.sh PATH_TO_KILN
set -u
KILN=${1:?usage: tune_cuda.sh PATH_TO_KILN}
KILN=$(cd "$(dirname "$KILN")" && pwd)/$(basename "$KILN")
FAKE=$(dirname "$KILN")/fake_cuda_emu
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
fail() {
    echo "FAIL: $*" >&2
    fails=$((fails + 1))
}
cat >"$T/mm.kg" <<'KG'
input a: f32[16, 24]
weight b: f32[24, 8]
c[i, j] += a[i, k] * b[k, j]
output c
KG
Q="--trials 4 --quiet"

"$KILN" tune --help | grep -q 'cuda \[-arch=sm_XX\]' || fail "kiln tune --help does not name the cuda target"

# a database with one record, whose bytes must not change
printf '%s\n' '{"workload": "0123456789abcdef", "target": "cuda -arch=sm_80", "schedule": "{\"steps\": []}", "prog": null, "time_s": 0.001, "stddev_s": 0, "error": "ok", "error_msg": null, "version": "0.1.0", "machine": "test", "timestamp": 1, "flops": 1, "strategy": "default"}' >"$T/one.jsonl"
"$KILN" records "$T/kept.db" --import "$T/one.jsonl" >/dev/null || fail "import"
sum0=$(cksum <"$T/kept.db")

# no device: the fake driver with none
if [ -e "$FAKE/libcuda.so.1" ]; then
    want='kiln: error: no CUDA device (cuInit: CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected): measuring candidates for the cuda target needs a GPU'
    for db in "$T/kept.db" "$T/new.db"; do
        LD_LIBRARY_PATH="$FAKE${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" KILN_FAKE_CUDA=nodevice \
            "$KILN" tune "$T/mm.kg" --target cuda --db "$db" $Q >/dev/null 2>"$T/err"
        rc=$?
        [ $rc = 1 ] || fail "no device: exit status $rc, want 1"
        [ "$(cat "$T/err")" = "$want" ] || fail "no device: '$(cat "$T/err")'"
    done
    [ ! -e "$T/new.db" ] || fail "no device: the database was created"
    [ "$(cksum <"$T/kept.db")" = "$sum0" ] || fail "no device: the database changed"
else
    fail "the fake CUDA driver $FAKE/libcuda.so.1 is not built"
fi

# no driver: where the machine has none
if python3 -c 'import ctypes; ctypes.CDLL("libcuda.so.1")' 2>/dev/null; then
    echo "tune_cuda.sh: this machine has a CUDA driver: the no-driver error is not tested here"
else
    for target in cuda "cuda -arch=sm_90"; do
        "$KILN" tune "$T/mm.kg" --target "$target" --db "$T/kept.db" $Q >/dev/null 2>"$T/err"
        rc=$?
        [ $rc = 1 ] || fail "no driver ($target): exit status $rc, want 1"
        grep -q '^kiln: error: no CUDA driver (libcuda.so.1: .*): measuring candidates for the cuda target needs a GPU$' "$T/err" \
            || fail "no driver ($target): '$(cat "$T/err")'"
    done
    [ "$(cksum <"$T/kept.db")" = "$sum0" ] || fail "no driver: the database changed"
fi
"$KILN" tune "$T/mm.kg" --target "cuda -bogus" --db "$T/new.db" $Q >/dev/null 2>"$T/err"
[ $? = 1 ] && grep -q "target 'cuda -bogus': unknown option '-bogus'" "$T/err" || fail "bad option: $(cat "$T/err")"
[ ! -e "$T/new.db" ] || fail "bad option: the database was created"

# records of the cuda target apply: the task's key from a CPU record (one trial: the default
# schedule), then a GPU schedule recorded under "cuda -arch=sm_80"
"$KILN" tune "$T/mm.kg" --db "$T/cpu.db" --trials 1 --repeat 1 --min-repeat-ms 1 --quiet 2>"$T/err" \
    || fail "tune (1 CPU trial): $(cat "$T/err")"
key=$("$KILN" records "$T/cpu.db" | awk 'NR == 2 {print $1}')
sched='{\"steps\": [{\"op\": \"split\", \"stage\": \"c\", \"iter\": \"i\", \"factors\": [4]}, {\"op\": \"bind\", \"stage\": \"c\", \"iter\": \"i.0\", \"thread\": \"blockIdx.x\"}, {\"op\": \"bind\", \"stage\": \"c\", \"iter\": \"i.1\", \"thread\": \"threadIdx.x\"}]}'
printf '{"workload": "%s", "target": "cuda -arch=sm_80", "schedule": "%s", "prog": null, "time_s": 1e-05, "stddev_s": 0, "error": "ok", "error_msg": null, "version": "0.1.0", "machine": "test", "timestamp": 2, "flops": 1, "strategy": "ansor"}\n' \
    "$key" "$sched" >"$T/gpu.jsonl"
"$KILN" records "$T/gpu.db" --import "$T/gpu.jsonl" >/dev/null || fail "import of the GPU record"
"$KILN" compile "$T/mm.kg" --target "cuda -arch=sm_80" --db "$T/gpu.db" -o "$T/mm.cu" 2>"$T/err" \
    || fail "compile --target cuda --db: $(cat "$T/err")"
grep -q '1 of 1 tasks tuned' "$T/err" || fail "the cuda record was not applied: $(cat "$T/err")"
grep -q 'threadIdx.x' "$T/mm.cu" || fail "the CUDA C binds no thread"
"$KILN" compile "$T/mm.kg" --db "$T/gpu.db" -o "$T/mm_cpu.so" 2>"$T/err" || fail "compile for the CPU"
grep -q '0 of 1 tasks tuned' "$T/err" || fail "a cuda record applied to the CPU: $(cat "$T/err")"

if [ $fails -ne 0 ]; then
    echo "$fails failed"
    exit 1
fi
echo "tune_cuda.sh: all passed"
