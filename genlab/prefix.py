"""Reusing a prompt's keys and values between runs: :class:`PrefixCache`.

Exploring means re-running the same prompt with other settings (temperature, top-k, a seed,
a longer ``max_new_tokens``) or with a small edit at its end. The model's keys and values
for the prompt do not depend on those settings, so a run can start from the cache of an
earlier run whose prompt begins the same way and compute only the tokens after the shared
part. The last prompt token always runs again: its logits are the first step's.

``lm.start`` and ``lm.generate`` use the LM's own ``PrefixCache`` (``lm.prefix_cache``);
``genlab.generate`` never does (it behaves exactly as the reference, prompt included).

(The lines marked +SKIP are not run as a test: it needs a model and prompt ids of your own
(``model``, ``ids``); the tests run these calls.)

>>> pc = PrefixCache()
>>> run = genlab.start(model, ids, prefix_cache=pc)   # doctest: +SKIP
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class _Entry:
    model: Any
    ids: list[int]
    cache: Any  # holds ids[:-1] (one row)


class PrefixCache:
    """The caches of the last ``size`` prompts, one row each.

    :meth:`take` gives a new run a copy holding the longest shared start of its prompt (at
    most all but its last token), :meth:`remember` keeps a finished prefill. Only single
    prompts without padding, on a dynamic cache, take part; anything else starts cold.
    ``hits`` and ``reused_tokens`` count what was saved.
    """

    def __init__(self, size: int = 4) -> None:
        if size < 1:
            raise ValueError(f"PrefixCache size must be >= 1, got {size}")
        self.size = int(size)
        self._entries: list[_Entry] = []
        self._lock = threading.Lock()  # widgets run generations in worker threads
        self.hits = 0
        self.reused_tokens = 0

    @staticmethod
    def applies(ids: torch.LongTensor, mask: torch.Tensor, config, encdec) -> bool:
        """True when a run with this prompt and config may share prompt caches."""
        return (
            ids.shape[0] == 1
            and encdec is None
            and bool(mask.all())
            and config.use_cache is not False
            and config.cache_implementation in (None, "dynamic")
        )

    def take(self, model, ids: torch.LongTensor, rows: int):
        """A cache holding the longest known start of ``ids`` (1, length) for ``rows`` rows,
        or None. The copy is the run's own: later runs never see its changes."""
        prompt = ids[0].tolist()
        best, shared = None, 0
        with self._lock:
            entries = list(self._entries)
        for entry in entries:
            if entry.model is not model:
                continue
            n = _common_prefix(entry.ids, prompt)
            if n > shared:
                best, shared = entry, n
        shared = min(shared, len(prompt) - 1, best.cache.length() if best else 0)
        if best is None or shared < 1:
            return None
        cache = best.cache.copy()
        cache.crop(shared)
        if rows > 1:
            cache.reorder(torch.zeros(rows, dtype=torch.long, device=ids.device))
        self.hits += 1
        self.reused_tokens += shared
        return cache

    def remember(self, model, ids: torch.LongTensor, cache) -> None:
        """Keep the prompt part of ``cache`` (after a run's first step: the whole prompt)."""
        prompt = ids[0].tolist()
        keep = len(prompt) - 1
        if keep < 1 or cache.length() < keep:
            return
        copy = cache.copy()
        copy.crop(keep)
        # one row: every row of a single prompt holds the same prompt positions
        copy.reorder(torch.zeros(1, dtype=torch.long, device=ids.device))
        with self._lock:
            kept = [e for e in self._entries if not (e.model is model and e.ids == prompt)]
            self._entries = [_Entry(model, prompt, copy), *kept][: self.size]

    def clear(self) -> None:
        """Forget every prompt."""
        with self._lock:
            self._entries = []

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return (
            f"PrefixCache({len(self)}/{self.size} prompts, hits={self.hits}, "
            f"reused_tokens={self.reused_tokens})"
        )


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
