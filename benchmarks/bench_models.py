#!/usr/bin/python3
"""benchmarks/bench_models.py -- kiln against ONNX Runtime on a suite of torchvision CNNs
(issue 29): untuned (a new user's first `kiln compile`) and tuned (`kiln tune` for a fixed
time per model), batch 1, 1 and 2 threads, in one run.

    /usr/bin/python3 benchmarks/bench_models.py [--modes untuned,tuned] [--models LIST]
        [--threads 1,2] [--tune-minutes M] [--tune-once] [--engines kiln,ort] [--size HW]
        [--reps N] [--rounds R] [--warmup N] [--seed S] [--out DIR] [--csv FILE [--append]]
        [--kiln BUILD/kiln]
    /usr/bin/python3 benchmarks/bench_models.py --summary FILE.csv [FILE.csv ...]

For each network of --models (torchvision, random weights after torch.manual_seed(SEED), eval
mode, exported to ONNX at batch 1, 3 x SIZE x SIZE by python/kiln/nets.py):

1. untuned: `kiln compile MODEL.onnx -o M.so --no-db` with KILN_CACHE=off in the environment
   of every kiln command: no records database and no records cache, so every task gets the schedule kiln picks
   without measuring; the compile's wall time is kept. A network kiln cannot import (`kiln
   compile` reports an unsupported operator) is skipped with the reason and not counted; any
   other compile failure stops the benchmark.
2. tuned: `kiln tune MODEL.onnx --time Mm --threads T --db OUT/NAME.tT.db` (kiln tune's time
   budget; a kiln without --time is stopped with SIGINT after M minutes instead), then `kiln
   compile MODEL.onnx --db DB`, per thread count T (--tune-once: one tuning at kiln tune's
   default thread count, one module for every thread count). The records cache is off here
   too (KILN_CACHE=off), so each network's figures come from its own tuning alone.
3. one child process per (engine, mode, thread count), with the machinery of bench_e2e.py:
   each builds its engine (kiln: the module's C ABI, kiln_prepare once then
   kiln_call_prepared; ort: ONNX Runtime's CPU provider, all graph optimisations), runs it on
   the same random input and sends the output back; kiln's output must match ONNX Runtime's
   (max |kiln - ort| / max |ort| <= 1e-4) or the benchmark fails; ONNX Runtime's error
   against PyTorch eager is printed too. Then interleaved rounds: every child in turn makes
   WARMUP untimed and REPS timed calls; an engine's time is the best of its per-round medians.

Output: per network and mode, kiln ms, ORT ms, the kiln/ORT time ratio (above 1: kiln is
slower) and the compile wall time at each thread count; then, per mode and thread count, the
geometric mean of the ratio, the worst network and whether issue 29's goals hold (untuned:
geometric mean <= 1.5 and no network above 2.5, every compile <= 30 s; tuned: geometric mean
<= 1.0, i.e. at least ONNX Runtime's speed). Every row also goes to a CSV (--csv, default
OUT/bench_models.csv; --append adds to it, so a suite can be run one network at a time);
--summary prints the summary of CSV files written earlier, without running anything.

Exit status: 0 after a complete run (whether or not the goals hold), 1 on a failure (a tool
failed, kiln's output differs from ONNX Runtime's), 2 on a usage error.
"""

import argparse
import csv
import math
import multiprocessing
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_e2e as e2e  # noqa: E402  (the process, round and check machinery)

REPO = e2e.REPO
TOL = e2e.TOL
# the suite: torchvision CNNs that no other benchmark here uses, besides ResNet-18 and
# MobileNetV2; shufflenet_v2_x1_0 is skipped (with the reason) while kiln cannot import it
SUITE = ["resnet18", "mobilenet_v2", "squeezenet1_1", "resnet34", "mnasnet1_0", "googlenet",
         "densenet121", "efficientnet_b0", "regnet_x_400mf", "resnext50_32x4d",
         "shufflenet_v2_x1_0"]
