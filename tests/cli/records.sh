#!/usr/bin/env bash
# tests/cli/records.sh -- kiln records and kiln compile --db against careless and hostile use:
# an export onto its own database (by name, ./name and a symbolic link) or onto another SQLite
# file is refused and loses nothing; compile --db skips a best record that does not apply and
# uses the next best, saying so; an import reports every bad line by file:line, imports the good
# ones and exits 1; a large import runs in linear time; a NULL column gives an error naming the
# file and the row; processes creating one new database at once all succeed; a read-only
# database is listed; an implicit ./kiln.db is announced.
#   bash tests/cli/records.sh PATH_TO_KILN
set -u
KILN=${1:?usage: records.sh PATH_TO_KILN}
KILN=$(cd "$(dirname "$KILN")" && pwd)/$(basename "$KILN")
T=$(mktemp -d)
trap 'chmod -R u+w "$T"; rm -rf "$T"' EXIT
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
count() { "$KILN" records "$1" 2>/dev/null | awk 'NR == 2 {print $2}'; }

# one real record (the default schedule), for the task key and the target
"$KILN" tune "$T/mm.kg" --trials 1 --db "$T/t.db" --repeat 1 --min-repeat-ms 1 --quiet \
    2>"$T/err" || fail "tune: $(cat "$T/err")"
"$KILN" records "$T/t.db" --export "$T/t.jsonl" || fail "export"
# the task's graph (a line of its own, first), then the record
[ "$(grep -c '^{"graph":' "$T/t.jsonl")" = 1 ] || fail "export has no graph line: $(cat "$T/t.jsonl")"
grep -v '^{"graph":' "$T/t.jsonl" >"$T/rec.jsonl"
[ "$(wc -l <"$T/rec.jsonl")" = 1 ] || fail "export has $(wc -l <"$T/rec.jsonl") record lines"

# 1. export onto its own database, under any name, or onto another SQLite file
cp "$T/t.db" "$T/other.db"
ln -s t.db "$T/link.db"
for out in "$T/t.db" "$T/./t.db" "$T/link.db" "$T/other.db"; do
    "$KILN" records "$T/t.db" --export "$out" >/dev/null 2>"$T/err"
    rc=$?
    [ $rc = 1 ] && grep -q 'refusing' "$T/err" || fail "export onto $out: exit $rc: $(cat "$T/err")"
done
[ "$(count "$T/t.db")" = 1 ] || fail "export onto itself lost records: $(count "$T/t.db")"
[ "$(count "$T/other.db")" = 1 ] || fail "export overwrote another database"
(cd "$T" && "$KILN" records t.db --export t.db >/dev/null 2>&1)
[ "$(count "$T/t.db")" = 1 ] || fail "export onto itself (relative) lost records"

# 3. import checks every line, reports the bad ones by file:line, imports the good ones
python3 - "$T/rec.jsonl" "$T/mixed.jsonl" "$T/next.jsonl" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).read())
def line(**kw):
    x = dict(r)
    x.update(kw)
    return json.dumps(x)
ts = r["timestamp"]
good = line(timestamp=ts + 1, time_s=r["time_s"] * 2)
with open(sys.argv[2], "w") as f:
    f.write(good + "\n")                                             # 1 good
    f.write(line(timestamp=ts + 2, schedule='{"steps": [{"op": "frob"}]}') + "\n")  # 2
    f.write(line(timestamp=ts + 3, time_s=0) + "\n")                 # 3 zero time
    f.write(line(timestamp=ts + 4, workload="") + "\n")              # 4 empty workload
    f.write(good + " trailing\n")                                    # 5 trailing garbage
    f.write(good[:-1] + ', "time_s": 1}\n')                          # 6 duplicate key
    f.write(line(timestamp=ts + 7, strategy="a\u0000b") + "\n")      # 7 \u0000
    f.write("\n")                                                    # 8 blank: fine
    f.write(line(timestamp=ts + 9, time_s=r["time_s"] * 3) + "\n")   # 9 good
# 2. a better record whose schedule does not apply to the task (an unknown stage), ranked
# first (a final selection's), and one this version cannot parse, added below with sqlite3
with open(sys.argv[3], "w") as f:
    f.write(line(timestamp=ts + 10, time_s=r["time_s"] / 10, strategy="final",
                 schedule='{"steps": [{"op": "parallel", "stage": "nosuch", "iter": "i"}]}') + "\n")
PY
"$KILN" records "$T/t.db" --import "$T/mixed.jsonl" >"$T/out" 2>"$T/err"
rc=$?
[ $rc = 1 ] || fail "import with bad lines exited $rc"
for n in 2 3 4 5 6 7; do
    grep -q "mixed.jsonl:$n: " "$T/err" || fail "bad line $n not reported: $(cat "$T/err")"
done
grep -q 'mixed.jsonl:[189]: ' "$T/err" && fail "a good line reported: $(cat "$T/err")"
grep -q 'imported 2 records' "$T/out" || fail "good lines not imported: $(cat "$T/out")"
[ "$(count "$T/t.db")" = 3 ] || fail "after the import: $(count "$T/t.db") records, want 3"

# 2. compile --db uses the next-best record when the best does not apply
cp "$T/t.db" "$T/u.db"
"$KILN" records "$T/u.db" --import "$T/next.jsonl" >/dev/null || fail "importing next.jsonl"
python3 - "$T/u.db" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.execute("INSERT INTO records(workload, target, schedule, prog, time_s, stddev_s, error, "
          "error_msg, version, machine, timestamp, flops, strategy) SELECT workload, target, "
          "'not json', prog, time_s / 100, stddev_s, error, error_msg, version, machine, "
          "timestamp + 20, flops, 'final' FROM records WHERE id = 1")
