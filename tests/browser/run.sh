#!/usr/bin/env bash
# The real-browser widget test: JupyterLab (from the project venv) in headless Debian
# Chromium, driven by the Python playwright package (tests/browser/ui_check.py).
#
#   bash tests/browser/run.sh                  # the test (make browser)
#   bash tests/browser/run.sh --no-widgets     # self-check: with the ipywidgets lab
#                                              # extension disabled the check must FAIL
#   bash tests/browser/run.sh --broken         # self-check: panels broken on purpose
#                                              # (GENLAB_BROKEN, default all; breaks.py):
#                                              # every check they break must FAIL
#   (saved_check.py: a panel's saved HTML view opened offline; run by the modes above)
#
# No retry: a failure is a failure (ui_check.py waits for JupyterLab's kernel connection
# and the widget comm target before Run All, and for the state each check expects).
#
# All Jupyter / IPython / matplotlib / Chromium state stays inside the checkout
# (.jupyter/ .xdg/ .tmp/, gitignored); screenshots go to artifacts/browser/.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
VENV=${VENV:-$ROOT/.venv}
MODE=${1:-normal}
START=$(date +%s)

export TMPDIR=$ROOT/.tmp
export JUPYTER_CONFIG_DIR=$ROOT/.jupyter/config
export JUPYTER_DATA_DIR=$ROOT/.jupyter/data
export JUPYTER_RUNTIME_DIR=$ROOT/.jupyter/runtime
export JUPYTERLAB_SETTINGS_DIR=$ROOT/.jupyter/lab-settings
export JUPYTERLAB_WORKSPACES_DIR=$ROOT/.jupyter/lab-workspaces
export IPYTHONDIR=$ROOT/.jupyter/ipython
export MPLCONFIGDIR=$ROOT/.jupyter/mpl
export XDG_CONFIG_HOME=$ROOT/.xdg/config XDG_CACHE_HOME=$ROOT/.xdg/cache
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONDONTWRITEBYTECODE=1
APP_SETTINGS=$ROOT/.jupyter/app-settings
ARTIFACTS=$ROOT/artifacts/browser
mkdir -p "$TMPDIR" "$JUPYTER_RUNTIME_DIR" "$IPYTHONDIR" "$MPLCONFIGDIR" "$XDG_CONFIG_HOME" \
         "$XDG_CACHE_HOME" "$APP_SETTINGS" "$ARTIFACTS"

# 1. Debian's Chromium (never `playwright install`: no browser downloads)
if ! command -v chromium >/dev/null; then
  if [ "$(id -u)" != 0 ]; then
    echo "The browser check needs Debian's chromium, which is not installed. Installing it"
    echo "needs root: run 'sudo apt-get install chromium' (or this check as root), then again."
    exit 1
  fi
  echo "installing Debian chromium (apt-get, as root)..."
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi

# 2. No news / update pop-ups over the notebook
cat > "$APP_SETTINGS/overrides.json" <<'JSON'
{"@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": false}}
JSON

# 3. For the self-check, a throwaway config dir where the widgets extension is disabled
if [ "$MODE" = "--no-widgets" ]; then
  export JUPYTER_CONFIG_DIR=$ROOT/.jupyter/config-no-widgets
  rm -rf "$JUPYTER_CONFIG_DIR"
  mkdir -p "$JUPYTER_CONFIG_DIR"
  "$VENV/bin/jupyter" labextension disable --level=user @jupyter-widgets/jupyterlab-manager
fi

# 4. The notebook the browser runs: a fresh copy without outputs for each try, inside the
#    checkout (the server's root; genlab is imported from the venv)
WORK=$ROOT/.tmp/browser
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}  # the kernel imports this checkout's genlab

