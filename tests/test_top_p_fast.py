"""Top-p and min-p without torch's full sort (genlab/processors/warpers.py): the same tokens
dropped as transformers' warpers, bit for bit, on any scores; for top-p a tie across the
boundary falls back to the sort."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import MinPLogitsWarper as ReferenceMinP
from transformers import TopPLogitsWarper as ReferenceTopP

from genlab.processors.warpers import MinPLogitsWarper, TopPLogitsWarper


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    rows=st.integers(1, 5),
    vocab=st.integers(1, 400),
    top_p=st.sampled_from([0.0, 0.05, 0.3, 0.5, 0.9, 0.95, 0.999, 1.0]),
    keep=st.integers(1, 5),
    levels=st.one_of(st.none(), st.integers(1, 6)),  # few distinct values: many ties
    masked=st.floats(0, 0.9),
    scale=st.sampled_from([0.1, 1.0, 5.0, 30.0]),
    seed=st.integers(0, 2**31 - 1),
)
def test_fast_top_p_drops_the_references_tokens(
    rows, vocab, top_p, keep, levels, masked, scale, seed
):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(rows, vocab, generator=g) * scale
    if levels is not None:
        scores = torch.randint(0, levels, (rows, vocab), generator=g).float()
    scores[torch.rand(rows, vocab, generator=g) < masked] = -float("inf")
    want = ReferenceTopP(top_p, min_tokens_to_keep=keep)(None, scores.clone())
    got = TopPLogitsWarper(top_p, min_tokens_to_keep=keep)(None, scores.clone())
    assert torch.equal(got, want)


def _sorts(monkeypatch) -> list[int]:
    """Count the calls of torch.sort (the reference's full sort with indices) from now on."""
    calls, sort = [], torch.sort
    monkeypatch.setattr(torch, "sort", lambda *a, **k: calls.append(1) or sort(*a, **k))
    return calls


def test_demo_sized_rows_take_the_fast_path_and_agree(monkeypatch):
    scores = torch.randn(16, 49152, generator=torch.Generator().manual_seed(0)) * 4
    want = ReferenceTopP(0.9)(None, scores.clone())
    sorts = _sorts(monkeypatch)
    assert torch.equal(TopPLogitsWarper(0.9)(None, scores.clone()), want)
    assert sorts == []  # no full sort: the fast path gave the answer


def test_a_tie_across_the_boundary_is_left_to_the_sort(monkeypatch):
    # probabilities 0.25 x 4: top_p 0.5 drops two of four equal tokens, chosen by sort order
    scores = torch.zeros(1, 4)
    want = ReferenceTopP(0.5)(None, scores.clone())
    sorts = _sorts(monkeypatch)
    assert torch.equal(TopPLogitsWarper(0.5)(None, scores.clone()), want)
    assert sorts == [1]


@pytest.mark.parametrize("bad", ["nan", "bfloat16"])
def test_nan_and_other_dtypes_use_the_sort(bad, monkeypatch):
    scores = torch.randn(2, 50)
    if bad == "nan":
        scores[0, 3] = float("nan")
    else:
        scores = scores.bfloat16()
    want = ReferenceTopP(0.9)(None, scores.clone())
    sorts = _sorts(monkeypatch)
    got = TopPLogitsWarper(0.9)(None, scores.clone())
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    assert sorts == [1]


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    vocab=st.integers(1, 300),
    min_p=st.sampled_from([0.0, 0.01, 0.1, 0.5, 1.0]),
    keep=st.integers(1, 3),
    levels=st.one_of(st.none(), st.integers(1, 4)),
    masked=st.floats(0, 1),
    seed=st.integers(0, 2**31 - 1),
)
def test_min_p_without_its_sort_drops_the_references_tokens(
    vocab, min_p, keep, levels, masked, seed
):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(3, vocab, generator=g) * 4
    if levels is not None:
        scores = torch.randint(0, levels, (3, vocab), generator=g).float()
    scores[torch.rand(3, vocab, generator=g) < masked] = -float("inf")  # all -inf: NaN probs
    want = ReferenceMinP(min_p, min_tokens_to_keep=keep)(None, scores.clone())
    got = MinPLogitsWarper(min_p, min_tokens_to_keep=keep)(None, scores.clone())
    assert torch.equal(got, want)
