#!/usr/bin/env bash
# scripts/setup_tvm.sh [VENV_DIR] -- installs Apache TVM (MetaSchedule, the peer tuner of
# benchmarks/bench_metaschedule.py) from PyPI into a virtual environment, default .venv-tvm/ in
# this repository (git-ignored). Opt-in: scripts/setup.sh does not run it (the wheels are
# large and no test needs them). Idempotent: a venv whose TVM already imports is left alone.
#
# The pins are a combination known to work (benchmarks/README.md): apache-tvm 0.27.0.post1
# works with apache-tvm-ffi 0.1.14.post1; with 0.1.15.post2 MetaSchedule's tune_tir segfaults
# (in tvm::ffi::ToJSONGraph), so the ffi package is pinned too. MetaSchedule's tuner
# also needs psutil, cloudpickle and xgboost; NumPy is for the benchmark itself.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${1:-$ROOT/.venv-tvm}"
PY=/usr/bin/python3
PINS=(apache-tvm==0.27.0.post1 apache-tvm-ffi==0.1.14.post1 psutil cloudpickle xgboost numpy)
CHECK='import tvm, tvm.s_tir.meta_schedule; print(tvm.__version__)'

if [ -x "$VENV/bin/python" ] && v=$("$VENV/bin/python" -c "$CHECK" 2>/dev/null); then
  echo "setup_tvm: TVM $v present in $VENV"
  exit 0
fi
if ! "$PY" -c 'import venv, ensurepip' 2>/dev/null; then
  echo "setup_tvm: $PY cannot make virtual environments: install python3-venv" \
    "(scripts/setup.sh does)" >&2
  exit 1
fi
echo "setup_tvm: creating $VENV and installing ${PINS[*]}"
"$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q "${PINS[@]}"
if ! v=$("$VENV/bin/python" -c "$CHECK"); then
  echo "setup_tvm: TVM installed into $VENV but does not import (above)" >&2
  exit 1
fi
echo "setup_tvm: TVM $v in $VENV; run benchmarks/bench_metaschedule.py"
