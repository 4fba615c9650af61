#!/usr/bin/env bash
# tests/cli/install.sh -- an installed kiln used from a prefix alone: `cmake --install` of the
# build under test into a temporary prefix, which is then moved elsewhere (an installed kiln
# finds its runner, libkiln_rt.a and headers relative to itself, never through build paths);
# the examples built against the moved prefix only and run: examples/c through pkg-config,
# examples/cpp through find_package(kiln), examples/dlopen (kiln_abi.h and libdl alone) on a
# module the installed kiln compiled; the installed `kiln compile`, `kiln run --check` and a
# 4-trial `kiln tune`; and a prefix missing its runner or libkiln_rt.a giving an error naming
# the path looked for; and the Python package installed with pip, loading that prefix's libkiln.
#   bash tests/cli/install.sh PATH_TO_KILN     (the kiln in a configured and built build tree)
# Skips (exit 77) in a sanitizer build (its installed libraries need the sanitizer runtime the
# examples do not link; the plain build runs this test), and without pkg-config, a C++
# compiler, or a Python with NumPy, pip and setuptools (scripts/setup.sh installs them all).
set -u
KILN=${1:?usage: install.sh PATH_TO_KILN}
BUILD=$(cd "$(dirname "$KILN")" && pwd)
cd "$(dirname "$0")/../.." || exit 1
SRC=$PWD
if grep -Eq '^KILN_SANITIZE:STRING=.+' "$BUILD/CMakeCache.txt" 2>/dev/null; then
    echo "install.sh: skip: a sanitizer build (the examples would need its runtime)"
    exit 77
fi
for tool in cmake pkg-config c++; do
    if ! command -v "$tool" >/dev/null; then
        echo "install.sh: skip: no $tool (scripts/setup.sh installs it)"
        exit 77
    fi
