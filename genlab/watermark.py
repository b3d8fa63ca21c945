"""Text watermarks: green lists, the two watermarking logits processors, detectors, tables.

Two schemes, both as transformers 4.56.2 applies them (after the sampling warpers):

* **Green-list watermark** (Kirchenbauer et al. 2023, ``WatermarkingConfig``). Before each
  step a pseudo-random permutation of the vocabulary is drawn from a seed hashed from the
  context; its first ``int(vocab_size * greenlist_ratio)`` entries are *green* and get
  ``bias`` added to their logits. A detector recomputes the green lists and counts green
  tokens: ``z = (G - gamma * T) / sqrt(T * gamma * (1 - gamma))``.
* **SynthID text** (Dathathri et al. 2024, ``SynthIDTextWatermarkingConfig``). Every
  (n-1)-gram context and candidate token get one pseudo-random bit (a *g-value*) per key;
  the distribution is reshaped by a tournament over the keys so that tokens with g = 1 win
  more often. Detection averages the g-values of a text (mean / weighted mean score).

Everything that needs "which tokens are green here" goes through :func:`greenlist`, a pure
function: the processor, the detector, the tables and the plots share it.

>>> import torch
>>> from genlab.watermark import greenlist, WatermarkLogitsProcessor
>>> cfg = {"greenlist_ratio": 0.25, "seeding_scheme": "lefthash"}
>>> greenlist(torch.tensor([5, 17]), 100, cfg).shape
torch.Size([25])
>>> proc = WatermarkLogitsProcessor(vocab_size=100, device="cpu")
>>> out = proc(torch.tensor([[5, 17]]), torch.zeros(1, 100))
>>> int((out == 2.0).sum())
25
"""

from __future__ import annotations

import functools
import html
import logging
import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import pandas as pd
import torch

from .tokens import token_text

logger = logging.getLogger(__name__)

DEFAULT_HASHING_KEY = 15485863  # the millionth prime, the reference's default key
SELFHASH_TABLE_SIZE = 1_000_003  # size of the fixed permutation selfhash seeds look up
SELFHASH_CANDIDATES = 40  # top candidates selfhash tests for membership of their own list
_SEED_MODULUS = 2**64 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
SYNTHID_LCG_MULTIPLIER = 6364136223846793005  # newlib/musl linear congruential constants
SYNTHID_LCG_INCREMENT = 1
SYNTHID_MAX_TABLE_SIZE = 2**24


# --------------------------------------------------------------------------------------
# configuration: read any config object (genlab, transformers, dict) into checked params
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GreenlistParams:
    """Checked settings of the green-list watermark (the ``WatermarkingConfig`` fields).

    >>> GreenlistParams(seeding_scheme="selfhash", context_width=2).greenlist_ratio
    0.25
    """

    greenlist_ratio: float = 0.25
    bias: float = 2.0
    hashing_key: int = DEFAULT_HASHING_KEY
    seeding_scheme: str = "lefthash"
    context_width: int = 1

    def __post_init__(self):
        _check_real(self.greenlist_ratio, "greenlist_ratio")
        if not 0.0 < self.greenlist_ratio < 1.0:
            raise ValueError(
                f"greenlist_ratio must be strictly between 0 and 1 (the share of the vocabulary "
                f"that is green), got {self.greenlist_ratio!r}"
            )
        _check_real(self.bias, "bias")
        _check_int(self.hashing_key, "hashing_key", _INT64_MIN, _INT64_MAX)
        if self.seeding_scheme not in ("lefthash", "selfhash"):
            raise ValueError(
                f"seeding_scheme must be 'lefthash' or 'selfhash', got {self.seeding_scheme!r}"
            )
        _check_int(self.context_width, "context_width", 1, None)


