"""Drive JupyterLab in headless Debian Chromium through every panel of notebooks 08 and 09
(built by tests/browser/panels.ipynb from code, so that the check does not depend on the
notebooks' prose).

usage: python ui_check.py BASE_URL NOTEBOOK ARTIFACTS_DIR [MODE]

Exit status 0 only when: every cell ran; every panel rendered as widget views, with no
text fallback ("Playground(", "VBox(") and no "Error displaying widget"; and

* Playground: ArrowLeft on the max_new_tokens slider changes the readout and the text; a
  typed prompt changes the text; the "beam" preset shows a table without "None" cells;
* ConfigPanel: Tab reaches the settings-group headers, Enter opens one;
* StepDebugger: Step (latency p50/p90 measured: click -> waterfall drawn), "Take this
  token" with ' Marseille' shows the whole word, Rewind + Step leaves no forced piece
  behind, Fork adds a run, Run ends the run; no candidate of probability 0 offered;
* BeamExplorer / WatermarkExplorer: no "None" cells; one z-score per text everywhere;
* no console errors. Screenshots of every panel: ARTIFACTS_DIR/*.png.
"""

from __future__ import annotations

import json
import re
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
DBG = ".genlab-debugger"
SLIDER = ".genlab-playground .genlab-field-max_new_tokens"
TEXT_FALLBACKS = ("Playground(", "VBox(", "ConfigPanel(", "StepDebugger(", "BeamExplorer(")
PANELS = {
    "playground": ".genlab-playground",
    "config_panel": ".jp-OutputArea-output > .genlab-config-panel",
    "step_debugger": ".genlab-debugger",
    "compare": ".genlab-compare",
    "beam_explorer": ".genlab-beam-explorer",
    "watermark_explorer": ".genlab-watermark-explorer",
}
NONE_CELLS = """(sel) => [...document.querySelectorAll(sel + ' td')]
  .filter(td => td.textContent.trim() === 'None').length"""


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
        page.wait_for_function(NONE_RUNNING, timeout=300_000)
        if page.evaluate(ALL_RAN):
            return
        print(f"run-all try {attempt + 1} incomplete:", page.locator(PROMPTS).all_inner_texts())
    raise RuntimeError("Run All never completed")


def wait_for_panels(page, timeout: int = 30_000) -> None:
    """Widget views appear after their outputs: wait (at most ``timeout`` ms) until every
    panel has one; what is missing then is reported by the checks."""
    try:
        page.wait_for_function(
            "(sels) => sels.every(s => document.querySelector(s))",
            arg=list(PANELS.values()),
            timeout=timeout,
        )
    except Exception:
        pass


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


def wait_change(page, selector: str, old: str, timeout: int = 60_000) -> float:
    """Seconds until the inner text of ``selector`` differs from ``old``."""
    t = time.time()
    page.wait_for_function(
        """([sel, old]) => { const e = document.querySelector(sel);
             return e && e.innerText !== old; }""",
        arg=[selector, old],
        timeout=timeout,
    )
    return time.time() - t


def text_of(page, selector: str) -> str:
    loc = page.locator(selector).first
    return loc.inner_text() if loc.count() else ""


def click_button(page, root: str, label: str) -> None:
    button = page.locator(f"{root} button:text-is('{label}')").first
    button.scroll_into_view_if_needed()
    button.click()


def playground_prompt_and_preset(page) -> dict:
    """Type a prompt; choose the 'beam' preset: the table must have no 'None' cell."""
    out = {}
    before = text_of(page, RESULT)
    box = page.locator(".genlab-playground textarea").first
    box.fill("The capital of Italy is")
    box.press("Tab")  # the prompt box sends its value when it loses focus
    out["secs_prompt_to_new_text"] = round(wait_change(page, RESULT, before), 2)
    out["prompt_text"] = text_of(page, RESULT)[:80]
    before = text_of(page, RESULT)
    preset = page.locator(".genlab-playground select:has(option:text-is('(preset)'))").first
    preset.select_option(label="beam")
    wait_change(page, RESULT, before)
    page.wait_for_timeout(500)
    out["beam_none_cells"] = page.evaluate(NONE_CELLS, ".genlab-playground")
    return out


