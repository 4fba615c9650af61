#!/usr/bin/env python3
"""python/examples/torch_compile.py -- torch.compile a torchvision model with kiln's backend and
check it against eager PyTorch (python/README.md "torch.compile").

    .venv-torch/bin/python python/examples/torch_compile.py [--model resnet18] [--size 224]
                                                            [--tune 10m] [--cache DIR]

Run it twice: the second process loads the compiled module from the cache and compiles nothing
(compare the time to the first output). Exit status 0 when kiln's output matches eager mode
(max |kiln - eager| / max |eager| <= 1e-4), 1 otherwise.
"""

import argparse
import os
import sys
import time

t_start = time.time()
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402
import torchvision  # noqa: E402

import kiln.torch_backend  # noqa: E402,F401  (registers backend="kiln")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet18", help="a torchvision.models constructor")
    ap.add_argument("--size", type=int, default=224, help="input height and width")
    ap.add_argument("--tune", help="tune for this long first (kiln tune --time), e.g. 10m")
    ap.add_argument("--cache", help="the compiled-module cache (default ~/.cache/kiln/torch)")
    ap.add_argument("--seed", type=int, default=0)
    opt = ap.parse_args()

    torch.manual_seed(opt.seed)
    net = getattr(torchvision.models, opt.model)(weights=None).eval()  # random weights
    options = {k: v for k, v in (("tune", opt.tune), ("cache", opt.cache)) if v}
    fast = torch.compile(net, backend="kiln", options=options)

    x = torch.randn(1, 3, opt.size, opt.size)
    with torch.no_grad():
        got = fast(x)
        first = time.time() - t_start
        want = net(x)
        t = time.time()
        fast(x)
        t_kiln = time.time() - t
        t = time.time()
        net(x)
        t_eager = time.time() - t
    err = float((got - want).abs().max() / want.abs().max())
    print("%s %dx%d: relative error %.2e; time to first output %.1f s (process start to "
          "result); one call: kiln %.1f ms, eager %.1f ms; kiln backend: %s"
          % (opt.model, opt.size, opt.size, err, first, t_kiln * 1e3, t_eager * 1e3,
             kiln.torch_backend.stats))
    if err > 1e-4:
        print("error: kiln's output differs from eager mode")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
