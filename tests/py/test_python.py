#!/usr/bin/python3
"""tests/py/test_python.py -- the Python package (python/kiln) against NumPy and PyTorch.

    /usr/bin/python3 tests/py/test_python.py --kiln BUILD/kiln [FILTER]

Run from the repository root (CTest does). Three groups:

* libkiln: kiln.parse / graph_hash / eval (the reference interpreter) against NumPy and
  PyTorch, and import_onnx's shapes for symbolic dimensions; needs BUILD/libkiln.so.
* module: kiln.load and Module calls (NumPy and PyTorch, zero-copy, out=, threads, every
  error) on tests/abi/fake_module.c compiled here with BUILD/libkiln_rt.a, plus `kiln run`
  on it (skipped while `kiln run --help` does not answer).
* generated: graphs compiled by kiln itself, checked against the interpreter, NumPy and
  PyTorch, and with `kiln run --check`; skipped until `kiln compile --help` answers
  (KILN_TEST_FORCE_COMPILE=1 runs them anyway).

Exit status 0 when everything ran passed (skipped tests print why), 1 on a failure, 77 when
everything was skipped.
"""

import argparse
import concurrent.futures
import os
import shutil
import subprocess
import sys
import tempfile
import traceback

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "python"))

TESTS = []


class Skip(Exception):
    pass


def test(group):
    def deco(fn):
        TESTS.append((group, fn.__name__, fn))
        return fn
    return deco


def expect_error(fn, *parts, status=None):
    """fn() must raise kiln.Error whose message contains every part."""
    import kiln
    try:
        fn()
    except kiln.Error as e:
        msg = str(e)
        for p in parts:
            assert p in msg, "message %r lacks %r" % (msg, p)
        if status is not None:
            assert e.status == status, "status %r, want %r (%s)" % (e.status, status, msg)
        return e
    raise AssertionError("no kiln.Error raised (want %r)" % (parts,))


class Env:
    kiln_bin = None
    build = None
    tmp = None
    fake = {}  # FAKE_BUG -> path of the fake module
    has_run = False
    has_compile = False


