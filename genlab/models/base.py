"""The contract between genlab's engine and anything that produces logits.

A *model* in genlab is any object with

* ``info``: a :class:`ModelInfo` (vocabulary size, special ids, context length);
* ``new_cache(batch_size)``: an empty :class:`KVCache` (or any object with the same
  methods) for that many rows;
* ``forward(input_ids, *, attention_mask, position_ids, cache, logits_to_keep=1,
  output_attentions=False, output_hidden_states=False) -> ModelOutput``.

``forward`` receives only the *new* tokens (the whole prompt on the first call, one or a
few tokens afterwards), the attention mask for the *whole* sequence so far
(``(rows, cache_len + new_len)``, 0 on left padding), and explicit position ids
(``(rows, new_len)``). It appends the new keys/values to ``cache`` in place and returns
logits for the last ``logits_to_keep`` positions (0 means all of them).

The engine never looks inside a cache except through ``length``, ``reorder``, ``crop``
and ``copy``; the built-in decoders, the transformers adapter and the teaching model each
bring their own.

Encoder-decoder models (``info.is_encoder_decoder``; today through the transformers
adapter) add:

* ``main_input_name``: the source's input name ("input_ids", "input_features"...);
* ``encode(inputs, *, input_name=None, attention_mask=None, output_attentions=False,
  output_hidden_states=False, **encoder_kwargs)``: the encoder run once, returning an
  object with ``last_hidden_state`` (batch, src_len, hidden) (and ``attentions`` /
  ``hidden_states`` when asked);
* ``forward(..., encoder_outputs=..., encoder_attention_mask=...,
  decoder_attention_mask_given=False, **model_kwargs)``: one *decoder* step. ``input_ids``
  are then the new decoder tokens, ``attention_mask`` the decoder mask (passed to the model
  only when the user gave one), the encoder outputs and source mask are repeated per row,
  and the returned :class:`ModelOutput` may carry ``cross_attentions`` (per layer (rows,
  heads, new_len, src_len)). ``new_cache`` returns a cache holding self- and
  cross-attention keys/values; ``reorder`` moves both. See genlab/run/encdec.py.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import torch

from ..inside.taps import TapsOwner


@dataclass
class ModelInfo:
    """What the engine needs to know about a model, whatever produced it."""

    vocab_size: int
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    pad_token_id: int | None = None
    max_position_embeddings: int | None = None
    is_encoder_decoder: bool = False
    decoder_start_token_id: int | None = None
    name: str = "model"
    architecture: str = ""
    num_hidden_layers: int = 0
    hidden_size: int = 0
    tie_word_embeddings: bool = False  # the output head is the input embedding matrix
    # generation defaults shipped with the model (generation_config.json), as a dict
    generation_defaults: dict[str, Any] = field(default_factory=dict)
    #: how a built-in decoder computes, for people: the weights' dtype and form, and why
    #: that form (:func:`genlab.runtime.matmul.describe_numerics`); "" for other models
    numerics: str = ""


@dataclass
class ModelOutput:
    """One forward pass.

    logits: (rows, kept_positions, vocab) float32
    hidden_states: per layer, embeddings first: (rows, new_len, hidden), or None
    attentions: per layer: (rows, heads, new_len, cache_len + new_len), or None
    """

    logits: torch.Tensor
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


@runtime_checkable
class Cache(Protocol):
    """What the engine asks of a KV cache."""

    def length(self) -> int:  # number of positions stored
        ...

    def reorder(self, index: torch.LongTensor) -> None:  # rows <- rows[index] (beams)
        ...

    def crop(self, length: int) -> None:  # keep the first ``length`` positions
        ...

    def copy(self) -> Cache:  # an independent copy (fork / rewind snapshots)
        ...


class KVCache:
    """Per-layer key/value buffers, preallocated and grown in chunks, written in place.

    Each layer holds ``k`` and ``v`` of shape (rows, kv_heads, capacity, head_dim); only
    the first ``length()`` positions are valid. Appending never copies the whole cache
    except when the capacity is exhausted; it then grows by ``chunk`` positions or by half
    of what it holds, whichever is more (amortised O(1) copies, little memory held ahead).
    """

    def __init__(self, num_layers: int, chunk: int = 32):
        self.num_layers = num_layers
        self.chunk = chunk
        self.keys: list[torch.Tensor | None] = [None] * num_layers
        self.values: list[torch.Tensor | None] = [None] * num_layers
        self._len = [0] * num_layers
        #: the :class:`~genlab.runtime.forward_cache.ForwardCache` node whose tokens this cache
        #: holds,
        #: chunk by chunk as they were computed; None when that is not known
        self.origin = None

    def length(self) -> int:
        return self._len[0] if self.num_layers else 0

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        """Store k, v (rows, kv_heads, new, head_dim) for ``layer``; return views of all
        valid keys and values (rows, kv_heads, length, head_dim)."""
        n = k.shape[2]
        start = self._len[layer]
        if layer == 0:
            self.origin = None  # a pass the forward cache did not see (it sets it after)
        buf_k, buf_v = self.keys[layer], self.values[layer]
        if buf_k is None or start + n > buf_k.shape[2]:
            cap = start + n + max(self.chunk, (start + n) // 2)
            new_k = k.new_empty(k.shape[0], k.shape[1], cap, k.shape[3])
            new_v = v.new_empty(v.shape[0], v.shape[1], cap, v.shape[3])
            if buf_k is not None and start:
                new_k[:, :, :start] = buf_k[:, :, :start]
                new_v[:, :, :start] = buf_v[:, :, :start]
            buf_k, buf_v = new_k, new_v
            self.keys[layer], self.values[layer] = buf_k, buf_v
        buf_k[:, :, start : start + n] = k
        buf_v[:, :, start : start + n] = v
        self._len[layer] = start + n
        return buf_k[:, :, : start + n], buf_v[:, :, : start + n]

    def reorder(self, index: torch.LongTensor) -> None:
        # only the filled positions move; the buffers stay where they are
        if not (index.numel() == 1 and int(index[0]) == 0 and self.rows() == 1):
            self.origin = None
        for i, (k, v) in enumerate(zip(self.keys, self.values, strict=True)):
            if k is not None:
                n = self._len[i]
                idx = index.to(k.device)
                if idx.shape[0] != k.shape[0]:  # the number of rows changes: new buffers
                    self.keys[i] = k.index_select(0, idx)
                    self.values[i] = v.index_select(0, idx)
                    continue
                k[:, :, :n] = k[:, :, :n].index_select(0, idx)
                v[:, :, :n] = v[:, :, :n].index_select(0, idx)

    def crop(self, length: int) -> None:
        if length < 0:
            length = self.length() + length
        self._len = [min(n, length) for n in self._len]
        if self.origin is not None:
            self.origin = self.origin.at_length(self.length())

    def rows(self) -> int:
        """The number of rows held (0 before the first append)."""
        k = self.keys[0] if self.num_layers else None
        return 0 if k is None else k.shape[0]

    def checkpoint(self) -> tuple:
        """A token for :meth:`restore`: the buffers and lengths as they are now. Appends,
        crops and reorders that change the row count leave the old buffers intact; a
        reorder that keeps the rows writes in place and cannot be undone this way."""
        return (list(self.keys), list(self.values), list(self._len), self.origin)

    def restore(self, token: tuple) -> None:
        """Back to the state of :meth:`checkpoint`'s ``token``."""
        keys, values, lengths, origin = token
        self.keys, self.values, self._len = list(keys), list(values), list(lengths)
        self.origin = origin

    def copy(self) -> KVCache:
        other = KVCache(self.num_layers, self.chunk)
        other._len = list(self._len)
        other.origin = self.origin
        for i, (k, v) in enumerate(zip(self.keys, self.values, strict=True)):
            if k is not None:
                n = self._len[i]
                other.keys[i] = k[:, :, : n + self.chunk].clone()
                other.values[i] = v[:, :, : n + self.chunk].clone()
        return other


