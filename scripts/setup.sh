#!/usr/bin/env bash
# scripts/setup.sh -- installs everything kiln needs from Debian packages, non-interactively
# and idempotently: packages already present are not fetched again. Run as root (or with sudo
# available). Python route: Debian's /usr/bin/python3 with python3-numpy/torch/onnx/torchvision.
set -euo pipefail

PACKAGES=(
  # build
  build-essential cmake ninja-build pkg-config clang clang-format libclang-rt-14-dev
  # code generation and runtime
  llvm-19-dev libomp-dev zlib1g-dev libzstd-dev libxml2-dev libedit-dev
  # tuner, records, interchange
  libxgboost-dev libsqlite3-dev libcjson-dev libdlpack-dev
  # measurement workers on Redis Streams (kiln worker, kiln tune --queue) and their test
  libhiredis-dev redis-server
  # ONNX import
  protobuf-c-compiler libprotobuf-c-dev libonnx-dev libonnx-testdata
  # reference libraries for benchmarks
  libdnnl-dev libopenblas-dev
  # oracles and training (Debian's Python)
  python3 python3-numpy python3-torch python3-torchvision python3-onnx
  # real data
  dataset-fashion-mnist
  # pip for ONNX Runtime (below); venv for PyTorch 2 (scripts/setup_torch.sh) and TVM
  # (scripts/setup_tvm.sh, opt-in)
  python3-pip python3-venv
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "setup: all ${#PACKAGES[@]} packages present"
fi

# Benchmarks only (benchmarks/bench_e2e.py): ONNX Runtime, which Debian does not package, as
# PyPI's wheel into .pydeps/ in this repository (never into the system's site-packages; its
# dependencies are not needed for inference). A failure only warns: the benchmark then skips it.
ORT_VERSION=1.32.0
PYDEPS="$(cd "$(dirname "$0")/.." && pwd)/.pydeps"
if PYTHONPATH="$PYDEPS" /usr/bin/python3 -c "import onnxruntime" 2>/dev/null; then
  echo "setup: onnxruntime present in .pydeps/"
else
  echo "setup: installing onnxruntime==$ORT_VERSION into .pydeps/ (benchmarks only)"
  /usr/bin/python3 -m pip install -q --root-user-action=ignore --no-deps --upgrade --target "$PYDEPS" \
    "onnxruntime==$ORT_VERSION" \
    || echo "setup: warning: onnxruntime not installed; benchmarks/bench_e2e.py will skip it"
fi
