"""What a built-in decoder's forward pass checks of its inputs, and the attention masks it
builds from them (the Llama and GPT-2 decoders share both).

The masks come in two forms: a boolean "keep" mask (True where a query may attend to a
key: not padding, not in the future, inside a sliding window) and the additive float mask
the fused attention takes (0 where kept, the dtype's lowest value or -inf elsewhere).
"""

from __future__ import annotations

import math
from typing import Any

import torch


def embeds_as_ids(model: str, inputs_embeds: torch.Tensor) -> torch.LongTensor:
    """Token ids of zeros in the shape of ``inputs_embeds`` (rows, new, hidden), so that a
    forward given embeddings checks its mask, positions and cache as for ids."""
    if not isinstance(inputs_embeds, torch.Tensor) or inputs_embeds.dim() != 3:
        shape = getattr(inputs_embeds, "shape", type(inputs_embeds).__name__)
        raise ValueError(
            f"{model}: inputs_embeds must be a 3-D tensor (rows, new_len, hidden); got {shape}"
        )
    rows, new_len = inputs_embeds.shape[:2]
    return torch.zeros(rows, new_len, dtype=torch.long, device=inputs_embeds.device)


def check_forward_inputs(
    model: str,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    position_ids: torch.Tensor | None,
    cache: Any,
    logits_to_keep: int,
    vocab_size: int,
    num_layers: int,
) -> tuple[int, torch.Tensor, torch.Tensor]:
    """Validate a forward call before any model work.

    Returns ``past`` (positions already in the cache), the attention mask
    (rows, past + new) and the position ids (rows, new), filling in the defaults
    (all ones; ``past .. past + new - 1``) when they are None.
    """
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2:
        shape = tuple(input_ids.shape) if isinstance(input_ids, torch.Tensor) else type(input_ids)
        raise ValueError(f"{model}: input_ids must be a 2-D tensor (rows, new_len); got {shape}")
    if input_ids.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8):
        raise ValueError(f"{model}: input_ids must hold integer token ids; got {input_ids.dtype}")
    rows, new_len = input_ids.shape
    if new_len == 0 or rows == 0:
        raise ValueError(
            f"{model}: input_ids has shape {tuple(input_ids.shape)}; it needs at least one row "
            "and one token"
        )
    low, high = torch.aminmax(input_ids)
    if low.item() < 0 or high.item() >= vocab_size:
        bad = low.item() if low.item() < 0 else high.item()
        raise ValueError(
            f"{model}: input_ids contains token id {bad}, outside the vocabulary [0, {vocab_size})"
        )
    if (
        not isinstance(logits_to_keep, int)
        or isinstance(logits_to_keep, bool)
        or logits_to_keep < 0
    ):
        raise ValueError(
            f"{model}: logits_to_keep={logits_to_keep!r} must be an integer >= 0 (0 keeps all)"
        )
    past = _cache_length(model, cache, rows, num_layers)
    total = past + new_len
    if attention_mask is None:
        attention_mask = input_ids.new_ones(rows, total)
    elif not isinstance(attention_mask, torch.Tensor) or tuple(attention_mask.shape) != (
        rows,
        total,
    ):
        shape = tuple(attention_mask.shape) if isinstance(attention_mask, torch.Tensor) else None
        raise ValueError(
            f"{model}: attention_mask has shape {shape}; expected (rows, cache_len + new_len) = "
            f"({rows}, {past} + {new_len})"
        )
    if position_ids is None:
        position_ids = torch.arange(past, total, device=input_ids.device).expand(rows, new_len)
    elif not isinstance(position_ids, torch.Tensor) or tuple(position_ids.shape) != (
        rows,
        new_len,
    ):
        shape = tuple(position_ids.shape) if isinstance(position_ids, torch.Tensor) else None
        raise ValueError(
            f"{model}: position_ids has shape {shape}; expected (rows, new_len) = "
            f"({rows}, {new_len})"
        )
    return past, attention_mask, position_ids


def check_positions(model: str, position_ids: torch.Tensor, limit: int | None) -> int:
    """Return the largest position id; raise if one is negative or (when given) >= limit."""
    low, high = torch.aminmax(position_ids)
    low, high = int(low.item()), int(high.item())
    if low < 0 or (limit is not None and high >= limit):
        allowed = f"[0, {limit})" if limit is not None else ">= 0"
        raise ValueError(
            f"{model}: position_ids contains {low if low < 0 else high}; allowed positions are "
            f"{allowed}"
        )
    return high


