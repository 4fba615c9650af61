#!/usr/bin/python3
"""benchmarks/bench_e2e.py -- end-to-end batch-1 latency of whole networks: kiln tuned vs
PyTorch CPU (eager and its compiled modes) and ONNX Runtime, 1 and 2 threads, in one run.

    /usr/bin/python3 benchmarks/bench_e2e.py [--kiln BUILD/kiln] [--out DIR] [--db FILE.db]
        [--models resnet18,mobilenet_v2] [--size HW] [--seq N] [--trials N[,N]] [--tune-minutes M[,M]]
        [--tune-batch N] [--tune-once] [--threads 1,2] [--engines LIST] [--reps N]
        [--rounds R] [--warmup N] [--seed S] [--no-tune]

For each network (torchvision, random weights after torch.manual_seed(SEED), eval mode; the
same export as tests/py/test_onnx_nets.py, shared through python/kiln/nets.py):

1. export it to ONNX at batch 1, 3 x SIZE x SIZE (default 224);
2. for each thread count T of --threads, `kiln tune MODEL.onnx --threads T --trials N --db
   DB.tT` (N is kiln tune's --trials: the total over the network's tasks, records already in
   the database included, so a rerun resumes or skips the tuning; --tune-minutes stops each
   tuning with SIGINT after M minutes, which kiln tune handles by finishing the measurement in
   flight), then `kiln compile MODEL.onnx --db DB.tT` to the module timed at T threads, as a
   user tunes for the thread count they deploy with (--tune-once: one tuning at kiln tune's
   default thread count into DB, one module for every thread count; --no-tune skips kiln tune
   and compiles with the records the databases already have);
3. start one child process per (engine, thread count) that builds only that engine, checks its
   output against PyTorch eager on the same input (max |got - want| / max |want| <= 1e-4; a
   mismatch aborts the benchmark), then waits for orders;
4. time them in interleaved rounds: each round asks every child in turn for WARMUP untimed and
   REPS timed calls (a pause between children lets idle OpenMP threads go to sleep); an
   engine's time is the median of a round's calls, best of the rounds;
5. print one table per network (engine, threads, median ms, engine time / kiln time -- above 1
   means kiln is faster --, peak RSS) and whether kiln is at least 1.2x faster than the fastest
   PyTorch mode at every thread count.

Engines (--engines, comma separated; default all):
  kiln            the compiled module through its C ABI: kiln_prepare once (weight-derived
                  buffers such as packed weights, untimed), then kiln_call_prepared with
                  argument descriptors built once, as a C caller would; kiln_set_num_threads(n)
  kiln-py         the same prepared module through kiln.Prepared.__call__ (checks and converts every
                  argument on each call: the Python wrapper's overhead)
  torch-eager     eager, NCHW, torch.inference_mode()
  torch-jit       torch.jit.trace + torch.jit.freeze, no layout change
  torch-eager-cl  eager, channels-last model and input
  torch-jit-cl    torch.jit.trace + torch.jit.freeze, channels-last
  torch-onednn-cl the same with torch.jit.enable_onednn_fusion(True) (oneDNN Graph fusion)
  torch-ofi-cl    torch.jit.optimize_for_inference (freeze + MKLDNN convolutions with
                  prepacked weights), channels-last input
  ort             ONNX Runtime on the exported model, ORT_ENABLE_ALL, intra-op threads n, one
                  inter-op thread; skipped (with the reason) when onnxruntime cannot be imported
  torch2-inductor torch.compile(net, dynamic=False) on PyTorch 2 (Inductor, its default
                  backend), in a child run by .venv-torch/bin/python (scripts/setup_torch.sh);
                  skipped when that venv is absent
  torch2-kiln     torch.compile(net, backend="kiln") there, with the records database kiln
                  tune filled for this thread count (python/README.md "torch.compile")
All PyTorch engines use torch.set_num_threads(n) and torch.backends.mkldnn (oneDNN) enabled.

Peak memory: each child reads /proc/self/status. "peak MB" is the peak resident set during the
timed calls (VmHWM, reset with /proc/self/clear_refs after the engine was built and warmed up)
minus the process's resident set with its libraries imported and before the model was loaded:
the memory the engine holds and touches while running (weights, code, workspace, caches).
"setup MB" is the same peak over the whole setup (tracing, compiling, loading). For kiln, the
module's planned memory from its metadata is printed too: weights + input + output bytes, and
the planned intermediate workspace when the metadata has such a field.

Exit status: 0 after a complete run (whether or not the goal is met), 1 on a failure (a tool
failed, an output mismatch), 2 on a usage error.
"""

