#!/usr/bin/env python3
"""scripts/cnn_kg.py -- writes torchvision's ResNet-18 and MobileNetV2 (inference: batch norms
with running statistics, batch 1) as .kg text, for checking whole networks where PyTorch is
absent (scripts/gpu_check.sh runs them on a GPU with `kiln compile --target cuda` and
`kiln run --check`). Python's standard library only.

    python3 scripts/cnn_kg.py OUTDIR [--size HW]     # OUTDIR/resnet18.kg, OUTDIR/mobilenet_v2.kg

Every parameter is a `weight`, so `kiln run` draws it uniformly from [-1, 1) like the input. Raw,
such weights would grow the activations by sqrt(fan_in / 3) a layer (inf after some 20 layers)
or, through batch norms with near-zero variances, blow them up; so each network rescales its
weights in compute definitions before use (computed once, as weight-derived stages): convolution
and classifier weights by sqrt(6 / fan_in) (He initialisation's variance for uniform draws),
batch-norm scales to [0.75, 1.25), variances to [0.75, 1.25), means and shifts to [-0.1, 0.1).
The activations then keep a magnitude of order one through the network, so a comparison with the
reference interpreter checks numbers, not infinities. Same layers, shapes, strides and
groups as torchvision's models (ReLU6 written as min(max(x, 0), 6)).
"""

import argparse
import math
import os
import sys


class Net:
    def __init__(self, name, size):
        self.name = name
        self.decl = []  # weight declarations
        self.body = []  # statements
        self.n = 0
        self.size = size

    def tmp(self, prefix):
        self.n += 1
        return "%s%d" % (prefix, self.n)

    def weight(self, shape, scale, shift=0.0, absolute=False):
        """A weight of shape, used as scale * w (+ shift; |w| first when absolute)."""
        raw = self.tmp("p")
        self.decl.append("weight %s: f32[%s]" % (raw, ", ".join(map(str, shape))))
        idx = ", ".join("i%d" % d for d in range(len(shape)))
        val = "abs(%s[%s])" % (raw, idx) if absolute else "%s[%s]" % (raw, idx)
        used = self.tmp("w")
        expr = "%s * %.9g" % (val, scale)
        if shift:
            expr += " + %.9g" % shift
        self.body.append("%s[%s] = %s" % (used, idx, expr))
        return used

    def conv(self, x, cin, cout, k, stride=1, groups=1, bn=True, act="relu", shape=None):
        fan_in = cin // groups * k * k
        w = self.weight([cout, cin // groups, k, k], math.sqrt(6.0 / fan_in))
        y = self.tmp("c")
        self.body.append("%s = conv2d(%s, %s, stride=%d, padding=%d, groups=%d)"
                         % (y, x, w, stride, k // 2, groups))
        if bn:
            g = self.weight([cout], 0.25, 1.0)
            b = self.weight([cout], 0.1)
            m = self.weight([cout], 0.1)
            v = self.weight([cout], 0.5, 0.75, absolute=True)
            z = self.tmp("b")
            self.body.append("%s = batch_norm(%s, %s, %s, %s, %s, eps=1e-5)" % (z, y, g, b, m, v))
            y = z
        if act == "relu":
            z = self.tmp("r")
            self.body.append("%s = relu(%s)" % (z, y))
            y = z
        elif act == "relu6":
            z = self.tmp("r")
            self.body.append("%s[n, c, h, w] = min(max(%s[n, c, h, w], 0.0), 6.0)" % (z, y))
            y = z
        return y

    def add(self, a, b, relu=False):
        y = self.tmp("s")
        self.body.append("%s = add(%s, %s)" % (y, a, b))
        if relu:
            z = self.tmp("r")
            self.body.append("%s = relu(%s)" % (z, y))
            y = z
        return y

    def head(self, x, cin, classes=1000):
        p = self.tmp("g")
        self.body.append("%s = global_avg_pool2d(%s)" % (p, x))
        f = self.tmp("f")
        self.body.append("%s = flatten(%s, axis=1)" % (f, p))
        w = self.weight([classes, cin], math.sqrt(6.0 / cin))
        b = self.weight([classes], 0.1)
        self.body.append("y = dense(%s, %s, %s)" % (f, w, b))

    def text(self, what):
        lines = ["# %s, batch 1, 3 x %d x %d, written by scripts/cnn_kg.py (weights rescaled: see"
                 % (what, self.size, self.size),
                 "# there). %d weights." % len(self.decl),
                 "input x: f32[1, 3, %d, %d]" % (self.size, self.size)]
        return "\n".join(lines + self.decl + self.body + ["output y", ""])


def resnet18(size):
    net = Net("resnet18", size)
    x = net.conv("x", 3, 64, 7, stride=2)
    p = net.tmp("m")
    net.body.append("%s = max_pool2d(%s, kernel=3, stride=2, padding=1)" % (p, x))
    x, cin = p, 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        for blk in range(2):
            s = stride if blk == 0 else 1
            y = net.conv(x, cin, cout, 3, stride=s)
            y = net.conv(y, cout, cout, 3, act=None)
            short = x
            if s != 1 or cin != cout:
                short = net.conv(x, cin, cout, 1, stride=s, act=None)
            x = net.add(y, short, relu=True)
            cin = cout
    net.head(x, 512)
    return net.text("torchvision's ResNet-18")


def mobilenet_v2(size):
    net = Net("mobilenet_v2", size)
    x = net.conv("x", 3, 32, 3, stride=2, act="relu6")
    cin = 32
    for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                       (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)):
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            y = x
            if t != 1:
                y = net.conv(y, cin, hidden, 1, act="relu6")
            y = net.conv(y, hidden, hidden, 3, stride=stride, groups=hidden, act="relu6")
            y = net.conv(y, hidden, c, 1, act=None)
            if stride == 1 and cin == c:
                y = net.add(x, y)
            x, cin = y, c
    x = net.conv(x, cin, 1280, 1, act="relu6")
    net.head(x, 1280)
    return net.text("torchvision's MobileNetV2")


def main(argv):
    ap = argparse.ArgumentParser(description="writes ResNet-18 and MobileNetV2 as .kg files")
    ap.add_argument("outdir")
    ap.add_argument("--size", type=int, default=224, help="input height and width (224)")
    opt = ap.parse_args(argv)
    if opt.size < 32:
        ap.error("--size must be at least 32 (five stride-2 stages)")
    os.makedirs(opt.outdir, exist_ok=True)
    for name, fn in (("resnet18", resnet18), ("mobilenet_v2", mobilenet_v2)):
        path = os.path.join(opt.outdir, name + ".kg")
        with open(path, "w") as f:
            f.write(fn(opt.size))
        print(path)


if __name__ == "__main__":
    main(sys.argv[1:])
