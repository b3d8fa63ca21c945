"""Processors that repair or renormalise the whole score vector."""

from __future__ import annotations

import torch

from .base import LogitsProcessor


class InfNanRemoveLogitsProcessor(LogitsProcessor):
    """Replace NaN by 0, +inf by the dtype's largest value and -inf by its lowest, so that
    sampling cannot fail. Only for debugging broken models: it hides the problem.

    >>> p = InfNanRemoveLogitsProcessor()
    >>> p(None, torch.tensor([[float("nan"), 1.0]])).tolist()
    [[0.0, 1.0]]
    """

    stage_name = "remove_invalid_values"

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        finfo = torch.finfo(scores.dtype)
        fixed = torch.where(scores != scores, 0.0, scores)  # NaN is the only x != x
        fixed = torch.where(scores == float("inf"), finfo.max, fixed)
        return torch.where(scores == -float("inf"), finfo.min, fixed)


class LogitNormalization(LogitsProcessor):
    """Log-softmax over the vocabulary (``renormalize_logits=True``); applied last, so beam
    scores stay comparable log-probabilities after the other processors.

    >>> LogitNormalization()(None, torch.zeros(1, 2)).exp().tolist()
    [[0.5, 0.5]]
    """

    stage_name = "renormalize"

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        return scores.log_softmax(dim=-1)