MODES = ["untuned", "tuned"]
ENGINES = ["kiln", "ort"]
MIN_SUITE = 8
# a network whose output changes by less than this (relative to its largest value) from one
# random input to another is reported: comparing outputs then checks little
DEPENDS = 1e-3
# issue 29's goals: untuned geometric mean and worst kiln/ORT time ratio, compile seconds;
# tuned geometric mean
UNTUNED_GEOMEAN, UNTUNED_WORST, COMPILE_S, TUNED_GEOMEAN = 1.5, 2.5, 30.0, 1.0
FIELDS = ["model", "in_corpus", "mode", "threads", "kiln_ms", "ort_ms", "ratio", "compile_s",
          "tune_s", "err_vs_ort", "ort_err_vs_torch", "tuning"]
# what `kiln compile` says when the ONNX importer meets something it does not support
UNSUPPORTED = ("unsupported", "not supported")

log = e2e.log


class Skip(Exception):
    """A network kiln cannot import: reported and not counted."""


def kiln_help(kiln, cmd):
    p = subprocess.run([kiln, cmd, "--help"], capture_output=True, text=True)
    return p.stdout + p.stderr


def compile_model(opt, name, onnx_path, so, wdir, db):
    """`kiln compile` to ``so`` (the weights built in; ``wdir`` is not written); returns (wall
    seconds, what it said)."""
    cmd = [opt.kiln, "compile", onnx_path, "-o", so]
    cmd += ["--db", db] if db else ["--no-db"]
    log("$ " + " ".join(cmd))
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    said = " ".join((p.stdout + p.stderr).replace(REPO + os.sep, "").split())
    if p.returncode != 0:
        if any(u in p.stderr.lower() for u in UNSUPPORTED):
            raise Skip("kiln cannot import it: %s" % p.stderr.strip().splitlines()[-1])
        raise e2e.BenchError("kiln compile %s failed (exit %d): %s"
                             % (name, p.returncode, p.stderr.strip()))
    return wall, said


def tune_model(opt, name, onnx_path, db, threads):
    """`kiln tune` for opt.tune_minutes; returns (wall seconds, its last progress line)."""
    cmd = [opt.kiln, "tune", onnx_path, "--db", db]
    if threads is not None:
        cmd += ["--threads", str(threads)]
    limit = 60 * opt.tune_minutes
    if opt.has_time:
        cmd += ["--time", "%gm" % opt.tune_minutes]
        limit += 300  # kiln tune stops itself; SIGINT only if it overruns by 5 minutes
    else:
        cmd += ["--trials", "1000000"]  # the time limit alone stops it
    t0 = time.perf_counter()
    try:
        _, stopped, progress = e2e.run_tool(cmd, "kiln tune " + name, limit)
    except e2e.BenchError as e:
        if any(u in str(e).lower() for u in UNSUPPORTED):
            raise Skip("kiln cannot import it: %s" % str(e).rsplit(": ", 1)[-1]) from None
        raise
    wall = time.perf_counter() - t0
    if stopped and opt.has_time:
        log("kiln tune %s: overran its --time budget by 5 minutes and was stopped" % name)
    return wall, progress