@dataclass(frozen=True)
class SynthIDParams:
    """Checked settings of SynthID text (the ``SynthIDTextWatermarkingConfig`` fields).

    >>> SynthIDParams(ngram_len=3, keys=(7, 11)).depth
    2
    """

    ngram_len: int
    keys: tuple[int, ...]
    context_history_size: int = 1024
    sampling_table_seed: int = 0
    sampling_table_size: int = 2**16
    skip_first_ngram_calls: bool = False
    debug_mode: bool = False

    def __post_init__(self):
        _check_int(self.ngram_len, "ngram_len", 2, None)
        keys = self.keys
        if isinstance(keys, torch.Tensor):
            keys = keys.tolist()
        if isinstance(keys, (str, bytes)) or not isinstance(keys, Sequence) or len(keys) == 0:
            raise ValueError(
                f"keys must be a non-empty list of integers (one watermarking key per "
                f"tournament layer), got {self.keys!r}"
            )
        for key in keys:
            _check_int(key, "keys[...]", _INT64_MIN, _INT64_MAX)
        object.__setattr__(self, "keys", tuple(int(k) for k in keys))
        _check_int(self.context_history_size, "context_history_size", 0, None)
        _check_int(self.sampling_table_seed, "sampling_table_seed", _INT64_MIN, 2**64 - 1)
        _check_int(self.sampling_table_size, "sampling_table_size", 1, SYNTHID_MAX_TABLE_SIZE)
        for name in ("skip_first_ngram_calls", "debug_mode"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")

    @property
    def depth(self) -> int:
        """Number of tournament layers (one per key)."""
        return len(self.keys)


def _check_real(value, name):
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if not ok or math.isnan(float(value)):
        raise ValueError(f"{name} must be a real number, got {value!r}")


def _check_int(value, name, low, high):
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if (low is not None and value < low) or (high is not None and value > high):
        allowed = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{name} must be {allowed}, got {value!r}")


def _config_fields(config, names: tuple[str, ...], kind: str) -> dict[str, Any]:
    """The fields ``names`` that ``config`` (object or mapping) sets."""
    if isinstance(config, Mapping):
        unknown = sorted(set(config) - set(names))
        if unknown:
            raise ValueError(f"unknown {kind} field(s) {unknown}; allowed fields are {list(names)}")
        return dict(config)
    return {name: getattr(config, name) for name in names if hasattr(config, name)}


def is_synthid_config(config) -> bool:
    """True when ``config`` describes SynthID text rather than the green-list watermark."""
    if isinstance(config, SynthIDParams):
        return True
    if isinstance(config, Mapping):
        return "ngram_len" in config or "keys" in config
    return hasattr(config, "ngram_len") or type(config).__name__.startswith("SynthID")


def greenlist_params(config) -> GreenlistParams:
    """Read a green-list watermark config into :class:`GreenlistParams` (checked).

    ``config`` may be a genlab or transformers ``WatermarkingConfig``, a plain dict with the
    same field names, a :class:`WatermarkLogitsProcessor` or :class:`WatermarkDetector`, or
    ``GreenlistParams`` itself.

    >>> greenlist_params({"bias": 1.5}).bias
    1.5
    """
    if isinstance(config, GreenlistParams):
        return config
    if isinstance(getattr(config, "params", None), GreenlistParams):  # processor, detector
        return config.params
    if config is None or is_synthid_config(config):
        raise ValueError(
            "watermarking_config must be a green-list WatermarkingConfig (or a dict of its "
            f"fields: greenlist_ratio, bias, hashing_key, seeding_scheme, context_width), "
            f"got {config!r}"
        )
    names = tuple(f.name for f in fields(GreenlistParams))
    return GreenlistParams(**_config_fields(config, names, "WatermarkingConfig"))


def synthid_params(config) -> SynthIDParams:
    """Read a SynthID text config (genlab, transformers, dict, processor) into params.

    >>> synthid_params({"ngram_len": 3, "keys": [1, 2]}).keys
    (1, 2)
    """
    if isinstance(config, SynthIDParams):
        return config
    if isinstance(getattr(config, "params", None), SynthIDParams):  # the processor
        return config.params
    names = tuple(f.name for f in fields(SynthIDParams))
    values = _config_fields(config, names, "SynthIDTextWatermarkingConfig")
    missing = [n for n in ("ngram_len", "keys") if n not in values]
    if missing:
        raise ValueError(f"a SynthIDTextWatermarkingConfig needs {missing}; got {config!r}")
    return SynthIDParams(**values)


def _check_vocab_size(vocab_size):
    _check_int(vocab_size, "vocab_size", 1, None)


def _device_key(device) -> str:
    return str(torch.device(device))


def _as_ids(ids, name: str, ndim: int) -> torch.LongTensor:
    """A LongTensor of token ids with ``ndim`` dims (lists and 1-D rows are accepted)."""
    if not isinstance(ids, torch.Tensor):
        ids = torch.as_tensor(ids, dtype=torch.long)
    if ids.dtype.is_floating_point or ids.dtype == torch.bool:
        raise ValueError(f"{name} must hold integer token ids, got dtype {ids.dtype}")
    if ndim == 2 and ids.dim() == 1:
        ids = ids[None]
    if ndim == 1 and ids.dim() == 2 and ids.shape[0] == 1:
        ids = ids[0]
    if ids.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s), got shape {tuple(ids.shape)}")
    return ids.long()


