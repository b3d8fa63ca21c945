"""Benchmark: how long the widgets take to answer, on the demo model (Python side).

Run from the repository root::

    .venv/bin/python benchmarks/bench_widgets.py [--clicks 25] [--changes 20]

Prints p50 / p90 (seconds) of

* ``step click -> view``: a StepDebugger Step button click until its view (text, HTML
  waterfall, candidates, history) is drawn, split into the engine's step and the drawing;
  beside it, in the same run, what drawing the matplotlib waterfall figure as a PNG would
  add to each step (how the view was drawn before);
* Playground: a change of its seed box (sampling, 20 new tokens) until the first streamed
  token is shown and until the whole result is drawn, counted from the debounce firing
  (the debounce itself excluded), in three ways in the same run: inside ``asyncio.run`` on
  the main thread as in a Jupyter kernel (loop mode: the generation steps on the loop's
  thread), outside a loop (thread mode, the baseline: a worker thread generates), and
  ``update(sync=True)`` on the main thread for reference;
* the same change in a real Jupyter kernel (jupyter_client; the seed box is changed by a
  comm message as the browser sends it; ``--no-kernel`` skips it).

Timings on a shared machine are noisy: compare the numbers of one run only.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
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


PLAYGROUND = dict(max_new_tokens=20, min_new_tokens=20, do_sample=True, debounce=0.05)


class Marks:
    """Times of one Playground change, counted from the debounce firing: the first
    streamed token shown (``first``) and the whole result drawn (``full``)."""

    def __init__(self, pg: Playground) -> None:
        self.pg, self.rows = pg, {"first": [], "full": []}
        self.t0: float | None = None
        fire, render = pg.worker._fire, pg.render

        def timed_fire(*args):  # the debounce is over: the clock starts
            self.t0, self.first = time.perf_counter(), None
            fire(*args)

        def timed_render(data):
            render(data)
            if self.t0 is not None:
                full = time.perf_counter() - self.t0
                self.rows["full"].append(full)
                self.rows["first"].append(self.first if self.first is not None else full)
                self.t0 = None

        def watch(change):
            if self.t0 is not None and self.first is None and "genlab-streaming" in change["new"]:
                self.first = time.perf_counter() - self.t0

        pg.worker._fire, pg.render = timed_fire, timed_render
        pg.text_view.observe(watch, names="value")


def bench_playground_thread(lm, changes: int) -> dict[str, list[float]]:
    """Changes through the seed box outside an event loop: the debounce is a timer
    thread and the generation runs in a worker thread (as before, and in scripts)."""
    pg = Playground(lm, "Once upon a time", **PLAYGROUND)
    marks = Marks(pg)
    for seed in range(1, changes + 1):
        version = pg.version
        pg.seed_box.value = str(seed)  # the control's own change schedules the update
        while pg.version == version:
            time.sleep(0.002)
        assert pg.worker._job.thread is not None and len(pg.table) == 20
        time.sleep(0.05)
    return marks.rows


def bench_playground_loop(lm, changes: int) -> dict[str, list[float]]:
    """Changes through the seed box inside asyncio.run on the main thread, as widget
    messages arrive in a Jupyter kernel: the debounce is loop.call_later and each token
    is one loop callback on the kernel's thread."""

    async def go():
        pg = Playground(lm, "Once upon a time", **PLAYGROUND)
        marks = Marks(pg)
        for seed in range(1, changes + 1):
            version = pg.version
            pg.seed_box.value = str(seed)
            while pg.version == version:
                await asyncio.sleep(0.002)
            assert pg.worker._job.loop is not None and len(pg.table) == 20
            await asyncio.sleep(0.05)
        return marks.rows

    return asyncio.run(go())


def bench_playground_sync(lm, changes: int) -> list[float]:
    """The same generation with update(sync=True) on the main thread (no streaming)."""
    pg = Playground(lm, "Once upon a time", **PLAYGROUND)
    out = []
    for seed in range(1, changes + 1):
        pg.seed_box.value = str(seed)
        t0 = time.perf_counter()
        pg.update(sync=True)
        out.append(time.perf_counter() - t0)
    return out


