#!/usr/bin/env bash
# Install PyTorch into a venv, saying which build and from where (make demo, make test).
#
#   bash scripts/install_torch.sh PYTHON [TORCH] [TORCH_INDEX]
#
# In this order:
#   1. TORCH already installed in that venv: nothing to do.
#   2. TORCH_INDEX given: from that index (https://download.pytorch.org/whl/cpu: the CPU build;
#      https://pypi.org/simple: PyPI's build, CUDA on Linux x86-64).
#   3. A wheel this machine already holds, found with no index at all (pip's find-links, e.g.
#      a local wheel cache set in pip.conf or PIP_FIND_LINKS).
#   4. Linux with no NVIDIA GPU (no nvidia-smi): the CPU build from PyTorch's CPU index (about
#      200 MB), never PyPI's default Linux wheel, which pulls several GB of CUDA libraries.
#   5. Otherwise pip's default: on Linux with an NVIDIA GPU the CUDA build; on macOS and
#      Windows PyPI's wheel, which is a CPU (and on macOS an MPS) build.
set -euo pipefail
PY=${1:?usage: install_torch.sh PYTHON [TORCH] [TORCH_INDEX]}
TORCH=${2:-torch==2.13.0}
INDEX=${3:-}
CPU_INDEX=https://download.pytorch.org/whl/cpu
pip() { "$PY" -m pip --disable-pip-version-check -q "$@"; }
say() { echo "[torch] $*"; }
installed() {  # the venv has TORCH: name==version (a local label such as +cpu aside), or name
  "$PY" - "$TORCH" <<'EOF' 2>/dev/null
import sys
from importlib.metadata import version

name, _, want = sys.argv[1].partition("==")
have = version(name.strip())
sys.exit(0 if not want or have.split("+")[0] == want.strip() else 1)
EOF
}
done_msg() {
  say "installed $("$PY" -W ignore -c 'import torch; print("torch", torch.__version__, "CUDA" if torch.version.cuda else "CPU only")')"
}

if installed; then
  say "$TORCH is already installed in this venv"
  exit 0
fi
if [ -n "$INDEX" ]; then
  say "$TORCH from $INDEX (TORCH_INDEX)"
  pip install --index-url "$INDEX" "$TORCH"
  done_msg
  exit 0
fi
if pip install --no-index --no-deps --dry-run "$TORCH" >/dev/null 2>&1; then
  say "$TORCH from a wheel on this machine (pip's find-links: ${PIP_FIND_LINKS:-see pip config list})"
  pip install "$TORCH"
  done_msg
  exit 0
fi
if [ "$(uname -s)" = Linux ] && ! command -v nvidia-smi >/dev/null 2>&1; then
  say "no NVIDIA GPU here: $TORCH, CPU build (about 200 MB), from $CPU_INDEX"
  say "(for PyPI's CUDA build instead: make demo TORCH_INDEX=https://pypi.org/simple)"
  pip install --index-url "$CPU_INDEX" "$TORCH"
  done_msg
  exit 0
fi
if [ "$(uname -s)" = Linux ]; then
  say "an NVIDIA GPU is here: $TORCH from PyPI, the CUDA build (several GB)"
  say "(for the CPU build instead: make demo TORCH_INDEX=$CPU_INDEX)"
else
  say "$TORCH from PyPI (on $(uname -s) its wheel has no CUDA libraries)"
fi
pip install "$TORCH"
done_msg
