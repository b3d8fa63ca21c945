"""Thread defaults for shared machines (genlab/runtime/threads.py): while other processes keep the
CPUs busy, OpenMP threads are parked (libgomp's short, throttled spin) as a run steps; the
thread count is capped by the CPUs the process may use; a user's own settings are kept."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from time import sleep

import pytest
import torch

from genlab.runtime import threads

SHOW = "import os; print(os.environ.get('OMP_WAIT_POLICY'), os.environ.get('OMP_NUM_THREADS'))"
PARKED_NAME = "genlab-omp-park"


def environment_after(code: str, **env: str) -> str:
    names = ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "GENLAB_THREADS")
    clean = {k: v for k, v in os.environ.items() if k not in names}
    out = subprocess.run(
        [sys.executable, "-c", f"{code}; {SHOW}"], env={**clean, **env}, capture_output=True,
        text=True, check=True,
    )  # fmt: skip
    return out.stdout.strip()


def test_importing_genlab_in_either_order_leaves_the_environment_alone():
    assert environment_after("import torch, genlab") == "None None"
    assert environment_after("import genlab, torch") == "None None"
    assert environment_after("import genlab", OMP_WAIT_POLICY="ACTIVE") == "ACTIVE None"
    assert environment_after("import genlab", OMP_NUM_THREADS="1") == "None 1"


def test_importing_genlab_reads_no_machine_state_and_sets_no_variable():
    code = (
        "import os, genlab; from genlab.runtime import threads; "
        "print(threads._adapter.reading, os.environ.get('TOKENIZERS_PARALLELISM'))"
    )
    clean = {k: v for k, v in os.environ.items() if k != "TOKENIZERS_PARALLELISM"}
    out = subprocess.run([sys.executable, "-c", code], env=clean, capture_output=True, text=True)
    assert out.stdout.split() == ["None", "None"], out.stderr


class Machine:
    """Scripted /proc/stat: ``others`` cores busy in other processes, this one idle."""

    def __init__(self):
        self.t, self.busy, self.others, self.reads = 100.0, 0.0, 0.0, 0

    def reading(self):
        self.reads += 1
        return self.t, self.busy, 0.0

    def wait(self, seconds: float) -> None:
        self.t += seconds
        self.busy += self.others * seconds


@pytest.fixture
def machine(monkeypatch):
    for name in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "GENLAB_THREADS"):
        monkeypatch.delenv(name, raising=False)
    m = Machine()
    monkeypatch.setattr(threads, "cpu_reading", m.reading)
    monkeypatch.setattr(threads.time, "monotonic", lambda: m.t)
    monkeypatch.setattr(threads.time, "sleep", m.wait)
    monkeypatch.setattr(threads, "_adapter", threads._Adapter())
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield m
    threads._adapter.unpark()
    torch.set_num_threads(before)


def parked_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == PARKED_NAME]


def os_threads() -> int:
    return len(os.listdir("/proc/self/task"))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="libgomp: torch's Linux wheels")
def test_a_busy_machine_parks_an_openmp_team_and_a_quiet_one_releases_it(machine):
    threads.take_reading()
    machine.others = 1.8  # two CPU-bound processes on two cores
    machine.wait(2.5)
    tasks = os_threads()
    threads.adapt()
    state = threads.status()
    assert state["parked"] and state["others_busy"] == pytest.approx(1.8)
    assert "parked" in state["why"]
    # a Python thread and its OpenMP team: libgomp now manages more threads than CPUs
    size = state["parked_threads"]
    assert size >= 2 and os_threads() - tasks == size
    assert torch.get_num_threads() == 2  # the count is never changed
    machine.wait(0.1)
    threads.adapt()  # within the window: no new look
    assert machine.reads == 2
    machine.others = 0.1
    machine.wait(2.5)
    threads.adapt()
    after = threads.status()
    assert not after["parked"] and after["parked_threads"] == 0 and not parked_threads()
    assert "OpenMP's default" in threads.status()["why"]


def test_a_stale_look_is_replaced_by_a_fresh_sample(machine):
    threads.take_reading()
    machine.others = 1.5
    machine.wait(threads.STALE + 60)  # an hour-old look would average a new load away
    machine.others = 0.0
    threads.adapt()
    assert threads.status()["others_busy"] == 0.0  # from the sample, not the long window
    assert machine.reads == 3


def test_the_users_own_settings_turn_parking_off_and_keep_the_count(machine, monkeypatch):
    machine.others = 2.0
    for name, value in (
        ("OMP_WAIT_POLICY", "PASSIVE"), ("GOMP_SPINCOUNT", "1000"), ("GENLAB_THREADS", "off"),
    ):  # fmt: skip
        monkeypatch.setenv(name, value)
        machine.wait(2.5)
        threads.adapt()
        assert not threads.status()["parked"], name
        assert name in threads.status()["why"]
        monkeypatch.delenv(name)
    torch.set_num_threads(1)  # the user's: one thread has nothing to wait for
    machine.wait(2.5)
    threads.adapt()
    assert torch.get_num_threads() == 1 and not threads.status()["parked"]


def test_without_proc_stat_nothing_is_parked_and_steps_stop_looking(machine, monkeypatch):
    machine.reads = 0
    monkeypatch.setattr(threads, "cpu_reading", lambda: machine.reading() and None)
    threads.adapt()
    machine.wait(2.5)
    threads.adapt()
    assert machine.reads == 1 and not threads.status()["parked"]
    assert "cannot be read" in threads.status()["why"]


def test_others_busy_leaves_this_process_out():
    assert threads.others_busy((0.0, 10.0, 5.0), (2.0, 14.0, 6.0)) == pytest.approx(1.5)
    assert threads.others_busy((0.0, 10.0, 5.0), (1.0, 11.0, 6.5)) == 0.0
    assert threads.others_busy(None, (1.0, 1.0, 1.0)) is None
    busy = threads.busy_cores(0.2)  # at least 0: ticks of 10 ms, this process left out
    assert busy is None or 0 <= busy <= (os.cpu_count() or 1) + 0.5


def test_the_window_grows_with_the_cpus_that_add_tick_noise(monkeypatch):
    for cpus, seconds in ((1, 0.25), (2, 0.25), (16, 2.0), (64, 2.0)):
        monkeypatch.setattr(threads.os, "cpu_count", lambda cpus=cpus: cpus)
        assert threads.window() == seconds


def test_thread_count_defaults_and_overrides(monkeypatch):
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


def watchers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == threads.WATCH_NAME]


def test_the_step_loop_never_looks_at_the_machine_a_helper_thread_does(monkeypatch):
    """Machine tuning is out of the step: the loop's thread never calls adapt(); while a run
    computes, the watch thread does, and it ends when the outermost call returns."""
    import genlab
    from genlab.models.table import TableLM

    calls = []
    monkeypatch.setattr(threads, "adapt", lambda: calls.append(threading.current_thread().name))
    monkeypatch.setattr(threads, "window", lambda: 0.001)  # look often: the run is short
    lm = TableLM({"": {"a": 1.0}, "a": {"b": 1.0}, "a b": {"c": 1.0}}, fallback="uniform")
    ids = lm.tokenizer("", return_tensors="pt").input_ids
    run = genlab.start(lm, input_ids=ids, max_new_tokens=3)
    seen = []
    # each step outlasts a few windows, so the helper looks while the run computes
    run.add_hook("step_end", lambda value, *, step: (seen.append(len(watchers())), sleep(0.01)))
    run.step()
    run.rewind(1)
    run.run()
    assert seen and all(n == 1 for n in seen)  # one watch thread, nested calls share it
    assert calls and set(calls) == {threads.WATCH_NAME}
    for t in watchers():
        t.join(5.0)
    assert not watchers()


def test_watching_nests_and_ends_with_the_outermost(monkeypatch):
    monkeypatch.setattr(threads, "adapt", lambda: None)
    with threads.watching():
        with threads.watching():
            assert len(watchers()) == 1
        assert len(watchers()) == 1
    for t in watchers():
        t.join(5.0)
    assert not watchers()
