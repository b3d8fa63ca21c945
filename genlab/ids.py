"""Token ids, EOS lists and positions: the small normalisations every layer needs, once.

Used by the engine, the encoder-decoder preparation, the strategies and the processor
builder; imports nothing from the rest of genlab.
"""

from __future__ import annotations

import numbers
from typing import Any

import torch


def is_token_id(value: Any) -> bool:
    """A token id: an integer (Python's or numpy's, or a one-element integer tensor), never
    a ``bool`` (``True`` is id 1 to Python, and always a mistake here). The sign is left to
    the caller (a negative EOS id is the reference's business, a negative constraint id is
    refused).

    >>> is_token_id(3), is_token_id(True), is_token_id(torch.tensor(3)), is_token_id(3.0)
    (True, False, True, False)
    """
    if isinstance(value, torch.Tensor):
        return value.numel() == 1 and not value.is_floating_point() and value.dtype != torch.bool
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_id_list(value: Any, *, allow_empty: bool = False) -> bool:
    """A row of token ids: a 1-D integer tensor, or a list or tuple of :func:`is_token_id`
    values, all non-negative; empty only with ``allow_empty``.

    >>> is_id_list([5, 6]), is_id_list([5, True]), is_id_list([]), is_id_list([[5]])
    (True, False, False, False)
    """
    if isinstance(value, torch.Tensor):
        if value.dim() != 1 or value.is_floating_point() or value.dtype == torch.bool:
            return False
        return (allow_empty or value.numel() > 0) and bool((value >= 0).all())
    if not isinstance(value, (list, tuple)) or (not value and not allow_empty):
        return False
    return all(is_token_id(v) and int(v) >= 0 for v in value)


def eos_token_ids(eos: Any) -> list[int]:
    """The EOS ids as a list of ints, the one normal form used everywhere: ``None`` ->
    ``[]``, ``2`` -> ``[2]``, a tensor or a list -> its ints, and anything with an
    ``eos_token_id`` attribute (a GenerationConfig) -> that field's list.

    >>> eos_token_ids(2), eos_token_ids([2, 3]), eos_token_ids(None)
    ([2], [2, 3], [])
    >>> eos_token_ids(torch.tensor([4])), eos_token_ids(genlab.GenerationConfig(eos_token_id=7))
    ([4], [7])
    """
    if not isinstance(eos, (int, list, tuple, torch.Tensor, type(None))):
        eos = getattr(eos, "eos_token_id", None)  # a config (or anything with the field)
    if eos is None:
        return []
    if isinstance(eos, torch.Tensor):
        return [int(e) for e in eos.reshape(-1).tolist()]
    return [int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos])]


def as_ids(x: Any, name: str, ndim: int = 2) -> torch.LongTensor | None:
    """Token ids as a tensor: a tensor or a (nested) list of ints. With ``ndim=2`` a
    (batch, length) tensor (one row may be given as 1-D); with ``ndim=1`` a (length,)
    tensor (a single row may be given as (1, length)). ``None`` stays ``None``.

    >>> as_ids([5, 6], "input_ids").shape, as_ids([[5, 6]], "ids", ndim=1).shape
    (torch.Size([1, 2]), torch.Size([2]))
    """
    if x is None:
        return None
    if not isinstance(x, torch.Tensor):
        try:
            x = torch.tensor(x, dtype=torch.long)
        except (TypeError, ValueError) as e:
            raise ValueError(
                f"{name} must be a tensor or a (nested) list of ints of equal lengths: {e}"
            ) from None
    if ndim == 2 and x.dim() == 1:
        x = x.unsqueeze(0)
    if ndim == 1 and x.dim() == 2 and x.shape[0] == 1:
        x = x[0]
    if x.dim() != ndim:
        shape = "(batch, length)" if ndim == 2 else "(length,)"
        raise ValueError(f"{name} must have shape {shape}, got {tuple(x.shape)}")
    return x


def check_ids(name: str, ids: torch.Tensor, vocab_size: int | None) -> None:
    """Raise a ValueError naming ``name`` when integer ``ids`` fall outside the vocabulary."""
    if vocab_size is None or ids.dtype not in (torch.long, torch.int) or not ids.numel():
        return
    if int(ids.min()) < 0 or int(ids.max()) >= vocab_size:
        bad = ids[(ids < 0) | (ids >= vocab_size)].unique().tolist()[:5]
        raise ValueError(f"{name} contain ids outside the vocabulary [0, {vocab_size}): {bad}")


def position_ids_from_mask(mask: torch.Tensor, new: int) -> torch.LongTensor:
    """Positions of the last ``new`` tokens: the count of real tokens before each (pads get
    1, as the reference gives them).

    >>> position_ids_from_mask(torch.tensor([[0, 1, 1, 1]]), 2)
    tensor([[1, 2]])
    """
    pos = mask.long().cumsum(-1) - 1
    pos.masked_fill_(mask == 0, 1)
    return pos[:, -new:]
