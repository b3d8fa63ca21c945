"""A processor that keeps state between steps says so (``stateful = True``), whatever its
class is called: a failed step's undo puts it back through get_state/set_state, and a
run that holds one rewinds by replaying."""

from __future__ import annotations

import pytest

import genlab
from genlab.models.table import TableLM
from genlab.processors.base import LogitsProcessor

TABLE = {"": {"a": 1.0}, "a": {"b": 1.0}, "a b": {"c": 1.0}, "a b c": {"d": 1.0}}


class Counting(LogitsProcessor):
    """Counts its calls: state a failed step must not keep."""

    stateful = True
    stage_name = "counting"

    def __init__(self):
        self.calls = 0

    def __call__(self, input_ids, scores):
        self.calls += 1
        return scores


def test_a_failed_step_puts_a_stateful_processor_back():
    lm = TableLM(TABLE, fallback="uniform")
    ids = lm.tokenizer("", return_tensors="pt").input_ids
    counting = Counting()
    run = genlab.start(lm, input_ids=ids, max_new_tokens=4, logits_processor=[counting])
    run.step()
    assert counting.calls == 1

    def boom(value, *, step):
        raise RuntimeError("a select hook that fails")

    with run.hooks(select=boom), pytest.raises(RuntimeError, match="fails"):
        run.step()  # the processor ran, then the step was undone
    assert counting.calls == 1
    run.step()
    assert counting.calls == 2


def test_a_stateful_processor_makes_rewind_replay():
    from genlab.run.timeline import needs_replay

    lm = TableLM(TABLE, fallback="uniform")
    ids = lm.tokenizer("", return_tensors="pt").input_ids
    plain = genlab.start(lm, input_ids=ids, max_new_tokens=4)
    held = genlab.start(lm, input_ids=ids, max_new_tokens=4, logits_processor=[Counting()])
    assert not needs_replay(plain) and needs_replay(held)
