"""Thread defaults that hold up on shared machines (Binder, JupyterHub, classroom servers).

torch runs its CPU kernels on an OpenMP thread team, one thread per core. The OpenMP
runtime of torch's Linux wheels (GNU libgomp) lets a thread that waits at the end of a
parallel region *spin* for a while (about 300,000 rounds, a few ms) before it sleeps. On a
machine whose cores are also busy with other processes, a spinning thread burns the time
slice that the thread it waits for needs: a decoding step has hundreds of parallel regions,
and the demo ran many times slower beside two or three CPU-bound processes. Threads that
sleep at once (``OMP_WAIT_POLICY=PASSIVE``) keep the speed there, but slow every step on a
quiet machine (benchmarks/README.md, "Figures behind the code"). libgomp reads its wait
policy and ``GOMP_SPINCOUNT`` once, when torch loads; setting them afterwards does nothing,
and most notebooks import torch before genlab.

One spin setting still changes after torch has loaded: libgomp spins only about 100 rounds
(instead of 300,000) while it manages more threads than the process has CPUs. So while other
processes keep the CPUs busy, genlab *parks* a few OpenMP threads: a Python thread that ran
one parallel region and then waits, its team idle and asleep (:class:`_Park`). Waiting
threads then go to sleep almost at once, as with ``PASSIVE``; once the machine is quiet
again the parked thread ends and OpenMP spins as usual. The number of threads that compute
is never changed by this.

What genlab does, unless told otherwise:

* while a run computes (``Run.step``, ``run``, ``rewind`` and ``generate`` enter
  :func:`watching`, its one entry point; the step loop itself never looks), a helper thread
  takes a reading when the run starts and then looks every :func:`window` seconds: how many
  cores other processes kept busy since the last reading, from ``/proc/stat`` less this
  process's own CPU time (two reads of a file); if at least :data:`BUSY_CORES`, OpenMP
  threads are parked, else released. A reading older than :data:`STALE` seconds is replaced
  by a :data:`SAMPLE_SECONDS` sample;
* when a built-in decoder is built, torch's thread count is capped by the CPUs this
  process may use (its affinity mask and a container's CPU quota, which ``os.cpu_count()``
  does not see): :func:`configure`.

``GENLAB_THREADS=off`` turns both off; ``GENLAB_THREADS=N`` sets N threads. A user's own
``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT`` turns the parking off (the spinning is theirs); a
user's ``OMP_NUM_THREADS`` or ``torch.set_num_threads`` is left as it is (genlab never
changes the count after :func:`configure`). :func:`status` says what was decided and why.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import math
import os
import threading
import time

BUSY_CORES = 0.5  # cores kept busy by other processes from which waiting threads should sleep
WINDOW = 0.25  # seconds between two looks at the machine, per 2 CPUs (see window())
STALE = 10.0  # seconds: a look this old is not compared with; a fresh sample is taken
SAMPLE_SECONDS = 0.05
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_configured = False


def _setting() -> str:
    return os.environ.get("GENLAB_THREADS", "").strip().lower()


def cpu_reading() -> tuple[float, float, float] | None:
    """(monotonic seconds, CPU seconds all processes spent busy so far (``/proc/stat``:
    every CPU, idle and iowait left out), CPU seconds this process spent); None where
    ``/proc/stat`` cannot be read."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:9]]
        busy = sum(fields) - fields[3] - fields[4]
    except (OSError, ValueError, IndexError):
        return None
    return time.monotonic(), busy / _TICK, time.process_time()


def others_busy(before, after) -> float | None:
    """Cores kept busy by *other* processes between two :func:`cpu_reading`s: all busy CPU
    time less this process's own, over the wall time between them (None if not measurable)."""
    if before is None or after is None or after[0] <= before[0]:
        return None
    others = (after[1] - before[1]) - (after[2] - before[2])
    return max(0.0, others / (after[0] - before[0]))


def window() -> float:
    """Seconds between two looks: :data:`WINDOW` per 2 CPUs, at most 2 s. ``/proc/stat``
    counts in ticks (10 ms), this process's own time exactly; on each CPU that this process
    keeps partly busy, a look's tick count is off by a few ticks, and these errors add up
    over the CPUs. Over this window (2 CPUs: 0.25 s; 16 CPUs: 2 s) their spread stays
    well under :data:`BUSY_CORES` (benchmarks/README.md, "Figures behind the code")."""
    return min(2.0, WINDOW * max(1, (os.cpu_count() or 1) / 2))


