"""``torch.compile(model, backend="kiln")``: a TorchDynamo backend that compiles each FX graph
Dynamo captures with kiln (PyTorch 2; python/README.md "torch.compile").

    import torch, kiln.torch_backend        # registers the backend "kiln"
    net = torchvision.models.resnet18().eval()
    fast = torch.compile(net, backend="kiln", options={"tune": "10m"})
    with torch.no_grad():
        y = fast(torch.randn(1, 3, 224, 224))

Each graph goes through ONNX: the graph's parameters and buffers (Dynamo passes them as graph
inputs) become ONNX initializers, the graph is exported with PyTorch's TorchScript-based ONNX
exporter on the example inputs, ``kiln compile``d to a shared object (``--external-weights
--save-weights``: the weights stay arguments; their values as kiln prepared them are saved) and loaded. Calls pass the real inputs and the weights zero-copy
through DLPack (``kiln.Module``); a weight kiln left unchanged is the parameter tensor itself.

A graph kiln cannot take (training, dynamic shapes, a device or dtype kiln does not run, an
export or a ``kiln compile`` that fails) runs its own PyTorch code instead; the reason is logged
once per reason (logger ``kiln.torch``, level WARNING) and counted in ``stats["fallbacks"]``.

Compiled modules are cached on disk (``options["cache"]``, else ``$KILN_TORCH_CACHE``, else
``~/.cache/kiln/torch``) under a key of the graph's code and tensors, the input shapes and
dtypes, the target, this CPU, the options and kiln's ABI version; a later process loads the
entry without compiling (``stats["hits"]``), and an entry whose module was built for another ABI
version or target is rebuilt (``stats["rebuilt"]``).
"""

import hashlib
import json
import logging
import os
import platform
import shutil
import subprocess
import tempfile
import weakref

import torch

from . import module as _module
from .errors import Error
from .module import aligned, load

log = logging.getLogger("kiln.torch")

# what the backend did in this process (tests read it): graphs compiled with kiln, cache entries
# loaded, entries found stale and rebuilt, graphs left to PyTorch
stats = {"compiled": 0, "hits": 0, "rebuilt": 0, "fallbacks": 0}
_warned = set()
_live = weakref.WeakSet()  # the compiled graphs alive (live())


def live():
    """The graphs this process compiled with kiln that are still in use (their ``mod``: the
    ``kiln.Module``; ``args``: per module argument ``(kind, value, kiln.Arg)``)."""
    return list(_live)

OPTIONS = ("tune", "db", "cache", "target", "threads", "kiln", "keep_onnx")
# dtypes kiln's ONNX import and modules take from PyTorch
_DTYPES = {torch.float32, torch.int64, torch.int32, torch.bool}


class _Fallback(Exception):
    """A reason to leave the graph to PyTorch."""


def _fallback(gm, reason):
    stats["fallbacks"] += 1
    if reason not in _warned:
        _warned.add(reason)
        log.warning("kiln: graph left to PyTorch: %s", reason)
    return gm.forward


def _kiln_cmd(opts):
    if opts.get("kiln"):
        return opts["kiln"]
    env = os.environ.get("KILN_BIN")
    if env:
        return env
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    built = os.path.join(repo, "build", "kiln")
    if os.path.isfile(os.path.join(repo, "CMakeLists.txt")) and os.path.exists(built):
        return built
    found = shutil.which("kiln")
    if found:
        return found
    raise _Fallback("cannot find the kiln command: set KILN_BIN, build the repository "
                    "(build/kiln) or put kiln on PATH")


def host_id():
    """This CPU, for cache keys: the machine, the CPU model and its feature flags."""
    parts = [platform.machine()]
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                k = line.split(":", 1)[0].strip()
                if k in ("model name", "flags", "Features", "CPU part") and line not in parts:
                    parts.append(line.strip())
                if line.strip() == "":
                    break  # the first processor is enough
    except OSError:
        pass
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def cache_dir(opts=None):
    d = (opts or {}).get("cache") or os.environ.get("KILN_TORCH_CACHE")
    return d or os.path.join(os.path.expanduser("~"), ".cache", "kiln", "torch")


def _parse_options(options):
    opts = dict(options or {})
    unknown = sorted(set(opts) - set(OPTIONS))
    if unknown:
        raise Error("backend kiln: unknown option%s %s; known: %s" % (
            "s" if len(unknown) > 1 else "", ", ".join(unknown), ", ".join(OPTIONS)))
    if opts.get("threads") is not None and int(opts["threads"]) < 0:
        raise Error("backend kiln: option threads must be >= 0, got %r" % opts["threads"])
    tune = opts.get("tune")
    if tune is not None and (not isinstance(tune, str) or not tune.strip()):
        raise Error("backend kiln: option tune is a duration such as \"10m\", got %r" % (tune,))
    return opts


