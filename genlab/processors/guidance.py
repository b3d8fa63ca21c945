"""Classifier-free guidance: push the scores away from an unconditional (or negative)
prediction, ``uncond + guidance_scale * (cond - uncond)``.

The batched form expects the conditional and unconditional rows stacked in ``scores``; the
unbatched form runs its own unconditional pass through a genlab-protocol model
(``new_cache`` / ``forward``, see :mod:`genlab.models.base`) at every step.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from ..checks import check_real
from ..models.adapt import as_model
from .base import LogitsProcessor


class ClassifierFreeGuidanceLogitsProcessor(LogitsProcessor):
    """CFG over a doubled batch: ``scores`` is (2 * rows, vocab), conditional rows first,
    ``input_ids`` (rows, seq_len); returns (rows, vocab).

    >>> p = ClassifierFreeGuidanceLogitsProcessor(3.0)
    >>> p(torch.tensor([[0]]), torch.tensor([[2.0, 0.0], [1.0, 0.0]])).tolist()
    [[4.0, 0.0]]
    """

    stage_name = "cfg"
    shown = ("guidance_scale",)

    def __init__(self, guidance_scale: float):
        self.guidance_scale = check_real(
            "guidance_scale", guidance_scale, allowed="a float > 1", ok=lambda v: v > 1
        )

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        rows = input_ids.shape[0]
        if scores.shape[0] != 2 * rows:
            raise ValueError(
                f"scores must stack conditional then unconditional rows (2 * {rows} rows for "
                f"{rows} input rows), got {scores.shape[0]} rows"
            )
        cond, uncond = scores.split(rows, dim=0)
        return uncond + (cond - uncond) * self.guidance_scale


#: how the unconditional model is called, as the reference calls it
CALL_SHAPE = "model(input_ids, attention_mask=..., use_cache=..., past_key_values=...)"


def _check_callable(model: Any) -> None:
    """ValueError naming the call when ``model`` cannot be called the way guidance calls it."""
    import inspect

    if not callable(model):
        raise ValueError(
            f"classifier-free guidance needs an unconditional model to call, but `model` is a "
            f"{type(model).__name__}: pass a genlab or transformers model, or a callable "
            f"{CALL_SHAPE} returning .logits (batch, length, vocab); or guidance_scale=1"
        )
    try:
        signature = inspect.signature(model)
    except (TypeError, ValueError):  # a builtin without a signature: just call it
        return
    try:
        signature.bind(None, attention_mask=None, use_cache=True, past_key_values=None)
    except TypeError as err:
        raise ValueError(
            f"classifier-free guidance calls its unconditional model as {CALL_SHAPE}, but "
            f"`model` has the signature {signature} ({err}): wrap it, e.g. lambda input_ids, "
            "**kw: model(input_ids), or pass a genlab or transformers model"
        ) from None


def _call_like_reference(model: Any, feed, mask, use_cache: bool, past) -> tuple[Any, Any]:
    """(logits (rows, len, vocab), past_key_values) of a plain callable, called as the
    reference calls the unconditional model."""
    _check_callable(model)
    out = model(feed, attention_mask=mask, use_cache=use_cache, past_key_values=past)
    if isinstance(out, torch.Tensor):
        return out, None
    # the reference reads the attribute (a dict subclass may carry .logits without the key);
    # a plain mapping's "logits" key is taken too
    logits = getattr(out, "logits", None)
    if logits is None and isinstance(out, Mapping):
        logits = out.get("logits")
    if not isinstance(logits, torch.Tensor):
        raise ValueError(
            f"the classifier-free guidance model returned {type(out).__name__} without "
            "logits: return an object with .logits (batch, length, vocab), as transformers "
            "models do"
        )
    if logits.dim() != 3:
        raise ValueError(
            f"the classifier-free guidance model returned logits of shape "
            f"{tuple(logits.shape)}: they must be (batch, length, vocab)"
        )
    # the cache as the reference takes it: the mapping's key (``out.get``), else the attribute
    getter = getattr(out, "get", None)
    if callable(getter):
        past = getter("past_key_values", None)
    else:
        past = getattr(out, "past_key_values", None)
    return logits, past


class UnbatchedClassifierFreeGuidanceLogitsProcessor(LogitsProcessor):
    """CFG with a separate unconditional pass, in log-probabilities:
    ``log_softmax(uncond) + guidance_scale * (log_softmax(scores) - log_softmax(uncond))``.

    The unconditional branch starts from ``unconditional_ids`` (rows, len) (a negative
    prompt), or, when None, from the last token of ``input_ids`` at the first call; each
    later call feeds it the newest token. Positions count from 0 in that branch whatever its
    attention mask says, as the reference does. ``use_cache=False`` re-runs the whole branch
    every step. With ``guidance_scale == 1`` only the log-softmax is applied.

    (Not run as a test: it needs a transformers model (``hf``) and its inputs.)

    >>> from genlab.models.hf import HFModel                        # doctest: +SKIP
    >>> cfg = UnbatchedClassifierFreeGuidanceLogitsProcessor(1.5, HFModel(hf))  # doctest: +SKIP
    >>> guided = cfg(input_ids, logits)  # (rows, vocab) log-probs  # doctest: +SKIP
    """

    stateful = True  # the unconditional prompt's own KV cache, one step behind the run
    stage_name = "cfg"
    shown = ("guidance_scale", "use_cache")

    def __init__(
        self,
        guidance_scale: float,
        model: Any,
        unconditional_ids: torch.LongTensor | None = None,
        unconditional_attention_mask: torch.LongTensor | None = None,
        use_cache: bool | None = True,
    ):
        self.guidance_scale = check_real(
            "guidance_scale",
            guidance_scale,
            allowed="a number (1 = no guidance)",
            ok=lambda v: True,
        )
        self.model = model  # as given (the reference's attribute)
        # a genlab or transformers model runs through the genlab protocol; anything else is
        # kept as given and called as the reference calls it, when guidance needs it (a
        # scale of 1 never does)
        try:
            self._model = as_model(model, callables=True)
        except TypeError:
            self._model = None
        self.unconditional_ids = unconditional_ids
        self.unconditional_attention_mask = unconditional_attention_mask
        self.use_cache = bool(use_cache)
        self._cache = None
        self._first_pass = True

    @property
    def unconditional_context(self) -> dict:
        """The unconditional branch's state under the reference's keys (a snapshot)."""
        return {
            "input_ids": self.unconditional_ids,
            "attention_mask": self.unconditional_attention_mask,
            "use_cache": self.use_cache,
            "past_key_values": self._cache,
            "first_pass": self._first_pass,
        }

    def _next_inputs(self, input_ids: torch.LongTensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Advance the unconditional branch by one step: (tokens to feed, full mask)."""
        if self._first_pass:
            self._first_pass = False
            if self.unconditional_ids is None:
                self.unconditional_ids = input_ids[:, -1:]
            if self.unconditional_attention_mask is None:
                self.unconditional_attention_mask = torch.ones_like(
                    self.unconditional_ids, dtype=torch.long
                )
            return self.unconditional_ids, self.unconditional_attention_mask
        newest = input_ids[:, -1:]  # (rows, 1)
        self.unconditional_attention_mask = torch.cat(
            [self.unconditional_attention_mask, torch.ones_like(newest, dtype=torch.long)], dim=1
        )
        if self.use_cache:
            self.unconditional_ids = newest
        else:
            self.unconditional_ids = torch.cat([self.unconditional_ids, newest], dim=1)
        return self.unconditional_ids, self.unconditional_attention_mask

    def unconditional_logits(self, input_ids: torch.LongTensor) -> torch.FloatTensor:
        """(rows, vocab) logits of the unconditional branch for the next token."""
        feed, mask = self._next_inputs(input_ids)
        if self._model is None:
            logits, past = _call_like_reference(
                self.model, feed, mask, self.use_cache, self._cache if self.use_cache else None
            )
            self._cache = past
            return logits[:, -1]
        if self._cache is None or not self.use_cache:
            self._cache = self._model.new_cache(feed.shape[0])
        start = self._cache.length()
        positions = torch.arange(start, start + feed.shape[1], device=feed.device)
        positions = positions.unsqueeze(0).expand(feed.shape[0], -1)  # (rows, new_len)
        with torch.no_grad():
            # logits for every fed position, last one taken: the reference's exact matmul
            out = self._model.forward(
                feed,
                attention_mask=mask,
                position_ids=positions,
                cache=self._cache,
                logits_to_keep=0,
            )
        return out.logits[:, -1]

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        logp = torch.nn.functional.log_softmax(scores, dim=-1)  # (rows, vocab)
        if self.guidance_scale == 1:
            return logp
        uncond = torch.nn.functional.log_softmax(self.unconditional_logits(input_ids), dim=-1)
        return self.guidance_scale * (logp - uncond) + uncond
