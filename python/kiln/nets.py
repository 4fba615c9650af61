"""Whole networks for kiln's ONNX tests and benchmarks: torchvision's CNNs and transformers
written with PyTorch's layers (needs PyTorch, torchvision and ONNX; nothing is downloaded).

    net = kiln.nets.build("resnet18", seed=0)           # random weights, eval mode
    x = torch.randn(1, 3, 224, 224)
    kiln.nets.export(net, x, "resnet18.onnx")          # opset 13, input "x", output "y"
    # kiln compile resnet18.onnx -o r.so          (the weights are built into r.so)
    mod = kiln.load("r.so")
    y = mod(x.numpy())
    # with --external-weights --save-weights W the module takes every weight as well:
    y = mod(*kiln.nets.module_args(mod, x.numpy(), "W"))

Used by tests/py/test_onnx_nets.py, benchmarks/bench_e2e.py and benchmarks/bench_models.py,
so all see the same networks and the same export.
"""

import os

from .errors import Error
from .module import aligned

# name -> (torchvision constructor name, its keyword arguments besides weights=None)
NETS = {
    "resnet18": ("resnet18", {}),
    "mobilenet_v2": ("mobilenet_v2", {}),
    "squeezenet1_1": ("squeezenet1_1", {}),
    "resnet34": ("resnet34", {}),
    "mnasnet1_0": ("mnasnet1_0", {}),  # found by neural architecture search (MnasNet)
    # Inception-style; without the auxiliary classifiers, which eval mode does not run; its
    # own initialisation (and PyTorch's default) shrink the activations layer by layer until
    # the output is the classifier's bias whatever the input, so it is reinitialised (KAIMING)
    "googlenet": ("googlenet", {"aux_logits": False, "init_weights": False}),
    "densenet121": ("densenet121", {}),
    "efficientnet_b0": ("efficientnet_b0", {}),
    "regnet_x_400mf": ("regnet_x_400mf", {}),
    "shufflenet_v2_x1_0": ("shufflenet_v2_x1_0", {}),  # output the bias too: KAIMING
    "resnext50_32x4d": ("resnext50_32x4d", {}),
}

# networks whose weights are redrawn He-normal (fan in, gain for ReLU: variance kept from layer
# to layer), so that their output depends on the input and a comparison of outputs means
# something
KAIMING = frozenset({"googlenet", "shufflenet_v2_x1_0"})

# networks whose tasks are in the shipped cost model's training corpus: none, the corpus is
# workloads of synthetic shapes (convolutions, matmuls, pooling, ...), no whole network
CORPUS = frozenset()


def build(name, seed):
    """torchvision's ``name`` (a key of ``NETS``) with random weights drawn after
    ``torch.manual_seed(seed)`` (redrawn for the networks of ``KAIMING``), in eval mode."""
    import torch
    import torchvision

    if name not in NETS:
        raise Error("unknown network %r; known: %s" % (name, ", ".join(sorted(NETS))))
    ctor, kwargs = NETS[name]
    torch.manual_seed(seed)
    net = getattr(torchvision.models, ctor)(weights=None, **kwargs).eval()
    if name in KAIMING:
        for m in net.modules():
            if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)):
                torch.nn.init.kaiming_normal_(m.weight, mode="fan_in", nonlinearity="relu")
    return net


def export(net, x, path, opset=13, keep_bn=False):
    """Exports ``net`` traced on ``x`` to ONNX at ``path`` (one input ``x``, one output ``y``).
    PyTorch's exporter folds the batch norms of an eval-mode network into its convolutions;
    ``keep_bn`` keeps them as BatchNormalization nodes (for kiln's own folding)."""
    import torch

    extra = {}
    if keep_bn:
        extra = dict(training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False)
    with torch.no_grad():
        torch.onnx.export(net, x, path, opset_version=opset, input_names=["x"],
                          output_names=["y"], **extra)


# Transformers written with PyTorch's and torchvision's own layers (random weights, nothing
# downloaded): name -> full sizes; ``transformer`` takes smaller ones for tests.
TRANSFORMERS = {
    # BERT-base encoder: post-norm, GELU, a padding mask
    "bert_base": dict(layers=12, hidden=768, heads=12, seq=128, vocab=30522),
    # GPT-2-small decoder: pre-norm, a causal mask
    "gpt2_small": dict(layers=12, hidden=768, heads=12, seq=128, vocab=50257),
    # torchvision's ViT-B/16 (torchvision.models.VisionTransformer at vit_b_16's sizes)
    "vit_b_16": dict(layers=12, hidden=768, heads=12, image=224, patch=16),
}


