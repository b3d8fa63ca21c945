"""genlab.runtime.draws.multinomial: torch.multinomial's draws, bit for bit, from the same
random state, leaving the generator where torch.multinomial leaves it."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from genlab.runtime.draws import exact_race, multinomial


def both(probs, k, seed):
    torch.manual_seed(seed)
    ours = multinomial(probs, k)
    after_ours = torch.get_rng_state()
    torch.manual_seed(seed)
    theirs = torch.multinomial(probs, k)
    return ours, theirs, after_ours, torch.get_rng_state()


def test_this_torch_build_takes_the_fast_race():
    assert exact_race()


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    rows=st.integers(1, 17),
    vocab=st.integers(2, 3000),
    k=st.integers(1, 8),
    kept=st.one_of(st.none(), st.integers(1, 60)),
    seed=st.integers(0, 2**31 - 1),
    double=st.booleans(),
)
def test_same_draws_and_same_generator_state_as_torch(rows, vocab, k, kept, seed, double):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, vocab, generator=g) * 3
    if kept is not None:  # a top-k filter: most probabilities exactly 0
        floor = logits.topk(min(kept, vocab), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < floor, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if double:
        probs = probs.double()
    k = min(k, int((probs > 0).sum(-1).min()))
    ours, theirs, state_ours, state_theirs = both(probs, k, seed)
    assert torch.equal(ours, theirs)
    assert torch.equal(state_ours, state_theirs)


def test_a_demo_sized_vocabulary_of_sixteen_rows():
    probs = torch.softmax(torch.randn(16, 49152, generator=torch.Generator().manual_seed(2)), -1)
    for seed in range(5):
        ours, theirs, state_ours, state_theirs = both(probs, 1, seed)
        assert torch.equal(ours, theirs) and torch.equal(state_ours, state_theirs)


@pytest.mark.parametrize(
    "bad",
    [
        torch.tensor([[0.5, float("nan")]]),
        torch.tensor([[0.5, float("inf")]]),
        torch.tensor([[0.5, -0.1]]),
        torch.tensor([[0.0, 0.0], [0.3, 0.7]]),
    ],
    ids=["nan", "inf", "negative", "zero-row"],
)
def test_invalid_probabilities_raise_torchs_own_errors(bad):
    with pytest.raises(RuntimeError) as theirs:
        torch.multinomial(bad, 1)
    with pytest.raises(RuntimeError) as ours:
        multinomial(bad, 1)
    assert str(ours.value) == str(theirs.value)


def test_other_dtypes_use_torch_multinomial():
    probs = torch.softmax(torch.randn(2, 50), -1).bfloat16()
    ours, theirs, state_ours, state_theirs = both(probs, 1, 4)
    assert torch.equal(ours, theirs) and torch.equal(state_ours, state_theirs)