def prepare(opt, name, x_path):
    """Exports ``name`` and builds each mode's modules. Returns the modules as
    {(mode, threads): {"so", "weights", "compile_s", "tune_s", "tuning"}}, the ONNX path and
    PyTorch eager's output."""
    import numpy as np
    import torch

    import kiln.nets

    tag = "%s_%d" % (name, opt.size)
    onnx_path = os.path.join(opt.out, tag + ".onnx")
    net = kiln.nets.build(name, opt.seed)
    x = torch.from_numpy(np.load(x_path))
    kiln.nets.export(net, x, onnx_path)
    g = torch.Generator().manual_seed(opt.seed + 1)
    with torch.inference_mode():
        want = net(x).numpy().astype(np.float64)
        other = net(torch.randn(x.shape, generator=g)).numpy().astype(np.float64)
    del net
    spread = e2e.rel_error(other, want)
    if not spread >= DEPENDS:
        log("warning: %s: its output barely depends on the input (another input changes it by "
            "%.3g of its largest value), so the output check says little" % (name, spread))
    mods = {}
    for mode in opt.modes:
        for n in ([None] if mode == "untuned" or opt.tune_once else opt.threads):
            sfx = "%s%s" % (mode, "" if n is None else ".t%d" % n)
            so = os.path.join(opt.out, "%s.%s.so" % (tag, sfx))
            wdir = os.path.join(opt.out, "%s.%s_w" % (tag, sfx))
            db, tune_s, tuning = None, 0.0, "no records: schedules picked without measuring"
            if mode == "tuned":
                db = os.path.join(opt.out, "%s.%s.db" % (tag, sfx))
                for f in (db, db + "-wal", db + "-shm"):
                    if os.path.exists(f):
                        os.remove(f)  # a fresh tuning of the time budget, never a resumed one
                tune_s, progress = tune_model(opt, name, onnx_path, db, n)
                tuning = "tuned %.0f s%s" % (tune_s, "; " + progress if progress else "")
            if os.path.isdir(wdir):
                e2e.shutil.rmtree(wdir)
            compile_s, said = compile_model(opt, name, onnx_path, so, wdir, db)
            log("%s %s: compile %.1f s: %s" % (name, sfx, compile_s, said))
            info = {"so": so, "weights": wdir, "compile_s": compile_s, "tune_s": tune_s,
                    "tuning": tuning}
            for t in (opt.threads if n is None else [n]):
                mods[(mode, t)] = info
    return mods, onnx_path, want


def bench_model(opt, ctx, name, x_path):
    """Times one network; returns its CSV rows."""
    import numpy as np

    import kiln.nets

    mods, onnx_path, want = prepare(opt, name, x_path)
    specs = []
    for n in opt.threads:
        for e in opt.engines:
            for mode in (opt.modes if e == "kiln" else [None]):
                spec = {"model": name, "onnx": onnx_path, "engine": e, "threads": n,
                        "input": x_path, "seed": opt.seed, "warmup": opt.warmup,
                        "mode": mode, "label": e if mode is None else "kiln-" + mode}
                if mode:
                    spec.update(so=mods[(mode, n)]["so"], weights=mods[(mode, n)]["weights"])
                specs.append(spec)
    children = []
    outs = {}
    try:
        for spec in specs:  # one child builds at a time
            ch = e2e.start_child(ctx, spec)
            children.append(ch)
            _, (shape, raw), _ = e2e.recv(ch)  # the output as bytes (bench_e2e's children)
            outs[(spec["label"], spec["threads"])] = np.frombuffer(raw, np.float64).reshape(shape)
        for ch in children:
            s = ch["spec"]
            ort = outs.get(("ort", s["threads"]))
            if s["engine"] == "ort":
                ch["err"] = e2e.rel_error(ort, want)
                if not ch["err"] <= TOL:
                    log("warning: %s: ONNX Runtime at %d threads differs from PyTorch eager by "
                        "%.3g" % (name, s["threads"], ch["err"]))
            elif ort is not None:
                ch["err"] = e2e.rel_error(outs[(s["label"], s["threads"])], ort)
                if not ch["err"] <= TOL:
                    raise e2e.BenchError(
                        "%s, %s at %d threads: output differs from ONNX Runtime's: "
                        "max|kiln - ort| / max|ort| = %.3g > %g"
                        % (name, s["label"], s["threads"], ch["err"], TOL))
            else:  # without ORT (--engines kiln): against PyTorch eager
                ch["err"] = e2e.rel_error(outs[(s["label"], s["threads"])], want)
                if not ch["err"] <= TOL:
                    raise e2e.BenchError(
                        "%s, %s at %d threads: output differs from PyTorch eager: %.3g > %g"
                        % (name, s["label"], s["threads"], ch["err"], TOL))
        for r in range(opt.rounds):
            for ch in children:
                time.sleep(opt.pause)
                ch["conn"].send(("time", opt.warmup, opt.reps))
                ch["times"].append(statistics.median(e2e.recv(ch)[1]))
            log("%s: round %d/%d done" % (name, r + 1, opt.rounds))
    finally:
        e2e.stop_children(children)
    best = {(ch["spec"]["label"], ch["spec"]["threads"]): ch for ch in children}
    rows = []
    for mode in opt.modes:
        for n in opt.threads:
            k = best[("kiln-" + mode, n)]
            o = best.get(("ort", n))
            info = mods[(mode, n)]
            km = 1e3 * min(k["times"])
            om = 1e3 * min(o["times"]) if o else float("nan")
            rows.append({"model": name, "in_corpus": "yes" if name in kiln.nets.CORPUS else "no",
                         "mode": mode, "threads": n, "kiln_ms": "%.3f" % km,
                         "ort_ms": "%.3f" % om, "ratio": "%.3f" % (km / om),
                         "compile_s": "%.1f" % info["compile_s"],
                         "tune_s": "%.0f" % info["tune_s"], "err_vs_ort": "%.1e" % k["err"],
                         "ort_err_vs_torch": "%.1e" % o["err"] if o else "",
                         "tuning": info["tuning"]})
    return rows


