#!/usr/bin/python3
"""tests/py/test_search.py -- `kiln search` end to end on a Fashion-MNIST subset, in bounded time.

A tiny search (512 training and 256 test images at 12x12, the ResNet at width 8, one epoch, 4
tuning trials per graph, 3 kernels per round, every stage on): the results files exist and
agree (results.jsonl, results.json, results.csv, pareto.svg that parses as XML), the baseline
was tuned, timed and trained, every candidate has its seed, code paths that exist, and either
scores or a failure reason, the Pareto front is non-dominated and holds trained networks; a
second run with a larger --candidates keeps every finished record unchanged and adds only new
ones (nothing redone), a run with the same options does nothing; a run with other options in
the same directory, a missing data directory and bad options are refused with clear errors.
The IDX reader is checked against the raw files. Also runs with KILN_ITERS: the sizes are
already minimal.

    /usr/bin/python3 tests/py/test_search.py --kiln build/kiln [--seed S]

Exit status 0 passed, 1 failed, 77 skipped (no kiln binary or no Fashion-MNIST files).
"""
import argparse
import csv
import gzip
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "python"))

from harness import FAILS, check  # noqa: E402  (tests/py/harness.py, beside this file)

DATA = "/usr/share/datasets/fashion-mnist"


def search(kiln, out, seed, extra=(), expect=0):
    cmd = [kiln, "search", "--out", out, "--seed", str(seed), "--train", "512", "--test", "256",
           "--image-size", "12", "--width", "8", "--epochs", "1", "--per-round", "3",
           "--trials", "4", "--repeat", "2", "--min-time", "0.005", "--screen-keep", "0.67",
           "--max-latency", "100", "--time-limit", "240"] + list(extra)
    t = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    check(r.returncode == expect, "%s: exit %d, want %d\n%s" % (" ".join(cmd), r.returncode,
                                                               expect, r.stderr[-3000:]))
    return r, time.time() - t


