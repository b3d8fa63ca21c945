"""Stopping criteria: when a row of a generation is finished.

A criterion is any callable ``criterion(input_ids, scores, **kwargs) -> BoolTensor (rows,)``
that is True for the rows that must stop. ``input_ids`` is the whole sequence so far
(prompt included), ``(rows, length)``; ``scores`` are the processed scores of the step,
``(rows, vocab)``. transformers' own StoppingCriteria objects are such callables, so they
can be mixed freely with these.

:func:`build_stopping_criteria` assembles the list a config asks for, in the reference's
order (max length, max time, stop strings, EOS, assistant confidence), and merges the
user's own criteria into it the way transformers 4.56.2 does.

Example::

    >>> crit = build_stopping_criteria(GenerationConfig(max_length=4, eos_token_id=2))
    >>> crit(torch.tensor([[5, 6, 2], [5, 6, 7]]), None)
    tensor([ True, False])
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch

from genlab.config import GenerationConfig
from genlab.ids import is_token_id
from genlab.processors.base import merge_with_builtins

__all__ = [
    "StoppingCriteria",
    "StoppingCriteriaList",
    "MaxLengthCriteria",
    "MaxTimeCriteria",
    "EosTokenCriteria",
    "StopStringCriteria",
    "ConfidenceCriteria",
    "build_stopping_criteria",
    "merge_criteria",
    "validate_stopping_criteria",
    "token_strings",
]


def _full(input_ids: torch.Tensor, value: bool) -> torch.BoolTensor:
    """A (rows,) bool tensor filled with ``value``, on ``input_ids``' device."""
    return torch.full((input_ids.shape[0],), value, dtype=torch.bool, device=input_ids.device)


class StoppingCriteria:
    """Base class: ``__call__(input_ids (rows, length), scores (rows, vocab)) -> (rows,)``."""

    def __call__(
        self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs
    ) -> torch.BoolTensor:
        raise NotImplementedError(f"{type(self).__name__} must implement __call__")


class StoppingCriteriaList(list):
    """A list of criteria; a row stops when any criterion says so.

    Example::

        >>> crit = StoppingCriteriaList([MaxLengthCriteria(3)])
        >>> crit(torch.zeros(2, 3, dtype=torch.long), None), crit.max_length
        (tensor([True, True]), 3)
    """

    def __call__(
        self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs
    ) -> torch.BoolTensor:
        is_done = _full(input_ids, False)  # (rows,)
        for criterion in self:
            is_done = is_done | criterion(input_ids, scores, **kwargs)
        return is_done

    @property
    def max_length(self) -> int | None:
        """max_length of the first MaxLengthCriteria (genlab's or transformers'), or None."""
        for criterion in self:
            if type(criterion).__name__ == "MaxLengthCriteria":
                return criterion.max_length
        return None


class MaxLengthCriteria(StoppingCriteria):
    """Stop every row once the sequence (prompt included) has ``max_length`` tokens.

    Warns when the sequence outgrows ``max_position_embeddings`` before that.

    Example::

        >>> MaxLengthCriteria(5)(torch.zeros(2, 5, dtype=torch.long), None)
        tensor([True, True])
    """

    def __init__(self, max_length: int, max_position_embeddings: int | None = None):
        if not isinstance(max_length, int) or isinstance(max_length, bool) or max_length < 1:
            raise ValueError(f"`max_length` must be an int >= 1, got {max_length!r}.")
        self.max_length = max_length
        self.max_position_embeddings = max_position_embeddings

    def __call__(self, input_ids, scores, **kwargs) -> torch.BoolTensor:
        cur_len = input_ids.shape[1]
        is_done = cur_len >= self.max_length
        limit = self.max_position_embeddings
        if limit is not None and not is_done and cur_len >= limit:
            warnings.warn(
                f"the sequence is now longer than the model's context ({limit} positions); "
                "the model may fail or degrade from here on.",
                UserWarning,
                stacklevel=2,
            )
        return _full(input_ids, is_done)


