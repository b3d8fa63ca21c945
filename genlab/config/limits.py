"""Upper bounds a machine can honour: what a field's value costs, derived from the model
and the memory, checked before a run allocates anything.

The field table (:mod:`genlab.config.fields`) says what a value means (``num_beams >= 1``);
:class:`Limits` says how much of it one model on one machine can take
(``num_beams <= 64``, ``max_new_tokens <= 8192`` for the demo model). The panels refuse a
value over its bound with the reason, and refuse it before anything is allocated, also
from code: ``BeamExplorer(lm, "Hi", num_beams=10**9)`` raises a ValueError instead of
filling the memory.

>>> lim = model_limits(lm.info, memory=2 * 10**9)  # the demo model, 2 GB for a run
>>> lim.bounds()["max_new_tokens"], lim.bounds()["top_k"], lim.bounds()["num_beams"]
(8192, 49152, 54)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ..checks import is_real as _is_real

#: fields counted in tokens: none can exceed the text the model reads (its positions)
LENGTH_BOUND_FIELDS = (
    "max_length",
    "max_new_tokens",
    "min_length",
    "min_new_tokens",
    "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size",
    "num_assistant_tokens",
    "prompt_lookup_num_tokens",
    "max_matching_ngram_size",
    "prefill_chunk_size",
    "assistant_lookbehind",
    "target_lookbehind",
    "dry_allowed_length",
    "dry_penalty_last_n",
)
#: fields counted in rows (each row holds its own scores and KV cache)
ROW_FIELDS = ("num_beams", "num_return_sequences")
#: most rows a run may have, whatever the memory: on a 2-core CPU, 64 rows of the demo
#: model already take seconds per token
MAX_ROWS = 64
#: positions assumed for a model that does not say how many it reads
DEFAULT_CONTEXT = 4096
#: score tensors of a row's vocabulary alive at once in a step (logits, processed scores,
#: probabilities, beam candidates ...), each float32
SCORE_COPIES = 8
#: the bound of top_k for a small vocabulary (a top_k past the vocabulary keeps every
#: token: harmless, and 50 is the default even for a table model of 17 tokens)
TOP_K_FLOOR = 256
#: tokens per row assumed when a row bound is stated on its own (the length fields have
#: their own bound; the pair is checked together by :meth:`Limits.check`)
ROW_BOUND_TOKENS = 256


def available_memory() -> int:
    """Bytes of memory the system can give now (Linux: ``MemAvailable``; else the free
    pages; 4 GiB when neither can be read)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return 4 * 2**30


def _gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e8 else f"{n / 1e6:.0f} MB"


@dataclass(frozen=True)
class Limits:
    """What one model on one machine can honour: the upper bound of each field whose value
    costs memory or time, and the check of a whole config against them (fields interact:
    rows times length is what fills the memory).

    vocab_size: tokens of the vocabulary; context: positions the model reads; row_token_bytes:
    KV-cache bytes one row holds per token; row_step_bytes: score bytes one row uses per
    step; memory: bytes a run may use (half of what the machine has available).

    >>> lim = Limits(vocab_size=100, context=512, row_token_bytes=1000, row_step_bytes=3200,
    ...              memory=10**8)
    >>> lim.bounds()["top_k"], lim.bounds()["max_new_tokens"], lim.bounds()["num_beams"]
    (256, 512, 64)
    >>> lim.check_value("num_beams", 10**9)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: `num_beams` = 1000000000 is over 64, the most rows this machine can ...
    """

    vocab_size: int
    context: int
    row_token_bytes: int
    row_step_bytes: int
    memory: int

    def row_bound(self, tokens: int = ROW_BOUND_TOKENS) -> int:
        """Most rows that fit the memory with ``tokens`` tokens each (at most MAX_ROWS)."""
        per_row = self.row_step_bytes + self.row_token_bytes * max(1, tokens)
        return max(1, min(MAX_ROWS, self.memory // max(1, per_row)))

    def bounds(self) -> dict[str, int]:
        """The upper bound of each bounded field, by name."""
        out = {name: self.context for name in LENGTH_BOUND_FIELDS}
        out["top_k"] = max(self.vocab_size, TOP_K_FLOOR)
        rows = self.row_bound()
        out.update({name: rows for name in ROW_FIELDS})
        out["num_beam_groups"] = rows
        return out

    def reason(self, name: str) -> str:
        """Why ``name`` has its bound, in words."""
        if name in LENGTH_BOUND_FIELDS:
            return f"the longest text the model reads ({self.context:,} positions)"
        if name == "top_k":
            return (
                f"past the vocabulary ({self.vocab_size:,} tokens) a larger top_k keeps "
                "every token, as that does"
            )
        return (
            f"the most rows this machine can hold ({_gb(self.memory)} for a run, "
            f"{ROW_BOUND_TOKENS} tokens each; at most {MAX_ROWS} on a CPU)"
        )

    def check_value(self, name: str, value: Any) -> None:
        """ValueError naming ``name``, its bound and the reason when ``value`` is over it."""
        bound = self.bounds().get(name)
        if bound is None or not _is_real(value) or value <= bound:
            return
        raise ValueError(
            f"`{name}` = {value!r} is over {bound:,}, {self.reason(name)}: "
            f"choose {bound:,} or less."
        )

    def check(self, config: Any, prompt_length: int = 0) -> None:
        """Check every bounded field of ``config`` (an object with the fields' attributes)
        and the memory its rows and length need together; ValueError names the fields and
        the fix. Nothing is allocated."""
        for name in self.bounds():
            self.check_value(name, getattr(config, name, None))
        beams = getattr(config, "num_beams", None) or 1
        returned = getattr(config, "num_return_sequences", None) or 1
        rows = beams if beams > 1 else returned
        new = getattr(config, "max_new_tokens", None)
        length = prompt_length + new if new is not None else getattr(config, "max_length", 0)
        length = max(1, int(length or 0))
        need = rows * (self.row_step_bytes + self.row_token_bytes * length)
        if need > self.memory:
            which = "num_beams" if beams > 1 else "num_return_sequences"
            size = "max_new_tokens" if new is not None else "max_length"
            raise ValueError(
                f"`{which}` = {rows} with `{size}` = {length - prompt_length if new else length}"
                f" needs about {_gb(need)} (scores and KV cache); a run may use about "
                f"{_gb(self.memory)} here: lower {which} or {size}."
            )


def model_limits(info: Any, memory: int | None = None) -> Limits:
    """The :class:`Limits` of a model (a ``ModelInfo``: vocab_size, max_position_embeddings,
    num_hidden_layers, hidden_size) on this machine; ``memory``: bytes a run may use
    (default: half of :func:`available_memory`)."""
    vocab = int(getattr(info, "vocab_size", 0) or 1)
    context = int(getattr(info, "max_position_embeddings", None) or DEFAULT_CONTEXT)
    layers = int(getattr(info, "num_hidden_layers", 0) or 1)
    hidden = int(getattr(info, "hidden_size", 0) or 1)
    return Limits(
        vocab_size=vocab,
        context=context,
        row_token_bytes=2 * layers * hidden * 4,  # keys and values, float32 (at most)
        row_step_bytes=SCORE_COPIES * vocab * 4,
        memory=int(memory if memory is not None else available_memory() // 2),
    )
