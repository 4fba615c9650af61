#!/usr/bin/env python3
"""kiln's tuner against Apache TVM's MetaSchedule, at the same trial budget and thread count.

One run, per workload of bench_tune (matmul 1024^3 and 2048^3; ResNet-18's 3x3 convolutions at
56^2, 28^2, 14^2, 7^2; its 1x1 stride-2 projection; a depthwise 3x3, C=256, 28^2; batch 1,
fp32, NHWC activations):

1. kiln: ``bench_tune --trials N --threads-tune T --write-kg DIR --db OUT/kiln.db`` (a fresh
   database, the per-user records cache off): kiln's tuning wall time and its kernel next to
   oneDNN and OpenBLAS, as bench_tune prints them; then ``kiln compile DIR/NAME.kg --db`` of
   the same graph, loaded here through the kiln package (ABI of include/kiln_abi.h).
2. MetaSchedule: the same computation as a TE function (weights in the layout TVM's NHWC
   convolutions take, HWIO, transposed once outside the timed call, as kiln's weights are
   packed once in kiln_prepare), tuned by ``tvm.s_tir.meta_schedule.tune_tir`` for N trials
   with T cores on an ``llvm`` target for this CPU, its best schedule compiled.
3. Both outputs checked against NumPy (float64) on the same random inputs; then both kernels
   timed, each in a child process of its own, interleaved round by round.

Without TVM (``scripts/setup_tvm.sh`` installs it into ``.venv-tvm/``; when ``import tvm``
fails and that venv exists this script re-runs itself with the venv's Python) it says so and
runs the kiln/oneDNN/OpenBLAS part alone. See benchmarks/README.md.
"""

import argparse
import ctypes
import json
import logging
import math
import multiprocessing
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_e2e as e2e  # noqa: E402  (cpu_model; it imports no torch at the top)

VENV_PY = os.path.join(REPO, ".venv-tvm", "bin", "python")

# name: ("matmul", size) or ("conv", C, H, K, R, stride, pad, groups), as in bench_tune.c
WORKLOADS = {
    "matmul1024": ("matmul", 1024),
    "matmul2048": ("matmul", 2048),
    "conv3x3_56": ("conv", 64, 56, 64, 3, 1, 1, 1),
    "conv3x3_28": ("conv", 128, 28, 128, 3, 1, 1, 1),
    "conv3x3_14": ("conv", 256, 14, 256, 3, 1, 1, 1),
    "conv3x3_7": ("conv", 512, 7, 512, 3, 1, 1, 1),
    "conv1x1_s2": ("conv", 128, 28, 256, 1, 2, 0, 1),
    "depthwise3x3": ("conv", 256, 28, 256, 3, 1, 1, 256),
}
TOL = 1e-4  # max |out - ref| / max |ref|, as bench_tune checks against oneDNN


class BenchError(Exception):
    pass


def log(*a):
    print(*a, flush=True)


def out_size(w):
    _, C, H, K, R, st, pad, g = w
    return (H + 2 * pad - R) // st + 1