class MaxTimeCriteria(StoppingCriteria):
    """Stop every row once more than ``max_time`` seconds passed since
    ``initial_timestamp`` (default: when the criterion was made).

    Example::

        >>> MaxTimeCriteria(0.5, initial_timestamp=time.time() - 1)(torch.zeros(1, 1), None)
        tensor([True])
    """

    def __init__(self, max_time: float, initial_timestamp: float | None = None):
        if isinstance(max_time, bool) or not isinstance(max_time, (int, float)) or max_time <= 0:
            raise ValueError(f"`max_time` must be a number of seconds > 0, got {max_time!r}.")
        self.max_time = max_time
        self.initial_timestamp = time.time() if initial_timestamp is None else initial_timestamp

    def __call__(self, input_ids, scores, **kwargs) -> torch.BoolTensor:
        return _full(input_ids, time.time() - self.initial_timestamp > self.max_time)


class EosTokenCriteria(StoppingCriteria):
    """Stop the rows whose last token is one of the EOS ids.

    Example::

        >>> EosTokenCriteria([2, 3])(torch.tensor([[1, 2], [1, 4], [0, 3]]), None)
        tensor([ True, False,  True])
    """

    def __init__(self, eos_token_id: int | Sequence[int] | torch.Tensor):
        if isinstance(eos_token_id, torch.Tensor):
            ids = eos_token_id.reshape(-1).long()
        else:
            iterable = isinstance(eos_token_id, (list, tuple))
            values = list(eos_token_id) if iterable else [eos_token_id]
            if not values or not all(is_token_id(i) for i in values):
                raise ValueError(
                    "`eos_token_id` must be an int, a non-empty list of ints or a tensor, "
                    f"got {eos_token_id!r}."
                )
            ids = torch.tensor([int(i) for i in values], dtype=torch.long)
        self.eos_token_id = ids  # (n_eos,)

    def __call__(self, input_ids, scores, **kwargs) -> torch.BoolTensor:
        self.eos_token_id = self.eos_token_id.to(input_ids.device)
        return torch.isin(input_ids[:, -1], self.eos_token_id)


class ConfidenceCriteria(StoppingCriteria):
    """Assisted generation: stop drafting when the draft's probability of its last token
    falls below ``assistant_confidence_threshold``. ``scores`` is the tuple of per-step
    scores of the draft, as the reference passes it; row 0 decides for all rows."""

    def __init__(self, assistant_confidence_threshold: float):
        self.assistant_confidence_threshold = assistant_confidence_threshold

    def __call__(self, input_ids, scores, **kwargs) -> torch.BoolTensor:
        if not isinstance(scores, (tuple, list)) or not scores:
            raise ValueError(
                "is_assistant=True adds ConfidenceCriteria, which reads a draft model's "
                "per-step scores: genlab sets it on the assistant's config during assisted "
                "generation (assistant_model=...); do not set is_assistant on a run of your own"
            )
        probs = scores[-1].softmax(-1)  # (rows, vocab)
        p = probs[0, input_ids[0, -1]].item()
        return _full(input_ids, p < self.assistant_confidence_threshold)


# --------------------------------------------------------------------------------------
# Stop strings
# --------------------------------------------------------------------------------------

# Text put before a token when decoding it alone, so that tokenizers that add or drop a
# leading space for the first token (SentencePiece, BPE with prefix space) decode the
# token as it reads in the middle of a text. Same idea and prefix as the reference.
_STATIC_PREFIX = "abcdef"


def _encode_plain(tokenizer: Any, text: str) -> list[int]:
    """Token ids of ``text`` without special tokens, for the usual tokenizer APIs."""
    if hasattr(tokenizer, "encode"):
        try:
            out = tokenizer.encode(text, add_special_tokens=False)
        except TypeError:
            out = tokenizer.encode(text)
    else:
        out = tokenizer(text, add_special_tokens=False)["input_ids"]
    return list(out.ids if hasattr(out, "ids") else out)


