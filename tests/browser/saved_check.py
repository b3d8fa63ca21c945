"""A panel's saved view, opened offline in headless Debian Chromium at 768 px (issue 37).

Builds, on the demo model, a Playground and a StepDebugger that explored 30+ tokens over
several runs (forks, a forced text, alternatives clicked), saves each view with
``save_html`` and opens the files with every request that is not the file itself refused:
the page must show the text, keep the hover details (``title`` on the tokens and tree
nodes), ask no other machine for anything and fit 768 px (a table may scroll in its box).
Screenshots: ARTIFACTS_DIR/saved_playground.png, saved_branch_tree.png.

usage: python saved_check.py ARTIFACTS_DIR [--broken]

``--broken``: the views are saved without their hover details and with a font from another
machine: the check must fail.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from playwright.sync_api import sync_playwright

ARTIFACTS = Path(sys.argv[1])
BROKEN = len(sys.argv) > 2 and sys.argv[2] == "--broken"
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage"]  # fmt: skip
WIDTH = 768
# what sticks out at the right of the page outside a box that scrolls
OVERFLOW = """() => { const out = [];
  const walk = (el) => { for (const c of el.children) {
    const st = getComputedStyle(c); const r = c.getBoundingClientRect();
    if (r.width > 0 && r.right > window.innerWidth + 1) {
      out.push(c.tagName + '.' + c.className); continue; }
    if (['auto', 'scroll'].includes(st.overflowX)) continue; walk(c); } };
  walk(document.body); return out.slice(0, 5); }"""


def build(tmp: Path) -> dict[str, Path]:
    import genlab
    from genlab.widgets import Playground, StepDebugger

    lm = genlab.load("demo")
    pg = Playground(lm, "The capital of France is", max_new_tokens=20)
    dbg = StepDebugger(lm, "The capital of France is", max_new_tokens=32)
    dbg.step(4)
    dbg.branch(next(b.token_id for b in dbg.alt_buttons if b.token_id is not None))
    dbg.step(6)
    dbg.take(" and Marseille")
    dbg.select_run(0)
    dbg.step(24)
    dbg.continue_from(0, 2)
    dbg.step(5)
    dbg.tabs.selected_index = dbg.TREE_TAB
    if BROKEN:  # no hover details, and a font asked of another machine
        import genlab.widgets.base as base

        old = base.save_html

        def save(widget, path, title=None):
            path = old(widget, path, title)
            page = path.read_text(encoding="utf-8")
            page = page.replace(' title="', ' data-x="').replace(
                "<head>", '<head><link rel="stylesheet" href="https://fonts.example.org/a.css">'
            )
            path.write_text(page, encoding="utf-8")
            return path

        base.save_html = save
    files = {
        "playground": pg.save_html(tmp / "playground.html"),
        "branch_tree": dbg.tree.save_html(tmp / "branch_tree.html"),
    }
    return {
        "files": files,
        "text": pg.result.text.strip().split()[0],
        "nodes": len(dbg.tree.table()) - 1,
        "runs": len(dbg.runs),
    }


def main() -> int:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="saved-views-"))
    built = build(tmp)
    res: dict = {"nodes": built["nodes"], "runs": built["runs"], "asked_elsewhere": []}
    res["playground_bytes"] = built["files"]["playground"].stat().st_size
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        ctx = browser.new_context(viewport={"width": WIDTH, "height": 1200}, offline=True)

        def route(r):
            if r.request.url.startswith("file://"):
                return r.continue_()
            res["asked_elsewhere"].append(r.request.url)
            return r.abort()

        ctx.route("**/*", route)
        page = ctx.new_page()
        for name, path in built["files"].items():
            page.goto(path.as_uri())
            page.wait_for_load_state("load")
            res[f"{name}_overflow"] = page.evaluate(OVERFLOW)
            res[f"{name}_tips"] = page.locator(
                ".genlab-token[title], .genlab-tree-node[title]"
            ).count()
            res[f"{name}_text"] = page.inner_text("body")[:4000]
            page.screenshot(path=str(ARTIFACTS / f"saved_{name}.png"), full_page=True)
        tree_tip = page.locator(".genlab-tree-node[title]").nth(3)
        res["tree_tip"] = tree_tip.get_attribute("title") if res["branch_tree_tips"] > 3 else None
        browser.close()
    checks = {
        "the saved Playground shows its text": built["text"] in res["playground_text"],
        "the saved Playground keeps the hover details": res["playground_tips"] >= 10,
        "the saved tree shows 30+ nodes with hover details": res["nodes"] >= 30
        and res["branch_tree_tips"] >= 31
        and "p=" in (res["tree_tip"] or ""),
        "nothing asked of another machine": not res["asked_elsewhere"],
        "fits 768 px": not res["playground_overflow"] and not res["branch_tree_overflow"],
    }
    shown = {k: v for k, v in res.items() if not k.endswith("_text")}
    print(json.dumps(shown, indent=1, ensure_ascii=False))
    for name, ok in checks.items():
        print(("PASS " if ok else "FAIL ") + name)
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
