"""SynthID text (Dathathri et al. 2024): g-values, the tournament processor, mean scores.

Every (n-1)-gram context and candidate token get one pseudo-random bit (a *g-value*) per
key; the distribution is reshaped by a tournament over the keys so that tokens with g = 1
win more often. Detection averages the g-values of a text (mean / weighted mean score).
Same numbers as transformers 4.56.2's ``SynthIDTextWatermarkLogitsProcessor``.

>>> synthid_gvalues(torch.tensor([[1, 2, 3, 4]]), {"ngram_len": 2, "keys": [5, 6]}).shape
torch.Size([1, 3, 2])
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import ClassVar

import torch

from ..processors.base import LogitsProcessor
from .params import (
    _SID,
    SYNTHID_LCG_INCREMENT,
    SYNTHID_LCG_MULTIPLIER,
    SynthIDParams,
    as_token_ids,
    check_ids_in_vocab,
    check_vocab_size,
    device_key,
    synthid_params,
)


def synthid_hash(current: torch.LongTensor, data: torch.LongTensor) -> torch.LongTensor:
    """Fold ``data``'s last axis into ``current`` with an int64 LCG step per element.

    ``h <- (h + x) * 6364136223846793005 + 1`` (wrapping), so hashing ``a + b`` equals
    hashing ``b`` starting from the hash of ``a``. current: (...); data: (..., n) -> (...).
    """
    for i in range(data.shape[-1]):
        current = (current + data[..., i]) * SYNTHID_LCG_MULTIPLIER + SYNTHID_LCG_INCREMENT
    return current


@functools.lru_cache(maxsize=8)
def _synthid_sampling_table(size: int, seed: int, device: str) -> torch.Tensor:
    gen = torch.Generator(device=device).manual_seed(seed)
    return torch.randint(low=0, high=2, size=(size,), generator=gen, device=device)


def synthid_sampling_table(config, *, device="cpu") -> torch.LongTensor:
    """(sampling_table_size,) random 0/1 table hashes are mapped into (seeded, fixed)."""
    p = synthid_params(config)
    return _synthid_sampling_table(p.sampling_table_size, p.sampling_table_seed, device_key(device))


def _keyed(hashes: torch.LongTensor, keys: torch.LongTensor) -> torch.LongTensor:
    # hashes (...,) -> (..., depth): one more hash step with each watermarking key
    return synthid_hash(hashes[..., None], keys[:, None].to(hashes.device))


def _gvalues_from_hashes(hashes: torch.LongTensor, table: torch.LongTensor) -> torch.LongTensor:
    # hashes (..., depth) -> g-values (..., depth) in {0, 1}
    return table[hashes % table.numel()]


def synthid_gvalues(input_ids, config, *, device="cpu") -> torch.LongTensor:
    """g-values of every n-gram of a text, one per key.

    input_ids: (batch, len) -> (batch, len - ngram_len + 1, depth) in {0, 1}; entry i
    belongs to the token at position ``i + ngram_len - 1`` (scored with its n-1 previous).

    >>> synthid_gvalues(torch.tensor([[1, 2, 3, 4]]), {"ngram_len": 2, "keys": [5, 6]}).shape
    torch.Size([1, 3, 2])
    """
    p = synthid_params(config)
    ids = as_token_ids(input_ids, "input_ids", 2).to(device)
    ngrams = ids.unfold(1, p.ngram_len, 1)  # (batch, num_ngrams, ngram_len)
    ones = torch.ones(ngrams.shape[:2], dtype=torch.long, device=device)
    hashes = _keyed(synthid_hash(ones, ngrams), torch.tensor(p.keys, device=device))
    return _gvalues_from_hashes(hashes, synthid_sampling_table(p, device=device))


def synthid_context_repetition_mask(input_ids, config, *, device="cpu") -> torch.BoolTensor:
    """True where an n-gram's (n-1)-token context was not seen in the recent history.

    Mirrors the generation-time rule: the last ``context_history_size`` context hashes are
    remembered (starting from zeros); a repeated context is not watermarked, so it is not
    scored. input_ids: (batch, len) -> (batch, len - ngram_len + 1).
    """
    p = synthid_params(config)
    ids = as_token_ids(input_ids, "input_ids", 2).to(device)
    batch = ids.shape[0]
    contexts = ids[:, :-1].unfold(1, p.ngram_len - 1, 1)  # (batch, num, ngram_len - 1)
    history = torch.zeros(batch, p.context_history_size, dtype=torch.long, device=device)
    repeated = []
    for i in range(contexts.shape[1]):
        ones = torch.ones(batch, dtype=torch.long, device=device)
        h = synthid_hash(ones, contexts[:, i])[:, None]  # (batch, 1)
        repeated.append((history == h).any(dim=1, keepdim=True))
        history = torch.cat([h, history], dim=1)[:, :-1]
    if not repeated:
        return torch.zeros(batch, 0, dtype=torch.bool, device=device)
    return ~torch.cat(repeated, dim=1)


def synthid_eos_mask(input_ids, eos_token_id: int) -> torch.BoolTensor:
    """(batch, len) True before the first ``eos_token_id`` of each row, False from it on."""
    ids = as_token_ids(input_ids, "input_ids", 2)
    seen = torch.cumsum((ids == eos_token_id).long(), dim=1)
    return seen == 0


def expected_mean_g_value(vocab_size: int, coinflip_prob: float = 0.5) -> float:
    """Mean g-value of one-layer watermarked text under a uniform model (theory)."""
    return coinflip_prob + coinflip_prob * (1 - coinflip_prob) * (1 - 1 / vocab_size)


@dataclass
class SynthIDState:
    """What SynthID carries between steps.

    context: (batch, ngram_len - 1) last tokens (zeros before any step);
    context_history: (batch, context_history_size) recent context hashes, newest first;
    num_calls: steps seen so far.
    """

    context: torch.LongTensor
    context_history: torch.LongTensor
    num_calls: int = 0

    @classmethod
    def empty(cls, batch_size: int, params: SynthIDParams, device) -> SynthIDState:
        return cls(
            context=torch.zeros(batch_size, params.ngram_len - 1, dtype=torch.long, device=device),
            context_history=torch.zeros(
                batch_size, params.context_history_size, dtype=torch.long, device=device
            ),
        )

    def copy(self) -> SynthIDState:
        return SynthIDState(self.context.clone(), self.context_history.clone(), self.num_calls)


def synthid_tournament(scores: torch.FloatTensor, g_values: torch.LongTensor) -> torch.Tensor:
    """Reshape a distribution with g-values, one tournament layer per key.

    scores: (batch, vocab) logits; g_values: (batch, vocab, depth). Per layer,
    ``p <- p * (1 + g - sum(g * p))``; returns log p with non-finite entries set to the
    dtype's lowest value. (batch, vocab).
    """
    return _tournament(scores, lambda layer: g_values[:, :, layer], g_values.shape[2])


def _tournament(scores: torch.FloatTensor, g_of_layer, depth: int) -> torch.Tensor:
    """:func:`synthid_tournament` with each layer's g-values (batch, vocab) from
    ``g_of_layer(layer)``: the same numbers, without holding every layer's at once."""
    probs = torch.softmax(scores, dim=1)
    for layer in range(depth):
        g = g_of_layer(layer)  # (batch, vocab)
        g_mass = (g * probs).sum(dim=1, keepdim=True)  # (batch, 1)
        probs = probs * (1 + g - g_mass)
    log_probs = torch.log(probs)
    lowest = torch.finfo(log_probs.dtype).min
    return torch.where(torch.isfinite(log_probs), log_probs, lowest)