def _is_state(node, example):
    """Whether a placeholder of Dynamo's graph is a parameter or buffer of the model."""
    ga = node.meta.get("grapharg")
    src = getattr(getattr(ga, "source", None), "name", None)
    name = src() if callable(src) else src
    if isinstance(name, str) and ("._parameters[" in name or "._buffers[" in name):
        return True
    return isinstance(example, torch.nn.Parameter)


def _key(gm, inputs, state, opts):
    h = hashlib.sha256()

    def add(*xs):
        for x in xs:
            h.update(str(x).encode())
            h.update(b"\0")

    add("kiln-torch", 1, _module.ABI_VERSION, opts.get("target") or "llvm", host_id(),
        opts.get("tune") or "", gm.code)
    for x, s in zip(inputs, state):
        add(tuple(x.shape), x.dtype, s)
        if s:
            h.update(x.detach().contiguous().numpy().tobytes())
    for k, v in sorted(gm.state_dict().items()):
        add(k, tuple(v.shape), v.dtype)
        h.update(v.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:32]


def _encoder_layer(src, embed_dim, num_heads, qkv_w, qkv_b, proj_w, proj_b, use_gelu, norm_first,
                   eps, n1w, n1b, n2w, n2b, l1w, l1b, l2w, l2b, mask=None, mask_type=None):
    """``torch._transformer_encoder_layer_fwd`` (the fused inference path that
    ``nn.TransformerEncoderLayer`` takes under no_grad, batch first) written with the ops the
    ONNX exporter writes; without a mask."""
    import math

    import torch.nn.functional as F

    if mask is not None:
        raise _Fallback("a fused transformer encoder layer with a mask")
    B, S, E = src.shape
    H = int(num_heads)
    D = E // H

    def attention(x):
        q, k, v = F.linear(x, qkv_w, qkv_b).chunk(3, dim=-1)
        q, k, v = (t.reshape(B, S, H, D).transpose(1, 2) for t in (q, k, v))
        a = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(D), dim=-1)
        return F.linear(torch.matmul(a, v).transpose(1, 2).reshape(B, S, E), proj_w, proj_b)

    def ff(x):
        h = F.linear(x, l1w, l1b)
        return F.linear(F.gelu(h) if use_gelu else torch.relu(h), l2w, l2b)

    def norm(x, w, b):
        return F.layer_norm(x, (E,), w, b, eps)

    if norm_first:
        x = src + attention(norm(src, n1w, n1b))
        return x + ff(norm(x, n2w, n2b))
    x = norm(src + attention(src), n1w, n1b)
    return norm(x + ff(x), n2w, n2b)


# fused inference kernels Dynamo records that the ONNX exporter cannot write -> their plain form
_UNFUSE = {torch._transformer_encoder_layer_fwd: _encoder_layer}


def _export(gm, inputs, state, path):
    """Writes the graph to ONNX at ``path``: the state placeholders as initializers named after
    them, the others as inputs in0, in1, ...; outputs out0, out1, ...; returns the output count."""
    g = torch.fx.Graph()
    attrs = {}
    env = {}
    for n in gm.graph.nodes:
        if n.op in ("get_attr", "call_module"):
            obj = gm
            for part in n.target.split("."):
                obj = getattr(obj, part)
            attrs[n.target] = obj
    real = []
    for n, x, s in zip([n for n in gm.graph.nodes if n.op == "placeholder"], inputs, state):
        if s:
            attrs[n.name] = x.detach()
            env[n] = g.get_attr(n.name)
        else:
            env[n] = g.placeholder(n.name)
            real.append(x)
    nout = 0
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            continue
        if n.op == "output":
            outs = n.args[0]
            outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
            if not all(isinstance(o, torch.fx.Node) for o in outs):
                raise _Fallback("the graph returns a value that is not a tensor")
            nout = len(outs)
            g.output(tuple(env[o] for o in outs))
            continue
        env[n] = g.node_copy(n, lambda a: env[a])
        if n.op == "call_function" and n.target in _UNFUSE:
            env[n].target = _UNFUSE[n.target]
    m = torch.fx.GraphModule(attrs, g)
    names = ["in%d" % i for i in range(len(real))]
    with torch.no_grad():
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(m, tuple(real), path, dynamo=False, opset_version=17,
                              input_names=names, output_names=["out%d" % i for i in range(nout)])
    return nout


