#!/usr/bin/env python3
"""tests/py/test_ops.py -- every op of the library, evaluated by kiln's reference interpreter
through `kiln eval`, compared with an independent implementation: NumPy for elementwise,
linear-algebra and data-movement ops, PyTorch's functional ops for convolutions, pooling,
unfold, softmax, the norms and the activations; the matrix form (Bᵀ·d·B, Aᵀ·M·A) for the
Winograd transforms.

Each case draws random shapes and attributes, writes a one-call .kg file and its arguments as
NAME.npy (float64, or float32 for some cases), runs

    kiln eval FILE.kg --inputs DIR --out OUTDIR

and compares OUTDIR/y.npy with the oracle computed in float64 (from the same, possibly
float32-rounded, inputs). The interpreter works in double, so float64 cases must agree to
about 1e-9; float32 cases get 1e-4 (a float32 implementation may round intermediates).

    /usr/bin/python3 tests/py/test_ops.py --kiln build/kiln [--seed S] [--cases N] [-k OP] [-v]

A fresh seed is used each run unless --seed is given; it is printed first and with every
failure, so `--seed S -k OP` replays one op's cases. Exit status: 0 all passed, 1 a failure,
77 when the kiln binary is missing.
"""
import argparse
import concurrent.futures
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np
import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)
warnings.filterwarnings("ignore", category=UserWarning)  # PyTorch notes on padding="same"


# ---- cases ----------------------------------------------------------------------------------

KG_DTYPES = {"float32": "f32", "float64": "f64", "int8": "i8", "int32": "i32", "int64": "i64",
             "bool": "bool",
             "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64", "int16": "i16"}


class Case:
    """One library call: arguments (name -> array), the call text and the expected output."""

    def __init__(self, op, args, call, want, weights=()):
        self.op = op
        self.args = args
        self.call = call
        self.want = np.asarray(want, dtype=np.float64)
        self.weights = set(weights)

    def kg(self):
        lines = []
        for name, a in self.args.items():
            kind = "weight" if name in self.weights else "input"
            dt = KG_DTYPES.get(a.dtype.name, "f64")
            lines.append(f"{kind} {name}: {dt}[{', '.join(str(d) for d in a.shape)}]")
        lines.append(f"y = {self.call}")
        lines.append("output y")
        return "\n".join(lines) + "\n"

    def is_f32(self):
        return any(a.dtype == np.float32 for a in self.args.values())


def fmt(v):
    """An attribute value in .kg syntax."""
    if isinstance(v, str):
        return '"' + v + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(str(int(x)) for x in v) + "]"
    if isinstance(v, float):
        if np.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    return str(int(v))


def call(op, names, **attrs):
    parts = list(names) + [f"{k}={fmt(v)}" for k, v in attrs.items() if v is not None]
    return f"{op}({', '.join(parts)})"


class Gen:
    """Random draws for one case; f32 decides the dtype of its arguments."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.f32 = self.rng.random() < 0.25

    def int(self, lo, hi):  # inclusive
        return int(self.rng.integers(lo, hi + 1))

    def pick(self, seq):
        return seq[self.int(0, len(seq) - 1)]

    def coin(self, p=0.5):
        return bool(self.rng.random() < p)

    def shape(self, rank, lo=1, hi=5):
        return tuple(self.int(lo, hi) for _ in range(rank))

    def arr(self, shape, lo=None, hi=None, scale=1.0, shift=0.0):
        """Normal (or uniform in [lo, hi)) values times scale plus shift, as an ndarray of
        the case's dtype (also for shape ())."""
        if lo is None:
            a = self.rng.standard_normal(shape)
        else:
            a = self.rng.uniform(lo, hi, shape)
        a = np.asarray(a, dtype=np.float64) * scale + shift
        if self.f32:
            a = a.astype(np.float32)
        return a


def t(a):
    """float64 torch tensor of an argument (float32 arguments are widened exactly)."""
    return torch.from_numpy(np.asarray(a, dtype=np.float64))


def f64(a):
    return np.asarray(a, dtype=np.float64)


def channels_last(g, case):
    """Half the time, the same case with layout="nhwc": x given and y expected as [N, H, W, C]
    (the oracle's NCHW result transposed; weights keep their layout)."""
    if not g.coin():
        return case
    case.args["x"] = np.ascontiguousarray(case.args["x"].transpose(0, 2, 3, 1))
    case.want = np.ascontiguousarray(case.want.transpose(0, 2, 3, 1))
    case.call = case.call[:-1] + ', layout="nhwc")'
    return case


# ---- convolutions ---------------------------------------------------------------------------

def draw_padding(g, kernel=None, allow_str=False):
    """(attribute value or None, (top, left, bottom, right))."""
    kind = g.pick(["none", "int", "pair", "quad", "str"] if allow_str else ["none", "int", "pair", "quad"])
    if kind == "none":
        return None, (0, 0, 0, 0)
    if kind == "int":
        p = g.int(0, 2)
        return p, (p, p, p, p)
    if kind == "pair":
        ph, pw = g.int(0, 2), g.int(0, 2)
        return [ph, pw], (ph, pw, ph, pw)
    if kind == "quad":
        q = [g.int(0, 2) for _ in range(4)]
        return q, tuple(q)
    return "valid", (0, 0, 0, 0)  # "same" is handled by the caller


def pair(g, lo, hi):
    if g.coin():
        v = g.int(lo, hi)
        return v, (v, v)
    v = [g.int(lo, hi), g.int(lo, hi)]
    return v, tuple(v)