def keyboard_reaches_group_headers(page) -> dict:
    """Tab from the preset dropdown of the ConfigPanel until a group header has focus."""
    root = PANELS["config_panel"]
    page.locator(f"{root} select").first.focus()
    reached = False
    for _ in range(6):
        page.keyboard.press("Tab")
        if page.evaluate(
            "() => document.activeElement.classList.contains('genlab-section-header')"
        ):
            reached = True
            break
    opened = False
    if reached:
        name = page.evaluate("() => document.activeElement.innerText")
        page.keyboard.press("Enter")
        try:  # the kernel builds the group's controls, then the header turns ▸ -> ▾
            page.wait_for_function(
                "(old) => document.activeElement.innerText[0] !== old[0]", arg=name,
                timeout=15_000,
            )  # fmt: skip
        except Exception:
            pass
        after = page.evaluate("() => document.activeElement.innerText")
        opened = after[:1] != name[:1]  # ▸ <-> ▾: Enter opened (or closed) the group
        outline = page.evaluate("() => getComputedStyle(document.activeElement).outlineStyle")
        return {"tab_reaches_header": name, "enter_opens": opened, "focus_outline": outline}
    return {"tab_reaches_header": None, "enter_opens": False, "focus_outline": None}


def debugger_session(page) -> dict:
    """Step (timed), force ' Marseille', Rewind + Step, Fork, Run."""
    out: dict = {}
    result = f"{DBG} .genlab-result"
    water = f"{DBG} .genlab-waterfall"
    page.locator(DBG).first.scroll_into_view_if_needed()
    latencies = []
    for _ in range(6):
        old = text_of(page, water) + text_of(page, result)
        t = time.time()
        click_button(page, DBG, "Step")
        page.wait_for_function(
            """([w, r, old]) => { const a = document.querySelector(w);
                 const b = document.querySelector(r);
                 return a && b && (a.innerText + b.innerText) !== old; }""",
            arg=[water, result, old],
            timeout=30_000,
        )
        latencies.append(time.time() - t)
        page.wait_for_timeout(150)
    latencies.sort()
    out["step_latency_p50"] = round(latencies[len(latencies) // 2], 3)
    out["step_latency_p90"] = round(
        latencies[min(len(latencies) - 1, int(0.9 * len(latencies)))], 3
    )
    options = page.locator(f"{DBG} select").first.locator("option").all_inner_texts()
    out["zero_candidates"] = [o for o in options if "p=0.000" in o and "(taken)" not in o]
    out["candidate_preselected"] = page.locator(f"{DBG} select").first.input_value() != ""
    page.screenshot(path=str(ARTIFACTS / "step_debugger_steps.png"))
    before = text_of(page, result)
    page.locator(f"{DBG} input[placeholder='or type a token']").fill("' Marseille'")
    click_button(page, DBG, "Take this token")
    wait_change(page, result, before)
    page.wait_for_timeout(400)
    out["after_force"] = text_of(page, result)
    before = text_of(page, result)
    click_button(page, DBG, "Rewind")
    wait_change(page, result, before)
    before = text_of(page, result)
    click_button(page, DBG, "Step")
    wait_change(page, result, before)
    page.wait_for_timeout(300)
    out["after_rewind_step"] = text_of(page, result)
    click_button(page, DBG, "Fork")
    page.wait_for_timeout(600)
    out["runs"] = page.locator(f"{DBG} select").nth(0).locator("option").count()
    runs = page.locator(f"{DBG} select:has(option:text-is('run 1'))").first
    out["run_picker_options"] = runs.locator("option").count() if runs.count() else 0
    before = text_of(page, f"{DBG} .genlab-info") + text_of(page, result)
    click_button(page, DBG, "Run")
    page.wait_for_function(
        """(sel) => [...document.querySelectorAll(sel)]
             .some(e => e.innerText.includes('finished'))""",
        arg=f"{DBG} .genlab-info, {DBG} .genlab-warn",
        timeout=60_000,
    )
    page.wait_for_timeout(400)
    out["after_run"] = text_of(page, result)
    out["debugger_none_cells"] = page.evaluate(NONE_CELLS, DBG)
    page.locator(DBG).first.screenshot(path=str(ARTIFACTS / "step_debugger.png"))
    return out


def explorers(page) -> dict:
    out = {}
    root = PANELS["watermark_explorer"]
    page.locator(root).first.scroll_into_view_if_needed()
    # JupyterLab draws cells lazily: wait until the coloured text is on the page
    page.wait_for_selector(f"{root} .genlab-watermark", timeout=60_000)
    page.wait_for_timeout(500)
    text = page.locator(root).first.inner_text()
    zs = re.findall(r"z = (-?\d+\.\d\d)", text)
    out["watermark_z_values"] = sorted(set(zs))
    out["watermark_none_cells"] = page.evaluate(NONE_CELLS, root)
    page.locator(root).first.screenshot(path=str(ARTIFACTS / "watermark_explorer.png"))
    root = PANELS["beam_explorer"]
    page.locator(root).first.scroll_into_view_if_needed()
    page.wait_for_selector(f"{root} .genlab-text", timeout=60_000)
    page.locator(f"{root} .lm-TabBar-tab:has-text('Early stop')").first.click()
    page.wait_for_timeout(400)
    early = page.locator(root).first.inner_text()
    out["beam_early_stop_e_notation"] = "e+09" in early and "-1e+09" not in early
    out["beam_none_cells"] = page.evaluate(NONE_CELLS, root)
    page.locator(f"{root} .lm-TabBar-tab:has-text('Beam tree')").first.click()
    page.wait_for_timeout(300)
    page.locator(root).first.screenshot(path=str(ARTIFACTS / "beam_explorer.png"))
    for name in ("playground", "compare", "config_panel"):
        loc = page.locator(PANELS[name]).first
        if loc.count():
            loc.scroll_into_view_if_needed()
            loc.screenshot(path=str(ARTIFACTS / f"{name}.png"))
    return out


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
            wait_for_panels(page)
            out = "\n".join(page.locator(".jp-NotebookPanel .jp-OutputArea").all_inner_texts())
            res.update(
                {
                    "playground_views": page.locator(".genlab-playground").count(),
                    "result_tokens": page.locator(f"{RESULT} .genlab-token").count(),
                    "slider_views": page.locator(".genlab-playground .widget-slider").count(),
                    "error_displaying_widget": "Error displaying widget" in out,
                    "text_fallbacks": [t for t in TEXT_FALLBACKS if t in out],
                    "kernel_printed_ready": "PANELS_READY" in out,
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
            res["panel_views"] = {k: page.locator(v).count() for k, v in PANELS.items()}
            outputs = page.locator(".jp-NotebookPanel .jp-Cell").all_inner_texts()
            res["cells_with_widget_errors"] = [
                o[:300] for o in outputs if "Error displaying widget" in o
            ]
            rendered = rendered and all(n >= 1 for n in res["panel_views"].values())
            res["rendered"] = rendered
            if rendered:
                res.update(move_slider(page))
                page.screenshot(path=str(ARTIFACTS / f"playground_after{suffix}.png"))
                res.update(playground_prompt_and_preset(page))
                res.update(keyboard_reaches_group_headers(page))
                res.update(debugger_session(page))
                res.update(explorers(page))
        except Exception:
            page.screenshot(path=str(ARTIFACTS / f"playground_failure{suffix}.png"))
            raise
        finally:
            errors = [c for c in console if c.startswith("error")]
            res["console_errors"] = errors[:5]
            (ARTIFACTS / "console.txt").write_text("\n".join(console))
            ctx.close()
    res["secs_total"] = round(time.time() - t0, 1)
    print(json.dumps(res, indent=1))
    changed = res.get("readout_after") not in (None, res.get("readout_before")) and res.get(
        "text_after"
    ) not in (None, res.get("text_before"))
    checks = {
        "rendered": bool(res.get("rendered")),
        "slider changes the text": changed,
        "typed prompt changes the text": "Italy" in str(res.get("prompt_text", ""))
        and bool(res.get("secs_prompt_to_new_text")),
        "no None cells": not any(
            res.get(k) for k in ("beam_none_cells", "debugger_none_cells",
                                 "watermark_none_cells", "beam_none_cells")
        ),
        "Tab reaches a group header": bool(res.get("tab_reaches_header")),
        "Enter opens it": bool(res.get("enter_opens")),
        "forced text appears whole": "Marseille" in str(res.get("after_force", "")),
        "no forced piece left after rewind": "Marse" in str(res.get("after_rewind_step", ""))
        and "Parisse" not in str(res.get("after_rewind_step", "")),
        "no probability-0 candidates": res.get("zero_candidates") == [],
        "candidate preselected": bool(res.get("candidate_preselected")),
        "fork adds a run": res.get("run_picker_options", 0) >= 2,
        "one z-score per text": 1 <= len(res.get("watermark_z_values", [])) <= 2,
        "no console errors": not res.get("console_errors"),
    }  # fmt: skip
    res["checks"] = checks
    print(json.dumps(checks, indent=1))
    ok = all(checks.values()) if MODE == "normal" else bool(res.get("rendered")) and changed
    if not ok:  # the last lines of a CI log: what went wrong, in brief
        print("failed checks:", [k for k, v in checks.items() if not v])
        print("panel views:", res.get("panel_views"), "kernel printed ready:",
              res.get("kernel_printed_ready"), "error displaying widget:",
              res.get("error_displaying_widget"))  # fmt: skip
        for err in res.get("console_errors", [])[:3]:
            print("console:", err.splitlines()[0][:200])
    print("PLAYGROUND_WIDGETS_OK" if ok else "PLAYGROUND_WIDGETS_FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