c.commit()
PY
"$KILN" compile "$T/mm.kg" --db "$T/u.db" -o "$T/mm.so" 2>"$T/err" || fail "compile --db: $(cat "$T/err")"
grep -q '1 of 1 tasks tuned' "$T/err" || fail "the next-best record not used: $(cat "$T/err")"
grep -q 'task [0-9a-f]\{16\}: 2 better records skipped (record 5: .*); using record 1 (' "$T/err" ||
    fail "no word of the skipped records: $(cat "$T/err")"
"$KILN" run "$T/mm.so" --check >"$T/out" 2>&1 || fail "run --check: $(cat "$T/out")"

# 4. a large import: linear (20,000 lines; the time is printed, not asserted)
python3 - "$T/rec.jsonl" "$T/big.jsonl" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).read())
with open(sys.argv[2], "w") as f:
    for i in range(20000):
        r["timestamp"] = 1700000000 + i // 100
        r["time_s"] = 1e-3 + i * 1e-9
        f.write(json.dumps(r) + "\n")
PY
s=$(date +%s.%N)
"$KILN" records "$T/big.db" --import "$T/big.jsonl" >"$T/out" 2>"$T/err" || fail "big import: $(cat "$T/err")"
e=$(date +%s.%N)
grep -q 'imported 20000 records' "$T/out" || fail "big import: $(cat "$T/out")"
echo "records.sh: 20000 lines imported in $(awk "BEGIN {print $e - $s}") s"

# 5. a NULL in a NOT NULL column (a hand-made table): an error naming the file and the row
cp "$T/t.db" "$T/null.db"
python3 - "$T/null.db" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.executescript("CREATE TABLE r2(id INTEGER PRIMARY KEY AUTOINCREMENT, workload, target, schedule,"
                " prog, time_s, stddev_s, error, error_msg, version, machine, timestamp, flops,"
                " strategy); INSERT INTO r2 SELECT * FROM records; DROP TABLE records;"
                " ALTER TABLE r2 RENAME TO records; UPDATE records SET target = NULL, "
                " strategy = NULL WHERE id = 2;")
PY
"$KILN" records "$T/null.db" >/dev/null 2>"$T/err"
rc=$?
[ $rc = 1 ] && grep -q 'null.db.*row 2' "$T/err" || fail "NULL column: exit $rc: $(cat "$T/err")"
"$KILN" records "$T/null.db" --export "$T/null.jsonl" >/dev/null 2>"$T/err"
rc=$?
[ $rc = 1 ] && grep -q 'null.db.*row 2' "$T/err" || fail "NULL column, export: exit $rc: $(cat "$T/err")"

# 6. processes creating the same new database at once all succeed
for round in 1 2 3 4 5; do
    pids=()
    for p in 1 2 3 4 5 6; do
        sed -n "$((round * 10 + p))p" "$T/big.jsonl" >"$T/c$p.jsonl"
        "$KILN" records "$T/c$round.db" --import "$T/c$p.jsonl" >/dev/null 2>"$T/cerr$p" &
        pids+=($!)
    done
    for p in "${!pids[@]}"; do
        wait "${pids[$p]}" || fail "concurrent creation, round $round: $(cat "$T/cerr$((p + 1))")"
    done
    [ "$(count "$T/c$round.db")" = 6 ] || fail "concurrent creation: $(count "$T/c$round.db") records"
done

# 7. a read-only database in a read-only directory is listed and exported
mkdir "$T/ro" "$T/w"
cp "$T/t.db" "$T/ro/r.db"
chmod 444 "$T/ro/r.db"
chmod 555 "$T/ro"
chmod 777 "$T/w"
chmod 755 "$T"
as_user=()
if [ "$(id -u)" = 0 ]; then
    as_user=(setpriv --reuid=65534 --regid=65534 --clear-groups)
fi
if "${as_user[@]}" true 2>/dev/null && "${as_user[@]}" test -x "$KILN"; then
    "${as_user[@]}" "$KILN" records "$T/ro/r.db" >"$T/out" 2>"$T/err" || fail "read-only listing: $(cat "$T/err")"
    grep -Eq '^[0-9a-f]{16} +3 ' "$T/out" || fail "read-only listing: $(cat "$T/out")"
    "${as_user[@]}" "$KILN" records "$T/ro/r.db" --export "$T/w/r.jsonl" 2>"$T/err" ||
        fail "read-only export: $(cat "$T/err")"
else
    echo "records.sh: read-only check skipped (cannot run as another user)"
fi
"$KILN" records "$T/missing.db" >/dev/null 2>"$T/err"
[ $? = 1 ] && grep -q 'missing.db' "$T/err" || fail "missing database: $(cat "$T/err")"
[ -e "$T/missing.db" ] && fail "listing created missing.db"

# 8. an implicit ./kiln.db is announced
cp "$T/t.db" "$T/w/kiln.db"
(cd "$T/w" && "$KILN" compile ../mm.kg -o mm.so 2>err) || fail "compile with ./kiln.db"
grep -q 'using the records in ./kiln.db' "$T/w/err" || fail "./kiln.db not announced: $(cat "$T/w/err")"
(cd "$T/w" && "$KILN" compile ../mm.kg --no-db -o mm.so 2>err) || fail "compile --no-db"
grep -q 'kiln.db' "$T/w/err" && fail "--no-db mentions kiln.db: $(cat "$T/w/err")"

if [ $fails -ne 0 ]; then
    echo "$fails failed"
    exit 1
fi
echo "records.sh: all passed"