def gen_conv2d(g):
    groups = g.pick([1, 1, 1, 2, 3, "dw"])
    N = g.int(1, 2)
    if groups == "dw":
        C = g.int(1, 4)
        groups = C
        K = C * g.int(1, 2)
    else:
        C = groups * g.int(1, 3)
        K = groups * g.int(1, 3)
    KH, KW = g.int(1, 4), g.int(1, 4)
    sattr, stride = pair(g, 1, 3) if g.coin(0.6) else (None, (1, 1))
    dattr, dil = pair(g, 1, 2) if g.coin(0.3) else (None, (1, 1))
    pattr, pad = draw_padding(g, allow_str=True)
    same = False
    if pattr == "valid" and stride == (1, 1) and g.coin():
        pattr, same = "same", True
    H = g.int(max(1, dil[0] * (KH - 1) + 1 - pad[0] - pad[2]), 9)
    W = g.int(max(1, dil[1] * (KW - 1) + 1 - pad[1] - pad[3]), 9)
    x = g.arr((N, C, H, W))
    w = g.arr((K, C // groups, KH, KW))
    args = {"x": x, "w": w}
    bias = g.coin()
    if bias:
        args["b"] = g.arr((K,))
    xt = t(x)
    if same:
        want = F.conv2d(xt, t(w), t(args["b"]) if bias else None, 1, "same", dil, groups)
    else:
        xt = F.pad(xt, (pad[1], pad[3], pad[0], pad[2]))
        want = F.conv2d(xt, t(w), t(args["b"]) if bias else None, stride, 0, dil, groups)
    attrs = dict(stride=sattr, padding=pattr, dilation=dattr, groups=groups if groups > 1 or g.coin(0.2) else None)
    return channels_last(g, Case("conv2d", args, call("conv2d", args, **attrs), want.numpy(),
                                 weights=("w", "b")))


def gen_conv2d_transpose(g):
    groups = g.pick([1, 1, 2, 3])
    N, C = g.int(1, 2), groups * g.int(1, 2)
    Kg = g.int(1, 3)
    KH, KW = g.int(1, 4), g.int(1, 4)
    sattr, stride = pair(g, 1, 3) if g.coin(0.7) else (None, (1, 1))
    dattr, dil = pair(g, 1, 2) if g.coin(0.3) else (None, (1, 1))
    opad = [g.int(0, max(stride[i], dil[i]) - 1) for i in range(2)]
    oattr = opad if any(opad) or g.coin(0.2) else None
    pattr, pad = draw_padding(g)
    H, W = g.int(1, 6), g.int(1, 6)
    # keep the output non-empty
    for i, (n, k) in enumerate(((H, KH), (W, KW))):
        full = (n - 1) * stride[i] + dil[i] * (k - 1) + opad[i] + 1
        if full - pad[i] - pad[i + 2] < 1:
            pattr, pad = None, (0, 0, 0, 0)
    x = g.arr((N, C, H, W))
    w = g.arr((C, Kg, KH, KW))
    args = {"x": x, "w": w}
    bias = g.coin()
    if bias:
        args["b"] = g.arr((Kg * groups,))
    full = F.conv_transpose2d(t(x), t(w), t(args["b"]) if bias else None, stride, 0,
                              tuple(opad), groups, dil)
    oh = full.shape[2] - pad[0] - pad[2]
    ow = full.shape[3] - pad[1] - pad[3]
    want = full[:, :, pad[0]:pad[0] + oh, pad[1]:pad[1] + ow]
    if pad[0] == pad[2] and pad[1] == pad[3]:  # symmetric: PyTorch takes it directly
        direct = F.conv_transpose2d(t(x), t(w), t(args["b"]) if bias else None, stride,
                                    (pad[0], pad[1]), tuple(opad), groups, dil)
        assert torch.allclose(direct, want)
    attrs = dict(stride=sattr, padding=pattr, output_padding=oattr, dilation=dattr,
                 groups=groups if groups > 1 else None)
    return Case("conv2d_transpose", args, call("conv2d_transpose", args, **attrs), want.numpy(),
                weights=("w", "b"))


def gen_dense(g):
    lead = g.shape(g.int(0, 3), 1, 4)
    K, M = g.int(1, 6), g.int(1, 6)
    x, w = g.arr(lead + (K,)), g.arr((M, K))
    args = {"x": x, "w": w}
    want = f64(x) @ f64(w).T
    if g.coin():
        args["b"] = g.arr((M,))
        want = want + f64(args["b"])
    return Case("dense", args, call("dense", args), want, weights=("w", "b"))


def gen_matmul(g):
    K = g.int(1, 5)
    ra, rb = g.int(1, 4), g.int(1, 4)
    batch = g.shape(max(ra, rb) - 2, 1, 3) if max(ra, rb) > 2 else ()
    def bshape(r):
        n = max(r - 2, 0)
        return tuple(1 if g.coin(0.3) else d for d in batch[len(batch) - n:]) if n else ()
    a_shape = bshape(ra) + ((g.int(1, 4), K) if ra >= 2 else (K,))
    b_shape = bshape(rb) + ((K, g.int(1, 4)) if rb >= 2 else (K,))
    a, b = g.arr(a_shape), g.arr(b_shape)
    args = {"a": a, "b": b}
    return Case("matmul", args, call("matmul", args), np.matmul(f64(a), f64(b)))


def gen_batch_matmul(g):
    B, M, K, N = g.int(1, 3), g.int(1, 4), g.int(1, 5), g.int(1, 4)
    ta, tb = g.coin(), g.coin()
    a = g.arr((B, K, M) if ta else (B, M, K))
    b = g.arr((B, N, K) if tb else (B, K, N))
    fa = np.swapaxes(f64(a), 1, 2) if ta else f64(a)
    fb = np.swapaxes(f64(b), 1, 2) if tb else f64(b)
    args = {"a": a, "b": b}
    attrs = dict(transpose_a=int(ta) if ta or g.coin(0.2) else None, transpose_b=int(tb) if tb else None)
    return Case("batch_matmul", args, call("batch_matmul", args, **attrs), np.matmul(fa, fb))


EINSUM_FIXED = ["ij,jk->ik", "ii->i", "ii", "ij->ji", "ij", "ji", "bA", "i,i", "i,j->ij",
                "bij,bjk->bik", "...ij,...jk->...ik", "...i,...i", "i...->...", "ijk->",
                "ij,ij->ij", "i,j,k->kji", "abc,cd,de->ae", "iij->j", "ij,j->i", "i,->i"]


def gen_einsum(g):
    if g.coin(0.5):
        eq = g.pick(EINSUM_FIXED)
    else:  # random: up to 3 operands over a small label pool, repeats allowed
        pool = "abcdeijkXY"
        nop = g.int(1, 3)
        terms = ["".join(g.pick(pool[:6]) for _ in range(g.int(1, 3))) for _ in range(nop)]
        used = sorted(set("".join(terms)))
        if g.coin():
            out = "".join(l for l in used if g.coin())
            out = "".join(g.rng.permutation(list(out))) if out else ""
            eq = ",".join(terms) + "->" + out
        else:
            eq = ",".join(terms)
    lhs = eq.split("->")[0].split(",")
    sizes = {l: g.int(1, 4) for l in set("".join(lhs).replace(".", ""))}
    ell = g.shape(g.int(0, 2), 1, 3)
    args = {}
    for i, term in enumerate(lhs):
        shape = []
        for part in term.split("...")[:1]:
            shape += [sizes[l] for l in part]
        if "..." in term:
            e = ell[g.int(0, len(ell)):] if ell else ()
            e = tuple(1 if g.coin(0.3) else d for d in e)
            shape += list(e) + [sizes[l] for l in term.split("...")[1]]
        # size-1 broadcasting of a labelled dimension (NumPy allows it across operands)
        if len(lhs) > 1 and shape and g.coin(0.15):
            j = g.int(0, len(shape) - 1)
            lab = term.replace("...", "")
            if "..." not in term and lab.count(lab[j]) == 1:
                shape[j] = 1
        args["abcdefgh"[i]] = g.arr(tuple(shape))
    want = np.einsum(eq, *[f64(a) for a in args.values()])
    return Case("einsum", args, call("einsum", args, eq=eq), want)


# ---- elementwise ----------------------------------------------------------------------------

def sigmoid(x):
    return torch.sigmoid(t(x)).numpy()


UNARY = {
    "neg": (lambda x: -x, None),
    "abs": (np.abs, None),
    "exp": (np.exp, None),
    "log": (np.log, (0.05, 4)),
    "sqrt": (np.sqrt, (0, 4)),
    "rsqrt": (lambda x: 1 / np.sqrt(x), (0.05, 4)),
    "square": (np.square, None),
    "tanh": (np.tanh, None),
    "sigmoid": (sigmoid, None),
    "erf": (lambda x: torch.erf(t(x)).numpy(), None),
    "floor": (lambda x: np.floor(x), (-4, 4)),
    "relu": (lambda x: F.relu(t(x)).numpy(), None),
    "silu": (lambda x: F.silu(t(x)).numpy(), None),
}


def gen_unary(op):
    def gen(g):
        fn, rng = UNARY[op]
        shape = g.shape(g.int(0, 4), 1, 5)
        x = g.arr(shape, *rng) if rng else g.arr(shape, scale=2)
        return Case(op, {"x": x}, call(op, ["x"]), fn(f64(x)))
    return gen


def gen_leaky_relu(g):
    x = g.arr(g.shape(g.int(1, 3)))
    alpha = g.pick([None, 0.2, 0.5, 2, -0.3])
    want = F.leaky_relu(t(x), 0.01 if alpha is None else alpha).numpy()
    return Case("leaky_relu", {"x": x}, call("leaky_relu", ["x"], alpha=alpha), want)


def gen_gelu(g):
    x = g.arr(g.shape(g.int(1, 3)), scale=2)
    approx = g.pick([None, "none", "tanh", "tanh"])
    want = F.gelu(t(x), approximate=approx or "none").numpy()
    return Case("gelu", {"x": x}, call("gelu", ["x"], approximate=approx), want)


def bcast_pair(g):
    out = g.shape(g.int(0, 4), 1, 4)
    def part():
        r = g.int(0, len(out))
        return tuple(1 if g.coin(0.3) else d for d in out[len(out) - r:])
    return part(), part()


BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
    "maximum": np.maximum, "minimum": np.minimum, "pow": np.power,
}


def gen_binary(op):
    def gen(g):
        sa, sb = bcast_pair(g)
        if op == "pow":
            a, b = g.arr(sa, 0.1, 3), g.arr(sb, -2, 2)
        elif op == "div" and g.coin(0.4):
            # integers: truncation toward zero (C, ONNX), and 0 where the divisor is 0
            dt = g.pick([np.int8, np.int32, np.int64] + UINT_DTYPES + [np.int16])
            lo = 0 if dt in UINT_DTYPES else -1
            a = g.rng.integers(100 * lo, 101, sa).astype(dt)
            b = g.rng.integers(9 * lo, 10, sb).astype(dt)
            args = {"a": a, "b": b}
            with np.errstate(divide="ignore", invalid="ignore"):
                want = np.where(b == 0, 0, np.trunc(f64(a) / np.where(b == 0, 1, f64(b))))
            return Case(op, args, call(op, args), want)
        elif op == "div":
            a, b = g.arr(sa), g.arr(sb, 0.5, 2, scale=g.pick([1, -1]))
        else:
            a, b = g.arr(sa), g.arr(sb)
        args = {"a": a, "b": b}
        return Case(op, args, call(op, args), BINARY[op](f64(a), f64(b)))
    return gen


# ---- pooling, unfold ------------------------------------------------------------------------

def pool_params(g, dilation):
    kattr, k = pair(g, 1, 4)
    sattr, s = pair(g, 1, 3) if g.coin(0.7) else (None, k)
    p = [g.int(0, k[0] // 2), g.int(0, k[1] // 2)]
    pattr = (p[0] if p[0] == p[1] and g.coin() else p) if any(p) or g.coin(0.2) else None
    dattr, d = pair(g, 1, 2) if dilation and g.coin(0.4) else (None, (1, 1))
    ceil = g.coin()
    H = g.int(max(1, d[0] * (k[0] - 1) + 1 - 2 * p[0]), 10)
    W = g.int(max(1, d[1] * (k[1] - 1) + 1 - 2 * p[1]), 10)
    return dict(kattr=kattr, k=k, sattr=sattr, s=s, pattr=pattr, p=tuple(p), dattr=dattr, d=d,
                ceil=ceil, H=H, W=W)


def gen_max_pool2d(g):
    q = pool_params(g, True)
    x = g.arr((g.int(1, 2), g.int(1, 3), q["H"], q["W"]))
    if g.coin(0.25):  # integers (ONNX MaxPool takes u8 and i8): padding reads the least value
        x = draw_typed(g, x.shape, g.pick(["uint8", "int8", "int16", "uint64"]))
    want = F.max_pool2d(t(x), q["k"], q["s"], q["p"], q["d"], ceil_mode=q["ceil"]).numpy()
    if x.dtype.kind in "iu":  # a window wholly in the padding (ceil_mode, dilation): the least
        want = np.where(np.isneginf(want), np.iinfo(x.dtype).min, want)  # value, not -inf
    attrs = dict(kernel=q["kattr"], stride=q["sattr"], padding=q["pattr"], dilation=q["dattr"],
                 ceil_mode=int(q["ceil"]) if q["ceil"] or g.coin(0.2) else None)
    return channels_last(g, Case("max_pool2d", {"x": x}, call("max_pool2d", ["x"], **attrs),
                                 want))


def gen_avg_pool2d(g):
    q = pool_params(g, False)
    x = g.arr((g.int(1, 2), g.int(1, 3), q["H"], q["W"]))
    incl = g.coin()
    want = F.avg_pool2d(t(x), q["k"], q["s"], q["p"], ceil_mode=q["ceil"], count_include_pad=incl)
    attrs = dict(kernel=q["kattr"], stride=q["sattr"], padding=q["pattr"],
                 ceil_mode=int(q["ceil"]) if q["ceil"] else None,
                 count_include_pad=None if incl and g.coin() else int(incl))
    return channels_last(g, Case("avg_pool2d", {"x": x}, call("avg_pool2d", ["x"], **attrs),
                                 want.numpy()))


def gen_global_pool(op):
    def gen(g):
        x = g.arr((g.int(1, 2), g.int(1, 4), g.int(1, 6), g.int(1, 6)))
        if op == "global_avg_pool2d":
            want = F.adaptive_avg_pool2d(t(x), 1)
        else:
            want = F.adaptive_max_pool2d(t(x), 1)
        return channels_last(g, Case(op, {"x": x}, call(op, ["x"]), want.numpy()))
    return gen


def gen_unfold(g):
    kattr, k = pair(g, 1, 3)
    sattr, s = pair(g, 1, 3) if g.coin(0.6) else (None, (1, 1))
    dattr, d = pair(g, 1, 2) if g.coin(0.3) else (None, (1, 1))
    pattr, pad = draw_padding(g)
    N, C = g.int(1, 2), g.int(1, 3)
    H = g.int(max(1, d[0] * (k[0] - 1) + 1 - pad[0] - pad[2]), 7)
    W = g.int(max(1, d[1] * (k[1] - 1) + 1 - pad[1] - pad[3]), 7)
    x = g.arr((N, C, H, W))
    xp = F.pad(t(x), (pad[1], pad[3], pad[0], pad[2]))
    cols = F.unfold(xp, k, dilation=d, padding=0, stride=s)
    oh = (xp.shape[2] - d[0] * (k[0] - 1) - 1) // s[0] + 1
    ow = (xp.shape[3] - d[1] * (k[1] - 1) - 1) // s[1] + 1
    want = cols.reshape(N, C, k[0], k[1], oh, ow)
    attrs = dict(kernel=kattr, stride=sattr, padding=pattr, dilation=dattr)
    return Case("unfold", {"x": x}, call("unfold", ["x"], **attrs), want.numpy())


# ---- Winograd F(2x2, 3x3) transforms --------------------------------------------------------

WINO_BT = {2: np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], dtype=np.float64),
           4: np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
                        [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]],
                       dtype=np.float64)}