def _check_ids_in_vocab(ids: torch.Tensor, vocab_size: int, name: str):
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
        bad = int(ids.max()) if int(ids.max()) >= vocab_size else int(ids.min())
        raise ValueError(
            f"{name} holds token id {bad}, outside the vocabulary [0, {vocab_size}): the "
            f"vocab_size must be the one of the model that produced the text"
        )


# --------------------------------------------------------------------------------------
# the green list: one pure function shared by processor, detector and views
# --------------------------------------------------------------------------------------


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
    ids = _as_ids(context_ids, "context_ids", 1)
    if ids.numel() == 0:
        raise ValueError("context_ids must hold at least one token to seed a green list")
    window = ids[-params.context_width :]
    if params.seeding_scheme == "lefthash":
        seed = params.hashing_key * int(window[-1])
    else:
        table = _selfhash_table(params.hashing_key, _device_key(device))
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
    _check_vocab_size(vocab_size)
    seed = greenlist_seed(context_ids, params, device=device)
    size = greenlist_size(vocab_size, params.greenlist_ratio)
    return _greenlist_from_seed(seed, vocab_size, size, _device_key(device)).clone()


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
    ids = _as_ids(context_ids, "context_ids", 1)
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
    ids = _as_ids(context_ids, "context_ids", 1)
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
    ids = _as_ids(input_ids, "input_ids", 2)
    _check_ids_in_vocab(ids, vocab_size, "input_ids")
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


# --------------------------------------------------------------------------------------
# green-list processor
# --------------------------------------------------------------------------------------


class WatermarkLogitsProcessor:
    """Add ``bias`` to the logits of green tokens (transformers' processor of that name).

    input_ids: (batch, len); scores: (batch, vocab_size) -> new (batch, vocab_size) tensor
    (the input is never modified). When ``len < context_width`` nothing is changed.

    >>> proc = WatermarkLogitsProcessor(vocab_size=10, device="cpu", greenlist_ratio=0.5)
    >>> out = proc(torch.tensor([[3]]), torch.zeros(1, 10))
    >>> sorted(torch.nonzero(out[0]).flatten().tolist()) == sorted(proc.green_ids([3]).tolist())
    True
    """

    def __init__(
        self,
        vocab_size: int,
        device,
        greenlist_ratio: float = 0.25,
        bias: float = 2.0,
        hashing_key: int = DEFAULT_HASHING_KEY,
        seeding_scheme: str = "lefthash",
        context_width: int = 1,
    ):
        _check_vocab_size(vocab_size)
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
        return _selfhash_table(self.hash_key, _device_key(self.device))

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


# --------------------------------------------------------------------------------------
# SynthID text: hashing, g-values, tournament processor, mean scores
# --------------------------------------------------------------------------------------


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
    return _synthid_sampling_table(
        p.sampling_table_size, p.sampling_table_seed, _device_key(device)
    )


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
    ids = _as_ids(input_ids, "input_ids", 2).to(device)
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
    ids = _as_ids(input_ids, "input_ids", 2).to(device)
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
    ids = _as_ids(input_ids, "input_ids", 2)
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
    probs = torch.softmax(scores, dim=1)
    for layer in range(g_values.shape[2]):
        g = g_values[:, :, layer]  # (batch, vocab)
        g_mass = (g * probs).sum(dim=1, keepdim=True)  # (batch, 1)
        probs = probs * (1 + g - g_mass)
    log_probs = torch.log(probs)
    lowest = torch.finfo(log_probs.dtype).min
    return torch.where(torch.isfinite(log_probs), log_probs, lowest)


