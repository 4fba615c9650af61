"""Kernel architecture search from PyTorch, in the manner of Canvas: mark the layers to replace
with ``kiln.Placeholder()``, let ``kiln.sample`` invent a kernel legal for every placeholder
(the C sampler of kas/, called through libkiln: kiln_kas_sampler_*), and swap it in with
``kiln.replace``.

    import torch, kiln
    net = MyNet()                                   # holds kiln.Placeholder() layers
    kernel = kiln.sample(net, torch.randn(1, 1, 28, 28), budget={"flops": (0.1, 0.5)}, seed=1)
    print(kernel.code)                              # the PyTorch source of the kernel
    kiln.replace(net, kernel)                       # every placeholder becomes kernel.module(C, K)

See python/README.md.
"""

import atexit
import importlib.util
import os
import random
import shutil
import subprocess
import tempfile

import torch
from torch import nn

from . import libkiln
from .errors import Error

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_TEMP_DIRS = []


@atexit.register
def _remove_temp_dirs():
    for d in _TEMP_DIRS:
        shutil.rmtree(d, ignore_errors=True)


def kiln_binary():
    """The ``kiln`` command: ``$KILN_BIN``, else ``build/kiln`` in this repository, else ``kiln``
    on ``PATH``."""
    env = os.environ.get("KILN_BIN")
    if env:
        return env
    local = os.path.join(_REPO, "build", "kiln")
    if os.path.exists(local):
        return local
    found = shutil.which("kiln")
    if found:
        return found
    raise Error("cannot find the kiln command: set KILN_BIN, build the repository (build/kiln) "
                "or put kiln on PATH")


def run_kiln(args, timeout=None):
    """Runs ``kiln ARGS`` and returns its stdout; a failure raises ``kiln.Error`` with the
    command's stderr. (The search tunes, compiles and times kernels this way; sampling calls
    libkiln directly.)"""
    cmd = [kiln_binary()] + [str(a) for a in args]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise Error("%s: no result within %g s" % (" ".join(cmd[:2]), timeout)) from None
    except OSError as e:
        raise Error("cannot run %s: %s" % (cmd[0], e)) from None
    if r.returncode != 0:
        msg = (r.stderr or r.stdout).strip().splitlines()
        raise Error("kiln %s failed (exit %d): %s" % (args[0], r.returncode,
                                                     msg[-1] if msg else "no message"))
    return r.stdout


class Placeholder(nn.Module):
    """A layer to be replaced by a sampled kernel: a convolution from C to ``out_channels``
    (default C) channels at ``stride`` (1 or 2). Every forward pass records the input's shape
    ``(C, H, W)`` in ``self.shape``. Until replaced it computes the identity (K = C, stride 1),
    ``x[..., ::2, ::2]`` (K = C, stride 2), or a 3x3 convolution created on the first forward
    pass (K != C), so the model runs and trains as it is."""

    def __init__(self, out_channels=None, stride=1):
        super().__init__()
        if stride not in (1, 2):
            raise Error("Placeholder: stride must be 1 or 2, got %r" % (stride,))
        if out_channels is not None and int(out_channels) <= 0:
            raise Error("Placeholder: out_channels must be positive, got %r" % (out_channels,))
        self.out_channels = None if out_channels is None else int(out_channels)
        self.stride = stride
        self.shape = None
        self.fallback = None

    def channels(self):
        """(C, K) of the recorded shape."""
        if self.shape is None:
            raise Error("Placeholder has seen no input: run the model forward once first")
        c = self.shape[0]
        return c, self.out_channels or c

    def forward(self, x):
        if x.dim() != 4:
            raise Error("Placeholder: expected an N x C x H x W input, got shape %s"
                        % (list(x.shape),))
        self.shape = tuple(int(d) for d in x.shape[1:])
        c, k = self.channels()
        if k == c:
            return x if self.stride == 1 else x[..., ::2, ::2]
        if self.fallback is None:
            self.fallback = nn.Conv2d(c, k, 3, stride=self.stride, padding=1,
                                      bias=False).to(x.device, x.dtype)
        return self.fallback(x)

    def extra_repr(self):
        return "out_channels=%s, stride=%d, shape=%s" % (self.out_channels, self.stride,
                                                        self.shape)


