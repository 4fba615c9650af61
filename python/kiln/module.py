"""Calling a generated shared object through its exported ABI (include/kiln_abi.h).

No libkiln is needed here (not even to validate the file before mapping it: ``check_file``
reads its ELF headers in Python): the shared object exports ``kiln_abi_version``, ``kiln_metadata``,
``kiln_source``, ``kiln_call`` and ``kiln_set_num_threads``, and this module talks to them with
ctypes. Tensors cross the boundary zero-copy as DLPack ``DLTensor`` structs: NumPy arrays are
described from their array interface, PyTorch tensors through ``torch.utils.dlpack.to_dlpack``
(the DLTensor inside the capsule is copied by value, the data is not).
"""

import ctypes
import json
import os
import sys

from . import _dlpack as dl
from .errors import Error

ABI_VERSION = 2
ABI_STATUS = ["ok", "nargs", "null", "device", "dtype", "shape", "stride", "align", "nomem",
              "runtime", "alias"]
ROLES = ("input", "weight", "output")


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _torch():
    """PyTorch if the caller already imported it (a tensor from it can only exist then)."""
    return sys.modules.get("torch")


def _is_torch(x):
    t = _torch()
    return t is not None and isinstance(x, t.Tensor)


def _is_numpy(x):
    np = sys.modules.get("numpy")
    return np is not None and isinstance(x, np.ndarray)


def aligned_empty(shape, dtype, align=64):
    """A new, uninitialised, C-contiguous NumPy array whose data is aligned to ``align`` bytes.

    ``dtype`` is a NumPy dtype or a kiln dtype name (``"f32"``)."""
    import numpy as np
    if isinstance(dtype, str) and dtype in dl.BY_NAME:
        if dl.BY_NAME[dtype].numpy is None:
            raise Error("NumPy has no dtype %s" % dtype)
        dtype = dl.BY_NAME[dtype].numpy
    dtype = np.dtype(dtype)
    n = 1
    for e in shape:
        n *= int(e)
    nbytes = n * dtype.itemsize
    buf = np.empty(nbytes + align, dtype=np.uint8)
    off = (-buf.ctypes.data) % align
    return buf[off:off + nbytes].view(dtype).reshape(tuple(shape))


def aligned(arr, align=64):
    """``arr`` if it is C-contiguous and aligned to ``align`` bytes, else an aligned copy."""
    import numpy as np
    arr = np.asarray(arr)
    if arr.flags.c_contiguous and arr.ctypes.data % align == 0:
        return arr
    out = aligned_empty(arr.shape, arr.dtype, align)
    out[...] = arr
    return out


class Arg:
    """One argument of a module, from its metadata."""

    def __init__(self, index, d):
        self.index = index
        self.name = d["name"]
        self.dtype = dl.BY_NAME.get(d["dtype"])
        if self.dtype is None:
            raise Error("argument %d (%s) has dtype %s, which this package does not know"
                        % (index, self.name, d["dtype"]))
        self.shape = tuple(int(e) for e in d["shape"])
        self.role = d.get("role", "input")
        self.align = int(d.get("align", self.dtype.itemsize))

    def label(self):
        return "argument %d (%s)" % (self.index, self.name)

    def __repr__(self):
        return "<%s %s: %s%s align=%d>" % (self.role, self.name, self.dtype.name,
                                            list(self.shape), self.align)


def _shape_str(shape):
    return "[%s]" % ", ".join(str(int(e)) for e in shape)


