"""Warpers: the filters that only run when sampling (``do_sample=True``).

Each keeps part of the distribution and sets the rest to ``filter_value`` (-inf by
default); ``min_tokens_to_keep`` (>= 1) tokens always survive. Inputs: ``scores``
(rows, vocab); ``input_ids`` is not used. The operations, and their order, are those of
the reference, so ties and rounding come out the same.
"""

from __future__ import annotations

import numpy as np
import torch

from ..checks import check_int, check_real
from .base import LogitsProcessor


def _keep_count(min_tokens_to_keep) -> int:
    return check_int("min_tokens_to_keep", min_tokens_to_keep, minimum=1)


def _below_kth(scores: torch.Tensor, k: int) -> torch.BoolTensor:
    # (rows, vocab): True where the score is below the k-th largest of its row
    k = min(k, scores.size(-1))
    return scores < torch.topk(scores, k)[0][..., -1, None]


class TemperatureLogitsWarper(LogitsProcessor):
    """Divide the scores by ``temperature`` (< 1 sharpens, > 1 flattens).

    >>> TemperatureLogitsWarper(0.5)(None, torch.tensor([[1.0, 2.0]])).tolist()
    [[2.0, 4.0]]
    """

    stage_name = "temperature"
    is_warper = True
    shown = ("temperature",)

    def __init__(self, temperature: float):
        hint = " (for greedy decoding set do_sample=False instead of temperature=0)"
        self.temperature = check_real(
            "temperature",
            temperature,
            allowed="a float > 0" + (hint if temperature == 0 else ""),
            ok=lambda v: v > 0,
        )

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        return scores / self.temperature


class TopKLogitsWarper(LogitsProcessor):
    """Keep the ``top_k`` highest scores (ties with the k-th are kept too).

    >>> TopKLogitsWarper(2)(None, torch.tensor([[1.0, 3.0, 2.0]])).tolist()
    [[-inf, 3.0, 2.0]]
    """

    stage_name = "top_k"
    is_warper = True
    shown = ("top_k",)

    def __init__(
        self, top_k: int, filter_value: float = -float("inf"), min_tokens_to_keep: int = 1
    ):
        top_k = check_int("top_k", top_k, minimum=1)
        self.min_tokens_to_keep = min_tokens_to_keep
        self.top_k = max(top_k, min_tokens_to_keep)
        self.filter_value = filter_value

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        return scores.masked_fill(_below_kth(scores, self.top_k), self.filter_value)


class TopPLogitsWarper(LogitsProcessor):
    """Nucleus sampling: keep the most likely tokens whose probabilities add up to
    ``top_p``; computed on an ascending sort, dropping tokens whose cumulative
    probability is <= 1 - top_p.

    >>> TopPLogitsWarper(0.5)(None, torch.tensor([[0.0, 2.0, 0.0]])).tolist()
    [[-inf, 2.0, -inf]]
    """

    stage_name = "top_p"
    is_warper = True
    shown = ("top_p", "min_tokens_to_keep")

    def __init__(
        self, top_p: float, filter_value: float = -float("inf"), min_tokens_to_keep: int = 1
    ):
        self.top_p = check_real(
            "top_p", top_p, allowed="a float in [0, 1]", ok=lambda v: 0 <= v <= 1
        )
        self.min_tokens_to_keep = _keep_count(min_tokens_to_keep)
        self.filter_value = filter_value

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        drop = _top_p_drop_fast(scores, self.top_p, self.min_tokens_to_keep)
        if drop is None:  # the reference's way: a full sort with its indices
            ascending, order = torch.sort(scores, descending=False)  # (rows, vocab)
            cumulative = ascending.softmax(dim=-1).cumsum(dim=-1)
            drop_sorted = cumulative <= (1 - self.top_p)
            drop_sorted[..., -self.min_tokens_to_keep :] = 0  # the most likely always stay
            drop = drop_sorted.scatter(1, order, drop_sorted)
        return scores.masked_fill(drop, self.filter_value)


def _top_p_drop_fast(scores: torch.Tensor, top_p: float, keep: int) -> torch.BoolTensor | None:
    """The tokens top-p drops, without torch's sort (slow on a CPU: benchmarks/README.md), or None
    where this cannot be sure to drop exactly the reference's tokens.

    The dropped tokens are a prefix of the ascending order: the cumulative sum of sorted
    probabilities never decreases. The sorted *values* (numpy's vectorised sort, much faster
    than torch's sort with indices) give the same softmax and cumulative sum bit for bit,
    hence the prefix length r; the tokens are then those at or below the r-th smallest value.
    That holds unless the r-th value is tied with the (r+1)-th: which of the tied tokens the
    reference drops depends on its sort's order of ties, so that case (and NaN) is left to it.
    """
    if scores.device.type != "cpu" or scores.dtype not in (torch.float32, torch.float64):
        return None
    if scores.dim() != 2 or scores.requires_grad or bool(torch.isnan(scores).any()):
        return None
    vocab = scores.shape[-1]
    ascending = torch.from_numpy(np.sort(scores.numpy(), axis=-1))
    cumulative = ascending.softmax(dim=-1).cumsum(dim=-1)
    # prefix length per row; the last ``keep`` positions always stay
    count = (cumulative <= (1 - top_p)).sum(dim=-1).clamp_(max=max(vocab - keep, 0))
    boundary = ascending.gather(1, (count - 1).clamp_(min=0)[:, None])  # r-th smallest
    drop = (scores <= boundary) & (count > 0)[:, None]
    if not torch.equal(drop.sum(dim=-1), count):  # a tie across the boundary
        return None
    return drop