class SynthIDTextWatermarkLogitsProcessor:
    """SynthID text watermark (transformers' processor of that name, same numbers).

    Stateful: the first call starts from a zero context; each later call appends the last
    token of ``input_ids``. A context seen within the last ``context_history_size`` steps
    is left unwatermarked. Call :meth:`reset` before reusing it for a new generation.

    >>> proc = SynthIDTextWatermarkLogitsProcessor(3, [7, 9], 64, 0, 16, "cpu")
    >>> proc(torch.tensor([[1, 2]]), torch.zeros(1, 5)).shape
    torch.Size([1, 5])
    """

    def __init__(
        self,
        ngram_len: int,
        keys: list[int],
        sampling_table_size: int,
        sampling_table_seed: int,
        context_history_size: int,
        device,
        skip_first_ngram_calls: bool = False,
        debug_mode: bool = False,
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

    def candidate_gvalues(self, context: torch.LongTensor, vocab_size: int):
        """g-values of every next token after ``context`` (batch, ngram_len - 1).

        Returns ``(g_values (batch, vocab, depth), context_hash (batch,))``.
        """
        batch = context.shape[0]
        ones = torch.ones(batch, dtype=torch.long, device=self.device)
        context_hash = synthid_hash(ones, context)  # (batch,)
        candidates = torch.arange(vocab_size, device=self.device)  # (vocab,)
        with_token = synthid_hash(context_hash[:, None], candidates[None, :, None])  # (b, v)
        hashes = _keyed(with_token, self.keys)  # (batch, vocab, depth)
        return _gvalues_from_hashes(hashes, self.sampling_table), context_hash

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor):
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must be (batch, len), got {tuple(input_ids.shape)}")
        batch, vocab = scores.shape
        if self.debug_mode:
            scores = torch.ones_like(scores)
        state = self._advance(input_ids, batch)
        if self.skip_first_ngram_calls and state.num_calls < self.ngram_len:
            return scores
        g_values, context_hash = self.candidate_gvalues(state.context, vocab)
        watermarked = synthid_tournament(scores, g_values)  # (batch, vocab)
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
    _check_vocab_size(vocab_size)
    ids = _as_ids(input_ids, "input_ids", 2)
    _check_ids_in_vocab(ids, vocab_size, "input_ids")
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
    if weights is None:
        weights = torch.linspace(10, 1, depth, dtype=torch.float64, device=device)
    weights = torch.as_tensor(weights, dtype=torch.float64, device=device)
    if weights.shape != (depth,) or bool((weights < 0).any()):
        raise ValueError(f"weights must be {depth} non-negative numbers, got {weights.tolist()}")
    weights = weights * (depth / weights.sum())
    masked = g * mask[:, :, None]
    mean = masked.sum(dim=(1, 2)) / (depth * num_scored)
    weighted = (masked * weights).sum(dim=(1, 2)) / (depth * num_scored)
    return {"mean": mean, "weighted_mean": weighted, "num_scored": num_scored}


def synthid_gvalues_table(
    input_ids,
    config,
    *,
    tokenizer=None,
    eos_token_id: int | None = None,
    device="cpu",
) -> pd.DataFrame:
    """The g-values of a text, one row per (row, position, depth).

    Columns: row, position (of the scored token in ``input_ids``), token_id, token, depth,
    g_value (0/1), scored (False for repeated contexts / after EOS).

    >>> t = synthid_gvalues_table([1, 2, 3], {"ngram_len": 2, "keys": [4, 5]})
    >>> list(t.columns), len(t)
    (['row', 'position', 'token_id', 'token', 'depth', 'g_value', 'scored'], 4)
    """
    p = synthid_params(config)
    ids = _as_ids(input_ids, "input_ids", 2)
    g = synthid_gvalues(ids, p, device=device).cpu()  # (batch, num, depth)
    scored = _default_synthid_mask(ids, p, eos_token_id, device).cpu()  # (batch, num)
    batch, num, depth = g.shape
    row, index, layer = np.meshgrid(
        np.arange(batch), np.arange(num), np.arange(depth), indexing="ij"
    )  # each (batch, num, depth), flattened below in that order
    row, index, layer = row.ravel(), index.ravel(), layer.ravel()
    position = index + p.ngram_len - 1
    token_ids = ids.cpu().numpy()[row, position]
    texts = {int(t): token_text(tokenizer, int(t)) for t in np.unique(token_ids)}
    return pd.DataFrame(
        {
            "row": row,
            "position": position,
            "token_id": token_ids,
            "token": [texts[int(t)] for t in token_ids],
            "depth": layer,
            "g_value": g.numpy().ravel(),
            "scored": scored.numpy()[row, index],
        }
    )


# --------------------------------------------------------------------------------------
# building a processor from a config
# --------------------------------------------------------------------------------------


