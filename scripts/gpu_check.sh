#!/usr/bin/env bash
# scripts/gpu_check.sh OUTDIR [BUILD_DIR] -- everything of the GPU backend that needs a GPU, in
# one bounded run, one line per check: `PASS name`, `FAIL name (reason)` or `SKIP name (reason)`.
#
#   scripts/gpu_check.sh OUTDIR                 # builds kiln into build-gpu first
#   scripts/gpu_check.sh OUTDIR build           # an existing build directory
#   scripts/gpu_check.sh OUTDIR build-bundle    # a bundle made by scripts/gpu_bundle.sh
#
# Checks, in order (codegen/README.md, "Checking on a GPU"):
#   test_cuda_rt.NAME   each device test of tests/cuda_rt (open, kernel, driver_errors, module,
#                       prepared)
#   gpu_device          test_measure gpu_device: GPU programs measured on the device
#   tune_gpu_device     test_tune tune_gpu_device: a matmul tuned on the device
#   cuda_run.sh         tests/cli/cuda_run.sh: `kiln run --check --bench` of a cuda module
#   lib_ops             test_cuda_rt lib_ops: every library op (default schedule, GPU schedule,
#                       programs of its GPU sketches) against the reference, in shards at once
#   cnn.resnet18, cnn.mobilenet_v2
#                       scripts/cnn_kg.py's networks: `kiln compile --target cuda`, then
#                       `kiln run --check --bench`
#   torch               scripts/gpu_torch_ref.py: PyTorch eager (torchvision's two CNNs) on the same
#                       GPU, the end-to-end reference (SKIP without torch or CUDA there)
#   bench_gpu           ./bench_gpu --reps 5 --rounds 2 (hand-written schedules) against cuBLAS
#                       and cuDNN
#   tune_rate           `kiln tune` of one bench_gpu workload (conv3x3_28) for the device for
#                       KILN_GPU_TUNE_SECONDS (default 90): trials per minute, then bench_gpu
#                       of that workload with the records
# bench_gpu runs right after the unit tests (it takes seconds). KILN_GPU_CHECKS, a comma-separated
# list of groups (unit, bench_gpu, lib_ops, cnn or cnn.NET, torch (also run with cnn),
# tune_rate), runs only those.
# Where there is a CUDA device, a device test that skips is a FAIL (it must run there); without
# one, the device checks print SKIP with the reason. OUTDIR gets summary.txt (the lines above,
# then the totals) and check.log (every check's output under a header), few files, so that a
# machine that sends back only a handful of files sends all of it; tune_rate adds
# tune.jsonl.xz, its trials' log (build and run durations). KILN_GPU_CHECK_SECONDS (default
# 540) bounds the whole run: each check runs under `timeout` with what is left of it (or its own
# limit, when smaller), and checks that find no time left SKIP. Exit status 1 if any check
# FAILed, else 0.
set -u
OUT=${1:?usage: scripts/gpu_check.sh OUTDIR [BUILD_DIR]}
cd "$(dirname "$0")/.."
ROOT=$PWD
mkdir -p "$OUT" || exit 1
OUT=$(cd "$OUT" && pwd)
SUMMARY=$OUT/summary.txt
LOG=$OUT/check.log
: >"$SUMMARY"
: >"$LOG"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
START=$(date +%s)
BUDGET=${KILN_GPU_CHECK_SECONDS:-540}
nfail=0
npass=0
nskip=0

line() { # STATUS NAME [REASON]
    local s="$1 $2"
    [ -n "${3:-}" ] && s="$s ($3)"
    echo "$s" | tee -a "$SUMMARY"
    case $1 in
    PASS) npass=$((npass + 1)) ;;
    FAIL) nfail=$((nfail + 1)) ;;
    SKIP) nskip=$((nskip + 1)) ;;
    esac
}

left() { echo $((BUDGET - ($(date +%s) - START))); }

# want GROUP: whether KILN_GPU_CHECKS (a comma-separated list of groups; empty: all) names it
want() { [ -z "${KILN_GPU_CHECKS:-}" ] || [[ ",$KILN_GPU_CHECKS," == *",$1,"* ]]; }

