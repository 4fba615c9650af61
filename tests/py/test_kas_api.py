#!/usr/bin/python3
"""tests/py/test_kas_api.py -- the Canvas-style Python API of kernel architecture search:
kiln.Placeholder, kiln.sample, kiln.replace (python/kiln/kas.py).

* Placeholder records its input shape on every forward pass and stands in as the identity
  (K = C), a stride-2 subsampling, or a 3x3 convolution (K != C).
* sample() on a network with placeholders of three shapes (one repeated) returns a Kernel whose
  module runs at every placeholder shape with the right output shape, whose code is the module's
  source, whose kg holds one kernel graph per distinct shape (parsed by libkiln when built, with
  the placeholder's input and output shapes), inside the FLOPs budget, and the same kernel for
  the same seed; n > 1 gives distinct kernels; a stride-2 K != C placeholder set works too.
* replace() swaps every placeholder for an instance of the kernel module (none left, the output
  shape kept) and the replaced network trains: one Adam step, with finite gradients for every
  kernel weight, changes the kernel's weights (some tensor may get an all-zero gradient, behind
  a saturated tanh say, but not all) and leaves a finite loss.
* Errors: no placeholder, a placeholder never reached, replace before any forward pass, a bad
  budget, mixed strides.

    /usr/bin/python3 tests/py/test_kas_api.py --kiln build/kiln [--seed S]

Exit status 0 passed, 1 failed, 77 skipped (no kiln binary).
"""
import argparse
import os
import random
import shutil
import sys

import torch
from torch import nn

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "python"))

from harness import FAILS, check  # noqa: E402  (tests/py/harness.py, beside this file)


def raises(fn, text):
    import kiln
    try:
        fn()
    except kiln.Error as e:
        check(text in str(e), "error %r lacks %r" % (str(e), text))
        return
    check(False, "no kiln.Error (want %r)" % text)


