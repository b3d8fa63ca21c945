"""Generation for widgets: one job at a time, cancellable at step boundaries.

A job is ``fn(job)``. It may return a value, or be a generator that yields between its
steps (a widget's generation yields after every token); a :class:`Worker` runs it in
one of two ways, chosen at each request:

* **loop mode**, when the request is made on the main thread while an asyncio event loop
  runs there (a Jupyter kernel: cells and widget messages run so). Each step of a
  generator job is one ``loop.call_soon`` callback, so the kernel reads the widget
  messages that arrived (a newer slider value, Stop) between two steps, and the
  generation runs on the thread that owns torch's thread pool (a second thread doing
  torch work makes every small parallel operation wait for OpenMP wake-ups: see
  benchmarks/README.md, "Live speed"). A job that is a
  plain function (it cannot pause) still runs in a thread there.
* **thread mode** otherwise (scripts, tests): the job runs in a thread of its own.

In both modes:

* a new request cancels the running job, which stops at its next step boundary;
* the new job starts only after the previous one has ended (never two at once);
* ``debounce`` seconds of quiet are awaited before a scheduled request starts, so
  dragging a slider starts one generation, not twenty (``loop.call_later`` in loop mode).

:meth:`Worker.close` cancels the scheduled and running jobs (a panel's ``close()`` calls it).
When the interpreter exits, every worker is closed and its job's thread awaited (for a few
seconds): a thread left inside torch while Python shuts down aborts the process
("terminate called without an active exception", exit code -6).

>>> w = Worker(lambda job: sum(range(10)))
>>> w.submit(sync=True)
45
"""

from __future__ import annotations

import asyncio
import atexit
import inspect
import logging
import threading
import time
import weakref
from collections.abc import Callable, Generator
from typing import Any

log = logging.getLogger("genlab.widgets")