def print_rows(rows):
    print("%-20s %-8s %7s %10s %10s %8s %10s %9s %s" % (
        "model", "mode", "threads", "kiln ms", "ORT ms", "kiln/ORT", "compile s", "rel err",
        "in corpus"))
    for r in rows:
        print("%-20s %-8s %7s %10.2f %10.2f %8.2f %10.1f %9s %s" % (
            r["model"], r["mode"], r["threads"], float(r["kiln_ms"]), float(r["ort_ms"]),
            float(r["ratio"]), float(r["compile_s"]), r["err_vs_ort"], r["in_corpus"]))


def summary(rows, skipped):
    """Prints, per mode and thread count, the geometric mean of the kiln/ORT time ratio, the
    worst network and issue 29's goals."""
    print()
    print("## summary (kiln/ORT time ratio: above 1, kiln is slower)")
    models = sorted({r["model"] for r in rows})
    for name, why in skipped:
        print("skipped, not counted: %s: %s" % (name, why))
    print("networks counted: %d (%s); in the cost model's training corpus: %s"
          % (len(models), ", ".join(models),
             ", ".join(sorted({r["model"] for r in rows if r["in_corpus"] == "yes"})) or "none"))
    if len(models) < MIN_SUITE:
        print("note: issue 29's goals are judged on a suite of at least %d networks; this run "
              "has %d" % (MIN_SUITE, len(models)))
    for mode in MODES:
        for n in sorted({int(r["threads"]) for r in rows if r["mode"] == mode}):
            sel = [r for r in rows if r["mode"] == mode and int(r["threads"]) == n]
            ratios = [float(r["ratio"]) for r in sel]
            if not ratios or any(not (x > 0) for x in ratios):
                print("%s, %d thread%s: no ratio (ONNX Runtime not timed)"
                      % (mode, n, "" if n == 1 else "s"))
                continue
            gm = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
            worst = max(sel, key=lambda r: float(r["ratio"]))
            slowest = max(sel, key=lambda r: float(r["compile_s"]))
            if mode == "untuned":
                ok = (gm <= UNTUNED_GEOMEAN and float(worst["ratio"]) <= UNTUNED_WORST
                      and float(slowest["compile_s"]) <= COMPILE_S)
                goal = ("geomean <= %.1fx ORT's time, no network above %.1fx, compile <= %.0f s"
                        % (UNTUNED_GEOMEAN, UNTUNED_WORST, COMPILE_S))
            else:
                ok = gm <= TUNED_GEOMEAN
                goal = "geomean >= %.1fx ORT's speed" % (1 / TUNED_GEOMEAN)
            print("%s, %d thread%s: geomean kiln/ORT %.2fx over %d networks; worst %s %.2fx; "
                  "longest compile %s %.1f s; goal (%s): %s"
                  % (mode, n, "" if n == 1 else "s", gm, len(sel), worst["model"],
                     float(worst["ratio"]), slowest["model"], float(slowest["compile_s"]), goal,
                     "MET" if ok and len(models) >= MIN_SUITE else
                     "met on these networks (suite too small)" if ok else "NOT MET"))


