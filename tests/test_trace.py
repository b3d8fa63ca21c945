"""The Tracer's stage summaries (genlab/run/trace.py)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from genlab.run.engine import Run


@pytest.mark.parametrize(
    "settings", [dict(), dict(do_sample=True, top_k=5, temperature=0.7)], ids=["greedy", "sample"]
)
def test_a_stage_that_changed_nothing_is_summarised_once_and_recorded_as_before(hf_llama, settings):
    from genlab.run.trace import Tracer

    def traced(copy_stages):
        original = Tracer.on_stage

        def on_stage(self, step, name, scores):  # a copy defeats the reuse of the summary
            original(self, step, name, scores.clone() if copy_stages else scores)

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(Tracer, "on_stage", on_stage)
            run = Run(hf_llama, input_ids=torch.tensor([[5, 17, 33]]), max_new_tokens=4,
                      trace=True, seed=3, **settings)  # fmt: skip
            run.run()
        return run.tracer.trace

    reused, computed = traced(False), traced(True)
    for a, b in zip(reused.records, computed.records, strict=True):
        assert [s.name for s in a.stages] == [s.name for s in b.stages]
        assert a.stages[-1].name == "final"
        for x, y in zip(a.stages, b.stages, strict=True):
            for field in dataclasses.fields(x):
                u, v = getattr(x, field.name), getattr(y, field.name)
                assert torch.equal(u, v) if isinstance(u, torch.Tensor) else u == v, field.name


def test_the_trace_keeps_depth_tokens_and_refuses_a_depth_below_one(hf_llama):
    import genlab
    from genlab.models.architectures import build_decoder
    from genlab.run.trace import Tracer

    model = build_decoder(hf_llama.config.to_dict(), hf_llama.state_dict())
    run = genlab.start(model, torch.tensor([[1, 5, 17]]), max_new_tokens=2, trace={"depth": 3})
    run.run()
    assert run.tracer.depth == 3
    assert run.tracer.steps[0].stages[-1].top_ids.shape[1] == 3
    with pytest.raises(ValueError, match="depth"):
        Tracer(run, depth=0)