WINO_AT = {2: np.array([[1, 1, 1, 0], [0, 1, -1, -1]], dtype=np.float64),
           4: np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0],
                        [0, 1, -1, 8, -8, 1]], dtype=np.float64)}


def gen_winograd_input(g):
    """V[e, t, c] = (B^T d B)[e // a, e % a] for the a x a block d of tile t, by matrix
    products (F(m x m, 3x3), a = m + 2)."""
    m = g.pick([2, 4])
    a = m + 2
    bt = WINO_BT[m]
    pattr, pad = draw_padding(g)
    N, C = g.int(1, 2), g.int(1, 3)
    H = g.int(max(1, 3 - pad[0] - pad[2]), 10)
    W = g.int(max(1, 3 - pad[1] - pad[3]), 10)
    x = g.arr((N, C, H, W))
    oh, ow = H + pad[0] + pad[2] - 2, W + pad[1] + pad[3] - 2
    th, tw = (oh + m - 1) // m, (ow + m - 1) // m
    xp = np.zeros((N, C, m * th + 2, m * tw + 2))
    xp[:, :, pad[0]:pad[0] + H, pad[1]:pad[1] + W] = f64(x)
    want = np.zeros((a * a, N * th * tw, C))
    for n in range(N):
        for i in range(th):
            for j in range(tw):
                for c in range(C):
                    d = xp[n, c, m * i:m * i + a, m * j:m * j + a]
                    want[:, (n * th + i) * tw + j, c] = (bt @ d @ bt.T).reshape(a * a)
    attrs = dict(padding=pattr)
    if m == 4 or g.coin():
        attrs["tile"] = m
    if g.coin():
        x = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
        attrs["layout"] = "nhwc"
    return Case("winograd_input", {"x": x}, call("winograd_input", ["x"], **attrs), want)


def gen_winograd_output(g):
    """y[n, k, m i:m i+m, m j:m j+m] = A^T M A (+ bias) for tile (n, i, j), cropped to
    [OH, OW]."""
    m = g.pick([2, 4])
    a = m + 2
    at = WINO_AT[m]
    N, K = g.int(1, 2), g.int(1, 3)
    oh, ow = g.int(1, 9), g.int(1, 9)
    th, tw = (oh + m - 1) // m, (ow + m - 1) // m
    mt = g.arr((a * a, N * th * tw, K))
    full = np.zeros((N, K, m * th, m * tw))
    for n in range(N):
        for i in range(th):
            for j in range(tw):
                for k in range(K):
                    v = f64(mt)[:, (n * th + i) * tw + j, k].reshape(a, a)
                    full[n, k, m * i:m * i + m, m * j:m * j + m] = at @ v @ at.T
    want = full[:, :, :oh, :ow]
    args, names = {"m": mt}, ["m"]
    if g.coin():
        b = g.arr((K,))
        args["b"], names = b, ["m", "b"]
        want = want + f64(b)[None, :, None, None]
    attrs = dict(size=[oh, ow])
    if m == 4 or g.coin():
        attrs["tile"] = m
    if g.coin():
        want = want.transpose(0, 2, 3, 1)
        attrs["layout"] = "nhwc"
    return Case("winograd_output", args, call("winograd_output", names, **attrs),
                np.ascontiguousarray(want), weights=("b",))


# ---- normalisation --------------------------------------------------------------------------

def gen_softmax(op):
    def gen(g):
        shape = g.shape(g.int(1, 4), 1, 5)
        x = g.arr(shape, scale=g.pick([1, 5, 50]))
        axis = g.int(-len(shape), len(shape) - 1)
        attr = None if axis == -1 and g.coin() else axis
        fn = F.softmax if op == "softmax" else F.log_softmax
        return Case(op, {"x": x}, call(op, ["x"], axis=attr), fn(t(x), dim=axis).numpy())
    return gen


