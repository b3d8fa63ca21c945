"""Widgets inside a running asyncio loop on the main thread, as in a Jupyter kernel (cells
and widget messages run so): a generation runs on that thread, one step per loop
callback, and whatever the loop does between two steps (a newer change, Stop) is seen at
the next step. Outside a loop (scripts, the other tests) jobs run in threads as before."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest
from test_widgets import SlowModel

import genlab
from genlab.models.table import TableLM
from genlab.widgets.compare import CompareView
from genlab.widgets.playground import Playground
from genlab.widgets.worker import Debounce, Worker, drain

WORDS = "a b c d e f g h i j k l m n o p q r s t".split()
MAIN = threading.main_thread()


class Model(SlowModel):
    """A uniform TableLM whose forward records its thread, can be slow (``delay``), fails
    at call ``fail_at`` and counts concurrent calls."""

    def __init__(self, delay: float = 0.0) -> None:
        row = {w: 1 / len(WORDS) for w in WORDS}
        super().__init__(TableLM({"": row}, fallback=row), delay)
        self.threads: list[threading.Thread] = []
        self.fail_at: int | None = None

    def forward(self, *args, **kwargs):
        self.threads.append(threading.current_thread())
        if self.fail_at is not None and self.calls + 1 >= self.fail_at:
            self.calls += 1
            raise RuntimeError("the model broke")
        return super().forward(*args, **kwargs)


def playground(model: Model, **kwargs) -> Playground:
    kwargs = {"do_sample": True, "max_new_tokens": 8, "run": False, **kwargs}
    return Playground(genlab.LM(model, model.tokenizer), "a", **kwargs)


async def settle(view, timeout: float = 10.0) -> None:
    """Let the loop run until no update is pending or running."""
    end = time.monotonic() + timeout
    while view.worker.busy or view.worker.pending:
        assert time.monotonic() < end, "the update did not end"
        await asyncio.sleep(0.005)


def in_loop(coro_fn):
    """Run coro_fn() with asyncio.run on this (main) thread; fail on any exception that
    reached the loop's exception handler."""
    errors: list[dict] = []

    async def main():
        asyncio.get_running_loop().set_exception_handler(lambda loop, ctx: errors.append(ctx))
        return await coro_fn()

    assert threading.current_thread() is MAIN
    out = asyncio.run(main())
    assert errors == []
    return out


def test_a_debounce_calls_once_after_the_last_start_on_the_loop_or_a_timer_thread():
    """The one debounce of the worker and the debugger: three starts, one call, on the
    loop's thread in a kernel; a cancelled one calls nothing; flush() from a cell calls
    it at once (the loop cannot fire it while the cell runs)."""
    calls: list[threading.Thread] = []
    debounce = Debounce(lambda: calls.append(threading.current_thread()))

    async def go():
        for _ in range(3):
            debounce.start(0.02)
        assert debounce.pending and calls == []
        await asyncio.sleep(0.1)
        assert calls == [MAIN] and not debounce.pending
        debounce.start(0.02)
        debounce.cancel()
        await asyncio.sleep(0.05)
        assert calls == [MAIN]
        debounce.start(0.01)
        debounce.start(5.0)  # puts the call off: the first timer calls nothing
        await asyncio.sleep(0.1)
        assert calls == [MAIN] and debounce.pending
        debounce.flush(timeout=1.0)  # no await: called here
        assert calls == [MAIN, MAIN] and not debounce.pending

    in_loop(go)
    debounce.start(0.01)  # no loop: a timer thread calls it
    debounce.start(0.01)
    debounce.flush(timeout=5.0)
    assert len(calls) == 3 and calls[-1] is not MAIN


def test_a_change_generates_on_the_loop_thread_after_the_debounce():
    model = Model()
    pg = playground(model, debounce=0.05)

    async def go():
        assert pg.worker.mode == "loop"
        pg.seed_box.value = "3"  # what a widget message does: schedules the debounce
        assert pg.worker.pending and not pg.worker.busy  # the debounce waits
        await asyncio.sleep(0.02)
        assert pg.version == 0 and model.calls == 0  # still within the debounce
        await settle(pg)

    in_loop(go)
    assert pg.version == 1 and pg.error is None and len(pg.table) == 8
    assert "seed 3" in pg.status.value
    assert model.threads and all(t is MAIN for t in model.threads)


def test_the_loop_runs_between_steps_and_a_newer_change_cancels_at_the_next_step():
    model = Model(delay=0.01)
    pg = playground(model, max_new_tokens=30, auto_update=False)
    seen: dict[str, int] = {}

    async def go():
        pg.update()
        await asyncio.sleep(0.08)  # this coroutine runs while the generation goes on
        assert pg.worker.busy and 0 < pg.progress.value < 30
        assert "genlab-streaming" in pg.text_view.value  # tokens so far are shown
        seen["calls"] = model.calls
        pg.seed_box.value = "5"
        pg.update()  # as a message between two steps would
        await settle(pg)

    in_loop(go)
    assert pg.version == 1  # only the newest result was shown
    assert "seed 5" in pg.status.value and len(pg.table) == 30
    assert model.calls - seen["calls"] <= 31  # the older one made no more steps
    assert model.max_active == 1 and all(t is MAIN for t in model.threads)