def _run(cmd, what):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        lines = [line for line in r.stdout.splitlines() if line.strip()]
        msg = next((line for line in lines if "error" in line), lines[-1] if lines else "")
        raise _Fallback("%s failed (exit %d): %s" % (what, r.returncode, msg.strip()))


def _build(gm, inputs, state, opts, entry):
    """Exports, (tunes,) compiles the graph into the directory ``entry``, atomically."""
    parent = os.path.dirname(entry)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".build-", dir=parent)
    try:
        onnx = os.path.join(tmp, "model.onnx")
        try:
            _export(gm, inputs, state, onnx)
        except _Fallback:
            raise
        except Exception as e:  # the exporter's own errors: an op ONNX has no mapping for
            raise _Fallback("ONNX export failed: %s" % str(e).strip().splitlines()[0]) from None
        kiln = _kiln_cmd(opts)
        target = ["--target", opts["target"]] if opts.get("target") else []
        db = []
        if opts.get("tune"):
            dbp = os.path.abspath(opts.get("db") or os.path.join(cache_dir(opts), "records.db"))
            _run([kiln, "tune", onnx, "--time", opts["tune"], "--db", dbp, "--quiet"] + target,
                 "kiln tune")
            db = ["--db", dbp]
        elif opts.get("db"):
            db = ["--db", os.path.abspath(opts["db"])]
        else:
            db = ["--no-db"]
        # a name of its own per build: dlopen gives back the module already loaded under a path,
        # so a rebuilt entry must not reuse its predecessor's file name
        so = "module-%s.so" % os.urandom(6).hex()
        # weights stay arguments (--external-weights) so the parameters themselves are passed
        _run([kiln, "compile", onnx, "-o", os.path.join(tmp, so), "--external-weights",
              "--save-weights",
              os.path.join(tmp, "weights")] + db + target, "kiln compile")
        mod = load(os.path.join(tmp, so))
        info = {"module": so, "abi_version": _module.ABI_VERSION,
                "target": opts.get("target") or "llvm",
                "host": host_id(), "module_target": mod.metadata.get("target"),
                "tune": opts.get("tune")}
        with open(os.path.join(tmp, "entry.json"), "w") as f:
            json.dump(info, f, indent=1)
        if not opts.get("keep_onnx"):
            os.remove(onnx)
        if os.path.exists(entry):
            shutil.rmtree(entry, ignore_errors=True)
        os.rename(tmp, entry)
        tmp = None
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


def _short(target):
    t = repr(target)
    return t if len(t) <= 64 else t[:60] + "...'"


def _open(entry, opts):
    """The entry's module, or None with the reason it cannot be used."""
    try:
        with open(os.path.join(entry, "entry.json")) as f:
            info = json.load(f)
    except (OSError, ValueError) as e:
        return None, "unreadable entry.json (%s)" % e
    want = {"abi_version": _module.ABI_VERSION, "target": opts.get("target") or "llvm",
            "host": host_id()}
    for k, v in want.items():
        if info.get(k) != v:
            return None, "built for %s %r, not %r" % (k, info.get(k), v)
    so = info.get("module")
    if not isinstance(so, str) or os.sep in so or not so.endswith(".so"):
        return None, "entry.json names no module"
    try:
        mod = load(os.path.join(entry, so))
    except Error as e:
        return None, str(e)
    if mod.metadata.get("target") != info.get("module_target"):
        return None, "its module was built for target %s, not %s" % (
            _short(mod.metadata.get("target")), _short(info.get("module_target")))
    return mod, None