class _TokenTexts:
    """id -> the text that token adds in the middle of a decoded sequence, computed on
    first use (a vocabulary has tens of thousands of tokens; a generation sees few)."""

    def __init__(self, tokenizer: Any):
        if not hasattr(tokenizer, "get_vocab"):
            raise ValueError(
                "stop strings need a tokenizer with get_vocab() (and convert_tokens_to_string() "
                f"or decode()); got {type(tokenizer).__name__}."
            )
        self._tokenizer = tokenizer
        self._id_to_token = {idx: tok for tok, idx in tokenizer.get_vocab().items()}
        prefix_ids = _encode_plain(tokenizer, _STATIC_PREFIX)
        if hasattr(tokenizer, "convert_tokens_to_string"):
            if hasattr(tokenizer, "convert_ids_to_tokens"):
                self._prefix_tokens = list(tokenizer.convert_ids_to_tokens(prefix_ids))
            else:
                self._prefix_tokens = [self._id_to_token[i] for i in prefix_ids]
            self._render = self._render_tokens
        elif hasattr(tokenizer, "decode"):
            self._prefix_ids = prefix_ids
            self._render = self._render_ids
        else:
            raise ValueError(
                "stop strings need a tokenizer with convert_tokens_to_string() or decode(); "
                f"got {type(tokenizer).__name__}."
            )
        self._cache: dict[int, str | None] = {}
        probe = next(iter(self._id_to_token), None)
        if probe is not None and _STATIC_PREFIX not in self._render(probe):
            raise ValueError(
                f"stop_strings cannot be used with this tokenizer ({type(tokenizer).__name__}): "
                f"it does not give back the text it encodes ({_STATIC_PREFIX!r} decodes to "
                f"{self._render(probe)!r}, e.g. a word-level vocabulary with an unknown token), "
                "so the text of each token is unknown. Stop on token ids instead "
                "(eos_token_id=[...] or a StoppingCriteria)."
            )

    def _render_tokens(self, token_id: int) -> str:
        token = self._id_to_token[token_id]
        return self._tokenizer.convert_tokens_to_string(self._prefix_tokens + [token])

    def _render_ids(self, token_id: int) -> str:
        ids = self._prefix_ids + [token_id]
        # keep special tokens and spaces exactly as the token's own text has them
        for kwargs in (
            {"skip_special_tokens": False, "clean_up_tokenization_spaces": False},
            {"skip_special_tokens": False},
            {},
        ):
            try:
                return self._tokenizer.decode(ids, **kwargs)
            except TypeError:
                continue
        raise ValueError(f"{type(self._tokenizer).__name__}.decode(ids) failed for id {token_id}")

    def __call__(self, token_id: int) -> str | None:
        """The token's text, or None for ids outside the vocabulary."""
        if token_id not in self._cache:
            if token_id not in self._id_to_token:
                self._cache[token_id] = None
            else:
                text = self._render(token_id)
                cut = text.index(_STATIC_PREFIX) + len(_STATIC_PREFIX)
                self._cache[token_id] = text[cut:]
        return self._cache[token_id]


def token_strings(tokenizer: Any) -> dict[int, str]:
    """Every vocabulary id mapped to the text it adds in the middle of a sequence
    ("Ġcat" -> " cat", "##s" -> "s"), as stop-string matching sees it.

    Example::

        (Not run as a test: it needs a GPT-2-style tokenizer (``tok`` with the token ``Ġcat``).)

        >>> token_strings(tok)[tok.convert_tokens_to_ids("Ġcat")]  # doctest: +SKIP
        ' cat'
    """
    texts = _TokenTexts(tokenizer)
    return {idx: texts(idx) for idx in sorted(texts._id_to_token)}


def _end_overlaps(token: str, stop: str) -> set[int]:
    """How many characters of ``stop``, counted from its end, the last token can complete.

    The stop string must end inside the last token: for every prefix of the token that
    either is a suffix of ``stop`` or contains the whole of ``stop`` at its end, the number
    of stop characters it covers (at most len(stop)).
    """
    out = set()
    for cut in range(1, len(token) + 1):
        head = token[:cut]
        if stop.endswith(head) if cut <= len(stop) else head.endswith(stop):
            out.add(min(cut, len(stop)))
    return out


def _fits_at(token: str, stop: str, matched: int) -> bool:
    """Whether ``token`` can sit right before the last ``matched`` characters of ``stop``
    (it may run past the start of ``stop``: only the overlapping part must agree)."""
    remaining = stop[: len(stop) - matched]
    return remaining.endswith(token) if len(token) <= len(remaining) else token.endswith(remaining)


def _can_end(stop: str, token_texts: Iterable[str | None]) -> bool:
    """Whether some token's text can end ``stop`` (see :func:`_end_overlaps`)."""
    return any(text and _end_overlaps(text, stop) for text in token_texts)