class SynthIDTextWatermarkLogitsProcessor(LogitsProcessor):
    """SynthID text watermark (transformers' processor of that name, same numbers).

    Stateful: the first call starts from a zero context; each later call appends the last
    token of ``input_ids``. A context seen within the last ``context_history_size`` steps
    is left unwatermarked. Call :meth:`reset` before reusing it for a new generation.
    ``keys`` may be any sequence of ints (a list, a tuple, a numpy array, a tensor), as the
    reference takes. The settings are checked against :data:`genlab.config.SYNTHID_FIELDS`,
    as ``SynthIDTextWatermarkingConfig.validate()`` checks them.

    >>> proc = SynthIDTextWatermarkLogitsProcessor(3, [7, 9], 64, 0, 16, "cpu")
    >>> proc(torch.tensor([[1, 2]]), torch.zeros(1, 5)).shape
    torch.Size([1, 5])
    """

    stateful = True  # its context history and mask state advance every step

    # its stage label in hook points, traces and plots (watermarking_config turns it on)
    stage_name: ClassVar[str] = "synthid_watermark"
    shown: ClassVar[tuple[str, ...]] = ("ngram_len", "context_history_size")

    def __init__(
        self,
        ngram_len: int,
        keys: list[int],
        sampling_table_size: int,
        sampling_table_seed: int,
        context_history_size: int,
        device,
        skip_first_ngram_calls: bool = _SID["skip_first_ngram_calls"].default,
        debug_mode: bool = _SID["debug_mode"].default,
    ):
        self.params = SynthIDParams(
            ngram_len=ngram_len,
            keys=keys,
            context_history_size=context_history_size,
            sampling_table_seed=sampling_table_seed,
            sampling_table_size=sampling_table_size,
            skip_first_ngram_calls=skip_first_ngram_calls,
            debug_mode=debug_mode,
        )
        self.ngram_len = ngram_len
        self.device = device
        self.keys = torch.tensor(self.params.keys, device=device)  # (depth,)
        self.sampling_table = synthid_sampling_table(self.params, device=device)
        self.context_history_size = context_history_size
        self.skip_first_ngram_calls = skip_first_ngram_calls
        self.debug_mode = debug_mode
        self.state: SynthIDState | None = None

    def __repr__(self):
        p = self.params
        return (
            f"SynthIDTextWatermarkLogitsProcessor(ngram_len={p.ngram_len}, depth={p.depth}, "
            f"sampling_table_size={p.sampling_table_size})"
        )

    def reset(self) -> None:
        """Forget the context and history (a new generation starts from zeros)."""
        self.state = None

    def _advance(self, input_ids: torch.LongTensor, batch_size: int) -> SynthIDState:
        if self.state is None:
            self.state = SynthIDState.empty(batch_size, self.params, self.device)
        else:
            last = input_ids[:, -1:].to(self.state.context.device)
            self.state.context = torch.cat([self.state.context, last], dim=1)[:, 1:]
        self.state.num_calls += 1
        return self.state

    def _candidate_hashes(self, context: torch.LongTensor, vocab_size: int):
        """(hash of context + each next token (batch, vocab), context hash (batch,))."""
        batch = context.shape[0]
        ones = torch.ones(batch, dtype=torch.long, device=self.device)
        context_hash = synthid_hash(ones, context)  # (batch,)
        candidates = torch.arange(vocab_size, device=self.device)  # (vocab,)
        with_token = synthid_hash(context_hash[:, None], candidates[None, :, None])  # (b, v)
        return with_token, context_hash

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor):
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must be (batch, len), got {tuple(input_ids.shape)}")
        batch, vocab = scores.shape
        if self.debug_mode:
            scores = torch.ones_like(scores)
        state = self._advance(input_ids, batch)
        if self.skip_first_ngram_calls and state.num_calls < self.ngram_len:
            return scores
        # one key's g-values at a time: all of them are (batch, vocab, depth) int64, 94 MB
        # for 8 rows of 49,152 tokens and 30 keys, several times over while hashing
        # (benchmarks/README.md, issue 44); the same integers, the same tournament
        with_token, context_hash = self._candidate_hashes(state.context, vocab)
        keys, table = self.keys, self.sampling_table

        def g_of_layer(layer: int) -> torch.LongTensor:
            return _gvalues_from_hashes(_keyed(with_token, keys[layer : layer + 1]), table)[..., 0]

        watermarked = _tournament(scores, g_of_layer, len(keys))  # (batch, vocab)
        context_hash = context_hash[:, None]  # (batch, 1)
        repeated = (state.context_history == context_hash).any(dim=1, keepdim=True)
        state.context_history = torch.cat([context_hash, state.context_history], dim=1)[:, :-1]
        return torch.where(repeated, scores, watermarked)

    # detector-side helpers under the reference's method names
    def compute_g_values(self, input_ids: torch.LongTensor) -> torch.LongTensor:
        """(batch, len) -> (batch, len - ngram_len + 1, depth); see :func:`synthid_gvalues`."""
        return synthid_gvalues(input_ids, self.params, device=self.device)

    def compute_context_repetition_mask(self, input_ids: torch.LongTensor) -> torch.BoolTensor:
        """See :func:`synthid_context_repetition_mask`."""
        return synthid_context_repetition_mask(input_ids, self.params, device=self.device)

    def compute_eos_token_mask(self, input_ids, eos_token_id: int) -> torch.BoolTensor:
        """See :func:`synthid_eos_mask`."""
        return synthid_eos_mask(input_ids, eos_token_id)

    def expected_mean_g_value(self, vocab_size: int, coinflip_prob: float = 0.5) -> float:
        """See :func:`expected_mean_g_value`."""
        return expected_mean_g_value(vocab_size, coinflip_prob)