def answers(cmd, word):
    """True when `kiln CMD --help` exits 0 and prints a usage mentioning word."""
    try:
        p = subprocess.run([Env.kiln_bin, cmd, "--help"], capture_output=True, text=True,
                           timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    out = (p.stdout + p.stderr).lower()
    return p.returncode == 0 and "usage" in out and word in out


def build_compiler():
    """The C compiler of the build under test (its OpenMP runtime must match libkiln_rt.a's)."""
    try:
        with open(os.path.join(Env.build, "CMakeCache.txt")) as f:
            for line in f:
                if line.startswith("CMAKE_C_COMPILER:"):
                    return line.split("=", 1)[1].strip()
    except OSError:
        pass
    return os.environ.get("CC") or shutil.which("cc") or "gcc"


def build_fake(bug=0):
    if bug in Env.fake:
        return Env.fake[bug]
    rt = os.path.join(Env.build, "libkiln_rt.a")
    if not os.path.exists(rt):
        raise AssertionError("no %s" % rt)
    cc = build_compiler()
    out = os.path.join(Env.tmp, "fake%d.so" % bug)
    cmd = [cc, "-std=c11", "-O1", "-fPIC", "-shared", "-fopenmp", "-DFAKE_BUG=%d" % bug,
           "-Iinclude", "tests/abi/fake_module.c", "-Wl,--whole-archive", rt,
           "-Wl,--no-whole-archive", "-o", out]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    assert p.returncode == 0, "building the fake module failed:\n%s\n%s" % (" ".join(cmd),
                                                                          p.stderr)
    Env.fake[bug] = out
    return out


# ---------------------------------------------------------------- libkiln: parse, hash, eval

MM = """input a: f32[6, 5]
weight b: f32[5, 4]
C[i, j] += a[i, k] * b[k, j]
output C
"""


@test("libkiln")
def parse_describes_graph():
    import kiln
    g = kiln.parse(MM, "mm.kg")
    assert [a["name"] for a in g.args] == ["a", "b"]
    assert g.args[0]["shape"] == (6, 5) and g.args[0]["dtype"] == "f32"
    assert g.args[1]["kind"] == "weight" and g.args[0]["kind"] == "input"
    assert [o["name"] for o in g.outputs] == ["C"] and g.outputs[0]["shape"] == (6, 4)
    assert g.flops >= 2 * 6 * 5 * 4 - 6 * 4, g.flops
    assert g.bytes > 0
    assert "C[i, j] += a[i, k] * b[k, j]" in g.print()
    assert kiln.parse(g.print()).hash == g.hash


@test("libkiln")
def parse_errors_have_location():
    import kiln
    e = expect_error(lambda: kiln.parse("input a: f32[4]\ny = nosuchop(a)\n", "bad.kg"),
                     "bad.kg:2:", "nosuchop", status="invalid")
    assert "error" in str(e)
    expect_error(lambda: kiln.parse("input a: f32[4\n"), "1:")


@test("libkiln")
def hash_ignores_names_not_shapes():
    import kiln
    h = kiln.graph_hash(MM)
    renamed = ("input x: f32[6, 5]\nweight w: f32[5, 4]\n"
               "Out[p, q] += x[p, r] * w[r, q]\noutput Out\n")
    assert kiln.graph_hash(renamed) == h
    assert kiln.graph_hash(MM.replace("[6, 5]", "[7, 5]")) != h
    assert kiln.graph_hash(MM.replace("f32", "f64")) != h
    assert kiln.graph_hash(MM.replace("+=", "max=")) != h
    assert 0 <= h < 2 ** 64


@test("libkiln")
def eval_matches_numpy():
    import numpy as np
    import kiln
    rng = np.random.default_rng(1)
    a = rng.uniform(-1, 1, (6, 5)).astype(np.float32)
    b = rng.uniform(-1, 1, (5, 4)).astype(np.float32)
    c = kiln.eval(MM, a, b)
    assert c.dtype == np.float64 and c.shape == (6, 4)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-12, atol=1e-12)

    src = """input x: f32[3, 7]
input y: f32[7]
s[i] += x[i, j]
m[i] max= x[i, j] * y[j]
z[i, j] = select(x[i, j] > 0, x[i, j], 0.1 * x[i, j]) + y[j]
output s
output m
output z
"""
    x = rng.uniform(-1, 1, (3, 7))
    y = rng.uniform(-1, 1, 7)
    s, m, z = kiln.eval(src, x, y)
    np.testing.assert_allclose(s, x.sum(1), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(m, (x * y).max(1), rtol=1e-12)
    np.testing.assert_allclose(z, np.where(x > 0, x, 0.1 * x) + y, rtol=1e-12, atol=1e-12)


@test("libkiln")
def eval_library_ops_match_torch():
    import numpy as np
    import torch
    import kiln
    torch.manual_seed(0)
    x = torch.randn(4, 10, dtype=torch.float64)
    w = torch.randn(10, 6, dtype=torch.float64)
    src = """input x: f32[4, 10]
weight w: f32[10, 6]
h = matmul(x, w)
r = relu(h)
p = softmax(r)
output p
output h
"""
    p, h = kiln.eval(src, x, w)  # torch tensors in: converted to float64
    np.testing.assert_allclose(h, (x @ w).numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(p, torch.softmax(torch.relu(x @ w), dim=-1).numpy(), rtol=1e-6,
                               atol=1e-9)


@test("libkiln")
def eval_integers_keep_their_dtype():
    import numpy as np
    import kiln
    src = "input a: i32[5]\ny[i] = a[i] * 3 + a[i] // 2\noutput y\n"
    a = np.array([-4, -1, 0, 3, 4], dtype=np.int32)
    y = kiln.eval(src, a)
    assert y.dtype == np.int32, y.dtype
    assert list(y) == list(a * 3 + a // 2)


@test("libkiln")
def import_onnx_takes_shapes():
    """import_onnx(shapes=): a symbolic dimension by its name or an input's whole shape; none
    given is an error naming the dimension, a name that is neither is an error too."""
    try:
        from onnx import TensorProto, helper
    except ImportError:
        raise Skip("onnx is not installed")
    import kiln
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "dyn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()
    assert kiln.import_onnx(model, shapes={"batch": 2}).args[0]["shape"] == (2, 3)
    assert kiln.import_onnx(model, shapes={"x": (5, 3)}).args[0]["shape"] == (5, 3)
    expect_error(lambda: kiln.import_onnx(model), "dimension 0 is 'batch'")
    expect_error(lambda: kiln.import_onnx(model, shapes={"seq": 4}),
                 "no graph input and no symbolic dimension")
    expect_error(lambda: kiln.import_onnx(model, shapes={"x": (5, 4)}), "fixes it to 3")


@test("libkiln")
def dtype_table_matches_libkiln():
    """kiln._dlpack's table is enum kiln_dtype in order: names and sizes from libkiln, DLPack
    codes (kDLUInt for u8 .. u64), and every dtype's values survive kiln.eval (wrapping)."""
    import ctypes
    import numpy as np
    import kiln
    from kiln import _dlpack as dl, libkiln
    L = libkiln.lib()
    name = ctypes.CFUNCTYPE(ctypes.c_char_p, ctypes.c_int)(("kiln_dtype_name", L))
    size = ctypes.CFUNCTYPE(ctypes.c_size_t, ctypes.c_int)(("kiln_dtype_size", L))
    for i, d in enumerate(dl.DTYPES):
        assert name(i).decode() == d.name, (i, name(i), d.name)
        assert size(i) * 8 == d.bits, (d.name, size(i))
    assert name(len(dl.DTYPES)) == b"void", "libkiln has dtypes the table lacks"
    for n, code, bits in [("u8", dl.KDL_UINT, 8), ("u16", dl.KDL_UINT, 16),
                          ("u32", dl.KDL_UINT, 32), ("u64", dl.KDL_UINT, 64),
                          ("i16", dl.KDL_INT, 16)]:
        d = dl.BY_NAME[n]
        assert (d.code, d.bits, d.numpy, d.torch) == (code, bits, d.numpy, d.numpy)
        assert dl.BY_NUMPY[np.dtype(d.numpy).name] is d and dl.BY_TORCH[d.torch] is d
        npdt = np.dtype(d.numpy)
        top = min(np.iinfo(npdt).max, 2**40)  # kiln.eval passes values as doubles
        a = np.array([0, 1, 7, top // 3, top], dtype=npdt)
        src = "input a: %s[5]\ny[i] = a[i] * %s(3) + %s(2)\noutput y\n" % (n, n, n)
        y = kiln.eval(src, a)
        want = a * npdt.type(3) + npdt.type(2)  # NumPy wraps arrays at the width
        assert y.dtype == npdt and (y == want).all(), (n, y, want)


@test("libkiln")
def eval_rejects_bad_inputs():
    import numpy as np
    import kiln
    expect_error(lambda: kiln.eval(MM, np.zeros((6, 5))), "expected 2 inputs (a, b), got 1")
    expect_error(lambda: kiln.eval(MM, np.zeros((6, 5)), np.zeros((4, 5))),
                 "argument 1 (b) has shape [4, 5], expected [5, 4]")


# ---------------------------------------------------------------- module: the fake module

@test("module")
def module_metadata():
    import kiln
    m = kiln.load(build_fake())
    assert m.name == "fake_mm"
    assert [a.name for a in m.args] == ["a", "b"] and [o.name for o in m.outputs] == ["C"]
    assert m.args[1].role == "weight" and m.outputs[0].align == 16
    assert m.outputs[0].shape == (5, 3) and m.outputs[0].dtype.name == "f32"
    assert m.metadata["abi_version"] == 2
    assert "C[i, j] += a[i, k] * b[k, j]" in m.source
    assert "fake_mm" in repr(m)


@test("module")
def module_numpy_zero_copy():
    import numpy as np
    import kiln
    m = kiln.load(build_fake())
    rng = np.random.default_rng(2)
    a = rng.uniform(-1, 1, (5, 7)).astype(np.float32)
    b = rng.uniform(-1, 1, (7, 3)).astype(np.float32)
    c = m(a, b)
    assert isinstance(c, np.ndarray) and c.dtype == np.float32 and c.shape == (5, 3)
    assert c.ctypes.data % 16 == 0
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-6)
    # out= is written in place and returned
    out = kiln.aligned_empty((5, 3), "f32")
    r = m(a, b, out=out)
    assert r is out
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-6)
    r = m(a, b, out=[out])
    assert isinstance(r, list) and r[0] is out
    # read-only inputs are fine; the interpreter agrees
    a.setflags(write=False)
    np.testing.assert_allclose(m(a, b), kiln.eval(m.source, a, b), rtol=1e-5, atol=1e-6)


@test("module")
def module_torch_dlpack():
    import numpy as np
    import torch
    import kiln
    m = kiln.load(build_fake())
    a = torch.rand(5, 7) - 0.5
    b = (torch.rand(7, 3) - 0.5).requires_grad_()
    c = m(a, b)
    assert isinstance(c, torch.Tensor) and c.dtype == torch.float32 and tuple(c.shape) == (5, 3)
    torch.testing.assert_close(c, (a @ b).detach(), rtol=1e-5, atol=1e-6)
    out = torch.empty(5, 3)
    assert m(a, b, out=out) is out
    torch.testing.assert_close(out, (a @ b).detach(), rtol=1e-5, atol=1e-6)
    # a contiguous slice with a storage offset: zero-copy means the right bytes are read
    big = torch.rand(9, 7)
    view = big[4:]
    assert view.is_contiguous() and view.storage_offset() == 28
    torch.testing.assert_close(m(view, b), (view @ b).detach(), rtol=1e-5, atol=1e-6)
    # mixing libraries: outputs follow the first input
    assert isinstance(m(a.numpy(), b.detach()), np.ndarray)


@test("module")
def module_errors_before_the_call():
    import numpy as np
    import torch
    import kiln
    m = kiln.load(build_fake())
    a = np.zeros((5, 7), np.float32)
    b = np.zeros((7, 3), np.float32)
    expect_error(lambda: m(a), "expected 2 inputs (a, b), got 1")
    expect_error(lambda: m(a.astype(np.float64), b), "argument 0 (a) has dtype f64, expected f32")
    expect_error(lambda: m(a, b.astype(np.int32)), "argument 1 (b) has dtype i32, expected f32")
    expect_error(lambda: m(a, np.zeros((3, 7), np.float32)),
                 "argument 1 (b) has shape [3, 7], expected [7, 3]")
    expect_error(lambda: m(np.zeros((7, 5), np.float32).T, b),
                 "argument 0 (a) is not C-contiguous")
    expect_error(lambda: m([[0.0] * 7] * 5, b), "argument 0 (a) is a list")
    wide = kiln.aligned_empty((5, 4), "f32")
    expect_error(lambda: m(a, b, out=wide[:, 1:]), "argument 2 (C) is not C-contiguous")
    odd = kiln.aligned_empty((16,), "f32")[1:].reshape(5, 3)
    expect_error(lambda: m(a, b, out=odd), "argument 2 (C) has data address",
                 "not aligned to 16 bytes")
    ro = kiln.aligned_empty((5, 3), "f32")
    ro.setflags(write=False)
    expect_error(lambda: m(a, b, out=ro), "argument 2 (C) is an output but the array is read-only")
    expect_error(lambda: m(a, b, out=(ro, ro)), "expected 1 output (C) in out=, got 2")
    expect_error(lambda: m(torch.zeros(5, 7, dtype=torch.float64), b),
                 "argument 0 (a) has dtype f64, expected f32")
    expect_error(lambda: m(torch.zeros(7, 5).t(), b), "argument 0 (a) is not contiguous")
    expect_error(lambda: m.set_num_threads(-1), "negative")


@test("module")
def module_errors_from_the_abi():
    import numpy as np
    import kiln
    m = kiln.load(build_fake())
    a = kiln.aligned(np.ones((5, 7), np.float32))
    b = np.ones((7, 3), np.float32)
    alias = a.reshape(-1)[:15].reshape(5, 3)  # C would overwrite a while it is read
    expect_error(lambda: m(a, b, out=alias),
                 "argument 2 (C) is an output and overlaps argument 0 (a)", status="alias")
    a[0, 0] = -1234.0  # the fake kernel then reports a failed temporary allocation
    expect_error(lambda: m(a, b), "a temporary buffer could not be allocated", status="nomem")


@test("module")
def module_threads_and_concurrency():
    import numpy as np
    import kiln
    m = kiln.load(build_fake())
    rng = np.random.default_rng(3)
    a = rng.uniform(-1, 1, (5, 7)).astype(np.float32)
    b = rng.uniform(-1, 1, (7, 3)).astype(np.float32)
    want = m(a, b)
    for n in (1, 2, 3, 0):
        m.set_num_threads(n)
        np.testing.assert_array_equal(m(a, b), want)

    def work(_):
        return all(np.array_equal(m(a, b), want) for _ in range(50))
    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        assert all(ex.map(work, range(8)))


@test("module")
def module_load_errors():
    import kiln
    expect_error(lambda: kiln.load("/nonexistent/x.so"), "cannot open /nonexistent/x.so")
    junk = os.path.join(Env.tmp, "junk.so")
    with open(junk, "w") as f:
        f.write("not ELF\n")
    expect_error(lambda: kiln.load(junk), "cannot load")
    libm = _libm()
    if libm:
        expect_error(lambda: kiln.load(libm), "is not a kiln module: it does not export "
                     "kiln_abi_version")


@test("module")
def module_native_byte_order_only():
    import numpy as np
    import kiln
    m = kiln.load(build_fake())
    seed = int.from_bytes(os.urandom(4), "little")
    print("seed %d" % seed)
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, (5, 7)).astype(np.float32)
    b = rng.uniform(-1, 1, (7, 3)).astype(np.float32)
    want = m(a, b)
    swapped = "<f4" if sys.byteorder == "big" else ">f4"
    sa = kiln.aligned(a.astype(swapped))
    expect_error(lambda: m(sa, b), "argument 0 (a) has dtype %s" % swapped,
                 "kiln needs native byte order", "newbyteorder('=')")
    expect_error(lambda: m(a, b.astype(swapped)), "argument 1 (b) has dtype %s" % swapped)
    out = kiln.aligned_empty((5, 3), swapped)
    expect_error(lambda: m(a, b, out=out), "argument 2 (C) has dtype %s" % swapped)
    # the conversion the message suggests gives the native result
    np.testing.assert_array_equal(m(kiln.aligned(sa.astype(sa.dtype.newbyteorder("="))), b),
                                  want)


@test("module")
def module_load_refuses_truncated_files():
    import kiln
    with open(build_fake(), "rb") as f:
        whole = f.read()
    cut = os.path.join(Env.tmp, "cut.so")
    for n in (0, 3, 40, 64, 200, len(whole) // 2, len(whole) - 1):
        with open(cut, "wb") as f:
            f.write(whole[:n])
        # a crash would kill the test process: run the load in a child
        code = ("import sys; sys.path.insert(0, %r); import kiln\n"
                "try:\n    kiln.load(%r)\nexcept kiln.Error as e:\n    print(e); sys.exit(3)\n"
                % (os.path.join(REPO, "python"), cut))
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 3, (n, p.returncode, p.stdout, p.stderr)
        if n >= 4:
            assert "%s: not a complete kiln module (truncated: the file has %d bytes" % (
                cut, n) in p.stdout, (n, p.stdout)
        else:
            assert "cut.so" in p.stdout, (n, p.stdout)
    kiln.load(build_fake())  # the whole file still loads


def _libm():
    for p in ("/lib/x86_64-linux-gnu/libm.so.6", "/usr/lib/x86_64-linux-gnu/libm.so.6",
              "/lib64/libm.so.6"):
        if os.path.exists(p):
            return p
    return None


def kiln_run(*args):
    return subprocess.run([Env.kiln_bin, "run"] + list(args), capture_output=True, text=True,
                          timeout=300)


@test("module")
def kiln_run_checks_the_fake_module():
    import kiln
    if not Env.has_run:
        raise Skip("`kiln run --help` does not answer yet (cli/main.c has no `run` command)")
    p = kiln_run(build_fake(), "--check", "--seed", "3")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "PASS" in p.stdout and "C  f32[5, 3]  sum=" in p.stdout, p.stdout
    src = os.path.join(Env.tmp, "fake.kg")
    with open(src, "w") as f:
        f.write(kiln.load(build_fake()).source)
    e = subprocess.run([Env.kiln_bin, "eval", src, "--seed", "3"], capture_output=True,
                       text=True, timeout=60)
    if e.returncode == 0:  # same seed, same inputs: the sums agree to float precision
        got = float(p.stdout.split("sum=")[1].split()[0])
        want = float(e.stdout.split("sum=")[1].split()[0])
        assert abs(got - want) <= 1e-5 * (1 + abs(want)), (p.stdout, e.stdout)
    p = kiln_run(build_fake(), "--bench", "--min-time", "0.01", "--repeat", "3", "--threads", "2")
    assert p.returncode == 0 and "GFLOP/s" in p.stdout, p.stdout + p.stderr
    for bug, words in ((1, "FAIL"), (2, "never written"), (3, "were written"),
                       (4, "was modified")):
        p = kiln_run(build_fake(bug), "--check")
        assert p.returncode == 1, (bug, p.stdout, p.stderr)
        assert words in p.stdout, (bug, p.stdout)
    p = kiln_run("/nonexistent.so")
    assert p.returncode == 1 and "cannot open /nonexistent.so" in p.stderr, p.stderr
    p = kiln_run(build_fake(), "--bogus")
    assert p.returncode == 2 and "unknown option '--bogus'" in p.stderr, p.stderr
    p = kiln_run("--help")
    assert p.returncode == 0 and "--check" in p.stdout


# ---------------------------------------------------------------- generated shared objects

def compiled(src, name):
    import kiln
    if not Env.has_compile:
        raise Skip("`kiln compile --help` does not answer yet: no generated shared objects")
    return kiln.compile(src, os.path.join(Env.tmp, name + ".so"), name=name)


GRAPHS = {
    "matmul": MM.replace("[6, 5]", "[33, 17]").replace("[5, 4]", "[17, 20]"),
    "mlp": """input x: f32[8, 24]
weight w: f32[24, 16]
weight bias: f32[16]
h = matmul(x, w)
y[i, j] = h[i, j] + bias[j]
r = relu(y)
p = softmax(r)
output p
""",
    "reduce": """input x: f32[10, 37]
s[i] += x[i, j]
m[i] max= x[i, j]
n[i] min= x[i, j] * 2
output s
output m
output n
""",
}


def oracle_inputs(g, seed):
    import numpy as np
    rng = np.random.default_rng(seed)
    out = []
    for a in g.args:
        x = rng.uniform(-1, 1, a["shape"]).astype(np.float32)
        out.append(kiln_aligned(x))
    return out


def kiln_aligned(x):
    import kiln
    return kiln.aligned(x)


@test("generated")
def generated_matches_interpreter_numpy_torch():
    import numpy as np
    import torch
    import kiln
    for name, src in GRAPHS.items():
        m = compiled(src, name)
        g = kiln.parse(m.source)
        assert m.metadata["graph_hash"] == "%016x" % g.hash == "%016x" % kiln.graph_hash(src)
        xs = oracle_inputs(g, 4)
        want = kiln.eval(src, *xs)
        got = m(*xs)
        if not isinstance(want, tuple):
            want, got = (want,), (got,)
        for w, o in zip(want, got):
            np.testing.assert_allclose(o, w, rtol=1e-4, atol=1e-5, err_msg=name)
        tgot = m(*[torch.from_numpy(x) for x in xs])
        if not isinstance(tgot, tuple):
            tgot = (tgot,)
        for w, o in zip(want, tgot):
            assert isinstance(o, torch.Tensor)
            np.testing.assert_allclose(o.numpy(), w, rtol=1e-4, atol=1e-5, err_msg=name)
    # against NumPy and PyTorch directly
    m = compiled(GRAPHS["mlp"], "mlp")
    x, w, bias = oracle_inputs(kiln.parse(GRAPHS["mlp"]), 5)
    ref = torch.softmax(torch.relu(torch.from_numpy(x) @ torch.from_numpy(w)
                                   + torch.from_numpy(bias)), dim=-1)
    np.testing.assert_allclose(m(x, w, bias), ref.numpy(), rtol=1e-4, atol=1e-6)
    m = compiled(GRAPHS["reduce"], "reduce")
    (x,) = oracle_inputs(kiln.parse(GRAPHS["reduce"]), 6)
    s, mx, mn = m(x)
    np.testing.assert_allclose(s, x.sum(1), rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(mx, x.max(1))
    np.testing.assert_array_equal(mn, (x * 2).min(1))


@test("generated")
def generated_prepared_calls():
    """Module.prepare: a schedule packing the weight; prepared calls equal the interpreter,
    also after new inputs, and after new weights with a new prepare."""
    import numpy as np
    import kiln
    src = GRAPHS["matmul"]
    if not Env.has_compile:
        raise Skip("`kiln compile --help` does not answer yet: no generated shared objects")
    sched = {"steps": [{"op": "pack", "stage": "b", "dim": 1, "factor": 4, "outer": 0}]}
    g = kiln.parse(src)
    m = kiln.compile(src, os.path.join(Env.tmp, "prep.so"), schedule=sched, name="prep")
    assert m.metadata["prepared_bytes"] > 0
    a, b = oracle_inputs(g, 8)
    p = m.prepare(a, b)
    for _ in range(2):
        np.testing.assert_allclose(p(a, b), kiln.eval(src, a, b), rtol=1e-4, atol=1e-5)
    a2, b2 = oracle_inputs(g, 9)
    np.testing.assert_allclose(p(a2, b), kiln.eval(src, a2, b), rtol=1e-4, atol=1e-5)
    p2 = m.prepare(a2, b2)
    np.testing.assert_allclose(p2(a2, b2), kiln.eval(src, a2, b2), rtol=1e-4, atol=1e-5)
    p.free()
    expect_error(lambda: p(a, b), "freed")
    expect_error(lambda: m.prepare(a), "expected 2 inputs")


@test("generated")
def generated_threads_out_and_errors():
    import numpy as np
    import kiln
    m = compiled(GRAPHS["matmul"], "matmul")
    xs = oracle_inputs(kiln.parse(m.source), 7)
    want = m(*xs)
    for n in (1, 2, 0):
        m.set_num_threads(n)
        np.testing.assert_allclose(m(*xs), want, rtol=1e-6, atol=1e-6)
    out = kiln.aligned_empty(want.shape, "f32")
    assert m(*xs, out=out) is out
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)
    expect_error(lambda: m(xs[0]), "expected 2 inputs (a, b), got 1")
    expect_error(lambda: m(xs[0].astype(np.float64), xs[1]), "argument 0 (a) has dtype f64")

    def work(_):
        return all(np.allclose(m(*xs), want, rtol=1e-6, atol=1e-6) for _ in range(20))
    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        assert all(ex.map(work, range(8)))


@test("generated")
def generated_kiln_run_check():
    if not Env.has_run:
        raise Skip("`kiln run --help` does not answer yet")
    compiled(GRAPHS["mlp"], "mlp_run")
    p = kiln_run(os.path.join(Env.tmp, "mlp_run.so"), "--check")
    assert p.returncode == 0 and "PASS" in p.stdout, p.stdout + p.stderr


# ---------------------------------------------------------------- driver

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True, help="the kiln binary of the build to test")
    ap.add_argument("filter", nargs="?", default=None)
    opt = ap.parse_args()
    Env.kiln_bin = os.path.abspath(opt.kiln)
    Env.build = os.path.dirname(Env.kiln_bin)
    os.chdir(REPO)
    lib = os.path.join(Env.build, "libkiln.so")
    if not os.environ.get("KILN_LIB"):
        os.environ["KILN_LIB"] = lib
    try:
        import numpy  # noqa: F401
        import torch  # noqa: F401
    except ImportError as e:
        print("skip: NumPy or PyTorch missing (%s); use Debian's /usr/bin/python3" % e)
        return 77
    import kiln
    try:
        kiln.lib()
    except kiln.Error as e:
        print("skip: %s" % e)
        return 77
    Env.has_run = answers("run", "--check")
    Env.has_compile = answers("compile", "compile") or bool(
        os.environ.get("KILN_TEST_FORCE_COMPILE"))
    Env.tmp = tempfile.mkdtemp(prefix="kiln-py-")
    passed = failed = skipped = 0
    try:
        for group, name, fn in TESTS:
            full = "%s.%s" % (group, name)
            if opt.filter and opt.filter not in full:
                continue
            try:
                fn()
                print("ok   %s" % full)
                passed += 1
            except Skip as s:
                print("skip %s: %s" % (full, s))
                skipped += 1
            except Exception:  # noqa: BLE001 - every failure is reported, the rest still run
                print("FAIL %s" % full)
                traceback.print_exc(file=sys.stdout)
                failed += 1
    finally:
        shutil.rmtree(Env.tmp, ignore_errors=True)
    print("%d passed, %d failed, %d skipped" % (passed, failed, skipped))
    if failed:
        return 1
    return 77 if skipped and not passed else 0


if __name__ == "__main__":
    sys.exit(main())
