"""Additive biases on token sequences, and bad words (a bias of -inf).

A biased sequence of one token always gets its bias; a longer one adds its bias to its
last token only in rows whose last tokens are the rest of the sequence, i.e. when the
next token would complete it.
"""

from __future__ import annotations

from typing import Any

import torch

from ..checks import is_int_like
from .base import LogitsProcessor, token_id_tensor


def _as_bias_dict(sequence_bias: Any) -> dict[tuple[int, ...], float]:
    """Accept ``[[token_ids, bias], ...]`` or ``{tuple(token_ids): bias}``; check both."""
    form = "a non-empty list of [token_ids, bias] pairs, e.g. [[[10, 45], -2.0], [[64], -7.5]]"
    if isinstance(sequence_bias, dict):
        pairs = list(sequence_bias.items())
    elif isinstance(sequence_bias, (list, tuple)):
        pairs = []
        for item in sequence_bias:
            if not isinstance(item, (list, tuple)) or len(item) != 2:
                raise ValueError(f"`sequence_bias` must be {form}; bad entry {item!r}")
            pairs.append((item[0], item[1]))
    else:
        raise ValueError(f"`sequence_bias` must be {form}, got {sequence_bias!r}")
    if not pairs:
        raise ValueError(f"`sequence_bias` must be {form}, got an empty one")
    biases: dict[tuple[int, ...], float] = {}
    for ids, bias in pairs:
        if (
            not isinstance(ids, (list, tuple))
            or len(ids) == 0
            or not all(is_int_like(t) and int(t) >= 0 for t in ids)
        ):
            raise ValueError(
                f"`sequence_bias` token ids must be non-empty lists of integers >= 0, got {ids!r}"
            )
        if not isinstance(bias, (int, float)) or isinstance(bias, bool):
            raise ValueError(f"`sequence_bias` bias for {list(ids)} must be a float, got {bias!r}")
        biases[tuple(int(t) for t in ids)] = float(bias)
    return biases


class SequenceBiasLogitsProcessor(LogitsProcessor):
    """Add a bias to the token that would complete each listed sequence.

    ``sequence_bias``: ``[[token_ids, bias], ...]`` (or a dict ``{tuple: bias}``). The
    vocabulary is learnt from ``scores`` at the first call; ids beyond it raise ValueError.

    >>> p = SequenceBiasLogitsProcessor([[[2], -1.0], [[0, 1], 5.0]])
    >>> p(torch.tensor([[2, 0]]), torch.zeros(1, 3)).tolist()
    [[0.0, 5.0, -1.0]]
    """

    stage_name = "sequence_bias"
    shown = ("sequence_bias",)
    _field = "sequence_bias"  # the config field named in errors

    def __init__(self, sequence_bias: Any):
        self.sequence_bias = _as_bias_dict(sequence_bias)
        self.length_1_bias: torch.Tensor | None = None  # (vocab,), built at the first call
        self.prepared_bias_variables = False

    def _prepare(self, scores: torch.Tensor) -> None:
        vocab = scores.shape[-1]
        too_big = [t for ids in self.sequence_bias for t in ids if t >= vocab]
        if too_big:
            raise ValueError(
                f"`{self._field}` holds token ids {too_big} but the vocabulary has {vocab} tokens "
                f"(ids 0..{vocab - 1})"
            )
        single = {ids[0]: b for ids, b in self.sequence_bias.items() if len(ids) == 1}
        self.length_1_bias = torch.zeros((vocab,), dtype=torch.float, device=scores.device)
        if single:
            values = torch.tensor(list(single.values()), device=scores.device)
            self.length_1_bias[list(single)] = values
        self.prepared_bias_variables = True

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if not self.prepared_bias_variables:
            self._prepare(scores)
        # the whole bias is summed first and added to the scores once, as the reference does
        bias = torch.zeros_like(scores)  # (rows, vocab)
        bias += self.length_1_bias
        context = input_ids.shape[1]
        for ids, value in self.sequence_bias.items():
            if len(ids) == 1 or len(ids) > context:
                continue
            prefix = torch.tensor(ids[:-1], dtype=input_ids.dtype, device=input_ids.device)
            completes = torch.eq(input_ids[:, -len(prefix) :], prefix).all(dim=1)  # (rows,)
            bias[:, ids[-1]] += torch.where(
                completes,
                torch.tensor(value, device=input_ids.device),
                torch.tensor(0.0, device=input_ids.device),
            )
        return scores + bias


class NoBadWordsLogitsProcessor(SequenceBiasLogitsProcessor):
    """Forbid sequences: the token that would complete one of ``bad_words_ids`` gets -inf.

    A one-token bad word equal to an EOS id is dropped (EOS stays allowed); a list of EOS
    ids only is accepted and does nothing, as in the reference.

    >>> p = NoBadWordsLogitsProcessor([[1], [0, 2]], eos_token_id=None)
    >>> p(torch.tensor([[1, 0]]), torch.zeros(1, 3)).tolist()
    [[0.0, -inf, -inf]]
    """

    stage_name = "bad_words"
    shown = ("bad_word_ids",)
    _field = "bad_words_ids"

    def __init__(
        self,
        bad_words_ids: list[list[int]],
        eos_token_id: int | list[int] | torch.Tensor | None = None,
    ):
        form = "a non-empty list of token-id lists, e.g. [[12], [40, 41]]"
        if not isinstance(bad_words_ids, list) or not bad_words_ids:
            raise ValueError(f"`bad_words_ids` must be {form}, got {bad_words_ids!r}")
        for ids in bad_words_ids:
            if (
                not isinstance(ids, list)
                or not ids
                or not all(is_int_like(t) and int(t) >= 0 for t in ids)
            ):
                raise ValueError(
                    f"`bad_words_ids` must be {form}; each inner list non-empty with integer "
                    f"ids >= 0, got {ids!r}"
                )
        self.bad_word_ids = bad_words_ids  # the reference's attribute name
        kept = bad_words_ids
        if eos_token_id is not None:
            eos = token_id_tensor("eos_token_id", eos_token_id).tolist()
            kept = [ids for ids in bad_words_ids if not any(ids == [e] for e in eos)]
        if kept:
            super().__init__({tuple(ids): float("-inf") for ids in kept})
        else:  # only EOS ids: nothing to forbid
            self.sequence_bias = {}
            self.length_1_bias = None
            self.prepared_bias_variables = False