def records(out):
    with open(os.path.join(out, "results.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def check_results(out):
    recs = records(out)
    ids = [r["id"] for r in recs]
    check(len(ids) == len(set(ids)), "duplicate records: %s" % ids)
    check(ids and ids[0] == "conv3x3", "first record is not the baseline: %s" % ids)
    base = recs[0]
    check(base["status"] == "trained" and base["latency_s"] > 0 and 0 <= base["accuracy"] <= 100,
          "baseline incomplete: %s" % base)
    for r in recs[1:]:
        for key in ("seed", "index", "hash", "design", "py", "kg", "flops", "params", "status"):
            check(key in r and r[key] is not None, "%s lacks %s" % (r["id"], key))
        check(os.path.exists(r["py"]) and all(os.path.exists(p) for p in r["kg"]),
              "%s: code files missing" % r["id"])
        if r["status"] in ("failed", "screened", "slower", "cut"):
            check(bool(r.get("reason")), "%s: status %s without a reason" % (r["id"], r["status"]))
        else:
            check(r["status"] == "trained", "%s: unknown status %s" % (r["id"], r["status"]))
            check(all(r.get(k) is not None for k in ("naswot", "latency_s", "speedup",
                                                     "accuracy")),
                  "%s: trained without every score: %s" % (r["id"], r))
            check(abs(r["speedup"] - base["latency_s"] / r["latency_s"]) < 1e-9,
                  "%s: speedup inconsistent" % r["id"])
        if r["status"] == "screened":
            check(r.get("naswot") is not None, "%s: screened without a score" % r["id"])
    with open(os.path.join(out, "results.json")) as f:
        doc = json.load(f)
    check([r["id"] for r in doc["candidates"]] == ids, "results.json and .jsonl disagree")
    with open(os.path.join(out, "results.csv")) as f:
        rows = list(csv.DictReader(f))
    check([r["id"] for r in rows] == ids, "results.csv and .jsonl disagree")
    trained = {r["id"]: r for r in recs if r["status"] == "trained"}
    front = doc["pareto"]
    check(front and all(i in trained for i in front), "Pareto front %s not trained" % front)
    for i in front:   # no trained point is at least as fast and strictly more accurate
        a = trained[i]
        for b in trained.values():
            check(not (b["latency_s"] <= a["latency_s"] and b["accuracy"] > a["accuracy"]),
                  "front member %s dominated by %s" % (i, b["id"]))
    for r in rows:
        check(r["pareto"] == ("1" if r["id"] in front else "0"), "csv pareto column wrong")
    svg = ET.parse(os.path.join(out, "pareto.svg")).getroot()
    check(svg.tag.endswith("svg") and len(svg.findall("{http://www.w3.org/2000/svg}circle"))
          == len(trained), "pareto.svg does not plot every trained network")
    return recs


def check_idx():
    from kiln import fmnist
    x, y = fmnist.load("test", 100, 28, seed=3)
    with gzip.open(os.path.join(DATA, "t10k-labels-idx1-ubyte.gz")) as f:
        raw = f.read()
    labels = np.frombuffer(raw[8:], dtype=np.uint8)
    idx = np.random.RandomState(3).permutation(10000)[:100]
    check(np.array_equal(y.numpy(), labels[idx]), "IDX labels differ from the raw file")
    with gzip.open(os.path.join(DATA, "t10k-images-idx3-ubyte.gz")) as f:
        raw = f.read()
    img = np.frombuffer(raw[16:], dtype=np.uint8).reshape(10000, 28, 28)[idx[0]]
    got = x[0, 0].numpy() * fmnist.STD + fmnist.MEAN
    check(np.allclose(got, img / 255.0, atol=1e-5), "IDX image differs from the raw file")
    check(tuple(x.shape) == (100, 1, 28, 28), "image shape %s" % (tuple(x.shape),))
    with tempfile.NamedTemporaryFile(suffix=".gz") as t:
        with gzip.open(t.name, "wb") as f:
            f.write(b"\x00\x00\x08\x01\x00\x00\x00\x05abc")
        try:
            fmnist.read_idx(t.name)
            check(False, "a truncated IDX file was accepted")
        except Exception as e:
            check("5" in str(e) and "3 bytes" in str(e), "truncated IDX message: %s" % e)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", default=os.environ.get("KILN_BIN", "build/kiln"))
    ap.add_argument("--seed", type=int, default=None)
    a = ap.parse_args()
    if not os.path.exists(a.kiln) and not shutil.which(a.kiln):
        print("skip: no kiln binary at %s" % a.kiln)
        return 77
    if not os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz")):
        print("skip: no Fashion-MNIST in %s (Debian's dataset-fashion-mnist)" % DATA)
        return 77
    os.environ["KILN_BIN"] = os.path.abspath(a.kiln)
    seed = a.seed if a.seed is not None else random.randrange(1, 1 << 20)
    print("seed %d (replay with --seed %d)" % (seed, seed))
    check_idx()
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "s")
        r, dt = search(a.kiln, out, seed, ["--candidates", "2"])
        print("first run: %.1f s" % dt)
        for f in ("results.jsonl", "results.json", "results.csv", "pareto.svg", "config.json"):
            check(os.path.exists(os.path.join(out, f)), "%s not written" % f)
        check(json.loads(r.stdout.strip().splitlines()[-1])["baseline"] is not None,
              "no summary JSON on stdout")
        first = check_results(out)
        check(len(first) == 3, "want the baseline and 2 candidates, got %d records" % len(first))

        # resumed with a larger goal: old records unchanged, one new, the baseline not redone
        r, dt = search(a.kiln, out, seed, ["--candidates", "3"])
        print("resumed run: %.1f s" % dt)
        check("resuming" in r.stderr, "the second run did not resume")
        check("conv3x3   tuning" not in r.stderr, "the baseline was redone")
        second = check_results(out)
        check(second[:len(first)] == first, "finished records changed on resume")
        check(len(second) == 4, "want 1 new record, got %d" % (len(second) - len(first)))
        for rec in first[1:]:
            check(("%s sampled" % rec["id"]) not in r.stderr, "%s was redone" % rec["id"])

        # the same goal again: nothing to do
        r, dt = search(a.kiln, out, seed, ["--candidates", "3"])
        check(len(records(out)) == 4, "a finished search added records")
        check("sampled" not in r.stderr and "tuning" not in r.stderr,
              "a finished search redid work:\n" + r.stderr)

        # refusals
        r, _ = search(a.kiln, out, seed, ["--epochs", "2"], expect=1)
        check("other options" in r.stderr and "epochs" in r.stderr,
              "changed options message: %s" % r.stderr)
        r, _ = search(a.kiln, os.path.join(tmp, "d"), seed, ["--data", os.path.join(tmp, "no")],
                      expect=1)
        check("is missing" in r.stderr, "missing data message: %s" % r.stderr)
        r, _ = search(a.kiln, os.path.join(tmp, "e"), seed, ["--flops", "2:1"], expect=2)
        check("LO <= HI" in r.stderr, "bad range message: %s" % r.stderr)
        r, _ = search(a.kiln, os.path.join(tmp, "e"), seed, ["--model", "nofile.py:f"], expect=1)
        check("does not exist" in r.stderr, "bad model message: %s" % r.stderr)
    print("%d failures" % len(FAILS))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
