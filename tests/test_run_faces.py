"""The Run's public faces (issue 39): every start rewinds, run.run() and run.result()
return the output, reading the output changes nothing, one field says how a run ended,
the views are grouped, and the timeline replays through the public step."""

from __future__ import annotations

import pytest
import torch

import genlab
from genlab.run.context import RunView, StepContext

PROMPT = torch.tensor([[1, 5, 17, 33, 8]])


def test_every_start_keeps_history_by_default_so_rewind_works(hf_llama, demo):
    run = genlab.start(hf_llama, PROMPT, max_new_tokens=5)
    first = run.step()
    run.step()
    assert run.rewind(1).step_index == 1 and run.timeline is not None
    assert int(run.sequences[0, -1]) == int(first.tokens[0])
    assert demo.start("Hi", max_new_tokens=3).timeline is not None
    # a generation only runs forward: it keeps none
    assert genlab.generate(hf_llama, PROMPT, max_new_tokens=3).shape[1] == PROMPT.shape[1] + 3


def test_run_returns_the_output_so_far_and_at_the_end(hf_llama):
    run = genlab.start(hf_llama, PROMPT, max_new_tokens=6)
    part = run.run(max_steps=2)
    assert isinstance(part, torch.Tensor) and part.shape[1] == PROMPT.shape[1] + 2
    end = run.run()
    assert torch.equal(end, genlab.generate(hf_llama, PROMPT, max_new_tokens=6))


def test_reading_the_output_fires_no_hook_and_finish_fires_once_at_the_end(hf_llama):
    run = genlab.start(hf_llama, PROMPT, max_new_tokens=3)
    seen = []
    run.add_hook("finish", lambda out, step: seen.append(step))
    run.step()
    for _ in range(3):
        run.output  # noqa: B018 - reading it must change nothing
    assert seen == []
    run.run()
    assert seen == [3]  # fired where the run finished
    run.output, run.output, run.result()  # noqa: B018
    assert seen == [3]


def test_stop_is_the_one_way_a_run_says_it_was_interrupted(hf_llama):
    run = genlab.start(hf_llama, PROMPT, max_new_tokens=5)
    run.step()
    run.stop()
    assert run.finished and run.finished_by == "interrupted"
    run.rewind(1)
    assert not run.finished and run.finished_by is None


def test_result_is_the_runs_own(demo):
    run = demo.start("Once upon a time", max_new_tokens=4)
    run.run(max_steps=2)
    res = run.result()
    assert res.run is run and res.generated_ids.shape == (1, 2) and res.text == run.text


def test_views_are_grouped_and_the_run_shows_what_a_user_needs(hf_llama):
    run = genlab.start(hf_llama, PROMPT, max_new_tokens=4)
    views = [n for n in dir(RunView) if not n.startswith("_")]
    for name in views:  # a name the run shows too reads the same part: one road
        if hasattr(run, name):
            assert getattr(run, name) is getattr(run.views, name), name
    # the strategies' step context is that view plus a step's verbs, not a second view
    assert issubclass(StepContext, RunView) and not hasattr(run.views, "forward")
    assert (
        run.views.kv_cache is run.state.kv_cache and run.views.gen_config is run.state.plan.config
    )
    assert run.views.model is run.given.model


@pytest.mark.parametrize("cfg", [{"num_beams": 2}, {"do_sample": True, "seed": 3}])
def test_the_timeline_replays_through_the_public_step(hf_llama, cfg, monkeypatch):
    """Beam search rewinds by replaying: each replayed step is run.step(record=False),
    with the run's own hooks set aside (they do not see the replay)."""
    run = genlab.start(hf_llama, PROMPT, max_new_tokens=6, **cfg)
    run.run(max_steps=4)
    before = run.sequences.clone()
    calls = []
    run.add_hook("logits", lambda x, step: calls.append(step))
    real = type(run).step

    def step(self, *, record=True):
        calls.append(("step", record))
        return real(self, record=record)

    monkeypatch.setattr(type(run), "step", step)
    run.rewind(2)
    if cfg.get("num_beams"):
        assert calls == [("step", False)] * 2  # replayed steps 0 and 1, no hook fired
    else:
        assert calls == []  # restored, not replayed
    assert len(run.history) == 2
    run.run(max_steps=2)
    assert torch.equal(run.sequences, before)
