"""Adapter: any transformers ``PreTrainedModel`` as a genlab model.

The adapter calls the wrapped model with exactly the inputs transformers' own generation
loop gives it (new tokens, the 2-D attention mask, position ids from the mask, the cache
position, ``logits_to_keep``), so logits are bit-identical to the reference's.
transformers is imported lazily: it is an optional dependency of genlab.

Encoder-decoder models (T5, BART, Marian, Speech2Text...) get two more things: ``encode()``
runs the encoder once on the source, and ``forward(..., encoder_outputs=...,
encoder_attention_mask=...)`` runs one decoder step against it (the new tokens are the
*decoder* tokens; the cache holds self- and cross-attention keys/values).
"""

from __future__ import annotations

import copy
import functools
import inspect
from dataclasses import dataclass
from typing import Any

import torch

from .base import ModelInfo, ModelOutput

#: decoder-step inputs the adapter sets itself (a user value for them is ignored)
_STEP_KEYS = (
    "decoder_input_ids",
    "past_key_values",
    "use_cache",
    "cache_position",
    "encoder_outputs",
    "attention_mask",
    "decoder_attention_mask",
)


def is_transformers_model(obj: Any) -> bool:
    """True for a transformers ``PreTrainedModel`` (without importing transformers)."""
    return any(
        c.__module__.startswith("transformers.") and c.__name__ == "PreTrainedModel"
        for c in type(obj).__mro__
    )


def _reference_compile_config(compile_config):
    """genlab's CompileConfig as transformers' own (which get_compiled_call compares)."""
    from transformers import CompileConfig

    ours = CompileConfig(**compile_config.to_dict())
    ours._compile_all_devices = compile_config.all_devices
    return ours


class HFCache:
    """A transformers ``Cache`` seen through genlab's cache protocol."""

    def __init__(self, inner):
        self.inner = inner

    @property
    def is_compileable(self) -> bool:
        return bool(getattr(self.inner, "is_compileable", False))

    def length(self) -> int:
        return int(self.inner.get_seq_length())

    def reorder(self, index: torch.LongTensor) -> None:
        self.inner.reorder_cache(index)

    def crop(self, length: int) -> None:
        if length < 0:
            length = self.length() + length
        self.inner.crop(length)

    def copy(self) -> HFCache:
        return HFCache(copy.deepcopy(self.inner))

    def checkpoint(self):
        """A token for :meth:`restore`. transformers' dynamic layers rebind their tensors
        on every update, crop and reorder, so their attributes are the checkpoint."""
        return _layers_token(self.inner)

    def restore(self, token) -> None:
        _restore_layers(self.inner, token)


def _layers_token(cache):
    parts = [getattr(cache, n, None) for n in ("self_attention_cache", "cross_attention_cache")]
    if any(p is not None for p in parts):  # encoder-decoder: both halves
        return ("pair", [_layers_token(p) if p is not None else None for p in parts])
    layers = getattr(cache, "layers", None)
    if layers is None:
        return ("vars", dict(vars(cache)))
    return ("layers", list(layers), [dict(vars(layer)) for layer in layers])


def _restore_layers(cache, token) -> None:
    kind = token[0]
    if kind == "pair":
        for name, sub in zip(
            ("self_attention_cache", "cross_attention_cache"), token[1], strict=True
        ):
            if sub is not None:
                _restore_layers(getattr(cache, name), sub)
    elif kind == "vars":
        vars(cache).clear()
        vars(cache).update(token[1])
    else:
        _, layers, saved = token
        cache.layers[:] = layers
        for layer, values in zip(layers, saved, strict=True):
            vars(layer).clear()
            vars(layer).update(values)


@dataclass
class Seq2SeqStepOutput(ModelOutput):
    """One decoder step of an encoder-decoder model.

    ``attentions`` / ``hidden_states`` are the decoder's (self-attention) ones;
    cross_attentions: per layer (rows, heads, new_len, src_len), or None.
    """

    cross_attentions: tuple[torch.Tensor, ...] | None = None


def _as_list(x):
    if x is None:
        return None
    if isinstance(x, torch.Tensor):
        x = x.tolist()
    return x