def _default_synthid_mask(ids, params, eos_token_id, device):
    mask = synthid_context_repetition_mask(ids, params, device=device)
    if eos_token_id is not None:
        mask = mask & synthid_eos_mask(ids, eos_token_id)[:, params.ngram_len - 1 :].to(device)
    return mask


def synthid_scores(
    input_ids,
    config,
    *,
    vocab_size: int,
    mask=None,
    eos_token_id: int | None = None,
    weights=None,
    device="cpu",
) -> dict[str, torch.Tensor]:
    """Mean and weighted-mean SynthID scores (no trained detector needed).

    input_ids: (batch, len) or (len,). mask: (batch, len - ngram_len + 1), which n-grams
    count; by default those whose context is not a repeat (and before the first EOS when
    ``eos_token_id`` is given). ``mean`` is the average unmasked g-value; ``weighted_mean``
    weighs layer l with ``weights`` (default linearly 10 -> 1), normalised to sum to the
    depth. Watermarked text scores above 0.5, unwatermarked text near 0.5.
    Returns ``{"mean": (batch,), "weighted_mean": (batch,), "num_scored": (batch,)}``.

    >>> out = synthid_scores([1, 2, 3, 4, 5], {"ngram_len": 2, "keys": [3, 4]}, vocab_size=9)
    >>> sorted(out)
    ['mean', 'num_scored', 'weighted_mean']
    """
    p = synthid_params(config)
    check_vocab_size(vocab_size)
    ids = as_token_ids(input_ids, "input_ids", 2)
    check_ids_in_vocab(ids, vocab_size, "input_ids")
    if ids.shape[1] < p.ngram_len:
        raise ValueError(
            f"input_ids must have at least ngram_len={p.ngram_len} tokens, got {ids.shape[1]}"
        )
    g = synthid_gvalues(ids, p, device=device).double()  # (batch, num, depth)
    if mask is None:
        mask = _default_synthid_mask(ids, p, eos_token_id, device)
    mask = torch.as_tensor(mask, device=device)
    if tuple(mask.shape) != tuple(g.shape[:2]):
        raise ValueError(f"mask must have shape {tuple(g.shape[:2])}, got {tuple(mask.shape)}")
    mask = mask.double()
    depth = g.shape[2]
    num_scored = mask.sum(dim=1)  # (batch,)
    empty = torch.nonzero(num_scored == 0).flatten().tolist()
    if empty:
        raise ValueError(
            f"row(s) {empty} have no n-gram to score (every context repeats an earlier one, "
            f"or the row starts with eos_token_id, or the mask is all False): a mean over no "
            f"g-value is undefined; pass a longer text or a mask with at least one True per row"
        )
    if weights is None:
        weights = torch.linspace(10, 1, depth, dtype=torch.float64, device=device)
    weights = torch.as_tensor(weights, dtype=torch.float64, device=device)
    if weights.shape != (depth,) or bool((weights < 0).any()) or not bool(weights.sum() > 0):
        raise ValueError(
            f"weights must be {depth} non-negative numbers, not all zero, got {weights.tolist()}"
        )
    weights = weights * (depth / weights.sum())
    masked = g * mask[:, :, None]
    mean = masked.sum(dim=(1, 2)) / (depth * num_scored)
    weighted = (masked * weights).sum(dim=(1, 2)) / (depth * num_scored)
    return {"mean": mean, "weighted_mean": weighted, "num_scored": num_scored}
