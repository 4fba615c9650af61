#!/usr/bin/env bash
# tests/cli/tune.sh -- kiln tune and kiln records from the command line: a small tuning run with
# a JSON-lines log and tuning curves, the listing, export to JSON lines and import into a fresh
# database (the same listing comes back), compile --db applying the records (checked against
# the reference interpreter by kiln run --check), SIGINT stopping a run without losing records
# and a second run resuming to the requested total, the records cache (--cache, KILN_CACHE,
# --no-cache, a damaged cache), --time with the whole model's curve, and clear errors for bad
# flags and files.
#   bash tests/cli/tune.sh PATH_TO_KILN
set -u
KILN=${1:?usage: tune.sh PATH_TO_KILN}
KILN=$(cd "$(dirname "$KILN")" && pwd)/$(basename "$KILN")
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
fail() {
    echo "FAIL: $*" >&2
    fails=$((fails + 1))
}
cat >"$T/mm.kg" <<'KG'
input a: f32[48, 64]
weight b: f32[64, 32]
c[i, j] += a[i, k] * b[k, j]
y = relu(c)
output y
KG
Q="--batch 4 --population 32 --repeat 3 --min-repeat-ms 1 --quiet"

# a run with a log and curves
"$KILN" tune "$T/mm.kg" --trials 12 --db "$T/a.db" --log "$T/log.jsonl" --curves "$T/curves" $Q \
    2>"$T/err" || fail "kiln tune failed: $(cat "$T/err")"
n=$(wc -l <"$T/log.jsonl")
[ "$n" = 12 ] || fail "log has $n lines, want 12"
python3 - "$T/log.jsonl" <<'PY' || fail "log lines are not JSON objects with the fields"
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    for k in ("task", "trial", "strategy", "time_s", "best_s", "build_s", "repeats", "at_s", "error", "schedule"):
        assert k in r, k
    assert r["build_s"] >= 0 and r["at_s"] >= 0, line
    assert r["error"] != "ok" or r["repeats"] >= 1, line
PY
ls "$T"/curves/task0_*.csv >/dev/null 2>&1 || fail "no tuning curve CSV"
[ -s "$T/curves/curves.svg" ] || fail "no curves.svg"
head -1 "$T"/curves/task0_*.csv | grep -q '^trial,time_s,best_s' || fail "curve CSV header"

# listing, export, import
"$KILN" records "$T/a.db" >"$T/list_a" || fail "kiln records failed"
grep -Eq '^[0-9a-f]{16} +12 ' "$T/list_a" || fail "listing: $(cat "$T/list_a")"
"$KILN" records "$T/a.db" --export "$T/a.jsonl" || fail "export failed"
[ "$(grep -vc '^{"graph":' "$T/a.jsonl")" = 12 ] || fail "export has $(wc -l <"$T/a.jsonl") lines"
[ "$(grep -c '^{"graph":' "$T/a.jsonl")" = 1 ] || fail "export has no graph line"
"$KILN" records "$T/b.db" --import "$T/a.jsonl" | grep -q 'imported 12 records' || fail "import"
"$KILN" records "$T/b.db" --import "$T/a.jsonl" | grep -q 'imported 0 records' || fail "reimport"
"$KILN" records "$T/b.db" >"$T/list_b"
cmp -s "$T/list_a" "$T/list_b" || fail "listing after import differs: $(diff "$T/list_a" "$T/list_b")"

# compile with the records and check the result
"$KILN" compile "$T/mm.kg" --db "$T/b.db" -o "$T/mm.so" 2>"$T/err" || fail "compile --db: $(cat "$T/err")"
grep -q '1 of 1 tasks tuned' "$T/err" || fail "compile --db did not apply records: $(cat "$T/err")"
"$KILN" run "$T/mm.so" --check >"$T/out" 2>&1 || fail "run --check: $(cat "$T/out")"
(cd "$T" && cp b.db kiln.db && "$KILN" compile mm.kg -o mm2.so 2>err2) || fail "default kiln.db"
grep -q 'records from kiln.db' "$T/err2" || fail "kiln.db not picked up by default"