def gen_batch_norm(g):
    shape = (g.int(1, 3), g.int(1, 4)) + g.shape(g.int(0, 2), 1, 4)
    C = shape[1]
    x = g.arr(shape)
    args = {"x": x, "gamma": g.arr((C,)), "beta": g.arr((C,)), "mean": g.arr((C,)),
            "var": g.arr((C,), 0.1, 2)}
    eps = g.pick([None, 1e-3, 0.5, 1])
    want = F.batch_norm(t(x), t(args["mean"]), t(args["var"]), t(args["gamma"]), t(args["beta"]),
                        False, 0.0, 1e-5 if eps is None else eps)
    return Case("batch_norm", args, call("batch_norm", args, eps=eps), want.numpy(),
                weights=("gamma", "beta", "mean", "var"))


def gen_layer_norm(g):
    shape = g.shape(g.int(1, 4), 1, 5)
    axis = g.int(-len(shape), len(shape) - 1)
    a = axis % len(shape)
    norm = shape[a:]
    x = g.arr(shape, scale=3, shift=1)
    args = {"x": x}
    nparam = g.pick([0, 1, 2, 2])
    if nparam >= 1:
        args["gamma"] = g.arr(norm)
    if nparam == 2:
        args["beta"] = g.arr(norm)
    eps = g.pick([None, 1e-3, 1])
    want = F.layer_norm(t(x), norm, t(args["gamma"]) if nparam else None,
                        t(args["beta"]) if nparam == 2 else None, 1e-5 if eps is None else eps)
    attr = None if axis == -1 and g.coin() else axis
    return Case("layer_norm", args, call("layer_norm", args, axis=attr, eps=eps), want.numpy(),
                weights=("gamma", "beta"))


# ---- data movement --------------------------------------------------------------------------

def gen_reshape(g):
    shape = g.shape(g.int(0, 4), 1, 4)
    n = int(np.prod(shape))
    # a random factorisation of n, with ones sprinkled in and maybe one -1
    out, rest = [], n
    for p in (2, 3, 5, 7):
        while rest % p == 0:
            rest //= p
            if out and g.coin(0.5):
                out[g.int(0, len(out) - 1)] *= p
            else:
                out.append(p)
    out = [int(v) for v in g.rng.permutation(out)] if out else []
    while g.coin(0.3) and len(out) < 6:
        out.insert(g.int(0, len(out)), 1)
    if out and g.coin(0.4):
        out[g.int(0, len(out) - 1)] = -1
    x = g.arr(shape)
    return Case("reshape", {"x": x}, call("reshape", ["x"], shape=out), np.reshape(f64(x), out))


def gen_flatten(g):
    shape = g.shape(g.int(0, 4), 1, 4)
    r = len(shape)
    axis = g.int(-r, r)
    a = axis + r if axis < 0 else axis
    x = g.arr(shape)
    want = np.reshape(f64(x), (int(np.prod(shape[:a])), int(np.prod(shape[a:]))))
    attr = None if axis == 1 and g.coin() else axis
    return Case("flatten", {"x": x}, call("flatten", ["x"], axis=attr), want)


def gen_transpose(g):
    shape = g.shape(g.int(1, 5), 1, 4)
    x = g.arr(shape)
    if g.coin(0.25):
        return Case("transpose", {"x": x}, call("transpose", ["x"]), np.transpose(f64(x)))
    perm = [int(p) for p in g.rng.permutation(len(shape))]
    attr = [p - len(shape) if g.coin(0.2) else p for p in perm]
    return Case("transpose", {"x": x}, call("transpose", ["x"], perm=attr),
                np.transpose(f64(x), perm))


def gen_concat(g):
    shape = list(g.shape(g.int(1, 4), 1, 4))
    axis = g.int(-len(shape), len(shape) - 1)
    args = {}
    for i in range(g.int(1, 4)):
        s = list(shape)
        s[axis] = g.int(1, 4)
        args["abcd"[i]] = g.arr(tuple(s))
    attr = None if axis == 0 and g.coin() else axis
    want = np.concatenate([f64(a) for a in args.values()], axis=axis)
    return Case("concat", args, call("concat", args, axis=attr), want)


def gen_pad(g):
    shape = g.shape(g.int(1, 3), 1, 5)
    r = len(shape)
    mode = g.pick([None, "constant", "edge", "reflect"])
    before, after = [], []
    for n in shape:
        lo = -(n - 1) // 2 if g.coin(0.3) else 0
        hi = n - 1 if mode == "reflect" else 3
        b = g.int(lo, hi)
        a = g.int(max(lo, 1 - n - b), hi)
        before.append(b)
        after.append(a)
    value = g.pick([None, 1.5, -2.0, 0.0, 3]) if mode in (None, "constant") else None
    x = g.arr(shape)
    # pad the positive parts, then crop the negative ones (kiln mirrors and clamps at the
    # input's own borders, so this order is the definition)
    width = [(max(b, 0), max(a, 0)) for b, a in zip(before, after)]
    if mode in (None, "constant"):
        xp = np.pad(f64(x), width, mode="constant",
                    constant_values=0.0 if value is None else value)
    else:
        xp = np.pad(f64(x), width, mode=mode)
    want = xp[tuple(slice(max(0, -b), xp.shape[d] - max(0, -a))
                    for d, (b, a) in enumerate(zip(before, after)))]
    if before == after and g.coin(0.3):
        pads = before  # one entry per dimension, both sides
    else:
        pads = before + after  # ONNX order
    args = {"x": x}
    return Case("pad", args, call("pad", ["x"], pads=pads, value=value, mode=mode), want)


def gen_slice(g):
    shape = g.shape(g.int(1, 4), 1, 7)
    r = len(shape)
    naxes = g.int(1, r)
    axes = [int(a) for a in g.rng.permutation(r)[:naxes]]
    starts, ends, steps = [], [], []
    big = 2**63 - 1
    for a in axes:
        n = shape[a]
        for _ in range(100):
            step = g.pick([1, 1, 2, 3, -1, -2, n + 2])
            start = g.pick([g.int(-n - 2, n + 2), 0, -1, big, -big])
            end = g.pick([g.int(-n - 2, n + 2), big, -big, n])
            if len(range(*slice(start, end, step).indices(n))) > 0:
                break
        else:
            start, end, step = 0, n, 1
        starts.append(start)
        ends.append(end)
        steps.append(step)
    x = g.arr(shape)
    idx = [slice(None)] * r
    for a, s0, e0, st in zip(axes, starts, ends, steps):
        idx[a] = slice(s0, e0, st)
    want = f64(x)[tuple(idx)]
    attrs = dict(starts=starts, ends=ends)
    if axes != list(range(naxes)) or g.coin(0.3):
        attrs["axes"] = [a - r if g.coin(0.3) else a for a in axes]
    if any(s != 1 for s in steps) or g.coin(0.3):
        attrs["steps"] = steps
    return Case("slice", {"x": x}, call("slice", ["x"], **attrs), want)


# ---- indexing, comparison, logic, casts -----------------------------------------------------

INDEX_DTYPES = [np.int8, np.int32, np.int64]


def draw_indices(g, shape, n):
    """Indices into an extent n: mostly in [-n, n), some out of range (kiln clamps them)."""
    hi = min(n + 3, 127)
    return g.rng.integers(-hi, hi, shape).astype(g.pick(INDEX_DTYPES))


def clamp_indices(i, n):
    i = i.astype(np.int64)
    return np.clip(np.where(i < 0, i + n, i), 0, n - 1)


UINT_DTYPES = [np.uint8, np.uint16, np.uint32, np.uint64]
# u64 values beyond 2^63 (exact in float64, as the .npy files hold them) test unsigned order
U64_VALUES = np.array([0, 1, 2, 3, 2**63, 2**63 + 2048, 2**64 - 2048], dtype=np.uint64)


def draw_typed(g, shape, kind):
    """An argument of a random dtype of kind: "num" (float or integer), "any" (also bool), or a
    dtype name ("uint16", ...)."""
    kinds = ["float", "int8", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
             "int16"] + (["bool"] if kind == "any" else [])
    k = kind if kind not in ("num", "any") else g.pick(kinds)
    if k == "uint64":
        return U64_VALUES[g.rng.integers(0, len(U64_VALUES), shape)]
    if k.startswith("uint"):  # wrapped negatives: values near the top of the range
        return g.rng.integers(-3, 4, shape).astype(np.int64).astype(k)
    if k == "float":
        # few distinct values, so equality and ties happen
        return np.round(g.arr(shape) * 2) / 2
    if k == "bool":
        return g.rng.random(shape) < 0.5
    return g.rng.integers(-3, 4, shape).astype(k)


