"""Drive JupyterLab in headless Debian Chromium: run the Playground notebook, check that the
widget views rendered, move the max_new_tokens slider and check that the result changed.

usage: python ui_check.py BASE_URL NOTEBOOK ARTIFACTS_DIR [MODE]

Exit status 0 only when: every cell ran; the Playground rendered as widget views (its
result text, sliders), with no text fallback ("Playground(", "VBox(") and no "Error
displaying widget"; and after pressing ArrowLeft on the slider the readout and the
generated text changed. Screenshots: ARTIFACTS_DIR/playground_{before,after}.png.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

BASE, NB, ARTIFACTS = sys.argv[1], sys.argv[2], Path(sys.argv[3])
MODE = sys.argv[4] if len(sys.argv) > 4 else "normal"
CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
PROMPTS = ".jp-NotebookPanel .jp-CodeCell .jp-InputPrompt"
ALL_RAN = f"""() => {{ const p = [...document.querySelectorAll('{PROMPTS}')];
  return p.length > 0 && p.every(e => /\\[\\d+\\]/.test(e.textContent)); }}"""
NONE_RUNNING = f"""() => ![...document.querySelectorAll('{PROMPTS}')]
  .some(e => e.textContent.includes('[*]'))"""
ANY_STARTED = f"""() => [...document.querySelectorAll('{PROMPTS}')]
  .some(e => /\\[(\\*|\\d+)\\]/.test(e.textContent))"""
RESULT = ".genlab-playground .genlab-result"
SLIDER = ".genlab-playground .genlab-field-max_new_tokens"
TEXT_FALLBACKS = ("Playground(", "VBox(", "ConfigPanel(")


def open_notebook(ctx, page, t0: float) -> None:
    """Start the kernel session over REST first (no kernel dialog), open the notebook,
    and wait until its kernel has been the same and idle for 3 s."""
    ctx.request.get(f"{BASE}/lab")
    xsrf = next(c["value"] for c in ctx.cookies() if c["name"] == "_xsrf")
    r = ctx.request.post(
        f"{BASE}/api/sessions",
        headers={"X-XSRFToken": xsrf},
        data={"path": NB, "name": Path(NB).name, "type": "notebook", "kernel": {"name": "python3"}},
    )
    assert r.ok, r.text()
    page.goto(f"{BASE}/lab/tree/{NB}", wait_until="domcontentloaded")
    page.wait_for_selector(".jp-NotebookPanel .jp-CodeCell", timeout=60_000)

    def kernel():
        for sess in ctx.request.get(f"{BASE}/api/sessions").json():
            if sess["path"].lstrip("/") == NB:
                return sess["kernel"]["id"], sess["kernel"]["execution_state"]
        return None, None

    last, since = None, time.time()
    while time.time() - since < 3:
        dialog = page.locator(".jp-Dialog:has-text('Select Kernel') button:has-text('Select')")
        if dialog.count():
            dialog.first.click()
        kid, state = kernel()
        if kid != last or state != "idle":
            last, since = kid, time.time()
        if time.time() - t0 > 90:
            raise RuntimeError("the kernel never settled")
        time.sleep(0.25)
    page.wait_for_selector("#jp-main-statusbar >> text=Idle", timeout=30_000)


def run_all(page) -> None:
    """Run > Run All Cells, again if cells were lost to a kernel swap (3 tries)."""
    for attempt in range(3):
        page.click("#jp-MainMenu .lm-MenuBar-itemLabel:text-is('Run')")
        page.click(".lm-Menu-itemLabel:text-is('Run All Cells')")
        try:
            page.wait_for_function(ANY_STARTED, timeout=15_000)
        except Exception:
            pass
        page.wait_for_function(NONE_RUNNING, timeout=120_000)
        if page.evaluate(ALL_RAN):
            return
        print(f"run-all try {attempt + 1} incomplete:", page.locator(PROMPTS).all_inner_texts())
    raise RuntimeError("Run All never completed")


def move_slider(page, presses: int = 4) -> dict:
    """ArrowLeft on the max_new_tokens slider; wait until the result text changes."""
    before = page.locator(RESULT).first.inner_text()
    tokens_before = page.locator(f"{RESULT} .genlab-token").count()
    readout_before = page.locator(f"{SLIDER} .widget-readout").first.inner_text()
    handle = page.locator(f"{SLIDER} .noUi-handle").first
    handle.scroll_into_view_if_needed()
    handle.focus()
    t = time.time()
    for _ in range(presses):
        page.keyboard.press("ArrowLeft")
    page.wait_for_function(
        """([sel, old]) => { const e = document.querySelector(sel);
             return e && e.innerText !== old; }""",
        arg=[RESULT, before],
        timeout=60_000,
    )
    latency = time.time() - t
    page.wait_for_timeout(300)
    return {
        "readout_before": readout_before,
        "readout_after": page.locator(f"{SLIDER} .widget-readout").first.inner_text(),
        "tokens_before": tokens_before,
        "tokens_after": page.locator(f"{RESULT} .genlab-token").count(),
        "text_before": before,
        "text_after": page.locator(RESULT).first.inner_text(),
        "secs_slider_to_new_text": round(latency, 2),
    }


def main() -> int:
    t0 = time.time()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    suffix = "" if MODE == "normal" else "_no_widgets"
    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    res: dict = {"mode": MODE}
    with sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            profile,
            executable_path=CHROMIUM,
            headless=True,
            args=FLAGS,
            viewport={"width": 1280, "height": 1400},
        )
        console: list[str] = []
        page = ctx.pages[0] if ctx.pages else ctx.new_page()
        page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
        try:
            open_notebook(ctx, page, t0)
            res["secs_to_open"] = round(time.time() - t0, 1)
            run_all(page)
            res["secs_to_run_all"] = round(time.time() - t0, 1)
            try:  # widget views are created asynchronously after the outputs arrive
                page.wait_for_selector(f"{RESULT} .genlab-token", timeout=20_000)
            except Exception as err:
                print("no rendered Playground result:", str(err).splitlines()[0])
            page.wait_for_timeout(500)
            out = "\n".join(page.locator(".jp-NotebookPanel .jp-OutputArea").all_inner_texts())
            res.update(
                {
                    "playground_views": page.locator(".genlab-playground").count(),
                    "result_tokens": page.locator(f"{RESULT} .genlab-token").count(),
                    "slider_views": page.locator(".genlab-playground .widget-slider").count(),
                    "error_displaying_widget": "Error displaying widget" in out,
                    "text_fallbacks": [t for t in TEXT_FALLBACKS if t in out],
                    "kernel_printed_ready": "PLAYGROUND_READY" in out,
                }
            )
            page.screenshot(path=str(ARTIFACTS / f"playground_before{suffix}.png"))
            rendered = (
                res["playground_views"] == 1
                and res["result_tokens"] > 0
                and res["slider_views"] > 0
                and not res["error_displaying_widget"]
                and not res["text_fallbacks"]
                and res["kernel_printed_ready"]
            )
            res["rendered"] = rendered
            if rendered:
                res.update(move_slider(page))
                page.screenshot(path=str(ARTIFACTS / f"playground_after{suffix}.png"))
        except Exception:
            page.screenshot(path=str(ARTIFACTS / f"playground_failure{suffix}.png"))
            raise
        finally:
            errors = [c for c in console if c.startswith("error")]
            res["console_errors"] = errors[:5]
            ctx.close()
    res["secs_total"] = round(time.time() - t0, 1)
    print(json.dumps(res, indent=1))
    changed = res.get("readout_after") not in (None, res.get("readout_before")) and res.get(
        "text_after"
    ) not in (None, res.get("text_before"))
    ok = bool(res.get("rendered")) and changed
    print("PLAYGROUND_WIDGETS_OK" if ok else "PLAYGROUND_WIDGETS_FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
