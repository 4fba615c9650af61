#!/usr/bin/python3
"""tests/py/test_onnx_transformers.py -- transformers through ONNX against PyTorch: a BERT-style
encoder (token, position and segment embeddings, a padding mask), a GPT-2-style decoder (causal
mask, pre-norm), both written with PyTorch's own layers, and torchvision's VisionTransformer
(python/kiln/nets.py).

    /usr/bin/python3 tests/py/test_onnx_transformers.py --kiln BUILD/kiln [--seed S]
                                                        [--layers L] [--hidden H] [--seq S] [FILTER]

Run from the repository root (CTest does). For each model and opset (13, and 17 where PyTorch
writes LayerNormalization): build it with random weights (torch.manual_seed(S)), export it with
symbolic `batch` (and, for token inputs, `seq`) dimensions, so that the export computes shapes at run time (Shape ->
Gather -> Unsqueeze -> Concat -> Reshape, ConstantOfShape, Range, Expand) and kiln must fold
them; `kiln compile MODEL.onnx -o M.so --input-shape batch=1 --input-shape
seq=S` (ViT: batch only); call the module on the int64 token ids (and segments and mask) or
the image and compare with PyTorch:

    max |kiln - torch| / max |torch| <= 1e-4

Small sizes by default (2 layers, width 64, 4 heads, 16 tokens, a vocabulary of 256; ViT on
32x32 images in 8x8 patches): every op of the full models is there, in seconds. Also checks that compiling without --input-shape is an
error naming the symbolic dimension. Exit status 0 when all pass, 1 on a failure, 77 when
PyTorch or ONNX export is unavailable.
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


def run_model(name, opset, kiln_bin, tmp, seed, opt):
    import numpy as np
    import torch

    import kiln
    import kiln.nets

    sizes = dict(layers=opt.layers, hidden=opt.hidden, heads=opt.heads)
    if name == "vit_b_16":
        sizes.update(image=opt.image, patch=opt.patch)
    else:
        sizes.update(seq=opt.seq, vocab=opt.vocab)
    net, inputs, names = kiln.nets.transformer(name, seed, **sizes)
    with torch.no_grad():
        want = net(*inputs).numpy().astype(np.float64)
    tag = "%s_op%d" % (name, opset)
    path = os.path.join(tmp, tag + ".onnx")
    kiln.nets.export_transformer(net, inputs, names, path, opset)
    so = os.path.join(tmp, tag + ".so")
    p = subprocess.run([kiln_bin, "compile", path, "-o", so], capture_output=True, text=True)
    if p.returncode == 0 or "'batch'" not in p.stderr:
        raise AssertionError("compiling without --input-shape: exit %d, %s"
                             % (p.returncode, p.stderr.strip()))
    t0 = time.time()
    shapes = ["--input-shape", "batch=1"]
    if name != "vit_b_16":
        shapes += ["--input-shape", "seq=%d" % opt.seq]
    p = subprocess.run([kiln_bin, "compile", path, "-o", so] + shapes,
                       capture_output=True, text=True)
    t_compile = time.time() - t0
    if p.returncode != 0:
        raise AssertionError("kiln compile %s failed: %s" % (path, p.stderr.strip()))
    mod = kiln.load(so)
    args = kiln.nets.module_args(mod, [x.numpy() for x in inputs])  # weights built in
    got = np.asarray(mod(*args), dtype=np.float64)
    if got.shape != want.shape:
        raise AssertionError("output shape %s, PyTorch's %s" % (got.shape, want.shape))
    rel = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
    print("%-16s max|kiln - torch| / max|torch| = %.3g (limit %g); %d arguments; compile %.2f s"
          % (tag, rel, TOL, len(mod.args), t_compile))
    if not rel <= TOL:
        raise AssertionError("%s: relative error %.3g exceeds %g" % (tag, rel, TOL))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True, help="the kiln binary of the build to test")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--image", type=int, default=32, help="ViT image size (default 32)")
    ap.add_argument("--patch", type=int, default=8, help="ViT patch size (default 8)")
    ap.add_argument("filter", nargs="?", default=None)
    started = harness.start(ap, ['numpy', 'onnx', 'torch'])
    if started is None:
        return 77
    opt, kiln_bin, seed = started
    failed = 0
    with tempfile.TemporaryDirectory(prefix="kiln-tf-") as tmp:
        for name in ("bert_base", "gpt2_small", "vit_b_16"):
            for opset in (13, 17):
                tag = "%s_op%d" % (name, opset)
                if opt.filter and opt.filter not in tag:
                    continue
                try:
                    run_model(name, opset, kiln_bin, tmp, seed, opt)
                except Exception as e:  # noqa: BLE001 - report and go on with the next model
                    print("FAIL %s: %s (replay with --seed %d)" % (tag, e, seed))
                    failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
