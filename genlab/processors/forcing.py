"""Processors that force or forbid tokens outright: minimum lengths (no EOS yet), forced
first/last tokens, suppressed tokens, and prefix constraints.

All take ``input_ids`` (rows, seq_len) and ``scores`` (rows, vocab) and return a
(rows, vocab) tensor without writing into ``scores``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch

from ..checks import check_int
from .base import LogitsProcessor, token_id_tensor


class MinLengthLogitsProcessor(LogitsProcessor):
    """EOS gets -inf while the whole sequence (prompt included) is shorter than
    ``min_length``.

    >>> p = MinLengthLogitsProcessor(3, eos_token_id=0)
    >>> p(torch.tensor([[5, 6]]), torch.zeros(1, 2)).tolist()
    [[-inf, 0.0]]
    """

    stage_name = "min_length"
    shown = ("min_length", "eos_token_id")

    def __init__(self, min_length: int, eos_token_id: int | list[int] | torch.Tensor, device="cpu"):
        self.min_length = check_int("min_length", min_length, minimum=0)
        self.eos_token_id = token_id_tensor("eos_token_id", eos_token_id, device)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if input_ids.shape[-1] < self.min_length:
            return torch.where(self.vocab_mask(self.eos_token_id, scores), -math.inf, scores)
        return scores.clone()


class MinNewTokensLengthLogitsProcessor(LogitsProcessor):
    """EOS gets -inf until ``min_new_tokens`` tokens follow the first
    ``prompt_length_to_skip`` tokens.

    >>> p = MinNewTokensLengthLogitsProcessor(2, 1, eos_token_id=0)
    >>> p(torch.tensor([[5, 6]]), torch.zeros(1, 2)).tolist()  # no new token yet
    [[-inf, 0.0]]
    """

    stage_name = "min_new_tokens"
    shown = ("min_new_tokens", "prompt_length_to_skip", "eos_token_id")

    def __init__(
        self,
        prompt_length_to_skip: int,
        min_new_tokens: int,
        eos_token_id: int | list[int] | torch.Tensor,
        device="cpu",
    ):
        self.prompt_length_to_skip = check_int(
            "prompt_length_to_skip", prompt_length_to_skip, minimum=0
        )
        self.min_new_tokens = check_int("min_new_tokens", min_new_tokens, minimum=0)
        self.eos_token_id = token_id_tensor("eos_token_id", eos_token_id, device)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        new_tokens = input_ids.shape[-1] - self.prompt_length_to_skip
        if new_tokens < self.min_new_tokens:
            return torch.where(self.vocab_mask(self.eos_token_id, scores), -math.inf, scores)
        return scores.clone()


class PrefixConstrainedLogitsProcessor(LogitsProcessor):
    """Only the tokens returned by ``prefix_allowed_tokens_fn(batch_id, row_ids)`` stay
    possible (the others get -inf); rows are ``num_beams`` per prompt, batch-major.

    >>> p = PrefixConstrainedLogitsProcessor(lambda b, ids: [1], num_beams=1)
    >>> p(torch.tensor([[0]]), torch.zeros(1, 3)).tolist()
    [[-inf, 0.0, -inf]]
    """

    stage_name = "prefix_allowed_tokens"
    shown = ("num_beams",)

    def __init__(
        self, prefix_allowed_tokens_fn: Callable[[int, torch.Tensor], list[int]], num_beams
    ):
        if not callable(prefix_allowed_tokens_fn):
            raise ValueError(
                "`prefix_allowed_tokens_fn` must be a function (batch_id, input_ids) -> list of "
                f"allowed token ids, got {prefix_allowed_tokens_fn!r}"
            )
        self.prefix_allowed_tokens_fn = prefix_allowed_tokens_fn
        self.num_beams = check_int("num_beams", num_beams, minimum=1)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        mask = torch.full_like(scores, -math.inf)  # 0 where allowed
        for row in range(input_ids.shape[0] // self.num_beams * self.num_beams):
            batch_id = row // self.num_beams
            allowed = self.prefix_allowed_tokens_fn(batch_id, input_ids[row])
            if len(allowed) == 0:
                raise ValueError(
                    f"`prefix_allowed_tokens_fn` returned no allowed token for batch_id {batch_id} "
                    f"(row {row}): the constraint cannot be met; return at least one token id"
                )
            mask[row, allowed] = 0
        return scores + mask


class ForcedBOSTokenLogitsProcessor(LogitsProcessor):
    """At the first generated position (sequence length 1), only ``bos_token_id`` is
    possible: it gets 0, every other token -inf.

    >>> ForcedBOSTokenLogitsProcessor(1)(torch.tensor([[0]]), torch.zeros(1, 3)).tolist()
    [[-inf, 0.0, -inf]]
    """

    stage_name = "forced_bos"
    shown = ("bos_token_id",)

    def __init__(self, bos_token_id: int):
        self.bos_token_id = check_int("forced_bos_token_id", bos_token_id, minimum=0)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if input_ids.shape[-1] != 1:
            return scores
        forced = torch.full_like(scores, -math.inf)
        forced[:, self.bos_token_id] = 0
        return forced


class ForcedEOSTokenLogitsProcessor(LogitsProcessor):
    """When the next token is the last one allowed (length ``max_length - 1``), only EOS is
    possible: EOS ids get 0, every other token -inf.

    >>> p = ForcedEOSTokenLogitsProcessor(3, eos_token_id=2)
    >>> p(torch.tensor([[0, 1]]), torch.zeros(1, 3)).tolist()
    [[-inf, -inf, 0.0]]
    """

    stage_name = "forced_eos"
    shown = ("max_length", "eos_token_id")

    def __init__(self, max_length: int, eos_token_id: int | list[int] | torch.Tensor, device="cpu"):
        self.max_length = check_int("max_length", max_length, minimum=0)
        self.eos_token_id = token_id_tensor("forced_eos_token_id", eos_token_id, device)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if input_ids.shape[-1] != self.max_length - 1:
            return scores
        forced = torch.full_like(scores, -math.inf)
        forced[:, self.eos_token_id.to(scores.device)] = 0
        return forced


class SuppressTokensLogitsProcessor(LogitsProcessor):
    """The listed tokens always get -inf.

    >>> SuppressTokensLogitsProcessor([0])(torch.tensor([[1]]), torch.zeros(1, 2)).tolist()
    [[-inf, 0.0]]
    """

    stage_name = "suppress_tokens"
    shown = ("suppress_tokens",)

    def __init__(self, suppress_tokens: Iterable[int], device="cpu"):
        self.suppress_tokens = token_id_tensor("suppress_tokens", list(suppress_tokens), device)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        return torch.where(self.vocab_mask(self.suppress_tokens, scores), -float("inf"), scores)


class SuppressTokensAtBeginLogitsProcessor(LogitsProcessor):
    """The listed tokens get -inf at one step only: when the sequence length equals
    ``begin_index`` (the first generated token).

    >>> p = SuppressTokensAtBeginLogitsProcessor([0], begin_index=1)
    >>> p(torch.tensor([[1]]), torch.zeros(1, 2)).tolist()
    [[-inf, 0.0]]
    """

    stage_name = "begin_suppress_tokens"
    shown = ("begin_suppress_tokens", "begin_index")

    def __init__(self, begin_suppress_tokens: Iterable[int], begin_index: int, device="cpu"):
        self.begin_suppress_tokens = token_id_tensor(
            "begin_suppress_tokens", list(begin_suppress_tokens), device
        )
        self.begin_index = check_int("begin_index", begin_index, minimum=0)

    def set_begin_index(self, begin_index: int) -> None:
        self.begin_index = check_int("begin_index", begin_index, minimum=0)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if input_ids.shape[-1] != self.begin_index:
            return scores
        mask = self.vocab_mask(self.begin_suppress_tokens, scores)
        return torch.where(mask, -float("inf"), scores)
