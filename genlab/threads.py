"""Thread defaults that hold up on shared machines (Binder, JupyterHub, classroom servers).

torch runs its CPU kernels on an OpenMP thread team, one thread per core. By default the
OpenMP runtime (GNU libgomp in torch's Linux wheels) lets a thread that waits at the end
of a parallel region *spin* for a while before it sleeps. On a machine whose cores are
also busy with other processes, a spinning thread burns the time slice that the thread it
waits for needs: a decoding step has hundreds of parallel regions, and the demo ran 10 to
50 times slower beside two or three CPU-bound processes (``benchmarks/bench_busy.py``).
With ``OMP_WAIT_POLICY=PASSIVE`` (waiting threads sleep at once) the same runs kept their
speed; on a quiet machine, though, sleeping and waking costs 1.4-1.6x per decoding step
(the figures are in benchmarks/README.md). OpenMP reads the policy once, when torch loads,
so genlab chooses it on import from how busy the machine is then.

What genlab does, unless told otherwise:

* on ``import genlab``, before torch is imported, when the user has set neither
  ``OMP_WAIT_POLICY`` nor ``GOMP_SPINCOUNT``: the CPUs' idle time is sampled for 40 ms
  (``/proc/stat``); if other processes keep at least half a core busy (:data:`BUSY_CORES`),
  ``OMP_WAIT_POLICY=PASSIVE`` is put in the environment, else OpenMP keeps its default
  (:func:`set_wait_policy`). This works only where genlab is imported before torch (a
  notebook that imports torch first keeps OpenMP's default: set the variable yourself),
  and a machine that becomes busy later keeps the choice made at import;
* when a built-in decoder is built, torch's thread count is capped by the CPUs this
  process may use (its affinity mask and a container's CPU quota, which ``os.cpu_count()``
  does not see): :func:`configure`.

``GENLAB_THREADS=off`` turns both off; ``GENLAB_THREADS=N`` sets N threads. A user's own
``OMP_NUM_THREADS`` / ``OMP_WAIT_POLICY`` or ``torch.set_num_threads`` is left alone.
"""

from __future__ import annotations

import math
import os
import sys

WAIT_POLICY = "PASSIVE"
BUSY_CORES = 0.5  # cores kept busy by other processes at import from which threads sleep
SAMPLE_SECONDS = 0.04
_configured = False


def _setting() -> str:
    return os.environ.get("GENLAB_THREADS", "").strip().lower()


def busy_cores(seconds: float = SAMPLE_SECONDS) -> float | None:
    """Cores kept busy by all processes over ``seconds`` (``/proc/stat``: total minus idle
    and iowait time); None where it cannot be read. Called while this process is idle, it
    measures the others."""
    import time

    def sample():
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        return sum(fields), fields[3] + (fields[4] if len(fields) > 4 else 0)

    try:
        total0, idle0 = sample()
        time.sleep(seconds)
        total1, idle1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    if total1 <= total0:
        return None
    cpus = os.cpu_count() or 1
    return cpus * (1 - (idle1 - idle0) / (total1 - total0))


def set_wait_policy(busy: float | None = None) -> bool:
    """Put ``OMP_WAIT_POLICY=PASSIVE`` in the environment when other processes keep at
    least :data:`BUSY_CORES` busy (``busy``: measured by :func:`busy_cores` when None),
    nobody set the wait policy or ``GOMP_SPINCOUNT``, torch is not imported yet and
    ``GENLAB_THREADS`` is not ``off``. True when it was set (called by ``import genlab``)."""
    if (
        _setting() == "off"
        or "OMP_WAIT_POLICY" in os.environ
        or "GOMP_SPINCOUNT" in os.environ
        or "torch" in sys.modules
    ):
        return False
    busy = busy_cores() if busy is None else busy
    if busy is None or busy < BUSY_CORES:
        return False
    os.environ["OMP_WAIT_POLICY"] = WAIT_POLICY
    return True


def usable_cpus() -> int:
    """CPUs this process may run on: its affinity mask, capped by a cgroup CPU quota
    (``/sys/fs/cgroup/cpu.max`` or cgroup v1's cfs files), rounded up; at least 1."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
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
    ``torch.set_num_threads`` of the user's after loading stays); returns the thread count."""
    global _configured
    import torch

    if not _configured:
        _configured = True
        threads = default_threads()
        if threads is not None and threads != torch.get_num_threads():
            torch.set_num_threads(threads)
    return torch.get_num_threads()
