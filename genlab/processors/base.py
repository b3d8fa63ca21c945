"""The processor protocol, the list that applies processors in order, and shared helpers.

A logits processor is any callable ``processor(input_ids, scores) -> scores`` where

* ``input_ids``: (rows, seq_len) every token so far, prompt included;
* ``scores``: (rows, vocab) float, logits in greedy/sampling mode, log-probs in beam mode.

It returns a *new* tensor (or ``scores`` itself when it changes nothing) and never writes
into ``scores``. A few processors need more than those two arguments (the Hamming
diversity processor takes ``current_tokens`` and ``beam_group_idx``); the list passes its
extra keyword arguments only to processors whose ``__call__`` has more than two parameters,
as transformers does, so transformers' own processor objects work unchanged.
"""

from __future__ import annotations

import copy
import functools
import inspect
import types
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar

import torch

from ..checks import is_int_like

# Class names (genlab's and transformers') of the processors that only run when sampling.
WARPER_NAMES = frozenset(
    {
        "TemperatureLogitsWarper",
        "TopKLogitsWarper",
        "TopPLogitsWarper",
        "MinPLogitsWarper",
        "TypicalLogitsWarper",
        "EpsilonLogitsWarper",
        "EtaLogitsWarper",
    }
)


def is_stateful(processor) -> bool:
    """True for a processor that keeps state between steps (``stateful = True``)."""
    return bool(getattr(processor, "stateful", False))


class LogitsProcessor:
    """Base class of genlab's processors.

    Subclasses set ``stage_name`` (a short label for traces and widgets, e.g. ``"top_k"``),
    ``is_warper`` (True for the sampling-only filters) and ``shown`` (the attribute names
    that :meth:`describe` prints), and implement ``__call__``.

    >>> class AddOne(LogitsProcessor):
    ...     stage_name = "add_one"
    ...     def __call__(self, input_ids, scores):
    ...         return scores + 1
    >>> AddOne()(torch.zeros(1, 2, dtype=torch.long), torch.zeros(1, 3)).tolist()
    [[1.0, 1.0, 1.0]]
    """

    stage_name: ClassVar[str] = "processor"
    is_warper: ClassVar[bool] = False
    shown: ClassVar[tuple[str, ...]] = ()
    #: True for a processor that keeps state between steps (a KV cache of its own, a
    #: watermark's context): a step's undo saves it with :meth:`get_state` and puts it back
    #: with :meth:`set_state`, and rewinding a run that holds one replays its steps
    stateful: ClassVar[bool] = False

    def get_state(self) -> dict:
        """What :meth:`set_state` needs to put this processor back as it is now: each
        attribute, shallow-copied (tensors and modules as they are, a KV cache with a
        checkpoint)."""
        from ..runtime.kv_cache import cache_checkpoint

        saved = {}
        for k, v in vars(self).items():
            if hasattr(v, "length") and hasattr(v, "crop"):  # a KV cache
                saved[k] = (v, cache_checkpoint(v))
            elif isinstance(v, (torch.Tensor, torch.nn.Module)) or k == "model":
                saved[k] = v
            else:
                saved[k] = copy.copy(v)
        return saved

    def set_state(self, state: dict) -> None:
        """Put back what :meth:`get_state` returned."""
        from ..runtime.kv_cache import cache_restore

        values = {}
        for k, v in state.items():
            if isinstance(v, tuple) and len(v) == 2 and hasattr(v[0], "crop"):
                cache_restore(v[0], v[1])
                v = v[0]
            values[k] = v
        vars(self).clear()
        vars(self).update(values)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        raise NotImplementedError(
            f"{type(self).__name__} is abstract: subclass LogitsProcessor and implement __call__"
        )

    def vocab_mask(self, token_ids: torch.Tensor, scores: torch.Tensor) -> torch.BoolTensor:
        """:func:`vocab_mask`, built once and reused while the token ids, the vocabulary
        size and the device stay the same (a decoding loop asks for the same mask at every
        step). The ids are compared by value: they may be edited in place or replaced."""
        key = (tuple(token_ids.tolist()), scores.shape[-1], scores.device)
        cached = self.__dict__.get("_vocab_mask_cache")
        if cached is not None and cached[0] == key:
            return cached[1]
        mask = vocab_mask(token_ids, scores)
        self._vocab_mask_cache = (key, mask)
        return mask

    def describe(self) -> str:
        """A one-line label with the settings, e.g. ``"top_k(top_k=50)"``."""
        parts = [f"{name}={_short(getattr(self, name, None))}" for name in self.shown]
        return f"{self.stage_name}({', '.join(parts)})"

    def __repr__(self) -> str:
        return f"{type(self).__name__}<{self.describe()}>"