# run NAME LIMIT CMD...: CMD under timeout (its limit or the time left), output to $T/NAME.out
# and check.log; sets RC (124: timed out, 125: no time left, not run).
run() {
    local name=$1 limit=$2
    shift 2
    local l
    l=$(left)
    [ "$l" -lt "$limit" ] && limit=$l
    if [ "$limit" -lt 5 ]; then
        RC=125
        return
    fi
    {
        echo "==== $name: $* (limit ${limit}s)"
    } >>"$LOG"
    local t0
    t0=$(date +%s)
    timeout --kill-after=10 "$limit" "$@" >"$T/$name.out" 2>&1
    RC=$?
    cat "$T/$name.out" >>"$LOG"
    echo "==== $name: exit $RC after $(($(date +%s) - t0)) s" >>"$LOG"
}

# The reason a harness test or script skipped: its first "skip" line.
skip_reason() {
    grep -m1 -i '^skip' "$T/$1.out" | sed 's/^skip: *//; s/^\[[^]]*\] *//' | cut -c1-200
}

last_words() { # the last non-empty line of a check's output, shortened
    grep -v '^\s*$' "$T/$1.out" 2>/dev/null | tail -1 | cut -c1-200
}

# judge NAME: a line from RC and the output. A skip on a machine with a device is a failure.
judge() {
    local name=$1
    case $RC in
    0)
        if grep -q '^[0-9]* passed, 0 failed, [1-9][0-9]* skipped' "$T/$name.out"; then
            skipped "$name" "$(skip_reason "$name")"
        else
            line PASS "$name"
        fi
        ;;
    77) skipped "$name" "$(skip_reason "$name")" ;;
    124 | 137) line FAIL "$name" "timed out" ;;
    125) line SKIP "$name" "no time left of ${BUDGET}s" ;;
    *) line FAIL "$name" "exit $RC: $(last_words "$name")" ;;
    esac
}

skipped() { # NAME REASON
    if [ "$GPU" = 1 ]; then
        line FAIL "$1" "skipped on a machine with a CUDA device: $2"
    else
        line SKIP "$1" "$2"
    fi
}

# ---- the build ----
B=${2:-}
if [ -n "$B" ] && [ -f "$B/kiln-bundle" ]; then
    # a bundle (scripts/gpu_bundle.sh): its libraries, and the paths its binaries were built at
    B=$(cd "$B" && pwd)
    if [ -f "$B/libs.tar.xz" ] && [ ! -d "$B/lib" ]; then
        mkdir -p "$B/lib" && tar -xJf "$B/libs.tar.xz" -C "$B/lib"
    fi
    if [ -f "$B/build.tar.xz" ] && [ ! -d "$B/build" ]; then
        tar -xJf "$B/build.tar.xz" -C "$B"
    fi
    export LD_LIBRARY_PATH="$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export C_INCLUDE_PATH="$B/lib/include${C_INCLUDE_PATH:+:$C_INCLUDE_PATH}"
    src=$(sed -n 's/^kiln_SOURCE_DIR:STATIC=//p' "$B/build/CMakeCache.txt")
    bin=$(sed -n 's/^kiln_BINARY_DIR:STATIC=//p' "$B/build/CMakeCache.txt")
    if [ -n "$src" ] && [ ! -e "$src" ]; then
        mkdir -p "$(dirname "$src")" && ln -s "$ROOT" "$src"
    fi
    if [ -n "$bin" ] && [ ! -e "$bin" ]; then
        mkdir -p "$(dirname "$bin")" && ln -s "$B/build" "$bin"
    fi
    echo "bundle $B: built at $bin from $src" >>"$LOG"
    B=$B/build
elif [ -z "$B" ]; then
    B=build-gpu
    run build 600 scripts/build.sh "$B"
    if [ "$RC" != 0 ]; then
        line FAIL build "exit $RC: $(last_words build)"
    fi
fi
if [ ! -x "$B/kiln" ]; then
    line FAIL build "no kiln in $B"
    echo "$npass passed, $nfail failed, $nskip skipped" | tee -a "$SUMMARY"
    exit 1