# SIGINT stops after the measurement in flight; the next run resumes to the total
"$KILN" tune "$T/mm.kg" --trials 400 --db "$T/c.db" $Q 2>"$T/err" &
pid=$!
for _ in $(seq 1 300); do
    sleep 0.2
    c=$("$KILN" records "$T/c.db" 2>/dev/null | awk 'NR == 2 {print $2}')
    [ -n "$c" ] && [ "$c" -ge 5 ] && break
done
kill -INT $pid
wait $pid
rc=$?
[ "$rc" = 130 ] || fail "interrupted tune exited $rc, want 130 ($(cat "$T/err"))"
grep -q 'stopped; every finished measurement' "$T/err" || fail "no stop message"
c=$("$KILN" records "$T/c.db" | awk 'NR == 2 {print $2}')
"$KILN" tune "$T/mm.kg" --trials $((c + 3)) --db "$T/c.db" $Q 2>"$T/err" || fail "resume failed"
c2=$("$KILN" records "$T/c.db" | awk 'NR == 2 {print $2}')
[ "$c2" = $((c + 3)) ] || fail "resumed to $c2 records, want $((c + 3))"

# SIGHUP (a closed terminal) stops the same way, and no temporary directory is left behind
mkdir -p "$T/tmpd"
TMPDIR="$T/tmpd" "$KILN" tune "$T/mm.kg" --trials 400 --db "$T/h.db" $Q 2>"$T/err" &
pid=$!
for _ in $(seq 1 3000); do # signal it while a measurement's temporary directory exists
    ls -A "$T/tmpd" | grep -q '^kiln-' && break
    sleep 0.01
done
kill -HUP $pid
wait $pid
rc=$?
[ "$rc" = 129 ] || fail "tune stopped by SIGHUP exited $rc, want 129 ($(cat "$T/err"))"
grep -q 'stopped; every finished measurement' "$T/err" || fail "no stop message after SIGHUP"
left=$(ls -A "$T/tmpd" | grep '^kiln-')
[ -z "$left" ] || fail "SIGHUP left temporary files behind: $left"

# the records cache: --cache receives every record; the environment names it when no flag
# does; --no-cache wins over the environment; a damaged cache is one warning naming it
count() { "$KILN" records "$1" 2>/dev/null | awk 'NR > 1 {n += $2} END {print n + 0}'; }
"$KILN" tune "$T/mm.kg" --trials 6 --db "$T/k.db" --cache "$T/cache/sub/records.db" $Q \
    2>"$T/err" || fail "tune --cache: $(cat "$T/err")"
[ "$(count "$T/cache/sub/records.db")" = 6 ] || fail "cache has $(count "$T/cache/sub/records.db") records, want 6"
KILN_CACHE="$T/env.db" "$KILN" tune "$T/mm.kg" --trials 3 --db "$T/e.db" $Q 2>"$T/err" ||
    fail "tune with KILN_CACHE: $(cat "$T/err")"
[ "$(count "$T/env.db")" = 3 ] || fail "KILN_CACHE cache has $(count "$T/env.db") records"
KILN_CACHE="$T/env2.db" "$KILN" tune "$T/mm.kg" --trials 3 --db "$T/e2.db" --no-cache $Q 2>"$T/err" ||
    fail "tune --no-cache: $(cat "$T/err")"
[ ! -e "$T/env2.db" ] || fail "--no-cache wrote the cache"
# a new database starts from the cached records of its task: they are copied, nothing measured
"$KILN" tune "$T/mm.kg" --trials 2 --db "$T/k2.db" --cache "$T/cache/sub/records.db" $Q 2>"$T/err" ||
    fail "tune from the cache: $(cat "$T/err")"
[ "$(count "$T/k2.db")" = 8 ] || fail "database from the cache has $(count "$T/k2.db") records, want 6 + 2"
echo "not a database, but long enough for a header" >"$T/badcache.db"
"$KILN" tune "$T/mm.kg" --trials 3 --db "$T/m.db" --cache "$T/badcache.db" $Q 2>"$T/err" ||
    fail "tune with a damaged cache failed: $(cat "$T/err")"
