#!/usr/bin/python3
"""tests/py/test_kas_emit.py -- kernels sampled by `kiln sample` compute the same function as
PyTorch modules (kNNNN.py) and as kiln kernel graphs (kNNNN_pJ.kg).

For every sampled kernel and every placeholder J, `kiln eval kNNNN_pJ.kg --seed S --out D
--save-inputs` evaluates the graph with the reference interpreter on random input and weights
and saves them; the emitted module is imported, built with the placeholder's C and K, given the
same weights (matched by name, w<node>) and run on the same input in float64; outputs must
agree. For the first kernels of each batch the graph is also compiled (`kiln compile`) and the
shared object called through the Python package (python/kiln) on float32 data, against the
module in float32.

    /usr/bin/python3 tests/py/test_kas_emit.py --kiln build/kiln [--seed S] [-n N] [-v]

The seed is printed first; exit status 0 all passed, 1 a failure, 77 when the kiln binary is
missing.
"""
import argparse
import importlib.util
import os
import random
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "python"))

# (placeholders, stride, extra flags): K = C and K != C, stride 1 and 2, wide budgets so every
# kind of primitive shows up
CONFIGS = [
    (["8,12,8,8", "16,24,6,6"], 1, ["--flops", "0:4", "--params", "0:4"]),
    (["8,8,8,8", "12,12,4,4"], 2, ["--flops", "0:4", "--params", "0:4", "--batch", "2"]),
    (["16,16,6,6"], 1, ["--max-ops", "12", "--flops", "0:8", "--params", "0:8"]),
]


def load_module(path):
    spec = importlib.util.spec_from_file_location("kas_kernel_%d" % random.getrandbits(32), path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise AssertionError("%s failed (%d):\n%s%s" % (" ".join(cmd), r.returncode, r.stdout,
                                                        r.stderr))
    return r.stdout


NONFINITE = "non-finite elements differ"


def close(got, want, rtol):
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        return "shape %s, want %s" % (got.shape, want.shape)
    fin = np.isfinite(want)
    if not np.array_equal(fin, np.isfinite(got)):
        return NONFINITE
    scale = max(1.0, float(np.abs(want[fin]).max())) if fin.any() else 1.0
    err = float(np.abs(got[fin] - want[fin]).max()) if fin.any() else 0.0
    if err > rtol * scale:
        return "max abs error %.3g (scale %.3g)" % (err, scale)
    return None


def check_config(kiln, tmp, ci, cfg, seed, n, verbose, stats):
    phs, stride, extra = cfg
    out = os.path.join(tmp, "c%d" % ci)
    cmd = [kiln, "sample", "-n", str(n), "--seed", str(seed), "--stride", str(stride),
           "--out", out] + extra
    for p in phs:
        cmd += ["-p", p]
    listing = run(cmd).splitlines()
    assert len(listing) == n, "kiln sample listed %d kernels, want %d" % (len(listing), n)
    batch = int(extra[extra.index("--batch") + 1]) if "--batch" in extra else 1
    failures = 0
    for k in range(1, n + 1):
        py = os.path.join(out, "k%04d.py" % k)
        mod = load_module(py)
        for j, p in enumerate(phs, 1):
            v = [int(t) for t in p.split(",")]
            C, K, H, W = v if len(v) == 4 else (v[0], v[0], v[1], v[2])
            kg = os.path.join(out, "k%04d_p%d.kg" % (k, j))
            ev = os.path.join(tmp, "ev_%d_%d_%d" % (ci, k, j))
            run([kiln, "eval", kg, "--seed", str(seed + k), "--out", ev, "--save-inputs"])
            net = mod.Kernel(C, K).double()
            state = {name: torch.from_numpy(np.load(os.path.join(ev, name + ".npy")))
                     for name, _ in net.named_parameters()}
            net.load_state_dict(state)
            x = torch.from_numpy(np.load(os.path.join(ev, "x.npy")))
            assert x.shape == (batch, C, H, W), "input shape %s" % (tuple(x.shape),)
            with torch.no_grad():
                y = net(x).numpy()
            want = np.load(os.path.join(ev, "y.npy"))
            # the interpreter stores f32 tensors rounded to f32; the module runs in float64
            msg = close(y, want, 1e-4)
            if msg == NONFINITE:
                # a value past f32's range is inf in the interpreter (and inf - inf NaN after
                # it) but finite in float64: compare with the module in float32, whose
                # intermediates overflow alike
                with torch.no_grad():
                    y32 = net.float()(x.float()).numpy()
                net.double()
                msg = close(y32, want, 1e-3)
                if msg:
                    msg = "in float32 too (non-finite in float64): " + msg
            stats["interp"] += 1
            if msg:
                failures += 1
                print("FAIL config %d kernel %d placeholder %d: %s\n  %s" % (
                    ci, k, j, msg, listing[k - 1]))
            elif verbose:
                print("ok   config %d %s" % (ci, listing[k - 1]))
            if k <= 3 and j == 1:
                failures += check_compiled(kiln, tmp, kg, net, ev, listing[k - 1], stats)
    return failures


def check_compiled(kiln, tmp, kg, net, ev, line, stats):
    try:
        import kiln as kpy
    except ImportError as e:  # pragma: no cover
        print("skip compiled check: %s" % e)
        return 0
    so = kg[:-3] + ".so"
    run([kiln, "compile", kg, "-o", so])
    m = kpy.load(so)
    args = []
    for a in m.args:
        arr = np.load(os.path.join(ev, a.name + ".npy")).astype(np.float32)
        args.append(kpy.aligned(np.ascontiguousarray(arr)))
    got = m(*args)
    net32 = net.float()
    with torch.no_grad():
        x = torch.from_numpy(args[0])
        want = net32(x).numpy()
    net.double()
    stats["compiled"] += 1
    msg = close(got, want, 1e-3)
    if msg:
        print("FAIL compiled %s: %s\n  %s" % (os.path.basename(kg), msg, line))
        return 1
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", default=os.environ.get("KILN_BIN", "build/kiln"))
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("-n", type=int, default=None, help="kernels per configuration")
    ap.add_argument("-v", action="store_true")
    a = ap.parse_args()
    if not shutil.which(a.kiln) and not os.path.exists(a.kiln):
        print("skip: no kiln binary at %s" % a.kiln)
        return 77
    seed = a.seed if a.seed is not None else random.randrange(1 << 30)
    n = a.n or max(4, int(os.environ.get("KILN_ITERS", "15")))
    print("seed %d (replay with --seed %d)" % (seed, seed))
    torch.set_default_dtype(torch.float64)
    stats = {"interp": 0, "compiled": 0}
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for ci, cfg in enumerate(CONFIGS):
            try:
                failures += check_config(a.kiln, tmp, ci, cfg, seed, n, a.v, stats)
            except AssertionError as e:
                failures += 1
                print("FAIL config %d: %s" % (ci, e))
    print("%d kernel/placeholder pairs against the interpreter, %d compiled; %d failures" % (
        stats["interp"], stats["compiled"], failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
