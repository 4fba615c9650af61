#!/usr/bin/env bash
# tests/cli/redis_queue.sh -- measurement on workers over Redis Streams: a redis-server on a free
# loopback port (private directory, no persistence), two `kiln worker`s and `kiln tune --queue`
# on a small matmul; once a few records are in, one worker is killed with SIGKILL and another
# started. Checks: the run succeeds, every trial is recorded exactly once, every record is a
# valid measurement (time > 0, no error), no job is left pending (XPENDING), and the measured
# schedules are those local tuning with the same seed measures, in the same order (the oracle:
# the first 12 trials of a seed do not depend on any time). Then malformed jobs (garbage, missing
# and repeated fields, huge values, an unparsable and a huge graph, a foreign reply stream) sent
# to a worker with redis-cli: each answerable one gets a "rejected" reply, the others are
# dropped, and the worker stays alive, measures a valid job afterwards and stops cleanly on
# SIGTERM. A job whose first two workers are SIGKILLed is a crash from the third. No worker on a
# stream: the tuner fails naming it and withdraws its jobs. Redis restarting mid-run: the run
# completes with the local schedules. Redis unreachable: kiln tune --queue fails after its
# timeout with a message, recording nothing.
# Skips (77) without redis-server/redis-cli or when kiln was built without hiredis.
#   bash tests/cli/redis_queue.sh PATH_TO_KILN
set -u
KILN=${1:?usage: redis_queue.sh PATH_TO_KILN}
KILN=$(cd "$(dirname "$KILN")" && pwd)/$(basename "$KILN")
if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
    echo "SKIP: redis-server or redis-cli not installed (scripts/setup.sh installs them)"
    exit 77
fi
if "$KILN" worker --help | grep -q '^Redis support: none'; then
    echo "SKIP: kiln was built without Redis support (libhiredis-dev)"
    exit 77
fi
SEED=${KILN_TEST_SEED:-$((RANDOM % 1000 + 1))}
echo "seed $SEED"
T=$(mktemp -d)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$T"
}
trap cleanup EXIT
fails=0
fail() {
    echo "FAIL: $*" >&2
    fails=$((fails + 1))
}

# a redis-server on a free port
PORT=
for _ in $(seq 1 20); do
    p=$((20000 + RANDOM % 40000))
    redis-cli -p "$p" ping >/dev/null 2>&1 && continue
    redis-server --port "$p" --bind 127.0.0.1 --save '' --appendonly no --dir "$T" \
        >"$T/redis.log" 2>&1 &
    rpid=$!
    for _ in $(seq 1 50); do
        redis-cli -p "$p" ping 2>/dev/null | grep -q PONG && break
        kill -0 $rpid 2>/dev/null || break
        sleep 0.1
    done
    if redis-cli -p "$p" ping 2>/dev/null | grep -q PONG; then
        PORT=$p
        PIDS+=($rpid)
        break
    fi
    kill -9 $rpid 2>/dev/null
done
[ -n "$PORT" ] || { echo "FAIL: could not start redis-server: $(cat "$T/redis.log")"; exit 1; }
R="redis-cli -p $PORT"
URL="redis://127.0.0.1:$PORT/t$SEED"

cat >"$T/mm.kg" <<'KG'
input a: f32[48, 64]
weight b: f32[64, 32]
c[i, j] += a[i, k] * b[k, j]
y = relu(c)
output y
KG
# 12 trials: the default schedule and the batches chosen before the cost model trains
Q="--trials 12 --batch 4 --population 32 --repeat 3 --min-repeat-ms 60 --seed $SEED --quiet"

worker() { # worker NAME: starts one, its pid in WPID
    "$KILN" worker --queue "$URL" --claim-after 2 >"$T/$1.log" 2>&1 &
    WPID=$!
    PIDS+=($WPID)
}
worker w1
W1=$WPID
worker w2
"$KILN" tune "$T/mm.kg" --db "$T/q.db" $Q --queue "$URL" --queue-timeout 60 2>"$T/tune.err" &
TPID=$!
PIDS+=($TPID)
for _ in $(seq 1 300); do
    c=$("$KILN" records "$T/q.db" 2>/dev/null | awk 'NR == 2 {print $2}')
    [ -n "$c" ] && [ "$c" -ge 3 ] && break
    sleep 0.1