def watermark_processor(watermarking_config, *, vocab_size: int, device="cpu"):
    """The processor a watermarking config asks for (what ``generate`` appends last).

    ``watermarking_config``: genlab or transformers ``WatermarkingConfig`` /
    ``SynthIDTextWatermarkingConfig``, or a dict of either's fields (a dict with
    ``ngram_len`` / ``keys`` is SynthID). ``vocab_size`` is the model's (logits width).

    >>> watermark_processor({"bias": 1.0}, vocab_size=32).bias
    1.0
    """
    if is_synthid_config(watermarking_config):
        p = synthid_params(watermarking_config)
        return SynthIDTextWatermarkLogitsProcessor(
            ngram_len=p.ngram_len,
            keys=list(p.keys),
            sampling_table_size=p.sampling_table_size,
            sampling_table_seed=p.sampling_table_seed,
            context_history_size=p.context_history_size,
            device=device,
            skip_first_ngram_calls=p.skip_first_ngram_calls,
            debug_mode=p.debug_mode,
        )
    p = greenlist_params(watermarking_config)
    return WatermarkLogitsProcessor(
        vocab_size=vocab_size,
        device=device,
        greenlist_ratio=p.greenlist_ratio,
        bias=p.bias,
        hashing_key=p.hashing_key,
        seeding_scheme=p.seeding_scheme,
        context_width=p.context_width,
    )


# --------------------------------------------------------------------------------------
# green-list detector
# --------------------------------------------------------------------------------------


def z_score(num_green, num_scored, greenlist_ratio: float) -> np.ndarray:
    """``(G - gamma * T) / sqrt(T * gamma * (1 - gamma))`` elementwise (float64)."""
    green = np.asarray(num_green, dtype=np.float64)
    total = np.asarray(num_scored, dtype=np.float64)
    gamma = greenlist_ratio
    return (green - gamma * total) / np.sqrt(total * gamma * (1 - gamma))


def p_value_approx(z) -> np.ndarray:
    """The reference detector's p-value: ``1 - 0.5 * (1 + sign(z) * (1 - exp(-2 z^2 / pi)))``.

    A closed-form stand-in for the normal upper tail (it is not the tail itself: compare
    :func:`p_value_exact`).
    """
    z = np.asarray(z, dtype=np.float64)
    return 1 - (0.5 * (1 + np.sign(z) * (1 - np.exp(-2 * z**2 / np.pi))))


def p_value_exact(z) -> np.ndarray:
    """Exact standard-normal upper tail ``P(Z > z) = erfc(z / sqrt(2)) / 2`` elementwise.

    >>> float(p_value_exact(0.0))
    0.5
    """
    z = np.asarray(z, dtype=np.float64)
    tail = np.vectorize(lambda v: 0.5 * math.erfc(v / math.sqrt(2.0)), otypes=[np.float64])
    return tail(z)


def running_z_scores(green: Sequence[bool], greenlist_ratio: float) -> np.ndarray:
    """z-score of the first k scored tokens, for k = 1..len(green). (len,) float64."""
    g = np.cumsum(np.asarray(green, dtype=np.float64))
    t = np.arange(1, len(g) + 1, dtype=np.float64)
    return z_score(g, t, greenlist_ratio)


@dataclass
class WatermarkDetection:
    """What :class:`WatermarkDetector` finds: the reference's fields, plus per-token masks.

    Arrays are (batch,) numpy float64 / bool like the reference's
    ``WatermarkDetectorOutput``. ``green_mask`` / ``scored_mask``: (batch, len) bool tensors
    aligned with the ``input_ids`` given (a dropped BOS is neither scored nor green).
    ``p_value_exact`` is the exact normal tail beside the reference's approximation.
    """

    num_tokens_scored: np.ndarray
    num_green_tokens: np.ndarray
    green_fraction: np.ndarray
    z_score: np.ndarray
    p_value: np.ndarray
    prediction: np.ndarray
    confidence: np.ndarray
    p_value_exact: np.ndarray
    green_mask: torch.BoolTensor = field(repr=False)
    scored_mask: torch.BoolTensor = field(repr=False)

    def to_frame(self) -> pd.DataFrame:
        """One row per sequence with every (batch,) field."""
        names = [f.name for f in fields(self) if f.name not in ("green_mask", "scored_mask")]
        return pd.DataFrame({name: getattr(self, name) for name in names})


def _model_field(model_config, name, default=None):
    if isinstance(model_config, Mapping):
        return model_config.get(name, default)
    return getattr(model_config, name, default)


def detector_model_fields(model_config) -> tuple[int, int | None]:
    """``(vocab_size, start_token_id)`` from a ModelInfo, transformers config or dict.

    The start token is ``decoder_start_token_id`` for encoder-decoder models, else BOS.
    """
    vocab_size = _model_field(model_config, "vocab_size")
    if vocab_size is None and hasattr(model_config, "get_text_config"):
        vocab_size = getattr(model_config.get_text_config(), "vocab_size", None)
    if vocab_size is None:
        raise ValueError(
            f"model_config must say vocab_size (a ModelInfo, a transformers config or a dict "
            f"with vocab_size and bos_token_id), got {model_config!r}"
        )
    _check_vocab_size(vocab_size)
    if _model_field(model_config, "is_encoder_decoder", False):
        return vocab_size, _model_field(model_config, "decoder_start_token_id")
    return vocab_size, _model_field(model_config, "bos_token_id")


