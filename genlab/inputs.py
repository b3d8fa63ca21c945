"""Checks on what a run is given as its prompt, before any model work.

The :class:`~genlab.engine.Run` calls these while it reads its inputs, so that every model
(built-in decoders and transformers models alike) refuses bad prompts the same way, with
an error that says what to do, instead of failing deep inside the model:

* :func:`prompt_from_mapping`: a tokenizer's output (``tok("...")``, a ``BatchEncoding`` or
  a plain dict with ``input_ids`` and optionally ``attention_mask``) is taken as the prompt,
  as transformers users write ``model.generate(**tok("..."))``;
* :func:`prompt_ids`: lists and tensors of token ids: integers only, rows of one length,
  at least one token;
* :func:`check_generated_length`: ``max_length`` must leave room for a new token (the
  reference raises the same error), and an unreachable ``min_length`` gives the reference's
  "Unfeasible length constraints" warning.

Example::

    >>> prompt_ids([[5, 6], [7]], "input_ids")
    Traceback (most recent call last):
    ...
    ValueError: input_ids has rows of different lengths [2, 1]: ...
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import torch

from .checks import is_int

#: keys of a tokenizer's output that a decoder-only prompt may carry
PROMPT_KEYS = ("input_ids", "attention_mask")
#: said when a tokenizer's output carries token_type_ids (its model_input_names list them)
TOKEN_TYPES_HINT = (
    " (genlab's models take no token_type_ids: tokenize with return_token_type_ids=False, "
    "or enc.pop('token_type_ids'))"
)
#: dtypes the built-in decoders accept as token ids (converted to int64 here)
ID_DTYPES = (torch.int64, torch.int32, torch.int16, torch.uint8)


def prompt_from_mapping(input_ids: Any, attention_mask: Any) -> tuple[Any, Any]:
    """``(input_ids, attention_mask)`` with a tokenizer output unpacked.

    ``input_ids`` may be a mapping (dict, ``BatchEncoding``) holding ``input_ids`` and
    optionally ``attention_mask``; anything else is returned unchanged. A mapping without
    ``input_ids``, with other keys, or together with an explicit ``attention_mask`` is a
    ValueError.
    """
    if not isinstance(input_ids, Mapping):
        return input_ids, attention_mask
    keys = list(input_ids.keys())
    if "input_ids" not in keys:
        raise ValueError(
            f"the prompt is a mapping with keys {keys} but no 'input_ids': pass text, token "
            "ids, or a tokenizer's output (tokenizer('...') holds input_ids and attention_mask)"
        )
    other = [k for k in keys if k not in PROMPT_KEYS]
    if other:
        raise ValueError(
            f"the prompt mapping has keys {other} besides input_ids / attention_mask: a "
            "decoder-only prompt is token ids and their mask; pass other model inputs as "
            "keyword arguments of generate(), or drop them"
            + (TOKEN_TYPES_HINT if "token_type_ids" in other else "")
        )
    if attention_mask is not None and "attention_mask" in keys:
        raise ValueError(
            "attention_mask was given twice (in the prompt mapping and as attention_mask=): "
            "pass only one of them"
        )
    mask = input_ids.get("attention_mask", attention_mask)
    return input_ids["input_ids"], mask


def prompt_ids(ids: Any, name: str = "input_ids") -> Any:
    """Token ids checked and converted: a tensor, numpy array or (nested) list of ints -> an
    int64 tensor.

    None and non-id values (text) are returned unchanged. Raises ValueError for ids that
    are not integers (float, bool, int8 tensors or list items), rows of different lengths,
    or an empty prompt.
    """
    if ids is None:
        return None
    if type(ids).__module__ == "numpy" and hasattr(ids, "dtype"):  # tok(..., return_tensors="np")
        if str(ids.dtype) not in ("int64", "int32", "int16", "uint8"):
            raise ValueError(
                f"{name} must hold integer token ids (int64, int32, int16 or uint8); got a "
                f"numpy array of {ids.dtype}: "
                "convert it with .astype('int64') (and check that the values are ids)"
            )
        ids = torch.from_numpy(ids.astype("int64", copy=True))
    if isinstance(ids, torch.Tensor):
        if ids.dtype not in ID_DTYPES:
            raise ValueError(
                f"{name} must hold integer token ids (int64, int32, int16 or uint8); got a "
                f"{ids.dtype} tensor: convert it with .long() (and check that the values are ids)"
            )
        tensor = ids.long()
    elif isinstance(ids, (list, tuple)):
        rows = ids if ids and isinstance(ids[0], (list, tuple, torch.Tensor)) else [ids]
        rows = [r.tolist() if isinstance(r, torch.Tensor) else r for r in rows]
        for row in rows:
            if not isinstance(row, (list, tuple)):
                raise ValueError(
                    f"{name} mixes rows and single ids ({row!r}): give one list of ids, or a "
                    "list of equally long lists"
                )
            bad = [v for v in row if not is_int(v)]
            if bad:
                raise ValueError(
                    f"{name} must hold integer token ids; got {bad[0]!r} "
                    f"({type(bad[0]).__name__}): tokenize text first, or pass ints"
                )
        lengths = [len(r) for r in rows]
        if len(set(lengths)) > 1:
            raise ValueError(
                f"{name} has rows of different lengths {lengths}: pad them to one length and "
                "pass an attention_mask (tokenizer(texts, padding=True) does both), or pass "
                "the texts"
            )
        tensor = torch.tensor(rows, dtype=torch.long)
    else:
        return ids
    if tensor.numel() == 0:
        raise ValueError(
            f"{name} is empty (shape {tuple(tensor.shape)}): give at least one token, or no "
            "prompt at all to start from bos_token_id"
        )
    return tensor


def check_generated_length(
    config: Any, prompt_length: int, has_default_max_length: bool, encoder_decoder: bool = False
) -> None:
    """The reference's length checks, on a config whose lengths are resolved for the prompt.

    Raises ValueError when ``max_length`` leaves no room for a new token; warns
    (UserWarning) when ``min_length`` or ``min_new_tokens`` cannot be reached.
    """
    name = "decoder_input_ids" if encoder_decoder else "input_ids"
    max_length = config.max_length
    if max_length is None:
        raise ValueError(
            "`max_length` is None: set max_new_tokens (or max_length) to bound the generation"
        )
    if prompt_length >= max_length:
        raise ValueError(
            f"Input length of {name} is {prompt_length}, but `max_length` is set to "
            f"{max_length}. This can lead to unexpected behavior. You should consider "
            "increasing `max_length` or, better yet, setting `max_new_tokens`."
        )
    suffix = (
        " Generation will stop at the defined maximum length. You should decrease the minimum "
        "length and/or increase the maximum length."
    )
    if has_default_max_length:
        suffix += f" Note that `max_length` is set to {max_length}, its default value."
    if config.min_length is not None and config.min_length > max_length:
        warnings.warn(
            f"Unfeasible length constraints: `min_length` ({config.min_length}) is larger than "
            f"the maximum possible length ({max_length})." + suffix,
            UserWarning,
            stacklevel=4,
        )
    if config.min_new_tokens is not None and config.min_new_tokens + prompt_length > max_length:
        warnings.warn(
            f"Unfeasible length constraints: `min_new_tokens` ({config.min_new_tokens}), when "
            f"added to the prompt length ({prompt_length}), is larger than the maximum "
            f"possible length ({max_length})." + suffix,
            UserWarning,
            stacklevel=4,
        )