def _check_reachable(unreachable: list[str], stop_strings: tuple[str, ...]) -> None:
    """Stop strings that no token's text can end could never match. When none of them can,
    refuse them, as transformers 4.56.2 does; when only some cannot (the reference then
    ignores them silently), warn about those."""
    if not unreachable:
        return
    why = (
        "no token's text can end it: a byte-level tokenizer splits emoji, CJK and joined "
        "characters into byte pieces whose text alone is not a character, so such a string "
        "is never seen. Stop on token ids instead (eos_token_id=[...] or a StoppingCriteria "
        "of your own), or use a stop string of characters the tokenizer has as text."
    )
    if len(unreachable) == len(stop_strings):
        raise ValueError(
            f"stop_strings: {', '.join(map(repr, unreachable))} can never match with this "
            f"tokenizer (transformers 4.56.2 refuses them too): {why}"
        )
    warnings.warn(
        f"stop_strings: {', '.join(map(repr, unreachable))} will never match with this "
        f"tokenizer (the other stop strings work): {why}",
        UserWarning,
        stacklevel=4,
    )


class StopStringCriteria(StoppingCriteria):
    """Stop a row when its decoded text contains a stop string that ends inside its last
    token: the string may span several tokens, start inside an earlier token and end
    before the end of the last one ("st"+"op", "las"+"topper" both match "stop"), but a
    stop string that lies wholly before the last token does not match again.

    Matching works on each token's text (see :func:`token_strings`) and looks back at most
    ``max(len(s) for s in stop_strings)`` tokens, exactly as transformers'
    StopStringCriteria does; token texts are computed the first time a token is seen.
    Stop strings that no token's text can end (emoji or CJK text, which a byte-level
    tokenizer splits into byte pieces) are refused with a ValueError when none of the
    strings can match, as the reference does, and named in a UserWarning otherwise.

    Works with transformers tokenizers and with any object that has ``get_vocab()`` and
    either ``convert_tokens_to_string()`` (+ ``convert_ids_to_tokens()``) or ``decode()``,
    plus ``encode()`` (or ``__call__``); :meth:`from_token_strings` takes the texts directly.

    Example::

        >>> crit = StopStringCriteria.from_token_strings({0: "st", 1: "op", 2: "x"}, "stop")
        >>> crit(torch.tensor([[2, 0, 1], [0, 1, 2]]), None)
        tensor([ True, False])
    """

    def __init__(self, tokenizer: Any, stop_strings: str | Sequence[str]):
        texts = _TokenTexts(tokenizer)
        self._setup(stop_strings, texts)
        unreachable = []
        for stop in self.stop_strings:
            # the tokenizer's own last token of the string usually ends it: no vocabulary scan
            last = _encode_plain(tokenizer, stop)[-1:]
            if last and _end_overlaps(texts(last[0]) or "", stop):
                continue
            if not _can_end(stop, (texts(i) for i in texts._id_to_token)):
                unreachable.append(stop)
        _check_reachable(unreachable, self.stop_strings)

    @classmethod
    def from_token_strings(
        cls, token_texts: Mapping[int, str], stop_strings: str | Sequence[str]
    ) -> StopStringCriteria:
        """Build from ``{token_id: text}`` instead of a tokenizer."""
        self = cls.__new__(cls)
        texts = dict(token_texts)
        self._setup(stop_strings, texts.get)
        _check_reachable(
            [stop for stop in self.stop_strings if not _can_end(stop, texts.values())],
            self.stop_strings,
        )
        return self

    def _setup(self, stop_strings: str | Sequence[str], texts: Callable[[int], str | None]):
        if isinstance(stop_strings, str):
            stop_strings = [stop_strings]
        stop_strings = tuple(stop_strings)
        if not stop_strings or not all(isinstance(s, str) and s for s in stop_strings):
            raise ValueError(
                "`stop_strings` must be a non-empty string or a non-empty list of non-empty "
                f"strings, got {stop_strings!r}."
            )
        self.stop_strings = stop_strings
        self.maximum_token_len = max(len(s) for s in stop_strings)
        self._text = texts
        self._ends: dict[tuple[int, int], set[int]] = {}
        self._fits: dict[tuple[int, int, int], bool] = {}

    def _end_lengths(self, which: int, token_id: int) -> set[int]:
        key = (which, token_id)
        if key not in self._ends:
            text = self._text(token_id)
            self._ends[key] = (
                set() if text is None else _end_overlaps(text, self.stop_strings[which])
            )
        return self._ends[key]

    def _fits_token(self, which: int, token_id: int, matched: int) -> bool:
        key = (which, token_id, matched)
        if key not in self._fits:
            text = self._text(token_id)
            self._fits[key] = text is not None and _fits_at(text, self.stop_strings[which], matched)
        return self._fits[key]

    def _row_matches(self, row: list[int], which: int) -> bool:
        """Whether stop string ``which`` ends inside the last token of ``row``."""
        target = len(self.stop_strings[which])
        for matched in self._end_lengths(which, row[-1]):
            # walk back from the last token, adding whole tokens while they fit
            for token_id in reversed(row[:-1]):
                if matched >= target or not self._fits_token(which, token_id, matched):
                    break
                matched += len(self._text(token_id))
            if matched >= target:
                return True
        return False

    def __call__(self, input_ids, scores, **kwargs) -> torch.BoolTensor:
        window = input_ids[:, -self.maximum_token_len :].tolist()  # (rows, <= max stop len)
        done = [
            bool(row) and any(self._row_matches(row, k) for k in range(len(self.stop_strings)))
            for row in window
        ]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)


