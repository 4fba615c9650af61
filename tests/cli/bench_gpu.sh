#!/usr/bin/env bash
# tests/cli/bench_gpu.sh -- benchmarks/bench_gpu (built next to kiln where the CUDA toolkit with
# cuBLAS and cuDNN is found) without running the benchmark: a usage error exits 2; --write-kg
# writes the workloads' graphs, which kiln reads; without a CUDA driver it stops at once with
# "bench_gpu: no CUDA driver (...)" and exit status 1; --kiln-only against the stand-in driver
# of tests/cuda_fake compiles, prepares, calls and times kiln's side of every workload, with the
# hand-written schedules and with a records database (--db) holding one record. Running
# it for real needs a GPU and minutes: benchmarks/README.md.
#   bash tests/cli/bench_gpu.sh PATH_TO_KILN    (exit 77: bench_gpu not built)
set -u
KILN=${1:?usage: bench_gpu.sh PATH_TO_KILN}
BENCH=$(dirname "$KILN")/bench_gpu
if [ ! -x "$BENCH" ]; then
    echo "skip: $BENCH not built (no CUDA toolkit with cuBLAS and cuDNN)"
    exit 77
fi
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0

fail() {
    echo "FAIL: $*" >&2
    fails=$((fails + 1))
}

"$BENCH" --frob 1 >"$T/out" 2>"$T/err"
[ $? = 2 ] || fail "an unknown option: want exit 2"
grep -q '^usage: bench_gpu' "$T/err" || fail "an unknown option: $(cat "$T/err")"
"$BENCH" --only conv3x3_9 >"$T/out" 2>"$T/err"
[ $? = 2 ] || fail "--only naming no workload: want exit 2"

"$BENCH" --write-kg "$T/kg" >"$T/out" 2>"$T/err" || fail "--write-kg: $(cat "$T/err")"
for w in matmul4096 conv3x3_56 conv3x3_28 conv3x3_14 conv3x3_7; do
    grep -qx "$T/kg/$w.kg" "$T/out" || fail "--write-kg did not list $w.kg"
    "$KILN" inspect "$T/kg/$w.kg" >"$T/inspect" 2>&1 || fail "kiln inspect $w.kg: $(cat "$T/inspect")"
done
grep -q 'total .*137.4 GFLOP' <("$KILN" inspect "$T/kg/matmul4096.kg") ||
    fail "matmul4096.kg is not 2 * 4096^3 FLOPs: $("$KILN" inspect "$T/kg/matmul4096.kg")"

real_driver=0
if ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
    real_driver=1
fi
IFS=: read -r -a dirs <<<"${LD_LIBRARY_PATH:-}"
for d in "${dirs[@]}"; do
    [ -n "$d" ] && [ -e "$d/libcuda.so.1" ] && real_driver=1
done
if [ "$real_driver" = 0 ]; then
    "$BENCH" >"$T/out" 2>"$T/err"
    rc=$?
    [ "$rc" = 1 ] || fail "without a driver: exit $rc, want 1"
    want="bench_gpu: no CUDA driver (libcuda.so.1: cannot open shared object file: No such file or directory)"
    [ "$(cat "$T/err")" = "$want" ] || fail "without a driver: stderr
$(cat "$T/err")
want
$want"
    [ -s "$T/out" ] && fail "without a driver: stdout: $(cat "$T/out")"
else
    echo "note: a CUDA driver is installed: the no-driver message is not checked"
fi

# kiln's side alone against the stand-in driver of tests/cuda_fake (no kernel runs; each launch
# takes 1 ms there, and every module here makes one launch per prepared call)
FAKE=$(cd "$(dirname "$KILN")" && pwd)/fake_cuda
if [ -e "$FAKE/libcuda.so.1" ]; then
    LD_LIBRARY_PATH="$FAKE${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$BENCH" --kiln-only --reps 3 \
        --rounds 1 >"$T/out" 2>"$T/err" || fail "--kiln-only on the fake driver: $(cat "$T/err")"
    grep -q '^device: kiln fake CUDA device (sm_80); kiln .*, target "cuda -arch=sm_80", hand-written schedules; libraries not timed' "$T/out" ||
        fail "--kiln-only on the fake driver: the header: $(cat "$T/out")"
    grep -q '^matmul4096  kiln 137439.0 GFLOP/s  \[kiln: hand-written schedule\]$' "$T/out" ||
        fail "--kiln-only on the fake driver: matmul4096: $(cat "$T/out")"
    [ "$(grep -c '^conv3x3_[0-9]* *kiln  *231.2 GFLOP/s' "$T/out")" = 4 ] ||
        fail "--kiln-only on the fake driver: the convolutions: $(cat "$T/out")"
    # --db: a record for conv3x3_7's task (key 703e4498e7ee3b5c: the task's structural hash,
    # stable across machines; it changes only with the graph bench_gpu writes) on the fake's
    # sm_80 is applied; conv3x3_14 has none and keeps the hand-written schedule
    sched='{"steps": [{"op": "split", "stage": "y", "iter": "k", "factors": [32]}, {"op": "bind", "stage": "y", "iter": "k.0", "thread": "blockIdx.x"}, {"op": "bind", "stage": "y", "iter": "k.1", "thread": "threadIdx.x"}]}'
    printf '{"workload": "703e4498e7ee3b5c", "target": "cuda -arch=sm_80", "schedule": %s, "time_s": 0.0001, "stddev_s": 0, "error": "ok", "version": "0.1.0", "machine": "test", "timestamp": 1700000000, "flops": 231211008, "strategy": "manual"}\n' \
        "$(printf '%s' "$sched" | sed 's/"/\\"/g; s/^/"/; s/$/"/')" >"$T/rec.jsonl"
    "$KILN" records "$T/gpu.db" --import "$T/rec.jsonl" >"$T/out" 2>"$T/err" ||
        fail "importing the record: $(cat "$T/err")"
    LD_LIBRARY_PATH="$FAKE${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$BENCH" --kiln-only --reps 3 \
        --rounds 1 --only conv3x3_7,conv3x3_14 --db "$T/gpu.db" >"$T/out" 2>"$T/err" ||
        fail "--db on the fake driver: $(cat "$T/err")"
    grep -q "^conv3x3_7 .*\[kiln: 1 of 1 task tuned from $T/gpu.db\]$" "$T/out" ||
        fail "--db on the fake driver: the tuned workload: $(cat "$T/out")"
    grep -q "^conv3x3_14 .*\[kiln: no record in $T/gpu.db: hand-written schedule\]$" "$T/out" ||
        fail "--db on the fake driver: the untuned workload: $(cat "$T/out")"
else
    fail "no stand-in driver at $FAKE/libcuda.so.1 (target kiln_fake_cuda)"
fi

if [ "$fails" -ne 0 ]; then
    echo "$fails failure(s)" >&2
    exit 1
fi
echo "bench_gpu: ok"