class Net(nn.Module):
    def __init__(self, kiln, stride=1, grow=False):
        super().__init__()
        k = (lambda c: 2 * c) if grow else (lambda c: None)
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.p1 = kiln.Placeholder(k(8), stride)
        c1 = 16 if grow else 8
        self.body = nn.Sequential(nn.ReLU(), nn.Conv2d(c1, 16, 1), kiln.Placeholder(k(16), stride),
                                  nn.ReLU())
        c2 = 32 if grow else 16
        self.p3 = kiln.Placeholder(k(c2), stride)
        c3 = 64 if grow else c2
        self.head = nn.Linear(c3, 10)

    def forward(self, x):
        x = self.body(self.p1(self.stem(x)))
        x = self.p3(x)
        return self.head(x.mean(dim=(2, 3)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", default=os.environ.get("KILN_BIN", "build/kiln"))
    ap.add_argument("--seed", type=int, default=None)
    a = ap.parse_args()
    if not os.path.exists(a.kiln) and not shutil.which(a.kiln):
        print("skip: no kiln binary at %s" % a.kiln)
        return 77
    os.environ["KILN_BIN"] = os.path.abspath(a.kiln)
    import kiln
    seed = a.seed if a.seed is not None else random.randrange(1, 1 << 20)
    print("seed %d (replay with --seed %d)" % (seed, seed))
    torch.manual_seed(seed)
    torch.set_num_threads(1)

    # Placeholder alone
    ph = kiln.Placeholder()
    x = torch.randn(2, 6, 10, 12)
    check(ph.shape is None, "shape before forward")
    check(torch.equal(ph(x), x) and ph.shape == (6, 10, 12), "identity / shape %s" % (ph.shape,))
    check(torch.equal(kiln.Placeholder(stride=2)(x), x[..., ::2, ::2]), "stride-2 identity")
    p = kiln.Placeholder(9, 2)
    check(tuple(p(x).shape) == (2, 9, 5, 6) and p.channels() == (6, 9), "K != C fallback")
    raises(lambda: kiln.Placeholder(stride=3), "stride")

    # sample on a network: three placeholders, shapes (8,8,16,16), (16,16,16,16), (16,16,16,16)
    net = Net(kiln)
    x = torch.randn(4, 3, 16, 16)
    want = net(x).shape
    kern = kiln.sample(net, x, budget={"flops": (0.05, 0.5)}, seed=seed)
    shapes = [(8, 8, 16, 16), (16, 16, 16, 16)]
    check(isinstance(kern, kiln.Kernel), "sample did not return a Kernel")
    check(kern.shapes == shapes, "kernel shapes %s" % kern.shapes)
    check(0.05 <= kern.flops <= 0.5 + 1e-9, "flops %s outside the budget" % kern.flops)
    check("class Kernel" in kern.code and "def forward" in kern.code, "code is not the module")
    check(set(kern.kg) == set(shapes), "kg keys %s" % list(kern.kg))
    for (c, k, h, w) in shapes:
        m = kern.module(c, k)
        check(isinstance(m, nn.Module), "module is not an nn.Module")
        y = m(torch.randn(3, c, h, w))
        check(tuple(y.shape) == (3, k, h, w), "kernel output %s at %s" % (tuple(y.shape),
                                                                           (c, k, h, w)))
        text = kern.kg[(c, k, h, w)]
        check(("f32[1, %d, %d, %d]" % (c, h, w)) in text, "kg lacks the input shape")
        if os.path.exists(os.path.join(os.path.dirname(a.kiln), "libkiln.so")):
            os.environ.setdefault("KILN_LIB", os.path.join(os.path.dirname(a.kiln), "libkiln.so"))
            g = kiln.parse(text)
            check(g.flops > 0, "parsed kg has no FLOPs")
            check([list(v["shape"]) for v in g.args if v["kind"] == "input"] == [[1, c, h, w]],
                  "parsed kg input shape")
    again = kiln.sample(net, x, budget={"flops": (0.05, 0.5)}, seed=seed)
    check(again.hash == kern.hash and again.code == kern.code, "same seed, other kernel")
    many = kiln.sample(net, x, budget=0.6, n=3, seed=seed + 1)
    check(isinstance(many, list) and len({k.hash for k in many}) == 3, "n=3 not distinct")

    # replace + training
    kiln.replace(net, kern)
    left = [n for n, m in net.named_modules() if isinstance(m, kiln.Placeholder)]
    check(not left, "placeholders left: %s" % left)
    layers = [m for m in net.modules() if isinstance(m, kern.module)]
    check(len(layers) == 3, "%d kernel layers, want 3" % len(layers))
    check(net(x).shape == want, "output shape changed")
    kparams = [p for m in layers for p in m.parameters()]
    check(kparams, "the kernel has no parameters")
    before = [p.detach().clone() for p in kparams]
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    target = torch.randint(0, 10, (4,))
    loss0 = nn.functional.cross_entropy(net(x), target)
    opt.zero_grad()
    loss0.backward()
    check(all(p.grad is not None and torch.isfinite(p.grad).all() for p in kparams),
          "kernel gradients missing or non-finite")
    opt.step()
    # a weight may get an all-zero gradient (behind a saturated tanh or a max fold, say)
    changed = sum(not torch.equal(b, p.detach()) for b, p in zip(before, kparams))
    if any(bool(p.grad.abs().max() > 0) for p in kparams):
        check(changed >= 1, "no kernel weight changed (%d tensors)" % len(kparams))
    else:
        # Every kernel gradient is exactly zero: the network can make it so (seed 395538: the
        # kernel subtracts a large per-channel maximum, every value after the first two
        # kernels' ReLUs is negative, so nothing behind them gets a gradient). Train one
        # kernel layer alone instead, against a random target: its weights must move.
        m = kern.module(16, 16)
        ps = list(m.parameters())
        b = [q.detach().clone() for q in ps]
        xi = torch.randn(2, 16, 8, 8)
        o = torch.optim.Adam(ps, lr=1e-3)
        o.zero_grad()
        ((m(xi) - torch.randn(2, 16, 8, 8)) ** 2).mean().backward()
        o.step()
        check(any(not torch.equal(u, q.detach()) for u, q in zip(b, ps)),
              "no weight of the kernel alone changed after a training step")
    loss1 = nn.functional.cross_entropy(net(x), target)
    check(torch.isfinite(loss1), "loss after one step is %g" % float(loss1))

    # stride 2, K = 2C
    net2 = Net(kiln, stride=2, grow=True)
    x2 = torch.randn(2, 3, 16, 16)
    want2 = net2(x2).shape
    k2 = kiln.sample(net2, x2, budget={"flops": 1.0, "params": (0, 1.0)}, seed=seed)
    kiln.replace(net2, k2)
    check(net2(x2).shape == want2, "stride-2 network output changed")
    for (c, k, h, w) in k2.shapes:
        check(tuple(k2.module(c, k)(torch.randn(1, c, h, w)).shape) == (1, k, h // 2, w // 2),
              "stride-2 kernel shape at %s" % ((c, k, h, w),))

    # errors
    raises(lambda: kiln.sample(nn.Sequential(nn.ReLU()), x), "no kiln.Placeholder")
    unreached = Net(kiln)
    unreached.extra = kiln.Placeholder()
    raises(lambda: kiln.sample(unreached, x), "not reached")
    raises(lambda: kiln.replace(Net(kiln), kern), "has seen no input")
    raises(lambda: kiln.sample(Net(kiln), x, budget={"flops": (2, 1)}), "budget")
    raises(lambda: kiln.sample(Net(kiln), x, budget={"latency": 1}), "unknown budget")
    mixed = nn.Sequential(kiln.Placeholder(), kiln.Placeholder(stride=2))
    raises(lambda: kiln.sample(mixed, torch.randn(1, 4, 8, 8)), "same stride")
    print("%d failures" % len(FAILS))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
