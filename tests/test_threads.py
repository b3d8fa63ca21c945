"""Thread defaults for shared machines (genlab/threads.py): OMP_WAIT_POLICY=PASSIVE set on
import when nobody set it and torch is not loaded yet; thread counts capped by the CPUs the
process may use; GENLAB_THREADS overrides."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from genlab import threads

SHOW = "import os; print(os.environ.get('OMP_WAIT_POLICY'))"


def policy_after(code: str, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GENLAB_THREADS")}
    out = subprocess.run(
        [sys.executable, "-c", f"{code}; {SHOW}"], env={**clean, **env}, capture_output=True,
        text=True, check=True,
    )  # fmt: skip
    return out.stdout.strip()


def test_importing_genlab_leaves_a_users_policy_and_a_loaded_torch_alone():
    assert policy_after("import torch, genlab") == "None"  # too late for OpenMP: left alone
    assert policy_after("import genlab", OMP_WAIT_POLICY="ACTIVE") == "ACTIVE"  # the user's
    assert policy_after("import genlab", GENLAB_THREADS="off") == "None"
    assert policy_after("import genlab", GOMP_SPINCOUNT="1000") == "None"


def test_threads_sleep_while_they_wait_only_on_a_busy_machine(monkeypatch):
    monkeypatch.setenv("OMP_WAIT_POLICY", "x")
    monkeypatch.delenv("OMP_WAIT_POLICY")  # absent now, restored as absent afterwards
    monkeypatch.delenv("GENLAB_THREADS", raising=False)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    monkeypatch.delitem(sys.modules, "torch")  # as before torch is imported
    assert not threads.set_wait_policy(busy=0.1)  # quiet: OpenMP's default (threads spin)
    assert "OMP_WAIT_POLICY" not in os.environ
    assert threads.set_wait_policy(busy=2.0)  # others keep two cores busy: sleep
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    busy = threads.busy_cores(0.02)
    assert busy is None or 0 <= busy <= (os.cpu_count() or 1) + 0.01


def test_thread_count_defaults_and_overrides(monkeypatch):
    import torch

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("GENLAB_THREADS", raising=False)
    assert 1 <= threads.usable_cpus() <= (os.cpu_count() or 1)
    assert threads.default_threads() == min(torch.get_num_threads(), threads.usable_cpus())
    monkeypatch.setenv("GENLAB_THREADS", "3")
    assert threads.default_threads() == 3
    monkeypatch.setenv("GENLAB_THREADS", "off")
    assert threads.default_threads() is None
    monkeypatch.setenv("GENLAB_THREADS", "many")
    with pytest.raises(ValueError, match="GENLAB_THREADS='many'.*positive number"):
        threads.default_threads()
    monkeypatch.delenv("GENLAB_THREADS")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the user's own setting wins
    assert threads.default_threads() is None


def test_a_cpu_quota_caps_the_threads(monkeypatch):
    monkeypatch.setattr(threads, "_cgroup_quota", lambda: 1.5)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    assert threads.usable_cpus() == 2