done
kill -9 $W1
worker w3
claimed_note() { echo "jobs claimed from the killed worker: $(cat "$T"/w[23].log | grep -c claimed)"; }
wait $TPID
rc=$?
[ "$rc" = 0 ] || fail "kiln tune --queue exited $rc: $(cat "$T/tune.err")"
[ "$c" -lt 12 ] || fail "the worker was killed only after the run ($c records)"
claimed_note

"$KILN" tune "$T/mm.kg" --db "$T/l.db" $Q 2>"$T/local.err" || fail "local tune: $(cat "$T/local.err")"
"$KILN" records "$T/q.db" --export "$T/q.jsonl" || fail "export q.db"
"$KILN" records "$T/l.db" --export "$T/l.jsonl" || fail "export l.db"
python3 - "$T/q.jsonl" "$T/l.jsonl" <<'PY' || fail "records of the queue run (above)"
import json, sys
def recs(path):
    return [json.loads(l) for l in open(path) if not l.startswith('{"graph"')]
q, l = recs(sys.argv[1]), recs(sys.argv[2])
assert len(q) == 12, f"{len(q)} records, want 12 (every trial exactly once)"
for r in q:
    assert r["error"] == "ok" and r["time_s"] > 0, f"not a valid measurement: {r}"
qs, ls = [r["schedule"] for r in q], [r["schedule"] for r in l]
assert len(set(qs)) == len(qs), "a schedule was recorded twice"
assert qs == ls, "the queue run measured other schedules than local tuning with the same seed"
PY
keys=$($R --scan --pattern "kiln:t$SEED:jobs:*")
[ -n "$keys" ] || fail "no jobs stream"
while IFS= read -r k; do
    [ -z "$k" ] && continue
    n=$($R XPENDING "$k" workers | head -1)
    [ "$n" = 0 ] || fail "$n jobs left pending in $k"
done <<<"$keys"
[ -z "$($R --scan --pattern "kiln:t$SEED:replies:*")" ] || fail "the tuner left its reply stream"

