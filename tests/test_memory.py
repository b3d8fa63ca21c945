"""A fresh process that loads the demo and generates stays within what Binder can hold
(issue 44): 1 GiB in float32, 0.5 GiB with quantization="int4" or "int8" (int8 quantizes
each matrix from its floats as it is built: holding all the float32 matrices first made its
peak 867 MiB, 452 now). Resident memory is a
function of the code and the machine's libraries, not of timing: the peak is the process's
own high-water mark (VmHWM; ru_maxrss would keep the parent's, which Linux carries across
exec)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

CHILD = r"""
import json, sys, genlab
lm = genlab.load("demo", quantization=sys.argv[1] or None)
text = lm.generate("Once upon a time", max_new_tokens=20).text
hwm = next(l for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({"peak_mib": int(hwm.split()[1]) / 1024, "pandas": "pandas" in sys.modules}))
"""  # fmt: skip


@pytest.mark.slow  # loads the demo, in a child process
@pytest.mark.parametrize(("quantization", "limit_mib"), [("", 1024), ("int4", 512), ("int8", 512)])
def test_a_fresh_load_and_generate_fits(quantization, limit_mib):
    out = subprocess.run(
        [sys.executable, "-c", CHILD, quantization],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["peak_mib"] <= limit_mib, got
    assert not got["pandas"]  # tables import pandas when first made, not a plain generate


@pytest.mark.slow  # loads the demo
def test_a_one_row_generate_gives_freed_heap_back(demo, monkeypatch):
    """lm.generate trims glibc's heap after every run, one row included: lesson 13's one-row
    runs left 268 MiB of freed memory resident before (issue 44)."""
    import genlab.runtime.quant as quant

    calls = []
    monkeypatch.setattr(quant, "release_freed_memory", lambda: calls.append(1))
    demo.generate("Once upon a time", max_new_tokens=2)
    assert calls == [1]


@pytest.mark.slow  # loads the demo
def test_a_finished_run_is_freed_without_the_cyclic_collector(demo):
    """A run and its context (and its views) made a reference cycle: every finished run's
    KV cache and recorded scores stayed until Python's cyclic collector happened to run,
    320 MiB of lesson 22's three 32-row runs (issue 44). Now reference counts free it."""
    import gc
    import weakref

    gc.disable()
    try:
        res = demo.generate(
            "Once upon a time", max_new_tokens=3, do_sample=True, num_return_sequences=2, seed=0
        )
        run, view = weakref.ref(res.run), res.run.views
        del res
        assert run() is not None and view.batch_size == 1  # a view keeps its run
        del view
        assert run() is None
    finally:
        gc.enable()