import argparse
import ctypes
import multiprocessing
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "python"))
# where scripts/setup.sh installs ONNX Runtime from PyPI (Debian does not package it)
PYDEPS = os.path.join(REPO, ".pydeps")

TOL = 1e-4
GOAL = 1.2
ENGINES = ["kiln", "kiln-py", "torch-eager", "torch-jit", "torch-eager-cl", "torch-jit-cl",
           "torch-onednn-cl", "torch-ofi-cl", "ort", "torch2-inductor", "torch2-kiln"]
# PyTorch 2 (scripts/setup_torch.sh): the torch2-* engines run in children of its python
VENV_PY = os.path.join(os.environ.get("KILN_TORCH_VENV") or os.path.join(REPO, ".venv-torch"),
                       "bin", "python")
MODELS = ["resnet18", "mobilenet_v2"]
# the transformers of python/kiln/nets.py (kiln.nets.TRANSFORMERS), by name; not run by default
TRANSFORMERS = ["bert_base", "gpt2_small", "vit_b_16"]
# engines that only mean something for CNNs (channels-last layouts)
CNN_ONLY = {"torch-eager-cl", "torch-jit-cl", "torch-onednn-cl", "torch-ofi-cl"}


def is_transformer(name):
    return name in TRANSFORMERS


def transformer_sizes(opt, name):
    """The sizes kiln.nets.transformer builds ``name`` at: full size, at --seq tokens (BERT,
    GPT-2) or --size pixels (ViT)."""
    return {"image": opt.size} if name == "vit_b_16" else {"seq": opt.seq}


def load_inputs(path):
    """The model's inputs saved by prepare_model: one array (.npy) or several (.npz, in the
    model's input order)."""
    import numpy as np

    if path.endswith(".npz"):
        z = np.load(path)
        return [z["arr_%d" % i] for i in range(len(z.files))]
    return np.load(path)


class BenchError(Exception):
    pass


# ---------------------------------------------------------------- child side

