"""The demo app as Binder shows it: notebooks/00_app.ipynb served by a local Voila server,
opened in headless Debian Chromium (playwright).

usage: python voila_check.py ARTIFACTS_DIR

Exit status 0 only when: the page shows the Playground (a coloured result, sliders) and the
StepDebugger (its Step button and text) as widget views, no code and no "Error displaying
widget"; moving the Playground's max_new_tokens slider changes its text; pressing Step in
the StepDebugger adds a token; the Playground's Tokens table fits its box (no column cut
at the right edge); the console has no error and no warning (issue 37: Voila's bundled
JupyterLab 4.2.5 against widget extensions built on newer ones printed 26 "Unsatisfied
version" warnings; pyproject.toml pins voila and the widgets to builds on 4.2.x).
Screenshot: ARTIFACTS_DIR/voila_app.png.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "artifacts" / "browser"
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage"]  # fmt: skip
PLAYGROUND = ".genlab-playground"
RESULT = f"{PLAYGROUND} .genlab-result"
SLIDER = f"{PLAYGROUND} .genlab-field-max_new_tokens"
DEBUGGER = ".genlab-debugger"
LOCAL = "//127.0.0.1:"
OFFLINE = "net::ERR_NAME_NOT_RESOLVED"  # a resource on another host (no internet here)
# tables wider than their box: the table's width against the box it scrolls in (a table
# must fit: a cut column reads as missing, the scroll bar is easy to miss)
TABLE_CUT = """(sel) => [...document.querySelectorAll(sel + ' .genlab-frame')]
  .filter(f => f.offsetParent !== null)
  .map(f => [f.querySelector('table').getBoundingClientRect().width, f.clientWidth])
  .filter(([t, b]) => t > b + 1).map(([t, b]) => Math.round(t) + ' px in ' + b + ' px')"""
CODE_SNIPPETS = ('genlab.load("demo")', "from genlab.widgets import", "Playground(lm")


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def start_voila(port: int, log: Path) -> subprocess.Popen:
    voila = Path(sys.executable).with_name("voila")
    # served as `make app` serves it: genlab's template, which links nothing outside
    cmd = [str(voila), "notebooks/00_app.ipynb", "--no-browser", f"--port={port}",
           "--template=genlab", "--Voila.ip=127.0.0.1", "--ServerApp.allow_root=True"]  # fmt: skip
    env = dict(os.environ)
    shared = str(ROOT / "share" / "jupyter")
    env["JUPYTER_PATH"] = os.pathsep.join(p for p in (shared, env.get("JUPYTER_PATH")) if p)
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            env=env)  # fmt: skip
    for _ in range(240):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/voila/static/", timeout=1)
        except urllib.error.HTTPError:
            return proc  # the server answers (404 on a folder is fine)
        except OSError:
            time.sleep(0.25)
            continue
        return proc
    proc.terminate()
    raise RuntimeError(f"voila did not start; see {log}")


def main() -> int:
    t0 = time.time()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    port = free_port()
    voila = start_voila(port, ARTIFACTS / "voila.log")
    res: dict = {"secs_server": round(time.time() - t0, 1)}
    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    try:
        with sync_playwright() as p:
            ctx = p.chromium.launch_persistent_context(
                profile, executable_path=CHROMIUM, headless=True, args=FLAGS,
                viewport={"width": 1280, "height": 1600},
            )  # fmt: skip
            page = ctx.pages[0] if ctx.pages else ctx.new_page()
            console: list[str] = []
            page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
            outside: list[str] = []  # offline here: requests to other hosts cannot resolve
            page.on(
                "requestfailed", lambda r: outside.append(r.url) if LOCAL not in r.url else None
            )
            try:
                # voila runs the whole notebook before it sends the page (model load included)
                page.goto(f"http://127.0.0.1:{port}/", timeout=180_000, wait_until="load")
                page.wait_for_selector(f"{RESULT} .genlab-token", timeout=120_000)
                page.wait_for_selector(f"{DEBUGGER} .genlab-result", timeout=60_000)
                page.wait_for_timeout(1000)
                res["secs_page"] = round(time.time() - t0, 1)
                body = page.locator("body").inner_text()
                res.update({
                    "playground_views": page.locator(PLAYGROUND).count(),
                    "debugger_views": page.locator(DEBUGGER).count(),
                    "result_tokens": page.locator(f"{RESULT} .genlab-token").count(),
                    "sliders": page.locator(f"{PLAYGROUND} .widget-slider").count(),
                    "code_shown": [c for c in CODE_SNIPPETS if c in body],
                    "error_displaying_widget": "Error displaying widget" in body,
                    "tokens_table_cut": page.evaluate(TABLE_CUT, PLAYGROUND),
                })  # fmt: skip
                page.screenshot(path=str(ARTIFACTS / "voila_app.png"), full_page=True)
                rendered = (
                    res["playground_views"] == 1
                    and res["debugger_views"] == 1
                    and res["result_tokens"] > 0
                    and res["sliders"] > 0
                    and not res["code_shown"]
                    and not res["error_displaying_widget"]
                )
                res["rendered"] = rendered
                if rendered:
                    # the Playground answers a slider move
                    before = page.locator(RESULT).first.inner_text()
                    handle = page.locator(f"{SLIDER} .noUi-handle").first
                    handle.scroll_into_view_if_needed()
                    handle.focus()
                    for _ in range(4):
                        page.keyboard.press("ArrowLeft")
                    page.wait_for_function(
                        "([s, old]) => { const e = document.querySelector(s);"
                        " return e && e.innerText !== old; }",
                        arg=[RESULT, before], timeout=60_000,
                    )  # fmt: skip
                    res["playground_changed"] = page.locator(RESULT).first.inner_text() != before
                    # the StepDebugger answers Step
                    dbg_text = f"{DEBUGGER} .genlab-result"
                    before = page.locator(dbg_text).first.inner_text()
                    page.locator(f"{DEBUGGER} button:text-is('Step')").first.click()
                    page.wait_for_function(
                        "([s, old]) => { const e = document.querySelector(s);"
                        " return e && e.innerText !== old; }",
                        arg=[dbg_text, before], timeout=60_000,
                    )  # fmt: skip
                    res["debugger_changed"] = page.locator(dbg_text).first.inner_text() != before
                    page.wait_for_timeout(500)
                    page.screenshot(path=str(ARTIFACTS / "voila_app_after.png"), full_page=True)
            except Exception:
                page.screenshot(path=str(ARTIFACTS / "voila_failure.png"), full_page=True)
                raise
            finally:
                res["console_errors"] = [
                    c for c in console if c.startswith("error") and OFFLINE not in c
                ][:5]
                res["console_warnings"] = len([c for c in console if c.startswith("warn")])
                res["console_warning_lines"] = [c for c in console if c.startswith("warn")][:3]
                res["outside_requests_failed"] = outside[:5]
                (ARTIFACTS / "voila_console.txt").write_text("\n".join(console))
                ctx.close()
    finally:
        voila.terminate()
        voila.wait(30)
    res["secs_total"] = round(time.time() - t0, 1)
    print(json.dumps(res, indent=1))
    ok = bool(res.get("rendered") and res.get("playground_changed") and res.get("debugger_changed"))
    ok = ok and not res["console_errors"] and not res["outside_requests_failed"]
    ok = ok and res.get("console_warnings") == 0 and res.get("tokens_table_cut") == []
    for err in res.get("console_errors", [])[:3]:  # the last lines of a CI log, in brief
        print("console:", err.splitlines()[0][:200])
    print("VOILA_APP_OK" if ok else "VOILA_APP_FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
