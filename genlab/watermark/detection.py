"""Detecting the green-list watermark: z-scores, p-values and the detector.

The detector recomputes the green lists of a text and counts its green tokens:
``z = (G - gamma * T) / sqrt(T * gamma * (1 - gamma))`` over the T scored tokens, G of
them green, with ``gamma = greenlist_ratio`` (transformers 4.56.2's numbers).

>>> float(z_score(10, 20, 0.25).round(3))
2.582
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields

import numpy as np
import pandas as pd
import torch

from ..checks import check_int
from .kgw import _ngram_prefix, _position_ngrams, scoring_window, token_is_green
from .params import as_token_ids, check_ids_in_vocab, check_vocab_size, greenlist_params


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
    check_vocab_size(vocab_size)
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
        check_int("max_cache_size", max_cache_size, minimum=0)
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
        only); the tokens before still give the context of the first scored ones.

        Raises a ValueError, never returns NaN, when a row has no token to score (too
        short, ``score_from`` at or past the end, every n-gram a repeat)."""
        ids = as_token_ids(input_ids, "input_ids", 2)
        if score_from is not None:
            score_from = check_int("score_from", score_from, minimum=0)
            if score_from >= ids.shape[1]:
                raise ValueError(
                    f"score_from={score_from} is at or past the end of input_ids, which have "
                    f"{ids.shape[1]} tokens: nothing is left to score. Pass a position below "
                    f"{ids.shape[1]} (e.g. the prompt length when the text holds generated "
                    f"tokens), or None to score the whole text"
                )
        check_ids_in_vocab(ids, self.vocab_size, "input_ids")
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
        empty = np.flatnonzero(num_scored == 0).tolist()
        if empty:
            first = start + scoring_window(self.params) - 1
            raise ValueError(
                f"row(s) {empty} have no token to score (the first scorable position is "
                f"{first}; score_from={score_from}; repeated n-grams are skipped): a z-score "
                f"of no token is undefined. Pass a longer text or an earlier score_from"
            )
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