def typed_kind(a):
    """draw_typed's kind for an argument of a's dtype (values valid for it: a u64 drawn as a
    wrapped negative would not survive the .npy round trip through doubles)."""
    return "float" if a.dtype.kind == "f" else a.dtype.name


def gen_gather(g):
    r = g.int(1, 3)
    shape = g.shape(r, 1, 5)
    axis = g.int(-r, r - 1)
    n = shape[axis]
    ishape = g.shape(g.int(0, 2), 1, 4)
    x, i = draw_typed(g, shape, "any"), draw_indices(g, ishape, n)
    want = np.take(x, clamp_indices(i, n), axis=axis)
    return Case("gather", {"x": x, "i": i}, call("gather", ["x", "i"], axis=axis), want)


def gen_gather_elements(g):
    r = g.int(1, 3)
    shape = g.shape(r, 1, 5)
    axis = g.int(-r, r - 1)
    n = shape[axis]
    ishape = tuple(g.int(1, 6) if d == axis % r else g.int(1, shape[d]) for d in range(r))
    x, i = draw_typed(g, shape, "num"), draw_indices(g, ishape, n)
    pos = list(np.indices(ishape))  # torch.gather: out[p] = x[p with p[axis] = i[p]]
    pos[axis % r] = clamp_indices(i, n)
    want = x[tuple(pos)]
    return Case("gather_elements", {"x": x, "i": i},
                call("gather_elements", ["x", "i"], axis=axis), want)


def bcast_shapes(g, k):
    out = g.shape(g.int(0, 4), 1, 4)
    def part():
        r = g.int(0, len(out))
        return tuple(1 if g.coin(0.3) else d for d in out[len(out) - r:])
    return [part() for _ in range(k)]


def gen_where(g):
    sc, sa, sb = bcast_shapes(g, 3)
    a = draw_typed(g, sa, "any")
    b = draw_typed(g, sb, "any" if a.dtype.kind != "u" else a.dtype.name).astype(a.dtype)
    c = g.rng.random(sc) < 0.5
    return Case("where", {"c": c, "a": a, "b": b}, call("where", ["c", "a", "b"]),
                np.where(c, a, b))


COMPARE = {"equal": np.equal, "less": np.less, "less_equal": np.less_equal,
           "greater": np.greater, "greater_equal": np.greater_equal}
LOGIC = {"logical_and": np.logical_and, "logical_or": np.logical_or,
         "logical_xor": np.logical_xor}


def gen_compare(op):
    def gen(g):
        sa, sb = bcast_shapes(g, 2)
        a = draw_typed(g, sa, "any" if op == "equal" else "num")
        b = draw_typed(g, sb, "any" if a.dtype.kind != "u" else a.dtype.name).astype(a.dtype)
        if a.dtype == np.bool_:
            b = g.rng.random(sb) < 0.5
        return Case(op, {"a": a, "b": b}, call(op, ["a", "b"]), COMPARE[op](a, b))
    return gen


def gen_logic(op):
    def gen(g):
        sa, sb = bcast_shapes(g, 2)
        a, b = g.rng.random(sa) < 0.5, g.rng.random(sb) < 0.5
        return Case(op, {"a": a, "b": b}, call(op, ["a", "b"]), LOGIC[op](a, b))
    return gen


def gen_logical_not(g):
    a = g.rng.random(g.shape(g.int(0, 3))) < 0.5
    return Case("logical_not", {"a": a}, call("logical_not", ["a"]), np.logical_not(a))