def flops(w):
    if w[0] == "matmul":
        return 2.0 * w[1] ** 3
    _, C, H, K, R, st, pad, g = w
    oh = out_size(w)
    return 2.0 * K * (C // g) * R * R * oh * oh


# ---------------------------------------------------------------- inputs and the NumPy oracle

def make_inputs(w, seed):
    """kiln's arguments (NHWC activations, KCRS weights), uniform in [-1, 1)."""
    import numpy as np
    rng = np.random.default_rng(seed)
    if w[0] == "matmul":
        n = w[1]
        return [rng.uniform(-1, 1, (n, n)).astype(np.float32) for _ in range(2)]
    _, C, H, K, R, st, pad, g = w
    x = rng.uniform(-1, 1, (1, H, H, C)).astype(np.float32)
    wt = rng.uniform(-1, 1, (K, C // g, R, R)).astype(np.float32)
    return [x, wt]


def reference(w, args):
    """The output in float64, computed by NumPy alone."""
    import numpy as np
    if w[0] == "matmul":
        return args[0].astype(np.float64) @ args[1].astype(np.float64)
    _, C, H, K, R, st, pad, g = w
    x, wt = args[0][0].astype(np.float64), args[1].astype(np.float64)
    xp = np.pad(x, ((pad, pad), (pad, pad), (0, 0)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (R, R), axis=(0, 1))[::st, ::st]
    if g == 1:  # win: [OH, OW, C, R, S]
        return np.einsum("hwcrs,kcrs->hwk", win, wt, optimize=True)[None]
    if g == C == K:
        return np.einsum("hwcrs,crs->hwc", win, wt[:, 0], optimize=True)[None]
    raise BenchError("no reference for groups=%d" % g)


def rel_error(got, want):
    import numpy as np
    got = np.asarray(got, dtype=np.float64).reshape(want.shape)
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))


# ---------------------------------------------------------------- kiln: bench_tune and the .so

LINE_TUNE = re.compile(r"^(\S+)\s+tuning: ([\d.]+) s wall, (\d+) threads, (\d+) trials, "
                       r"best measured ([\d.]+) us")
LINE_TIME = re.compile(r"^(\S+)\s+threads (\d+)\s+kiln\s+([\d.]+) GFLOP/s\s+oneDNN\s+([\d.]+)"
                       r"(?:\s+OpenBLAS\s+([\d.]+))?")


def run_bench_tune(opt, names, kg_dir, db):
    """Runs bench_tune (its output passed through) and returns, per workload, its tuning wall
    time, record count and the library figures at --threads."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        if os.path.exists(db + suffix):
            os.remove(db + suffix)
    cmd = [opt.bench_tune, "--trials", str(opt.trials), "--threads-tune", str(opt.threads),
           "--only", ",".join(names), "--db", db, "--write-kg", kg_dir]
    env = dict(os.environ, KILN_CACHE="off")
    for v in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):  # they make OpenBLAS pick a slower kernel
        env.pop(v, None)
    log("$ " + " ".join(cmd))
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
    res = {n: {} for n in names}
    for line in p.stdout:
        sys.stdout.write("  | " + line)
        sys.stdout.flush()
        m = LINE_TUNE.match(line)
        if m and m.group(1) in res:
            res[m.group(1)].update(tune_s=float(m.group(2)), trials=int(m.group(4)),
                                   tuner_best_us=float(m.group(5)))
        m = LINE_TIME.match(line)
        if m and m.group(1) in res and int(m.group(2)) == opt.threads:
            f = flops(WORKLOADS[m.group(1)])
            r = res[m.group(1)]
            r["bench_tune_kiln_ms"] = f / float(m.group(3)) / 1e6
            r["onednn_ms"] = f / float(m.group(4)) / 1e6
            if m.group(5):
                r["openblas_ms"] = f / float(m.group(5)) / 1e6
    rc = p.wait()
    if rc:
        raise BenchError("bench_tune exited with status %d (output above)" % rc)
    for n in names:
        if "tune_s" not in res[n] or "onednn_ms" not in res[n]:
            raise BenchError("bench_tune printed no tuning or timing line for %s" % n)
    return res


def kiln_compile(opt, name, kg_dir, db, so):
    """Compiles NAME.kg with the records of db; every task must have one."""
    cmd = [opt.kiln, "compile", os.path.join(kg_dir, name + ".kg"), "--db", db, "--no-cache",
           "-o", so]
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, KILN_CACHE="off"))
    if p.returncode:
        raise BenchError("%s failed:\n%s" % (" ".join(cmd), p.stderr))
    m = re.search(r"(\d+) of (\d+) tasks tuned", p.stderr)
    if not m or m.group(1) != m.group(2):
        raise BenchError("kiln compile did not take every task from %s:\n%s" % (db, p.stderr))


def kiln_kernel(so, args, threads):
    """A call that runs the prepared module on args (descriptors built once), and its output."""
    import numpy as np

    import kiln
    from kiln import _dlpack as dl
    from kiln import module as km

    mod = kiln.load(so)
    mod.set_num_threads(threads)
    out = kiln.aligned_empty(mod.outputs[0].shape, np.float32)
    kargs = [kiln.aligned(a) for a in args]
    prep = mod.prepare(*kargs)  # the schedule's weight-derived buffers, once, untimed
    call = km._Call()
    for a, v in zip(mod.args, kargs):
        call.add(a, v, False)
    call.add(mod.outputs[0], out, True)
    n = len(call.tensors)
    ptrs = (ctypes.POINTER(dl.DLTensor) * n)(*[ctypes.pointer(t) for t in call.tensors])
    err = ctypes.create_string_buffer(512)
    so_fn, handle = mod._so.kiln_call_prepared, prep._handle

    def run():
        if so_fn(handle, ptrs, n, err, len(err)):
            raise BenchError("kiln call failed: %s" % err.value.decode())
    run.keep = (call, ptrs, kargs, mod, prep)
    return run, out


# ---------------------------------------------------------------- TVM MetaSchedule

def tvm_status():
    """(True, version) or (False, why)."""
    try:
        import tvm
        import tvm.s_tir.meta_schedule  # noqa: F401
        return True, tvm.__version__
    except Exception as e:  # ImportError, or a broken install failing at import
        return False, "%s: %s" % (type(e).__name__, e)


def tvm_func(w):
    """The workload as a TVM PrimFunc: (func, HWIO-or-kiln weights -> TVM weights)."""
    from tvm import te
    if w[0] == "matmul":
        n = w[1]
        A = te.placeholder((n, n), name="A")
        B = te.placeholder((n, n), name="B")
        k = te.reduce_axis((0, n), name="k")
        C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
        return te.create_prim_func([A, B, C]), lambda args: list(args)
    _, C, H, K, R, st, pad, g = w
    oh = out_size(w)
    X = te.placeholder((1, H, H, C), name="X")
    Hp = H + 2 * pad
    Xp = te.compute(
        (1, Hp, Hp, C),
        lambda n, h, v, c: te.if_then_else(
            te.all(h >= pad, h < H + pad, v >= pad, v < H + pad), X[n, h - pad, v - pad, c],
            te.const(0.0, "float32")),
        name="pad")
    r = te.reduce_axis((0, R), name="r")
    s = te.reduce_axis((0, R), name="s")
    if g == 1:
        W = te.placeholder((R, R, C, K), name="W")  # HWIO, as TVM's conv2d_nhwc takes it
        c = te.reduce_axis((0, C), name="c")
        Y = te.compute(
            (1, oh, oh, K),
            lambda n, h, v, k: te.sum(Xp[n, h * st + r, v * st + s, c] * W[r, s, c, k],
                                      axis=[r, s, c]),
            name="Y")
        return te.create_prim_func([X, W, Y]), \
            lambda args: [args[0], args[1].transpose(2, 3, 1, 0).copy()]
    W = te.placeholder((R, R, C), name="W")  # depthwise: HWC
    Y = te.compute(
        (1, oh, oh, C),
        lambda n, h, v, c: te.sum(Xp[n, h * st + r, v * st + s, c] * W[r, s, c], axis=[r, s]),
        name="Y")
    return te.create_prim_func([X, W, Y]), \
        lambda args: [args[0], args[1][:, 0].transpose(1, 2, 0).copy()]


def tvm_target(opt):
    import tvm
    mcpu = opt.mcpu or tvm.target.codegen.llvm_get_system_cpu()
    # the dict form: the string form of this version does not parse "-num-cores" reliably
    return tvm.target.Target({"kind": "llvm", "mcpu": mcpu, "num-cores": opt.threads})


def ms_tune(opt, name, w, work_dir, so_path):
    """Tunes the workload with MetaSchedule and exports its best kernel to so_path; returns
    (tuning wall s, records in its database, its best measured time in us)."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    func, _ = tvm_func(w)
    mod = tvm.IRModule({"main": func})
    target = tvm_target(opt)
    shutil.rmtree(work_dir, ignore_errors=True)
    os.makedirs(work_dir)
    if not opt.verbose:
        # its console handler takes this level; the full log still goes to WORK_DIR/logs
        logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    t0 = time.perf_counter()
    db = ms.tune_tir(
        mod, target, work_dir, max_trials_global=opt.trials, max_trials_per_task=opt.trials,
        num_trials_per_iter=min(64, opt.trials),
        # its build and run workers are fresh processes that import TVM (about 20 s here) before
        # their first job: the default 30 s timeouts fail every candidate of the first round
        builder=ms.builder.LocalBuilder(max_workers=opt.threads, timeout_sec=opt.ms_timeout),
        runner=ms.runner.LocalRunner(timeout_sec=opt.ms_timeout),
        num_tuning_cores=opt.threads, seed=opt.seed)
    tune_s = time.perf_counter() - t0
    recs = db.get_all_tuning_records()
    runs = [statistics.mean(float(t) for t in r.run_secs) for r in recs if r.run_secs]
    best_us = min(runs) * 1e6 if runs else None
    sch = ms.tir_integration.compile_tir(db, mod, target)
    if sch is None:
        raise BenchError("MetaSchedule found no valid schedule for %s in %d trials (logs in %s)"
                         % (name, len(recs), work_dir))
    tvm.compile(sch.mod, target=target).export_library(so_path)
    return tune_s, len(recs), best_us


def tvm_kernel(so_path, w, args):
    import numpy as np
    import tvm
    fn = tvm.runtime.load_module(so_path)["main"]
    _, to_tvm = tvm_func(w)
    dev = tvm.cpu()
    targs = [tvm.runtime.tensor(a, dev) for a in to_tvm(args)]  # weights laid out once, here
    oshape = (w[1], w[1]) if w[0] == "matmul" else \
        (1, out_size(w), out_size(w), w[3] if w[7] == 1 else w[1])
    out = tvm.runtime.tensor(np.zeros(oshape, np.float32), dev)

    def run():
        fn(*targs, out)
    run.keep = targs
    return run, out


# ---------------------------------------------------------------- timing

def time_calls(run, reps, warmup_s=0.25):
    """The median of reps timed calls, in seconds, after untimed ones for warmup_s (at least
    two): a kernel's first tens of calls after a pause ran up to 2x slower here."""
    t_end = time.perf_counter() + warmup_s
    n = 0
    while n < 2 or time.perf_counter() < t_end:
        run()
        n += 1
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        run()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def child_main(conn, spec):
    """One engine's kernel in a process of its own: sends its output once built, then answers
    each request (reps) with a median time, until None."""
    try:
        sys.path.insert(0, os.path.join(REPO, "python"))
        w = WORKLOADS[spec["name"]]
        args = make_inputs(w, spec["seed"])
        if spec["engine"] == "kiln":
            run, out = kiln_kernel(spec["so"], args, spec["threads"])
            get = lambda: out  # noqa: E731
        else:
            run, out = tvm_kernel(spec["so"], w, args)
            get = out.numpy
        run()
        conn.send(("ok", get()))
        while True:
            reps = conn.recv()
            if reps is None:
                break
            conn.send(("ok", time_calls(run, reps)))
    except Exception as e:  # reported by the parent, which stops
        conn.send(("error", "%s: %s" % (type(e).__name__, e)))


def start_child(ctx, spec):
    parent, child = ctx.Pipe()
    p = ctx.Process(target=child_main, args=(child, spec), daemon=True)
    p.start()
    return p, parent


def recv(conn, what):
    if not conn.poll(600):
        raise BenchError("%s: no answer in 600 s" % what)
    st, v = conn.recv()
    if st != "ok":
        raise BenchError("%s: %s" % (what, v))
    return v


def stop_children(children):
    for p, conn in children.values():
        try:
            conn.send(None)
        except OSError:
            pass
        p.join(10)
        if p.is_alive():
            p.kill()


def time_interleaved(children, reps, rounds, pause_s=0.3):
    """Per round, each engine's child in turn makes its warm-up and timed calls; an engine's
    time is the best of its per-round medians (seconds). Each runs in its own process (their
    thread pools would compete in one: MetaSchedule's kernel ran 2x slower next to a loaded
    kiln module), one at a time; the pause lets the previous one's threads stop spinning."""
    best = {k: math.inf for k in children}
    for _ in range(rounds):
        for k, (p, conn) in children.items():
            time.sleep(pause_s)
            conn.send(reps)
            best[k] = min(best[k], recv(conn, k))
    return best


# ---------------------------------------------------------------- report

def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def fmt(x, f="%.3f"):
    return "-" if x is None else f % x


def report(opt, names, rows, ms_note):
    log("")
    log("workloads at %d trials, %d thread%s; times in ms (GFLOP/s); ratios: kiln's time over "
        "the other's (above 1: kiln slower)" % (opt.trials, opt.threads,
                                                "" if opt.threads == 1 else "s"))
    hdr = ("workload", "kiln", "MetaSchedule", "kiln/MS", "kiln tune s", "MS tune s",
           "oneDNN", "OpenBLAS", "kiln/oneDNN")
    lines = []
    for n in names:
        r, f = rows[n], flops(WORKLOADS[n])
        def ms_gf(t):
            return "-" if t is None else "%.3f (%.0f)" % (t * 1e3, f / t * 1e-9)
        lines.append((n, ms_gf(r.get("kiln_s")), ms_gf(r.get("ms_s")),
                      fmt(r.get("kiln_ms_ratio"), "%.2f"),
                      fmt(r.get("tune_s"), "%.0f"), fmt(r.get("ms_tune_s"), "%.0f"),
                      ms_gf(r["onednn_ms"] / 1e3), ms_gf(r["openblas_ms"] / 1e3)
                      if "openblas_ms" in r else "-", fmt(r.get("kiln_onednn_ratio"), "%.2f")))
    widths = [max(len(str(x[i])) for x in lines + [hdr]) for i in range(len(hdr))]
    for row in [hdr] + lines:
        log("  ".join(str(c).ljust(wd) if i == 0 else str(c).rjust(wd)
                      for i, (c, wd) in enumerate(zip(row, widths))))
    g = {k: geomean([rows[n].get(k) for n in names])
         for k in ("kiln_ms_ratio", "tune_ratio", "kiln_onednn_ratio")}
    log("geometric mean over %d workloads: kiln/MetaSchedule kernel time %s, tuning wall time %s;"
        " kiln/oneDNN kernel time %s" % (len(names), fmt(g["kiln_ms_ratio"], "%.2f"),
                                         fmt(g["tune_ratio"], "%.2f"),
                                         fmt(g["kiln_onednn_ratio"], "%.2f")))
    if ms_note:
        log("MetaSchedule: " + ms_note)
    return g


# ---------------------------------------------------------------- main

def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=300,
                    help="measured programs per workload, for both tuners (default 300)")
    ap.add_argument("--threads", type=int, default=2, choices=(1, 2),
                    help="threads of tuning and of the timed kernels (bench_tune times 1 and 2)")
    ap.add_argument("--only", default=",".join(WORKLOADS),
                    help="comma-separated workloads (default all: %s)" % ",".join(WORKLOADS))
    ap.add_argument("--out", default=os.path.join(REPO, "build", "bench_metaschedule"),
                    help="databases, graphs, modules, TVM's logs, results.json "
                         "(default build/bench_metaschedule)")
    ap.add_argument("--build", default=os.path.join(REPO, "build"),
                    help="the build directory with bench_tune and kiln (default build)")
    ap.add_argument("--reps", type=int, default=30, help="timed calls per round (default 30)")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    ap.add_argument("--seed", type=int, default=1, help="inputs and MetaSchedule's seed")
    ap.add_argument("--mcpu", default=None, help="TVM's -mcpu (default: LLVM's host CPU)")
    ap.add_argument("--ms-timeout", type=float, default=120,
                    help="MetaSchedule's builder and runner timeouts, s (default 120)")
    ap.add_argument("--verbose", action="store_true",
                    help="MetaSchedule's progress on the console (else only in OUT/ms/NAME/logs)")
    ap.add_argument("--no-metaschedule", action="store_true",
                    help="kiln, oneDNN and OpenBLAS only")
    opt = ap.parse_args(argv)
    names = [n for n in opt.only.split(",") if n]
    bad = [n for n in names if n not in WORKLOADS]
    if bad or not names:
        ap.error("unknown workload %s (known: %s)" % (",".join(bad) or "''", ",".join(WORKLOADS)))
    if opt.trials < 1 or opt.reps < 1 or opt.rounds < 1 or opt.ms_timeout <= 0:
        ap.error("--trials, --reps, --rounds and --ms-timeout must be positive")
    opt.names = list(dict.fromkeys(names))
    opt.bench_tune = os.path.join(opt.build, "bench_tune")
    opt.kiln = os.path.join(opt.build, "kiln")
    for p in (opt.bench_tune, opt.kiln):
        if not os.access(p, os.X_OK):
            ap.error("%s not found: build it first (scripts/build.sh %s)" % (p, opt.build))
    return opt


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    opt = parse_args(argv)
    # TVM's thread pool reads this when it starts (here and in its measuring workers)
    os.environ["TVM_NUM_THREADS"] = str(opt.threads)
    sys.path.insert(0, os.path.join(REPO, "python"))
    ms_ok, ms_why = (False, "skipped (--no-metaschedule)") if opt.no_metaschedule else tvm_status()
    if not ms_ok and not opt.no_metaschedule:
        if os.access(VENV_PY, os.X_OK) and os.path.realpath(sys.prefix) != \
                os.path.realpath(os.path.join(REPO, ".venv-tvm")):
            log("TVM not importable here (%s); re-running with %s" % (ms_why, VENV_PY))
            os.execv(VENV_PY, [VENV_PY, os.path.abspath(__file__)] + argv)
        ms_why = ("skipped: TVM is not installed (%s); scripts/setup_tvm.sh installs it into "
                  ".venv-tvm/" % ms_why)
    import numpy as np
    log("bench_metaschedule: %s; %d trials, %d thread(s); %s; NumPy %s; TVM %s; load %.2f"
        % (e2e.cpu_model(), opt.trials, opt.threads, ", ".join(opt.names), np.__version__,
           ms_why if ms_ok else "absent", os.getloadavg()[0]))
    if not ms_ok:
        log("MetaSchedule: " + ms_why)

    os.makedirs(opt.out, exist_ok=True)
    kg_dir, so_dir = os.path.join(opt.out, "kg"), os.path.join(opt.out, "so")
    os.makedirs(kg_dir, exist_ok=True)
    os.makedirs(so_dir, exist_ok=True)
    db = os.path.join(opt.out, "kiln.db")
    rows = run_bench_tune(opt, opt.names, kg_dir, db)
    for r in rows.values():  # bench_tune's own ratio: kiln and oneDNN timed in one process
        r["kiln_onednn_ratio"] = r["bench_tune_kiln_ms"] / r["onednn_ms"]

    ms_so = {}
    fail = False
    if ms_ok:
        for n in opt.names:
            log("MetaSchedule: tuning %s, %d trials ..." % (n, opt.trials))
            so = os.path.join(so_dir, n + ".tvm.so")
            try:
                tune_s, records, best_us = ms_tune(opt, n, WORKLOADS[n],
                                                   os.path.join(opt.out, "ms", n), so)
            except Exception as e:  # TVM's errors: the other workloads and kiln's part go on
                log("MetaSchedule: %s FAILED: %s: %s" % (n, type(e).__name__, e))
                rows[n]["ms_error"] = "%s: %s" % (type(e).__name__, e)
                fail = True
                continue
            ms_so[n] = so
            rows[n].update(ms_tune_s=tune_s, ms_records=records, ms_tuner_best_us=best_us)
            log("MetaSchedule: %s tuned in %.1f s wall, %d records, best measured %s us"
                % (n, tune_s, records, fmt(best_us, "%.1f")))

    ctx = multiprocessing.get_context("spawn")
    for n in opt.names:
        w, r = WORKLOADS[n], rows[n]
        ref = reference(w, make_inputs(w, opt.seed))
        kso = os.path.join(so_dir, n + ".so")
        kiln_compile(opt, n, kg_dir, db, kso)
        spec = {"name": n, "seed": opt.seed, "threads": opt.threads}
        children = {"kiln": start_child(ctx, dict(spec, engine="kiln", so=kso))}
        r["kiln_err"] = rel_error(recv(children["kiln"][1], "kiln"), ref)
        if n in ms_so:
            children["ms"] = start_child(ctx, dict(spec, engine="ms", so=ms_so[n]))
            r["ms_err"] = rel_error(recv(children["ms"][1], "MetaSchedule"), ref)
        log("%s: output error vs NumPy: kiln %.1e, MetaSchedule %s" % (
            n, r["kiln_err"], fmt(r.get("ms_err"), "%.1e")))
        if r["kiln_err"] > TOL or r.get("ms_err", 0) > TOL:
            fail = True
            log("%s: FAILED: error above %g; not timed" % (n, TOL))
            stop_children(children)
            continue
        t = time_interleaved(children, opt.reps, opt.rounds)
        stop_children(children)
        r["kiln_s"] = t["kiln"]
        if "ms" in t:
            r["ms_s"] = t["ms"]
            r["kiln_ms_ratio"] = t["kiln"] / t["ms"]
            r["tune_ratio"] = r["tune_s"] / r["ms_tune_s"]
    g = report(opt, opt.names, rows, None if ms_ok else ms_why)
    log("load average at the end: %.2f" % os.getloadavg()[0])
    with open(os.path.join(opt.out, "results.json"), "w") as f:
        json.dump({"cpu": e2e.cpu_model(), "trials": opt.trials, "threads": opt.threads,
                   "tvm": ms_why if ms_ok else None, "workloads": rows, "geomean": g}, f,
                  indent=1)
    return 1 if fail else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as e:
        print("bench_metaschedule: error: %s" % e, file=sys.stderr)
        sys.exit(1)