def _status_kb(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _reset_peak():
    """Resets VmHWM to the current resident set (Linux >= 4.0). True when it worked."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _import_libs(engine):
    """Imports what the engine needs, so that the baseline includes the libraries."""
    if engine.startswith("torch2"):
        # spawn gave this child the parent's sys.path (Debian's dist-packages, PyTorch 1.13):
        # keep PyTorch 2's venv's site-packages instead
        import site
        venv = site.getsitepackages()
        sys.path[:] = [p for p in sys.path if "-packages" not in p or p in venv] + [
            p for p in venv if p not in sys.path]
    import numpy  # noqa: F401
    if engine.startswith("kiln"):
        import kiln  # noqa: F401
        import kiln.nets  # noqa: F401
    elif engine.startswith("torch"):
        import torch  # noqa: F401
        import torchvision  # noqa: F401

        import kiln.nets  # noqa: F401
    elif engine == "ort":
        if PYDEPS not in sys.path:
            sys.path.insert(0, PYDEPS)
        import onnxruntime  # noqa: F401


def _kiln_engine(spec, x):
    import numpy as np

    import kiln
    import kiln.nets
    from kiln import _dlpack as dl
    from kiln import module as km

    mod = kiln.load(spec["so"])
    mod.set_num_threads(spec["threads"])
    args = kiln.nets.module_args(mod, x, spec["weights"])
    if len(mod.outputs) != 1:
        raise BenchError("expected one output, the module has %d" % len(mod.outputs))
    out = kiln.aligned_empty(mod.outputs[0].shape, np.float32)
    # weights are fixed, as in PyTorch's frozen modes and ONNX Runtime's sessions: the module's
    # weight-derived buffers (packed weights) are computed once by kiln_prepare, untimed
    prep = mod.prepare(*args)
    if spec["engine"] == "kiln-py":
        def run():
            prep(*args, out=out)
            return out
        run.keep = (prep, args, mod)
        return run
    # the C ABI with descriptors built once (what a C program calling kiln_call_prepared does)
    call = km._Call()
    for a, v in zip(mod.args, args):
        call.add(a, v, False)
    call.add(mod.outputs[0], out, True)
    n = len(call.tensors)
    ptrs = (ctypes.POINTER(dl.DLTensor) * n)(*[ctypes.pointer(t) for t in call.tensors])
    err = ctypes.create_string_buffer(512)
    if mod._has_prepare:
        handle = prep._handle
        fn = lambda: mod._so.kiln_call_prepared(handle, ptrs, n, err, len(err))  # noqa: E731
    else:
        fn = lambda: mod._so.kiln_call(ptrs, n, err, len(err))  # noqa: E731

    def run():
        st = fn()
        if st != 0:
            raise BenchError("kiln call failed (%d): %s" % (st, err.value.decode()))
        return out
    run.keep = (call, ptrs, args, mod, prep)
    return run


def _torch_engine(spec, x):
    import torch

    import kiln.nets

    n = spec["threads"]
    torch.set_num_threads(n)
    torch.backends.mkldnn.enabled = True
    eng = spec["engine"]
    if eng.startswith("torch2"):
        return _torch2_engine(spec, x)
    if is_transformer(spec["model"]):
        net = kiln.nets.transformer(spec["model"], spec["seed"], **spec["sizes"])[0]
        xs = tuple(torch.from_numpy(a) for a in x)
        if eng == "torch-jit":
            with torch.no_grad():
                model = torch.jit.freeze(torch.jit.trace(net, xs))
        else:  # eager: under inference_mode PyTorch's encoder layers take their fused path
            model = net

        def run_tf():
            with torch.inference_mode():
                return model(*xs)
        return run_tf
    net = kiln.nets.build(spec["model"], spec["seed"])
    xt = torch.from_numpy(x)
    if eng == "torch-eager":
        model = net
    elif eng == "torch-jit":
        with torch.no_grad():
            model = torch.jit.freeze(torch.jit.trace(net, xt))
    else:
        net = net.to(memory_format=torch.channels_last)
        xt = xt.contiguous(memory_format=torch.channels_last)
        if eng == "torch-eager-cl":
            model = net
        else:
            if eng == "torch-onednn-cl":
                torch.jit.enable_onednn_fusion(True)
            with torch.no_grad():
                traced = torch.jit.trace(net, xt)
                if eng == "torch-ofi-cl":
                    model = torch.jit.optimize_for_inference(torch.jit.freeze(traced))
                else:
                    model = torch.jit.freeze(traced)
            del traced, net

    def run():
        with torch.inference_mode():
            return model(xt)
    return run


def _torch2_engine(spec, x):
    """torch.compile on PyTorch 2: Inductor (its default backend) or kiln's backend with the
    records kiln tune wrote for this thread count (the backend's graphs have the same tasks as
    the exported network), modules cached in --out."""
    import torch

    import kiln.nets

    if is_transformer(spec["model"]):
        net = kiln.nets.transformer(spec["model"], spec["seed"], **spec["sizes"])[0]
        xs = tuple(torch.from_numpy(a) for a in x)
    else:
        net = kiln.nets.build(spec["model"], spec["seed"])
        xs = (torch.from_numpy(x),)
    if spec["engine"] == "torch2-kiln":
        import kiln.torch_backend

        opts = {"threads": spec["threads"], "kiln": spec["kiln"], "cache": spec["torch_cache"]}
        if os.path.exists(spec["db_path"]):
            opts["db"] = spec["db_path"]
        model = torch.compile(net, backend="kiln", dynamic=False, options=opts)
    else:
        model = torch.compile(net, dynamic=False)

    def run():
        with torch.inference_mode():
            return model(*xs)
    return run


def _ort_engine(spec, x):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = spec["threads"]
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(spec["onnx"], so, providers=["CPUExecutionProvider"])
    xs = x if isinstance(x, list) else [x]
    feed = {i.name: a for i, a in zip(sess.get_inputs(), xs)}

    def run():
        return sess.run(None, feed)[0]
    return run


def child_main(conn, spec):
    """One engine at one thread count, driven by the parent over ``conn``."""
    try:
        _import_libs(spec["engine"])
        import numpy as np

        base_kb = _status_kb("VmRSS")
        t0 = time.perf_counter()
        x = load_inputs(spec["input"])
        if spec["engine"].startswith("kiln"):
            run = _kiln_engine(spec, x)
        elif spec["engine"].startswith("torch"):
            run = _torch_engine(spec, x)
        else:
            run = _ort_engine(spec, x)
        for _ in range(max(spec["warmup"], 3)):  # oneDNN fusion profiles its first 2 runs
            y = run()
        y = np.array(np.asarray(y), dtype=np.float64)
        setup_s = time.perf_counter() - t0
        setup_hwm_kb = _status_kb("VmHWM")
        reset = _reset_peak()
        # as bytes: a PyTorch 2 child's NumPy 2 pickles arrays that the parent's NumPy 1 cannot read
        conn.send(("ready", (y.shape, y.tobytes()), setup_s))
        while True:
            msg = conn.recv()
            if msg[0] == "time":
                _, warmup, reps = msg
                for _ in range(warmup):
                    run()
                ts = []
                for _ in range(reps):
                    t = time.perf_counter()
                    run()
                    ts.append(time.perf_counter() - t)
                conn.send(("times", ts))
            elif msg[0] == "mem":
                conn.send(("mem", {"base_kb": base_kb, "setup_hwm_kb": setup_hwm_kb,
                                   "run_hwm_kb": _status_kb("VmHWM"), "reset": reset}))
            else:
                return
    except Exception as e:  # noqa: BLE001 - everything goes back to the parent
        try:
            conn.send(("error", "%s: %s" % (type(e).__name__, e)))
        except OSError:
            pass


# ---------------------------------------------------------------- parent side

def log(*a):
    print(*a, file=sys.stderr, flush=True)


def run_tool(cmd, what, timeout_s=None):
    """Runs a kiln command, echoing its stderr to ours. With ``timeout_s``, SIGINT after that
    many seconds (kiln tune then stops after the measurement in flight and exits 130).
    Returns (stdout, stopped by the time limit, the last progress line of kiln tune)."""
    log("$ " + " ".join(cmd))
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    last = ["", ""]  # the last progress line, the last other line

    def pump():
        for line in p.stderr:
            sys.stderr.write(line)
            if line.strip():
                last[0 if line.startswith("trials ") else 1] = line.strip()
    th = threading.Thread(target=pump, daemon=True)
    th.start()
    stopped = False
    try:
        p.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        log("%s: time limit of %.0f s reached, stopping it (SIGINT)" % (what, timeout_s))
        p.send_signal(signal.SIGINT)
        p.wait()
        stopped = p.returncode in (0, 130)
    th.join()
    out = p.stdout.read()
    p.stdout.close()
    p.stderr.close()
    if p.returncode != 0 and not stopped:
        raise BenchError("%s failed (exit %d): %s: %s" % (what, p.returncode, " ".join(cmd),
                                                          last[1]))
    return out, stopped, last[0]


def rel_error(got, want):
    import numpy as np

    got = np.asarray(got, dtype=np.float64).reshape(-1)
    want = np.asarray(want, dtype=np.float64).reshape(-1)
    if got.shape != want.shape:
        return float("inf")
    return float(np.max(np.abs(got - want)) / np.max(np.abs(want)))


def kiln_planned(so):
    """kiln's planned memory, from the module's metadata, as text. The metadata's memory
    fields (weights_bytes, inputs_bytes, outputs_bytes, workspace_bytes,
    workspace_unplanned_bytes, peak_bytes) are used when present; older modules have none, and
    then weights + input + output bytes are summed from the arguments."""
    import kiln
    from kiln import _dlpack as dl

    md = kiln.load(so).metadata
    mb = 1.0 / (1 << 20)
    if "peak_bytes" in md:
        text = "planned peak %.1f MB = weights %.1f + input %.2f + output %.3f + workspace %.1f" % (
            md["peak_bytes"] * mb, md.get("weights_bytes", 0) * mb,
            md.get("inputs_bytes", 0) * mb, md.get("outputs_bytes", 0) * mb,
            md.get("workspace_bytes", 0) * mb)
        if md.get("workspace_unplanned_bytes"):
            # the intermediates' sizes summed: the workspace without memory planning
            text += " (workspace %.1f MB unplanned)" % (md["workspace_unplanned_bytes"] * mb)
        return text
    by_role = {"input": 0, "weight": 0, "output": 0}
    for a in md.get("args", []):
        n = dl.BY_NAME[a["dtype"]].itemsize if a.get("dtype") in dl.BY_NAME else 4
        for e in a.get("shape", []):
            n *= int(e)
        by_role[a.get("role", "weight")] = by_role.get(a.get("role", "weight"), 0) + n
    return ("weights %.1f MB + input %.2f MB + output %.3f MB; intermediates are not planned "
            "(the module's metadata has no memory fields)"
            % (by_role["weight"] * mb, by_role["input"] * mb, by_role["output"] * mb))


def ort_status():
    """(True, version) when onnxruntime imports, else (False, reason)."""
    if PYDEPS not in sys.path:
        sys.path.insert(0, PYDEPS)
    try:
        import onnxruntime
    except ImportError as e:
        return False, ("onnxruntime cannot be imported (%s): Debian has no python3-onnxruntime; "
                       "scripts/setup.sh installs PyPI's wheel into .pydeps/" % e)
    return True, onnxruntime.__version__


def db_for(opt, n):
    """The records database of thread count n: --db itself when one tuning serves every
    thread count (--tune-once), else --db with .tN before its extension."""
    if opt.tune_once:
        return opt.db
    root, ext = os.path.splitext(opt.db)
    return "%s.t%d%s" % (root, n, ext or ".db")


def prepare_model(opt, name):
    """Export (and save the inputs), then tune and compile for each thread count (once with
    --tune-once). Returns {threads: spec fields of the model's children}, PyTorch eager's
    output, {threads: tuning and compile information} and the inputs' file."""
    import numpy as np
    import torch

    import kiln.nets

    shapes = []  # --input-shape options for the symbolic dimensions of a transformer export
    if is_transformer(name):
        sizes = transformer_sizes(opt, name)
        tag = "%s_%d" % (name, opt.size if name == "vit_b_16" else opt.seq)
        onnx_path = os.path.join(opt.out, tag + ".onnx")
        net, xs, names = kiln.nets.transformer(name, opt.seed, **sizes)
        kiln.nets.export_transformer(net, xs, names, onnx_path)
        x_path = os.path.join(opt.out, tag + "_seed%d.npz" % opt.seed)
        np.savez(x_path, *[a.numpy() for a in xs])
        with torch.inference_mode():
            want = net(*xs).numpy().astype(np.float64)
        shapes = ["--input-shape", "batch=1"]
        if name != "vit_b_16":
            shapes += ["--input-shape", "seq=%d" % opt.seq]
    else:
        tag = "%s_%d" % (name, opt.size)
        onnx_path = os.path.join(opt.out, tag + ".onnx")
        x_path = os.path.join(opt.out, "x_%d_seed%d.npy" % (opt.size, opt.seed))
        g = torch.Generator().manual_seed(opt.seed)
        np.save(x_path, torch.randn(1, 3, opt.size, opt.size, generator=g).numpy())
        net = kiln.nets.build(name, opt.seed)
        x = torch.from_numpy(np.load(x_path))
        kiln.nets.export(net, x, onnx_path)
        with torch.inference_mode():
            want = net(x).numpy().astype(np.float64)
    so = os.path.join(opt.out, tag + ".so")
    wdir = os.path.join(opt.out, tag + "_w")
    if os.path.isdir(wdir):
        shutil.rmtree(wdir)
    bases, infos = {}, {}
    for n in ([None] if opt.tune_once else opt.threads):
        db = db_for(opt, n)
        so = os.path.join(opt.out, tag + (".so" if n is None else ".t%d.so" % n))
        info = {"tune_s": 0.0, "tune_stopped": False, "tuned": "", "tune_progress": "",
                "db": os.path.relpath(db, REPO) if db.startswith(REPO + os.sep) else db}
        if not opt.no_tune:
            cmd = [opt.kiln, "tune", onnx_path, "--trials", str(opt.trials[name]), "--db",
                   db] + shapes
            if n is not None:
                cmd += ["--threads", str(n)]
            if opt.tune_batch:
                cmd += ["--batch", str(opt.tune_batch)]
            t0 = time.time()
            _, stopped, progress = run_tool(
                cmd, "kiln tune " + name,
                60 * opt.tune_minutes[name] if name in opt.tune_minutes else None)
            info["tune_s"] = time.time() - t0
            info["tune_stopped"] = stopped
            m = re.match(r"trials (\d+)/\d+\s+latency (\S+ \S+)", progress)
            info["tune_progress"] = ("%s trials, estimated latency %s" % m.groups()) if m else ""
        cmd = [opt.kiln, "compile", onnx_path, "-o", so] + shapes  # weights built in
        cmd += ["--db", db] if os.path.exists(db) else ["--no-db"]
        t0 = time.time()
        p = subprocess.run(cmd, capture_output=True, text=True)
        info["compile_s"] = time.time() - t0
        log("$ " + " ".join(cmd))
        if p.returncode != 0:
            raise BenchError("kiln compile %s failed (exit %d): %s"
                             % (name, p.returncode, p.stderr.strip()))
        # paths inside the repository are printed relative to it
        info["tuned"] = " ".join((p.stdout + p.stderr).replace(REPO + os.sep, "").split())
        info["planned"] = kiln_planned(so)
        for t in (opt.threads if n is None else [n]):
            bases[t] = {"model": name, "onnx": onnx_path, "so": so, "weights": None,
                        "kiln": opt.kiln, "db_path": db,
                        "torch_cache": os.path.join(opt.out, "torch_cache"),
                        "sizes": transformer_sizes(opt, name) if is_transformer(name) else {}}
            infos[t] = info
    return bases, want, infos, x_path


def start_child(ctx, spec):
    parent, child = ctx.Pipe()
    p = ctx.Process(target=child_main, args=(child, spec), daemon=True)
    if spec["engine"].startswith("torch2"):  # PyTorch 2's python for this child only
        multiprocessing.set_executable(VENV_PY)
    try:
        p.start()
    finally:
        multiprocessing.set_executable(sys.executable)
    child.close()
    return {"spec": spec, "proc": p, "conn": parent, "times": []}


def recv(ch, timeout_s=3600):
    label = "%s (%d thread%s)" % (ch["spec"].get("label", ch["spec"]["engine"]),
                                 ch["spec"]["threads"],
                                 "" if ch["spec"]["threads"] == 1 else "s")
    if not ch["conn"].poll(timeout_s):
        raise BenchError("%s: no answer from its process in %d s" % (label, timeout_s))
    try:
        msg = ch["conn"].recv()
    except EOFError:
        raise BenchError("%s: its process died (exit code %s)"
                         % (label, ch["proc"].exitcode)) from None
    if msg[0] == "error":
        raise BenchError("%s: %s" % (label, msg[1]))
    return msg


def stop_children(children):
    for ch in children:
        try:
            ch["conn"].send(("quit",))
        except OSError:
            pass
    for ch in children:
        ch["proc"].join(10)
        if ch["proc"].is_alive():
            ch["proc"].kill()
            ch["proc"].join()


def bench_model(opt, ctx, name, ort_ok):
    import numpy as np

    bases, want, infos, x_path = prepare_model(opt, name)
    for n in opt.threads:
        log("%s, %d thread%s: %s" % (name, n, "" if n == 1 else "s",
                                     infos[n]["tuned"] or "tuning skipped"))
    engines = [e for e in opt.engines if (e != "ort" or ort_ok)
               and (not e.startswith("torch2") or os.path.exists(VENV_PY))
               and not (is_transformer(name) and e in CNN_ONLY)]
    specs = []
    for n in opt.threads:
        for e in engines:
            spec = dict(bases[n])
            spec.update(engine=e, threads=n, input=x_path, seed=opt.seed, warmup=opt.warmup)
            specs.append(spec)
    children = []
    try:
        # one child builds at a time: setups (tracing, loading) do not disturb each other
        for spec in specs:
            ch = start_child(ctx, spec)
            children.append(ch)
            _, (shape, raw), setup_s = recv(ch)
            y = np.frombuffer(raw, dtype=np.float64).reshape(shape)
            err = rel_error(y, want)
            ch["err"], ch["setup_s"] = err, setup_s
            if not err <= TOL:
                raise BenchError("%s, %s at %d threads: output differs from PyTorch eager: "
                                 "max|got - want| / max|want| = %.3g > %g"
                                 % (name, ch["spec"]["engine"], ch["spec"]["threads"], err, TOL))
        for r in range(opt.rounds):
            for ch in children:
                time.sleep(opt.pause)
                ch["conn"].send(("time", opt.warmup, opt.reps))
                ch["times"].append(statistics.median(recv(ch)[1]))
            log("%s: round %d/%d done" % (name, r + 1, opt.rounds))
        for ch in children:
            ch["conn"].send(("mem",))
            ch["mem"] = recv(ch)[1]
    finally:
        stop_children(children)
    return children, infos


def report(opt, name, children, infos, ort_note):
    print()
    if is_transformer(name) and name != "vit_b_16":
        print("## %s, batch 1, %d tokens, fp32" % (name, opt.seq))
    else:
        print("## %s, batch 1, 3x%dx%d, fp32" % (name, opt.size, opt.size))
    shown = []
    for n in opt.threads:
        info = infos[n]
        if any(info is s for s in shown):
            continue
        shown.append(info)
        who = ("kiln (tuned once for %s threads, %s)" % (",".join(map(str, opt.threads)),
                                                          info["db"]) if opt.tune_once
               else "kiln, %d thread%s (tuned at %d, %s)" % (n, "" if n == 1 else "s", n,
                                                              info["db"]))
        if opt.no_tune:
            print("%s: not tuned in this run (--no-tune), compile %.1f s; %s"
                  % (who, info["compile_s"], info["tuned"] or "default schedules (no database)"))
        else:
            print("%s: tune %.0f s%s (--trials %d%s), compile %.1f s; %s"
                  % (who, info["tune_s"],
                     ", stopped by the time limit" if info["tune_stopped"] else "",
                     opt.trials[name],
                     "; " + info["tune_progress"] if info["tune_progress"] else "",
                     info["compile_s"], info["tuned"]))
        print("kiln planned memory: %s" % info["planned"])
    if ort_note:
        print("ort: skipped: %s" % ort_note)
    print("%-16s %7s %10s %10s %9s %9s %9s" % ("engine", "threads", "median ms", "x kiln",
                                              "peak MB", "setup MB", "rel err"))
    verdicts = []
    for n in opt.threads:
        rows = [ch for ch in children if ch["spec"]["threads"] == n]
        best = {ch["spec"]["engine"]: min(ch["times"]) for ch in rows}
        k = best.get("kiln")
        for ch in rows:
            e, m = ch["spec"]["engine"], ch["mem"]
            t = best[e]
            peak = (m["run_hwm_kb"] - m["base_kb"]) / 1024.0
            setup = (m["setup_hwm_kb"] - m["base_kb"]) / 1024.0
            ratio = "%10.2f" % (t / k) if k else "%10s" % "-"
            print("%-16s %7d %10.2f %s %9.0f %9.0f %9.1e%s"
                  % (e, n, 1e3 * t, ratio, peak, setup, ch["err"],
                     "" if m["reset"] else " (peak not reset: includes setup)"))
        torch_modes = {e: t for e, t in best.items()
                       if e.startswith("torch") and e != "torch2-kiln"}  # that one is kiln
        if k and torch_modes:
            te = min(torch_modes, key=torch_modes.get)
            verdicts.append((name, n, torch_modes[te] / k, te))
    return verdicts


def per_model(fail, flag, text, models, conv, lo):
    """``{model: value}`` from one value or one per model (comma separated)."""
    try:
        vals = [conv(v) for v in text.split(",")]
    except ValueError:
        fail("%s: expected a number or a comma-separated list, got %r" % (flag, text))
    if len(vals) == 1:
        vals = vals * len(models)
    if len(vals) != len(models):
        fail("%s: %d values for %d networks (%s)" % (flag, len(vals), len(models),
                                                    ",".join(models)))
    if any(v < lo for v in vals):
        fail("%s: every value must be at least %g" % (flag, lo))
    return dict(zip(models, vals))


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", default=os.path.join(REPO, "build", "kiln"),
                    help="the kiln binary (default build/kiln)")
    ap.add_argument("--out", default=os.path.join(REPO, "build", "bench_e2e"),
                    help="directory for models, modules, weights and the records database "
                         "(default build/bench_e2e)")
    ap.add_argument("--db", default=None,
                    help="tuning records database (default OUT/kiln.db); each thread count N "
                         "is tuned at N threads into DB with .tN before its extension "
                         "(kiln.t1.db, kiln.t2.db); reusing them resumes or skips the tuning")
    ap.add_argument("--tune-once", action="store_true",
                    help="tune once, at kiln tune's default thread count, into DB itself, "
                         "and time that module at every thread count")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--size", type=int, default=224,
                    help="input height and width of the CNNs and ViT (default 224)")
    ap.add_argument("--seq", type=int, default=128,
                    help="tokens of BERT and GPT-2 (default 128)")
    ap.add_argument("--trials", default="400",
                    help="kiln tune --trials for each network: the total over its tasks, "
                         "records in the database included (default 400); one number for "
                         "all networks or one per network of --models, comma separated")
    ap.add_argument("--tune-minutes", default=None,
                    help="stop each network's tuning after this many minutes (SIGINT); one "
                         "number or one per network, comma separated")
    ap.add_argument("--tune-batch", type=int, default=None,
                    help="kiln tune --batch: programs per round (kiln's default 16)")
    ap.add_argument("--no-tune", action="store_true",
                    help="do not run kiln tune; compile with the records already in the "
                         "database (default schedules where it has none)")
    ap.add_argument("--threads", default="1,2", help="thread counts (default 1,2)")
    ap.add_argument("--engines", default=",".join(ENGINES),
                    help="engines to run (default all: %s)" % ",".join(ENGINES))
    ap.add_argument("--reps", type=int, default=20, help="timed calls per round (default 20)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    ap.add_argument("--warmup", type=int, default=3,
                    help="untimed calls before each round's timed calls (default 3)")
    ap.add_argument("--pause", type=float, default=0.3, help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=0, help="weights and input seed (default 0)")
    opt = ap.parse_args(argv)

    def fail(msg):
        ap.error(msg)

    try:
        opt.threads = [int(t) for t in opt.threads.split(",") if t]
    except ValueError:
        fail("--threads: expected comma-separated integers, got %r" % opt.threads)
    if not opt.threads or any(t < 1 for t in opt.threads):
        fail("--threads: every thread count must be at least 1")
    opt.models = [m for m in opt.models.split(",") if m]
    for m in opt.models:
        if m not in MODELS + TRANSFORMERS:
            fail("--models: unknown network %r; known: %s" % (m, ", ".join(MODELS + TRANSFORMERS)))
    opt.engines = [e for e in opt.engines.split(",") if e]
    for e in opt.engines:
        if e not in ENGINES:
            fail("--engines: unknown engine %r; known: %s" % (e, ", ".join(ENGINES)))
    if "kiln" not in opt.engines:
        fail("--engines must include kiln (the ratios are to kiln)")
    opt.trials = per_model(fail, "--trials", opt.trials, opt.models, int, 1)
    opt.tune_minutes = (per_model(fail, "--tune-minutes", opt.tune_minutes, opt.models, float,
                                  1e-3) if opt.tune_minutes else {})
    for flag, v, lo in (("--size", opt.size, 32), ("--seq", opt.seq, 1), ("--reps", opt.reps, 1),
                        ("--rounds", opt.rounds, 1), ("--warmup", opt.warmup, 0)):
        if v < lo:
            fail("%s must be at least %d, got %d" % (flag, lo, v))
    if opt.tune_batch is not None and opt.tune_batch < 1:
        fail("--tune-batch must be at least 1")
    opt.kiln = os.path.abspath(opt.kiln)
    if not os.access(opt.kiln, os.X_OK):
        fail("--kiln: %s is not an executable (build kiln first: scripts/build.sh build)"
             % opt.kiln)
    opt.out = os.path.abspath(opt.out)
    opt.db = os.path.abspath(opt.db) if opt.db else os.path.join(opt.out, "kiln.db")
    return opt