class WatermarkDetector:
    """Detect the green-list watermark (transformers' ``WatermarkDetector``, same numbers).

    model_config: a genlab ``ModelInfo``, a transformers config or a dict (vocab_size,
    bos_token_id). watermarking_config: the config used when generating.
    ``__call__(input_ids (batch, len), z_threshold=3.0, return_dict=False)`` returns the
    (batch,) bool predictions, or a :class:`WatermarkDetection` with ``return_dict=True``.

    A leading BOS (checked on the first row) is dropped from every row. Note: the reference
    keys its n-gram counts by tensor identity, so its ``ignore_repeated_ngrams=True`` scores
    every n-gram; genlab matches that. Pass ``dedupe_by_value=True`` as well to count each
    distinct n-gram once, as the option's documentation describes.

    >>> det = WatermarkDetector({"vocab_size": 50, "bos_token_id": 0}, "cpu", {})
    >>> det(torch.tensor([[0, 5, 6, 7]]), return_dict=True).num_tokens_scored
    array([2.])

    device: where the detector's tensors live (``"cpu"``, ``"cuda"``);
    max_cache_size: how many green lists are cached (by context) between calls.
    """

    def __init__(
        self,
        model_config,
        device,
        watermarking_config,
        ignore_repeated_ngrams: bool = False,
        max_cache_size: int = 128,
        *,
        dedupe_by_value: bool = False,
    ):
        self.vocab_size, self.bos_token_id = detector_model_fields(model_config)
        self.params = greenlist_params(watermarking_config)
        self.greenlist_ratio = self.params.greenlist_ratio
        self.device = device
        self.ignore_repeated_ngrams = ignore_repeated_ngrams
        self.dedupe_by_value = dedupe_by_value
        _check_int(max_cache_size, "max_cache_size", 0, None)
        self._is_green = functools.lru_cache(maxsize=max_cache_size)(self._lookup)

    def _lookup(self, prefix: tuple[int, ...], target: int) -> bool:
        return token_is_green(prefix, target, self.vocab_size, self.params, device=self.device)

    def _score_row(self, seq: list[int]) -> tuple[list[bool], list[bool]]:
        """Per token of one row: (green, scored)."""
        offset = scoring_window(self.params) - 1
        green = [False] * len(seq)
        scored = [False] * len(seq)
        seen: set[tuple[int, ...]] = set()
        dedupe = self.ignore_repeated_ngrams and self.dedupe_by_value
        for i, ngram in enumerate(_position_ngrams(seq, self.params)):
            green[i + offset] = self._is_green(_ngram_prefix(ngram, self.params), ngram[-1])
            scored[i + offset] = not (dedupe and ngram in seen)
            seen.add(ngram)
        return green, scored

    def __call__(
        self,
        input_ids,
        z_threshold: float = 3.0,
        return_dict: bool = False,
        *,
        score_from: int | None = None,
    ):
        """``score_from`` (genlab's addition): score only the tokens at positions
        ``>= score_from`` of ``input_ids`` (e.g. the prompt length: the generated tokens
        only); the tokens before still give the context of the first scored ones."""
        ids = _as_ids(input_ids, "input_ids", 2)
        if score_from is not None and (
            isinstance(score_from, bool) or not isinstance(score_from, int) or score_from < 0
        ):
            raise ValueError(f"score_from must be an int >= 0 or None, got {score_from!r}")
        _check_ids_in_vocab(ids, self.vocab_size, "input_ids")
        start = 1 if ids.shape[1] and int(ids[0, 0]) == self.bos_token_id else 0
        body = ids[:, start:]
        if body.shape[1] - self.params.context_width < 1:
            raise ValueError(
                f"input_ids need at least context_width + 1 = {self.params.context_width + 1} "
                f"tokens after a leading BOS to score one token, got {body.shape[1]}"
            )
        green = torch.zeros(ids.shape, dtype=torch.bool)
        scored = torch.zeros(ids.shape, dtype=torch.bool)
        for row, seq in enumerate(body.tolist()):
            g, s = self._score_row(seq)
            green[row, start:] = torch.tensor(g, dtype=torch.bool)
            scored[row, start:] = torch.tensor(s, dtype=torch.bool)
        if score_from is not None:
            scored[:, :score_from] = False
        num_scored = scored.sum(dim=1).double().numpy()
        num_green = (green & scored).sum(dim=1).double().numpy()
        z = z_score(num_green, num_scored, self.greenlist_ratio)
        prediction = z > z_threshold
        if not return_dict:
            return prediction
        p_value = p_value_approx(z)
        return WatermarkDetection(
            num_tokens_scored=num_scored,
            num_green_tokens=num_green,
            green_fraction=num_green / num_scored,
            z_score=z,
            p_value=p_value,
            prediction=prediction,
            confidence=1 - p_value,
            p_value_exact=p_value_exact(z),
            green_mask=green,
            scored_mask=scored,
        )