def read_csv(paths):
    rows = []
    for p in paths:
        try:
            with open(p, newline="") as f:
                rd = csv.DictReader(f)
                if not rd.fieldnames or not set(FIELDS) <= set(rd.fieldnames):
                    raise e2e.BenchError("%s: not a bench_models.py CSV (expected the columns "
                                         "%s)" % (p, ",".join(FIELDS)))
                rows += list(rd)
        except OSError as e:
            raise e2e.BenchError("cannot read %s: %s" % (p, e.strerror)) from None
    return rows


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", default=os.path.join(REPO, "build", "kiln"),
                    help="the kiln binary (default build/kiln)")
    ap.add_argument("--out", default=os.path.join(REPO, "build", "bench_models"),
                    help="directory for models, modules, weights and databases "
                         "(default build/bench_models)")
    ap.add_argument("--csv", default=None, help="CSV of the rows (default OUT/bench_models.csv)")
    ap.add_argument("--append", action="store_true",
                    help="add the rows to --csv instead of replacing it")
    ap.add_argument("--summary", nargs="+", metavar="CSV", default=None,
                    help="print the summary of these CSV files and exit")
    ap.add_argument("--models", default=",".join(SUITE),
                    help="networks (default the suite: %s)" % ",".join(SUITE))
    ap.add_argument("--modes", default="untuned", help="untuned, tuned or both (default untuned)")
    ap.add_argument("--tune-minutes", type=float, default=10.0,
                    help="kiln tune's time budget per network and thread count (default 10)")
    ap.add_argument("--tune-once", action="store_true",
                    help="tune once per network, at kiln tune's default thread count")
    ap.add_argument("--threads", default="1,2", help="thread counts (default 1,2)")
    ap.add_argument("--engines", default=",".join(ENGINES),
                    help="engines (default kiln,ort; also any of bench_e2e.py's but kiln-py)")
    ap.add_argument("--size", type=int, default=224, help="input height and width (default 224)")
    ap.add_argument("--reps", type=int, default=10, help="timed calls per round (default 10)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    ap.add_argument("--warmup", type=int, default=2,
                    help="untimed calls before each round's timed calls (default 2)")
    ap.add_argument("--pause", type=float, default=0.3, help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=0, help="weights and input seed (default 0)")
    opt = ap.parse_args(argv)
    if opt.summary:
        return opt
    import kiln.nets

    try:
        opt.threads = [int(t) for t in opt.threads.split(",") if t]
    except ValueError:
        ap.error("--threads: expected comma-separated integers, got %r" % opt.threads)
    if not opt.threads or any(t < 1 for t in opt.threads):
        ap.error("--threads: every thread count must be at least 1")
    opt.models = [m for m in opt.models.split(",") if m]
    for m in opt.models:
        if m not in kiln.nets.NETS:
            ap.error("--models: unknown network %r; known: %s"
                     % (m, ", ".join(sorted(kiln.nets.NETS))))
    opt.modes = [m for m in opt.modes.split(",") if m]
    if not opt.modes or any(m not in MODES for m in opt.modes):
        ap.error("--modes: expected untuned, tuned or both, got %r" % ",".join(opt.modes))
    opt.engines = [e for e in opt.engines.split(",") if e]
    for e in opt.engines:
        if e not in e2e.ENGINES or e == "kiln-py":
            ap.error("--engines: unknown engine %r; known: kiln, ort and bench_e2e.py's "
                     "torch-* modes" % e)
    if "kiln" not in opt.engines:
        ap.error("--engines must include kiln")
    for flag, v, lo in (("--size", opt.size, 32), ("--reps", opt.reps, 1),
                        ("--rounds", opt.rounds, 1), ("--warmup", opt.warmup, 0)):
        if v < lo:
            ap.error("%s must be at least %d, got %d" % (flag, lo, v))
    if not opt.tune_minutes > 0:
        ap.error("--tune-minutes must be positive")
    opt.kiln = os.path.abspath(opt.kiln)
    if not os.access(opt.kiln, os.X_OK):
        ap.error("--kiln: %s is not an executable (build kiln first)" % opt.kiln)
    opt.out = os.path.abspath(opt.out)
    opt.csv = os.path.abspath(opt.csv) if opt.csv else os.path.join(opt.out, "bench_models.csv")
    return opt


