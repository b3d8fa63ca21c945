"""Adapter: any transformers ``PreTrainedModel`` as a genlab model.

The adapter calls the wrapped model with exactly the inputs transformers' own generation
loop gives it (new tokens, the 2-D attention mask, position ids from the mask, the cache
position, ``logits_to_keep``), so logits are bit-identical to the reference's.
transformers is imported lazily: it is an optional dependency of genlab.
"""

from __future__ import annotations

import copy
import inspect
from typing import Any

import torch

from .base import ModelInfo, ModelOutput


def is_transformers_model(obj: Any) -> bool:
    """True for a transformers ``PreTrainedModel`` (without importing transformers)."""
    return any(c.__module__.startswith("transformers.") and c.__name__ == "PreTrainedModel"
               for c in type(obj).__mro__)


class HFCache:
    """A transformers ``Cache`` seen through genlab's cache protocol."""

    def __init__(self, inner):
        self.inner = inner

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


def _as_list(x):
    if x is None:
        return None
    if isinstance(x, torch.Tensor):
        x = x.tolist()
    return x


class HFModel:
    """Wrap a transformers causal LM so genlab's engine can drive it.

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
            generation_defaults=defaults,
        )
        params = set(inspect.signature(hf_model.forward).parameters)
        self._takes_logits_to_keep = "logits_to_keep" in params
        self._takes_position_ids = "position_ids" in params
        self._takes_cache_position = "cache_position" in params

    @property
    def device(self) -> torch.device:
        return self.hf.device

    def new_cache(self, batch_size: int, *, sliding: bool = True) -> HFCache:
        from transformers import DynamicCache

        # the reference drops the config (no sliding layers) for assisted/contrastive decoding
        return HFCache(DynamicCache(config=self.hf.config) if sliding else DynamicCache())

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
        **extra,
    ) -> ModelOutput:
        past = cache.length()
        n = input_ids.shape[1]
        kwargs: dict[str, Any] = {
            "input_ids": input_ids.clone(memory_format=torch.contiguous_format),
            "attention_mask": attention_mask,
            "past_key_values": cache.inner,
            "use_cache": True,
        }
        if self._takes_cache_position:
            kwargs["cache_position"] = torch.arange(past, past + n, device=input_ids.device)
        if self._takes_position_ids:
            kwargs["position_ids"] = position_ids.clone(memory_format=torch.contiguous_format)
        if self._takes_logits_to_keep:
            kwargs["logits_to_keep"] = logits_to_keep
        if output_attentions:
            kwargs["output_attentions"] = True
        if output_hidden_states:
            kwargs["output_hidden_states"] = True
        kwargs.update(extra)
        out = self.hf(**kwargs, return_dict=True)
        logits = out.logits
        if logits_to_keep and logits.shape[1] > logits_to_keep:
            logits = logits[:, -logits_to_keep:]
        return ModelOutput(
            logits=logits.float(),
            hidden_states=getattr(out, "hidden_states", None),
            attentions=getattr(out, "attentions", None),
        )

    def __repr__(self) -> str:
        return f"HFModel({self.info.architecture}, vocab={self.info.vocab_size})"