# --------------------------------------------------------------------------------------
# tables and HTML
# --------------------------------------------------------------------------------------


def greenlist_table(
    context_ids,
    scores_before,
    config,
    *,
    tokenizer=None,
    top: int | None = None,
    device="cpu",
) -> pd.DataFrame:
    """The watermark at one position: every token's logit and probability before/after.

    context_ids: (len,) the text so far; scores_before: (vocab,) the scores the watermark
    processor receives (after the warpers). Columns: token, id, green (got the bias),
    logit_before, logit_after, prob_before, prob_after; sorted by logit_before, highest
    first; ``top`` keeps the first rows.

    >>> t = greenlist_table([3, 4], torch.zeros(8), {"greenlist_ratio": 0.5})
    >>> int(t.green.sum()), list(t.columns)[:3]
    (4, ['token', 'id', 'green'])
    """
    params = greenlist_params(config)
    scores = torch.as_tensor(scores_before)
    if scores.dim() == 2 and scores.shape[0] == 1:
        scores = scores[0]
    if scores.dim() != 1 or not scores.dtype.is_floating_point:
        raise ValueError(f"scores_before must be a (vocab,) float tensor, got {scores!r}")
    if top is not None:
        _check_int(top, "top", 1, None)
    vocab_size = scores.shape[0]
    ids = _as_ids(context_ids, "context_ids", 1)
    _check_ids_in_vocab(ids, vocab_size, "context_ids")
    processor = watermark_processor(params, vocab_size=vocab_size, device=device)
    after = processor(ids[None], scores[None])[0]  # (vocab,)
    green = torch.zeros(vocab_size, dtype=torch.bool)
    green[processor.green_ids(ids, scores).cpu()] = True
    frame = pd.DataFrame(
        {
            "token": [token_text(tokenizer, i) for i in range(vocab_size)],
            "id": np.arange(vocab_size),
            "green": green.numpy(),
            "logit_before": scores.detach().cpu().double().numpy(),
            "logit_after": after.detach().cpu().double().numpy(),
            "prob_before": torch.softmax(scores.double(), -1).cpu().numpy(),
            "prob_after": torch.softmax(after.double(), -1).cpu().numpy(),
        }
    )
    frame = frame.sort_values("logit_before", ascending=False, kind="stable")
    frame = frame.reset_index(drop=True)
    return frame if top is None else frame.head(top)


def _resolve_vocab_size(config, tokenizer, vocab_size):
    if vocab_size is not None:
        return vocab_size
    if isinstance(config, (WatermarkLogitsProcessor, WatermarkDetector)):
        return config.vocab_size
    if tokenizer is not None and hasattr(tokenizer, "__len__"):
        return len(tokenizer)
    raise ValueError(
        "vocab_size is needed to draw green lists: pass vocab_size=model.info.vocab_size "
        "(or a tokenizer with len(), or a WatermarkDetector as config)"
    )


