"""A run's set-up is a pipeline: config -> inputs -> plan -> state, each stage entered once.

The calls are recorded with ``sys.setprofile`` (scripts/trace_setup.py, which also prints
the sequence) from ``generate``/``start`` down to the first forward. A call belongs to the
stage of the outermost genlab module on the stack below the Run, so the helpers a stage
calls (ids, encdec, processors, ...) count as that stage.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from helpers import tiny_gpt2

import genlab
from genlab.run.engine import start

_SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "trace_setup.py"
_spec = importlib.util.spec_from_file_location("trace_setup", _SCRIPT)
trace_setup = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(trace_setup)

#: what the Run makes before the pipeline: its hook registry, its step context, the
#: model adapted to the genlab protocol
RUN_PARTS = ["hooks", "context", "models"]
PIPELINE = ["config", "inputs", "plan", "state"]
#: after the pipeline: the hook registry bound to the adapted model's hook points inside its
#: layers (genlab.inside.taps), so that hooks named there are checked and seen by the model
BOUND = ["hooks"]
#: then run() (generate's) enters the busy-machine thread policy, threads.watching(), once
#: for the whole call: outside the step loop, before the first step
POLICY = ["threads"]


@pytest.fixture(scope="module")
def model():
    return tiny_gpt2()


def _set_up_stages(fn):
    fn()  # imports and first-call caches out of the way
    calls, _ = trace_setup.set_up(trace_setup.trace_modules(fn))
    return trace_setup.stages(calls)


def test_generate_sets_up_in_one_pass(model):
    ids = torch.tensor([[5, 6, 7]])
    mask = torch.ones_like(ids)

    def go():
        return genlab.generate(model, ids, attention_mask=mask, max_new_tokens=3)

    assert _set_up_stages(go) == RUN_PARTS + PIPELINE + BOUND + POLICY


def test_an_encoder_decoder_runs_its_encoder_within_the_inputs_stage():
    from test_encoder_decoder import tiny_t5

    t5 = tiny_t5()
    ids = torch.tensor([[5, 6, 7]])
    mask = torch.ones_like(ids)

    def go():
        return genlab.generate(t5, ids, attention_mask=mask, max_new_tokens=3)

    assert _set_up_stages(go) == RUN_PARTS + PIPELINE + BOUND + POLICY


def test_a_run_with_history_and_trace_attaches_them_after_the_pipeline(model):
    ids = torch.tensor([[5, 6, 7], [8, 9, 10]])

    def go():
        return start(
            model, ids, attention_mask=torch.ones_like(ids), num_beams=2, max_new_tokens=3,
            keep_history=True, trace=True, seed=0,
        )  # fmt: skip

    assert _set_up_stages(go) == RUN_PARTS + PIPELINE + BOUND + ["timeline", "trace"]


def test_the_first_step_ends_the_set_up(model):
    """The tracer stops at the first forward; the set-up is everything before the step."""
    ids = torch.tensor([[5, 6, 7]])
    mask = torch.ones_like(ids)
    calls = trace_setup.trace_modules(
        lambda: genlab.generate(model, ids, attention_mask=mask, max_new_tokens=2)
    )
    setup, step = trace_setup.set_up(calls)
    assert setup and step
    assert step[0][:2] == ("genlab.run.engine", "_step")
    assert all(name != "forward" for _, name, _ in calls)