class SlotWriter:
    """Writes a step's keys/values at tensor-given positions of preallocated buffers.

    The cache a fixed-shape decoding step (:meth:`BuiltinDecoder.compiled_forward`) hands
    to the layers: ``append`` copies the new k/v (rows, kv_heads, new, head_dim) into the
    positions ``slots`` (a LongTensor, not a Python int, so that a compiled step does not
    specialise on the length) and returns the whole buffers (rows, kv_heads, capacity,
    head_dim); the attention mask hides what is not filled yet.
    """

    def __init__(self, keys: list[torch.Tensor], values: list[torch.Tensor], slots):
        self.keys, self.values, self.slots = keys, values, slots

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        self.keys[layer].index_copy_(2, self.slots, k)
        self.values[layer].index_copy_(2, self.slots, v)
        return self.keys[layer], self.values[layer]


class BuiltinDecoder(TapsOwner):
    """Protocol plumbing shared by genlab's own decoders (which set ``settings.num_layers``
    and an output ``head`` tensor), and their hook points inside the layers
    (:class:`~genlab.inside.taps.TapsOwner`: ``hook_points()``, ``has_active_hooks()``).

    Subclasses also bring the two halves of a fixed-shape decoding step, used by
    :meth:`compiled_forward`: ``fixed_inputs(input_ids, attention_mask, position_ids,
    cache)`` (eager: input checks, the position input and the (rows, 1, 1, capacity) keep
    mask) and ``fixed_step(input_ids, positions, keep, keys, values, slots)`` (the
    compiled part: every layer and the head, on a :class:`SlotWriter`).

    ``form_choice``: the :class:`~genlab.runtime.matmul.FormChoice` that set the form of the
    weight matrices (measured when the decoder was built), None when the caller chose it.
    """

    form_choice = None
    #: what the forward cache's weights key leaves out (genlab/runtime/forward_cache.py): derived
    #: bookkeeping that does not change a forward pass
    _forward_key_skip = ("_taps_users", "_taps_names", "_taps_layers", "_compiled", "form_choice")

    def new_cache(self, batch_size: int) -> KVCache:
        """An empty cache for ``batch_size`` rows (buffers are allocated on the first append)."""
        if not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError(f"batch_size={batch_size!r} must be a positive integer")
        return KVCache(self.settings.num_layers)

    def compiled_forward(self, compile_config) -> Any:
        """``forward`` with its one-token steps on a static cache run by ``torch.compile``.

        compile_config: a :class:`~genlab.config.CompileConfig`; its fields are passed to
        ``torch.compile``. A call the fixed-shape step cannot take (a prompt, several new
        tokens, a cache that is not static, attentions or hidden states asked for) runs the
        eager ``forward``. The compiled step is kept on the model and reused while the
        config stays the same, so later generations do not compile again.
        """
        last = getattr(self, "_compiled", None)
        if last is None or last[0] != compile_config:
            step = torch.compile(self.fixed_step, **compile_config.to_dict())
            call = functools.partial(self._fixed_forward, step)
            self._compiled = (dataclasses.replace(compile_config), call)
        return self._compiled[1]

    def _fixed_forward(
        self,
        step,
        input_ids: torch.Tensor,
        *,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        cache: Any = None,
        logits_to_keep: int = 1,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
    ) -> ModelOutput:
        ready = getattr(cache, "ready_for_fixed_step", None)
        fixed = (
            ready is not None
            and not (output_attentions or output_hidden_states)
            and logits_to_keep == 1
            and isinstance(input_ids, torch.Tensor)
            and input_ids.dim() == 2
            and input_ids.shape[1] == 1
            and ready(1)
        )
        if not fixed:
            return self.forward(
                input_ids, attention_mask=attention_mask, position_ids=position_ids,
                cache=cache, logits_to_keep=logits_to_keep,
                output_attentions=output_attentions, output_hidden_states=output_hidden_states,
            )  # fmt: skip
        past = cache.length()
        positions, keep = self.fixed_inputs(input_ids, attention_mask, position_ids, cache)
        # a fresh (rows, 1) tensor: a column sliced out of the sequences has their stride,
        # which changes every step and would make the compiled step recompile
        input_ids = input_ids.clone(memory_format=torch.contiguous_format)
        slots = torch.tensor([past], device=input_ids.device)
        logits = step(input_ids, positions, keep, cache.keys, cache.values, slots)
        cache.advance(1)
        return ModelOutput(logits=logits)

    def head_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The output head alone, without the final norm: hidden states (rows, hidden) ->
        float32 logits (rows, vocab). DoLa reads earlier layers through it."""
        from ..runtime.matmul import (
            head_logits,  # the packed-matrix product shared by both decoders
        )

        return head_logits(hidden[:, None], self.head)[:, 0]

    @property
    def dtype(self) -> torch.dtype:
        return self.head.dtype

    @property
    def device(self) -> torch.device:
        return self.head.device


class CausalLM(Protocol):
    """Structural type of a genlab model (see the module docstring)."""

    info: ModelInfo

    def new_cache(self, batch_size: int) -> Cache: ...

    def forward(
        self,
        input_ids: torch.LongTensor,
        *,
        attention_mask: torch.Tensor,
        position_ids: torch.LongTensor,
        cache: Cache,
        logits_to_keep: int = 1,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
    ) -> ModelOutput: ...
