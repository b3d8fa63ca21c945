"""The exercises' answers fold in every place a class opens a lesson: a lesson's answers are
``<details>`` blocks, closed until their summary is clicked, in nbconvert's HTML (what
nbviewer and the docs show), in Voila and in JupyterLab, each in headless Debian Chromium
(playwright).

usage: python details_check.py ARTIFACTS_DIR [NOTEBOOK] [--broken]
       (default notebooks/01_quickstart.ipynb)

For each of the three views: every answer is a closed ``<details>`` whose summary reads
"Answer", its body takes no space on the page until the summary is clicked, and after the
click the body shows. Exit status 0 only when all three views pass. Screenshots:
ARTIFACTS_DIR/details_<view>.png (the first answer opened).

--broken is the check's self-check: it checks a copy of the lesson whose answers are
``<details open>`` (written under build/details-broken/, which JupyterLab and Voila can
serve), and exits 0 only when each of the three views *fails* on it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[2]
BROKEN = "--broken" in sys.argv[1:]
ARGS = [a for a in sys.argv[1:] if a != "--broken"]
ARTIFACTS = Path(ARGS[0]) if ARGS else ROOT / "artifacts" / "browser"
NOTEBOOK = ARGS[1] if len(ARGS) > 1 else "notebooks/01_quickstart.ipynb"
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage"]  # fmt: skip
# per <details>: is it open, does its summary say Answer, does its body take any height
STATE = """d => {
    const summary = d.querySelector('summary');
    const height = e => e.getBoundingClientRect().height;
    return {open: d.open, summary: summary ? summary.textContent : '',
            body: d.textContent.length - (summary ? summary.textContent.length : 0),
            shown: height(d) > height(summary) + 4};
}"""


SCROLL = "d => d.scrollIntoView({block: 'center'})"


def expected_answers() -> int:
    cells = json.loads((ROOT / NOTEBOOK).read_text(encoding="utf-8"))["cells"]
    return sum("<details" in "".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def broken_copy(notebook: str) -> str:
    """A copy of ``notebook`` whose answers are open: the views must fail on it."""
    nb = json.loads((ROOT / notebook).read_text(encoding="utf-8"))
    opened = 0
    for cell in nb["cells"]:
        src = "".join(cell["source"])
        if cell["cell_type"] == "markdown" and "<details>" in src:
            cell["source"] = src.replace("<details>", "<details open>")
            opened += 1
    if not opened:
        raise SystemExit(f"{notebook} has no <details> answer to open")
    out = ROOT / "build" / "details-broken" / Path(notebook).name
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(nb, indent=1, ensure_ascii=False), encoding="utf-8")
    return str(out.relative_to(ROOT))


def check(page, view: str, root: str) -> dict:
    """Check the answers under the CSS selector ``root`` of ``page``."""
    details = page.locator(f"{root} details")
    count = details.count()
    states = []
    for i in range(count):
        # JupyterLab skips drawing the cells out of sight (their answers have no height
        # and cannot be clicked): bring each answer into sight before measuring it
        details.nth(i).evaluate(SCROLL)
        page.wait_for_timeout(200)
        states.append(details.nth(i).evaluate(STATE))
    res = {"view": view, "answers": count, "expected": expected_answers()}
    res["closed"] = all(not s["open"] for s in states)
    res["labelled"] = all("Answer" in s["summary"] for s in states)
    res["hidden"] = all(s["body"] > 0 and not s["shown"] for s in states)
    if count:
        first = details.first
        first.evaluate(SCROLL)
        page.wait_for_timeout(300)
        first.locator("summary").click()
        page.wait_for_timeout(300)
        after = first.evaluate(STATE)
        res["opens"] = after["open"] and after["shown"]
        first.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / f"details_{view}.png"))
    res["ok"] = bool(count == res["expected"] and count and res["closed"] and res["labelled"]
                     and res["hidden"] and res.get("opens"))  # fmt: skip
    return res


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def serve(cmd: list[str], port: int, log: Path, env: dict) -> subprocess.Popen:
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            env=env)  # fmt: skip
    # the port accepting a connection is enough: no HTTP request, since Voila runs the
    # lesson in a new kernel for every GET / (a request timed out under load and sent
    # again started one kernel per try: 115 in 15 minutes on a loaded 2-core machine)
    for _ in range(480):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            time.sleep(0.25)
            continue
        return proc
    proc.terminate()
    raise RuntimeError(f"{cmd[0]} did not start; see {log}")


def main() -> int:
    global NOTEBOOK
    if BROKEN:
        NOTEBOOK = broken_copy(NOTEBOOK)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    results = []
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    shared = str(ROOT / "share" / "jupyter")
    env["JUPYTER_PATH"] = os.pathsep.join(p for p in (shared, env.get("JUPYTER_PATH")) if p)
    bin_dir = Path(sys.executable).parent
    html = ARTIFACTS / "details_lesson.html"
    subprocess.run([str(bin_dir / "jupyter"), "nbconvert", "--to", "html", NOTEBOOK,
                    "--output", str(html.resolve())], cwd=ROOT, check=True,
                   capture_output=True)  # fmt: skip
    servers = []
    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    try:
        with sync_playwright() as p:
            ctx = p.chromium.launch_persistent_context(
                profile, executable_path=CHROMIUM, headless=True, args=FLAGS,
                viewport={"width": 1200, "height": 900},
            )  # fmt: skip
            page = ctx.pages[0] if ctx.pages else ctx.new_page()
            # 1. nbconvert's HTML, as nbviewer and the docs show a lesson
            page.goto(html.resolve().as_uri(), wait_until="load")
            results.append(check(page, "nbconvert", "body"))
            # 2. Voila: it runs the lesson first (the model included), then sends the page
            port = free_port()
            servers.append(serve([str(bin_dir / "voila"), NOTEBOOK, "--no-browser",
                                  f"--port={port}", "--Voila.ip=127.0.0.1",
                                  "--ServerApp.allow_root=True"], port,
                                 ARTIFACTS / "details_voila.log", env))  # fmt: skip
            page.goto(f"http://127.0.0.1:{port}/", timeout=300_000, wait_until="load")
            page.wait_for_selector("details", timeout=300_000)
            results.append(check(page, "voila", "body"))
            # 3. JupyterLab: the lesson as it opens, with its stored outputs
            port = free_port()
            servers.append(serve([str(bin_dir / "jupyter"), "lab", "--no-browser",
                                  f"--port={port}", "--ServerApp.ip=127.0.0.1",
                                  "--ServerApp.token=", "--ServerApp.password=",
                                  "--ServerApp.allow_root=True"], port,
                                 ARTIFACTS / "details_lab.log", env))  # fmt: skip
            # ?reset: a fresh workspace, not the tabs of an earlier run (a hidden tab of
            # another lesson would lend its answers to the check)
            page.goto(f"http://127.0.0.1:{port}/lab/tree/{NOTEBOOK}?reset", timeout=180_000)
            shown = ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-MarkdownOutput"
            page.wait_for_selector(f"{shown} details", timeout=180_000)
            page.wait_for_timeout(1500)
            results.append(check(page, "jupyterlab", shown))
            ctx.close()
    finally:
        for proc in servers:
            proc.terminate()
            proc.wait(timeout=30)
    print(json.dumps(results, indent=1))
    if BROKEN:
        failed = len(results) == 3 and not any(r["ok"] for r in results)
        print("self-check ok: every view fails on open answers" if failed
              else "SELF-CHECK FAILED: a view passed with its answers open")  # fmt: skip
        return 0 if failed else 1
    return 0 if len(results) == 3 and all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