fi
B=$(cd "$B" && pwd)

# CUDA's libraries where the toolkit or Python's wheels put them (NVRTC for kiln, cuBLAS and
# cuDNN for bench_gpu), after those already on the path
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib \
    $(python3 -c 'import glob, os, nvidia; print(" ".join(sorted(glob.glob(os.path.join(list(nvidia.__path__)[0], "*", "lib")))))' 2>/dev/null); do
    [ -d "$d" ] && LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"
done
export LD_LIBRARY_PATH
export KILN_CACHE=off

# ---- is there a device? ----
GPU=0
run device 60 "$B/test_cuda_rt" open
if grep -q '^device 0: ' "$T/device.out"; then
    GPU=1
    echo "device: $(grep -m1 '^device 0: ' "$T/device.out" | sed 's/^device 0: //')" | tee -a "$SUMMARY"
else
    echo "device: none ($(skip_reason device))" | tee -a "$SUMMARY"
fi
command -v nvidia-smi >/dev/null && nvidia-smi >>"$LOG" 2>&1

# ---- the device tests of the unit tests ----
if want unit; then
    for t in open kernel driver_errors module prepared; do
        run "test_cuda_rt.$t" 120 "$B/test_cuda_rt" "$t"
        judge "test_cuda_rt.$t"
    done
    run gpu_device 180 "$B/test_measure" gpu_device
    judge gpu_device
    run tune_gpu_device 240 "$B/test_tune" tune_gpu_device
    judge tune_gpu_device

    # tests/cli/cuda_run.sh passes without a GPU too (the stand-in driver's part): only its GPU part
    # counts here
    run cuda_run.sh 120 bash tests/cli/cuda_run.sh "$B/kiln"
    if [ "$RC" = 0 ] && grep -q '^PASS$' "$T/cuda_run.sh.out"; then
        line PASS cuda_run.sh
    elif [ "$RC" = 0 ] || [ "$RC" = 77 ]; then
        why=$(grep -m1 '^note\|^skip' "$T/cuda_run.sh.out" | cut -c1-200)
        skipped cuda_run.sh "${why:-no CUDA driver: only its stand-in driver part ran, and passed}"
    else
        judge cuda_run.sh
    fi
fi

# ---- bench_gpu with the hand-written schedules ----
if want bench_gpu; then
    if [ ! -x "$B/bench_gpu" ]; then
        line SKIP bench_gpu "not built: no CUDA toolkit with cuBLAS and cuDNN"
    else
        run bench_gpu 180 "$B/bench_gpu" --reps 5 --rounds 2
        if [ "$RC" != 0 ] && grep -q 'no CUDA driver\|no CUDA device' "$T/bench_gpu.out"; then
            skipped bench_gpu "$(last_words bench_gpu)"
        else
            judge bench_gpu
            grep -i 'geomean\|geometric' "$T/bench_gpu.out" | sed 's/^/bench_gpu: /' >>"$SUMMARY"
        fi
    fi
fi

# ---- every library op: shards of test_cuda_rt lib_ops at once ----
if want lib_ops; then
    if [ "$GPU" = 1 ]; then
        n=$(nproc)
        [ "$n" -gt 8 ] && n=8
        cat >"$T/lib_ops.sh" <<EOF
for i in \$(seq 0 $((n - 1))); do
    KILN_TEST_SHARD=\$i/$n timeout 230 "$B/test_cuda_rt" lib_ops >"$T/lib_ops.\$i" 2>&1 &
done
rc=0
for j in \$(jobs -p); do wait \$j || rc=1; done
cat "$T"/lib_ops.[0-9]*
grep -h '^library ops on' "$T"/lib_ops.[0-9]*
exit \$rc
EOF
        run lib_ops 240 bash "$T/lib_ops.sh"
        if [ "$RC" = 0 ]; then
            p=$(grep -h 'programs matched' "$T/lib_ops.out" |
                sed 's/.*: \([0-9]*\) programs matched.*/\1/' | awk '{s += $1} END {print s}')
            echo "lib_ops: ${p:-0} programs matched the reference" >>"$SUMMARY"
            line PASS lib_ops
        else
            judge lib_ops
        fi
    else
        line SKIP lib_ops "no CUDA device"
    fi