class _Compiled:
    """The callable returned to Dynamo: the kiln module with its weights bound."""

    def __init__(self, mod, entry, placeholders, inputs, state, threads):
        import numpy as np

        self.mod = mod
        if threads is not None:
            mod.set_num_threads(int(threads))
        self.real = [i for i, s in enumerate(state) if not s]
        ins = [a for a in mod.args if a.role == "input"]
        if len(ins) != len(self.real):
            raise _Fallback("the module has %d inputs, the graph %d" % (len(ins), len(self.real)))
        live = {n: x for n, x, s in zip(placeholders, inputs, state) if s}
        self.args = []  # per module argument: ("input", k) or ("weight", tensor)
        k = 0
        for a in mod.args:
            if a.role == "input":
                self.args.append(("input", self.real[k], a))
                k += 1
                continue
            saved = np.load(os.path.join(entry, "weights", a.name + ".npy"))
            t = live.get(a.name)
            if (t is not None and tuple(t.shape) == a.shape and t.is_contiguous()
                    and str(t.dtype).replace("torch.", "") == a.dtype.torch
                    and t.data_ptr() % a.align == 0
                    and np.array_equal(t.detach().numpy(), saved)):
                self.args.append(("weight", t.detach(), a))  # the parameter itself
            else:  # kiln folded or re-laid it out: its own values, once
                self.args.append(("weight", torch.from_numpy(aligned(
                    saved.astype(a.dtype.numpy), max(a.align, 64))), a))
        # weight-derived buffers (packed, transformed weights) computed once: kiln_prepare
        self.prepared = mod.prepare(*self._args(inputs))

    def __call__(self, *xs):
        out = self.prepared(*self._args(xs))
        return tuple(out) if isinstance(out, tuple) else (out,)

    def _args(self, xs):
        args = []
        for kind, v, a in self.args:
            if kind == "weight":
                args.append(v)
                continue
            x = xs[v]
            if x.requires_grad:
                x = x.detach()
            if not x.is_contiguous():
                x = x.contiguous()
            if x.data_ptr() % a.align:
                x = torch.from_numpy(aligned(x.numpy(), max(a.align, 64)))
            args.append(x)
        return args


def kiln_backend(gm, example_inputs, options=None, mode=None):
    """The Dynamo backend: returns a callable running ``gm`` with kiln, or ``gm.forward``."""
    opts = _parse_options(options)
    try:
        return _compile(gm, example_inputs, opts)
    except _Fallback as e:
        return _fallback(gm, str(e))
    except (Error, OSError, ValueError, TypeError, RuntimeError) as e:
        # a damaged cache entry, a full disk, a tensor NumPy cannot hold, ...
        return _fallback(gm, "%s: %s" % (type(e).__name__, e))


def _compile(gm, example_inputs, opts):
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(phs) != len(example_inputs):
        raise _Fallback("the graph has %d inputs, Dynamo gave %d" % (len(phs), len(example_inputs)))
    for x in example_inputs:
        if not isinstance(x, torch.Tensor):
            raise _Fallback("an input is a %s (dynamic shapes); kiln compiles static shapes: "
                            "torch.compile(..., dynamic=False)" % type(x).__name__)
        if x.device.type != "cpu":
            raise _Fallback("an input is on %s; the kiln backend runs CPU graphs" % x.device)
        if x.dtype not in _DTYPES:
            raise _Fallback("an input has dtype %s; kiln takes %s" % (
                x.dtype, ", ".join(sorted(str(d) for d in _DTYPES))))
        if torch.is_grad_enabled() and x.requires_grad:
            raise _Fallback("gradients are on (training); kiln compiles inference graphs: "
                            "run under torch.no_grad() or torch.inference_mode()")
    state = [_is_state(n, x) for n, x in zip(phs, example_inputs)]
    if all(state):
        raise _Fallback("the graph has no input besides parameters")
    key = _key(gm, example_inputs, state, opts)
    entry = os.path.join(cache_dir(opts), key)
    mod = None
    if os.path.isdir(entry):
        mod, why = _open(entry, opts)
        if mod is None:
            stats["rebuilt"] += 1
            log.warning("kiln: cache entry %s is stale (%s): rebuilding it", entry, why)
        else:
            stats["hits"] += 1
            log.info("kiln: loaded %s from the cache", entry)
    if mod is None:
        _build(gm, example_inputs, state, opts, entry)
        stats["compiled"] += 1
        mod, why = _open(entry, opts)
        if mod is None:
            raise _Fallback("the module just compiled cannot be used: %s" % why)
    nout = sum(len(n.args[0]) if isinstance(n.args[0], (list, tuple)) else 1
               for n in gm.graph.nodes if n.op == "output")
    if len(mod.outputs) != nout:
        raise _Fallback("the module has %d outputs, the graph %d" % (len(mod.outputs), nout))
    c = _Compiled(mod, entry, [n.name for n in phs], example_inputs, state, opts.get("threads"))
    _live.add(c)
    return c


def register():
    """Registers the backend as "kiln" with Dynamo (done when this module is imported)."""
    from torch._dynamo import register_backend
    try:
        register_backend(kiln_backend, name="kiln")
    except AssertionError:  # already registered (imported through the package's entry point)
        pass


register()