def main(argv=None):
    opt = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        import numpy  # noqa: F401
        import onnx  # noqa: F401
        import torch
        import torchvision  # noqa: F401
    except ImportError as e:
        print("bench_e2e: %s (use Debian's /usr/bin/python3 with torch, torchvision and onnx)"
              % e, file=sys.stderr)
        return 1
    if not os.environ.get("KILN_LIB"):
        os.environ["KILN_LIB"] = os.path.join(os.path.dirname(opt.kiln), "libkiln.so")
    try:
        os.makedirs(opt.out, exist_ok=True)
    except OSError as e:
        print("bench_e2e: error: cannot create --out %s: %s" % (opt.out, e.strerror),
              file=sys.stderr)
        return 1
    ort_ok, ort_info = ort_status()
    ort_note = None
    if "ort" in opt.engines and not ort_ok:
        ort_note = ort_info
        log("ort: skipped: " + ort_info)
    if any(e.startswith("torch2") for e in opt.engines) and not os.path.exists(VENV_PY):
        log("torch2-inductor, torch2-kiln: skipped: no %s (scripts/setup_torch.sh)" % VENV_PY)
    load = os.getloadavg()
    print("bench_e2e: %s; torch %s (%s); onnxruntime %s; load average %.2f %.2f %.2f"
          % (cpu_model(), torch.__version__, "oneDNN " + str(torch.backends.mkldnn.is_available()),
             ort_info if ort_ok else "skipped", *load))
    print("rounds %d x %d calls (after %d warm-up), median per round, best round; seed %d"
          % (opt.rounds, opt.reps, opt.warmup, opt.seed))
    ctx = multiprocessing.get_context("spawn")
    verdicts = []
    try:
        for name in opt.models:
            children, info = bench_model(opt, ctx, name, ort_ok)
            verdicts += report(opt, name, children, info,
                               ort_note if "ort" in opt.engines else None)
            sys.stdout.flush()
    except BenchError as e:
        print("bench_e2e: error: %s" % e, file=sys.stderr)
        return 1
    print()
    print("load average at the end: %.2f %.2f %.2f" % os.getloadavg())
    met = all(r >= GOAL for _, _, r, _ in verdicts)
    parts = ["%s %dT %.2fx (vs %s)" % (m, n, r, te) for m, n, r, te in verdicts]
    print("goal (kiln >= %.1fx faster than the fastest PyTorch mode, every network and thread "
          "count): %s -- %s" % (GOAL, "MET" if met and verdicts else "NOT MET", "; ".join(parts)))
    return 0


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return "%s, %d cores" % (line.split(":", 1)[1].strip(), os.cpu_count())
    except OSError:
        pass
    return "%d cores" % os.cpu_count()


if __name__ == "__main__":
    sys.exit(main())
