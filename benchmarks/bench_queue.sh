#!/usr/bin/env bash
# benchmarks/bench_queue.sh -- measurement on workers over Redis Streams (issue 27).
#   throughput: trials per minute of `kiln tune` on one task (a 256x256x256 matmul + relu) with
#     local measurement (build workers as by default) and with --queue and 1 or 2 `kiln worker`s
#     of one core each (taskset), the same seed and trials; the tuner's own CPU seconds.
#   sim: one tuner and W simulated workers (benchmarks/sim_workers.py: threads that answer every
#     job "ok" after sleeping S seconds instead of measuring): how busy the workers are (jobs x S
#     over W x the tuner's wall time) and the tuner's CPU use at that scale.
# It starts its own redis-server on a free loopback port in a temporary directory.
#   benchmarks/bench_queue.sh [--kiln build/kiln] [--part throughput|sim|all] [--trials N]
#                             [--workers W] [--sleep S] [--rounds R]
set -u
KILN=build/kiln
PART=all
TRIALS=48
W=64
S=5
ROUNDS=4
while [ $# -gt 0 ]; do
    case $1 in
    --kiln) KILN=$2; shift 2 ;;
    --part) PART=$2; shift 2 ;;
    --trials) TRIALS=$2; shift 2 ;;
    --workers) W=$2; shift 2 ;;
    --sleep) S=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    *) echo "usage: $0 [--kiln PATH] [--part throughput|sim|all] [--trials N] [--workers W]" \
        "[--sleep S] [--rounds R]" >&2; exit 2 ;;
    esac
done
KILN=$(cd "$(dirname "$KILN")" && pwd)/$(basename "$KILN")
command -v redis-server >/dev/null || { echo "redis-server missing (scripts/setup.sh)"; exit 1; }
T=$(mktemp -d)
PIDS=()
cleanup() {
    touch "$T/stop"
    for ((k = ${#PIDS[@]} - 1; k >= 0; k--)); do kill -9 "${PIDS[k]}" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$T"
}
trap cleanup EXIT
export KILN_CACHE=off

PORT=
for _ in $(seq 1 20); do
    p=$((20000 + RANDOM % 40000))
    redis-cli -p "$p" ping >/dev/null 2>&1 && continue
    redis-server --port "$p" --bind 127.0.0.1 --save '' --appendonly no --dir "$T" \
        >"$T/redis.log" 2>&1 &
    rpid=$!
    for _ in $(seq 1 50); do
        redis-cli -p "$p" ping 2>/dev/null | grep -q PONG && break
        sleep 0.1
    done
    if redis-cli -p "$p" ping 2>/dev/null | grep -q PONG; then
        PORT=$p
        PIDS+=($rpid)
        break
    fi
    kill -9 $rpid 2>/dev/null
done
[ -n "$PORT" ] || { echo "could not start redis-server"; exit 1; }
URL="redis://127.0.0.1:$PORT/bench"
R="redis-cli -p $PORT"

cat >"$T/mm.kg" <<'KG'
input a: f32[256, 256]
weight b: f32[256, 256]
c[i, j] += a[i, k] * b[k, j]
y = relu(c)
output y
KG

# runs kiln tune with the arguments; prints "wall user+sys"
timed_tune() {
    /usr/bin/time -f "%e %U %S" -o "$T/time" "$KILN" tune "$T/mm.kg" --quiet "$@" \
        2>"$T/tune.err" || { echo "kiln tune failed: $(cat "$T/tune.err")" >&2; return 1; }
    awk '{printf "%s %.2f", $1, $2 + $3}' "$T/time"
}

if [ "$PART" = all ] || [ "$PART" = throughput ]; then
    echo "== trials per minute, $TRIALS trials of a 256^3 matmul + relu, $(nproc) cores =="
    Q="--trials $TRIALS --batch 8 --population 64 --seed 1 --threads 1"
    printf "%-28s %8s %10s %12s\n" config wall_s trials/min tuner_cpu_s
    read -r wall cpu < <(timed_tune --db "$T/local.db" $Q)
    printf "%-28s %8s %10.1f %12s\n" "local (build workers)" "$wall" \
        "$(echo "$TRIALS * 60 / $wall" | bc -l)" "$cpu"
    for nw in 1 2; do
        WP=()
        for c in $(seq 0 $((nw - 1))); do
            taskset -c "$c" "$KILN" worker --queue "$URL" --jobs-key kiln:bench:jobs:tp$nw \
                >"$T/w$nw$c.log" 2>&1 &
            WP+=($!)
            PIDS+=($!)
        done
        read -r wall cpu < <(timed_tune --db "$T/q$nw.db" $Q --queue "$URL" \
            --jobs-key kiln:bench:jobs:tp$nw)
        printf "%-28s %8s %10.1f %12s\n" "--queue, $nw worker(s) x 1 core" "$wall" \
            "$(echo "$TRIALS * 60 / $wall" | bc -l)" "$cpu"
        kill "${WP[@]}" 2>/dev/null
    done
fi

if [ "$PART" = all ] || [ "$PART" = sim ]; then
    KEY=kiln:bench:jobs:sim
    : >"$T/jobs"
    /usr/bin/python3 "$(dirname "$0")/sim_workers.py" --port "$PORT" --key "$KEY" --workers "$W" \
        --sleep "$S" --log "$T/jobs" --stop "$T/stop" &
    PIDS+=($!)
    N=$((1 + W * ROUNDS))
    echo "== $W simulated workers (each job: sleep $S s), batch $W, $N trials =="
    read -r wall cpu < <(timed_tune --db "$T/sim.db" --trials "$N" --batch "$W" --seed 1 \
        --queue "$URL" --jobs-key "$KEY")
    sleep 1 # the last answers' log lines
    jobs=$(wc -l <"$T/jobs")
    busy=$(awk '{b += $3 - $2} END {printf "%.1f", b}' "$T/jobs")
    echo "jobs answered $jobs by $(awk '{print $1}' "$T/jobs" | sort -u | wc -l) workers;" \
        "tuner wall ${wall} s, tuner CPU ${cpu} s" \
        "($(echo "100 * $cpu / $wall" | bc -l | xargs printf %.0f)% of one core)"
    echo "workers busy: $(echo "100 * $busy / ($W * $wall)" | bc -l | xargs printf %.1f)%" \
        "of $W x $wall s (the first round measures the default schedule alone)"
    echo "lower bound on the tuner's rounds: $((ROUNDS + 1)) x $S s = $(((ROUNDS + 1) * S)) s;" \
        "the rest of the wall time is the tuner's own work between batches"
fi
