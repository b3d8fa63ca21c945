"""Encoder-decoder generation: the encoder pass before the loop, the inputs of each step.

For an encoder-decoder model (T5, BART, Marian, Speech2Text... through the transformers
adapter) generation is the same step loop as for a decoder-only model, run on the
*decoder*. Before the first step :func:`prepare_encoder_decoder` does what the reference
does once::

    source (input_ids / input_features ...) + attention_mask
        -> encoder, once                          -> encoder_outputs
    decoder_input_ids or decoder_start_token_id   -> the Run's sequences (decoder prompt)

The Run then treats the decoder tokens as its sequences (``prompt_length`` is the decoder
prompt's length) and hands :meth:`EncoderDecoderInputs.step_inputs` to every decoder
forward: the encoder outputs and the source mask, repeated ``rows_per_input`` times with
``repeat_interleave`` (beams of one input share them, so beam reordering never touches
them). Keyword arguments are split as the reference splits them: those starting with
``decoder_``, ``cross_attn`` or ``use_cache`` never reach the encoder.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ..ids import check_ids, eos_token_ids

#: arguments that only mean something for an encoder-decoder model
ENCODER_DECODER_ONLY = (
    "decoder_input_ids",
    "decoder_attention_mask",
    "encoder_outputs",
    "decoder_inputs_embeds",
    "decoder_head_mask",
    "cross_attn_head_mask",
    "input_features",
    "input_values",
    "decoder_position_ids",
)
#: prefixes of model kwargs the encoder never sees (the reference's rule)
DECODER_PREFIXES = ("decoder_", "cross_attn", "use_cache")


def split_encoder_kwargs(model_kwargs: dict[str, Any]) -> dict[str, Any]:
    """The model kwargs meant for the encoder: all but ``decoder_*``, ``cross_attn*`` and
    ``use_cache``.

    >>> sorted(split_encoder_kwargs({"head_mask": 1, "decoder_head_mask": 2, "use_cache": 3}))
    ['head_mask']
    """
    return {k: v for k, v in model_kwargs.items() if not k.startswith(DECODER_PREFIXES)}


def check_decoder_only_inputs(model_kwargs: dict[str, Any], model_name: str) -> None:
    """Raise a ValueError naming encoder-decoder arguments given to a decoder-only model.

    >>> check_decoder_only_inputs({"decoder_input_ids": [[0]]}, "gpt2")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: decoder_input_ids is an input of encoder-decoder models, but gpt2 is ...
    """
    given = [k for k in model_kwargs if k in ENCODER_DECODER_ONLY]
    if given:
        raise ValueError(
            f"{', '.join(given)} {'is an input' if len(given) == 1 else 'are inputs'} of "
            f"encoder-decoder models, but {model_name} is decoder-only: give the whole prompt "
            "as input_ids (and attention_mask)"
        )


def decoder_start_ids(start, batch_size: int, device=None) -> torch.LongTensor:
    """``decoder_start_token_id`` (an int, or one id per input row) as (batch, 1).

    >>> decoder_start_ids(0, 2).tolist()
    [[0], [0]]
    >>> decoder_start_ids([3, 4], 2).tolist()
    [[3], [4]]
    """
    if start is None:
        raise ValueError(
            "decoder_start_token_id is None and so is bos_token_id: an encoder-decoder model "
            "needs one of them to start the decoder (pass decoder_start_token_id=...)"
        )
    ids = torch.as_tensor(start, dtype=torch.long, device=device)
    if ids.dim() == 0:
        return ids.expand(batch_size).reshape(batch_size, 1).clone()
    if ids.dim() != 1 or ids.shape[0] != batch_size:
        raise ValueError(
            f"decoder_start_token_id has {ids.numel()} ids {tuple(ids.shape)}; give one int or "
            f"one id per input row ({batch_size})"
        )
    return ids.view(-1, 1)


def initial_decoder_ids(
    decoder_input_ids, start: torch.LongTensor, decoder_attention_mask, model_type: str = ""
):
    """The decoder prompt: the start ids, or the user's ``decoder_input_ids`` with the start
    id put in front when no row begins with it (its mask grows by a leading 1 then).

    start: (batch, 1). Returns ``(ids (batch, dec_len), mask (batch, dec_len) or None)``.

    >>> ids, _ = initial_decoder_ids(torch.tensor([[5, 6]]), torch.tensor([[0]]), None)
    >>> ids.tolist()
    [[0, 5, 6]]
    """
    if decoder_input_ids is None:
        return start, decoder_attention_mask
    if model_type == "whisper" or "donut" in model_type:  # these keep their own prompts
        return decoder_input_ids, decoder_attention_mask
    if bool((decoder_input_ids[:, 0] != start[:, 0]).all()):
        decoder_input_ids = torch.cat([start, decoder_input_ids], dim=-1)
        if decoder_attention_mask is not None:
            ones = torch.ones_like(decoder_attention_mask[:, :1])
            decoder_attention_mask = torch.cat([ones, decoder_attention_mask], dim=-1)
    return decoder_input_ids, decoder_attention_mask


def repeat_rows(value, n: int):
    """Every tensor of ``value`` (a tensor, or a mapping such as the encoder's output)
    repeated ``n`` times per row with ``repeat_interleave``; tuples are left alone, as the
    reference leaves them."""
    if n == 1 or value is None:
        return value
    if isinstance(value, torch.Tensor):
        return value.repeat_interleave(n, dim=0)
    items = {
        k: (v.repeat_interleave(n, dim=0) if isinstance(v, torch.Tensor) else v)
        for k, v in value.items()
    }
    return items if type(value) is dict else type(value)(**items)


@dataclass
class EncoderDecoderInputs:
    """What the encoder pass left for the decoder steps.

    encoder_input_ids: the source as given ((batch, src_len) ids, or the main input tensor),
        for ``encoder_repetition_penalty`` and ``encoder_no_repeat_ngram_size``
    encoder_outputs: the encoder's output (last_hidden_state (batch, src_len, hidden))
    encoder_attention_mask: (batch, src_len) or None
    decoder_input_ids: (batch, dec_len) the decoder prompt
    decoder_attention_mask: (batch, dec_len), all ones unless the user gave one
    decoder_mask_given: whether the user gave ``decoder_attention_mask`` (only then does the
        decoder receive it, as in the reference)
    model_kwargs: other model inputs, passed to every decoder step
    """

    encoder_input_ids: torch.Tensor
    encoder_outputs: Any
    encoder_attention_mask: torch.Tensor | None
    decoder_input_ids: torch.LongTensor
    decoder_attention_mask: torch.Tensor
    decoder_mask_given: bool = False
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    rows_per_input: int = 1
    _step: dict[str, Any] | None = None

    def expand(self, n: int) -> None:
        """Repeat the encoder side for ``n`` rows per input (beams, num_return_sequences)."""
        self.rows_per_input = n
        self._step = {
            "encoder_outputs": repeat_rows(self.encoder_outputs, n),
            "encoder_attention_mask": repeat_rows(self.encoder_attention_mask, n),
            "decoder_attention_mask_given": self.decoder_mask_given,
            **{k: repeat_rows(v, n) for k, v in self.model_kwargs.items()},
        }

    def step_inputs(self) -> dict[str, Any]:
        """Extra keyword arguments of every decoder ``forward``."""
        if self._step is None:
            self.expand(self.rows_per_input)
        return self._step

    def output_fields(self, cfg, decoder_fields: dict[str, Any], cross_attentions) -> dict:
        """The encoder-decoder output fields from the decoder-only ones the Run records."""
        fields = dict(decoder_fields)
        fields["decoder_attentions"] = fields.pop("attentions", None)
        fields["decoder_hidden_states"] = fields.pop("hidden_states", None)
        fields["cross_attentions"] = cross_attentions if cfg.output_attentions else None
        get = getattr(self.encoder_outputs, "get", None)
        fields["encoder_attentions"] = get("attentions") if get and cfg.output_attentions else None
        fields["encoder_hidden_states"] = (
            get("hidden_states") if get and cfg.output_hidden_states else None
        )
        return fields

    def build_output(self, cfg, decoder_fields: dict[str, Any], cross_attentions):
        """A GenerateEncoderDecoderOutput, or its beam form when ``beam_indices`` is there."""
        from .. import outputs

        fields = self.output_fields(cfg, decoder_fields, cross_attentions)
        cls = (
            outputs.GenerateBeamEncoderDecoderOutput
            if "beam_indices" in fields
            else outputs.GenerateEncoderDecoderOutput
        )
        return cls(**fields)


def _as_tensor(x, name: str, device) -> torch.Tensor | None:
    if x is None:
        return None
    if not isinstance(x, torch.Tensor):
        try:
            x = torch.tensor(x, dtype=torch.long)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{name} must be a tensor or a (nested) list of ints: {e}") from None
    if x.dim() == 1 and x.dtype in (torch.long, torch.int):
        x = x.unsqueeze(0)
    return x.to(device)


def infer_source_mask(ids: torch.Tensor, pad: int | None, eos: list[int]) -> torch.LongTensor:
    """The source mask the reference infers: 0 on pad tokens when the pad id is in the
    source and is not an EOS id, else all ones. ids: (batch, src_len) -> same shape."""
    ones = torch.ones(ids.shape[:2], dtype=torch.long, device=ids.device)
    if pad is None or ids.dim() != 2 or ids.dtype not in (torch.long, torch.int):
        return ones
    if bool((ids == pad).any()) and pad not in eos:
        return ids.ne(pad).long()
    return ones


def prepare_encoder_decoder(
    model, config, inputs, attention_mask, model_kwargs: dict, device=None
) -> EncoderDecoderInputs:
    """Run the encoder once and build the decoder prompt, as the reference does.

    model: the adapter (``info.is_encoder_decoder``, ``main_input_name``, ``encode``);
    config: the call's GenerationConfig; inputs: the main input (source ids (batch,
    src_len), input_features...), or None when it is in ``model_kwargs`` under its name or
    ``encoder_outputs`` are given; attention_mask: the source mask or None; model_kwargs:
    the remaining model inputs (decoder_input_ids, decoder_attention_mask, encoder kwargs).
    ``model_kwargs`` is consumed.

    (Not run as a test: it needs an encoder-decoder model (``t5``) and its inputs.)

    >>> enc = prepare_encoder_decoder(t5, cfg, ids, None, {})   # doctest: +SKIP
    >>> enc.decoder_input_ids                                    # doctest: +SKIP
    tensor([[0]])
    """
    name = getattr(model, "main_input_name", "input_ids")
    kwargs = {k: v for k, v in model_kwargs.items() if v is not None or k != name}
    model_kwargs.clear()
    _check_model_kwargs(model, kwargs)
    given = kwargs.pop(name, None)
    if given is not None and inputs is not None:
        raise ValueError(f"inputs and {name} were both given: pass the source once")
    inputs = given if inputs is None else inputs
    if name == "input_ids" and kwargs.get("inputs_embeds") is not None:
        if inputs is not None:  # embeddings replace the source ids for the encoder
            raise ValueError("inputs_embeds and input_ids were both given: pass one of them")
        inputs, name = kwargs.pop("inputs_embeds"), "inputs_embeds"
    encoder_outputs = kwargs.pop("encoder_outputs", None)
    if inputs is None and encoder_outputs is None:
        raise ValueError(
            f"{model.info.architecture} is an encoder-decoder model: give its source as inputs "
            f"or {name}= (or precomputed encoder_outputs=)"
        )
    eos = eos_token_ids(config)
    pad = config.pad_token_id if config.pad_token_id is not None else (eos[0] if eos else None)
    if inputs is not None:
        inputs = _as_tensor(inputs, name, device)
        check_ids(name, inputs, getattr(model, "encoder_vocab_size", model.info.vocab_size))
    else:  # the reference's placeholder source: -100 per encoder position
        shape = encoder_outputs["last_hidden_state"].shape[:2]
        inputs = torch.full(shape, -100, dtype=torch.long, device=device)
    batch = inputs.shape[0]
    mask = _as_tensor(attention_mask, "attention_mask", device)
    if mask is None and encoder_outputs is None:
        mask = infer_source_mask(inputs, pad, eos)
    if mask is not None and tuple(mask.shape) != tuple(inputs.shape[:2]):
        raise ValueError(
            f"attention_mask has shape {tuple(mask.shape)} but the source "
            f"{name} has {tuple(inputs.shape[:2])} (batch, src_len)"
        )
    if encoder_outputs is None:  # 1. the encoder, once
        encoder_outputs = model.encode(
            inputs,
            input_name=name,
            attention_mask=mask,
            output_attentions=bool(config.output_attentions),
            output_hidden_states=bool(config.output_hidden_states),
            **split_encoder_kwargs(kwargs),
        )
    # 2. the decoder prompt
    dec_ids = _as_tensor(kwargs.pop("decoder_input_ids", None), "decoder_input_ids", device)
    if dec_ids is None and name != "input_ids":
        dec_ids = _as_tensor(kwargs.pop("input_ids", None), "input_ids", device)
    dec_mask = _as_tensor(
        kwargs.pop("decoder_attention_mask", None), "decoder_attention_mask", device
    )
    if dec_ids is not None:
        check_ids("decoder_input_ids", dec_ids, model.info.vocab_size)
        if dec_mask is not None and dec_mask.shape != dec_ids.shape:
            raise ValueError(
                f"decoder_attention_mask has shape {tuple(dec_mask.shape)} but "
                f"decoder_input_ids {tuple(dec_ids.shape)}"
            )
    start_id = config.decoder_start_token_id
    if start_id is None:
        start_id = config.bos_token_id
    start = decoder_start_ids(start_id, batch, device)
    model_type = getattr(getattr(getattr(model, "hf", None), "config", None), "model_type", "")
    dec_ids, dec_mask = initial_decoder_ids(dec_ids, start, dec_mask, model_type or "")
    given_mask = dec_mask is not None
    if dec_mask is None:
        dec_mask = torch.ones_like(dec_ids)
    return EncoderDecoderInputs(
        encoder_input_ids=inputs,
        encoder_outputs=encoder_outputs,
        encoder_attention_mask=mask,
        decoder_input_ids=dec_ids,
        decoder_attention_mask=dec_mask,
        decoder_mask_given=given_mask,
        model_kwargs=kwargs,
    )


def _check_model_kwargs(model, kwargs: dict[str, Any]) -> None:
    accepted = getattr(model, "accepted_inputs", None)
    if accepted is None:
        return
    names = accepted() | {"decoder_input_ids", "encoder_outputs"}
    unknown = sorted(k for k, v in kwargs.items() if v is not None and k not in names)
    if unknown:
        raise ValueError(
            f"unknown generate() arguments for the encoder-decoder model "
            f"{model.info.architecture}: {', '.join(unknown)}. They are neither GenerationConfig "
            f"fields nor inputs of its forward, encoder or decoder (e.g. input_ids, "
            f"attention_mask, decoder_input_ids, decoder_attention_mask)"
        )
