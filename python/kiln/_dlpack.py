"""DLPack structures (as ctypes) and kiln's dtype table.

The layouts follow dlpack.h v0.6-0.8 (the unversioned ``DLManagedTensor`` that
``torch.utils.dlpack.to_dlpack`` returns in a capsule named ``"dltensor"``).
"""

import ctypes

KDL_CPU = 1
KDL_INT, KDL_UINT, KDL_FLOAT, KDL_BFLOAT, KDL_BOOL = 0, 1, 2, 4, 6

DEVICE_NAMES = {1: "cpu", 2: "cuda", 3: "cuda_host", 4: "opencl", 7: "vulkan", 8: "metal",
                9: "vpi", 10: "rocm", 11: "rocm_host", 12: "ext_dev", 13: "cuda_managed",
                14: "oneapi", 15: "webgpu", 16: "hexagon"}


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    pass


DLManagedTensor._fields_ = [
    ("dl_tensor", DLTensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))),
]


class DType:
    """One kiln dtype: its name, DLPack code and bits, NumPy and PyTorch names."""

    def __init__(self, name, code, bits, numpy, torch):
        self.name, self.code, self.bits = name, code, bits
        self.numpy, self.torch = numpy, torch  # names; None where the library has no such dtype

    @property
    def itemsize(self):
        return self.bits // 8

    @property
    def is_float(self):
        return self.code in (KDL_FLOAT, KDL_BFLOAT)

    def __repr__(self):
        return "kiln.dtype(%s)" % self.name


# kiln's dtypes, in enum kiln_dtype order (include/kiln.h)
DTYPES = [
    DType("f32", KDL_FLOAT, 32, "float32", "float32"),
    DType("f16", KDL_FLOAT, 16, "float16", "float16"),
    DType("bf16", KDL_BFLOAT, 16, None, "bfloat16"),
    DType("f64", KDL_FLOAT, 64, "float64", "float64"),
    DType("i8", KDL_INT, 8, "int8", "int8"),
    DType("i32", KDL_INT, 32, "int32", "int32"),
    DType("i64", KDL_INT, 64, "int64", "int64"),
    DType("bool", KDL_BOOL, 8, "bool", "bool"),
    DType("u8", KDL_UINT, 8, "uint8", "uint8"),
    DType("u16", KDL_UINT, 16, "uint16", "uint16"),
    DType("u32", KDL_UINT, 32, "uint32", "uint32"),
    DType("u64", KDL_UINT, 64, "uint64", "uint64"),
    DType("i16", KDL_INT, 16, "int16", "int16"),
]
BY_NAME = {d.name: d for d in DTYPES}
BY_NUMPY = {d.numpy: d for d in DTYPES if d.numpy}
BY_TORCH = {d.torch: d for d in DTYPES}