fi

# ---- both CNNs end to end ----
python3 scripts/cnn_kg.py "$T/nets" >>"$LOG" 2>&1 || line FAIL cnn "scripts/cnn_kg.py failed"
for net in resnet18 mobilenet_v2; do
    [ -f "$T/nets/$net.kg" ] || continue
    want cnn || want "cnn.$net" || continue
    if [ "$GPU" = 0 ]; then # the graph parses; compiling it here would cost minutes for nothing
        run "cnn.$net.parse" 60 "$B/kiln" inspect "$T/nets/$net.kg"
        [ "$RC" = 0 ] && line SKIP "cnn.$net" "no CUDA device" || judge "cnn.$net.parse"
        continue
    fi
    run "cnn.$net.compile" 240 "$B/kiln" compile "$T/nets/$net.kg" --target cuda --no-db \
        -o "$T/$net.so"
    if [ "$RC" != 0 ]; then
        judge "cnn.$net.compile"
        continue
    fi
    run "cnn.$net" 240 "$B/kiln" run "$T/$net.so" --check --bench --repeat 3 --min-time 0.1
    if [ "$RC" != 0 ] && grep -q 'no CUDA driver\|no CUDA device' "$T/cnn.$net.out"; then
        skipped "cnn.$net" "$(last_words "cnn.$net")"
    else
        judge "cnn.$net"
        grep -h '^bench: .* ms per call' "$T/cnn.$net.out" | sed "s/^/cnn.$net: /" >>"$SUMMARY"
    fi
done

# ---- PyTorch eager on the same GPU: the end-to-end reference ----
if want cnn || want torch; then
    run torch 120 python3 scripts/gpu_torch_ref.py
    if [ "$RC" = 0 ]; then
        line PASS torch
        grep -h '^torch\.' "$T/torch.out" >>"$SUMMARY"
    elif [ "$RC" = 77 ]; then # an optional reference: its absence is no failure of kiln's
        line SKIP torch "$(skip_reason torch)"
    else
        judge torch
    fi
fi

# ---- tuning on the device: trials per minute ----
if want tune_rate; then
    tune_s=${KILN_GPU_TUNE_SECONDS:-90}
    if [ "$GPU" = 0 ]; then
        line SKIP tune_rate "no CUDA device"
    elif [ ! -x "$B/bench_gpu" ]; then
        line SKIP tune_rate "bench_gpu (which writes the workload) is not built"
    else
        "$B/bench_gpu" --write-kg "$T/kg" >>"$LOG" 2>&1
        t0=$(date +%s)
        run tune_rate $((tune_s + 60)) "$B/kiln" tune "$T/kg/conv3x3_28.kg" --target cuda \
            --time "$tune_s" --db "$T/tune.db" --no-cache --log "$T/tune.jsonl"
        secs=$(($(date +%s) - t0))
        trials=$(wc -l <"$T/tune.jsonl" 2>/dev/null || echo 0)
        # the trials' build and run durations, for where a trial's time goes
        [ -s "$T/tune.jsonl" ] && xz -c "$T/tune.jsonl" >"$OUT/tune.jsonl.xz"
        if [ "$RC" = 0 ] && [ "$trials" -gt 0 ]; then
            echo "tune_rate: $trials trials in $secs s: $((trials * 60 / (secs > 0 ? secs : 1))) trials per minute" |
                tee -a "$SUMMARY"
            line PASS tune_rate
            run tuned_bench 120 "$B/bench_gpu" --db "$T/tune.db" --only conv3x3_28 --reps 5 --rounds 2
            judge tuned_bench
            grep 'conv3x3_28' "$T/tuned_bench.out" | sed 's/^/tuned_bench: /' >>"$SUMMARY"
        elif [ "$RC" = 0 ]; then
            line FAIL tune_rate "no trial measured in $secs s"
        else
            judge tune_rate
        fi
    fi
fi

echo "$npass passed, $nfail failed, $nskip skipped in $(($(date +%s) - START)) s" | tee -a "$SUMMARY"
[ "$nfail" = 0 ]