KERNEL_SETUP = """
import time, genlab
from genlab.widgets import Playground
lm = genlab.load("demo")
pg = Playground(lm, "Once upon a time", max_new_tokens=20, min_new_tokens=20,
                do_sample=True, debounce=0.05)
rows = {"first": [], "full": [], "loop": []}
state = {"t0": None, "first": None}
_fire, _render = pg.worker._fire, pg.render
def timed_fire(*args):
    state["t0"], state["first"] = time.perf_counter(), None
    _fire(*args)
def timed_render(data):
    _render(data)
    if state["t0"] is not None:
        full = time.perf_counter() - state["t0"]
        rows["full"].append(full)
        rows["first"].append(state["first"] if state["first"] is not None else full)
        rows["loop"].append(pg.worker._job.loop is not None)
        state["t0"] = None
def watch(change):
    if state["t0"] is not None and state["first"] is None and "genlab-streaming" in change["new"]:
        state["first"] = time.perf_counter() - state["t0"]
pg.worker._fire, pg.render = timed_fire, timed_render
pg.text_view.observe(watch, names="value")
print(pg.seed_box.model_id)
"""


def bench_kernel(changes: int) -> dict[str, list[float]]:
    """A real Jupyter kernel (jupyter_client): the seed box changed by comm messages, as
    the browser sends them; the timings are read back by a later execute."""
    import json
    import os

    from jupyter_client.manager import start_new_kernel

    root = str(Path(__file__).resolve().parents[1])
    path = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=path)
    km, kc = start_new_kernel(kernel_name="python3", env=env)

    def execute(code: str) -> str:
        msg_id, out = kc.execute(code), []
        while True:
            msg = kc.get_iopub_msg(timeout=300)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "stream":
                out.append(msg["content"]["text"])
            elif msg["msg_type"] == "error":
                raise RuntimeError("\n".join(msg["content"]["traceback"]))
            elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                return "".join(out)

    try:
        comm_id = execute(KERNEL_SETUP).strip().splitlines()[-1]
        for seed in range(1, changes + 1):
            state = {"value": str(seed)}
            data = {"method": "update", "state": state, "buffer_paths": []}
            kc.shell_channel.send(kc.session.msg("comm_msg", {"comm_id": comm_id, "data": data}))
            time.sleep(1.0)  # a person's next change
        rows = json.loads(execute("import json; print(json.dumps(rows))"))
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    assert len(rows["full"]) == changes and all(rows.pop("loop")), rows
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clicks", type=int, default=25)
    parser.add_argument("--changes", type=int, default=20)
    parser.add_argument("--no-kernel", action="store_true", help="skip the real-kernel figure")
    args = parser.parse_args()
    lm = genlab.load("demo")
    d = bench_debugger(lm, args.clicks)
    print("StepDebugger (demo model, sampling with 5 processors)")
    print(line("step click -> view drawn", d["click"]))
    print(line("  of which the engine's step", d["step"]))
    print(line("  of which drawing the view", d["draw"]))
    print(line("matplotlib waterfall PNG (before)", d["figure"]))
    loop = bench_playground_loop(lm, args.changes)
    thread = bench_playground_thread(lm, args.changes)
    sync = bench_playground_sync(lm, args.changes)
    print("Playground (demo model, 20 sampled tokens, from the debounce firing)")
    print(line("in a loop: change -> first token", loop["first"]))
    print(line("in a loop: change -> 20 tokens", loop["full"]))
    print(line("thread (before): first token", thread["first"]))
    print(line("thread (before): 20 tokens", thread["full"]))
    print(line("update(sync=True), 20 tokens", sync))
    if not args.no_kernel:
        k = bench_kernel(args.changes)
        print("Playground in a real Jupyter kernel (seed changed by comm messages)")
        print(line("kernel: change -> first token", k["first"]))
        print(line("kernel: change -> 20 tokens", k["full"]))
    print(f"python {sys.version.split()[0]}, genlab {genlab.__file__}")
    print(f"median step-click ratio figure/view drawing: "
          f"{statistics.median(d['figure']) / statistics.median(d['draw']):.1f}x")  # fmt: skip


if __name__ == "__main__":
    main()
