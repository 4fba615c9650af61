#!/usr/bin/python3
"""benchmarks/bench_scale.py -- how compile time and memory grow with the graph (issue 26).

    /usr/bin/python3 benchmarks/bench_scale.py [--kiln BUILD/kiln] [--sizes 1000,10000,100000]
        [--cases chain,fan,onnx_chain] [--stages parse,lower,compile] [--untuned serial|predict]
        [--timeout S] [--out DIR]

Each case is a graph of N statements (or ONNX nodes) built for every N of --sizes:

  chain        .kg: t0 = x * 0.5 + 1, t1 = t0 * 0.5 + 1, ... (each reads the one before), f32[64]
  fan          .kg: N statements that each read the input x (f32[64]) and are each an output
  onnx_chain   ONNX: N Relu nodes in a chain over f32[64] (opset 13)

and each stage runs `kiln` on it in a process of its own:

  parse        `kiln inspect FILE`: read or import the graph, graph passes, statistics
  lower        `kiln compile FILE --print-flat -o /dev/null`: also lowered, flattened, simplified
  compile      `kiln compile FILE -o OUT.so`: also compiled by LLVM and linked

`lower` and `compile` pass `--no-db --untuned U` (default serial): with `serial`, the graph's
tasks keep the default schedule and the benchmark measures compilation itself; `predict` (what
`kiln compile` does by default) adds the cost model's schedule search per task (tuner/), whose
cost is measured separately this way.

For each, the wall time and the peak resident memory of that process (wait4's ru_maxrss), and
the growth exponent between consecutive sizes, log(t2 / t1) / log(n2 / n1): 1 is linear, 2
quadratic. For onnx_chain the peer runs in the same benchmark: ONNX Runtime's
InferenceSession creation on the same file (graph optimisation and kernel setup, ORT_ENABLE_ALL,
one thread; the time the child measures around it, without the interpreter's start), when
onnxruntime can be imported (scripts/setup.sh puts it in .pydeps/), and kiln's compile time
over it. kiln does more (it generates and links machine code), but that is the cost a user
sees before the first call in either.

A run that exceeds --timeout (default 300 s) is killed and reported as "> S"; larger sizes of
that case and stage are skipped. Exit status 0 after a complete run, 2 on a usage error.
"""

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, ".pydeps"))

CASES = ["chain", "fan", "onnx_chain"]
STAGES = ["parse", "lower", "compile"]


def write_chain(path, n):
    with open(path, "w") as f:
        f.write("input x: f32[64]\n")
        prev = "x"
        for i in range(n):
            f.write("t%d[i] = %s[i] * 0.5 + 1.0\n" % (i, prev))
            prev = "t%d" % i
        f.write("output %s\n" % prev)


def write_fan(path, n):
    with open(path, "w") as f:
        f.write("input x: f32[64]\n")
        for i in range(n):
            f.write("t%d[i] = x[i] * %d.0 + 1.0\n" % (i, i + 1))
        for i in range(n):
            f.write("output t%d\n" % i)


