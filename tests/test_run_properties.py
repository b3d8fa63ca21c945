"""Property-based: random sequences of Run operations keep the run equal to a replay.

Two runs get the same random operations (step, force, rewind, fork, live config edits);
one of them also gets steps whose hooks raise. Because a failed step changes nothing, the
two must stay identical: same tokens, same scores, same forced queue.
"""

from __future__ import annotations

import pytest
import torch
from helpers import tiny_llama
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import genlab
from genlab.models.architectures import build_decoder
from genlab.processors import stage_name_of

PROMPT = torch.tensor([[1, 5, 17, 33, 8]])

OPS = st.one_of(
    st.tuples(st.just("step")),
    st.tuples(st.just("force"), st.lists(st.integers(3, 95), min_size=1, max_size=3)),
    st.tuples(st.just("rewind"), st.integers(0, 3)),
    st.tuples(st.just("fork")),
    st.tuples(st.just("top_k"), st.sampled_from([0, 5, 20])),
    st.tuples(st.just("temperature"), st.sampled_from([0.7, 1.0, 1.3])),
    st.tuples(
        st.just("fail"),
        st.sampled_from(["logits", "scores", "select", "processor.top_k"]),
    ),
)


@pytest.fixture(scope="module")
def model():
    hf = tiny_llama(0)
    return build_decoder(hf.config.to_dict(), hf.state_dict())


def _start(model):
    return genlab.start(
        model,
        PROMPT,
        do_sample=True,
        top_k=20,
        max_new_tokens=12,
        seed=7,
        keep_history=True,
        return_dict_in_generate=True,
        output_scores=True,
    )


def _apply(run, op, with_failures: bool):
    kind = op[0]
    if kind == "step":
        run.step()
    elif kind == "force":
        run.force(op[1])
    elif kind == "rewind":
        run.rewind(min(op[1], run.step_index))
    elif kind == "fork":
        run = run.fork()
    elif kind in ("top_k", "temperature"):
        run.set(**{kind: op[1]})
    elif kind == "fail" and with_failures and not run.finished and _fires(run, op[1]):

        def boom(value, step):
            raise RuntimeError("hook failure")

        with pytest.raises(RuntimeError, match="hook failure"), run.hooks(**{op[1]: boom}):
            run.step()
    return run


def _fires(run, point: str) -> bool:
    """A processor hook fires only when that processor is active (top_k=0 removes it)."""
    if not point.startswith("processor."):
        return True
    return any(stage_name_of(p) == point.split(".", 1)[1] for p in run.views.processors)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(ops=st.lists(OPS, max_size=10))
def test_failed_steps_leave_no_trace_in_any_sequence_of_operations(model, ops):
    a, b = _start(model), _start(model)
    for op in ops:
        a = _apply(a, op, with_failures=True)
        b = _apply(b, op, with_failures=False)
    assert torch.equal(a.sequences, b.sequences)
    assert a.pending_forced == b.pending_forced and a.step_index == b.step_index
    sa, sb = a.recorded_scores(), b.recorded_scores()
    assert len(sa) == len(sb) and all(torch.equal(x, y) for x, y in zip(sa, sb, strict=True))
    # and both go on identically
    for _ in range(2):
        ra, rb = a.step(), b.step()
        assert (ra is None) == (rb is None)
        if ra is not None:
            assert torch.equal(ra.tokens, rb.tokens)
