"""What a run is given, checked: the second stage of a run's set-up.

:func:`prepare_inputs` turns ``generate()``'s inputs (the prompt, its mask, the model
inputs that are no config fields, the user's objects) into the run's :class:`Given`, with
the prompt as checked tensors. It runs after the call's config
(:func:`genlab.config.prepare_config`), whose special tokens it needs, and before the plan
(:func:`genlab.run.plan.make_plan`). Encoder-decoder models run their encoder here
(:mod:`genlab.run.encdec`), and ``token_healing`` re-tokenizes the prompt here
(:mod:`genlab.text.healing`). Every model (built-in decoders and transformers models alike)
refuses bad prompts the same way, with an error that says what to do, instead of failing
deep inside the model:

* :func:`prompt_from_mapping`: a tokenizer's output (``tok("...")``, a ``BatchEncoding`` or
  a plain dict with ``input_ids`` and optionally ``attention_mask``) is taken as the prompt,
  as transformers users write ``model.generate(**tok("..."))``;
* :func:`prompt_ids`: lists and tensors of token ids: integers only, rows of one length,
  at least one token;
* :func:`infer_attention_mask`: the mask of a prompt given without one;
* :func:`forced_ids`: what ``Run.force`` queues, as checked ids.

Example::

    >>> prompt_ids([[5, 6], [7]], "input_ids")
    Traceback (most recent call last):
    ...
    ValueError: input_ids has rows of different lengths [2, 1]: ...
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from ..checks import is_int
from ..ids import as_ids, check_ids, eos_token_ids

logger = logging.getLogger(__name__)

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


@dataclass
class Given:
    """What a run was given; fixed for its life."""

    model: Any
    info: Any
    tokenizer: Any
    device: torch.device
    input_ids: torch.LongTensor
    prompt_length: int
    batch_size: int
    pad_token_id: int | None
    eos_token_ids: list[int]
    user_processors: Any = None
    user_criteria: Any = None
    prefix_allowed_tokens_fn: Any = None
    assistant_model: Any = None
    negative_prompt_ids: Any = None
    negative_prompt_attention_mask: Any = None
    encdec: Any = None
    streamer: Any = None
    has_default_max_length: bool = True
    has_default_min_length: bool = True
    seed: int | None = None
    keep_history: bool = False
    forward_cache: Any = None  # a ForwardCache: forward passes served from and kept in it
    warnings: tuple[str, ...] = ()
    attention_mask: torch.LongTensor | None = None  # (batch, length) the prompt's mask
    beam_streamer: Any = None  # a BeamStreamer: attached at the start, reads the beams


def prepare_inputs(model, config, unused: dict, input_ids, attention_mask, *, inputs=None,
                   parts: dict, generate, has_default_max_length: bool = True,
                   has_default_min_length: bool = True) -> Given:  # fmt: skip
    """What the run was given, with the prompt as checked tensors.

    model: the genlab-protocol model; config: the call's GenerationConfig (its special
    tokens, ``token_healing`` and output flags are read); unused: the keyword arguments
    that were no config fields (model inputs; consumed); input_ids, attention_mask: the
    prompt (ids, a tokenizer's output, or None) and its mask; inputs: the prompt given as
    ``inputs=``; parts: the user's objects, :class:`Given`'s fields by name (tokenizer,
    streamer, user_processors, ...); generate: the generate function token healing runs;
    has_default_max_length, has_default_min_length: whether those lengths were left unset.
    Encoder-decoder models run their encoder here (``given.encdec``).
    """
    if input_ids is None:
        input_ids = unused.pop("input_ids", None) if "input_ids" in unused else inputs
    if attention_mask is None:
        attention_mask = unused.pop("attention_mask", None)
    input_ids, attention_mask = prompt_from_mapping(input_ids, attention_mask)
    info = model.info
    device = getattr(model, "device", None) or torch.device("cpu")
    encdec = None
    if info.is_encoder_decoder:  # the encoder runs once; the run works on the decoder
        from .encdec import prepare_encoder_decoder

        encdec = prepare_encoder_decoder(
            model, config, input_ids, attention_mask, unused, device=device
        )
        input_ids, attention_mask = encdec.decoder_input_ids, encdec.decoder_attention_mask
    elif unused:
        from .encdec import check_decoder_only_inputs

        check_decoder_only_inputs(unused, info.architecture or info.name)
    take_unset_model_inputs(unused)
    embeds = None if encdec is not None else unused.pop("inputs_embeds", None)
    if embeds is not None:  # the first step runs on embeddings (genlab.models.embeds)
        from ..models.embeds import prompt_embeds

        model, input_ids, attention_mask = prompt_embeds(
            model, config, embeds, prompt_ids(input_ids, "input_ids"), attention_mask
        )
        for kept in ("prefix_cache", "forward_cache"):  # keyed by token ids: not for these
            if kept in parts:
                parts = {**parts, kept: None}
    if unused:
        raise ValueError(
            f"unknown generate() arguments: {', '.join(sorted(unused))}. They are neither "
            "GenerationConfig fields nor model inputs (input_ids, attention_mask, tokenizer)."
            + (TOKEN_TYPES_HINT if "token_type_ids" in unused else "")
        )
    ids = (
        input_ids if embeds is not None else as_ids(prompt_ids(input_ids, "input_ids"), "input_ids")
    )
    if ids is None:
        if config.bos_token_id is None:
            raise ValueError("input_ids is None and bos_token_id is not set: give a prompt")
        ids = torch.tensor([[int(config.bos_token_id)]], dtype=torch.long)
    ids = ids.to(device)
    check_ids("input_ids", ids, info.vocab_size)
    ctx = info.max_position_embeddings
    if ctx is not None and ids.shape[1] > ctx:
        raise ValueError(
            f"the prompt has {ids.shape[1]} tokens but the model's context is {ctx} "
            "(max_position_embeddings): shorten the prompt"
        )
    eos = eos_token_ids(config)
    pad = config.pad_token_id
    if pad is None and eos:
        pad = eos[0]
        if attention_mask is None:
            warnings.warn(
                "attention_mask and pad_token_id were not set; pass attention_mask "
                "for reliable results",
                stacklevel=5,
            )
        # the reference's notice, at each generate() on a model without a pad token
        logger.warning("Setting `pad_token_id` to `eos_token_id`:%s for open-end generation.", pad)
    pad = None if pad is None else int(pad)
    mask = as_ids(attention_mask, "attention_mask")
    if mask is None:
        mask = infer_attention_mask(ids, pad, eos)
    elif mask.shape != ids.shape:
        raise ValueError(
            f"attention_mask has shape {tuple(mask.shape)} but input_ids {tuple(ids.shape)}"
        )
    if encdec is None and ids.shape[0] > 1 and ids.shape[1]:  # the reference's check
        last = mask[:, -1] == 0
        if pad is not None:
            last |= ids[:, -1] == pad
        if bool(last.any()):
            logger.warning(
                "A decoder-only architecture is being used, but right-padding was detected! "
                "For correct generation results, please set `padding_side='left'` when "
                "initializing the tokenizer."
            )
    if config.token_healing:  # re-tokenized prompts; the mask stays the original's
        from ..text.healing import heal_tokens

        ids = heal_tokens(model, ids, parts["tokenizer"], generate)
        if mask.shape != ids.shape:
            mask = infer_attention_mask(ids, pad, eos)
    parts = dict(parts)
    streamer = parts.pop("streamer", None)
    beam_streamer = streamer is not None and getattr(streamer, "is_beam_streamer", False)
    if streamer is not None and not beam_streamer and config.num_beams > 1:
        raise ValueError(
            "streamer cannot be used with beam search: use a "
            "genlab.streamers.BeamStreamer or num_beams=1"
        )
    return Given(
        model=model,
        info=info,
        device=device,
        input_ids=ids,
        prompt_length=ids.shape[1],
        batch_size=ids.shape[0],
        pad_token_id=pad,
        eos_token_ids=eos,
        encdec=encdec,
        has_default_max_length=has_default_max_length,
        has_default_min_length=has_default_min_length,
        streamer=None if beam_streamer else streamer,
        beam_streamer=streamer if beam_streamer else None,
        attention_mask=mask,
        **parts,
    )


#: config fields genlab accepts (they are the reference's) but does not act on, and why
IGNORED_FIELDS = {
    "cache_config": "genlab builds its caches itself (cache_implementation chooses one)",
    "return_legacy_cache": "genlab returns no past_key_values to convert",
    "prefill_chunk_size": "the prompt runs through the model in one piece",
}


def warn_ignored_arguments(config, synced_gpus=None) -> None:
    """One warning for each argument that is accepted but does nothing here: a field of
    :data:`IGNORED_FIELDS` set to a value other than its default, ``synced_gpus=True``."""
    from ..config.fields import FIELDS

    for name, why in IGNORED_FIELDS.items():
        value = getattr(config, name, None)
        if value != FIELDS[name].default:
            warnings.warn(f"{name}={value!r} is ignored: {why}", UserWarning, stacklevel=2)
    if synced_gpus:
        warnings.warn(
            "synced_gpus=True is ignored: genlab generates in one process, so there are no "
            "other GPUs to keep in step with",
            UserWarning,
            stacklevel=2,
        )


def take_unset_model_inputs(unused: dict) -> None:
    """Drop the model inputs a transformers user passes as None (``past_key_values=None``,
    ``inputs_embeds=None``: the reference ignores them too); a cache passed in is refused,
    since a run builds and keeps its own."""
    for name in ("past_key_values", "inputs_embeds"):
        if name in unused and unused[name] is None:
            del unused[name]
    if "past_key_values" in unused:
        raise ValueError(
            f"past_key_values: got a {type(unused['past_key_values']).__name__}, but a genlab "
            "run builds and keeps its own cache, so a cache from another call cannot be passed "
            "in. Leave past_key_values out (or None); to continue a generation, keep its run "
            "(run = lm.start(...) or genlab.start(...)) and call run.set(max_new_tokens=...) "
            "or run.step()"
        )


def infer_attention_mask(ids: torch.LongTensor, pad: int | None, eos: list[int]):
    """0 on padding when the pad id occurs in the prompt and is not an EOS id, else ones."""
    if pad is not None and (ids == pad).any() and pad not in eos:
        return ids.ne(pad).long()
    return torch.ones_like(ids)


def forced_ids(token, tokenizer, vocab_size: int | None) -> list[int]:
    """The token ids a ``Run.force(token)`` call queues, checked.

    token: an id, a list or tensor of ids, a token string (one vocabulary entry) or a text
    (all of its tokens); tokenizer: turns strings into ids (None: strings are refused);
    vocab_size: the model's vocabulary size, ids outside it are refused.
    """
    if isinstance(token, str):
        if tokenizer is None:
            raise ValueError("forcing text needs a tokenizer; pass a token id instead")
        if token == "":
            raise ValueError("force('') has no tokens to force: give a text or a token id")
        vocab = tokenizer.get_vocab()
        if token in vocab:
            ids = [vocab[token]]
        else:
            ids = tokenizer.encode(token, add_special_tokens=False)
        if not ids:
            raise ValueError(f"{token!r} encodes to no tokens")
        return [int(i) for i in ids]
    items = list(token) if isinstance(token, (list, tuple)) else [token]
    if isinstance(token, torch.Tensor):
        items = token.reshape(-1).tolist()
    if not items:
        raise ValueError("force([]) has no tokens to force: give a text or token ids")
    ids = []
    for t in items:
        if isinstance(t, torch.Tensor) and t.numel() == 1:
            t = t.item()
        if isinstance(t, bool) or not isinstance(t, int):
            raise ValueError(
                f"force takes token ids (ints) or text, got {t!r} ({type(t).__name__}): "
                "pass an int id, a list of int ids or a string"
            )
        if not 0 <= t < vocab_size:
            raise ValueError(f"forced token id {t} is outside [0, {vocab_size})")
        ids.append(int(t))
    return ids
