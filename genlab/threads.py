"""Thread defaults that hold up on shared machines (Binder, JupyterHub, classroom servers).

torch runs its CPU kernels on an OpenMP thread team, one thread per core. By default the
OpenMP runtime (GNU libgomp in torch's Linux wheels) lets a thread that waits at the end
of a parallel region *spin* for a while before it sleeps. On a machine whose cores are
also busy with other processes, a spinning thread burns the time slice that the thread it
waits for needs: a decoding step has hundreds of parallel regions, and the demo ran 10 to
50 times slower beside two or three CPU-bound processes (``benchmarks/bench_busy.py``).
With ``OMP_WAIT_POLICY=PASSIVE`` (waiting threads sleep at once) the same runs kept their
speed, and on a quiet machine it costs little (the figures are in benchmarks/README.md).

What genlab does, unless told otherwise:

* on ``import genlab``, before torch is imported, ``OMP_WAIT_POLICY=PASSIVE`` is put in the
  environment when the user has not set it (:func:`set_wait_policy`); OpenMP reads it
  once, when torch loads, so this works only where genlab is imported before torch (a
  notebook that imports torch first keeps OpenMP's default: set the variable yourself);
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
_configured = False


def _setting() -> str:
    return os.environ.get("GENLAB_THREADS", "").strip().lower()


def set_wait_policy() -> bool:
    """Put ``OMP_WAIT_POLICY=PASSIVE`` in the environment if nobody set it, torch is not
    imported yet and ``GENLAB_THREADS`` is not ``off``. True when it was set (called by
    ``import genlab``)."""
    if _setting() == "off" or "OMP_WAIT_POLICY" in os.environ or "torch" in sys.modules:
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
