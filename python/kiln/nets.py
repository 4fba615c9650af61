"""Whole torchvision networks for kiln's ONNX tests and benchmarks (needs PyTorch,
torchvision and ONNX; nothing is downloaded).

    net = kiln.nets.build("resnet18", seed=0)           # random weights, eval mode
    x = torch.randn(1, 3, 224, 224)
    kiln.nets.export(net, x, "resnet18.onnx")          # opset 13, input "x", output "y"
    # kiln compile resnet18.onnx -o r.so --save-weights W
    mod = kiln.load("r.so")
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


def module_args(mod, x, weights_dir):
    """The arguments of ``mod`` (a ``kiln.Module`` compiled from an exported network) in its
    order: the NumPy input ``x`` for its one input, and every weight read from
    ``weights_dir/NAME.npy`` (as written by ``kiln compile --save-weights``) as 64-byte
    aligned float32 arrays."""
    import numpy as np

    n_in = sum(1 for a in mod.args if a.role == "input")
    if n_in != 1:
        raise Error("expected a module with one input, got %d" % n_in)
    args = []
    for a in mod.args:
        if a.role == "input":
            args.append(aligned(np.ascontiguousarray(x, dtype=np.float32)))
            continue
        path = os.path.join(weights_dir, a.name + ".npy")
        w = np.load(path).astype(np.float32)
        if list(w.shape) != list(a.shape):
            raise Error("%s has shape %s, the module's weight %s has %s"
                        % (path, list(w.shape), a.name, list(a.shape)))
        args.append(aligned(w))
    return args