[ "$(grep -c 'warning: records cache .*badcache.db' "$T/err")" = 1 ] || fail "damaged cache: $(cat "$T/err")"
[ "$(count "$T/m.db")" = 3 ] || fail "tuning with a damaged cache stored $(count "$T/m.db") records"

# --time stops the run (no trial limit); every record readable; the whole model's curve
"$KILN" tune "$T/mm.kg" --time 2s --db "$T/t.db" --curves "$T/tc" $Q 2>"$T/err" &
pid=$!
for _ in $(seq 1 600); do # a generous bound: 120 s
    kill -0 $pid 2>/dev/null || break
    sleep 0.2
done
if kill -0 $pid 2>/dev/null; then
    fail "--time 2s still running after 120 s"
    kill -INT $pid
fi
wait $pid || fail "tune --time 2s exited $?: $(cat "$T/err")"
n=$(count "$T/t.db")
[ "$n" -ge 1 ] || fail "tune --time 2s stored $n records"
"$KILN" records "$T/t.db" --export "$T/t.jsonl" || fail "records of a --time run unreadable"
[ "$(grep -vc '^{"graph":' "$T/t.jsonl")" = "$n" ] || fail "export of the --time run"
python3 - "$T/tc/model.csv" <<'PY' || fail "model.csv: $(cat "$T/tc/model.csv")"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert rows, "no rows"
lat = [float(r["latency_s"]) for r in rows]
assert all(b <= a for a, b in zip(lat, lat[1:])), lat
assert all(float(b["elapsed_s"]) >= float(a["elapsed_s"]) for a, b in zip(rows, rows[1:]))
PY
[ -s "$T/tc/model.svg" ] || fail "no model.svg"

# errors
for bad in 0 abc 5x -3 1e999 '' 10mm; do
    "$KILN" tune "$T/mm.kg" --time "$bad" --db "$T/x.db" >/dev/null 2>"$T/err"
    [ $? = 2 ] && grep -q -- "--time needs a duration" "$T/err" || fail "--time '$bad': $(cat "$T/err")"
done
"$KILN" tune "$T/mm.kg" --time >/dev/null 2>"$T/err"
[ $? = 2 ] && grep -q -- "--time needs a value" "$T/err" || fail "--time without a value"
"$KILN" tune "$T/mm.kg" --trials 0 --db "$T/x.db" >/dev/null 2>"$T/err"
[ $? = 2 ] && grep -q 'at least 1' "$T/err" || fail "--trials 0: $(cat "$T/err")"
"$KILN" tune "$T/mm.kg" --strategy greedy >/dev/null 2>"$T/err"
[ $? = 2 ] && grep -q "unknown strategy 'greedy'" "$T/err" || fail "bad strategy"
"$KILN" tune "$T/mm.kg" --flush-cache --flush-weights >/dev/null 2>"$T/err"
[ $? = 2 ] && grep -q "exclude each other" "$T/err" || fail "both flushes: $(cat "$T/err")"
"$KILN" tune "$T/missing.kg" >/dev/null 2>"$T/err"
[ $? = 1 ] || fail "missing file"
echo "not a database" >"$T/bad.db"
"$KILN" records "$T/bad.db" >/dev/null 2>"$T/err"
[ $? = 1 ] && grep -q 'bad.db' "$T/err" || fail "garbage database: $(cat "$T/err")"
"$KILN" tune "$T/mm.kg" --db "$T/bad.db" --trials 2 $Q >/dev/null 2>"$T/err"
[ $? = 1 ] || fail "tune into a garbage database"
printf '{"workload": 5}\n' >"$T/bad.jsonl"
"$KILN" records "$T/d.db" --import "$T/bad.jsonl" >/dev/null 2>"$T/err"
[ $? = 1 ] && grep -q 'bad.jsonl:1: ' "$T/err" || fail "bad import line: $(cat "$T/err")"

if [ $fails -ne 0 ]; then
    echo "$fails failed"
    exit 1
fi
echo "tune.sh: all passed"