# 5. JupyterLab from the project venv on a free port, the check against it, the server
#    killed after it (each try gets a fresh server and kernel)
LAB_PID=
cleanup() {
  if [ -n "$LAB_PID" ]; then kill "$LAB_PID" 2>/dev/null || true; wait "$LAB_PID" 2>/dev/null || true; fi
}
trap cleanup EXIT
lab_check() {  # lab_check ARTIFACTS_DIR
  local out=$1 port rc
  mkdir -p "$out"
  rm -rf "$WORK" && mkdir -p "$WORK" && cp "$ROOT/tests/browser/panels.ipynb" "$WORK/panels.ipynb"
  cp "$ROOT/tests/browser/breaks.py" "$WORK/breaks.py"
  port=$("$VENV/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$VENV/bin/jupyter" lab --no-browser --port "$port" --ip 127.0.0.1 --allow-root \
    --IdentityProvider.token='' --ServerApp.password='' --ServerApp.root_dir="$WORK" \
    --LabApp.app_settings_dir="$APP_SETTINGS" --LabApp.extension_manager=readonly \
    --LabApp.expose_app_in_browser=True --LabApp.news_url=None --LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate \
    > "$out/jupyterlab.log" 2>&1 &
  LAB_PID=$!
  for _ in $(seq 1 240); do
    if [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/api/status")" = 200 ]; then
      break
    fi
    sleep 0.25
  done
  "$VENV/bin/python" "$ROOT/tests/browser/ui_check.py" "http://127.0.0.1:$port" \
    "panels.ipynb" "$out" "$MODE"
  rc=$?
  cleanup
  LAB_PID=
  return $rc
}

# 6. The check, once
if [ "$MODE" = "--broken" ]; then
  export GENLAB_BROKEN=${GENLAB_BROKEN:-all}
fi
set +e
lab_check "$ARTIFACTS"
RC=$?
set -e
# 7. The demo app as Voila serves it (tests/browser/voila_check.py starts its own server)
if [ "$MODE" = "normal" ] && [ $RC -eq 0 ] && [ -z "${SKIP_VOILA:-}" ]; then
  "$VENV/bin/python" "$ROOT/tests/browser/voila_check.py" "$ARTIFACTS" || RC=$?
fi
# 8. A panel's saved view (save_html), opened offline: the text and the hover details,
#    nothing asked of another machine (--broken: saved without them, it must fail)
if [ "$MODE" = "normal" ] && [ $RC -eq 0 ]; then
  "$VENV/bin/python" "$ROOT/tests/browser/saved_check.py" "$ARTIFACTS" || RC=$?
elif [ "$MODE" = "--broken" ]; then
  if "$VENV/bin/python" "$ROOT/tests/browser/saved_check.py" "$ARTIFACTS/broken" --broken; then
    echo "saved views: the check passed against a view saved without its details"
    RC=1
  fi
fi
# 8b. `make lab` opens the lesson with the left panel folded (a 768 px window; --broken:
#     a workspace with the file browser open, the check must fail)
if [ "$MODE" = "normal" ] && [ $RC -eq 0 ]; then
  "$VENV/bin/python" "$ROOT/tests/browser/lab_start_check.py" "$ARTIFACTS" || RC=$?
elif [ "$MODE" = "--broken" ]; then
  "$VENV/bin/python" "$ROOT/tests/browser/lab_start_check.py" "$ARTIFACTS/broken" --broken || RC=1
fi
# 9. The lessons' answers fold (<details>) in nbconvert's HTML, in Voila and in JupyterLab
if [ "$MODE" = "normal" ] && [ $RC -eq 0 ]; then
  "$VENV/bin/python" "$ROOT/tests/browser/details_check.py" "$ARTIFACTS" || RC=$?
elif [ "$MODE" = "--broken" ]; then
  # answers left open (<details open>): every view must fail
  "$VENV/bin/python" "$ROOT/tests/browser/details_check.py" "$ARTIFACTS/broken" --broken || RC=1
fi
echo "browser test: $(( $(date +%s) - START )) s in all (rc $RC)"
if [ "$MODE" = "--broken" ]; then
  [ $RC -eq 0 ] && echo "self-check ok: every check fails against its broken panel" \
    || echo "SELF-CHECK FAILED: a check passed against a broken panel"
  exit $RC
fi
if [ "$MODE" = "--no-widgets" ]; then
  if [ $RC -eq 0 ]; then
    echo "SELF-CHECK FAILED: the check passed although the widgets extension was disabled"
    exit 1
  fi
  echo "self-check ok: the check fails when the widgets extension is missing"
  exit 0
fi
exit $RC