CAST_TO = {"f32": np.float32, "f64": np.float64, "i8": np.int8, "i32": np.int32,
           "i64": np.int64, "bool": np.bool_,
           "u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64, "i16": np.int16}


def gen_cast(g):
    shape = g.shape(g.int(0, 3))
    src = g.pick(["float", "int8", "int32", "int64", "bool",
                  "uint8", "uint16", "uint32", "uint64", "int16"])
    to = g.pick(list(CAST_TO))
    if src == "float":
        # within every target's range (float -> int saturates; NumPy leaves that undefined)
        x = g.arr(shape, -100, 100)
        if g.coin(0.2):
            x = np.round(x)  # exact integers and zeros (float -> bool is x != 0)
        if to == "f32":
            x = x.astype(np.float32)  # the interpreter holds f32 values unrounded
    elif src == "bool":
        x = g.rng.random(shape) < 0.5
    elif src == "uint64" and to != "f32":
        x = draw_typed(g, shape, src)
    else:
        # unsigned: wrapped, but exact in f32 (the interpreter holds f32 values unrounded)
        lo = -128 if src in ("int8", "uint8") else 0 if to == "f32" and src[0] == "u" else -1000
        x = g.rng.integers(lo, -lo if lo else 1000, shape).astype(np.int64).astype(src)
    if CAST_TO[to] == np.bool_:
        want = x != 0
    elif np.issubdtype(CAST_TO[to], np.unsignedinteger) and x.dtype.kind == "f":
        # float -> unsigned saturates (truncated toward zero; negatives give 0)
        want = np.clip(np.trunc(f64(x)), 0, np.iinfo(CAST_TO[to]).max)
    elif np.issubdtype(CAST_TO[to], np.integer) and np.issubdtype(x.dtype, np.integer):
        want = x.astype(np.int64).astype(CAST_TO[to])  # wraps to the width, as two's complement
    elif np.issubdtype(CAST_TO[to], np.integer):
        want = np.trunc(f64(x)).astype(np.int64).astype(CAST_TO[to])
    else:
        want = x.astype(CAST_TO[to])
    return Case("cast", {"x": x}, call("cast", ["x"], dtype=to), want)


def gen_expand(g):
    shape = g.shape(g.int(0, 3), 1, 4)
    xs = tuple(1 if g.coin(0.4) else d for d in shape)
    target = tuple(1 if g.coin(0.3) else d for d in shape)
    target = g.shape(g.int(0, 2), 1, 3) + target if g.coin(0.5) else target
    x = draw_typed(g, xs, "any")
    want = x * np.ones(target, dtype=x.dtype) if x.dtype != np.bool_ else \
        np.logical_and(x, np.ones(target, dtype=bool))
    return Case("expand", {"x": x}, call("expand", ["x"], shape=list(target)), want)


def gen_tile(g):
    shape = g.shape(g.int(1, 3), 1, 4)
    reps = [g.int(1, 3) for _ in shape]
    x = draw_typed(g, shape, "any")
    return Case("tile", {"x": x}, call("tile", ["x"], repeats=reps), np.tile(x, reps))


def gen_trilu(g):
    shape = g.shape(g.int(2, 4), 1, 5)
    k = g.pick([0, 0, g.int(-6, 6), 2**62, -2**62])
    upper = g.coin()
    x = draw_typed(g, shape, "any")
    want = np.triu(x, k) if upper else np.tril(x, k)
    return Case("trilu", {"x": x}, call("trilu", ["x"], upper=int(upper), k=k), want)
# ---- reductions over axes ------------------------------------------------------------------

def draw_axes(g, r):
    """A random axes attribute for rank r: None (every axis), or a shuffled subset (possibly
    empty) with some entries negative; and the NumPy axis tuple it means."""
    if g.coin(0.25):
        return None, None
    axes = [a for a in range(r) if g.coin()]
    g.rng.shuffle(axes)
    return [a - r if g.coin(0.3) else a for a in axes], tuple(axes)


def gen_reduce(op):
    fn = {"reduce_sum": np.sum, "reduce_max": np.max, "reduce_min": np.min,
          "reduce_prod": np.prod, "reduce_mean": np.mean}[op]

    def gen(g):
        shape = g.shape(g.int(0, 4), 1, 5)
        if op == "reduce_prod":  # magnitudes near 1, either sign: no overflow, no underflow
            x = g.arr(shape, lo=0.5, hi=1.5) * np.where(g.rng.random(shape) < 0.3, -1, 1)
            x = x.astype(np.float32 if g.f32 else np.float64)
        else:
            x = g.arr(shape, scale=g.pick([1, 10]))
        if op in ("reduce_max", "reduce_min") and x.size > 1 and g.coin(0.2):
            x.flat[g.int(0, x.size - 1)] = np.nan
        if op in ("reduce_max", "reduce_min") and g.coin(0.3):  # unsigned order, identities
            x = draw_typed(g, shape, g.pick(["uint8", "uint32", "uint64", "int16"]))
        attr, axis = draw_axes(g, len(shape))
        keep = g.pick([None, 0, 1])
        want = fn(f64(x), axis=axis, keepdims=keep != 0)
        return Case(op, {"x": x}, call(op, ["x"], axes=attr, keepdims=keep), want)
    return gen


def gen_arg(op):
    def gen(g):
        shape = g.shape(g.int(1, 4), 1, 5)
        if g.coin():  # few distinct values: ties
            x = g.arr(shape, lo=-2, hi=2).round()
        else:
            x = g.arr(shape)
        if x.size > 1 and g.coin(0.2):
            x.flat[g.int(0, x.size - 1)] = np.nan
        axis = g.int(-len(shape), len(shape) - 1)
        keep, last = g.pick([None, 0, 1]), g.pick([None, 0, 1])
        fn = np.argmax if op == "argmax" else np.argmin
        a = axis % len(shape)
        if last:
            want = shape[a] - 1 - fn(np.flip(f64(x), a), axis=a)
        else:
            want = fn(f64(x), axis=a)
        if keep != 0:
            want = np.expand_dims(want, a)
        attrs = dict(axis=None if axis == 0 and g.coin() else axis, keepdims=keep,
                     select_last_index=last)
        return Case(op, {"x": x}, call(op, ["x"], **attrs), want)
    return gen


def gen_cumsum(g):
    shape = g.shape(g.int(1, 4), 1, 6)
    x = g.arr(shape)
    axis = g.int(-len(shape), len(shape) - 1)
    excl, rev = g.pick([None, 0, 1]), g.pick([None, 0, 1])
    a = axis % len(shape)
    v = np.flip(f64(x), a) if rev else f64(x)
    c = np.cumsum(v, axis=a)
    if excl:
        c = np.concatenate([np.zeros_like(np.take(c, [0], axis=a)),
                            np.take(c, range(shape[a] - 1), axis=a)], axis=a)
    want = np.flip(c, a) if rev else c
    attrs = dict(axis=None if axis == 0 and g.coin() else axis, exclusive=excl, reverse=rev)
    return Case("cumsum", {"x": x}, call("cumsum", ["x"], **attrs), want)


# ---- the op table: every library op and how many cases it gets by default -----------------

# ---- scatter (ir/lib_scatter.c) ----

def gen_scatter_elements(g):
    r = g.int(1, 3)
    shape = g.shape(r, 1, 5)
    axis = g.int(-r, r - 1)
    a = axis % r
    n = shape[a]
    red = g.pick(["none", "add", "mul", "max", "min"])
    ishape = tuple(g.int(1, 6) if d == a else g.int(1, shape[d]) for d in range(r))
    x = draw_typed(g, shape, "any" if red == "none" else "num")
    u = draw_typed(g, ishape, typed_kind(x))
    i = draw_indices(g, ishape, n)
    want = x.copy()
    for p in np.ndindex(*ishape):  # ONNX ScatterElements, in order; out-of-range hits nothing
        v = int(i[p])
        if not -n <= v < n:
            continue
        q = list(p)
        q[a] = v + n if v < 0 else v
        q = tuple(q)
        if red == "none":
            want[q] = u[p]
        elif red == "add":
            want[q] = want[q] + u[p]
        elif red == "mul":
            want[q] = want[q] * u[p]
        elif red == "max":
            want[q] = max(want[q], u[p])
        else:
            want[q] = min(want[q], u[p])
    return Case("scatter_elements", {"x": x, "i": i, "u": u},
                call("scatter_elements", ["x", "i", "u"], axis=axis, reduction=red), want)


def gen_scatter_nd(g):
    r = g.int(1, 3)
    shape = g.shape(r, 1, 5)
    k = g.int(1, r)
    q = g.int(1, 6)
    red = g.pick(["none", "add", "mul", "max", "min"])
    dt = g.pick(INDEX_DTYPES)
    i = np.stack([g.rng.integers(-shape[c] - 2, shape[c] + 2, (q,)) for c in range(k)],
                 axis=1).astype(dt)
    x = draw_typed(g, shape, "any" if red == "none" else "num")
    u = draw_typed(g, (q,) + tuple(shape[k:]), typed_kind(x))
    want = x.copy()
    for row in range(q):  # ONNX ScatterND, in order; a row with a component out of range hits nothing
        v = [int(i[row, c]) for c in range(k)]
        if any(not -shape[c] <= v[c] < shape[c] for c in range(k)):
            continue
        p = tuple(v[c] + shape[c] if v[c] < 0 else v[c] for c in range(k))
        if red == "none":
            want[p] = u[row]
        elif red == "add":
            want[p] = want[p] + u[row]
        elif red == "mul":
            want[p] = want[p] * u[row]
        elif red == "max":
            want[p] = np.maximum(want[p], u[row])
        else:
            want[p] = np.minimum(want[p], u[row])
    return Case("scatter_nd", {"x": x, "i": i, "u": u},
                call("scatter_nd", ["x", "i", "u"], reduction=red), want)


GENERATORS = {
    "conv2d": (gen_conv2d, 40),
    "conv2d_transpose": (gen_conv2d_transpose, 30),
    "dense": (gen_dense, 8),
    "matmul": (gen_matmul, 12),
    "batch_matmul": (gen_batch_matmul, 8),
    "einsum": (gen_einsum, 30),
    "leaky_relu": (gen_leaky_relu, 5),
    "gelu": (gen_gelu, 6),
    "max_pool2d": (gen_max_pool2d, 30),
    "avg_pool2d": (gen_avg_pool2d, 30),
    "global_avg_pool2d": (gen_global_pool("global_avg_pool2d"), 5),
    "global_max_pool2d": (gen_global_pool("global_max_pool2d"), 5),
    "unfold": (gen_unfold, 15),
    "winograd_input": (gen_winograd_input, 16),
    "winograd_output": (gen_winograd_output, 16),
    "softmax": (gen_softmax("softmax"), 8),
    "log_softmax": (gen_softmax("log_softmax"), 8),
    "batch_norm": (gen_batch_norm, 6),
    "layer_norm": (gen_layer_norm, 8),
    "reshape": (gen_reshape, 10),
    "flatten": (gen_flatten, 6),
    "transpose": (gen_transpose, 8),
    "concat": (gen_concat, 8),
    "pad": (gen_pad, 15),
    "slice": (gen_slice, 15),
    "reduce_sum": (gen_reduce("reduce_sum"), 12),
    "reduce_max": (gen_reduce("reduce_max"), 12),
    "reduce_min": (gen_reduce("reduce_min"), 12),
    "reduce_prod": (gen_reduce("reduce_prod"), 12),
    "reduce_mean": (gen_reduce("reduce_mean"), 12),
    "argmax": (gen_arg("argmax"), 15),
    "argmin": (gen_arg("argmin"), 15),
    "cumsum": (gen_cumsum, 12),
}
for _op in UNARY:
    GENERATORS[_op] = (gen_unary(_op), 5)
for _op in BINARY:
    GENERATORS[_op] = (gen_binary(_op), 6)
# indexing, comparison, logic, casts
GENERATORS.update({
    "gather": (gen_gather, 15),
    "gather_elements": (gen_gather_elements, 12),
    "where": (gen_where, 10),
    "logical_not": (gen_logical_not, 4),
    "cast": (gen_cast, 25),
    "expand": (gen_expand, 10),
    "tile": (gen_tile, 8),
    "trilu": (gen_trilu, 12),
})
for _op in COMPARE:
    GENERATORS[_op] = (gen_compare(_op), 8)
for _op in LOGIC:
    GENERATORS[_op] = (gen_logic(_op), 5)
# scatter
GENERATORS.update({
    "scatter_elements": (gen_scatter_elements, 20),
    "scatter_nd": (gen_scatter_nd, 20),
})


# trigonometric, hyperbolic and rounding functions, sign, reciprocal, isnan, isinf, mod
MATH = {
    "sin": (np.sin, None), "cos": (np.cos, None), "tan": (np.tan, (-1.5, 1.5)),
    "asin": (np.arcsin, (-1, 1)), "acos": (np.arccos, (-1, 1)), "atan": (np.arctan, None),
    "sinh": (np.sinh, None), "cosh": (np.cosh, None), "asinh": (np.arcsinh, None),
    "acosh": (np.arccosh, (1, 5)), "atanh": (np.arctanh, (-0.99, 0.99)),
    "ceil": (np.ceil, (-4, 4)), "reciprocal": (lambda x: 1 / x, (0.2, 3)),
}


def gen_math(op):
    def gen(g):
        fn, rng = MATH[op]
        shape = g.shape(g.int(0, 4), 1, 5)
        x = g.arr(shape, *rng) if rng else g.arr(shape, scale=2)
        if op == "reciprocal":
            x = x * np.where(g.rng.random(shape) < 0.5, -1, 1).astype(x.dtype)
        return Case(op, {"x": x}, call(op, ["x"]), fn(f64(x)))
    return gen


def gen_round(g):
    shape = g.shape(g.int(0, 4), 1, 5)
    x = g.arr(shape, scale=4)
    halves = (np.round(x * 2) / 2).astype(x.dtype)  # ties: half to even
    x = np.where(g.rng.random(shape) < 0.5, halves, x)
    if x.size and g.coin(0.3):
        x.flat[0] = g.pick([np.inf, -np.inf, np.nan, 0.49999997, -2.5, 2.0**60 + 0.0])
    return Case("round", {"x": x}, call("round", ["x"]), np.round(f64(x)))


def gen_sign(g):
    shape = g.shape(g.int(0, 4), 1, 5)
    x = draw_typed(g, shape, "num")
    if x.dtype.kind == "f" and x.size and g.coin(0.3):
        x.flat[0] = np.nan
    return Case("sign", {"x": x}, call("sign", ["x"]), np.sign(x))


def special_floats(g, shape):
    x = g.arr(shape, scale=1e3)
    pick = g.rng.random(shape)
    x = np.where(pick < 0.2, np.inf, np.where(pick < 0.4, -np.inf, np.where(pick < 0.5, np.nan, x)))
    return x.astype(np.float32 if g.f32 else np.float64)


def gen_isnan(g):
    x = special_floats(g, g.shape(g.int(0, 4), 1, 5))
    return Case("isnan", {"x": x}, call("isnan", ["x"]), np.isnan(x))


def gen_isinf(g):
    x = special_floats(g, g.shape(g.int(0, 4), 1, 5))
    neg, pos = g.pick([None, 0, 1]), g.pick([None, 0, 1])
    want = (np.isposinf(x) & (pos != 0)) | (np.isneginf(x) & (neg != 0))
    return Case("isinf", {"x": x},
                call("isinf", ["x"], detect_negative=neg, detect_positive=pos), want)


def gen_mod(g):
    sa, sb = bcast_pair(g)
    fm = g.pick([None, 0, 1])
    if g.coin(0.4):  # floats: C's fmod (fmod=1) or NumPy's mod (fmod=0)
        a, b = g.arr(sa, scale=10), g.arr(sb, 0.5, 3, scale=g.pick([1, -1]))
        want = np.fmod(f64(a), f64(b)) if fm else np.mod(f64(a), f64(b))
        args = {"a": a, "b": b}
        return Case("mod", args, call("mod", ["a", "b"], fmod=fm), want)
    dt = g.pick([np.int8, np.int32, np.int64])
    a, b = g.rng.integers(-100, 101, sa).astype(dt), g.rng.integers(-9, 10, sb).astype(dt)
    if a.size and g.coin(0.3):
        a.flat[0] = np.iinfo(dt).min  # by -1: 0, never a trap
    bb = np.where(b == 0, 1, b).astype(np.int64)
    want = np.fmod(a.astype(np.int64), bb) if fm else np.mod(a.astype(np.int64), bb)
    want = np.where(b == 0, 0, want)
    args = {"a": a, "b": b}
    return Case("mod", args, call("mod", ["a", "b"], fmod=fm), want)


for _op in MATH:
    GENERATORS[_op] = (gen_math(_op), 5)
GENERATORS.update({
    "round": (gen_round, 8),
    "sign": (gen_sign, 6),
    "isnan": (gen_isnan, 4),
    "isinf": (gen_isinf, 8),
    "mod": (gen_mod, 12),
})


# ---- resize: PyTorch's F.interpolate where it has the mode, else ONNX's reference ---------

def onnx_resize_weights(n_in, n_out, scale, mode, ct, nr, a, exclude, r0, r1, antialias=0):
    """The weights [n_out, n_in] of one axis after ONNX's reference implementation
    (onnx/backend/test/case/node/resize.py: interpolate_1d_with_x): the neighbours of the input
    coordinate in the edge-padded input, their coefficients, and a mask of the outputs that take
    extrapolation_value (tf_crop_and_resize outside the input)."""
    w = np.zeros((n_out, n_in))
    outside = np.zeros(n_out, dtype=bool)
    ow = scale * n_in
    for o in range(n_out):
        if ct == "align_corners":
            x = 0.0 if ow == 1 else o * (n_in - 1) / (ow - 1)
        elif ct == "asymmetric":
            x = o / scale
        elif ct == "tf_crop_and_resize":
            x = (r1 - r0) * (n_in - 1) / 2 if ow == 1 else o * (r1 - r0) * (n_in - 1) / (ow - 1)
            x += r0 * (n_in - 1)
            if x < 0 or x > n_in - 1:
                outside[o] = True
                continue
        elif ct == "pytorch_half_pixel":
            x = -0.5 if ow == 1 else (o + 0.5) / scale - 0.5
        elif ct == "half_pixel_symmetric":
            x = n_in / 2 * (1 - n_out / ow) + (o + 0.5) / scale - 0.5
        else:
            x = (o + 0.5) / scale - 0.5
        ratio = 1.0 if float(x).is_integer() else x - np.floor(x)
        if mode == "nearest":
            if ratio == 1.0:
                c = [0.0, 1.0]
            else:
                c = {"round_prefer_floor": [ratio <= 0.5, ratio > 0.5],
                     "round_prefer_ceil": [ratio < 0.5, ratio >= 0.5],
                     "floor": [1, 0], "ceil": [0, 1]}[nr]
        elif antialias and scale < 1 and mode == "linear":  # the filter stretched by 1/scale
            start = int(np.floor(-1 / scale) + 1)
            args = (np.arange(start, 2 - start) - ratio) * scale
            c = np.clip(1 - np.abs(args), 0, 1)
            c = c / c.sum()
        elif antialias and scale < 1:
            def keys(v):
                v = abs(v)
                if v <= 1:
                    return (a + 2) * v ** 3 - (a + 3) * v ** 2 + 1
                return a * v ** 3 - 5 * a * v ** 2 + 8 * a * v - 4 * a if v < 2 else 0.0
            start = int(np.floor(-2 / scale) + 1)
            c = np.array([keys(scale * (i - ratio)) for i in range(start, 2 - start)])
            c = c / c.sum()
        elif mode == "linear":
            c = [1 - ratio, ratio]
        else:
            r, s = ratio, 1 - ratio
            c = [((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a,
                 ((a + 2) * r - (a + 3)) * r * r + 1,
                 ((a + 2) * s - (a + 3)) * s * s + 1,
                 ((a * (s + 1) - 5 * a) * (s + 1) + 8 * a) * (s + 1) - 4 * a]
        c = np.array(c, dtype=np.float64)
        pad = (len(c) + 1) // 2
        near = sorted(range(n_in + 2 * pad), key=lambda i: (abs(x + pad - i), i))[:len(c)]
        idx = np.array(sorted(near)) - pad
        if exclude:
            c = np.where((idx >= 0) & (idx < n_in), c, 0.0)
            c = c / c.sum()
        for k, i in enumerate(idx):
            w[o, min(max(i, 0), n_in - 1)] += c[k]
    return w, outside


def onnx_resize(x, sizes, scales, mode, ct, nr, a, exclude, roi, extrap, antialias=0):
    y = f64(x)
    mask = np.zeros(tuple(sizes), dtype=bool)
    for d in range(x.ndim):
        w, out = onnx_resize_weights(x.shape[d], sizes[d], scales[d], mode, ct, nr, a, exclude,
                                     roi[d], roi[x.ndim + d], antialias)
        y = np.moveaxis(np.tensordot(w, np.moveaxis(y, d, 0), axes=1), 0, d)
        shp = [1] * x.ndim
        shp[d] = sizes[d]
        mask = mask | out.reshape(shp)
    return np.where(mask, extrap, y)


def gen_resize(g):
    rank = g.int(1, 4)
    shape = g.shape(rank, 1, 5)
    if g.coin(0.4) and rank >= 3:  # PyTorch: N, C, then 1 to 2 spatial axes resized
        sp = rank - 2
        mode = g.pick(["nearest", "linear", "cubic"] if sp == 2 else ["nearest", "linear"])
        align = mode != "nearest" and g.coin()
        if mode == "nearest":  # integer factors: PyTorch's float scale is then exact
            sizes = list(shape[:2]) + [d * g.int(1, 3) for d in shape[2:]]
        else:
            sizes = list(shape[:2]) + [g.int(1, 8) for _ in shape[2:]]
        x = g.arr(shape)
        tmode = {"nearest": "nearest", "linear": "linear" if sp == 1 else "bilinear",
                 "cubic": "bicubic"}[mode]
        kw = {} if mode == "nearest" else {"align_corners": align}
        want = F.interpolate(t(x), size=sizes[2:], mode=tmode, **kw).numpy()
        ct = ("asymmetric" if mode == "nearest" else "align_corners" if align
              else "half_pixel")
        attrs = dict(sizes=sizes, mode=mode, coordinate_transformation_mode=ct,
                     nearest_mode="floor" if mode == "nearest" else None)
        return Case("resize", {"x": x}, call("resize", ["x"], **attrs), want)
    mode = g.pick(["nearest", "linear", "cubic"])
    ct = g.pick(["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                 "asymmetric", "tf_crop_and_resize"])
    nr = g.pick(["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
    a = g.pick([-0.75, -0.5])
    exclude = int(mode == "cubic" and g.coin())
    antialias = int(mode != "nearest" and rank <= 2 and g.coin(0.5))  # taps grow as 1/scale
    sizes = [g.int(1, 8) if g.coin(0.7) else d for d in shape]
    scales, den, nums = None, None, None
    if g.coin():  # explicit scales num / den, as ONNX's float scales become
        den = g.pick([1, 2, 4, 5])
        nums = [max(1, round(s / d * den)) if g.coin(0.8) else g.int(1, 3 * den)
                for s, d in zip(sizes, shape)]
        scales = [n / den for n in nums]
        # the output extent follows the scale, as ONNX's does (taps far outside the input,
        # which inconsistent sizes could ask for, are clamped rather than edge-padded)
        sizes = [max(1, int(d * s)) for d, s in zip(shape, scales)]
    else:
        scales = [s / d for s, d in zip(sizes, shape)]
    roi, roi_den = None, None
    roiv = [0.0] * rank + [1.0] * rank
    if ct == "tf_crop_and_resize":
        roi_den = 10
        roi = [g.int(-3, 5) for _ in range(rank)] + [g.int(5, 13) for _ in range(rank)]
        roiv = [v / roi_den for v in roi]
    extrap = g.pick([None, 0.0, -3.5])
    if mode == "nearest" and g.coin(0.3):
        x = draw_typed(g, shape, "any")
    else:
        x = g.arr(shape)
    # extrapolation_value takes x's dtype as kiln's casts do: integers truncate toward zero,
    # unsigned ones saturate (-3.5 is 0, where NumPy's cast wraps it to 2^64 - 3), bool is v != 0
    e = 0.0 if extrap is None else extrap
    if x.dtype.kind == "u":
        ev = float(np.clip(np.trunc(e), 0, np.iinfo(x.dtype).max))
    else:
        ev = float(np.asarray(e).astype(x.dtype))
    want = onnx_resize(x, sizes, scales, mode, ct, nr, a, exclude, roiv, ev, antialias)
    attrs = dict(sizes=sizes, scales=nums, scale_den=den, mode=mode,
                 coordinate_transformation_mode=ct, nearest_mode=nr,
                 cubic_coeff_a=a if mode == "cubic" else None,
                 exclude_outside=exclude if mode == "cubic" else None, roi=roi, roi_den=roi_den,
                 extrapolation_value=extrap if ct == "tf_crop_and_resize" else None,
                 antialias=antialias or None)
    return Case("resize", {"x": x}, call("resize", ["x"], **attrs), want)


GENERATORS["resize"] = (gen_resize, 40)


# ---- running --------------------------------------------------------------------------------

def tolerance(case):
    return (1e-4, 1e-4) if case.is_f32() else (1e-9, 1e-9)


def compare(case, got):
    want = case.want
    if got.shape != want.shape:
        return f"shape {list(got.shape)}, want {list(want.shape)}"
    rtol, atol = tolerance(case)
    scale = max(1.0, float(np.max(np.abs(want[np.isfinite(want)])))) if want.size and np.isfinite(want).any() else 1.0
    finite = np.isfinite(want) & np.isfinite(got)
    close = np.zeros(want.shape, dtype=bool)
    close[finite] = np.abs(got[finite] - want[finite]) <= atol * scale + rtol * np.abs(want[finite])
    # NaN must meet NaN and an infinity the same infinity
    close |= (np.isnan(got) & np.isnan(want)) | (np.isinf(want) & (got == want))
    bad = ~close
    if not bad.any():
        return None
    i = tuple(int(v) for v in np.argwhere(bad)[0])
    return (f"{int(bad.sum())} of {want.size} elements differ; first at {list(i)}: "
            f"got {got[i]!r}, want {want[i]!r}")


def run_case(kiln, case, workdir, timeout):
    os.makedirs(workdir)
    outdir = os.path.join(workdir, "out")
    os.makedirs(outdir)
    path = os.path.join(workdir, "case.kg")
    with open(path, "w") as f:
        f.write(case.kg())
    for name, a in case.args.items():
        np.save(os.path.join(workdir, name + ".npy"), a)
    cmd = [kiln, "eval", path, "--inputs", workdir, "--out", outdir]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout}s"
    if p.returncode != 0:
        return f"kiln exited with {p.returncode}: {(p.stderr or p.stdout).strip()}"
    try:
        got = np.load(os.path.join(outdir, "y.npy"))
    except OSError as e:
        return f"no output y.npy: {e}"
    return compare(case, np.asarray(got, dtype=np.float64))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kiln", default=os.environ.get("KILN_BIN", "build/kiln"))
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--cases", type=int, default=None, help="cases per op (default: per-op)")
    ap.add_argument("-k", dest="only", default=None, help="run only ops whose name contains this")
    ap.add_argument("-j", dest="jobs", type=int, default=min(8, os.cpu_count() or 1))
    ap.add_argument("-v", dest="verbose", action="store_true")
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = ap.parse_args()

    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    print(f"seed {seed} (replay with --seed {seed})", flush=True)
    if not (os.path.isfile(args.kiln) and os.access(args.kiln, os.X_OK)):
        print(f"skip: kiln binary {args.kiln} not found")
        return 77

    missing = sorted(set(library_ops()) - set(GENERATORS))
    if missing:  # a new op needs a generator here
        print(f"FAIL ops without a test: {', '.join(missing)}")

    cases = []  # (op, index, case seed, Case or exception)
    for op in sorted(GENERATORS):
        if args.only and args.only not in op:
            continue
        gen, n = GENERATORS[op]
        for i in range(args.cases or n):
            cseed = (seed * 1000003 + hash_op(op) * 7919 + i) % 2**63
            try:
                cases.append((op, i, cseed, gen(Gen(cseed))))
            except Exception as e:  # an oracle rejecting a case is a bug in this file
                cases.append((op, i, cseed, e))

    tmp = tempfile.mkdtemp(prefix="kiln_ops_")
    t0 = time.time()
    passed = failed = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futs = []
        for op, i, cseed, case in cases:
            if isinstance(case, Exception):
                futs.append(None)
            else:
                futs.append(pool.submit(run_case, args.kiln, case, os.path.join(tmp, f"{op}_{i}"),
                                        args.timeout))
        for (op, i, cseed, case), fut in zip(cases, futs):
            err = f"oracle failed: {case!r}" if fut is None else fut.result()
            if err is None:
                passed += 1
                if args.verbose:
                    print(f"ok   {op}[{i}]: {case.call}")
                continue
            failed += 1
            print(f"FAIL {op}[{i}] (seed {seed}, case seed {cseed}): {err}")
            if fut is not None:
                shapes = ", ".join(f"{k}{list(a.shape)}" for k, a in case.args.items())
                print(f"     {case.call}   args {shapes}")
    if args.keep or failed:
        print(f"cases kept in {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{passed} passed, {failed} failed ({len(set(c[0] for c in cases))} ops, "
          f"{time.time() - t0:.1f}s, seed {seed})")
    return 1 if failed or missing else 0


def library_ops():
    """The ops of ir/lib.def (KILN_LIB(name, lo, hi) lines)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "ir", "lib.def")
    ops = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("KILN_LIB("):
                ops.append(line[len("KILN_LIB("):].split(",")[0].strip())
    return ops


def hash_op(op):
    """A stable per-op number (Python's hash() of str is salted per process)."""
    h = 0
    for ch in op.encode():
        h = (h * 131 + ch) % 2**31
    return h


if __name__ == "__main__":
    sys.exit(main())
