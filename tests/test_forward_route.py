"""How a run's steps call the model is chosen once, with the plan (genlab/run/plan.py
``forward_route``): the step asks only whether hooks sit inside the layers."""

from __future__ import annotations

import pytest

import genlab
from genlab.models.table import TableLM
from genlab.runtime.forward_cache import ForwardCache

TABLE = {"": {"a": 1.0}, "a": {"b": 1.0}, "a b": {"c": 1.0}}


class Counted(ForwardCache):
    """A forward cache that counts the steps routed through it."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, *args, **kwargs):
        self.calls += 1
        return super().forward(*args, **kwargs)


@pytest.fixture
def lm():
    return TableLM(TABLE, fallback="uniform")


def start(lm, **kwargs):
    ids = lm.tokenizer("", return_tensors="pt").input_ids
    return genlab.start(lm, input_ids=ids, max_new_tokens=3, **kwargs)


def test_a_run_with_a_forward_cache_routes_its_steps_through_it(lm):
    kept = Counted()
    run = start(lm, forward_cache=kept)
    assert run.state.plan.route == "cached"
    run.run()
    assert kept.calls == 3
    assert start(lm).state.plan.route == "eager"


def test_a_config_edit_rechooses_the_route_at_the_next_step(lm):
    kept = Counted()
    run = start(lm, forward_cache=kept)
    run.step()
    run.config.output_hidden_states = True  # the cache keeps logits only: the eager pass
    run.config.return_dict_in_generate = True
    run.step()
    assert run.state.plan.route == "eager" and kept.calls == 1
    run.config.output_hidden_states = False
    run.step()
    assert run.state.plan.route == "cached" and kept.calls == 2