def transformer(name, seed, **sizes):
    """A transformer of ``TRANSFORMERS`` with random weights drawn after
    ``torch.manual_seed(seed)``, in eval mode, and example inputs for it: returns ``(net,
    inputs, input_names)``.

    - ``bert_base``: token, position and segment embeddings, a layer norm, post-norm encoder
      layers (GELU, dropout 0) with a key padding mask from the ``mask`` input (the last quarter
      of the tokens padded); inputs ``ids``, ``seg``, ``mask`` ([1, seq] int64).
    - ``gpt2_small``: token and position embeddings, pre-norm layers with a causal mask, a final
      layer norm and the vocabulary projection; input ``ids``.
    - ``vit_b_16``: torchvision's VisionTransformer; input ``x`` [1, 3, image, image].

    Keyword arguments (the keys of the model's ``TRANSFORMERS`` entry) override the full
    sizes; the MLP is 4 times the hidden width."""
    import torch
    from torch import nn

    if name not in TRANSFORMERS:
        raise Error("unknown transformer %r; known: %s" % (name, ", ".join(sorted(TRANSFORMERS))))
    unknown = set(sizes) - set(TRANSFORMERS[name])
    if unknown:
        raise Error("%s has no size %s" % (name, ", ".join(sorted(unknown))))
    z = dict(TRANSFORMERS[name], **{k: v for k, v in sizes.items() if v is not None})
    L, H, A = z["layers"], z["hidden"], z["heads"]
    torch.manual_seed(seed)
    if name == "vit_b_16":
        import torchvision

        net = torchvision.models.VisionTransformer(z["image"], z["patch"], L, A, H, 4 * H)
        # torchvision starts the classifier at zero, so the output would not depend on the input
        nn.init.normal_(net.heads.head.weight, std=0.02)
        return net.eval(), (torch.randn(1, 3, z["image"], z["image"]),), ["x"]
    S, V = z["seq"], z["vocab"]

    def layer(pre):
        return nn.TransformerEncoderLayer(H, A, 4 * H, dropout=0.0, activation="gelu",
                                          batch_first=True, norm_first=pre)

    class Bert(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos, self.seg = nn.Embedding(V, H), nn.Embedding(S, H), nn.Embedding(2, H)
            self.ln = nn.LayerNorm(H)
            self.enc = nn.TransformerEncoder(layer(False), L, enable_nested_tensor=False)

        def forward(self, ids, seg, mask):
            p = torch.arange(ids.shape[1]).unsqueeze(0)
            h = self.ln(self.tok(ids) + self.pos(p) + self.seg(seg))
            return self.enc(h, src_key_padding_mask=mask == 0)

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = nn.Embedding(V, H), nn.Embedding(S, H)
            self.dec = nn.TransformerEncoder(layer(True), L, norm=nn.LayerNorm(H),
                                             enable_nested_tensor=False)
            self.head = nn.Linear(H, V, bias=False)

        def forward(self, ids):
            n = ids.shape[1]
            i = torch.arange(n)
            # f32 (torch.where on two Python floats would trace as f64 and promote the scores)
            causal = torch.zeros(n, n).masked_fill(i.unsqueeze(0) > i.unsqueeze(1), float("-inf"))
            return self.head(self.dec(self.tok(ids) + self.pos(i.unsqueeze(0)), mask=causal))

    ids = torch.randint(0, V, (1, S))
    if name == "bert_base":
        seg = (torch.arange(S) >= S // 2).long().unsqueeze(0)
        mask = (torch.arange(S) < S - S // 4).long().unsqueeze(0)
        return Bert().eval(), (ids, seg, mask), ["ids", "seg", "mask"]
    return GPT().eval(), (ids,), ["ids"]


def export_transformer(net, inputs, names, path, opset=13):
    """Exports a ``transformer`` to ONNX at ``path`` with a symbolic ``batch`` dimension on
    every input, and a symbolic ``seq`` one on token inputs (compile it with ``--input-shape
    batch=B [--input-shape seq=S]``), and one output ``y``."""
    import torch

    # traced with gradients on: under no_grad, PyTorch's encoder layers take a fused fast path
    # that the exporter cannot write
    dyn = {n: {0: "batch"} if x.is_floating_point() else {0: "batch", 1: "seq"}
           for n, x in zip(names, inputs)}
    torch.onnx.export(net, tuple(inputs), path, opset_version=opset, input_names=names,
                      output_names=["y"], dynamic_axes=dyn)


def module_args(mod, x, weights_dir=None):
    """The arguments of ``mod`` (a ``kiln.Module`` compiled from an exported network) in its
    order: ``x`` for its inputs (one NumPy array for a module with one input, else a list of
    them in the module's input order), each converted to the input's dtype, and, for a module
    compiled with ``--external-weights``, every weight it takes read from
    ``weights_dir/NAME.npy`` (as written by ``kiln compile --save-weights``) in the weight's
    dtype, all 64-byte aligned. A module with its weights built in (the default) takes none:
    ``weights_dir`` is then not read."""
    import numpy as np

    ins = [a for a in mod.args if a.role == "input"]
    xs = list(x) if isinstance(x, (list, tuple)) else [x]
    if len(xs) != len(ins):
        raise Error("expected %d inputs for a module with inputs %s, got %d"
                    % (len(ins), [a.name for a in ins], len(xs)))
    xs.reverse()
    args = []
    for a in mod.args:
        if a.role == "output":
            continue
        if a.role == "input":
            v = np.asarray(xs.pop())
            if list(v.shape) != list(a.shape):
                raise Error("input %s has shape %s, the module's has %s"
                            % (a.name, list(v.shape), list(a.shape)))
            args.append(aligned(np.ascontiguousarray(v, dtype=a.dtype.numpy)))
            continue
        if weights_dir is None:
            raise Error("the module takes weight %s as an argument (compiled with "
                        "--external-weights): pass the directory --save-weights wrote"
                        % a.name)
        path = os.path.join(weights_dir, a.name + ".npy")
        w = np.load(path).astype(a.dtype.numpy)
        if list(w.shape) != list(a.shape):
            raise Error("%s has shape %s, the module's weight %s has %s"
                        % (path, list(w.shape), a.name, list(a.shape)))
        args.append(aligned(w))
    return args
