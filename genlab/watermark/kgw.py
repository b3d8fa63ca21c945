"""The green-list watermark (Kirchenbauer et al. 2023): green lists and the processor.

Before each step a pseudo-random permutation of the vocabulary is drawn from a seed hashed
from the context; its first ``int(vocab_size * greenlist_ratio)`` entries are *green* and
get ``bias`` added to their logits, exactly as transformers 4.56.2 draws them. Everything
that needs "which tokens are green here" goes through :func:`greenlist`, a pure function:
the processor, the detector, the tables and the plots share it.

>>> greenlist(torch.tensor([5, 17]), 100, {"greenlist_ratio": 0.25}).shape
torch.Size([25])
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from typing import ClassVar

import torch

from ..processors.base import LogitsProcessor
from .params import (
    _WM,
    DEFAULT_HASHING_KEY,
    SELFHASH_CANDIDATES,
    SELFHASH_TABLE_SIZE,
    GreenlistParams,
    as_token_ids,
    check_ids_in_vocab,
    check_vocab_size,
    device_key,
    greenlist_params,
)

logger = logging.getLogger(__name__)

_SEED_MODULUS = 2**64 - 1


def greenlist_size(vocab_size: int, greenlist_ratio: float) -> int:
    """How many tokens are green: ``int(vocab_size * greenlist_ratio)``."""
    return int(vocab_size * greenlist_ratio)


@functools.lru_cache(maxsize=8)
def _selfhash_table(hashing_key: int, device: str) -> torch.Tensor:
    # (SELFHASH_TABLE_SIZE,) a fixed permutation drawn once from the hashing key
    gen = torch.Generator(device=device)
    gen.manual_seed(hashing_key)
    return torch.randperm(SELFHASH_TABLE_SIZE, generator=gen, device=device)


def greenlist_seed(context_ids: torch.LongTensor, config, *, device="cpu") -> int:
    """The generator seed the green list of ``context_ids`` is drawn from.

    lefthash: ``hashing_key * last_token`` (only the last token counts, whatever
    context_width says). selfhash: over the last ``context_width`` tokens, the minimum of
    ``hashing_key * (T[t] + 1) * (T[last] + 1)`` in int64 arithmetic (wrapping as the
    reference does), where ``T`` is a fixed permutation seeded with the key. Both are
    reduced modulo ``2**64 - 1``.

    >>> greenlist_seed(torch.tensor([3]), {}) == (15485863 * 3) % (2**64 - 1)
    True
    """
    params = greenlist_params(config)
    ids = as_token_ids(context_ids, "context_ids", 1)
    if ids.numel() == 0:
        raise ValueError("context_ids must hold at least one token to seed a green list")
    window = ids[-params.context_width :]
    if params.seeding_scheme == "lefthash":
        seed = params.hashing_key * int(window[-1])
    else:
        table = _selfhash_table(params.hashing_key, device_key(device))
        window = window.to(table.device)
        per_token = table[window % SELFHASH_TABLE_SIZE] + 1  # (w,)
        last = table[window[-1] % SELFHASH_TABLE_SIZE] + 1  # ()
        seed = int((params.hashing_key * per_token * last).min())  # int64, may wrap
    return seed % _SEED_MODULUS


@functools.lru_cache(maxsize=128)
def _greenlist_from_seed(seed: int, vocab_size: int, size: int, device: str) -> torch.Tensor:
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    permutation = torch.randperm(vocab_size, generator=gen, device=device)  # (vocab,)
    return permutation[:size].clone()


def greenlist(context_ids, vocab_size: int, config, *, device="cpu") -> torch.LongTensor:
    """Green token ids for a context, exactly as transformers 4.56.2 draws them.

    context_ids: (len,) the tokens the seed is hashed from. For lefthash that is the text
    before the position being generated; for selfhash it is the text *including the
    candidate token* as last element (selfhash asks whether a token is in its own list).
    Returns (int(vocab_size * greenlist_ratio),) LongTensor on ``device``, in permutation
    order (not sorted). The permutation depends on the device's random generator.

    >>> ids = greenlist([42], 50, {"greenlist_ratio": 0.5})
    >>> ids.shape, bool((ids < 50).all())
    (torch.Size([25]), True)

    config: the :class:`~genlab.config.WatermarkingConfig` (ratio, key, seeding scheme, width).
    """
    params = greenlist_params(config)
    check_vocab_size(vocab_size)
    seed = greenlist_seed(context_ids, params, device=device)
    size = greenlist_size(vocab_size, params.greenlist_ratio)
    return _greenlist_from_seed(seed, vocab_size, size, device_key(device)).clone()


def greenlist_mask(context_ids, vocab_size: int, config, *, device="cpu") -> torch.BoolTensor:
    """(vocab_size,) True at the green ids of :func:`greenlist` for the same arguments.

    >>> int(greenlist_mask([42], 50, {"greenlist_ratio": 0.5}).sum())
    25
    """
    mask = torch.zeros(vocab_size, dtype=torch.bool, device=device)
    mask[greenlist(context_ids, vocab_size, config, device=device)] = True
    return mask


def token_is_green(prefix, target: int, vocab_size: int, config, *, device="cpu") -> bool:
    """Whether ``target`` is in the green list seeded by ``prefix`` (see :func:`greenlist`)."""
    ids = greenlist(prefix, vocab_size, config, device=device)
    return bool((ids == int(target)).any())


def selfhash_green_candidates(
    context_ids, scores, vocab_size: int, config, *, device="cpu"
) -> torch.LongTensor:
    """Token ids selfhash biases at one position.

    The 40 highest-scoring candidates (``scores.sort(descending=True)`` order) are each
    tested for membership of the green list seeded by ``context + [candidate]``; those
    that are in their own list are returned, best first.

    context_ids: (len,); scores: (vocab,). Returns (k,) LongTensor, 0 <= k <= 40.
    """
    ids = as_token_ids(context_ids, "context_ids", 1)
    order = scores.sort(dim=-1, descending=True).indices  # (vocab,)
    chosen = []
    for candidate in order[: min(SELFHASH_CANDIDATES, order.numel())]:
        extended = torch.cat([ids, candidate[None].to(ids.device)])  # (len + 1,)
        if token_is_green(extended, int(candidate), vocab_size, config, device=device):
            chosen.append(int(candidate))
    return torch.tensor(chosen, dtype=torch.long, device=scores.device)


def biased_token_ids(context_ids, scores, vocab_size: int, config, *, device="cpu"):
    """Token ids the watermark processor adds ``bias`` to at one position.

    lefthash: the green list of the context; selfhash: :func:`selfhash_green_candidates`.
    context_ids: (len,); scores: (vocab,) the scores the processor receives.
    Returns an empty tensor when the context is shorter than ``context_width`` (the
    processor then leaves the scores alone).
    """
    params = greenlist_params(config)
    ids = as_token_ids(context_ids, "context_ids", 1)
    if ids.numel() < params.context_width:
        return torch.zeros(0, dtype=torch.long, device=scores.device)
    if params.seeding_scheme == "selfhash":
        return selfhash_green_candidates(ids, scores, vocab_size, params, device=device)
    return greenlist(ids, vocab_size, params, device=device).to(scores.device)


def scoring_window(config) -> int:
    """Length ``n`` of the n-grams the detector scores: the target token is the last one.

    lefthash: ``context_width + 1`` (context, then target); selfhash: ``context_width``
    (the target is part of its own seed).
    """
    params = greenlist_params(config)
    return params.context_width + (0 if params.seeding_scheme == "selfhash" else 1)


def _ngram_prefix(ngram: tuple[int, ...], params: GreenlistParams) -> tuple[int, ...]:
    return ngram if params.seeding_scheme == "selfhash" else ngram[:-1]


def _position_ngrams(ids: Sequence[int], params: GreenlistParams) -> list[tuple[int, ...]]:
    """One n-gram per scored position: ngrams[i] ends at position i + n - 1."""
    n = scoring_window(params)
    return [tuple(ids[i : i + n]) for i in range(len(ids) - n + 1)]


def green_token_mask(
    input_ids, vocab_size: int, config, *, device="cpu"
) -> tuple[torch.BoolTensor, torch.BoolTensor]:
    """Per token: is it green, and is it scored at all, as the detector sees the text.

    input_ids: (len,) or (batch, len). Returns ``(green, scored)`` of the same shape; the
    first ``n - 1`` tokens (see :func:`scoring_window`) are not scored and never green.
    No BOS handling here (the detector drops a leading BOS before calling this).

    >>> green, scored = green_token_mask([1, 2, 3, 4], 50, {})
    >>> scored.tolist()
    [False, True, True, True]
    """
    params = greenlist_params(config)
    ids = as_token_ids(input_ids, "input_ids", 2)
    check_ids_in_vocab(ids, vocab_size, "input_ids")
    green = torch.zeros(ids.shape, dtype=torch.bool)
    scored = torch.zeros(ids.shape, dtype=torch.bool)
    offset = scoring_window(params) - 1
    for row, seq in enumerate(ids.tolist()):
        for i, ngram in enumerate(_position_ngrams(seq, params)):
            prefix = _ngram_prefix(ngram, params)
            scored[row, i + offset] = True
            green[row, i + offset] = token_is_green(
                prefix, ngram[-1], vocab_size, params, device=device
            )
    if torch.as_tensor(input_ids).dim() == 1:
        return green[0], scored[0]
    return green, scored


class WatermarkLogitsProcessor(LogitsProcessor):
    """Add ``bias`` to the logits of green tokens (transformers' processor of that name).

    input_ids: (batch, len); scores: (batch, vocab_size) -> new (batch, vocab_size) tensor
    (the input is never modified). When ``len < context_width`` nothing is changed. The
    settings are checked against :data:`genlab.config.WATERMARK_FIELDS`, as
    ``WatermarkingConfig.validate()`` checks them; their defaults are that table's.

    >>> proc = WatermarkLogitsProcessor(vocab_size=10, device="cpu", greenlist_ratio=0.5)
    >>> out = proc(torch.tensor([[3]]), torch.zeros(1, 10))
    >>> sorted(torch.nonzero(out[0]).flatten().tolist()) == sorted(proc.green_ids([3]).tolist())
    True
    """

    # its stage label in hook points, traces and plots (watermarking_config turns it on)
    stage_name: ClassVar[str] = "watermark"
    shown: ClassVar[tuple[str, ...]] = ("bias", "seeding_scheme", "context_width")

    def __init__(
        self,
        vocab_size: int,
        device,
        greenlist_ratio: float = _WM["greenlist_ratio"].default,
        bias: float = _WM["bias"].default,
        hashing_key: int = DEFAULT_HASHING_KEY,
        seeding_scheme: str = _WM["seeding_scheme"].default,
        context_width: int = _WM["context_width"].default,
    ):
        check_vocab_size(vocab_size)
        self.params = GreenlistParams(
            greenlist_ratio=greenlist_ratio,
            bias=bias,
            hashing_key=hashing_key,
            seeding_scheme=seeding_scheme,
            context_width=context_width,
        )
        self.vocab_size = vocab_size
        self.device = device
        self.greenlist_size = greenlist_size(vocab_size, greenlist_ratio)
        self.bias = bias
        self.hash_key = hashing_key  # the reference's attribute names from here on
        self.seeding_scheme = seeding_scheme
        self.context_width = context_width
        self.rng = torch.Generator(device=device)
        self.rng.manual_seed(hashing_key)
        self.table_size = SELFHASH_TABLE_SIZE

    @property
    def fixed_table(self) -> torch.Tensor:
        """(table_size,) the fixed permutation selfhash seeds look up (built when read)."""
        return _selfhash_table(self.hash_key, device_key(self.device))

    def __repr__(self):
        p = self.params
        return (
            f"WatermarkLogitsProcessor(vocab_size={self.vocab_size}, greenlist_ratio="
            f"{p.greenlist_ratio}, bias={p.bias}, seeding_scheme={p.seeding_scheme!r}, "
            f"context_width={p.context_width})"
        )

    def greenlist(self, context_ids) -> torch.LongTensor:
        """:func:`greenlist` with this processor's settings."""
        return greenlist(context_ids, self.vocab_size, self.params, device=self.device)

    def green_ids(self, context_ids, scores=None) -> torch.LongTensor:
        """Ids that get the bias after ``context_ids`` (selfhash needs that row's scores)."""
        if scores is None:
            if self.seeding_scheme == "selfhash":
                raise ValueError("selfhash needs the scores of the position (scores=...)")
            scores = torch.zeros(self.vocab_size, device=self.device)
        return biased_token_ids(
            context_ids, scores, self.vocab_size, self.params, device=self.device
        )

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor):
        _check_batch(input_ids, scores)
        if scores.shape[-1] != self.vocab_size:
            raise ValueError(
                f"scores have {scores.shape[-1]} columns but the watermark was set up for "
                f"vocab_size={self.vocab_size}: build it with the model's vocabulary size"
            )
        if input_ids.shape[-1] < self.context_width:
            logger.warning(
                "input_ids have %d tokens, fewer than context_width=%d: no watermark at this step",
                input_ids.shape[-1],
                self.context_width,
            )
            return scores
        out = scores.clone()  # (batch, vocab)
        for row in range(input_ids.shape[0]):
            ids = self.green_ids(input_ids[row], scores[row])
            out[row, ids] = out[row, ids] + self.bias
        return out


def _check_batch(input_ids, scores):
    if input_ids.dim() != 2 or scores.dim() != 2 or input_ids.shape[0] != scores.shape[0]:
        raise ValueError(
            f"input_ids must be (batch, len) and scores (batch, vocab) with the same batch, "
            f"got {tuple(input_ids.shape)} and {tuple(scores.shape)}"
        )
