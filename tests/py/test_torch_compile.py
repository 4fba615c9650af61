#!/usr/bin/python3
"""tests/py/test_torch_compile.py -- torch.compile(model, backend="kiln") on PyTorch 2
(python/kiln/torch_backend.py) against eager PyTorch.

    /usr/bin/python3 tests/py/test_torch_compile.py --kiln BUILD/kiln [--seed S] [FILTER]

Runs in the PyTorch 2 virtual environment .venv-torch/ (scripts/setup_torch.sh; or the one
$KILN_TORCH_VENV names): started with another Python, it re-runs itself with that venv's python,
and skips (exit 77) when it does not exist. Each model has random weights and a fresh random
input drawn after torch.manual_seed(S); the check is max |kiln - eager| / max |eager| <= 1e-4:

- cnn: a small CNN (convolutions, batch norm, ReLU, pooling, a linear layer), called twice
  with different inputs; the linear layer's weight, which kiln keeps as it is, is bound as the
  parameter tensor itself (no copy);
- resnet18: torchvision's ResNet-18 at 64x64;
- encoder: nn.TransformerEncoderLayer (PyTorch's fused inference kernel under no_grad);
- graph_break: a CNN, a graph break, then torch.fft.rfft, which kiln cannot import: the
  result is right, the first graph is compiled by kiln, the second is left to PyTorch and its
  reason is logged once, whatever the number of calls; gradients on: left to PyTorch;
- cache: a second process compiling the CNN with the same cache directory loads the entry and
  compiles nothing (its backend counts no compile, and the kiln command it is given does not
  exist); the time to the first output of both processes is printed;
- stale: a cache entry that says it was built for another ABI version, and one whose module
  was built for another target than the entry says (kiln compile --target "llvm -mcpu=x86-64"),
  are rebuilt, not loaded, and the rebuilt entry is then loaded;
- tune: options={"tune": "3s", "db": DB} on a convolution tunes it (records in DB) and the
  module compiled with them matches;
- example: python/examples/torch_compile.py on torchvision's MobileNetV2 at 64x64 passes;
- options: an unknown option is an error naming it.
"""

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV = os.environ.get("KILN_TORCH_VENV") or os.path.join(REPO, ".venv-torch")
VENV_PY = os.path.join(VENV, "bin", "python")

if os.path.realpath(sys.prefix) != os.path.realpath(VENV):
    if not os.path.exists(VENV_PY):
        print("skip: no PyTorch 2 virtual environment (%s): run scripts/setup_torch.sh" % VENV)
        sys.exit(77)
    os.execv(VENV_PY, [VENV_PY, os.path.abspath(__file__)] + sys.argv[1:])

sys.path.insert(0, os.path.join(REPO, "python"))
import harness  # noqa: E402  (tests/py/harness.py, beside this file)

TOL = 1e-4


def rel_err(got, want):
    return float((got - want).abs().max() / want.abs().max().clamp_min(1e-30))


def small_cnn():
    import torch
    from torch import nn

    class CNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = nn.Conv2d(3, 16, 3, padding=1)
            self.bn = nn.BatchNorm2d(16)
            self.c2 = nn.Conv2d(16, 32, 3, stride=2, padding=1)
            self.fc = nn.Linear(32, 10)

        def forward(self, x):
            x = torch.relu(self.bn(self.c1(x)))
            x = torch.nn.functional.max_pool2d(torch.relu(self.c2(x)), 2)
            return self.fc(x.mean((2, 3)))

    net = CNN().eval()
    with torch.no_grad():  # batch-norm statistics that are not the identity
        net.bn.running_mean.uniform_(-0.5, 0.5)
        net.bn.running_var.uniform_(0.5, 2.0)
    return net


def compare(name, net, inputs, opts, calls=1):
    """Compiles ``net`` with the kiln backend, checks ``calls`` calls on fresh inputs made by
    ``inputs()``; returns the compiled model."""
    import torch

    fast = torch.compile(net, backend="kiln", options=opts)
    for i in range(calls):
        xs = inputs()
        with torch.no_grad():
            want = net(*xs)
            got = fast(*xs)
        err = rel_err(got, want)
        print("%s call %d: relative error %.2e" % (name, i, err))
        harness.check(got.shape == want.shape and err <= TOL,
                      "%s call %d: error %.2e (shape %s, eager %s)"
                      % (name, i, err, tuple(got.shape), tuple(want.shape)))
    return fast