def test_stop_keeps_the_partial_result_in_loop_mode():
    model = Model(delay=0.01)
    pg = playground(model, max_new_tokens=60, auto_update=False)

    async def go():
        pg.update()
        await asyncio.sleep(0.1)
        pg.stop_button.click()
        await settle(pg)

    in_loop(go)
    assert 0 < len(pg.table) < 60 and pg.version == 1
    assert "stopped" in pg.status.value and pg.error is None


def test_an_error_in_a_step_is_shown_and_the_last_result_kept(caplog):
    model = Model()
    pg = playground(model, max_new_tokens=6, auto_update=False)

    async def go():
        pg.update()
        await settle(pg)
        good = pg.result
        model.fail_at = model.calls + 3  # the third step of the next generation fails
        pg.seed_box.value = "9"
        pg.update()
        await settle(pg)
        return good

    with caplog.at_level(logging.ERROR, logger="genlab.widgets"):
        good = in_loop(go)
    # in words, never the raw RuntimeError (issue 37), its own text kept
    assert (
        pg.error
        == "the model could not run these settings (the model broke); change them and retry."
    )
    assert pg.result is good and "last good result" in pg.status.value
    assert "genlab-error" in pg.status.value and pg.version == 1
    assert not caplog.records  # the widget showed it: nothing to log


def test_rapid_changes_make_one_generation():
    model = Model()
    pg = playground(model, debounce=0.1)

    async def go():
        for seed in (1, 2, 3):
            pg.seed_box.value = str(seed)
            await asyncio.sleep(0.01)
        pg.panel.set("max_new_tokens", 5)
        await asyncio.sleep(0.2)
        await settle(pg)

    in_loop(go)
    assert pg.worker._count == 1 and pg.version == 1
    assert len(pg.table) == 5 and "seed 3" in pg.status.value


def test_wait_and_sync_update_finish_the_job_on_the_spot():
    """A cell blocks the loop: wait() fires the debounce now and steps the job to its
    end; update(sync=True) during a loop job ends that one first (no deadlock)."""
    model = Model(delay=0.005)
    pg = playground(model, debounce=10.0)

    async def go():
        pg.seed_box.value = "4"
        pg.wait()  # no await: the loop never ran
        assert pg.version == 1 and "seed 4" in pg.status.value and not pg.worker.busy
        pg.seed_box.value = "6"
        pg.update()
        await asyncio.sleep(0.03)
        assert pg.worker.busy
        pg.wait()
        assert pg.version == 2 and "seed 6" in pg.status.value
        pg.update()
        await asyncio.sleep(0.03)
        assert pg.worker.busy
        result = pg.update(sync=True)
        assert result is pg.result and pg.version == 3
        await settle(pg)  # the loop's leftover callbacks do nothing

    in_loop(go)
    assert pg.version == 3 and model.max_active == 1
    assert all(t is MAIN for t in model.threads)


def test_compare_view_steps_each_config_on_the_loop():
    model = Model()
    lm = genlab.LM(model, model.tokenizer)
    view = CompareView(
        lm, "a",
        {"a": {"do_sample": True, "max_new_tokens": 4},
         "b": {"do_sample": True, "top_k": 2, "max_new_tokens": 4}},
        run=False, auto_update=False,
    )  # fmt: skip

    async def go():
        view.update()
        await settle(view)

    in_loop(go)
    assert view.error is None and set(view.results) == {"a", "b"}
    assert all(len(t) == 4 for t in view.tables.values())
    assert all(t is MAIN for t in model.threads)


def test_thread_mode_outside_a_loop_is_unchanged():
    model = Model()
    pg = playground(model, auto_update=False)
    assert pg.worker.mode == "thread"
    pg.update()
    assert pg.worker._job.thread is not None
    pg.wait()
    assert pg.version == 1 and len(pg.table) == 8
    assert model.threads and all(t is not MAIN for t in model.threads)


def test_a_plain_job_runs_in_a_thread_even_in_loop_mode_and_failures_are_logged(caplog):
    plain = Worker(lambda job: threading.current_thread())

    def broken(job):
        yield
        raise KeyError("bug")

    stepwise = Worker(broken)

    async def go():
        plain.submit()
        stepwise.submit()
        await settle(type("V", (), {"worker": plain})())
        await settle(type("V", (), {"worker": stepwise})())

    with caplog.at_level(logging.ERROR, logger="genlab.widgets"):
        in_loop(go)
    assert plain._job.value is not MAIN and plain._job.thread is not None
    assert stepwise._job.done.is_set()
    assert [r.getMessage() for r in caplog.records] == ["genlab widget: a job failed"]