def _short(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        value = value.tolist()
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def stage_name_of(processor: Any) -> str:
    """The label of any processor, its one name in hook points (``processor.<label>``),
    traces, plots and ``sampler_order``: genlab's ``stage_name`` (the config field a user
    types, ``"top_k"``), else its class name (a transformers or hand-written processor).

    >>> stage_name_of(genlab.processors.TopKLogitsWarper(5)), stage_name_of(lambda i, s: s)
    ('top_k', 'function')
    """
    name = getattr(processor, "stage_name", None)
    if not isinstance(name, str) or not name or name == LogitsProcessor.stage_name:
        return type(processor).__name__  # no label of its own: the class names it
    return name


def is_warper(processor: Any) -> bool:
    """True for sampling-only filters, genlab's or transformers' (by class name)."""
    flag = getattr(processor, "is_warper", None)
    if isinstance(flag, bool):
        return flag
    return type(processor).__name__ in WARPER_NAMES


def extra_call_parameters(processor: Any) -> list[str]:
    """Names of the parameters a processor takes after ``(input_ids, scores)``.

    >>> class Grouped:
    ...     def __call__(self, input_ids, scores, beam_group_idx):
    ...         return scores
    >>> extra_call_parameters(Grouped())
    ['beam_group_idx']
    """
    call = type(processor).__call__
    if isinstance(call, types.FunctionType):  # a class's method: read its signature once
        return list(_extra_parameters_of_method(call))
    params = list(inspect.signature(processor.__call__).parameters)
    return params[2:]


@functools.lru_cache(maxsize=512)
def _extra_parameters_of_method(call: types.FunctionType) -> tuple[str, ...]:
    # (self, input_ids, scores, ...) -> the names after scores (asked on every step)
    return tuple(inspect.signature(call).parameters)[3:]


def call_processor(
    processor: Any, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any
) -> torch.FloatTensor:
    """Apply one processor; keyword arguments reach it only if its ``__call__`` takes more
    than two parameters, and then all of those must be among them."""
    extra = extra_call_parameters(processor)
    if not extra:
        return processor(input_ids, scores)
    missing = [name for name in extra if name not in kwargs]
    if missing:
        raise ValueError(
            f"{type(processor).__name__} needs the keyword arguments {extra} when it is called "
            f"from a LogitsProcessorList, but {missing} were not given: pass them to the list call"
        )
    return processor(input_ids, scores, **kwargs)


class LogitsProcessorList(list):
    """A list of processors applied in order: ``scores = processors(input_ids, scores)``.

    >>> from genlab.processors import TemperatureLogitsWarper
    >>> procs = LogitsProcessorList([TemperatureLogitsWarper(2.0)])
    >>> procs(torch.tensor([[0]]), torch.tensor([[2.0, 4.0]])).tolist()
    [[1.0, 2.0]]
    """

    def __call__(
        self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any
    ) -> torch.FloatTensor:
        # input_ids: (rows, seq_len); scores: (rows, vocab) -> (rows, vocab)
        for processor in self:
            scores = call_processor(processor, input_ids, scores, **kwargs)
        return scores

    def stage_names(self) -> list[str]:
        """The label of each processor, in order."""
        return [stage_name_of(p) for p in self]


def _same_kind(custom: Any, default: Any) -> bool:
    """Same class, or transformers' class of the same name as a genlab built-in (it would
    replace the built-in one in transformers)."""
    if type(custom) is type(default):
        return True
    module = type(custom).__module__ or ""
    return module.startswith("transformers.") and type(custom).__name__ == type(default).__name__


def merge_with_builtins(
    defaults: list, custom: Iterable[Any] | None, replaced: Callable[[Any], str]
) -> list:
    """The reference's merge of user objects (logits processors or stopping criteria) into
    the built-in ones: each built-in object is replaced, in its slot, by the first user
    object of the same kind, warning ``replaced(user_object)`` (a UserWarning pointing at
    the caller of the public function that called this one); the user objects not placed
    that way are appended after all the built-in ones, in the user's order.

    Returns ``defaults`` itself when there are no user objects, else a new list of
    ``type(defaults)``.

    >>> class Cap(LogitsProcessor): ...
    >>> built, mine, extra = Cap(), Cap(), LogitsProcessor()
    >>> import warnings
    >>> with warnings.catch_warnings(record=True):
    ...     merged = merge_with_builtins(LogitsProcessorList([built]), [extra, mine], str)
    >>> [m is x for m, x in zip(merged, [mine, extra], strict=True)]
    [True, True]
    """
    custom = list(custom or [])
    if not custom:
        return defaults
    merged = type(defaults)()
    for default in defaults:
        replacement = next((c for c in custom if _same_kind(c, default)), None)
        if replacement is None:
            merged.append(default)
            continue
        # stacklevel 4: this function, the public merge, its builder, the builder's caller
        warnings.warn(replaced(replacement), UserWarning, stacklevel=4)
        merged.append(replacement)
    for obj in custom:
        if not any(obj is placed for placed in merged):
            merged.append(obj)
    return merged


# ---------------------------------------------------------------------------------------
# argument checks and conversions shared by the processor families


def token_id_tensor(
    name: str, token_ids: int | Sequence[int] | torch.Tensor, device: Any = "cpu"
) -> torch.LongTensor:
    """One id or several as a 1-D LongTensor, checked to be non-negative integers.

    >>> token_id_tensor("eos_token_id", 2).tolist()
    [2]
    """
    if isinstance(token_ids, torch.Tensor):
        ids = token_ids
    else:
        if isinstance(token_ids, int) and not isinstance(token_ids, bool):
            token_ids = [token_ids]
        values = list(token_ids) if isinstance(token_ids, Iterable) else None
        if values is None or not all(is_int_like(v) for v in values):
            raise ValueError(
                f"`{name}` must be a token id or a list of token ids (integers >= 0), "
                f"got {token_ids!r}"
            )
        ids = torch.tensor([int(v) for v in values], dtype=torch.long, device=device)
    if ids.is_floating_point() or (ids < 0).any():
        raise ValueError(f"`{name}` must hold integer token ids >= 0, got {ids.tolist()!r}")
    return ids.reshape(-1)


def vocab_mask(token_ids: torch.Tensor, scores: torch.Tensor) -> torch.BoolTensor:
    """(vocab,) True at ``token_ids``: the mask the suppressing processors apply."""
    size = scores.shape[-1]
    ids = token_ids.to(scores.device)
    mask = torch.zeros(size, dtype=torch.bool, device=scores.device)
    mask[ids[ids < size]] = True  # ids past the vocabulary mark nothing
    return mask
