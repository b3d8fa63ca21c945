"""Benchmark: how long the widgets take to answer, on the demo model (Python side).

Run from the repository root::

    .venv/bin/python benchmarks/bench_widgets.py [--clicks 25] [--changes 20]

Prints p50 / p90 (seconds) of

* ``step click -> view``: a StepDebugger Step button click until its view (text, HTML
  waterfall, candidates, history) is drawn, split into the engine's step and the drawing;
  beside it, in the same run, what drawing the matplotlib waterfall figure as a PNG would
  add to each step (how the view was drawn before);
* ``playground first token`` / ``playground 20 tokens``: a Playground change (a new seed,
  sampling, 20 new tokens) until the first streamed token is on screen and until the
  whole result is shown, counted after the debounce (``update()`` is called directly).

Timings on a shared machine are noisy: compare the numbers of one run only.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import genlab  # noqa: E402
from genlab.plots.tokens import waterfall  # noqa: E402
from genlab.widgets import Playground, StepDebugger  # noqa: E402
from genlab.widgets.render import figure_png  # noqa: E402


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def line(name: str, values: list[float]) -> str:
    p50, p90 = pct(values, 0.5), pct(values, 0.9)
    return f"{name:<34} p50 {p50:7.3f} s   p90 {p90:7.3f} s   (n={len(values)})"


def bench_debugger(lm, clicks: int) -> dict[str, list[float]]:
    dbg = StepDebugger(
        lm, "The capital of France is", max_new_tokens=clicks + 5, do_sample=True, top_k=50,
        top_p=0.9, temperature=0.8, repetition_penalty=1.2, seed=0,
    )  # fmt: skip
    out: dict[str, list[float]] = {"click": [], "step": [], "draw": [], "figure": []}
    dbg.step()  # warm-up
    for _ in range(clicks):
        t0 = time.perf_counter()
        dbg.step_button.click()
        t1 = time.perf_counter()
        dbg.wait()
        t2 = time.perf_counter()
        out["click"].append(t2 - t0)
        out["step"].append(t1 - t0)
        out["draw"].append(dbg.timings.get("render", float("nan")))
        f0 = time.perf_counter()
        figure_png(waterfall(dbg.run.tracer.trace, dbg.current_step))
        out["figure"].append(time.perf_counter() - f0)
        time.sleep(0.05)  # clicks a person makes, not a burst
    return out


def bench_playground(lm, changes: int) -> dict[str, list[float]]:
    pg = Playground(
        lm, "Once upon a time", max_new_tokens=20, min_new_tokens=20, do_sample=True,
        auto_update=False,
    )  # fmt: skip
    first: list[float] = []
    full: list[float] = []
    for seed in range(1, changes + 1):
        seen = threading.Event()
        t0 = time.perf_counter()
        marks: dict[str, float] = {}

        def watch(change, marks=marks, seen=seen, t0=t0):
            if "first" not in marks and (
                "genlab-streaming" in change["new"] or "genlab-token" in change["new"]
            ):
                marks["first"] = time.perf_counter() - t0
                seen.set()

        pg.text_view.observe(watch, names="value")
        pg.seed_box.value = seed  # auto-update is off: only the value changes
        version = pg.version
        pg.update()
        pg.wait()
        full.append(time.perf_counter() - t0)
        pg.text_view.unobserve(watch, names="value")
        assert pg.version == version + 1 and len(pg.table) == 20
        first.append(marks.get("first", full[-1]))
    return {"first": first, "full": full}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clicks", type=int, default=25)
    parser.add_argument("--changes", type=int, default=20)
    args = parser.parse_args()
    lm = genlab.load("demo")
    d = bench_debugger(lm, args.clicks)
    print("StepDebugger (demo model, sampling with 5 processors)")
    print(line("step click -> view drawn", d["click"]))
    print(line("  of which the engine's step", d["step"]))
    print(line("  of which drawing the view", d["draw"]))
    print(line("matplotlib waterfall PNG (before)", d["figure"]))
    p = bench_playground(lm, args.changes)
    print("Playground (demo model, 20 sampled tokens, after the debounce)")
    print(line("change -> first token shown", p["first"]))
    print(line("change -> 20 tokens shown", p["full"]))
    print(f"python {sys.version.split()[0]}, genlab {genlab.__file__}")
    print(f"median step-click ratio figure/view drawing: "
          f"{statistics.median(d['figure']) / statistics.median(d['draw']):.1f}x")  # fmt: skip


if __name__ == "__main__":
    main()