def _cache_length(model: str, cache: Any, rows: int, num_layers: int) -> int:
    if cache is None:
        return 0
    if not hasattr(cache, "append") or not hasattr(cache, "length"):
        raise ValueError(
            f"{model}: cache must be a KVCache from model.new_cache(batch_size) (or None); "
            f"got {type(cache).__name__}"
        )
    if getattr(cache, "num_layers", num_layers) != num_layers:
        raise ValueError(
            f"{model}: cache has {cache.num_layers} layers, the model has {num_layers}; "
            "create it with model.new_cache(batch_size)"
        )
    past = cache.length()
    keys = getattr(cache, "keys", None)
    if past and keys and keys[0] is not None and keys[0].shape[0] != rows:
        raise ValueError(
            f"{model}: the cache holds {keys[0].shape[0]} rows but input_ids has {rows}; "
            "reorder or recreate the cache"
        )
    return past


def sdpa_keep_mask(
    attention_mask: torch.Tensor,
    past: int,
    new_len: int,
    sliding_window: int | None = None,
    dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor | None, bool]:
    """The mask for ``scaled_dot_product_attention`` and its ``is_causal`` flag.

    attention_mask (rows, past + new) of 0/1 -> mask (rows, 1, new, past + new), True where a
    query may attend a key: the key is not padding, not in the future, and (with a sliding
    window) fewer than ``sliding_window`` positions back. With ``dtype`` the mask comes as
    SDPA would turn it into numbers (0 where True, -inf elsewhere), once for every layer:
    SDPA converts a boolean mask again in each layer (two kernels a layer). When nothing is
    padded and the causal structure is all there is (one new token, or no past), return
    ``(None, causal)`` so that SDPA can take its fastest path.
    """
    total = past + new_len
    windowed = sliding_window is not None and total > sliding_window
    if not windowed and (new_len == 1 or past == 0) and bool(attention_mask.all()):
        return None, new_len > 1
    keep = _keep_mask(attention_mask, past, new_len, sliding_window)
    if dtype is None:
        return keep, False
    return additive_mask(keep, dtype, -math.inf), False


def _keep_mask(
    attention_mask: torch.Tensor, past: int, new_len: int, sliding_window: int | None = None
) -> torch.Tensor:
    """(rows, 1, new, past + new) bool: padding & causal (& window)."""
    device = attention_mask.device
    query_pos = torch.arange(past, past + new_len, device=device)[:, None]  # (new, 1)
    key_pos = torch.arange(past + new_len, device=device)[None, :]  # (1, total)
    keep = key_pos <= query_pos
    if sliding_window is not None:
        keep = keep & (key_pos > query_pos - sliding_window)
    return keep[None, None] & attention_mask[:, None, None, :].bool()


def static_keep_mask(
    attention_mask: torch.Tensor, capacity: int, sliding_window: int | None = None
) -> torch.Tensor:
    """Keep mask of one new token over a whole static cache: (rows, 1, 1, capacity) bool.

    attention_mask (rows, total) covers the positions written so far, the new one last; the
    positions beyond it (not written yet, or stale after a rewind) are never attended, nor
    (with a sliding window) those ``sliding_window`` or more positions back.
    """
    rows, total = attention_mask.shape
    keep = attention_mask.new_zeros(rows, capacity, dtype=torch.bool)
    keep[:, :total] = attention_mask.bool()
    if sliding_window is not None and total > sliding_window:
        keep[:, : total - sliding_window] = False
    return keep[:, None, None, :]


def additive_mask(
    keep: torch.Tensor, dtype: torch.dtype, fill: float | None = None
) -> torch.Tensor:
    """0 where ``keep``, ``fill`` elsewhere: by default the dtype's lowest finite value (the
    reference's eager mask); SDPA turns a boolean mask into 0 / -inf."""
    zero = torch.zeros((), dtype=dtype, device=keep.device)
    masked = torch.finfo(dtype).min if fill is None else fill
    return torch.where(keep, zero, torch.tensor(masked, dtype=dtype, device=keep.device))
