#!/usr/bin/env bash
# scripts/setup_torch.sh -- the PyTorch 2 virtual environment of the torch.compile backend
# (python/kiln/torch_backend.py, python/README.md "torch.compile"): .venv-torch/ in this
# repository (git-ignored; KILN_TORCH_VENV names another place), built from PyPI alone with
# Debian's python3 and python3-venv. Idempotent: a venv whose pinned packages import is kept.
# scripts/test.sh runs it unless KILN_TORCH=off; the tests that need it skip when it is absent.
#
# As lean as PyPI allows: PyPI's torch wheel for Linux is built against CUDA (libtorch_cuda.so
# needs libcudnn, libnccl, libcufile, libcusparseLt, ... at load time), so `import torch` fails
# without the nvidia-* / cuda-* packages, and they are installed. triton (Inductor's GPU kernel
# compiler) is left out: nothing on the CPU loads it. So torch goes in with --no-deps, then its
# requirements as its own metadata lists them, less triton.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${KILN_TORCH_VENV:-$ROOT/.venv-torch}"
PY=/usr/bin/python3

TORCH=(torch==2.14.1 torchvision==0.29.2)          # torchvision 0.29 is built for torch 2.14
DEPS=(
  # torchvision's requirements
  numpy pillow
  # the ONNX export of Dynamo's graphs (torch.onnx) and its check
  onnx==1.23.2 onnxscript==0.7.2
)

check() {
  "$VENV/bin/python" - <<'EOF' 2>/dev/null
import sys, torch, torchvision, onnx, onnxscript, numpy
want = {"torch": "2.14.1", "torchvision": "0.29.2", "onnx": "1.23.2", "onnxscript": "0.7.2"}
have = {"torch": torch.__version__, "torchvision": torchvision.__version__,
        "onnx": onnx.__version__, "onnxscript": onnxscript.__version__}
sys.exit(0 if all(have[k].split("+")[0] == v for k, v in want.items()) else 1)
EOF
}

if [ -x "$VENV/bin/python" ] && check; then
  echo "setup_torch: $VENV present (torch 2.14.1)"
  exit 0
fi
start=$(date +%s)
echo "setup_torch: creating $VENV (torch 2.14.1, from PyPI)"
if ! $PY -c "import ensurepip" 2>/dev/null; then
  echo "setup_torch: Debian's python3-venv is missing (scripts/setup.sh installs it)" >&2
  exit 1
fi
$PY -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
"${PIP[@]}" --no-deps "${TORCH[@]}"
mapfile -t REQS < <("$VENV/bin/python" - <<'EOF'
from importlib.metadata import requires
from pip._vendor.packaging.requirements import Requirement
for r in map(Requirement, requires("torch")):
    if r.name != "triton" and (r.marker is None or r.marker.evaluate({"extra": ""})):
        print(r)
EOF
)
# pip's check of torch's requirements names the missing triton: that line is expected
"${PIP[@]}" "${REQS[@]}" "${DEPS[@]}" 2>&1 | grep -v -e "requires triton" -e "resolver does not currently" || true
if ! check; then
  echo "setup_torch: $VENV was built but torch, torchvision, onnx or onnxscript does not import" >&2
  exit 1
fi
echo "setup_torch: done in $(($(date +%s) - start)) s, $(du -sh "$VENV" | cut -f1)"
