"""Penalties on repetition: of tokens, of n-grams, of the prompt, across beam groups, and
the length penalty that pushes EOS up after a given length.

All processors take ``input_ids`` (rows, seq_len) and ``scores`` (rows, vocab) and return
a new (rows, vocab) tensor.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import torch

from ..checks import check_int, check_real
from .base import LogitsProcessor, token_id_tensor


def _penalize(score: torch.Tensor, penalty: float) -> torch.Tensor:
    # lower a token's odds whatever its sign: multiply negatives, divide positives
    return torch.where(score < 0, score * penalty, score / penalty)


class RepetitionPenaltyLogitsProcessor(LogitsProcessor):
    """Divide positive and multiply negative scores of every token already in ``input_ids``
    (prompt included, unless ``prompt_ignore_length`` skips the first tokens), once per token.

    penalty > 1 discourages repeats, 0 < penalty < 1 encourages them.

    >>> p = RepetitionPenaltyLogitsProcessor(2.0)
    >>> p(torch.tensor([[1, 2]]), torch.tensor([[1.0, 4.0, -4.0]])).tolist()
    [[1.0, 2.0, -8.0]]
    """

    stage_name = "repetition_penalty"
    shown = ("penalty", "prompt_ignore_length")

    def __init__(self, penalty: float, prompt_ignore_length: int | None = None):
        self.penalty = check_real(
            "repetition_penalty",
            penalty,
            allowed="a float > 0 (1.0 = no penalty)",
            ok=lambda v: v > 0,
        )
        if prompt_ignore_length is not None:
            prompt_ignore_length = check_int(
                "prompt_ignore_length", prompt_ignore_length, minimum=0
            )
        self.prompt_ignore_length = prompt_ignore_length

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.prompt_ignore_length:
            input_ids = input_ids[:, self.prompt_ignore_length :]
        if input_ids.dim() == 1:
            input_ids = input_ids.unsqueeze(1)
        seen = torch.gather(scores, 1, input_ids)  # (rows, seq_len)
        return scores.scatter(1, input_ids, _penalize(seen, self.penalty))


class EncoderRepetitionPenaltyLogitsProcessor(LogitsProcessor):
    """The inverse of the repetition penalty, for tokens of the prompt (``encoder_input_ids``,
    (rows, prompt_len)): penalty > 1 makes them *more* likely.

    >>> p = EncoderRepetitionPenaltyLogitsProcessor(2.0, torch.tensor([[1]]))
    >>> p(torch.tensor([[0]]), torch.tensor([[1.0, 4.0, -4.0]])).tolist()
    [[1.0, 8.0, -4.0]]
    """

    stage_name = "encoder_repetition_penalty"
    shown = ("encoder_repetition_penalty",)

    def __init__(self, penalty: float, encoder_input_ids: torch.LongTensor):
        value = check_real(
            "encoder_repetition_penalty",
            penalty,
            allowed="a float > 0 (1.0 = no penalty)",
            ok=lambda v: v > 0,
        )
        self.encoder_repetition_penalty = value  # as given (the config field)
        # as in the reference: the reciprocal, which the scores are penalized with
        self.penalty = 1 / value
        self.encoder_input_ids = encoder_input_ids

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        index = self.encoder_input_ids.to(scores.device)
        seen = torch.gather(scores, 1, index)
        return scores.scatter(1, index, _penalize(seen, self.penalty))


def ngram_table(tokens: Sequence[int], n: int) -> dict[tuple[int, ...], set[int]]:
    """Map every (n-1)-token prefix found in ``tokens`` to the tokens that followed it.

    >>> ngram_table([5, 6, 5, 7], 2)
    {(5,): {6, 7}, (6,): {5}}
    """
    table: dict[tuple[int, ...], set[int]] = {}
    for start in range(len(tokens) - n + 1):
        prefix = tuple(tokens[start : start + n - 1])
        table.setdefault(prefix, set()).add(tokens[start + n - 1])
    return table


def ngram_lists(tokens: Sequence[int], n: int) -> dict[tuple[int, ...], list[int]]:
    """Like :func:`ngram_table`, with the following tokens listed in order of occurrence
    (repeats kept): the form of the reference's ``generated_ngrams``.

    >>> ngram_lists([5, 6, 5, 6], 2)
    {(5,): [6, 6], (6,): [5]}
    """
    table: dict[tuple[int, ...], list[int]] = {}
    for start in range(len(tokens) - n + 1):
        table.setdefault(tuple(tokens[start : start + n - 1]), []).append(tokens[start + n - 1])
    return table


def banned_next_tokens(
    table: dict[tuple[int, ...], Collection[int]], tokens: Sequence[int], n: int
) -> list[int]:
    """Tokens that would complete an n-gram of ``table`` after the end of ``tokens``.

    >>> banned_next_tokens({(5,): {6}}, [1, 5], 2)
    [6]
    """
    if len(tokens) < n - 1:
        return []
    prefix = tuple(tokens[len(tokens) - n + 1 :])
    return sorted(set(table.get(prefix, ())))


def _ban(scores: torch.Tensor, banned_per_row: list[list[int]]) -> torch.Tensor:
    out = scores.clone()
    for row, banned in enumerate(banned_per_row):
        out[row, banned] = -float("inf")
    return out


class NoRepeatNGramLogitsProcessor(LogitsProcessor):
    """Forbid (score -inf) any token that would repeat an n-gram already in the row
    (prompt included).

    >>> p = NoRepeatNGramLogitsProcessor(2)
    >>> p(torch.tensor([[1, 2, 1]]), torch.zeros(1, 3)).tolist()
    [[0.0, 0.0, -inf]]
    """

    stage_name = "no_repeat_ngram"
    shown = ("ngram_size",)

    def __init__(self, ngram_size: int):
        self.ngram_size = check_int("no_repeat_ngram_size", ngram_size, minimum=1)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        n = self.ngram_size
        banned = []
        for row in input_ids[: scores.shape[0]].tolist():
            banned.append(banned_next_tokens(ngram_table(row, n), row, n))
        return _ban(scores, banned)


class EncoderNoRepeatNGramLogitsProcessor(LogitsProcessor):
    """Forbid any token that would repeat an n-gram of the prompt (``encoder_input_ids``,
    (batch, prompt_len)); rows of ``scores`` are the batch's beams, batch-major.

    >>> p = EncoderNoRepeatNGramLogitsProcessor(2, torch.tensor([[1, 2]]))
    >>> p(torch.tensor([[0, 1]]), torch.zeros(1, 3)).tolist()
    [[0.0, 0.0, -inf]]
    """

    stage_name = "encoder_no_repeat_ngram"
    shown = ("ngram_size",)

    def __init__(self, encoder_ngram_size: int, encoder_input_ids: torch.LongTensor):
        self.ngram_size = check_int("encoder_no_repeat_ngram_size", encoder_ngram_size, minimum=1)
        if encoder_input_ids.dim() == 1:
            encoder_input_ids = encoder_input_ids.unsqueeze(0)
        self.batch_size = encoder_input_ids.shape[0]
        # per prompt, as the reference keeps them: (n-1)-token prefix -> tokens that followed
        self.generated_ngrams = [
            ngram_lists(row, self.ngram_size) for row in encoder_input_ids.tolist()
        ]

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        rows = scores.shape[0]
        beams_per_prompt = rows // self.batch_size
        banned = [
            banned_next_tokens(
                self.generated_ngrams[row // beams_per_prompt], tokens, self.ngram_size
            )
            for row, tokens in enumerate(input_ids[:rows].tolist())
        ]
        return _ban(scores, banned)


class HammingDiversityLogitsProcessor(LogitsProcessor):
    """Group beam search: lower each token's score in the current beam group by
    ``diversity_penalty`` times the number of earlier groups' beams (same prompt) that
    chose it at this step.

    ``__call__(input_ids, scores, current_tokens, beam_group_idx)``: ``scores`` are the
    current group's rows (batch * group_size, vocab), ``current_tokens`` (batch * num_beams,)
    the tokens chosen so far at this step by every beam.

    >>> p = HammingDiversityLogitsProcessor(1.0, num_beams=2, num_beam_groups=2)
    >>> p(None, torch.zeros(1, 3), torch.tensor([2, 0]), 1).tolist()
    [[0.0, 0.0, -1.0]]
    """

    stage_name = "hamming_diversity"
    shown = ("diversity_penalty", "num_beams", "num_beam_groups")

    def __init__(self, diversity_penalty: float, num_beams: int, num_beam_groups: int):
        self.diversity_penalty = check_real(
            "diversity_penalty", diversity_penalty, allowed="a float > 0", ok=lambda v: v > 0
        )
        self.num_beams = check_int("num_beams", num_beams, minimum=2)
        self.num_beam_groups = check_int("num_beam_groups", num_beam_groups, minimum=2)
        if num_beam_groups > num_beams:
            raise ValueError(
                f"`num_beam_groups` must be <= num_beams ({num_beams}), got {num_beam_groups}"
            )
        self.group_size = num_beams // num_beam_groups

    def __call__(
        self,
        input_ids: torch.LongTensor,
        scores: torch.FloatTensor,
        current_tokens: torch.LongTensor,
        beam_group_idx: int,
    ) -> torch.FloatTensor:
        # scores: (batch * group_size, vocab); current_tokens: (batch * num_beams,)
        first_beam = beam_group_idx * self.group_size
        if first_beam == 0:
            return scores
        last_beam = min(first_beam + self.group_size, self.num_beams)
        group_size = last_beam - first_beam
        vocab = scores.shape[-1]
        out = scores.clone()
        for b in range(current_tokens.shape[0] // self.num_beams):
            start = b * self.num_beams
            earlier = current_tokens[start : start + first_beam]
            counts = torch.bincount(earlier, minlength=vocab).to(scores.device)  # (vocab,)
            out[b * group_size : (b + 1) * group_size] -= self.diversity_penalty * counts
        return out


class ExponentialDecayLengthPenalty(LogitsProcessor):
    """After ``start_index`` generated tokens, raise the EOS scores by
    ``|score| * (decay_factor ** (tokens past start) - 1)`` so generation tends to end.

    ``exponential_decay_length_penalty`` is ``(start_index, decay_factor)``; the start is
    counted from ``input_ids_seq_length`` (the prompt length).

    >>> p = ExponentialDecayLengthPenalty((0, 2.0), eos_token_id=0, input_ids_seq_length=1)
    >>> p(torch.tensor([[5, 6]]), torch.tensor([[-1.0, 3.0]])).tolist()
    [[0.0, 3.0]]
    """

    stage_name = "exponential_decay_length_penalty"
    shown = ("regulation_start", "regulation_factor", "eos_token_id")

    def __init__(
        self,
        exponential_decay_length_penalty: tuple[int, float],
        eos_token_id: int | list[int] | torch.Tensor,
        input_ids_seq_length: int,
    ):
        pair = exponential_decay_length_penalty
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise ValueError(
                "`exponential_decay_length_penalty` must be a pair (start_index, decay_factor), "
                f"got {pair!r}"
            )
        start_index = check_int("exponential_decay_length_penalty[0]", pair[0], minimum=0)
        self.regulation_factor = pair[1]
        check_real(
            "exponential_decay_length_penalty[1]",
            pair[1],
            allowed="a number (the decay factor, e.g. 1.05)",
            ok=lambda v: True,
        )
        if eos_token_id is None:
            raise ValueError(
                "`exponential_decay_length_penalty` needs `eos_token_id`, got None: set the EOS id"
            )
        self.regulation_start = start_index + input_ids_seq_length
        self.eos_token_id = token_id_tensor("eos_token_id", eos_token_id)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        past_start = input_ids.shape[-1] - self.regulation_start
        if past_start <= 0:
            return scores
        eos = self.eos_token_id.to(scores.device)
        boost = torch.abs(scores[:, eos]) * (pow(self.regulation_factor, past_start) - 1)
        penalties = torch.zeros_like(scores)
        penalties[:, eos] = boost
        return scores + penalties