def main(argv=None):
    opt = parse_args(sys.argv[1:] if argv is None else argv)
    if opt.summary:
        try:
            summary(read_csv(opt.summary), [])
        except e2e.BenchError as e:
            print("bench_models: error: %s" % e, file=sys.stderr)
            return 1
        return 0
    try:
        import numpy as np
        import onnx  # noqa: F401
        import torch
        import torchvision  # noqa: F401
    except ImportError as e:
        print("bench_models: %s (use Debian's /usr/bin/python3 with torch, torchvision and "
              "onnx)" % e, file=sys.stderr)
        return 1
    if not os.environ.get("KILN_LIB"):
        os.environ["KILN_LIB"] = os.path.join(os.path.dirname(opt.kiln), "libkiln.so")
    ort_ok, ort_info = e2e.ort_status()
    if "ort" in opt.engines and not ort_ok:
        print("bench_models: error: %s" % ort_info, file=sys.stderr)
        return 1
    # every kiln command (they inherit our environment): no per-user records cache
    os.environ["KILN_CACHE"] = "off"
    opt.has_time = "--time" in kiln_help(opt.kiln, "tune").replace("--timeout", "")
    try:
        os.makedirs(opt.out, exist_ok=True)
    except OSError as e:
        print("bench_models: error: cannot create --out %s: %s" % (opt.out, e.strerror),
              file=sys.stderr)
        return 1
    x_path = os.path.join(opt.out, "x_%d_seed%d.npy" % (opt.size, opt.seed))
    g = torch.Generator().manual_seed(opt.seed)
    np.save(x_path, torch.randn(1, 3, opt.size, opt.size, generator=g).numpy())
    print("bench_models: %s; torch %s; onnxruntime %s; load average %.2f %.2f %.2f"
          % (e2e.cpu_model(), torch.__version__, ort_info if ort_ok else "not used",
             *os.getloadavg()))
    print("modes %s; threads %s; rounds %d x %d calls (after %d warm-up), median per round, "
          "best round; seed %d; records cache off (KILN_CACHE=off)"
          % (",".join(opt.modes), ",".join(map(str, opt.threads)), opt.rounds, opt.reps,
             opt.warmup, opt.seed))
    if "tuned" in opt.modes:
        print("tuned: kiln tune %s per network%s" % (
            "--time %gm" % opt.tune_minutes if opt.has_time else
            "stopped with SIGINT after %g min (this kiln has no --time)" % opt.tune_minutes,
            " (once, at kiln tune's default thread count)" if opt.tune_once
            else " and thread count"))
    ctx = multiprocessing.get_context("spawn")
    rows, skipped = [], []
    try:
        if not opt.append or not os.path.exists(opt.csv):
            with open(opt.csv, "w", newline="") as f:
                csv.DictWriter(f, FIELDS).writeheader()
        for name in opt.models:
            try:
                got = bench_model(opt, ctx, name, x_path)
            except Skip as s:
                log("%s: skipped: %s" % (name, s))
                skipped.append((name, str(s)))
                continue
            print()
            print("## %s, batch 1, 3x%dx%d, fp32" % (name, opt.size, opt.size))
            print_rows(got)
            sys.stdout.flush()
            rows += got
            with open(opt.csv, "a", newline="") as f:
                csv.DictWriter(f, FIELDS).writerows(got)
    except e2e.BenchError as e:
        print("bench_models: error: %s" % e, file=sys.stderr)
        return 1
    except OSError as e:
        print("bench_models: error: %s: %s" % (e.filename or opt.csv, e.strerror),
              file=sys.stderr)
        return 1
    if opt.append:
        rows = read_csv([opt.csv])
    summary(rows, skipped)
    print("load average at the end: %.2f %.2f %.2f; rows in %s"
          % (*os.getloadavg(), opt.csv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