done
T=$(mktemp -d)
trap 'chmod -R u+w "$T" 2>/dev/null; rm -rf "$T"' EXIT
fails=0
fail() {
    echo "FAIL: $*" >&2
    fails=$((fails + 1))
}
LAUNCH=()
command -v ccache >/dev/null && LAUNCH=(ccache)
CC=$(sed -n 's/^CMAKE_C_COMPILER:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
CC=${CC:-cc}

# install, then move the prefix: the installed kiln must find its files where they are now
cmake --install "$BUILD" --prefix "$T/first" >"$T/log" 2>&1 || {
    echo "FAIL: cmake --install: $(cat "$T/log")" >&2
    exit 1
}
mv "$T/first" "$T/p"
P=$T/p
for f in bin/kiln include/kiln.h include/kiln_abi.h lib/kiln/kiln_measure_runner \
    lib/kiln/libkiln_rt.a lib/pkgconfig/kiln.pc lib/cmake/kiln/kilnConfig.cmake; do
    [ -e "$P/$f" ] || fail "the install lacks $f"
done
ls "$P"/lib/libkiln.so* >/dev/null 2>&1 || fail "the install lacks libkiln.so"
[ -e "$P/lib/libkiln.a" ] || fail "the install lacks libkiln.a"
export KILN_CACHE=off
mkdir "$T/w"
# examples/c through pkg-config, with only the moved prefix on pkg-config's path
export PKG_CONFIG_LIBDIR=$P/lib/pkgconfig PKG_CONFIG_PATH=
if flags=$(pkg-config --cflags --libs kiln 2>"$T/log"); then
    libdir=$(pkg-config --variable=libdir kiln)
    # shellcheck disable=SC2086 # flags are words
    if "${LAUNCH[@]}" "$CC" -Wall -Wextra -Werror -O1 examples/c/compile_call.c $flags \
        -Wl,-rpath,"$libdir" -o "$T/c_example" >"$T/log" 2>&1; then
        (cd "$T/w" && TMPDIR=$T/w "$T/c_example") >"$T/out" 2>&1 \
            || fail "examples/c failed: $(cat "$T/out")"
        cat "$T/out"
        grep -q "compile_call: ok" "$T/out" || fail "examples/c printed: $(cat "$T/out")"
    else
        fail "building examples/c: $(cat "$T/log")"
    fi
else
    fail "pkg-config kiln: $(cat "$T/log")"
fi

# examples/cpp through find_package(kiln)
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
if cmake -S examples/cpp -B "$T/cpp" "${gen[@]}" -DCMAKE_PREFIX_PATH="$P" \
    -DCMAKE_CXX_COMPILER_LAUNCHER="${LAUNCH[*]}" -DCMAKE_CXX_FLAGS="-Wall -Wextra -Werror" \
    >"$T/log" 2>&1 && cmake --build "$T/cpp" >>"$T/log" 2>&1; then
    grep -q "^kiln_DIR:PATH=$P/" "$T/cpp/CMakeCache.txt" \
        || fail "find_package(kiln) found $(grep '^kiln_DIR' "$T/cpp/CMakeCache.txt"), not $P"
    (cd "$T/w" && TMPDIR=$T/w "$T/cpp/compile_call") >"$T/out" 2>&1 \
        || fail "examples/cpp failed: $(cat "$T/out")"
    cat "$T/out"
    grep -q "compile_call: ok" "$T/out" || fail "examples/cpp printed: $(cat "$T/out")"
else
    fail "building examples/cpp: $(cat "$T/log")"
fi
rm -rf "$T/cpp"

# the installed kiln command; then examples/dlopen on its module, with kiln_abi.h alone
mkdir "$T/abi" && cp "$P/include/kiln_abi.h" "$T/abi/"
"$P/bin/kiln" compile examples/matmul.kg -o "$T/mm.so" >"$T/log" 2>&1 \
    || fail "installed kiln compile: $(cat "$T/log")"
"$P/bin/kiln" run "$T/mm.so" --check --seed 1 >"$T/log" 2>&1 \
    || fail "installed kiln run --check: $(cat "$T/log")"
if "${LAUNCH[@]}" "$CC" -Wall -Wextra -Werror -O1 -I"$T/abi" examples/dlopen/consumer.c \
    -o "$T/consumer" -ldl -lpthread -lm >"$T/log" 2>&1; then
    "$T/consumer" "$T/mm.so" 128 256 64 >"$T/out" 2>&1 \
        || fail "examples/dlopen failed: $(cat "$T/out")"
    cat "$T/out"
    grep -q "consumer: ok" "$T/out" || fail "examples/dlopen printed: $(cat "$T/out")"
else
    fail "building examples/dlopen: $(cat "$T/log")"
fi
"$P/bin/kiln" tune examples/matmul.kg --trials 4 --db "$T/r.db" --batch 4 --repeat 2 \
    --min-repeat-ms 1 --quiet >"$T/log" 2>&1 || fail "installed kiln tune: $(cat "$T/log")"
# four records measured by the installed runner, none of them an error
"$P/bin/kiln" records "$T/r.db" >"$T/out" 2>&1 || fail "installed kiln records: $(cat "$T/out")"
awk 'NR == 2 && $2 == 4 && $3 == 0 { ok = 1 } END { exit !ok }' "$T/out" \
    || fail "installed kiln tune: want 4 records, 0 errors: $(cat "$T/out")"

# a prefix missing its runner or its runtime library: an error naming the path looked for
mv "$P/lib/kiln/kiln_measure_runner" "$T/runner"
"$P/bin/kiln" tune examples/matmul.kg --trials 4 --db "$T/r2.db" --quiet >"$T/log" 2>&1
rc=$?
if [ "$rc" != 1 ] || ! grep -q "$P/lib/kiln/kiln_measure_runner" "$T/log"; then
    fail "tune without the runner: exit $rc, want 1 and the path: $(cat "$T/log")"
fi
mv "$T/runner" "$P/lib/kiln/kiln_measure_runner"
mv "$P/lib/kiln/libkiln_rt.a" "$T/rt.a"
"$P/bin/kiln" compile examples/matmul.kg -o "$T/mm2.so" >"$T/log" 2>&1
rc=$?
if [ "$rc" != 1 ] || ! grep -q "$P/lib/kiln/libkiln_rt.a" "$T/log"; then
    fail "compile without libkiln_rt.a: exit $rc, want 1 and the path: $(cat "$T/log")"
fi
[ -e "$T/mm2.so" ] && fail "compile without libkiln_rt.a wrote $T/mm2.so"
mv "$T/rt.a" "$P/lib/kiln/libkiln_rt.a"

# the Python package installed with pip (from a copy: setuptools writes next to its sources),
# used from outside this repository with the moved prefix's kiln on PATH: it must load that
# prefix's libkiln, compile with it and match the reference interpreter
PY=$(sed -n 's/^KILN_PYTHON:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
PY=${PY:-/usr/bin/python3}
py_skip=""
if ! "$PY" -c "import numpy, setuptools" 2>/dev/null || ! "$PY" -m pip --version >/dev/null 2>&1; then
    py_skip="$PY lacks numpy, pip or setuptools (scripts/setup.sh installs them)"
else
    cp -r python "$T/pysrc" && rm -rf "$T"/pysrc/kiln/__pycache__
    if "$PY" -m pip install -q --no-deps --no-build-isolation --no-index --root-user-action=ignore \
        --target "$T/py" "$T/pysrc" >"$T/log" 2>&1; then
        (cd "$T/w" && env -u KILN_LIB -u KILN_BIN PATH="$P/bin:$PATH" PYTHONPATH="$T/py" \
            "$PY" - "$T/py" "$P" "$T/w/py.so") >"$T/out" 2>&1 <<'PYEOF' || fail "the pip-installed package: $(cat "$T/out")"
import os, sys
import numpy as np
import kiln
site, prefix, so = sys.argv[1:]
assert os.path.realpath(kiln.__file__).startswith(os.path.realpath(site)), kiln.__file__
lib = kiln.lib()._name
assert os.path.realpath(lib).startswith(os.path.realpath(prefix)), "libkiln from " + lib
src = "input a: f32[8, 16]\nweight b: f32[16, 4]\nc[i, j] += a[i, k] * b[k, j]\noutput c\n"
rng = np.random.default_rng(5)
print("seed 5")
a = rng.standard_normal((8, 16)).astype(np.float32)
b = rng.standard_normal((16, 4)).astype(np.float32)
m = kiln.compile(src, so)
np.testing.assert_allclose(m(a, b), kiln.eval(src, a, b), rtol=1e-4, atol=1e-5)
print("python: ok (libkiln %s)" % lib)
PYEOF
        cat "$T/out"
    else
        fail "pip install of python/: $(cat "$T/log")"
    fi
fi

if [ "$fails" -ne 0 ]; then
    echo "$fails failure(s)" >&2
    exit 1
fi
if [ -n "$py_skip" ]; then
    echo "install.sh: skip: the C, C++ and dlopen parts passed; the Python part did not run: $py_skip"
    exit 77
fi
echo "install.sh: passed (prefix $P, build $BUILD, source $SRC)"