class MinPLogitsWarper(LogitsProcessor):
    """Keep tokens whose probability is at least ``min_p`` times the top token's.

    >>> MinPLogitsWarper(0.5)(None, torch.tensor([[0.0, 0.0, -5.0]])).tolist()
    [[0.0, 0.0, -inf]]
    """

    stage_name = "min_p"
    is_warper = True
    shown = ("min_p", "min_tokens_to_keep")

    def __init__(
        self, min_p: float, filter_value: float = -float("inf"), min_tokens_to_keep: int = 1
    ):
        self.min_p = check_real(
            "min_p", min_p, allowed="a float in [0, 1]", ok=lambda v: 0 <= v <= 1
        )
        self.min_tokens_to_keep = _keep_count(min_tokens_to_keep)
        self.filter_value = filter_value

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        probs = torch.softmax(scores, dim=-1)  # (rows, vocab)
        top_prob, _ = probs.max(dim=-1, keepdim=True)  # (rows, 1)
        too_unlikely = probs < self.min_p * top_prob
        if self.min_tokens_to_keep == 1:
            # the reference's sort only protects the most likely token, which is never too
            # unlikely (min_p <= 1): without the sort the same tokens go
            return scores.masked_fill(too_unlikely, self.filter_value)
        order = torch.argsort(scores, descending=True, dim=-1)
        drop_sorted = torch.gather(too_unlikely, dim=-1, index=order)
        drop_sorted[..., : self.min_tokens_to_keep] = False
        drop = drop_sorted.scatter(1, order, drop_sorted)
        return scores.masked_fill(drop, self.filter_value)


class TypicalLogitsWarper(LogitsProcessor):
    """Typical sampling: rank tokens by how close their surprisal is to the entropy, and
    keep the closest ones until their probabilities reach ``mass``.

    >>> TypicalLogitsWarper(0.5)(None, torch.tensor([[0.0, 1.0, 5.0]])).tolist()
    [[-inf, -inf, 5.0]]
    """

    stage_name = "typical_p"
    is_warper = True
    shown = ("mass", "min_tokens_to_keep")

    def __init__(
        self, mass: float = 0.9, filter_value: float = -float("inf"), min_tokens_to_keep: int = 1
    ):
        self.mass = check_real(
            "typical_p", mass, allowed="a float in (0, 1)", ok=lambda v: 0 < v < 1
        )
        self.min_tokens_to_keep = _keep_count(min_tokens_to_keep)
        self.filter_value = filter_value

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        logp = torch.nn.functional.log_softmax(scores, dim=-1)  # (rows, vocab)
        entropy = -(logp * torch.exp(logp)).nansum(-1, keepdim=True)  # (rows, 1)
        distance = torch.abs((-logp) - entropy)  # |surprisal - entropy|
        sorted_distance, order = torch.sort(distance, descending=False)
        cumulative = scores.gather(-1, order).softmax(dim=-1).cumsum(dim=-1)
        last = (cumulative < self.mass).sum(dim=1)
        last.clamp_(max=sorted_distance.shape[-1] - 1)
        drop_sorted = sorted_distance > sorted_distance.gather(1, last.view(-1, 1))
        drop_sorted[..., : self.min_tokens_to_keep] = 0
        drop = drop_sorted.scatter(1, order, drop_sorted)
        return scores.masked_fill(drop, self.filter_value)


class EpsilonLogitsWarper(LogitsProcessor):
    """Keep tokens with probability >= ``epsilon`` (and the ``min_tokens_to_keep`` best).

    >>> EpsilonLogitsWarper(0.1)(None, torch.tensor([[0.0, 0.0, -5.0]])).tolist()
    [[0.0, 0.0, -inf]]
    """

    stage_name = "epsilon_cutoff"
    is_warper = True
    shown = ("epsilon", "min_tokens_to_keep")

    def __init__(
        self, epsilon: float, filter_value: float = -float("inf"), min_tokens_to_keep: int = 1
    ):
        self.epsilon = check_real(
            "epsilon_cutoff", epsilon, allowed="a float in (0, 1)", ok=lambda v: 0 < v < 1
        )
        self.min_tokens_to_keep = _keep_count(min_tokens_to_keep)
        self.filter_value = filter_value

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        unlikely = scores.softmax(dim=-1) < self.epsilon
        drop = unlikely & _below_kth(scores, self.min_tokens_to_keep)
        return scores.masked_fill(drop, self.filter_value)


class EtaLogitsWarper(LogitsProcessor):
    """Eta sampling: keep tokens with probability >= eta, where
    ``eta = min(epsilon, sqrt(epsilon) * exp(-entropy))`` per row.

    >>> EtaLogitsWarper(0.1)(None, torch.tensor([[0.0, 0.0, -5.0]])).tolist()
    [[0.0, 0.0, -inf]]
    """

    stage_name = "eta_cutoff"
    is_warper = True
    shown = ("epsilon", "min_tokens_to_keep")

    def __init__(
        self,
        epsilon: float,
        filter_value: float = -float("inf"),
        min_tokens_to_keep: int = 1,
        device="cpu",
    ):
        value = check_real(
            "eta_cutoff", epsilon, allowed="a float in (0, 1)", ok=lambda v: 0 < v < 1
        )
        self.epsilon = torch.tensor(value, device=device)  # float32, as the reference
        self.min_tokens_to_keep = _keep_count(min_tokens_to_keep)
        self.filter_value = filter_value

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        probs = scores.softmax(dim=-1)  # (rows, vocab)
        entropy = torch.distributions.Categorical(logits=scores).entropy()  # (rows,)
        eps = self.epsilon.to(scores.device)
        eta = torch.min(eps, torch.sqrt(eps) * torch.exp(-entropy))[..., None]  # (rows, 1)
        drop = (probs < eta) & _below_kth(scores, self.min_tokens_to_keep)
        return scores.masked_fill(drop, self.filter_value)
