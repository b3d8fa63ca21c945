"""`make lab` opens the lesson with JupyterLab's left panel folded (issue 50, item 7): at a
768 px window an open file browser leaves the notebook ~321 px.

The check runs the very commands `make lab` runs (``make -n lab``: the workspace import,
then JupyterLab with the lesson as its default page), with every Jupyter directory inside
the checkout (.jupyter/lab-start/) and ``--no-browser`` on a free port, then opens the
server's start page in headless Chromium at a 768 x 900 window and reads JupyterLab's own
state: the left area collapsed, the lesson open, the notebook at least 600 px wide.

usage: python lab_start_check.py ARTIFACTS_DIR [--broken]

``--broken``: the same with a workspace whose left panel is open (LAB_WORKSPACE given to
make): the check must fail. Exit status 0 when the check passes (normal) or fails as it
must (--broken). Screenshot: ARTIFACTS_DIR/lab_start.png.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(sys.argv[1])
BROKEN = "--broken" in sys.argv[2:]
WINDOW = {"width": 768, "height": 900}
STATE = """() => { const app = window.jupyterapp; if (!app) return null;
  const w = app.shell.currentWidget;
  const ed = document.querySelector('.jp-NotebookPanel .jp-Notebook');
  return {left_collapsed: app.shell.leftCollapsed,
          file_browser_shown: !!document.querySelector('#filebrowser') &&
              document.querySelector('#filebrowser').offsetParent !== null,
          open: w && w.context ? w.context.path : null,
          notebook_width: ed ? Math.round(ed.getBoundingClientRect().width) : 0}; }"""


def lab_commands(env: dict, port: int) -> list[str]:
    """The shell commands `make lab` runs (its install step taken as done)."""
    extra = [
        f"LAB_ARGS=--no-browser --port {port} --IdentityProvider.token= --ServerApp.password= "
        "--LabApp.news_url=None --LabApp.expose_app_in_browser=True"
    ]
    if BROKEN:
        extra.append(f"LAB_WORKSPACE={env['GENLAB_BROKEN_WORKSPACE']}")
    out = subprocess.run(
        ["make", "-s", "-n", "-o", ".venv/.genlab-lab-installed", "lab", *extra],
        cwd=ROOT, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return [line for line in out.stdout.splitlines() if line.strip()]


def main() -> int:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    base = ROOT / ".jupyter" / "lab-start"
    shutil.rmtree(base, ignore_errors=True)
    env = dict(os.environ)
    for name, sub in (
        ("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_DATA_DIR", "data"),
        ("JUPYTER_RUNTIME_DIR", "runtime"), ("JUPYTERLAB_SETTINGS_DIR", "lab-settings"),
        ("JUPYTERLAB_WORKSPACES_DIR", "lab-workspaces"), ("IPYTHONDIR", "ipython"),
    ):  # fmt: skip
        (base / sub).mkdir(parents=True, exist_ok=True)
        env[name] = str(base / sub)
    if BROKEN:  # the same workspace, its left panel open
        data = json.loads((ROOT / "share/jupyter/lab/workspaces/genlab.jupyterlab-workspace")
                          .read_text())  # fmt: skip
        left = data["data"]["layout-restorer:data"]["left"]
        left["collapsed"], left["current"] = False, "filebrowser"
        broken = base / "genlab.jupyterlab-workspace"
        broken.write_text(json.dumps(data))
        env["GENLAB_BROKEN_WORKSPACE"] = str(broken)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    commands = lab_commands(env, port)
    *before, serve = commands
    for cmd in before:  # the workspace import
        subprocess.run(cmd, shell=True, cwd=ROOT, env=env, check=True)
    log = open(ARTIFACTS / "lab_start.log", "w")  # noqa: SIM115 (closed below)
    server = subprocess.Popen(shlex.split(serve), cwd=ROOT, env=env, stdout=log, stderr=log)
    res: dict = {"commands": commands}
    try:
        for _ in range(240):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status", timeout=2)
                break
            except OSError:
                time.sleep(0.25)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", headless=True,
                                        args=["--no-sandbox", "--disable-gpu"])  # fmt: skip
            page = browser.new_page(viewport=WINDOW)
            page.goto(f"http://127.0.0.1:{port}/", wait_until="domcontentloaded")
            page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=90_000)
            page.wait_for_timeout(1500)  # the restored layout settles
            res["url"] = page.url
            res.update(page.evaluate(STATE) or {})
            page.screenshot(path=str(ARTIFACTS / "lab_start.png"))
            browser.close()
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()
    checks = {
        "make lab opens the lesson": str(res.get("open", "")).endswith(".ipynb"),
        "make lab folds the left panel at a 768 px window": res.get("left_collapsed") is True
        and not res.get("file_browser_shown"),
        "the notebook is at least 600 px wide": res.get("notebook_width", 0) >= 600,
    }
    print(json.dumps({**res, "checks": checks}, indent=1))
    failed = [k for k, v in checks.items() if not v]
    if BROKEN:
        must_fail = ["make lab folds the left panel at a 768 px window",
                     "the notebook is at least 600 px wide"]  # fmt: skip
        passing = [c for c in must_fail if checks[c]]
        print("make lab, left panel open on purpose: checks that should have failed but "
              f"passed: {passing}")  # fmt: skip
        return 1 if passing else 0
    print("failed checks:", failed) if failed else print("LAB_START_OK")
    return 1 if failed else 0


if __name__ == "__main__":
    tempfile.tempdir = str(ROOT / ".tmp")
    sys.exit(main())