class _Call:
    """The DLTensors of one call and everything that must stay alive while it runs."""

    def __init__(self):
        self.tensors = []
        self.keep = []

    def add_numpy(self, arg, arr, output):
        if not arr.dtype.isnative:
            # the ABI reads DLPack tensors in native byte order: a swapped array would be
            # read as garbage, so it is refused rather than converted behind the caller's back
            raise Error("%s has dtype %s, which is not in native byte order; kiln needs native "
                        "byte order: pass x.astype(x.dtype.newbyteorder('='))"
                        % (arg.label(), arr.dtype.str))
        dt = dl.BY_NUMPY.get(arr.dtype.name)
        if dt is not arg.dtype:
            raise Error("%s has dtype %s, expected %s" % (
                arg.label(), dt.name if dt else "numpy." + arr.dtype.name, arg.dtype.name))
        if arr.shape != arg.shape:
            raise Error("%s has shape %s, expected %s"
                        % (arg.label(), _shape_str(arr.shape), _shape_str(arg.shape)))
        if not arr.flags.c_contiguous:
            raise Error("%s is not C-contiguous; pass np.ascontiguousarray(x)" % arg.label())
        if output and not arr.flags.writeable:
            raise Error("%s is an output but the array is read-only" % arg.label())
        ai = arr.__array_interface__
        ptr = ai["data"][0]
        if ptr % arg.align:
            raise Error("%s has data address %#x, not aligned to %d bytes; "
                        "use kiln.aligned(x) or kiln.aligned_empty(...)"
                        % (arg.label(), ptr, arg.align))
        t = dl.DLTensor()
        t.data = ptr
        t.device = dl.DLDevice(dl.KDL_CPU, 0)
        t.ndim = len(ai["shape"])
        t.dtype = dl.DLDataType(arg.dtype.code, arg.dtype.bits, 1)
        shape = (ctypes.c_int64 * max(t.ndim, 1))(*ai["shape"])
        t.shape = shape
        if ai.get("strides") is not None:
            strides = (ctypes.c_int64 * max(t.ndim, 1))(
                *[s // arr.itemsize for s in ai["strides"]])
            t.strides = strides
            self.keep.append(strides)
        t.byte_offset = 0
        self.keep += [arr, shape]
        self.tensors.append(t)

    def add_torch(self, arg, x, output):
        torch = _torch()
        dt = dl.BY_TORCH.get(str(x.dtype).replace("torch.", ""))
        if dt is not arg.dtype:
            raise Error("%s has dtype %s, expected %s"
                        % (arg.label(), dt.name if dt else str(x.dtype), arg.dtype.name))
        if x.device.type != "cpu":
            raise Error("%s is on device %s; this code runs on cpu" % (arg.label(), x.device))
        if tuple(x.shape) != arg.shape:
            raise Error("%s has shape %s, expected %s"
                        % (arg.label(), _shape_str(x.shape), _shape_str(arg.shape)))
        if not x.is_contiguous():
            raise Error("%s is not contiguous; pass x.contiguous()" % arg.label())
        if x.data_ptr() % arg.align:
            raise Error("%s has data address %#x, not aligned to %d bytes"
                        % (arg.label(), x.data_ptr(), arg.align))
        cap = torch.utils.dlpack.to_dlpack(x.detach())
        ptr = _capsule_pointer(cap, b"dltensor")
        mt = ctypes.cast(ptr, ctypes.POINTER(dl.DLManagedTensor)).contents
        src = mt.dl_tensor
        t = dl.DLTensor()
        t.data = src.data
        t.device = dl.DLDevice(src.device.device_type, src.device.device_id)
        t.ndim = src.ndim
        # PyTorch before 2.x exports bool as an 8-bit unsigned integer
        code = src.dtype.code
        if arg.dtype.code == dl.KDL_BOOL and code == dl.KDL_UINT and src.dtype.bits == 8:
            code = dl.KDL_BOOL
        t.dtype = dl.DLDataType(code, src.dtype.bits, src.dtype.lanes)
        t.shape = src.shape
        t.strides = src.strides
        t.byte_offset = src.byte_offset
        self.keep += [cap, x]  # the capsule owns shape and strides; its destructor frees them
        self.tensors.append(t)

    def add(self, arg, x, output):
        if _is_numpy(x):
            self.add_numpy(arg, x, output)
        elif _is_torch(x):
            self.add_torch(arg, x, output)
        else:
            raise Error("%s is a %s; pass a NumPy array or a PyTorch CPU tensor"
                        % (arg.label(), type(x).__name__))


_HOST_MACHINE = {"x86_64": 62, "amd64": 62, "aarch64": 183, "arm64": 183, "riscv64": 243,
                 "ppc64le": 21, "ppc64": 21}


def check_file(path):
    """Raises Error unless ``path`` holds a whole 64-bit ELF shared object for this host: its
    header, section and program header tables and every loadable segment within the file (as
    runtime/module.c checks before dlopen). ctypes.CDLL would map a truncated object and the
    process would die of SIGBUS on first touch."""
    import platform
    import struct
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        eh = f.read(64)

        def truncated(what, end):
            return Error("%s: not a complete kiln module (truncated: the file has %d bytes, %s "
                         "ends at byte %d)" % (path, size, what, end))
        if len(eh) >= 4 and eh[:4] != b"\x7fELF":
            raise Error("cannot load %s: not an ELF shared object (no ELF magic)" % path)
        if len(eh) < 64:
            raise truncated("the ELF header", 64)
        data = 1 if sys.byteorder == "little" else 2
        want = _HOST_MACHINE.get(platform.machine().lower())
        e = "<" if eh[5] == 1 else ">"
        (e_type, e_machine, _, _, e_phoff, e_shoff, _, _, e_phentsize, e_phnum, e_shentsize,
         e_shnum, _) = struct.unpack(e + "HHIQQQIHHHHHH", eh[16:64])
        if eh[4] != 2 or eh[5] != data or (want is not None and e_machine != want):
            raise Error("cannot load %s: an ELF object for another machine (class %d, data %d, "
                        "machine %d; this host wants class 2, data %d, machine %s)"
                        % (path, eh[4], eh[5], e_machine, data, want))
        if e_type != 3 or e_phentsize != 56 or (e_shnum and e_shentsize != 64):
            raise Error("cannot load %s: not an ELF shared object (type %d)" % (path, e_type))
        end = e_phoff + e_phnum * e_phentsize
        if end > size:
            raise truncated("the program header table", end)
        end = e_shoff + e_shnum * e_shentsize
        if e_shoff and end > size:
            raise truncated("the section header table", end)
        f.seek(e_phoff)
        ph = f.read(e_phnum * 56)
        for i in range(e_phnum):
            p_type, _, p_offset, _, _, p_filesz, _, _ = struct.unpack_from(e + "IIQQQQQQ", ph,
                                                                           i * 56)
            if p_type == 1 and p_offset + p_filesz > size:  # PT_LOAD
                raise truncated("loadable segment %d" % i, p_offset + p_filesz)


class Module:
    """A loaded shared object written by kiln (``kiln.load``)."""

    def __init__(self, path):
        if not os.path.exists(path):
            raise Error("cannot open %s: no such file" % path)
        if not os.path.isfile(path):
            raise Error("cannot load %s: not a regular file" % path)
        if os.sep not in path:
            path = os.path.join(".", path)
        try:
            check_file(path)
        except OSError as e:
            raise Error("cannot open %s: %s" % (path, e.strerror)) from None
        try:
            self._so = ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
        except OSError as e:
            raise Error("cannot load %s: %s" % (path, e)) from None
        self.path = path
        for sym in ("kiln_abi_version", "kiln_metadata", "kiln_source", "kiln_call",
                    "kiln_set_num_threads"):
            if not hasattr(self._so, sym):
                raise Error("%s is not a kiln module: it does not export %s" % (path, sym))
        so = self._so
        so.kiln_abi_version.restype = ctypes.c_int32
        so.kiln_abi_version.argtypes = []
        so.kiln_metadata.restype = ctypes.c_char_p
        so.kiln_metadata.argtypes = []
        so.kiln_source.restype = ctypes.c_char_p
        so.kiln_source.argtypes = []
        so.kiln_call.restype = ctypes.c_int32
        so.kiln_call.argtypes = [ctypes.POINTER(ctypes.POINTER(dl.DLTensor)), ctypes.c_int32,
                                 ctypes.c_char_p, ctypes.c_size_t]
        so.kiln_set_num_threads.restype = None
        so.kiln_set_num_threads.argtypes = [ctypes.c_int32]
        # prepared calls (weights packed once); modules built before them lack the three
        self._has_prepare = all(hasattr(so, s) for s in (
            "kiln_prepare", "kiln_call_prepared", "kiln_prepared_free"))
        if self._has_prepare:
            so.kiln_prepare.restype = ctypes.c_int32
            so.kiln_prepare.argtypes = [ctypes.POINTER(ctypes.POINTER(dl.DLTensor)),
                                        ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p),
                                        ctypes.c_char_p, ctypes.c_size_t]
            so.kiln_call_prepared.restype = ctypes.c_int32
            so.kiln_call_prepared.argtypes = [ctypes.c_void_p,
                                              ctypes.POINTER(ctypes.POINTER(dl.DLTensor)),
                                              ctypes.c_int32, ctypes.c_char_p, ctypes.c_size_t]
            so.kiln_prepared_free.restype = None
            so.kiln_prepared_free.argtypes = [ctypes.c_void_p]
        v = so.kiln_abi_version()
        if v != ABI_VERSION:
            raise Error("%s was built for kiln ABI version %d; this package supports version %d"
                        % (path, v, ABI_VERSION))
        # refuse a CPU without the features the code was built for (it would die of SIGILL)
        if hasattr(so, "kiln_cpu_check"):
            so.kiln_cpu_check.restype = ctypes.c_int32
            so.kiln_cpu_check.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
            err = ctypes.create_string_buffer(256)
            if so.kiln_cpu_check(err, len(err)) != 0:
                raise Error("cannot load %s: %s" % (path, err.value.decode(errors="replace")))
        self.metadata = json.loads(so.kiln_metadata().decode())
        self.source = so.kiln_source().decode()
        self.all_args = [Arg(i, a) for i, a in enumerate(self.metadata.get("args", []))]
        self.args = [a for a in self.all_args if a.role != "output"]
        self.outputs = [a for a in self.all_args if a.role == "output"]
        # weights built into the module (not passed): name, dtype, shape, as in the metadata
        self.embedded = list(self.metadata.get("embedded", []))

    @property
    def name(self):
        return self.metadata.get("name")

    def set_num_threads(self, n):
        """Threads this module's parallel loops use; 0 = all cores."""
        if int(n) < 0:
            raise Error("set_num_threads: %d is negative" % n)
        self._so.kiln_set_num_threads(int(n))

    def _new_output(self, arg, like_torch):
        if like_torch:
            torch = _torch()
            x = torch.empty(arg.shape, dtype=getattr(torch, arg.dtype.torch))
            if x.data_ptr() % arg.align == 0:
                return x
            # rare: allocate with room and slice to an aligned start
            n = 1
            for e in arg.shape:
                n *= e
            big = torch.empty(n + arg.align, dtype=x.dtype)
            off = ((-big.data_ptr()) % arg.align) // arg.dtype.itemsize
            return big[off:off + n].view(arg.shape)
        if arg.dtype.numpy is None:
            raise Error("%s has dtype %s, which NumPy lacks; pass PyTorch tensors"
                        % (arg.label(), arg.dtype.name))
        return aligned_empty(arg.shape, arg.dtype.numpy, max(arg.align, 64))

    def __call__(self, *inputs, out=None):
        """Runs the module. Inputs (and weights) in declaration order; NumPy arrays or PyTorch
        CPU tensors of exactly the declared dtype and shape, C-contiguous, aligned as the
        metadata says. Returns the outputs (one: the array itself; several: a tuple) as the
        library of the first input, or writes into ``out`` (an array or a sequence of them) and
        returns it."""
        return self._run(inputs, out, lambda ptrs, n, err: self._so.kiln_call(
            ptrs, n, err, len(err)), "kiln_call")

    def prepare(self, *inputs):
        """Computes the module's weight-derived buffers (e.g. weights packed into a blocked
        layout) once from the weights among ``inputs`` (all inputs as for a call; only the
        weights are read) and returns a ``Prepared``: call it like the module, with the same
        weights unchanged, to run without recomputing them (include/kiln_abi.h, "Prepared
        calls"). Change a weight: prepare again."""
        return Prepared(self, inputs)

    def _run(self, inputs, out, fn, what):
        if len(inputs) != len(self.args):
            raise Error("expected %d input%s (%s), got %d" % (
                len(self.args), "" if len(self.args) == 1 else "s",
                ", ".join(a.name for a in self.args), len(inputs)))
        if out is None:
            like_torch = bool(inputs) and _is_torch(inputs[0])
            outs = [self._new_output(a, like_torch) for a in self.outputs]
        else:
            outs = list(out) if isinstance(out, (list, tuple)) else [out]
            if len(outs) != len(self.outputs):
                raise Error("expected %d output%s (%s) in out=, got %d" % (
                    len(self.outputs), "" if len(self.outputs) == 1 else "s",
                    ", ".join(a.name for a in self.outputs), len(outs)))
        call = _Call()
        for arg, x in zip(self.args, inputs):
            call.add(arg, x, False)
        for arg, x in zip(self.outputs, outs):
            call.add(arg, x, True)
        n = len(call.tensors)
        ptrs = (ctypes.POINTER(dl.DLTensor) * max(n, 1))(
            *[ctypes.pointer(t) for t in call.tensors])
        err = ctypes.create_string_buffer(512)
        st = fn(ptrs, n, err)
        if st != 0:
            raise Error(err.value.decode(errors="replace") or ("%s failed" % what),
                        status=ABI_STATUS[st] if 0 <= st < len(ABI_STATUS) else st)
        del call
        if out is not None:
            return out
        return outs[0] if len(outs) == 1 else tuple(outs)

    def __repr__(self):
        return "<kiln.Module %s: %s -> %s>" % (
            self.name, ", ".join(a.name for a in self.args),
            ", ".join(a.name for a in self.outputs))


class Prepared:
    """A module with its weight-derived buffers computed (``Module.prepare``). Calling it runs
    the module's prepared call (``kiln_call_prepared``) with the same arguments as the module;
    the weights must be the ones given to ``prepare``, unchanged. Safe to call from several
    threads at once. Modules built before prepared calls existed run their plain call."""

    def __init__(self, module, inputs):
        self.module = module
        self._handle = ctypes.c_void_p()
        if module._has_prepare:
            so = module._so
            module._run(inputs, None, lambda ptrs, n, err: so.kiln_prepare(
                ptrs, n, ctypes.byref(self._handle), err, len(err)), "kiln_prepare")

    def __call__(self, *inputs, out=None):
        m = self.module
        if not m._has_prepare:
            return m(*inputs, out=out)
        if not self._handle.value:
            raise Error("this prepared module was freed")
        return m._run(inputs, out, lambda ptrs, n, err: m._so.kiln_call_prepared(
            self._handle, ptrs, n, err, len(err)), "kiln_call_prepared")

    def free(self):
        """Frees the prepared buffers now (also done when the object is collected)."""
        if self._handle.value and self.module._has_prepare:
            self.module._so.kiln_prepared_free(self._handle)
        self._handle = ctypes.c_void_p()

    def __del__(self):
        try:
            self.free()
        except Exception:
            pass


def load(path):
    """Loads a shared object written by kiln and returns a callable ``Module``."""
    return Module(os.fspath(path))