def child(opt):
    """The cache test's second process: compile the seeded CNN with the given cache, print the
    backend's counts, the error and the time to the first output as JSON."""
    t0 = time.time()
    import torch

    import kiln.torch_backend as kb

    torch.manual_seed(opt.seed)
    net = small_cnn()
    x = torch.randn(2, 3, 32, 32)
    fast = torch.compile(net, backend="kiln", options={"cache": opt.child, "kiln": opt.kiln})
    with torch.no_grad():
        got = fast(x)
        first = time.time() - t0
        want = net(x)
    print(json.dumps(dict(kb.stats, err=rel_err(got, want), first=first)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--child", help=argparse.SUPPRESS)  # the cache test's second process
    ap.add_argument("filter", nargs="?", default="")
    started = harness.start(ap, ["torch", "torchvision", "onnx"])
    if started is None:
        return 77
    opt, kiln_bin, seed = started
    if opt.child:
        opt.kiln = kiln_bin
        child(opt)
        return 0
    import torch

    import kiln.torch_backend as kb
    from kiln import nets

    logging.basicConfig(level=logging.WARNING)
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    logging.getLogger("kiln.torch").addHandler(Keep())
    cache = tempfile.mkdtemp(prefix="kiln-torch-test-")
    opts = {"cache": cache, "kiln": kiln_bin}
    want = opt.filter

    try:
        if want in "cnn":
            torch.manual_seed(seed)
            net = small_cnn()
            before = dict(kb.stats)
            compare("cnn", net, lambda: (torch.randn(2, 3, 32, 32),), opts, calls=2)
            harness.check(kb.stats["compiled"] == before["compiled"] + 1
                          and kb.stats["fallbacks"] == before["fallbacks"],
                          "cnn: expected one graph compiled by kiln, stats %s" % kb.stats)
            bound = [v for c in kb.live() for kind, v, a in c.args if kind == "weight"]
            harness.check(any(v.data_ptr() == net.fc.weight.data_ptr() for v in bound),
                          "cnn: fc.weight is not passed to kiln as the parameter itself")

        if want in "resnet18":
            net = nets.build("resnet18", seed)
            torch.manual_seed(seed)
            compare("resnet18", net, lambda: (torch.randn(1, 3, 64, 64),), opts)

        if want in "encoder":
            torch.manual_seed(seed)
            net = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0,
                                                   batch_first=True).eval()
            compare("encoder", net, lambda: (torch.randn(2, 16, 64),), opts)

        if want in "graph_break":
            torch.manual_seed(seed)
            cnn = small_cnn()

            class Broken(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.cnn = cnn

                def forward(self, x):
                    y = self.cnn(x)
                    torch._dynamo.graph_break()
                    return torch.fft.rfft(y * 2.0).abs()

            net = Broken().eval()
            before, n0 = dict(kb.stats), len(records)
            compare("graph_break", net, lambda: (torch.randn(2, 3, 32, 32),), opts, calls=3)
            got = [r for r in records[n0:] if "left to PyTorch" in r]
            print("graph_break: %s; logged: %s" % (kb.stats, got))
            harness.check(kb.stats["compiled"] + kb.stats["hits"]
                          > before["compiled"] + before["hits"],
                          "graph_break: the CNN graph was not compiled by kiln")
            harness.check(kb.stats["fallbacks"] > before["fallbacks"],
                          "graph_break: no graph was left to PyTorch")
            harness.check(len(got) == 1, "graph_break: expected the reason logged once, got %s"
                          % got)
            # training: gradients on, the graph is left to PyTorch and gradients flow
            torch._dynamo.reset()
            net2 = small_cnn().train()
            fast = torch.compile(net2, backend="kiln", options=opts)
            x = torch.randn(2, 3, 32, 32)
            fb = kb.stats["fallbacks"]
            fast(x).sum().backward()
            harness.check(kb.stats["fallbacks"] > fb and net2.fc.weight.grad is not None,
                          "graph_break: a training graph was not left to PyTorch")

        if want in "cache":
            cdir = tempfile.mkdtemp(prefix="kiln-torch-cache-")
            runs = []
            for i in range(2):
                # the second process gets a kiln command that does not exist: a compile fails
                env = dict(os.environ, KILN_BIN="/nonexistent/kiln") if i else dict(os.environ)
                r = subprocess.run([sys.executable, os.path.abspath(__file__), "--kiln",
                                    kiln_bin if i == 0 else "/nonexistent/kiln", "--seed",
                                    str(seed), "--child", cdir], stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, env=env)
                line = [x for x in r.stdout.splitlines() if x.startswith("{")]
                if not harness.check(r.returncode == 0 and line,
                                     "cache: process %d failed:\n%s" % (i, r.stdout)):
                    break
                runs.append(json.loads(line[-1]))
                print("cache: process %d: %s" % (i, runs[-1]))
            if len(runs) == 2:
                a, b = runs
                harness.check(a["compiled"] == 1 and a["hits"] == 0,
                              "cache: the first process did not compile: %s" % a)
                harness.check(b["compiled"] == 0 and b["hits"] == 1 and b["fallbacks"] == 0,
                              "cache: the second process did not load the entry: %s" % b)
                harness.check(a["err"] <= TOL and b["err"] <= TOL,
                              "cache: error %.2e / %.2e" % (a["err"], b["err"]))
                print("cache: time to first output %.2f s compiling, %.2f s from the cache"
                      % (a["first"], b["first"]))
            shutil.rmtree(cdir, ignore_errors=True)

        if want in "stale":
            sdir = tempfile.mkdtemp(prefix="kiln-torch-stale-")
            sopts = {"cache": sdir, "kiln": kiln_bin, "keep_onnx": True}
            torch.manual_seed(seed)
            net = small_cnn()
            mk = lambda: (torch.randn(2, 3, 32, 32),)  # noqa: E731
            torch._dynamo.reset()
            compare("stale (build)", net, mk, sopts)
            (entry,) = [os.path.join(sdir, e) for e in os.listdir(sdir)]
            with open(os.path.join(entry, "entry.json")) as f:
                info = json.load(f)
            # 1: the entry says another ABI version
            with open(os.path.join(entry, "entry.json"), "w") as f:
                json.dump(dict(info, abi_version=info["abi_version"] + 1), f)
            before = dict(kb.stats)
            torch._dynamo.reset()
            compare("stale (abi)", net, mk, sopts)
            harness.check(kb.stats["rebuilt"] == before["rebuilt"] + 1
                          and kb.stats["compiled"] == before["compiled"] + 1,
                          "stale: an entry of another ABI version was not rebuilt: %s" % kb.stats)
            # 2: the entry's module was built for another target
            with open(os.path.join(entry, "entry.json")) as f:
                info = json.load(f)
            r = subprocess.run([kiln_bin, "compile", os.path.join(entry, "model.onnx"), "-o",
                                os.path.join(entry, "other.so"), "--no-db", "--target",
                                "llvm -mcpu=x86-64"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            harness.check(r.returncode == 0, "stale: kiln compile --target failed: " + r.stdout)
            with open(os.path.join(entry, "entry.json"), "w") as f:
                json.dump(dict(info, module="other.so"), f)
            before = dict(kb.stats)
            torch._dynamo.reset()
            compare("stale (target)", net, mk, sopts)
            harness.check(kb.stats["rebuilt"] == before["rebuilt"] + 1
                          and kb.stats["compiled"] == before["compiled"] + 1,
                          "stale: a module of another target was not rebuilt: %s" % kb.stats)
            import kiln
            with open(os.path.join(entry, "entry.json")) as f:
                m = kiln.load(os.path.join(entry, json.load(f)["module"]))
            harness.check(m.metadata["target"] == info["module_target"],
                          "stale: the rebuilt module is for %r" % m.metadata["target"])
            # a valid entry is loaded
            before = dict(kb.stats)
            torch._dynamo.reset()
            compare("stale (valid)", net, mk, sopts)
            harness.check(kb.stats["hits"] == before["hits"] + 1
                          and kb.stats["compiled"] == before["compiled"],
                          "stale: the rebuilt entry was not loaded: %s" % kb.stats)
            shutil.rmtree(sdir, ignore_errors=True)

        if want in "tune":
            import sqlite3

            tdir = tempfile.mkdtemp(prefix="kiln-torch-tune-")
            db = os.path.join(tdir, "records.db")
            torch.manual_seed(seed)
            net = torch.nn.Sequential(torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU()).eval()
            torch._dynamo.reset()
            before = dict(kb.stats)
            compare("tune", net, lambda: (torch.randn(1, 8, 16, 16),),
                    {"cache": tdir, "kiln": kiln_bin, "tune": "3s", "db": db})
            n = 0
            if os.path.exists(db):
                n = sqlite3.connect(db).execute("select count(*) from records").fetchone()[0]
            print("tune: %d records in %s" % (n, db))
            harness.check(n > 0 and kb.stats["compiled"] == before["compiled"] + 1,
                          "tune: no records measured (%d) or not compiled: %s" % (n, kb.stats))
            shutil.rmtree(tdir, ignore_errors=True)

        if want in "example":
            edir = tempfile.mkdtemp(prefix="kiln-torch-example-")
            r = subprocess.run([sys.executable, os.path.join(REPO, "python", "examples",
                                                             "torch_compile.py"),
                                "--model", "mobilenet_v2", "--size", "64", "--cache", edir,
                                "--seed", str(seed)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=dict(os.environ, KILN_BIN=kiln_bin))
            out = [x for x in r.stdout.splitlines() if "relative error" in x]
            print("example: " + (out[-1] if out else r.stdout[-2000:]))
            harness.check(r.returncode == 0 and out and "'compiled': 1" in out[-1],
                          "example: python/examples/torch_compile.py failed (exit %d)"
                          % r.returncode)
            shutil.rmtree(edir, ignore_errors=True)

        if want in "options":
            torch._dynamo.reset()
            fast = torch.compile(small_cnn(), backend="kiln", options={"tunes": "1m"})
            try:
                with torch.no_grad():
                    fast(torch.randn(1, 3, 8, 8))
                harness.check(False, "options: an unknown option was accepted")
            except Exception as e:  # Dynamo wraps the backend's error
                harness.check("unknown option tunes" in str(e),
                              "options: the error does not name the option: %s" % e)
    finally:
        shutil.rmtree(cache, ignore_errors=True)

    if harness.FAILS:
        print("%d check(s) failed" % len(harness.FAILS))
        return 1
    print("all torch.compile checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
