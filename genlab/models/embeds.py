"""A prompt given as embeddings (``generate(..., inputs_embeds=...)``), for decoder-only models.

The reference feeds ``inputs_embeds`` (rows, E, hidden) to the model at the first step only,
instead of token ids, and the generated tokens as ids afterwards. Without ``input_ids`` the
sequences start empty (rows, 0), so only the new tokens are returned; with ``input_ids`` of
the same length they are the prompt the embeddings stand for (processors see them, and the
output starts with them).

:class:`EmbedsPrompt` wraps a genlab-protocol model so that the run's step loop needs to know
nothing of this: its first forward (an empty cache) feeds the embeddings, and every forward
sees the embeddings' attention mask in front of the run's own when the run has no prompt ids.
The wrapped model's ``forward`` must take ``inputs_embeds=`` (genlab's built-in decoders and
the transformers adapter do); other models are refused before any work, as the reference
refuses a model class without it.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from ..ids import position_ids_from_mask


def takes_inputs_embeds(model: Any) -> bool:
    """Whether ``model.forward`` accepts ``inputs_embeds=``."""
    try:
        return "inputs_embeds" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


class _OffsetCache:
    """A cache that holds ``offset`` positions (the embeddings') before the run's tokens and
    reports only the tokens' count, so that the run's sequences and its cache agree."""

    def __init__(self, inner: Any, offset: int):
        self.inner_cache = inner
        self.offset = offset

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["inner_cache"], name)

    def length(self) -> int:
        return max(0, self.inner_cache.length() - self.offset)

    def crop(self, length: int) -> None:  # to no tokens: the embeddings are fed again
        self.inner_cache.crop(length + self.offset if length > 0 else 0)

    def reorder(self, index: torch.LongTensor) -> None:
        self.inner_cache.reorder(index)

    def copy(self) -> _OffsetCache:
        return _OffsetCache(self.inner_cache.copy(), self.offset)


class EmbedsPrompt:
    """``model`` with its first forward fed ``embeds`` (rows, E, hidden) instead of ids.

    prefix_mask: the embeddings' attention mask (rows, E) when the run's sequences hold no
    prompt ids (it is put in front of the run's mask at every step), or None when the run's
    prompt ids stand for the embeddings (the run's mask covers them). Rows of a forward that
    has ``k`` times as many rows (beams, returned sequences) take each input's embeddings
    ``k`` times, as the reference expands its inputs.
    """

    def __init__(self, model: Any, embeds: torch.Tensor, prefix_mask: torch.Tensor | None):
        self.model = model
        self.embeds = embeds
        self.prefix_mask = prefix_mask

    def __getattr__(self, name: str) -> Any:  # info, device, ...: the model's
        if name == "compiled_forward":  # compiled steps would bypass this wrapper
            raise AttributeError(name)
        return getattr(self.__dict__["model"], name)

    def new_cache(self, *args, **kwargs) -> Any:
        cache = self.model.new_cache(*args, **kwargs)
        if self.prefix_mask is None:  # the run's prompt ids count the embeddings' positions
            return cache
        return _OffsetCache(cache, self.prefix_mask.shape[1])

    @staticmethod
    def _rows(t: torch.Tensor, rows: int) -> torch.Tensor:
        return t if t.shape[0] == rows else t.repeat_interleave(rows // t.shape[0], dim=0)

    def forward(self, input_ids, *, attention_mask, position_ids=None, cache, **kwargs):
        rows = input_ids.shape[0]
        mask = attention_mask
        if isinstance(cache, _OffsetCache):  # the embeddings' positions come first
            cache = cache.inner_cache
            mask = torch.cat([self._rows(self.prefix_mask, rows).to(mask), mask], dim=1)
        if cache.length() == 0:  # the first pass: the embeddings stand for the prompt
            embeds = self._rows(self.embeds, rows)
            return self.model.forward(
                None,
                inputs_embeds=embeds,
                attention_mask=mask,
                position_ids=position_ids_from_mask(mask, embeds.shape[1]),
                cache=cache,
                **kwargs,
            )
        return self.model.forward(
            input_ids,
            attention_mask=mask,
            position_ids=position_ids_from_mask(mask, input_ids.shape[1]),
            cache=cache,
            **kwargs,
        )


def prompt_embeds(model: Any, config: Any, embeds: Any, input_ids: Any, attention_mask: Any):
    """(model to run, prompt ids, prompt mask) for a decoder-only prompt given as embeddings.

    model: the genlab-protocol model; config: the call's GenerationConfig (``use_cache`` is
    set, and with no ``max_new_tokens`` the lengths lose the embeddings' count, as in the
    reference); embeds: (rows, E, hidden) floats; input_ids: None or the (rows, E) ids they
    stand for; attention_mask: None or (rows, E). Raises ValueError naming what to change.
    """
    name = model.info.architecture or model.info.name
    if not takes_inputs_embeds(model):
        raise ValueError(
            f"inputs_embeds: {name} takes token ids only (its forward has no inputs_embeds): "
            "pass input_ids, or use a model that takes embeddings (genlab's Llama, Qwen2 and "
            "GPT-2 decoders, or a transformers model)"
        )
    if not isinstance(embeds, torch.Tensor) or embeds.dim() != 3 or not embeds.is_floating_point():
        shape = tuple(embeds.shape) if isinstance(embeds, torch.Tensor) else type(embeds).__name__
        raise ValueError(
            f"inputs_embeds must be a float tensor (batch, length, hidden), got {shape}: pass "
            "model.get_input_embeddings()(input_ids) or your own vectors of that shape"
        )
    rows, length = embeds.shape[:2]
    if length == 0:
        raise ValueError("inputs_embeds is empty (length 0): give at least one position")
    device = getattr(model, "device", None) or embeds.device
    mask = None if attention_mask is None else torch.as_tensor(attention_mask, device=device)
    if mask is not None and tuple(mask.shape) != (rows, length):
        raise ValueError(
            f"attention_mask has shape {tuple(mask.shape)} but inputs_embeds {(rows, length)} "
            "(batch, length): give one mask entry per embedding position"
        )
    mask = torch.ones(rows, length, dtype=torch.long, device=device) if mask is None else mask
    config.use_cache = True  # the first step is told apart by its empty cache (the reference's)
    if input_ids is None:
        if config.max_new_tokens is None:  # max_length counts the embeddings' positions
            config.max_length = int(config.max_length) - length
        if not config.min_new_tokens:
            config.min_length = max(int(config.min_length or 0) - length, 0)
        ids = torch.zeros(rows, 0, dtype=torch.long, device=device)
        empty = torch.zeros(rows, 0, dtype=mask.dtype, device=device)
        return EmbedsPrompt(model, embeds, mask.long()), ids, empty
    ids = torch.as_tensor(input_ids, device=device)
    if tuple(ids.shape) != (rows, length):
        raise ValueError(
            f"input_ids has shape {tuple(ids.shape)} but inputs_embeds {(rows, length)}: give "
            "the ids the embeddings stand for (same batch and length), or leave input_ids out"
        )
    return EmbedsPrompt(model, embeds, None), ids, mask