def placeholders(model):
    """The model's placeholders as a list of ``(name, parent, attribute, placeholder)``."""
    found = []
    for pname, parent in model.named_modules():
        for attr, child in parent.named_children():
            if isinstance(child, Placeholder):
                found.append(((pname + "." if pname else "") + attr, parent, attr, child))
    return found


def load_module_file(path):
    """Imports a Python file (an emitted kernel) under a fresh name and returns the module."""
    name = "kiln_kernel_%s_%08x" % (os.path.basename(path).split(".")[0],
                                    random.getrandbits(32))
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None:
        raise Error("cannot import %s" % path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Kernel:
    """A sampled kernel. ``module`` is its ``nn.Module`` class, built as ``module(C, K)`` for any
    placeholder; ``code`` its PyTorch source; ``kg`` a dict from each placeholder shape
    ``(C, K, H, W)`` to its kernel graph text (batch 1); ``shapes`` those shapes in the order
    given to the sampler; ``py`` and ``kg_paths`` the files; ``hash``, ``flops``, ``params``
    (relative to the 3x3 convolutions, summed over the shapes), ``design`` (one line), ``values``
    (the sizes the budget solver chose) and ``seed`` / ``index`` (the sampler's seed and the
    kernel's position in that run) as ``kiln sample --json`` reports them."""

    def __init__(self, info, shapes, seed, stride=1):
        self.info = info
        self.shapes = list(shapes)
        self.seed = seed
        self.stride = stride
        self.index = info.get("kernel")
        self.hash = info.get("hash")
        self.flops = info.get("flops")
        self.params = info.get("params")
        self.design = info.get("design")
        self.values = info.get("values", {})
        self.py = info.get("py")
        self.kg_paths = list(info.get("kg", []))
        self._mod = None
        if "code" in info:
            self.code = info["code"]
        else:
            with open(self.py) as f:
                self.code = f.read()
        self.kg = {}
        if "kg_text" in info:
            self.kg = dict(zip(self.shapes, info["kg_text"]))
        else:
            for shape, path in zip(self.shapes, self.kg_paths):
                with open(path) as f:
                    self.kg[shape] = f.read()

    @property
    def module(self):
        if self._mod is None:
            self._mod = load_module_file(self.py)
        return self._mod.Kernel

    def __call__(self, c, k=None):
        return self.module(c, c if k is None else k)

    def __repr__(self):
        return "<kiln.Kernel %s flops %.3g params %.3g: %s>" % (self.hash, self.flops,
                                                               self.params, self.design)


def _range(v, what):
    if isinstance(v, (int, float)):
        return (0.0, float(v))
    try:
        lo, hi = (float(t) for t in v)
    except (TypeError, ValueError):
        raise Error("budget %s must be a number (upper bound) or a (low, high) pair, got %r"
                    % (what, v)) from None
    if not 0 <= lo <= hi:
        raise Error("budget %s range %r: need 0 <= low <= high" % (what, v))
    return (lo, hi)


def _small(v, what, lo, hi):
    v = int(v)
    if not lo <= v <= hi:
        raise Error("sample: %s must be in %d..%d, got %d" % (what, lo, hi, v))
    return v


def sample_kernels(shapes, n=1, seed=None, flops=None, params=None, stride=1, max_ops=None,
                   min_rf=None, out=None, max_tries=None):
    """Runs the C sampler (libkiln's kiln_kas_sampler_*, what ``kiln sample --json --out OUT``
    does) for placeholders ``shapes`` (a list of ``(C, K, H, W)``) and returns ``n`` ``Kernel``
    objects (fewer only if the sampler runs out of designs, which it reports as an error).
    ``out`` (a directory, created) keeps the files; by default a temporary directory removed
    when the process exits."""
    if not shapes:
        raise Error("sample: no placeholder shapes")
    if len(shapes) > 16:
        raise Error("sample: at most 16 distinct placeholder shapes, got %d" % len(shapes))
    if seed is None:
        seed = random.randrange(1 << 31)
    seed = _small(seed, "seed", 0, (1 << 64) - 1)
    n = _small(n, "n", 1, 10000000)
    if flops is not None:
        flops = _range(flops, "flops")
    if params is not None:
        params = _range(params, "params")
    if max_ops is not None:
        max_ops = _small(max_ops, "max_ops", 0, 4096)
    if min_rf is not None:
        min_rf = _small(min_rf, "min_rf", 0, 4096)
    if max_tries is not None:
        max_tries = _small(max_tries, "max_tries", 1, (1 << 32) - 1)
    if out is None:
        out = tempfile.mkdtemp(prefix="kiln-sample-")
        _TEMP_DIRS.append(out)
    else:
        try:
            os.makedirs(out, exist_ok=True)
        except OSError as e:
            raise Error("cannot create %s: %s" % (out, e)) from None
    infos = libkiln.kas_sample(shapes, n, seed, stride=_small(stride, "stride", 0, 4096),
                               flops=flops, params=params, max_ops=max_ops, min_rf=min_rf,
                               max_tries=max_tries, out_dir=out)
    return [Kernel(info, shapes, seed, stride) for info in infos]


def record_shapes(model, example_input):
    """Runs the model once (no gradients, eval mode restored after) and returns its placeholders
    with their shapes as a list of ``(name, placeholder, (C, K, H, W))``."""
    phs = placeholders(model)
    if not phs:
        raise Error("the model holds no kiln.Placeholder")
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(example_input)
    finally:
        model.train(was_training)
    found = []
    for name, _, _, ph in phs:
        if ph.shape is None:
            raise Error("placeholder %s was not reached by the forward pass" % name)
        c, k = ph.channels()
        found.append((name, ph, (c, k, ph.shape[1], ph.shape[2])))
    return found


def sample(model, example_input, budget=None, n=1, seed=None, max_ops=None, min_rf=None,
           out=None):
    """Samples a kernel that can replace every ``kiln.Placeholder`` of ``model``.

    The model is run once on ``example_input`` to record each placeholder's input shape; one
    design is sampled that is legal for all of them (distinct shapes passed once each).
    ``budget``: FLOPs/parameter ranges relative to 3x3 convolutions of the same shapes, as a
    dict ``{"flops": (lo, hi), "params": (lo, hi)}`` (a number means ``(0, number)``), or a
    number / pair for the FLOPs alone; default the sampler's (FLOPs 0.05-1, params 0-1).
    Returns a ``Kernel`` (``n = 1``) or a list of ``n`` kernels."""
    found = record_shapes(model, example_input)
    strides = {ph.stride for _, ph, _ in found}
    if len(strides) != 1:
        raise Error("sample: all placeholders must have the same stride, got %s"
                    % sorted(strides))
    shapes = []
    for _, _, s in found:
        if s not in shapes:
            shapes.append(s)
    flops = params = None
    if isinstance(budget, dict):
        unknown = set(budget) - {"flops", "params"}
        if unknown:
            raise Error("sample: unknown budget keys %s (use flops, params)" % sorted(unknown))
        flops, params = budget.get("flops"), budget.get("params")
    elif budget is not None:
        flops = budget
    kernels = sample_kernels(shapes, n=n, seed=seed, flops=flops, params=params,
                             stride=strides.pop(), max_ops=max_ops, min_rf=min_rf, out=out)
    return kernels[0] if n == 1 else kernels


def replace(model, kernel):
    """Swaps every ``kiln.Placeholder`` of ``model`` (in place) for ``kernel(C, K)``: a
    ``Kernel`` from ``kiln.sample``, an ``nn.Module`` class or any factory ``f(C, K)``. Each
    placeholder must have recorded its shape (a forward pass, e.g. by ``kiln.sample``). The new
    layers are moved to the placeholder's device and dtype when it had a fallback convolution,
    else left as created. Returns the model."""
    factory = kernel.module if isinstance(kernel, Kernel) else kernel
    if not callable(factory):
        raise Error("replace: expected a kiln.Kernel, an nn.Module class or a factory f(C, K)")
    phs = placeholders(model)
    if not phs:
        raise Error("replace: the model holds no kiln.Placeholder")
    for name, parent, attr, ph in phs:
        if ph.shape is None:
            raise Error("replace: placeholder %s has seen no input; run the model forward once "
                        "(kiln.sample does)" % name)
    for name, parent, attr, ph in phs:
        c, k = ph.channels()
        layer = factory(c, k)
        if not isinstance(layer, nn.Module):
            raise Error("replace: the factory returned %s, not an nn.Module" % type(layer).__name__)
        if ph.fallback is not None:
            w = ph.fallback.weight
            layer = layer.to(w.device, w.dtype)
        setattr(parent, attr, layer)
    return model