#: seconds between two checks whether the previous job has ended (loop mode)
POLL = 0.002
#: seconds the interpreter's exit waits for each running job's thread to stop
EXIT_WAIT = 10.0
#: every worker alive, closed at the interpreter's exit
_WORKERS: weakref.WeakSet = weakref.WeakSet()


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running on this thread when this is the main thread, else None."""
    if threading.current_thread() is not threading.main_thread():
        return None
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def drain(gen: Generator) -> Any:
    """Run ``gen`` to its end here; returns what it returned."""
    while True:
        try:
            next(gen)
        except StopIteration as end:
            return end.value


class Debounce:
    """Calls ``fn()`` once ``delay`` seconds pass without another :meth:`start`: from a
    ``loop.call_later`` callback when the main thread's event loop runs (a kernel: on its
    thread, between its messages), else from a daemon timer thread. A timer restarted or
    cancelled meanwhile calls nothing. ``lock`` (an RLock) guards the state; the owner may
    share its own. A failure of ``fn`` is logged, never raised into the loop or the timer
    thread."""

    def __init__(self, fn: Callable[[], Any], lock: Any = None) -> None:
        self.fn = fn
        self._lock = lock if lock is not None else threading.RLock()
        self._timer: threading.Timer | asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop of the timer
        self._tick = 0  # which start() the timer belongs to
        self.pending = False  # a call waits for its timer

    def start(self, delay: float) -> None:
        """Call ``fn`` after ``delay`` seconds (a pending call is put off: one call)."""
        loop = running_loop()
        with self._lock:
            self.cancel()
            self.pending = True
            self._tick += 1
            self._loop = loop
            if loop is not None:
                self._timer = loop.call_later(delay, self._fire, self._tick)
            else:
                self._timer = threading.Timer(delay, self._fire, (self._tick,))
                self._timer.daemon = True
                self._timer.start()

    def cancel(self) -> None:
        """Drop the pending call."""
        with self._lock:
            if self._timer is not None and self._timer is not threading.current_thread():
                self._timer.cancel()
            self._timer = None
            self.pending = False

    def flush(self, timeout: float | None = None) -> None:
        """Wait for the pending call (at most ``timeout`` seconds). A loop timer that its
        loop cannot fire now (this thread's loop waits for the caller: a notebook cell, or
        the loop has stopped) is called here, at once."""
        deadline = None if timeout is None else time.monotonic() + timeout
        timer = self._timer
        if not self.pending:
            return
        if isinstance(timer, threading.Timer):
            timer.join(timeout)
        elif running_loop() is not None or not self._loop.is_running():
            self._fire()
        else:  # the loop that would fire it runs elsewhere: let it
            while self.pending and not _past(deadline):
                time.sleep(POLL)

    def _fire(self, tick: int | None = None) -> None:
        with self._lock:
            if not self.pending or (tick is not None and tick != self._tick):
                return
            self._timer = None
            self.pending = False
        try:
            self.fn()
        except Exception:
            log.exception("genlab widget: a scheduled update failed")


class Job:
    """One request. ``cancelled`` is set when a newer request replaces it or on Stop;
    ``stopped`` tells the two apart (Stop keeps the partial result). ``loop`` is the event
    loop that steps it (loop mode) and ``thread`` the thread that runs it (thread mode)."""

    def __init__(self, number: int) -> None:
        self.number = number
        self.cancelled = threading.Event()
        self.done = threading.Event()  # set when fn(job) has returned (or never ran)
        self.stopped = False
        self.thread: threading.Thread | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.previous: Job | None = None  # must end before this one starts
        self.gen: Generator | None = None  # the generator being stepped (loop mode)
        self.started = False
        self.value: Any = None  # what fn(job) returned

    def cancel(self, stop: bool = False) -> None:
        self.stopped = self.stopped or stop
        self.cancelled.set()


class Worker:
    """Runs ``fn(job)`` for each request, one at a time (see the module docstring)."""

    def __init__(self, fn: Callable[[Job], Any], debounce: float = 0.3) -> None:
        self.fn = fn
        self.debounce = debounce
        self.stepwise = inspect.isgeneratorfunction(fn)
        self._lock = threading.RLock()
        self._debounce = Debounce(self.submit, self._lock)
        self._job: Job | None = None
        self._count = 0
        _WORKERS.add(self)

    @property
    def busy(self) -> bool:
        job = self._job
        return job is not None and not job.done.is_set()

    @property
    def pending(self) -> bool:
        """True while a debounced request waits for its timer (it has not started yet)."""
        return self._debounce.pending

    @property
    def mode(self) -> str:
        """'loop' when a request made here now would run on the event loop, else 'thread'."""
        return "loop" if running_loop() is not None else "thread"

    def schedule(self, delay: float | None = None) -> None:
        """Submit after ``delay`` seconds (default ``debounce``) without another
        schedule() call."""
        self._debounce.start(self.debounce if delay is None else delay)

    def submit(self, sync: bool = False) -> Any:
        """Cancel the running job and start a new one; with ``sync`` run it here and
        return what ``fn`` returned. A pending debounced request is dropped (this one
        replaces it), and the new job waits for the previous one to end, wherever that
        ran: never two jobs at once."""
        loop = None if sync else running_loop()
        with self._lock:
            self._debounce.cancel()
            previous = self._job
            if previous is not None:
                previous.cancel()
            self._count += 1
            job = self._job = Job(self._count)
            job.previous = previous
            if sync:
                pass
            elif loop is not None:
                job.loop = loop
                if not self.stepwise:  # cannot pause between steps: a thread runs it
                    job.thread = threading.Thread(
                        target=self._run_to_end, args=(job,), daemon=True,
                        name=f"genlab-job-{job.number}",
                    )  # fmt: skip
                loop.call_soon(self._loop_start, job)
                return None
            else:
                job.thread = threading.Thread(
                    target=self._run_to_end,
                    args=(job,),
                    daemon=True,
                    name=f"genlab-job-{job.number}",
                )
                job.thread.start()
                return None
        return self._run_to_end(job)

    def stop(self) -> None:
        """Stop the running job at its next step (its partial result is kept)."""
        with self._lock:
            self._debounce.cancel()
            if self._job is not None:
                self._job.cancel(stop=True)

    def close(self) -> None:
        """Cancel the scheduled request and the running job (it stops at its next step;
        unlike :meth:`stop`, nothing of it is shown)."""
        with self._lock:
            self._debounce.cancel()
            if self._job is not None:
                self._job.cancel()

    def wait(self, timeout: float | None = None) -> None:
        """Wait until scheduled and running jobs are done (for tests and notebooks).

        In loop mode (a notebook cell) the event loop cannot run while the caller waits,
        so a pending debounced request starts now and the job is finished right here."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self._debounce.flush(timeout)  # the debounce ends now when its loop cannot end it
        job = self._job
        if job is not None:
            self._finish(job, deadline)

    def is_current(self, job: Job) -> bool:
        return self._job is job

    # -- internals -------------------------------------------------------------------------
    def _finish(self, job: Job, deadline: float | None) -> None:
        """Wait for ``job`` to end; a loop job that would need the (blocked) loop of this
        thread to advance is started and stepped to its end here instead (or until the
        deadline passes: the loop's callbacks go on with it later)."""
        if job.done.is_set():
            return
        here = job.loop is not None and (running_loop() is job.loop or not job.loop.is_running())
        if here and not job.started:
            if job.previous is not None:
                self._finish(job.previous, deadline)
                if not job.previous.done.is_set():
                    return
            if job.thread is not None:  # a plain job: its thread runs it
                job.started, job.previous = True, None
                job.thread.start()
            else:
                self._begin(job)
        if job.thread is not None and job.started:
            job.thread.join(_left(deadline))
        elif here:
            while not job.done.is_set() and not _past(deadline):
                self._advance(job)
        else:
            job.done.wait(_left(deadline))

    def _run_to_end(self, job: Job) -> Any:
        """Run ``job`` on this thread (thread mode, sync, or a plain job in loop mode)."""
        try:
            if job.previous is not None:
                self._finish(job.previous, None)  # threaded, synchronous or a loop job
            if job.cancelled.is_set() and not job.stopped:
                return None  # replaced before it started
            job.started = True
            value = self.fn(job)
            if inspect.isgenerator(value):
                value = drain(value)
            job.value = value
            return value
        finally:
            job.done.set()

    def _loop_start(self, job: Job) -> None:
        """Loop callback: start ``job`` once the previous job has ended."""
        if job.started or job.done.is_set():
            return
        previous = job.previous
        if previous is not None and not previous.done.is_set():
            job.loop.call_later(POLL, self._loop_start, job)
            return
        if job.thread is not None:  # a plain job: its thread runs it
            job.started, job.previous = True, None
            job.thread.start()
            return
        self._begin(job)
        if not job.done.is_set():
            job.loop.call_soon(self._loop_step, job)

    def _begin(self, job: Job) -> None:
        job.started = True
        job.previous = None
        if job.cancelled.is_set() and not job.stopped:
            job.done.set()  # replaced before it started
            return
        try:
            job.gen = self.fn(job)
        except Exception:
            log.exception("genlab widget: a job failed to start")
            job.done.set()

    def _loop_step(self, job: Job) -> None:
        """Loop callback: one step of ``job``, then the next step is queued behind the
        messages and callbacks that arrived meanwhile."""
        if job.done.is_set():
            return
        self._advance(job)
        if not job.done.is_set():
            job.loop.call_soon(self._loop_step, job)

    def _advance(self, job: Job) -> None:
        try:
            next(job.gen)
        except StopIteration as end:
            job.value = end.value
            job.done.set()
        except Exception:  # the job shows its own errors; anything else is logged
            log.exception("genlab widget: a job failed")
            job.done.set()
        except BaseException:
            job.done.set()
            raise


@atexit.register
def _close_all() -> None:
    """At the interpreter's exit: close every worker and wait for the threads of their jobs
    to stop at their next step (daemon threads would otherwise still be inside torch while
    the interpreter is torn down)."""
    workers = list(_WORKERS)
    for worker in workers:
        worker.close()
    for worker in workers:
        job = worker._job
        thread = None if job is None else job.thread
        if thread is not None and thread.is_alive() and thread is not threading.current_thread():
            thread.join(EXIT_WAIT)


def _past(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())