def busy_cores(seconds: float = SAMPLE_SECONDS) -> float | None:
    """Cores kept busy by other processes over the next ``seconds`` (this one sleeps)."""
    before = cpu_reading()
    time.sleep(seconds)
    return others_busy(before, cpu_reading())


class _Park:
    """A Python thread that runs one OpenMP parallel region of ``size`` threads, then waits
    (its team stays in libgomp's pool, asleep) until :meth:`release`. While it waits, libgomp
    manages more threads than there are CPUs and every waiting OpenMP thread spins only its
    short, "throttled" count before it sleeps."""

    def __init__(self, lib, size: int):
        self.size = size
        self._lib = lib
        self._go = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="genlab-omp-park", daemon=True)
        self._thread.start()
        self._ready.wait(5.0)

    def _run(self) -> None:
        import torch

        try:
            torch.zeros(1).add_(1)  # torch sets this thread's OpenMP count on first use ...
            self._lib.omp_set_num_threads(self.size)  # ... then this thread's team size
            torch.zeros(1 << 18).add_(1)  # a region big enough for torch to run in parallel
        finally:
            self._ready.set()
        self._go.wait()  # the thread's end frees its team (libgomp counts them out again)

    def release(self) -> None:
        self._go.set()
        self._thread.join(5.0)


def _libgomp():
    """torch's own libgomp (the Linux wheels ship it in torch/lib), or None."""
    import torch

    for path in sorted(glob.glob(os.path.join(os.path.dirname(torch.__file__), "lib", "libgomp*"))):
        try:
            lib = ctypes.CDLL(path)  # the copy torch loaded: the same path, the same library
            lib.omp_get_max_threads()
            return lib
        except (OSError, AttributeError):
            continue
    return None