def test_a_view_with_a_plain_compute_runs_it_in_a_thread_in_loop_mode():
    class Plain(Playground):
        def compute(self, job):  # cannot pause: a long computation in one piece
            return drain(super().compute(job))

    model = Model()
    pg = Plain(genlab.LM(model, model.tokenizer), "a", max_new_tokens=4, run=False)

    async def go():
        pg.update()
        await settle(pg)

    in_loop(go)
    assert pg.version == 1 and len(pg.table) == 4
    assert model.threads and all(t is not MAIN for t in model.threads)


@pytest.mark.parametrize("sync_first", [True, False])
def test_a_loop_job_after_a_thread_job_waits_for_it(sync_first):
    """Never two at once across modes: a loop job queued behind a thread job starts only
    when the thread has ended."""
    model = Model(delay=0.01)
    pg = playground(model, max_new_tokens=10, auto_update=False)
    if sync_first:
        pg.update(sync=True)
    pg.update()  # thread mode: no loop yet
    time.sleep(0.03)

    async def go():
        pg.seed_box.value = "7"
        pg.update()
        await settle(pg)

    in_loop(go)
    assert model.max_active == 1 and "seed 7" in pg.status.value
    assert model.threads[-1] is MAIN


KERNEL_CODE = """
import threading, time, genlab
from genlab.models.table import TableLM
from genlab.widgets import Playground
WORDS = "a b c d e f g h i j k l m n o p q r s t".split()
row = {w: 1 / len(WORDS) for w in WORDS}
table = TableLM({"": row}, fallback=row)
class Slow:
    info, tokenizer = table.info, table.tokenizer
    threads, renders, jobs = set(), [], []
    def new_cache(self, batch_size):
        return table.new_cache(batch_size)
    def forward(self, *args, **kwargs):
        self.threads.add(threading.current_thread().name)
        self.jobs.append(pg.worker._job.number)
        time.sleep(0.02)
        return table.forward(*args, **kwargs)
slow = Slow()
pg = Playground(genlab.LM(slow, table.tokenizer), "a", do_sample=True, max_new_tokens=40,
                debounce=0.01, run=False)
_render = pg.render
pg.render = lambda data: (slow.renders.append(pg.seed_box.value), _render(data))
print(pg.seed_box.model_id)
"""


def test_in_a_real_kernel_a_widget_message_cancels_the_running_generation():
    """ipykernel reads a comm message between two steps of a generation that runs on its
    own thread: the newer seed cancels the older generation, which is never shown."""
    import json
    import os
    from pathlib import Path

    from jupyter_client.manager import start_new_kernel

    root = str(Path(__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    km, kc = start_new_kernel(kernel_name="python3", env=env)

    def execute(code):
        msg_id, out = kc.execute(code), []
        while True:
            msg = kc.get_iopub_msg(timeout=60)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "stream":
                out.append(msg["content"]["text"])
            elif msg["msg_type"] == "error":
                raise AssertionError("\n".join(msg["content"]["traceback"]))
            elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                return "".join(out)

    def change_seed(value):
        data = {"method": "update", "state": {"value": value}, "buffer_paths": []}
        kc.shell_channel.send(kc.session.msg("comm_msg", {"comm_id": comm, "data": data}))

    try:
        comm = execute(KERNEL_CODE).strip().splitlines()[-1]
        change_seed("1")
        time.sleep(0.4)  # about 15 of its 40 steps (0.8 s)
        change_seed("2")
        time.sleep(1.5)
        out = execute(
            "import json; print(json.dumps([pg.version, pg.seed_box.value, sorted(slow.threads),"
            " slow.renders, pg.status.value, slow.jobs.count(1)]))"
        )
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    version, seed, threads, renders, status, first = json.loads(out.strip().splitlines()[-1])
    assert threads == ["MainThread"]  # the kernel's own thread generated
    assert 3 <= first < 40  # the first generation was under way, and stopped early
    assert renders == ["2"] and version == 1 and seed == "2"
    assert "seed 2" in status and "40 tokens" in status


def test_debugger_clicks_are_drawn_on_the_loop_and_wait_draws_at_once():
    """In a kernel the StepDebugger draws a click's view from a loop callback (no timer
    thread touches the widgets); a cell that waits draws it on the spot."""
    from genlab.widgets.debugger import StepDebugger

    model = Model()
    dbg = StepDebugger(genlab.LM(model, model.tokenizer), "a", max_new_tokens=6, seed=0)
    drawn: list[threading.Thread] = []
    draw = dbg._draw
    dbg._draw = lambda: (drawn.append(threading.current_thread()), draw())[1]

    async def go():
        for _ in range(3):
            dbg.step_button.click()
        assert dbg.run.step_index == 3 and drawn == []  # done at once, drawn later
        await asyncio.sleep(0.1)
        assert len(drawn) == 1  # three clicks, one view
        dbg.step_button.click()
        dbg.wait(timeout=5.0)  # no await: drawn here, not after the timeout
        assert len(drawn) == 2
        await asyncio.sleep(0.05)  # the cancelled-or-fired timer draws nothing more

    in_loop(go)
    assert len(drawn) == 2 and all(t is MAIN for t in drawn)
    assert dbg.run.step_index == 4