def write_onnx_chain(path, n):
    import onnx
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Relu", ["x" if i == 0 else "r%d" % (i - 1)], ["r%d" % i])
             for i in range(n)]
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         [64])],
                          [helper.make_tensor_value_info("r%d" % (n - 1), TensorProto.FLOAT,
                                                         [64])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


WRITERS = {"chain": (write_chain, ".kg"), "fan": (write_fan, ".kg"),
           "onnx_chain": (write_onnx_chain, ".onnx")}


def run(cmd, timeout, out=None):
    """Wall seconds and peak RSS (MiB) of cmd, or (None, None) when it timed out; its stdout
    goes to the file object out (None: discarded)."""
    t0 = time.perf_counter()
    env = dict(os.environ, KILN_CACHE="off")  # no user's records cache
    p = subprocess.Popen(cmd, stdout=out or subprocess.DEVNULL, stderr=subprocess.PIPE,
                         env=env)
    deadline = t0 + timeout
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() > deadline:
            p.kill()
            os.wait4(p.pid, 0)
            return None, None
        time.sleep(0.01)
    wall = time.perf_counter() - t0
    err = p.stderr.read().decode(errors="replace")
    p.stderr.close()
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
        return wall, ru.ru_maxrss / 1024.0
    sys.exit("bench_scale: %s failed (status %d): %s" % (" ".join(cmd), status, err[-2000:]))


def ort_session(path, timeout):
    """ONNX Runtime session creation, in a child process: the seconds it printed (not the
    interpreter's start or the import) and the child's peak RSS in MiB."""
    code = ("import sys; sys.path.insert(0, %r); import onnxruntime as ort; "
            "o = ort.SessionOptions(); o.intra_op_num_threads = 1; o.inter_op_num_threads = 1; "
            "o.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL; "
            "import time; t = time.perf_counter(); ort.InferenceSession(%r, o, "
            "providers=['CPUExecutionProvider']); print(time.perf_counter() - t)"
            % (os.path.join(ROOT, ".pydeps"), path))
    with tempfile.TemporaryFile() as out:
        wall, mem = run([sys.executable, "-c", code], timeout, out)
        if wall is None:
            return None, None
        out.seek(0)
        return float(out.read().decode().strip().split()[-1]), mem


def have_ort():
    import importlib.util
    return importlib.util.find_spec("onnxruntime") is not None


def exponent(prev, cur):
    if not prev or prev[1] is None or cur[1] is None or prev[1] <= 0 or cur[1] <= 0:
        return ""
    return "%.2f" % (math.log(cur[1] / prev[1]) / math.log(cur[0] / prev[0]))


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "kiln"))
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--stages", default=",".join(STAGES))
    ap.add_argument("--untuned", default="serial", choices=["serial", "predict"])
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--out", default=None, help="keep the generated files here")
    opt = ap.parse_args(argv)
    try:
        sizes = sorted({int(s) for s in opt.sizes.split(",") if s})
    except ValueError:
        ap.error("--sizes: comma-separated integers")
    cases = [c for c in opt.cases.split(",") if c]
    stages = [s for s in opt.stages.split(",") if s]
    for c in cases:
        if c not in CASES:
            ap.error("--cases: unknown case %r; known: %s" % (c, ", ".join(CASES)))
    for s in stages:
        if s not in STAGES:
            ap.error("--stages: unknown stage %r; known: %s" % (s, ", ".join(STAGES)))
    if not sizes or sizes[0] < 1:
        ap.error("--sizes: positive integers")
    if not os.access(opt.kiln, os.X_OK):
        ap.error("--kiln: %s is not an executable (build first: scripts/build.sh build)"
                 % opt.kiln)
    ort = have_ort()
    tmp = opt.out or tempfile.mkdtemp(prefix="bench_scale.")
    os.makedirs(tmp, exist_ok=True)
    env_note = "machine: %s" % (open("/proc/cpuinfo").read().split("model name")[1]
                                .split("\n")[0].strip(" :\t") if os.path.exists("/proc/cpuinfo")
                                else "?")
    print(env_note + "; --untuned " + opt.untuned)
    print("%-11s %-8s %8s %10s %9s %6s %10s %9s %6s %9s" % (
        "case", "stage", "n", "kiln s", "MiB", "exp", "ORT s", "MiB", "exp", "kiln/ORT"))
    for case in cases:
        writer, ext = WRITERS[case]
        files = {}
        for n in sizes:
            files[n] = os.path.join(tmp, "%s%d%s" % (case, n, ext))
            writer(files[n], n)
        for stage in stages:
            prev = prev_peer = None
            dead = peer_dead = False
            for n in sizes:
                f = files[n]
                if stage == "parse":
                    cmd = [opt.kiln, "inspect", f]
                elif stage == "lower":
                    cmd = [opt.kiln, "compile", f, "--print-flat", "-o", os.devnull]
                else:
                    cmd = [opt.kiln, "compile", f, "-o", f + ".so"]
                if stage != "parse":
                    # records would change the schedule, not the cost
                    cmd += ["--no-db", "--untuned", opt.untuned]
                t, mem = (None, None) if dead else run(cmd, opt.timeout)
                dead = dead or t is None
                cur = (n, t)
                peer = ""
                if case == "onnx_chain" and stage == "compile" and ort:
                    pt, pm = (None, None) if peer_dead else ort_session(f, opt.timeout)
                    peer_dead = peer_dead or pt is None
                    cur_peer = (n, pt)
                    ratio = "%.1f" % (t / pt) if t is not None and pt else ""
                    peer = "%10s %9s %6s %9s" % ("> %g" % opt.timeout if pt is None else "%.3f" % pt,
                                                 "" if pm is None else "%.0f" % pm,
                                                 exponent(prev_peer, cur_peer), ratio)
                    prev_peer = cur_peer
                print("%-11s %-8s %8d %10s %9s %6s %s" % (
                    case, stage, n, "> %g" % opt.timeout if t is None else "%.3f" % t,
                    "" if mem is None else "%.0f" % mem, exponent(prev, cur), peer), flush=True)
                prev = cur
    if not ort:
        print("(ONNX Runtime not importable: no peer column; scripts/setup.sh installs it)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