class _Adapter:
    """The state of :func:`adapt` (one per process)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reading = None  # the last cpu_reading
        self.park: _Park | None = None
        self.lib = None
        self.why = "no look yet"
        self.others: float | None = None
        self.blind = False

    def off_reason(self) -> str | None:
        if _setting() == "off":
            return "GENLAB_THREADS=off"
        for name in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT"):
            if name in os.environ:
                return f"{name} is set: OpenMP's wait is the user's"
        return None

    def look(self) -> None:
        now = cpu_reading()
        if now is None:
            self.why = "/proc/stat cannot be read: OpenMP's default"
            self.blind = True  # no later look either (not Linux, or no /proc)
            return
        before = self.reading
        if before is None or now[0] - before[0] > STALE:
            before = now
            time.sleep(SAMPLE_SECONDS)
            now = cpu_reading()
        self.reading = now
        self.others = others_busy(before, now)
        if self.others is None:
            return
        busy = self.others >= BUSY_CORES
        self.set_parked(busy)

    def set_parked(self, busy: bool) -> None:
        import torch

        threads = torch.get_num_threads()
        if busy and threads > 1:
            cpus = _affinity_cpus()
            size = max(2, cpus - threads + 2)  # managed threads: threads + size - 1 > cpus
            if self.park is None or self.park.size != size:
                if self.lib is None:
                    self.lib = _libgomp() or False
                if not self.lib:
                    self.why = "busy, but torch's OpenMP is not GNU libgomp: nothing to park"
                    return
                self.unpark()
                self.park = _Park(self.lib, size)
            self.why = (
                f"others keep {self.others:.2f} cores busy (>= {BUSY_CORES}): {size} OpenMP "
                f"threads parked, so that {threads} waiting threads sleep soon"
            )
        else:
            self.unpark()
            self.why = (
                f"others keep {self.others:.2f} cores busy (< {BUSY_CORES}): OpenMP's default"
                if threads > 1
                else "one thread: nothing waits"
            )

    def unpark(self) -> None:
        if self.park is not None:
            self.park.release()
            self.park = None


_adapter = _Adapter()


def take_reading() -> None:
    """Take a reading now: the next look compares with it instead of sampling."""
    _adapter.reading = cpu_reading()


def adapt() -> None:
    """Park or release OpenMP threads from how busy other processes kept the CPUs since
    the last look (see the module docstring); at most one look every :func:`window`
    seconds, otherwise a clock read. :func:`watching`'s helper thread calls it while a run
    computes, and :func:`configure` once when a model is built."""
    a = _adapter
    if a.blind or (a.reading is not None and time.monotonic() - a.reading[0] < window()):
        return
    if not a.lock.acquire(blocking=False):  # another thread is looking
        return
    try:
        off = a.off_reason()
        if off is not None:
            a.unpark()
            a.why = off
            a.reading = cpu_reading()
            return
        a.look()
    finally:
        a.lock.release()


class _Watch:
    """The helper thread of :func:`watching`: one per process, alive while at least one
    run computes (nested runs, such as a draft model's, share it)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.depth = 0
        self.stop: threading.Event | None = None

    def enter(self) -> None:
        with self.lock:
            self.depth += 1
            if self.depth > 1:
                return
            self.stop = stop = threading.Event()
        thread = threading.Thread(target=self._loop, args=(stop,), name=WATCH_NAME, daemon=True)
        thread.start()

    def leave(self) -> None:
        with self.lock:
            self.depth -= 1
            if self.depth == 0 and self.stop is not None:
                self.stop.set()  # the helper ends at its next wake; nothing waits for it
                self.stop = None

    @staticmethod
    def _loop(stop: threading.Event) -> None:
        # The first look compares with a reading taken now, not with one left by the last
        # run: what other processes did while this one was idle (a neighbour's run that has
        # ended, a benchmark's other processes in turn) says nothing about the cores now, and
        # counting it parked OpenMP threads for the start of a run on a quiet machine.
        take_reading()
        while not stop.wait(window()):
            adapt()


WATCH_NAME = "genlab-threads-watch"
_watch = _Watch()


@contextlib.contextmanager
def watching():
    """The thread policy while a run computes: a helper thread takes a reading at once and
    calls :func:`adapt` every :func:`window` seconds, until the outermost ``with`` ends (a run
    shorter than one window keeps the threads as they were). The run's step loop itself
    never looks at the machine."""
    _watch.enter()
    try:
        yield
    finally:
        _watch.leave()


def status() -> dict:
    """What :func:`adapt` decided last: ``{"parked": bool, "parked_threads": how many
    OpenMP threads are parked (0 when none), "others_busy": cores or None, "why": one
    line}``."""
    park = _adapter.park
    return {
        "parked": park is not None,
        "parked_threads": 0 if park is None else park.size,
        "others_busy": _adapter.others,
        "why": _adapter.why,
    }


def _affinity_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def usable_cpus() -> int:
    """CPUs this process may run on: its affinity mask, capped by a cgroup CPU quota
    (``/sys/fs/cgroup/cpu.max`` or cgroup v1's cfs files), rounded up; at least 1."""
    cpus = _affinity_cpus()
    quota = _cgroup_quota()
    if quota is not None:
        cpus = min(cpus, max(1, math.ceil(quota)))
    return max(1, cpus)


def _cgroup_quota() -> float | None:
    try:
        quota, period = open("/sys/fs/cgroup/cpu.max").read().split()[:2]
        if quota != "max":
            return int(quota) / int(period)
        return None
    except (OSError, ValueError):
        pass
    try:
        quota = int(open("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").read())
        period = int(open("/sys/fs/cgroup/cpu/cpu.cfs_period_us").read())
        return quota / period if quota > 0 and period > 0 else None
    except (OSError, ValueError):
        return None


def default_threads() -> int | None:
    """The thread count genlab sets (None: leave torch's): ``GENLAB_THREADS=N`` if given,
    else torch's count capped by :func:`usable_cpus`; None when ``GENLAB_THREADS=off`` or
    the user set ``OMP_NUM_THREADS``."""
    import torch

    setting = _setting()
    if setting == "off" or (not setting and "OMP_NUM_THREADS" in os.environ):
        return None
    if setting:
        if not setting.isdigit() or int(setting) < 1:
            raise ValueError(
                f"GENLAB_THREADS={setting!r}: give a positive number of threads, or 'off' "
                "(torch's own default)"
            )
        return int(setting)
    return min(torch.get_num_threads(), usable_cpus())


def configure() -> int:
    """Apply :func:`default_threads` once per process (later calls do nothing, so that a
    ``torch.set_num_threads`` of the user's after loading stays); returns the thread count.
    A refused ``GENLAB_THREADS`` raises and does not count: the corrected value applies at
    the next call."""
    global _configured
    import torch

    if not _configured:
        threads = default_threads()  # a refused GENLAB_THREADS raises before it counts
        _configured = True
        if threads is not None and threads != torch.get_num_threads():
            torch.set_num_threads(threads)
    adapt()  # a busy machine: the weight-form probe that follows runs with threads parked
    return torch.get_num_threads()