class HFModel:
    """Wrap a transformers causal LM (or encoder-decoder model) so genlab's engine can
    drive it.

    (Not run as a test: it needs the Hugging Face Hub (gpt2).)

    >>> from transformers import AutoModelForCausalLM          # doctest: +SKIP
    >>> model = HFModel(AutoModelForCausalLM.from_pretrained("gpt2"))  # doctest: +SKIP
    """

    def __init__(self, hf_model):
        self.hf = hf_model
        cfg = hf_model.config
        gen = getattr(hf_model, "generation_config", None)
        defaults = gen.to_diff_dict() if gen is not None else {}
        defaults.pop("transformers_version", None)
        text_cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
        self.info = ModelInfo(
            vocab_size=int(text_cfg.vocab_size),
            bos_token_id=getattr(gen, "bos_token_id", None) or getattr(cfg, "bos_token_id", None),
            eos_token_id=_as_list(getattr(gen, "eos_token_id", None))
            if getattr(gen, "eos_token_id", None) is not None
            else getattr(cfg, "eos_token_id", None),
            pad_token_id=getattr(gen, "pad_token_id", None)
            if getattr(gen, "pad_token_id", None) is not None
            else getattr(cfg, "pad_token_id", None),
            max_position_embeddings=getattr(text_cfg, "max_position_embeddings", None),
            is_encoder_decoder=bool(getattr(cfg, "is_encoder_decoder", False)),
            decoder_start_token_id=getattr(cfg, "decoder_start_token_id", None),
            name=getattr(cfg, "_name_or_path", "") or type(hf_model).__name__,
            architecture=type(hf_model).__name__,
            num_hidden_layers=int(getattr(text_cfg, "num_hidden_layers", 0) or 0),
            hidden_size=int(getattr(text_cfg, "hidden_size", 0) or 0),
            tie_word_embeddings=bool(getattr(cfg, "tie_word_embeddings", False)),
            generation_defaults=defaults,
        )
        params = set(inspect.signature(hf_model.forward).parameters)
        self._takes_logits_to_keep = "logits_to_keep" in params
        self._takes_position_ids = "position_ids" in params
        self._takes_cache_position = "cache_position" in params
        self._takes_decoder_position_ids = "decoder_position_ids" in params
        self._forward_params = params
        # the source vocabulary (EncoderDecoderModel pairs two configs)
        enc_cfg = getattr(cfg, "encoder", None)
        self.encoder_vocab_size = int(getattr(enc_cfg, "vocab_size", 0) or self.info.vocab_size)

    def head_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The model's output embeddings alone (no final norm): (rows, hidden) -> float32
        (rows, vocab). DoLa reads earlier layers through it."""
        head = self.hf.get_output_embeddings()
        if head is None:
            raise ValueError(
                f"{type(self.hf).__name__} has no output embeddings (get_output_embeddings() "
                "is None): DoLa needs the head to read earlier layers"
            )
        return head(hidden).float()

    def final_norm(self, hidden: torch.Tensor) -> torch.Tensor:
        """The decoder's final norm alone (``norm``, ``ln_f`` or ``final_layer_norm`` of the
        base model): (..., hidden) -> (..., hidden). The logit lens reads an earlier layer
        as ``head_logits(final_norm(h))``."""
        base = getattr(self.hf, getattr(self.hf, "base_model_prefix", ""), None) or self.hf
        for owner in (base, getattr(base, "decoder", None)):
            for name in ("norm", "ln_f", "final_layer_norm", "final_layernorm"):
                module = getattr(owner, name, None) if owner is not None else None
                if callable(module):
                    return module(hidden)
        raise ValueError(
            f"{type(self.hf).__name__}: no final norm found (looked for norm, ln_f, "
            "final_layer_norm on the base model): the logit lens needs it"
        )

    def eager_attention(self):
        """A context in which the model computes attention weights explicitly (transformers'
        "eager" attention), so that ``output_attentions`` returns them; restored after."""
        import contextlib

        @contextlib.contextmanager
        def context():
            before = getattr(self.hf.config, "_attn_implementation", None)
            if before in (None, "eager"):
                yield
                return
            self.hf.set_attn_implementation("eager")
            try:
                yield
            finally:
                self.hf.set_attn_implementation(before)

        return context()

    # -- encoder-decoder models -----------------------------------------------------------
    @property
    def main_input_name(self) -> str:
        """The encoder's input name: "input_ids", "input_features", "pixel_values"..."""
        name = getattr(self.hf, "main_input_name", "input_ids")
        encoder = getattr(self.hf, "encoder", None)
        if self.info.is_encoder_decoder and encoder is not None:
            name = getattr(encoder, "main_input_name", name)
        return name

    def accepted_inputs(self) -> set[str]:
        """Names ``generate`` may receive as model inputs (the reference's own check):
        the model's forward arguments, the encoder's, and ``decoder_<name>`` for the
        decoder's."""
        names = set(self._forward_params)
        for attr, prefix in (("encoder", ""), ("decoder", "decoder_")):
            part = getattr(self.hf, attr, None)
            if part is None:
                base = getattr(self.hf, getattr(self.hf, "base_model_prefix", ""), None)
                part = getattr(base, attr, None)
            if part is not None and self.info.is_encoder_decoder:
                names |= {prefix + p for p in inspect.signature(part.forward).parameters}
        return names - {"self", "kwargs"}

    def encode(
        self,
        inputs: torch.Tensor,
        *,
        input_name: str | None = None,
        attention_mask: torch.Tensor | None = None,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
        **encoder_kwargs,
    ):
        """Run the encoder once; returns its output object (``last_hidden_state``: (batch,
        src_len, hidden), plus ``attentions`` / ``hidden_states`` when asked).

        ``inputs`` is the model's main input (``main_input_name``: token ids (batch,
        src_len), or input_features, pixel_values...), or what ``input_name`` says (e.g.
        "inputs_embeds"). Keyword arguments the encoder does not take are dropped, as the
        reference drops them.
        """
        encoder = self.hf.get_encoder()
        params = set(inspect.signature(encoder.forward).parameters)
        if not ({"kwargs", "model_kwargs"} & params):
            encoder_kwargs = {k: v for k, v in encoder_kwargs.items() if k in params}
        if attention_mask is not None:
            encoder_kwargs["attention_mask"] = attention_mask
        encoder_kwargs["output_attentions"] = output_attentions
        encoder_kwargs["output_hidden_states"] = output_hidden_states
        encoder_kwargs["return_dict"] = True
        encoder_kwargs[input_name or self.main_input_name] = inputs
        with torch.no_grad():
            return encoder(**encoder_kwargs)

    @property
    def device(self) -> torch.device:
        return self.hf.device

    def new_cache(self, batch_size: int, *, sliding: bool = True) -> HFCache:
        from transformers import DynamicCache, EncoderDecoderCache

        # the reference drops the config (no sliding layers) for assisted/contrastive decoding
        def dynamic():
            return DynamicCache(config=self.hf.config) if sliding else DynamicCache()

        if self.info.is_encoder_decoder:  # self-attention and cross-attention caches
            return HFCache(EncoderDecoderCache(dynamic(), dynamic()))
        return HFCache(dynamic())

    def new_static_cache(self, max_cache_len: int) -> HFCache:
        """transformers' preallocated ``StaticCache`` for ``max_cache_len`` positions
        (``cache_implementation="static"``; genlab/runtime/kv_cache.py)."""
        from transformers import StaticCache

        text = self.hf.config.get_text_config(decoder=True)
        return HFCache(StaticCache(config=text, max_cache_len=max_cache_len))

    def compiled_forward(self, compile_config) -> Any:
        """``forward`` through transformers' own compiled call (``get_compiled_call``, as
        the reference's decoding steps use it with a static cache); see
        genlab/runtime/kv_cache.py."""
        reference_config = _reference_compile_config(compile_config)
        return functools.partial(self.forward, _call=self.hf.get_compiled_call(reference_config))

    def forward(
        self,
        input_ids: torch.LongTensor,
        *,
        attention_mask: torch.Tensor,
        position_ids: torch.LongTensor,
        cache: HFCache,
        logits_to_keep: int = 1,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
        _call: Any = None,
        inputs_embeds: torch.Tensor | None = None,
        **extra,
    ) -> ModelOutput:
        """One pass of the new tokens ``input_ids`` (rows, new), or of ``inputs_embeds``
        (rows, new, hidden) in their place (a prompt given as embeddings); the rest as in
        the genlab model protocol (:mod:`genlab.models.base`)."""
        if self.info.is_encoder_decoder:
            return self._decoder_step(
                input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                cache=cache,
                logits_to_keep=logits_to_keep,
                output_attentions=output_attentions,
                output_hidden_states=output_hidden_states,
                **extra,
            )
        past = cache.length()
        kwargs: dict[str, Any] = {
            "attention_mask": attention_mask,
            "past_key_values": cache.inner,
            "use_cache": True,
        }
        if inputs_embeds is not None:
            n, device = inputs_embeds.shape[1], inputs_embeds.device
            kwargs["inputs_embeds"] = inputs_embeds
        else:
            n, device = input_ids.shape[1], input_ids.device
            kwargs["input_ids"] = input_ids.clone(memory_format=torch.contiguous_format)
        if self._takes_cache_position:
            kwargs["cache_position"] = torch.arange(past, past + n, device=device)
        if self._takes_position_ids:
            kwargs["position_ids"] = position_ids.clone(memory_format=torch.contiguous_format)
        if self._takes_logits_to_keep:
            kwargs["logits_to_keep"] = logits_to_keep
        if output_attentions:
            kwargs["output_attentions"] = True
        if output_hidden_states:
            kwargs["output_hidden_states"] = True
        if cache.is_compileable and attention_mask.dim() == 2:
            kwargs["attention_mask"] = self._fixed_shape_mask(attention_mask, cache, past, n)
        kwargs.update(extra)
        out = (_call or self.hf)(**kwargs, return_dict=True)
        logits = out.logits
        if logits_to_keep and logits.shape[1] > logits_to_keep:
            logits = logits[:, -logits_to_keep:]
        return ModelOutput(
            logits=logits.float(),
            hidden_states=getattr(out, "hidden_states", None),
            attentions=getattr(out, "attentions", None),
        )

    def _fixed_shape_mask(self, attention_mask, cache: HFCache, past: int, new_len: int):
        """The mask the reference gives a model whose cache is compileable (static): built
        by the model's own mask function over the whole cache, so that every decoding step
        has the same shapes."""
        from transformers.masking_utils import create_masks_for_generate

        hf = self.hf
        rows = attention_mask.shape[0]
        cache_position = torch.arange(past, past + new_len, device=attention_mask.device)
        base = getattr(hf, hf.base_model_prefix, hf)
        decoder = base.get_decoder() if hasattr(base, "get_decoder") else None
        name = "_prepare_4d_causal_attention_mask_with_cache_position"
        legacy = getattr(base, name, None) or getattr(decoder, name, None)
        if legacy is not None:
            return legacy(
                attention_mask, sequence_length=new_len,
                target_length=cache.inner.get_max_cache_shape(), dtype=hf.dtype,
                cache_position=cache_position, batch_size=rows, config=hf.config,
                past_key_values=cache.inner,
            )  # fmt: skip
        make = getattr(hf, "create_masks_for_generate", create_masks_for_generate)
        return make(
            config=hf.config, input_embeds=torch.empty((rows, new_len), dtype=hf.dtype),
            attention_mask=attention_mask, cache_position=cache_position,
            past_key_values=cache.inner, position_ids=None, token_type_ids=None,
        )  # fmt: skip

    def _decoder_step(
        self,
        input_ids: torch.LongTensor,
        *,
        attention_mask: torch.Tensor,
        position_ids: torch.LongTensor,
        cache: HFCache,
        logits_to_keep: int = 1,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
        encoder_outputs=None,
        encoder_attention_mask: torch.Tensor | None = None,
        decoder_attention_mask_given: bool = False,
        **extra,
    ) -> Seq2SeqStepOutput:
        """One decoder step: ``input_ids`` are the new decoder tokens (rows, new_len);
        ``attention_mask`` the decoder mask so far, passed on only when the user gave one
        (``decoder_attention_mask_given``), as the reference does; ``encoder_outputs`` and
        ``encoder_attention_mask`` (rows, src_len) come from :meth:`encode`, repeated per
        row."""
        if encoder_outputs is None:
            raise ValueError(
                f"{self.info.architecture} is an encoder-decoder model: its decoder steps need "
                "encoder_outputs (genlab.generate runs the encoder for you)"
            )
        past = cache.length()
        n = input_ids.shape[1]
        kwargs: dict[str, Any] = {k: v for k, v in extra.items() if k not in _STEP_KEYS}
        kwargs.update(
            decoder_input_ids=input_ids.clone(memory_format=torch.contiguous_format),
            encoder_outputs=encoder_outputs,
            past_key_values=cache.inner,
            use_cache=True,
        )
        if encoder_attention_mask is not None:
            kwargs["attention_mask"] = encoder_attention_mask
        if decoder_attention_mask_given:
            kwargs["decoder_attention_mask"] = attention_mask
            if self._takes_decoder_position_ids:
                kwargs["decoder_position_ids"] = position_ids.clone(
                    memory_format=torch.contiguous_format
                )
        if self._takes_cache_position:
            kwargs["cache_position"] = torch.arange(past, past + n, device=input_ids.device)
        if self._takes_logits_to_keep:
            kwargs["logits_to_keep"] = logits_to_keep
        if output_attentions:
            kwargs["output_attentions"] = True
        if output_hidden_states:
            kwargs["output_hidden_states"] = True
        out = self.hf(**kwargs, return_dict=True)
        logits = out.logits
        if logits_to_keep and logits.shape[1] > logits_to_keep:
            logits = logits[:, -logits_to_keep:]
        return Seq2SeqStepOutput(
            logits=logits.float(),
            hidden_states=getattr(out, "decoder_hidden_states", None),
            attentions=getattr(out, "decoder_attentions", None),
            cross_attentions=getattr(out, "cross_attentions", None),
        )

    def __repr__(self) -> str:
        return f"HFModel({self.info.architecture}, vocab={self.info.vocab_size})"
