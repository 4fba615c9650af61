#!/usr/bin/python3
"""tests/py/test_onnx_simplify.py -- graph simplification of ONNX models (kiln_graph_simplify,
applied by `kiln compile`) against independent oracles.

    /usr/bin/python3 tests/py/test_onnx_simplify.py --kiln BUILD/kiln [--seed S] [FILTER]

Run from the repository root (CTest does). Two models:

- `bn`: a small PyTorch network with batch norms the exporter keeps
  (training=TrainingMode.PRESERVE on an eval-mode model exports BatchNormalization nodes):
  conv 3x3 with bias + BN + ReLU, depthwise conv without bias + BN, 1x1 conv + BN, flatten,
  Linear + BatchNorm1d, with random weights and random running statistics. Oracle: PyTorch.
- `const`: a model built with onnx.helper holding a constant subgraph (Mul and Transpose of
  initializers), a dead node, an Identity and a same-shape Reshape. Oracle: NumPy.

Each is compiled with `kiln compile MODEL.onnx -o M.so --external-weights --save-weights DIR`
(weights as arguments, so the test sees which remain after simplification), run through the
Python package with the saved weights, and compared: max |kiln - oracle| / max |oracle| <= 1e-4.
The report line on stderr must show the folds (4 batch norms for `bn`; a dead statement and
identities for `const`, whose constant subgraph the import has already folded, so the report
counts no constant), and the module must have fewer arguments than the model has initializers
where weights were folded away. Exit status 0 pass, 1 failure, 77 when
NumPy, PyTorch or ONNX is missing.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "python"))

import harness  # noqa: E402  (tests/py/harness.py, beside this file)

TOL = 1e-4


def compile_and_run(kiln_bin, tmp, name, path, inputs, extra=()):
    """Compiles path, runs it on inputs (name -> array), returns (outputs, report, module)."""
    import numpy as np

    import kiln

    so = os.path.join(tmp, name + ".so")
    wdir = os.path.join(tmp, name + "_w")
    # --external-weights: the module takes the weights, so the test sees which remain
    p = subprocess.run([kiln_bin, "compile", path, "-o", so, "--external-weights",
                        "--save-weights", wdir, *extra],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise AssertionError("kiln compile %s failed: %s" % (path, p.stderr.strip()))
    report = "\n".join(line for line in p.stderr.splitlines() if "simplify:" in line)
    mod = kiln.load(so)
    args = []
    for a in mod.args:
        if a.role == "input":
            args.append(kiln.aligned(inputs[a.name].astype(np.float32)))
        else:
            w = np.load(os.path.join(wdir, a.name + ".npy")).astype(np.float32)
            assert list(w.shape) == list(a.shape), (a.name, w.shape, a.shape)
            args.append(kiln.aligned(w))
    got = mod(*args)
    return np.asarray(got, dtype=np.float64), report, mod


def check(name, got, want):
    import numpy as np

    assert got.shape == want.shape, (name, got.shape, want.shape)
    rel = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
    print("%-6s max|kiln - oracle| / max|oracle| = %.3g (limit %g)" % (name, rel, TOL))
    if not rel <= TOL:
        raise AssertionError("%s: relative error %.3g exceeds %g" % (name, rel, TOL))


def counts(report):
    m = re.search(r"folded (\d+) batch norms?, (\d+) bias adds? and (\d+) constants? "
                  r"\((\d+) statements?\), removed (\d+) dead and (\d+) identity", report)
    if not m:
        raise AssertionError("no simplify report in: %r" % report)
    return [int(v) for v in m.groups()]


def test_bn(kiln_bin, tmp, seed):
    import numpy as np
    import onnx
    import torch

    nn = torch.nn
    torch.manual_seed(seed)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.f = nn.Sequential(
                nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False), nn.BatchNorm2d(8),
                nn.Conv2d(8, 6, 1), nn.BatchNorm2d(6, eps=1e-3))
            self.fc = nn.Linear(6 * 5 * 5, 10)
            self.bn = nn.BatchNorm1d(10)

        def forward(self, x):
            return self.bn(self.fc(torch.flatten(self.f(x), 1)))

    net = Net()
    for m in net.modules():  # statistics and affine parameters far from the defaults
        if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
            m.running_mean.uniform_(-1, 1)
            m.running_var.uniform_(0.5, 2)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-1, 1)
    net.eval()
    x = torch.randn(2, 3, 5, 5)
    with torch.no_grad():
        want = net(x).numpy().astype(np.float64)
    path = os.path.join(tmp, "bn.onnx")
    torch.onnx.export(net, x, path, opset_version=13, input_names=["x"], output_names=["y"],
                      training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False)
    nbn = sum(n.op_type == "BatchNormalization" for n in onnx.load(path).graph.node)
    assert nbn == 4, "the exporter kept %d batch norms, expected 4" % nbn
    got, report, mod = compile_and_run(kiln_bin, tmp, "bn", path, {"x": x.numpy()})
    check("bn", got, want)
    bn, adds, _, _, _, _ = counts(report)
    assert bn == 4, "expected 4 batch norms folded: %s" % report
    assert adds == 1, "expected the Linear's bias add folded: %s" % report
    # without simplification the batch norms stay: 16 batch-norm parameters are arguments
    got2, report2, mod2 = compile_and_run(kiln_bin, tmp, "bn_plain", path, {"x": x.numpy()},
                                          ["--no-simplify"])
    check("bn_raw", got2, want)
    assert report2 == "", "--no-simplify printed a report: %s" % report2
    assert len(mod.args) < len(mod2.args), (len(mod.args), len(mod2.args))


def test_const(kiln_bin, tmp, seed):
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, (4, 3)).astype(np.float32)
    b = rng.uniform(-1, 1, (4, 3)).astype(np.float32)
    c = rng.uniform(-1, 1, (3,)).astype(np.float32)
    x = rng.uniform(-1, 1, (2, 3, 4)).astype(np.float32)
    nodes = [
        helper.make_node("Mul", ["a", "b"], ["ab"]),             # constant
        helper.make_node("Transpose", ["ab"], ["abt"], perm=[1, 0]),  # constant [3, 4]
        helper.make_node("Add", ["x", "abt"], ["t"]),
        helper.make_node("Neg", ["t"], ["dead"]),                # read by nothing
        helper.make_node("Identity", ["t"], ["i"]),
        helper.make_node("Reshape", ["i", "shape"], ["r"]),      # to the same shape
        helper.make_node("Mul", ["r", "c"], ["m"]),
        helper.make_node("Relu", ["m"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "const",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4])],
        [numpy_helper.from_array(a, "a"), numpy_helper.from_array(b, "b"),
         numpy_helper.from_array(c.reshape(3, 1), "c"),
         numpy_helper.from_array(np.array([2, 3, 4], dtype=np.int64), "shape")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    path = os.path.join(tmp, "const.onnx")
    onnx.save(model, path)
    want = np.maximum((x.astype(np.float64) + (a.astype(np.float64) * b).T)
                      * c.reshape(3, 1), 0)
    got, report, mod = compile_and_run(kiln_bin, tmp, "const", path, {"x": x})
    check("const", got, want)
    _, _, consts, folded, dead, ident = counts(report)
    # the Mul and Transpose of initializers are folded while importing (frontend/README.md),
    # before the simplifier sees the graph: one weight ab^T instead of a and b
    assert consts == 0 and folded == 0, "the import should have folded them: %s" % report
    assert dead >= 1, "expected the dead Neg removed: %s" % report
    assert ident >= 1, "expected an identity removed: %s" % report
    weights = [a_.name for a_ in mod.args if a_.role == "weight"]
    assert len(weights) == 2, "expected 2 weights (folded ab^T, c), got %s" % weights


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True, help="the kiln binary of the build to test")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("filter", nargs="?", default=None)
    started = harness.start(ap, ['numpy', 'onnx', 'torch'])
    if started is None:
        return 77
    opt, kiln_bin, seed = started
    failed = 0
    with tempfile.TemporaryDirectory(prefix="kiln-simplify-") as tmp:
        for name, fn in (("bn", test_bn), ("const", test_const)):
            if opt.filter and opt.filter not in name:
                continue
            try:
                fn(kiln_bin, tmp, seed)
            except Exception as e:  # noqa: BLE001 - report and go on
                print("FAIL %s: %s (replay with --seed %d)" % (name, e, seed))
                failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