# malformed jobs, to a worker with its own stream
KEY="kiln:t$SEED:jobs:malformed"
RT="kiln:t$SEED:replies:test"
"$KILN" worker --queue "$URL" --jobs-key "$KEY" --claim-after 60 >"$T/wm.log" 2>&1 &
WM=$!
PIDS+=($WM)
for _ in $(seq 1 50); do grep -q serving "$T/wm.log" && break; sleep 0.1; done
TARGET=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readlines()[1])["target"])' "$T/q.jsonl")
GRAPH=$(cat "$T/mm.kg")
good() { # the fields of a valid job, with id $1; later arguments replace fields
    local -A f=([v]=1 [id]=$1 [reply_to]=$RT [target]=$TARGET [graph]=$GRAPH [schedule]=
        [check]=1 [seed]=$SEED [repeat]=2 [warmup]=0 [min_repeat_ms]=1 [flush]=0 [threads]=0
        [build_timeout_s]=30 [run_timeout_s]=10 [ref_max_flops]=1e8 [hopeless_s]=0)
    shift
    while [ $# -gt 0 ]; do f[$1]=$2; shift 2; done
    ARGS=()
    for k in "${!f[@]}"; do [ "${f[$k]}" = DROP ] || ARGS+=("$k" "${f[$k]}"); done
}
send() { $R XADD "$KEY" '*' "$@" >/dev/null || fail "XADD $*"; }
send garbage fields
send reply_to "$RT" id m2 bogus 1
good m3 repeat DROP; send "${ARGS[@]}"
good m4 repeat 99999999999999999999; send "${ARGS[@]}"
good m5 seed -1; send "${ARGS[@]}"
good m6 graph 'this is not a graph'; send "${ARGS[@]}"
good m7 graph "$(printf 'input a: f32[100000, 100000]\ny = relu(a)\noutput y')"; send "${ARGS[@]}"
good m8 run_timeout_s nan; send "${ARGS[@]}"
good m9 target 'llvm -mcpu=nonsense'; send "${ARGS[@]}"
good m10 reply_to "kiln:other:replies:x"; send "${ARGS[@]}"
good m11 v 2; send "${ARGS[@]}"
good m12 schedule '{"steps": [{"op": "nope"}]}'; send "${ARGS[@]}"
good m13; send "${ARGS[@]}" id again
good m14; send "${ARGS[@]}"
for _ in $(seq 1 300); do
    [ "$($R XLEN "$RT")" -ge 11 ] && break
    sleep 0.1
done
kill -0 $WM 2>/dev/null || fail "the worker died on malformed jobs: $(cat "$T/wm.log")"
# one entry per line: redis-cli --csv prints a whole reply on one line
start=-
: >"$T/replies.csv"
for _ in $(seq 1 100); do
    row=$($R --csv XRANGE "$RT" "$start" + COUNT 1)
    [ -z "$row" ] && break
    echo "$row" >>"$T/replies.csv"
    start="(${row%%\",*}"
    start="(${start#(\"}"
done
python3 - "$T/replies.csv" <<'PY' || fail "replies to malformed jobs (above): $(cat "$T/wm.log")"
import csv, sys
got = {}
for row in csv.reader(open(sys.argv[1]), escapechar="\\", doublequote=False):
    # XRANGE in CSV: the entry id, then field, value, ...
    f = dict(zip(row[1::2], row[2::2]))
    got[f["id"]] = f
want_rejected = ["m2", "m3", "m4", "m5", "m6", "m7", "m8", "m9", "m11"]
for i in want_rejected:
    assert i in got, f"no reply to {i}: {sorted(got)}"
    assert got[i]["error"] == "rejected" and got[i]["msg"], f"{i}: {got[i]}"
assert "m10" not in got, "answered on a foreign reply stream"
assert got["m12"]["error"] == "lower", f"m12: {got['m12']}"
assert "m13" not in got, "a job with a repeated field was answered with its id"
assert got["m14"]["error"] == "ok" and float(got["m14"]["time_s"]) > 0, f"m14: {got['m14']}"
assert set(got) == set(want_rejected) | {"m12", "m14"}, sorted(got)
PY
n=$($R XPENDING "$KEY" workers | head -1)
[ "$n" = 0 ] || fail "$n malformed jobs left pending"
kill -TERM $WM
wait $WM
rc=$?
[ "$rc" = 0 ] || fail "the worker exited $rc on SIGTERM: $(tail -3 "$T/wm.log")"
grep -q "dropped entry" "$T/wm.log" || fail "no line about the dropped entries"

# a job that kills its worker twice (SIGKILL while it computes the reference, twice) is
# answered by the third as a crash, not measured again
KEY2="kiln:t$SEED:jobs:crash"
good c1 ref_max_flops 1e9 graph "$(printf 'input a: f32[512, 256]\nweight b: f32[256, 512]\nc[i, j] += a[i, k] * b[k, j]\noutput c')"
$R XADD "$KEY2" '*' "${ARGS[@]}" >/dev/null || fail "XADD c1"
for round in 1 2; do
    "$KILN" worker --queue "$URL" --jobs-key "$KEY2" --claim-after 1 >"$T/wc$round.log" 2>&1 &
    wc=$!
    PIDS+=($wc)
    d=
    for _ in $(seq 1 200); do
        d=$($R XPENDING "$KEY2" workers - + 1 | sed -n 4p)
        [ "$d" = "$round" ] && break
        sleep 0.05
    done
    [ "$d" = "$round" ] || fail "round $round: the job was not handed out $round times ($d)"
    kill -9 $wc
done
"$KILN" worker --queue "$URL" --jobs-key "$KEY2" --claim-after 1 >"$T/wc3.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 200); do
    grep -q "job c1:" "$T/wc3.log" && break
    sleep 0.1
done
grep -q "job c1: crash" "$T/wc3.log" || fail "the twice-fatal job was not a crash: $(cat "$T/wc3.log")"
$R XRANGE "$RT" - + | grep -q "handed out 3 times" || fail "no crash reply for c1"
n=$($R XPENDING "$KEY2" workers | head -1)
[ "$n" = 0 ] || fail "the twice-fatal job is still pending"

# no worker serving the stream: the tuner fails after its timeout, naming the stream, records
# nothing and takes its jobs back off the stream
"$KILN" tune "$T/mm.kg" --db "$T/n.db" $Q --queue "$URL" --jobs-key "kiln:t$SEED:jobs:nobody" \
    --queue-timeout 2 2>"$T/n.err"
rc=$?
[ "$rc" = 1 ] || fail "tune without workers exited $rc"
grep -q "no worker answered for 2 s.*kiln:t$SEED:jobs:nobody" "$T/n.err" || fail "message: $(cat "$T/n.err")"
[ -z "$("$KILN" records "$T/n.db" 2>/dev/null | awk 'NR == 2 {print $2}')" ] || fail "records without workers"
[ "$($R XLEN "kiln:t$SEED:jobs:nobody")" = 0 ] || fail "the unanswered jobs stayed on the stream"

# Redis restarting mid-run (no persistence: its streams are gone): the tuner and the worker
# reconnect, the tuner sends the unanswered jobs again, and the run completes
"$KILN" worker --queue "$URL" --claim-after 2 >"$T/wr.log" 2>&1 &
PIDS+=($!)
"$KILN" tune "$T/mm.kg" --db "$T/r.db" $Q --queue "$URL" --queue-timeout 60 2>"$T/r.err" &
TPID=$!
PIDS+=($TPID)
for _ in $(seq 1 300); do
    c=$("$KILN" records "$T/r.db" 2>/dev/null | awk 'NR == 2 {print $2}')
    [ -n "$c" ] && [ "$c" -ge 2 ] && break
    sleep 0.1
done
kill -9 "${PIDS[0]}"
sleep 1
redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$T" \
    >"$T/redis2.log" 2>&1 &
PIDS[0]=$!
wait $TPID
rc=$?
[ "$c" -lt 12 ] || fail "Redis restarted only after the run ($c records)"
[ "$rc" = 0 ] || fail "kiln tune across a Redis restart exited $rc: $(cat "$T/r.err")"
grep -q "retrying" "$T/r.err" || fail "no retry message from the tuner: $(cat "$T/r.err")"
"$KILN" records "$T/r.db" --export "$T/r.jsonl" || fail "export r.db"
python3 - "$T/r.jsonl" "$T/l.jsonl" <<'PY' || fail "records across the Redis restart (above)"
import json, sys
def recs(path):
    return [json.loads(l) for l in open(path) if not l.startswith('{"graph"')]
r, l = recs(sys.argv[1]), recs(sys.argv[2])
assert len(r) == 12, f"{len(r)} records, want 12"
assert all(x["error"] == "ok" and x["time_s"] > 0 for x in r), "an invalid record"
assert [x["schedule"] for x in r] == [x["schedule"] for x in l], "other schedules than local"
PY

# Redis unreachable: a clear message, then failure after the queue timeout, no record
kill -9 "${PIDS[0]}"
"$KILN" tune "$T/mm.kg" --db "$T/u.db" $Q --queue "$URL" --queue-timeout 2 2>"$T/u.err"
rc=$?
[ "$rc" = 1 ] || fail "tune with Redis down exited $rc"
grep -q "cannot connect to Redis at 127.0.0.1:$PORT" "$T/u.err" || fail "message: $(cat "$T/u.err")"
grep -q "gave up after 2 s" "$T/u.err" || fail "no stated timeout: $(cat "$T/u.err")"
c=$("$KILN" records "$T/u.db" 2>/dev/null | awk 'NR == 2 {print $2}')
[ -z "$c" ] || fail "records written without Redis: $c"

# usage errors
"$KILN" worker --queue "http://x:1/a" 2>"$T/e" && fail "bad scheme accepted"
grep -q "redis://" "$T/e" || fail "bad scheme message: $(cat "$T/e")"
"$KILN" worker --queue "redis://:secret@h:99999/a" 2>"$T/e" && fail "bad port accepted"
grep -q "port" "$T/e" && ! grep -q secret "$T/e" || fail "bad port message: $(cat "$T/e")"
"$KILN" worker --queue "rediss://h:1/a" 2>"$T/e" && fail "TLS accepted"
grep -q "TLS" "$T/e" || fail "TLS message: $(cat "$T/e")"

[ $fails = 0 ] && echo "redis_queue: all passed"
exit $((fails > 0))
