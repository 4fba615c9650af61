#!/usr/bin/python3
"""benchmarks/search_fmnist.py -- a real kernel architecture search with a fixed time budget:
kiln search (python/kiln/search.py) on Fashion-MNIST, replacing the six 3x3 convolutions of
kiln.fmnist's small ResNet, then a report of the best kernel against the tuned 3x3 convolution.

    /usr/bin/python3 benchmarks/search_fmnist.py --out DIR [--time-limit S] [kiln search options]

Every option after the script's own is passed to kiln search (defaults below: 28x28 images, 4000
training and 2000 test images, 2 epochs, 16 tuning trials per graph, one thread). The report
gives, for the 3x3 convolution and for the kernels on the Pareto front, the tuned latency summed
over the replaced layers (batch 1), the speedup and the test accuracy after the same training
budget, and names the fastest kernel within 1 point of the convolution's accuracy (the issue's
goal: >= 1.5x at <= 1 point loss). Resumable like kiln search: run again with the same --out.
"""
import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "python"))

from kiln import search  # noqa: E402

DEFAULTS = ["--time-limit", "900", "--train", "4000", "--test", "2000", "--epochs", "2",
            "--trials", "16", "--per-round", "6", "--screen-keep", "0.5", "--threads", "1"]


def main():
    args = sys.argv[1:]
    given = {a for a in args if a.startswith("--")}
    argv = args[:]
    for i in range(0, len(DEFAULTS), 2):
        if DEFAULTS[i] not in given:
            argv += DEFAULTS[i:i + 2]
    rc = search.main(argv)
    if rc != 0:
        return rc
    out = argv[argv.index("--out") + 1]
    with open(os.path.join(out, "results.json")) as f:
        res = json.load(f)
    base = res["baseline"]
    cands = {r["id"]: r for r in res["candidates"]}
    statuses = {}
    for r in res["candidates"]:
        if r["id"] != base["id"]:
            statuses[r["status"]] = statuses.get(r["status"], 0) + 1
    print("\nsearch_fmnist: %d candidates (%s); config %s" % (
        sum(statuses.values()), ", ".join("%d %s" % kv for kv in sorted(statuses.items())),
        json.dumps(res["config"])))
    print("%-10s %10s %8s %9s  %s" % ("kernel", "latency", "speedup", "accuracy", "design"))
    rows = [base] + [cands[i] for i in res["pareto"] if i != base["id"]]
    for r in rows:
        print("%-10s %8.4g ms %7.2fx %8.2f%%  %s" % (r["id"], r["latency_s"] * 1e3,
                                                    base["latency_s"] / r["latency_s"],
                                                    r["accuracy"], r["design"]))
    ok = [r for r in res["candidates"] if r.get("status") == "trained" and r["id"] != base["id"]
          and r["accuracy"] >= base["accuracy"] - 1.0]
    if ok:
        best = min(ok, key=lambda r: r["latency_s"])
        sp = base["latency_s"] / best["latency_s"]
        print("best within 1 point of the convolution: %s, %.2fx faster (%.4g vs %.4g ms), "
              "accuracy %.2f%% vs %.2f%% -> goal (>= 1.5x) %s" % (
                  best["id"], sp, best["latency_s"] * 1e3, base["latency_s"] * 1e3,
                  best["accuracy"], base["accuracy"], "met" if sp >= 1.5 else "not met"))
    else:
        print("no trained kernel within 1 point of the convolution's %.2f%%: goal not met"
              % base["accuracy"])
    print("Pareto plot: %s" % os.path.join(out, "pareto.svg"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
