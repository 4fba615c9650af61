#!/usr/bin/python3
"""tests/py/test_onnx_nets.py -- whole networks through ONNX: torchvision's ResNet-18 and
MobileNetV2 against PyTorch.

    /usr/bin/python3 tests/py/test_onnx_nets.py --kiln BUILD/kiln [--seed S] [--size HW]
                                                [--keep-bn] [FILTER]

Run from the repository root (CTest does). For each network: build it with random weights
(torch.manual_seed(S); nothing is downloaded), put it in eval mode, export it to ONNX (opset 13,
PyTorch's exporter folds batch norms into the convolutions), `kiln compile MODEL.onnx -o
MODEL.so` (the weights built into the module), load the shared object with the kiln Python
package, call it on a random 1x3xHWxHW input alone and compare
with PyTorch's output on the same input (building, export and argument loading are
python/kiln/nets.py, shared with benchmarks/bench_e2e.py):

    max |kiln - torch| / max |torch| <= 1e-4

--keep-bn exports with the batch norms kept (training=TrainingMode.PRESERVE,
do_constant_folding=False) and checks that `kiln compile`'s graph simplification folds every one
of them (20 in ResNet-18, 52 in MobileNetV2) before comparing.

Input size: 64x64 by default (a full 224x224 ResNet-18 takes seconds per call with the default
schedule; 64x64 exercises every layer, including the stride-2 stages down to 2x2, in a fraction
of a second). Prints each network's relative error, compile and run times. Exit status 0 when
both pass, 1 on a failure, 77 when PyTorch, torchvision or ONNX export is unavailable.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "python"))

import harness  # noqa: E402  (tests/py/harness.py, beside this file)

TOL = 1e-4


def run_net(name, kiln_bin, tmp, seed, size, keep_bn=False):
    import numpy as np
    import torch

    import kiln
    import kiln.nets

    net = kiln.nets.build(name, seed)
    x = torch.randn(1, 3, size, size)
    with torch.no_grad():
        want = net(x).numpy().astype(np.float64)
    path = os.path.join(tmp, name + ".onnx")
    kiln.nets.export(net, x, path, keep_bn=keep_bn)
    so = os.path.join(tmp, name + ".so")
    t0 = time.time()
    p = subprocess.run([kiln_bin, "compile", path, "-o", so],
                       capture_output=True, text=True)
    t_compile = time.time() - t0
    if p.returncode != 0:
        raise AssertionError("kiln compile %s failed: %s" % (path, p.stderr.strip()))
    if keep_bn:
        import onnx

        nbn = sum(n.op_type == "BatchNormalization" for n in onnx.load(path).graph.node)
        want_report = "folded %d batch norm" % nbn
        if nbn == 0 or want_report not in p.stderr:
            raise AssertionError("%d batch norms exported, report: %s" % (nbn, p.stderr.strip()))
        print("%-12s %s" % (name, p.stderr.strip().split("simplify: ")[-1]))
    mod = kiln.load(so)  # the weights are built in: it takes x alone
    if [a.name for a in mod.args] != ["x"] or not mod.embedded:
        raise AssertionError("%s: expected x as the only argument and embedded weights, got "
                             "%s and %d embedded" % (name, [a.name for a in mod.args],
                                                     len(mod.embedded)))
    args = [kiln.aligned(np.ascontiguousarray(x.numpy()))]
    mod(*args)  # warm-up
    t0 = time.time()
    got = mod(*args)
    t_run = time.time() - t0
    got = np.asarray(got, dtype=np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    rel = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
    print("%-12s %dx%d: max|kiln - torch| / max|torch| = %.3g (limit %g); %d weights; "
          "compile %.2f s, run %.1f ms"
          % (name, size, size, rel, TOL, len(mod.embedded), t_compile, 1e3 * t_run))
    if not rel <= TOL:
        raise AssertionError("%s: relative error %.3g exceeds %g" % (name, rel, TOL))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True, help="the kiln binary of the build to test")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--size", type=int, default=64, help="input height and width (default 64)")
    ap.add_argument("--keep-bn", action="store_true",
                    help="export with batch norms kept; kiln must fold them")
    ap.add_argument("filter", nargs="?", default=None)
    started = harness.start(ap, ['numpy', 'onnx', 'torch', 'torchvision'])
    if started is None:
        return 77
    opt, kiln_bin, seed = started
    failed = 0
    with tempfile.TemporaryDirectory(prefix="kiln-onnx-") as tmp:
        for name in ("resnet18", "mobilenet_v2"):
            if opt.filter and opt.filter not in name:
                continue
            try:
                run_net(name, kiln_bin, tmp, seed, opt.size, opt.keep_bn)
            except Exception as e:  # noqa: BLE001 - report and go on with the next network
                print("FAIL %s: %s (replay with --seed %d)" % (name, e, seed))
                failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
