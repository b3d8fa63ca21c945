"""Background generation for widgets: one job at a time, cancellable at step boundaries.

Generating in the kernel's main thread would block the widget messages (no slider moves,
no Stop button) until it ends. A :class:`Worker` runs each job in a thread instead:

* a new request cancels the running job, which stops at its next step boundary;
* the new job starts only after the previous thread has ended (never two at once);
* ``debounce`` seconds of quiet are awaited before a scheduled request starts, so
  dragging a slider starts one generation, not twenty.

>>> w = Worker(lambda job: sum(range(10)))
>>> w.submit(sync=True)
45
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class Job:
    """One request. ``cancelled`` is set when a newer request replaces it or on Stop;
    ``stopped`` tells the two apart (Stop keeps the partial result)."""

    def __init__(self, number: int) -> None:
        self.number = number
        self.cancelled = threading.Event()
        self.done = threading.Event()  # set when fn(job) has returned (or never ran)
        self.stopped = False
        self.thread: threading.Thread | None = None

    def cancel(self, stop: bool = False) -> None:
        self.stopped = self.stopped or stop
        self.cancelled.set()


class Worker:
    """Runs ``fn(job)`` for each request, one at a time (see the module docstring)."""

    def __init__(self, fn: Callable[[Job], Any], debounce: float = 0.3) -> None:
        self.fn = fn
        self.debounce = debounce
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._job: Job | None = None
        self._count = 0

    @property
    def busy(self) -> bool:
        job = self._job
        return job is not None and job.thread is not None and job.thread.is_alive()

    def schedule(self) -> None:
        """Submit after ``debounce`` seconds without another schedule() call."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = threading.Timer(self.debounce, self.submit)
            self._timer.daemon = True
            self._timer.start()

    def submit(self, sync: bool = False) -> Any:
        """Cancel the running job and start a new one; with ``sync`` run it here and
        return what ``fn`` returned. A pending debounced request is dropped (this one
        replaces it), and the new job waits for the previous one to end, whether that
        ran in a thread or synchronously: never two jobs at once."""
        with self._lock:
            if self._timer is not None and threading.current_thread() is not self._timer:
                self._timer.cancel()
            previous = self._job
            if previous is not None:
                previous.cancel()
            self._count += 1
            job = self._job = Job(self._count)
            if not sync:
                job.thread = threading.Thread(
                    target=self._execute,
                    args=(job, previous),
                    daemon=True,
                    name=f"genlab-job-{job.number}",
                )
                job.thread.start()
                return None
        return self._execute(job, previous)

    def stop(self) -> None:
        """Stop the running job at its next step (its partial result is kept)."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
            if self._job is not None:
                self._job.cancel(stop=True)

    def wait(self, timeout: float | None = None) -> None:
        """Block until scheduled and running jobs are done (for tests and notebooks)."""
        timer = self._timer
        if timer is not None and timer.is_alive():
            timer.join(timeout)
        job = self._job
        if job is not None and job.thread is not None:
            job.thread.join(timeout)
        elif job is not None:
            job.done.wait(timeout)

    def is_current(self, job: Job) -> bool:
        return self._job is job

    def _execute(self, job: Job, previous: Job | None) -> Any:
        try:
            if previous is not None:
                previous.done.wait()  # threaded or synchronous: it has ended
            if job.cancelled.is_set() and not job.stopped:
                return None  # replaced before it started
            return self.fn(job)
        finally:
            job.done.set()
