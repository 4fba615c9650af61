"""ctypes over libkiln.so: parsing .kg text, importing ONNX models (through the graph pipeline,
as ``kiln compile`` does), structural hashes, the reference interpreter, compiling, the kernel
sampler.

libkiln is found through the ``KILN_LIB`` environment variable (a path to libkiln.so), else in
the repository's build directory (``build/libkiln.so`` next to ``python/``) when the package
runs from the source tree and that exists, else (a package installed with pip) in the prefix of
the installed ``kiln`` command on ``PATH`` (``PREFIX/bin/kiln`` -> ``PREFIX/lib/libkiln.so.0``,
README.md "Install"), else where the dynamic linker finds ``libkiln``. Every ``Graph`` owns its
own ``kiln_ctx``, freed with the graph.
"""

import ctypes
import ctypes.util
import os
import shutil
import sysconfig

from . import _dlpack as dl
from .errors import Error

_LIB = None
_KINDS = ("input", "weight", "op")


class _TensorInfo(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("dtype", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("kind", ctypes.c_int),
        ("is_output", ctypes.c_int),
    ]


class _CallInfo(ctypes.Structure):
    _fields_ = [
        ("kind", ctypes.c_char_p),
        ("output", ctypes.c_char_p),
        ("flops", ctypes.c_double),
        ("bytes", ctypes.c_double),
        ("params", ctypes.c_double),
    ]


class _ScheduleParams(ctypes.Structure):
    _fields_ = [
        ("target", ctypes.c_char_p),
        ("db_paths", ctypes.POINTER(ctypes.c_char_p)),
        ("ndb", ctypes.c_uint32),
        ("untuned", ctypes.c_int),
        ("cost_model", ctypes.c_char_p),
        ("seed", ctypes.c_uint64),
    ]


class _ScheduleReport(ctypes.Structure):
    _fields_ = [
        ("ntasks", ctypes.c_uint32),
        ("from_records", ctypes.c_uint32),
        ("predicted", ctypes.c_uint32),
        ("serial", ctypes.c_uint32),
        ("model", ctypes.c_char_p),
        ("warning", ctypes.c_char_p),
        ("tasks", ctypes.c_void_p),
    ]


_UNTUNED = {"predict": 0, "serial": 1}


class _CompileOptions(ctypes.Structure):
    _fields_ = [
        ("target", ctypes.c_char_p),
        ("schedule_json", ctypes.c_char_p),
        ("schedule_len", ctypes.c_size_t),
        ("name", ctypes.c_char_p),
    ]


def _find():
    """The path of libkiln.so to load, or raises ``kiln.Error`` naming the places looked in."""
    env = os.environ.get("KILN_LIB")
    if env:
        return env
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    tried = [os.path.join(repo, "build", "libkiln.so")]
    if os.path.isfile(os.path.join(repo, "CMakeLists.txt")) and os.path.exists(tried[0]):
        return tried[0]
    cmd = shutil.which("kiln")
    if cmd:
        bindir = os.path.dirname(os.path.realpath(cmd))
        if os.path.basename(bindir) == "bin":
            prefix = os.path.dirname(bindir)
            arch = sysconfig.get_config_var("MULTIARCH") or ""
            for libdir in ("lib", "lib64", os.path.join("lib", arch)):
                path = os.path.join(prefix, libdir, "libkiln.so.0")
                tried.append(path)
                if os.path.exists(path):
                    return path
    found = ctypes.util.find_library("kiln")
    if found:
        return found
    tried.append("libkiln on the dynamic linker's path")
    raise Error("cannot find libkiln.so (looked for %s): build kiln (cmake --build build), "
                "install it (cmake --install) with its kiln on PATH, or set KILN_LIB to its path"
                % ", ".join(tried))


class _OptimizeOptions(ctypes.Structure):  # struct kiln_optimize_options
    _fields_ = [
        ("skip", ctypes.c_uint),
        ("dump", ctypes.c_void_p),
        ("user", ctypes.c_void_p),
    ]


def _proto(lib, name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)


def lib():
    """libkiln.so as a ctypes library (loaded once; see the module docstring for where)."""
    global _LIB
    if _LIB is not None:
        return _LIB
    path = _find()
    if os.sep in path and not os.path.exists(path):
        raise Error("cannot find libkiln.so at %s: build kiln (cmake --build build) or set "
                    "KILN_LIB to its path" % path)
    try:
        so = ctypes.CDLL(path)
    except OSError as e:
        raise Error("cannot load %s: %s" % (path, e)) from None
    P, u32, i64, st = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int64, ctypes.c_int
    _proto(so, "kiln_ctx_new", P, P)
    _proto(so, "kiln_ctx_free", None, P)
    if hasattr(so, "kiln_ctx_set_tmp_dir"):
        _proto(so, "kiln_ctx_set_tmp_dir", st, P, ctypes.c_char_p)
    _proto(so, "kiln_ctx_error", P, P)
    _proto(so, "kiln_ctx_error_clear", None, P)
    _proto(so, "kiln_error_format", ctypes.c_int, P, ctypes.c_char_p, ctypes.c_size_t)
    _proto(so, "kiln_status_name", ctypes.c_char_p, st)
    _proto(so, "kiln_graph_parse", st, P, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p,
           ctypes.POINTER(P))
    _proto(so, "kiln_graph_print", st, P, P, ctypes.c_uint, ctypes.POINTER(ctypes.c_char_p))
    _proto(so, "kiln_graph_hash", ctypes.c_uint64, P)
    _proto(so, "kiln_graph_tensor", None, P, u32, ctypes.POINTER(_TensorInfo))
    _proto(so, "kiln_graph_nargs", u32, P)
    _proto(so, "kiln_graph_arg", u32, P, u32)
    _proto(so, "kiln_graph_noutputs", u32, P)
    _proto(so, "kiln_graph_output", u32, P, u32)
    _proto(so, "kiln_graph_ncalls", u32, P)
    _proto(so, "kiln_graph_call", None, P, u32, ctypes.POINTER(_CallInfo))
    _proto(so, "kiln_graph_eval", st, P, P, ctypes.POINTER(ctypes.c_void_p),
           ctypes.POINTER(ctypes.c_void_p))
    _proto(so, "kiln_graph_tensor_numel", i64, P, u32)
    if hasattr(so, "kiln_graph_compile"):
        _proto(so, "kiln_graph_compile", st, P, P, ctypes.POINTER(_CompileOptions),
               ctypes.c_char_p, P)
    if hasattr(so, "kiln_graph_schedule"):
        _proto(so, "kiln_graph_schedule", st, P, P, ctypes.POINTER(_ScheduleParams),
               ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(_ScheduleReport))
    if hasattr(so, "kiln_graph_optimize"):
        W = ctypes.POINTER(ctypes.POINTER(ctypes.c_double))
        _proto(so, "kiln_graph_import_onnx", st, P, ctypes.c_char_p, ctypes.c_size_t,
               ctypes.c_char_p, ctypes.POINTER(P), ctypes.POINTER(W))
        if hasattr(so, "kiln_graph_import_onnx_opts"):
            _proto(so, "kiln_graph_import_onnx_opts", st, P, ctypes.c_char_p, ctypes.c_size_t,
                   ctypes.c_char_p, ctypes.POINTER(_OnnxOptions), ctypes.POINTER(P),
                   ctypes.POINTER(W))
        _proto(so, "kiln_graph_pass_name", ctypes.c_char_p, ctypes.c_int)
        _proto(so, "kiln_graph_optimize", st, P, P, W, ctypes.POINTER(_OptimizeOptions),
               ctypes.POINTER(P), ctypes.POINTER(W), P)
    _LIB = so
    return so


class _Ctx:
    """A kiln_ctx, freed when the last Python object using it goes away."""

    def __init__(self):
        self.lib = lib()
        self.ptr = self.lib.kiln_ctx_new(None)
        if not self.ptr:
            raise Error("kiln_ctx_new failed: out of memory")
        # the library reads no environment variable: compiling's temporary files follow
        # $TMPDIR because this wrapper passes it on
        tmp = os.environ.get("TMPDIR")
        if tmp and hasattr(self.lib, "kiln_ctx_set_tmp_dir"):
            st = self.lib.kiln_ctx_set_tmp_dir(self.ptr, os.fsencode(tmp))
            if st != 0:
                raise self.error(st)

    def error(self, status):
        e = self.lib.kiln_ctx_error(self.ptr)
        if not e:
            return Error(self.lib.kiln_status_name(status).decode(), status=status)
        buf = ctypes.create_string_buffer(2048)
        self.lib.kiln_error_format(e, buf, len(buf))
        self.lib.kiln_ctx_error_clear(self.ptr)
        return Error(buf.value.decode(errors="replace"),
                     status=self.lib.kiln_status_name(status).decode())

    def __del__(self):
        if getattr(self, "ptr", None):
            self.lib.kiln_ctx_free(self.ptr)
            self.ptr = None


def _info(lib, g, index):
    ti = _TensorInfo()
    lib.kiln_graph_tensor(g, index, ctypes.byref(ti))
    return {"name": ti.name.decode(), "dtype": dl.DTYPES[ti.dtype].name,
            "shape": tuple(ti.shape[d] for d in range(ti.ndim)), "kind": _KINDS[ti.kind],
            "output": bool(ti.is_output)}


class Graph:
    """A parsed kernel graph (``kiln.parse``)."""

    def __init__(self, text, filename=None):
        self._ctx = _Ctx()
        L = self._ctx.lib
        data = text.encode() if isinstance(text, str) else bytes(text)
        g = ctypes.c_void_p()
        st = L.kiln_graph_parse(self._ctx.ptr, data, len(data),
                                filename.encode() if filename else None, ctypes.byref(g))
        if st != 0:
            raise self._ctx.error(st)
        self._set(g)
        self.weights = {}

    def _set(self, g):
        L = self._ctx.lib
        self._g = g
        self.args = [_info(L, g, L.kiln_graph_arg(g, i)) for i in range(L.kiln_graph_nargs(g))]
        self.outputs = [_info(L, g, L.kiln_graph_output(g, i))
                        for i in range(L.kiln_graph_noutputs(g))]

    @property
    def hash(self):
        """The stable 64-bit structural hash (``"%016x" % h`` is the metadata's graph_hash)."""
        return int(self._ctx.lib.kiln_graph_hash(self._g))

    @property
    def calls(self):
        """One dict per statement: kind, output, flops, bytes, params."""
        L, out = self._ctx.lib, []
        for i in range(L.kiln_graph_ncalls(self._g)):
            ci = _CallInfo()
            L.kiln_graph_call(self._g, i, ctypes.byref(ci))
            out.append({"kind": ci.kind.decode(), "output": ci.output.decode(),
                        "flops": ci.flops, "bytes": ci.bytes, "params": ci.params})
        return out

    @property
    def flops(self):
        return sum(c["flops"] for c in self.calls)

    @property
    def bytes(self):
        return sum(c["bytes"] for c in self.calls)

    def print(self, expanded=False):
        """The graph in canonical .kg text."""
        out = ctypes.c_char_p()
        st = self._ctx.lib.kiln_graph_print(self._ctx.ptr, self._g, 1 if expanded else 0,
                                            ctypes.byref(out))
        if st != 0:
            raise self._ctx.error(st)
        return out.value.decode()

    def eval(self, *inputs):
        """Runs the reference interpreter (double precision) on inputs (arrays, tensors or
        nested lists of the declared shapes, in argument order). Returns float64 NumPy arrays
        for float outputs and arrays of the declared dtype for integer and boolean ones; one
        output is returned as is, several as a tuple."""
        import numpy as np
        if len(inputs) != len(self.args):
            raise Error("expected %d input%s (%s), got %d" % (
                len(self.args), "" if len(self.args) == 1 else "s",
                ", ".join(a["name"] for a in self.args), len(inputs)))
        ins = []
        for i, (a, x) in enumerate(zip(self.args, inputs)):
            if hasattr(x, "detach"):
                x = x.detach().cpu().numpy()
            arr = np.ascontiguousarray(x, dtype=np.float64)
            if arr.shape != a["shape"]:
                raise Error("argument %d (%s) has shape %s, expected %s"
                            % (i, a["name"], list(arr.shape), list(a["shape"])))
            ins.append(arr)
        outs = [np.empty(o["shape"], dtype=np.float64) for o in self.outputs]
        in_ptrs = (ctypes.c_void_p * max(len(ins), 1))(*[a.ctypes.data for a in ins])
        out_ptrs = (ctypes.c_void_p * max(len(outs), 1))(*[o.ctypes.data for o in outs])
        st = self._ctx.lib.kiln_graph_eval(self._ctx.ptr, self._g, in_ptrs, out_ptrs)
        if st != 0:
            raise self._ctx.error(st)
        res = []
        for o, arr in zip(self.outputs, outs):
            dt = dl.BY_NAME[o["dtype"]]
            res.append(arr if dt.is_float or dt.numpy is None else arr.astype(dt.numpy))
        return res[0] if len(res) == 1 else tuple(res)

    # ---- compile: kiln_graph_compile, then load the shared object ----
    def schedule(self, target=None, db=(), untuned="predict", cost_model=None, seed=1):
        """The schedule ``kiln compile`` makes (kiln_graph_schedule) as JSON text: each task's
        best record from the databases ``db`` (paths, read in order), a schedule predicted by
        the cost model for the others (``untuned="predict"``; ``"serial"``: the serial default
        schedule), from ``cost_model`` (a model file) or the one shipped in libkiln; ``seed``
        picks the draws. ``self.schedule_report`` says how many tasks got which; a model that
        cannot be used is a ``UserWarning`` (its tasks keep the serial default)."""
        L = self._ctx.lib
        if untuned not in _UNTUNED:
            raise Error("untuned is 'predict' or 'serial', not %r" % (untuned,))
        if isinstance(db, (str, os.PathLike)):
            db = [db]
        paths = [os.fspath(d).encode() for d in db]
        arr = (ctypes.c_char_p * max(1, len(paths)))(*paths)
        p = _ScheduleParams(target.encode() if target else None, arr, len(paths),
                            _UNTUNED[untuned],
                            os.fspath(cost_model).encode() if cost_model else None, seed)
        js, r = ctypes.c_char_p(), _ScheduleReport()
        st = L.kiln_graph_schedule(self._ctx.ptr, self._g, ctypes.byref(p), ctypes.byref(js),
                                   ctypes.byref(r))
        if st != 0:
            raise self._ctx.error(st)
        self.schedule_report = {"tasks": r.ntasks, "from_records": r.from_records,
                                "predicted": r.predicted, "serial": r.serial,
                                "model": r.model.decode() if r.model else None,
                                "warning": r.warning.decode() if r.warning else None}
        if r.warning:
            import warnings
            warnings.warn("kiln: " + r.warning.decode(), stacklevel=2)
        return js.value.decode()

    def compile(self, path, target=None, schedule=None, name=None, db=(), untuned="predict",
                cost_model=None, seed=1):
        """Compiles the graph into a shared object at path and loads it (``kiln.Module``).

        target: "llvm" (this machine, the default), "llvm -mcpu=...", "llvm -mattr=...".
        schedule: JSON text, or the same as Python data ({"steps": [...]}; docs/schedule.md).
        Without one, the schedule is ``self.schedule(target, db, untuned, cost_model, seed)``,
        as ``kiln compile`` makes it (records, then predicted, then serial); ``untuned=
        "serial"`` without ``db`` is the serial default schedule."""
        if schedule is not None and not isinstance(schedule, (str, bytes)):
            import json
            schedule = json.dumps(schedule)
        from .module import load
        L = self._ctx.lib
        if not hasattr(L, "kiln_graph_compile"):
            raise Error("this libkiln cannot compile (no kiln_graph_compile)")
        if schedule is None and (db or untuned != "serial"):
            schedule = self.schedule(target, db, untuned, cost_model, seed)
        sched = schedule.encode() if isinstance(schedule, str) else schedule
        opt = _CompileOptions(target.encode() if target else None, sched,
                              len(sched) if sched else 0, name.encode() if name else None)
        path = os.fspath(path)
        st = L.kiln_graph_compile(self._ctx.ptr, self._g, ctypes.byref(opt), path.encode(),
                                  None)
        if st != 0:
            raise self._ctx.error(st)
        return load(path)

    def __repr__(self):
        return "<kiln.Graph %s -> %s>" % (", ".join(a["name"] for a in self.args),
                                          ", ".join(o["name"] for o in self.outputs))


def passes():
    """The graph pipeline's passes in order (kiln_graph_pass_name): simplify, channels-last,
    winograd."""
    L = lib()
    names, i = [], 0
    while hasattr(L, "kiln_graph_pass_name") and L.kiln_graph_pass_name(i):
        names.append(L.kiln_graph_pass_name(i).decode())
        i += 1
    return names


class _OnnxShape(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("ndim", ctypes.c_uint32),
                ("shape", ctypes.POINTER(ctypes.c_int64))]


class _OnnxOptions(ctypes.Structure):
    _fields_ = [("bind", ctypes.c_void_p), ("nbind", ctypes.c_uint32),
                ("shapes", ctypes.POINTER(_OnnxShape)), ("nshapes", ctypes.c_uint32)]


def import_onnx(model, filename=None, skip=(), optimize=True, shapes=None):
    """Imports an ONNX model (a path, or its bytes) and runs the graph pipeline on it
    (kiln_graph_optimize: the passes of ``passes()``, minus those named in ``skip``), as
    ``kiln compile MODEL.onnx`` does, so ``import_onnx(m).compile(path)`` writes the module that
    command writes. ``optimize=False`` keeps the model as imported (``--no-simplify``).
    ``shapes`` gives symbolic dimensions their extents, as ``--input-shape`` does: a dict from a
    graph input's name to its whole shape (a tuple), or from a symbolic dimension's name
    (``"batch"``) to its extent (an int). The graph's ``weights`` maps each weight's name to its
    values (NumPy float64 arrays), to pass to the module after its inputs."""
    import numpy as np

    if isinstance(model, (str, os.PathLike)):
        filename = filename or os.fspath(model)
        with open(model, "rb") as f:
            model = f.read()
    data = bytes(model)
    g = Graph.__new__(Graph)
    g._ctx = _Ctx()
    L = g._ctx.lib
    if not hasattr(L, "kiln_graph_optimize"):
        raise Error("this libkiln has no graph pipeline (kiln_graph_optimize)")
    names = passes()
    unknown = [p for p in skip if p not in names]
    if unknown:
        raise Error("unknown pass %r (passes: %s)" % (unknown[0], ", ".join(names)))
    W = ctypes.POINTER(ctypes.POINTER(ctypes.c_double))
    ptr, w = ctypes.c_void_p(), W()
    fname = filename.encode() if filename else None
    if shapes:
        if not hasattr(L, "kiln_graph_import_onnx_opts"):
            raise Error("this libkiln cannot give shapes (kiln_graph_import_onnx_opts)")
        items = list(shapes.items())
        arr = (_OnnxShape * len(items))()
        keep = []
        for k, (name, ext) in enumerate(items):
            ext = (ext,) if isinstance(ext, int) else tuple(int(e) for e in ext)
            buf = (ctypes.c_int64 * max(len(ext), 1))(*ext)
            keep.append(buf)
            arr[k] = _OnnxShape(str(name).encode(), len(ext), buf)
        opt = _OnnxOptions(None, 0, arr, len(items))
        st = L.kiln_graph_import_onnx_opts(g._ctx.ptr, data, len(data), fname, ctypes.byref(opt),
                                           ctypes.byref(ptr), ctypes.byref(w))
    else:
        st = L.kiln_graph_import_onnx(g._ctx.ptr, data, len(data), fname, ctypes.byref(ptr),
                                      ctypes.byref(w))
    if st != 0:
        raise g._ctx.error(st)
    bits = sum(1 << names.index(p) for p in skip) if optimize else (1 << len(names)) - 1
    if bits != (1 << len(names)) - 1:
        opt = _OptimizeOptions(bits, None, None)
        out, ow = ctypes.c_void_p(), W()
        st = L.kiln_graph_optimize(g._ctx.ptr, ptr, w, ctypes.byref(opt), ctypes.byref(out),
                                   ctypes.byref(ow), None)
        if st != 0:
            raise g._ctx.error(st)
        ptr, w = out, ow
    g._set(ptr)
    g.weights = {}
    for i, a in enumerate(g.args):
        if a["kind"] == "weight" and w and w[i]:
            n = int(np.prod(a["shape"], dtype=np.int64))
            g.weights[a["name"]] = np.ctypeslib.as_array(w[i], (n,)).reshape(a["shape"]).copy()
    return g


def parse(text, filename=None):
    """Parses .kg text into a ``Graph``; raises ``kiln.Error`` ("file:line:col: error: ...")."""
    return Graph(text, filename)


def graph_hash(text):
    """The structural hash of the graph in ``text`` (an int)."""
    return Graph(text).hash


def eval(text, *inputs):  # noqa: A001 - the package's name for the interpreter
    """``parse(text).eval(*inputs)``: the reference interpreter as an oracle."""
    return Graph(text).eval(*inputs)


def compile(text, path, target=None, schedule=None, name=None, **kw):  # noqa: A001
    """Compiles .kg text into a shared object at path and loads it (see Graph.compile; ``kw``:
    db, untuned, cost_model, seed)."""
    return Graph(text).compile(path, target=target, schedule=schedule, name=name, **kw)


# ---- kernel architecture search: kiln_kas_sampler_* (include/kiln.h, kas/README.md) ----
_KAS_BOUND = False


class _KasPlaceholder(ctypes.Structure):
    _fields_ = [("c", ctypes.c_int64), ("k", ctypes.c_int64), ("h", ctypes.c_int64),
                ("w", ctypes.c_int64)]


class _KasParams(ctypes.Structure):
    _fields_ = [
        ("placeholders", ctypes.POINTER(_KasPlaceholder)),
        ("nplaceholders", ctypes.c_uint32),
        ("seed", ctypes.c_uint64),
        ("stride", ctypes.c_int),
        ("ref_k", ctypes.c_int),
        ("flops_lo", ctypes.c_double),
        ("flops_hi", ctypes.c_double),
        ("params_lo", ctypes.c_double),
        ("params_hi", ctypes.c_double),
        ("max_ops", ctypes.c_int),
        ("min_rf", ctypes.c_int),
        ("no_fingerprint", ctypes.c_int),
        ("max_tries", ctypes.c_uint32),
        ("batch", ctypes.c_int64),
        ("out_dir", ctypes.c_char_p),
    ]


class _KasKernel(ctypes.Structure):
    _fields_ = [
        ("index", ctypes.c_uint64),
        ("hash", ctypes.c_uint64),
        ("flops", ctypes.c_double),
        ("params", ctypes.c_double),
        ("ops", ctypes.c_uint32),
        ("design", ctypes.c_char_p),
        ("values", ctypes.c_char_p),
        ("py", ctypes.c_char_p),
        ("kg", ctypes.POINTER(ctypes.c_char_p)),
        ("py_path", ctypes.c_char_p),
        ("kg_paths", ctypes.POINTER(ctypes.c_char_p)),
    ]


def _kas_lib():
    L = lib()
    if not hasattr(L, "kiln_kas_sampler_new"):
        raise Error("this libkiln has no kernel sampler (kiln_kas_sampler_new): rebuild kiln")
    global _KAS_BOUND
    if not _KAS_BOUND:
        P = ctypes.c_void_p
        _proto(L, "kiln_kas_params_default", None, ctypes.POINTER(_KasParams))
        _proto(L, "kiln_kas_sampler_new", ctypes.c_int, P, ctypes.POINTER(_KasParams),
               ctypes.POINTER(P))
        _proto(L, "kiln_kas_sampler_next", ctypes.c_int, P, ctypes.POINTER(_KasKernel))
        _proto(L, "kiln_kas_sampler_free", None, P)
        _KAS_BOUND = True
    return L


def kas_sample(shapes, n, seed, stride=1, flops=None, params=None, max_ops=None, min_rf=None,
               max_tries=None, out_dir=None):
    """Samples ``n`` kernels with kiln_kas_sampler_* for the placeholders ``shapes`` (a list of
    ``(C, K, H, W)``); ``flops`` and ``params`` are ``(lo, hi)`` pairs or None (the defaults).
    With ``out_dir`` (an existing directory) the kernels are also written there as
    ``kNNNN.py`` and ``kNNNN_pJ.kg``. Returns one dict per kernel with the keys of ``kiln
    sample --json`` (kernel, hash, flops, params, ops, design, values, and py / kg paths when
    written) plus ``code`` (the PyTorch source) and ``kg_text`` (the .kg texts, one per
    shape). Raises ``kiln.Error`` when the parameters are refused or the sampler runs out of
    new kernels."""
    L = _kas_lib()
    ctx = _Ctx()
    p = _KasParams()
    L.kiln_kas_params_default(ctypes.byref(p))
    phs = (_KasPlaceholder * len(shapes))(*[_KasPlaceholder(*map(int, s)) for s in shapes])
    p.placeholders = phs
    p.nplaceholders = len(shapes)
    p.seed = int(seed)
    p.stride = int(stride)
    if flops is not None:
        p.flops_lo, p.flops_hi = flops
    if params is not None:
        p.params_lo, p.params_hi = params
    if max_ops is not None:
        p.max_ops = int(max_ops)
    if min_rf is not None:
        p.min_rf = int(min_rf)
    if max_tries is not None:
        p.max_tries = int(max_tries)
    if out_dir is not None:
        p.out_dir = os.fsencode(out_dir)
    sm = ctypes.c_void_p()
    st = L.kiln_kas_sampler_new(ctx.ptr, ctypes.byref(p), ctypes.byref(sm))
    if st != 0:
        raise ctx.error(st)
    kernels = []
    try:
        for _ in range(int(n)):
            k = _KasKernel()
            st = L.kiln_kas_sampler_next(sm, ctypes.byref(k))
            if st != 0:
                raise ctx.error(st)
            values = {}
            for item in k.values.decode().split():
                name, size = item.split("=", 1)
                values[name] = size
            # the numbers as `kiln sample --json` prints them (%.6g)
            info = {"kernel": k.index, "hash": "%016x" % k.hash,
                    "flops": float("%.6g" % k.flops), "params": float("%.6g" % k.params),
                    "ops": k.ops, "design": k.design.decode(), "values": values,
                    "code": k.py.decode(),
                    "kg_text": [k.kg[j].decode() for j in range(len(shapes))]}
            if k.py_path:
                info["py"] = k.py_path.decode()
                info["kg"] = [k.kg_paths[j].decode() for j in range(len(shapes))]
            kernels.append(info)
    finally:
        L.kiln_kas_sampler_free(sm)
    return kernels
