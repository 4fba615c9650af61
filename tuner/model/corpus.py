#!/usr/bin/python3
"""Writes the cost model's training corpus: one .kg file per workload, batch 1.

The shapes are the kinds CNNs use (ResNet, MobileNet, SqueezeNet, Inception and
EfficientNet-family channel counts and spatial sizes, both layouts, since the graph pipeline
makes convolutions channels-last), mixed on purpose rather than copied from one network:
convolutions of many shapes, strides, groups (depthwise included), matmul and batched matmul,
pooling, reductions and elementwise chains. Usage: corpus.py OUTDIR (prints the files)."""
import os
import sys


def conv(name, c, k, hw, kern=3, stride=1, pad=None, groups=1, layout="nhwc", act="relu"):
    """conv2d + bias + activation (relu, relu6 or none); kern an int or (kh, kw)."""
    kh, kw = (kern, kern) if isinstance(kern, int) else kern
    if pad is None:
        pad = [kh // 2, kw // 2]
    h, w = (hw, hw) if isinstance(hw, int) else hw
    xs = [1, h, w, c] if layout == "nhwc" else [1, c, h, w]
    lines = [
        f"# conv {c}->{k} {h}x{w} kernel {kh}x{kw} stride {stride} groups {groups} {layout}",
        f"input  x: f32{xs}",
        f"weight w: f32[{k}, {c // groups}, {kh}, {kw}]",
        f"weight b: f32[{k}]",
        f"y = conv2d(x, w, b, stride={stride}, padding={pad}, groups={groups}, "
        f'layout="{layout}")',
    ]
    out = "y"
    if act == "relu":
        lines.append("r = relu(y)")
        out = "r"
    elif act == "relu6":
        idx = "n, h, w, c" if layout == "nhwc" else "n, c, h, w"
        lines.append(f"r[{idx}] = min(max(y[{idx}], 0.0), 6.0)")
        out = "r"
    lines.append(f"output {out}")
    return name, lines


def dense(name, m, k, n):
    return name, [
        f"# dense {m}x{k} -> {n} with bias",
        f"input  x: f32[{m}, {k}]",
        f"weight w: f32[{n}, {k}]",
        f"weight b: f32[{n}]",
        "y = dense(x, w, b)",
        "output y",
    ]


def matmul(name, m, k, n):
    return name, [
        f"# matmul {m}x{k} @ {k}x{n}",
        f"input  a: f32[{m}, {k}]",
        f"weight b: f32[{k}, {n}]",
        "c = matmul(a, b)",
        "output c",
    ]


def bmm(name, bt, m, k, n, weight=True):
    kind = "weight" if weight else "input "
    return name, [
        f"# batched matmul {bt} x {m}x{k} @ {k}x{n}",
        f"input  a: f32[{bt}, {m}, {k}]",
        f"{kind} b: f32[{bt}, {k}, {n}]",
        "c = batch_matmul(a, b)",
        "output c",
    ]


def pool(name, op, c, hw, kern=3, stride=2, pad=1, layout="nhwc"):
    xs = [1, hw, hw, c] if layout == "nhwc" else [1, c, hw, hw]
    args = "" if op.startswith("global") else f", kernel={kern}, stride={stride}, padding={pad}"
    return name, [
        f"# {op} {c} channels {hw}x{hw} {layout}",
        f"input  x: f32{xs}",
        f'y = {op}(x{args}, layout="{layout}")',
        "output y",
    ]


def softmax(name, shape):
    return name, [
        f"# softmax over the last axis of {shape}",
        f"input  x: f32{list(shape)}",
        f"y = softmax(x, axis={len(shape) - 1})",
        "output y",
    ]


def mean_rows(name, r, n):
    return name, [
        f"# mean over the last axis of {r}x{n}",
        f"input  x: f32[{r}, {n}]",
        f"s[i] += x[i, j]",
        f"m[i] = s[i] * {1.0 / n!r}",
        "output m",
    ]


def layer_norm(name, r, n):
    return name, [
        f"# layer norm over the last axis of {r}x{n}",
        f"input  x: f32[{r}, {n}]",
        f"weight g: f32[{n}]",
        f"weight b: f32[{n}]",
        "y = layer_norm(x, g, b, axis=1)",
        "output y",
    ]


def residual(name, c, hw):
    return name, [
        f"# residual add and relu, {c} channels {hw}x{hw} nhwc",
        f"input  x: f32[1, {hw}, {hw}, {c}]",
        f"input  s: f32[1, {hw}, {hw}, {c}]",
        "y[n, h, w, c] = max(x[n, h, w, c] + s[n, h, w, c], 0.0)",
        "output y",
    ]


def swish(name, c, hw):
    return name, [
        f"# swish (x * sigmoid(x)) then squeeze-excitation scale, {c} channels {hw}x{hw} nhwc",
        f"input  x: f32[1, {hw}, {hw}, {c}]",
        f"input  e: f32[1, 1, 1, {c}]",
        "a = silu(x)",
        "g = sigmoid(e)",
        "y[n, h, w, c] = a[n, h, w, c] * g[0, 0, 0, c]",
        "output y",
    ]


def hswish(name, c, hw):
    return name, [
        f"# hard swish x * min(max(x + 3, 0), 6) / 6, {c} channels {hw}x{hw} nchw",
        f"input  x: f32[1, {c}, {hw}, {hw}]",
        "y[n, c, h, w] = x[n, c, h, w] * min(max(x[n, c, h, w] + 3.0, 0.0), 6.0) * 0.16666667",
        "output y",
    ]


WORKLOADS = [
    # ordered so that any prefix mixes every family (a shorter run trains on a prefix)
    conv("stem_s2_3x32_224", 3, 32, 224, stride=2),
    conv("stem_7x7_3x64_224_nchw", 3, 64, 224, kern=7, stride=2, layout="nchw"),
    conv("stem_s2_3x24_192", 3, 24, 192, stride=2, act="relu6"),
    conv("c3_64_56", 64, 64, 56),
    conv("c3_64x128_56_s2", 64, 128, 56, stride=2),
    conv("c3_128_28_nchw", 128, 128, 28, layout="nchw"),
    conv("dw3_32_112", 32, 32, 112, groups=32, act="relu6"),
    conv("c1_24x144_56", 24, 144, 56, kern=1, act="relu6"),
    matmul("mm_256", 256, 256, 256),
    pool("maxpool3_s2_64_112", "max_pool2d", 64, 112),
    softmax("softmax_1000", [1, 1000]),
    residual("residual_64_56", 64, 56),
    conv("dw3_144_56_s2", 144, 144, 56, stride=2, groups=144, act="relu6"),
    conv("c1_256x1024_14", 256, 1024, 14, kern=1),
    bmm("bmm_wino_16x196x64x64", 16, 196, 64, 64),
    pool("gap_1280_7", "global_avg_pool2d", 1280, 7),
    conv("c3_256_14", 256, 256, 14),
    swish("swish_se_96_56", 96, 56),
    conv("dw5_240_14", 240, 240, 14, kern=5, groups=240, act="none"),
    conv("c1_32x16_112", 32, 16, 112, kern=1, act="none"),
    dense("dense_512x1000", 1, 512, 1000),
    conv("c5_48x64_35", 48, 64, 35, kern=5),
    conv("g32_128_28", 128, 128, 28, groups=32),
    mean_rows("mean_256x784", 256, 784),
    conv("dw3_192_28_nchw", 192, 192, 28, groups=192, layout="nchw"),
    conv("c1_160x960_7", 160, 960, 7, kern=1, act="relu6"),
    bmm("bmm_attn_8x128x64x128", 8, 128, 64, 128, weight=False),
    pool("avgpool3_192_35", "avg_pool2d", 192, 35, stride=1),
    conv("c3_512_7", 512, 512, 7, act="none"),
    hswish("hswish_72_28_nchw", 72, 28),
    conv("dw3_384_14", 384, 384, 14, groups=384, act="relu6"),
    conv("c1_96x24_56_nchw", 96, 24, 56, kern=1, layout="nchw", act="none"),
    matmul("mm_196x768x384", 196, 768, 384),
    conv("c1x7_128_17", 128, 128, 17, kern=(1, 7)),
    softmax("softmax_8x128x128", [8, 128, 128]),
    conv("c3_288x384_35_s2_valid", 288, 384, 35, stride=2, pad=0),
    conv("dw5_672_14_s2", 672, 672, 14, kern=5, stride=2, groups=672, act="none"),
    conv("c1_192x64_35", 192, 64, 35, kern=1),
    bmm("bmm_wino_36x49x128x160", 36, 49, 128, 160),
    pool("maxpool3_s2_96_109_nchw", "max_pool2d", 96, 109, pad=0, layout="nchw"),
    conv("c3_96_35", 96, 96, 35, act="none"),
    layer_norm("layernorm_196x384", 196, 384),
    conv("dw3_960_7", 960, 960, 7, groups=960),
    conv("c1_64x128_56_s2", 64, 128, 56, kern=1, stride=2, act="none"),
    dense("dense_1280x1000", 1, 1280, 1000),
    conv("c7x1_160x192_17_nchw", 160, 192, 17, kern=(7, 1), layout="nchw"),
    pool("gap_512_7_nchw", "global_avg_pool2d", 512, 7, layout="nchw"),
    conv("c3_16x64_55_nchw", 16, 64, 55, layout="nchw"),
    conv("c1_128x16_54_nchw", 128, 16, 54, kern=1, layout="nchw"),
    conv("c1_240x40_28", 240, 40, 28, kern=1, act="none"),
    conv("c1_320x1280_7_nchw", 320, 1280, 7, kern=1, layout="nchw"),
    conv("g4_240_28_nchw", 240, 240, 28, kern=1, groups=4, layout="nchw", act="none"),
    conv("c3_160x320_14_nchw", 160, 320, 14, layout="nchw"),
]


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: corpus.py OUTDIR")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    names = set()
    for name, lines in WORKLOADS:
        assert name not in names, name
        names.add(name)
        path = os.path.join(out, name + ".kg")
        text = "\n".join(lines) + "\n"
        old = None
        if os.path.exists(path):
            with open(path) as f:
                old = f.read()
        if old != text:  # unchanged files keep their time stamps
            with open(path, "w") as f:
                f.write(text)
        print(path)


if __name__ == "__main__":
    main()