def token_colours(
    input_ids,
    config,
    tokenizer=None,
    *,
    vocab_size: int | None = None,
    bos_token_id: int | None = None,
    device="cpu",
) -> pd.DataFrame:
    """Each token of one text marked green or red, with the running z-score.

    input_ids: (len,) or (1, len). ``config`` may also be a :class:`WatermarkDetector`
    (its vocab_size and BOS are used). Columns: position, id, token, scored, green,
    num_scored, num_green, running_z (z of the scored tokens up to here; NaN before the
    first). A leading ``bos_token_id`` is not scored, as in the detector.

    >>> t = token_colours([5, 6, 7], {}, vocab_size=20)
    >>> t.scored.tolist()
    [False, True, True]
    """
    if isinstance(config, WatermarkDetector):
        bos_token_id = config.bos_token_id if bos_token_id is None else bos_token_id
    vocab_size = _resolve_vocab_size(config, tokenizer, vocab_size)
    params = greenlist_params(config)
    ids = _as_ids(input_ids, "input_ids", 1)
    _check_ids_in_vocab(ids, vocab_size, "input_ids")
    start = 1 if ids.numel() and bos_token_id is not None and int(ids[0]) == bos_token_id else 0
    green = np.zeros(len(ids), dtype=bool)
    scored = np.zeros(len(ids), dtype=bool)
    g, s = green_token_mask(ids[start:], vocab_size, params, device=device)
    green[start:], scored[start:] = g.numpy(), s.numpy()
    num_scored = np.cumsum(scored)
    num_green = np.cumsum(green & scored)
    with np.errstate(divide="ignore", invalid="ignore"):
        running = z_score(num_green, num_scored, params.greenlist_ratio)
    running[num_scored == 0] = np.nan
    return pd.DataFrame(
        {
            "position": np.arange(len(ids)),
            "id": ids.cpu().numpy(),
            "token": [token_text(tokenizer, int(i)) for i in ids],
            "scored": scored,
            "green": green,
            "num_scored": num_scored,
            "num_green": num_green,
            "running_z": running,
        }
    )


_HTML_COLOURS = {"green": "#b7e4c7", "red": "#f4b6b6", "unscored": "#e5e5e5"}


@dataclass
class WatermarkHTML:
    """HTML of a text with green / red tokens; shows itself in a notebook."""

    html: str
    table: pd.DataFrame = field(repr=False)

    def _repr_html_(self) -> str:
        return self.html

    def __str__(self) -> str:
        return self.html


def watermark_html(
    input_ids,
    config=None,
    tokenizer=None,
    *,
    vocab_size: int | None = None,
    bos_token_id: int | None = None,
    device="cpu",
) -> WatermarkHTML:
    """The text with each token on a green or red background (grey: not scored).

    ``input_ids`` may be token ids (then as :func:`token_colours`) or the DataFrame
    :func:`token_colours` returned. Hovering a token shows its position, id and running z.

    >>> "<span" in watermark_html([5, 6, 7], {}, vocab_size=20).html
    True
    """
    if isinstance(input_ids, pd.DataFrame):
        table = input_ids
    else:
        table = token_colours(
            input_ids,
            config,
            tokenizer,
            vocab_size=vocab_size,
            bos_token_id=bos_token_id,
            device=device,
        )
    spans = [_token_span(row) for row in table.itertuples(index=False)]
    scored = int(table.scored.sum())
    summary = "no token scored"
    if scored:
        last = table.running_z[table.scored].iloc[-1]
        green = int(table.num_green.iloc[-1])
        summary = f"{green} of {scored} scored tokens green, z = {last:.2f}"
    body = "".join(spans)
    text = (
        '<div class="genlab-watermark" style="font-family:monospace;line-height:1.9;'
        f'white-space:pre-wrap">{body}</div>'
        f'<div style="font-size:smaller;color:#555">{html.escape(summary)}</div>'
    )
    return WatermarkHTML(text, table)


def _token_span(row) -> str:
    kind = "unscored" if not row.scored else ("green" if row.green else "red")
    z = "" if not row.scored else f", z={row.running_z:.2f}"
    title = f"position {row.position}, id {row.id}, {kind}{z}"
    return (
        f'<span class="wm-{kind}" title="{html.escape(title)}" style="background:'
        f'{_HTML_COLOURS[kind]};border-radius:3px;padding:0 1px">{html.escape(str(row.token))}'
        "</span>"
    )


__all__ = [
    "DEFAULT_HASHING_KEY",
    "GreenlistParams",
    "SynthIDParams",
    "SynthIDState",
    "SynthIDTextWatermarkLogitsProcessor",
    "WatermarkDetection",
    "WatermarkDetector",
    "WatermarkHTML",
    "WatermarkLogitsProcessor",
    "biased_token_ids",
    "detector_model_fields",
    "expected_mean_g_value",
    "green_token_mask",
    "greenlist",
    "greenlist_mask",
    "greenlist_params",
    "greenlist_seed",
    "greenlist_size",
    "greenlist_table",
    "is_synthid_config",
    "p_value_approx",
    "p_value_exact",
    "running_z_scores",
    "scoring_window",
    "selfhash_green_candidates",
    "synthid_context_repetition_mask",
    "synthid_eos_mask",
    "synthid_gvalues",
    "synthid_gvalues_table",
    "synthid_hash",
    "synthid_params",
    "synthid_sampling_table",
    "synthid_scores",
    "synthid_tournament",
    "token_colours",
    "token_is_green",
    "watermark_html",
    "watermark_processor",
]