# --------------------------------------------------------------------------------------
# Assembling the list
# --------------------------------------------------------------------------------------


def merge_criteria(
    default_list: list, custom_list: Iterable | None, what: str = "stopping criteria"
):
    """The reference's merge of user objects into built-in ones
    (:func:`~genlab.processors.base.merge_with_builtins`): a user object of the same type
    takes the built-in's place (with a UserWarning); the others are appended.

    Returns ``default_list`` itself without user objects, else a new list of its type.
    """

    def replaced(custom: Any) -> str:
        return (
            f"the {what} {type(custom).__name__} you passed replaces the one built from "
            "the generation config; change the config fields instead to avoid this."
        )

    return merge_with_builtins(default_list, custom_list, replaced)


def build_stopping_criteria(
    config: GenerationConfig,
    *,
    tokenizer: Any = None,
    user_criteria: Iterable | None = None,
    max_position_embeddings: int | None = None,
) -> StoppingCriteriaList:
    """The criteria ``config`` asks for, in the reference's order, merged with the user's.

    ``config.max_length`` must already be the final total length (the engine sets it from
    max_new_tokens and the prompt length before calling this).

    Example::

        >>> cfg = GenerationConfig(max_length=10, eos_token_id=[2, 3], max_time=5.0)
        >>> [type(c).__name__ for c in build_stopping_criteria(cfg)]
        ['MaxLengthCriteria', 'MaxTimeCriteria', 'EosTokenCriteria']
    """
    criteria = StoppingCriteriaList()
    if config.max_length is not None:
        criteria.append(MaxLengthCriteria(config.max_length, max_position_embeddings))
    if config.max_time is not None:
        criteria.append(MaxTimeCriteria(config.max_time))
    if config.stop_strings is not None:
        if tokenizer is None:
            raise ValueError(
                f"`stop_strings`={config.stop_strings!r} need the model's tokenizer to be "
                "matched against the text; pass tokenizer=... to generate() (or set "
                "stop_strings=None)."
            )
        criteria.append(StopStringCriteria(tokenizer, config.stop_strings))
    if config.eos_token_id is not None:
        criteria.append(EosTokenCriteria(config.eos_token_id))
    threshold = getattr(config, "assistant_confidence_threshold", None)
    if getattr(config, "is_assistant", False) and threshold is not None and threshold > 0:
        criteria.append(ConfidenceCriteria(threshold))
    return merge_criteria(criteria, user_criteria)


def validate_stopping_criteria(
    stopping_criteria: StoppingCriteriaList, max_length: int
) -> StoppingCriteriaList:
    """A copy of the list that surely stops at ``max_length`` (warns if it already has a
    different MaxLengthCriteria)."""
    out = StoppingCriteriaList(stopping_criteria)
    current = out.max_length
    if current is None:
        out.append(MaxLengthCriteria(max_length))
    elif current != max_length:
        warnings.warn(
            f"the stopping criteria stop at max_length={current} but max_length={max_length} "
            "was asked for; the criteria win.",
            UserWarning,
            stacklevel=2,
        )
    return out
