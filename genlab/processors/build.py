"""Assemble the processors a generation config asks for, in the reference's order.

Order (transformers 4.56.2): guidance, sequence bias, Hamming diversity, encoder repetition
penalty, repetition penalty, no-repeat n-grams, encoder no-repeat n-grams, bad words, min
length, min new tokens, prefix constraint, forced BOS, forced EOS, invalid-value removal,
exponential length penalty, suppressed tokens, begin-suppressed tokens; then the user's
list is merged in; then, only when sampling, temperature, top-k, top-p, min-p, typical,
epsilon and eta; then the watermark; then log-softmax renormalisation.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable
from typing import Any

import torch

from ..ids import eos_token_ids
from .base import LogitsProcessorList
from .bias import NoBadWordsLogitsProcessor, SequenceBiasLogitsProcessor
from .forcing import (
    ForcedBOSTokenLogitsProcessor,
    ForcedEOSTokenLogitsProcessor,
    MinLengthLogitsProcessor,
    MinNewTokensLengthLogitsProcessor,
    PrefixConstrainedLogitsProcessor,
    SuppressTokensAtBeginLogitsProcessor,
    SuppressTokensLogitsProcessor,
)
from .guidance import UnbatchedClassifierFreeGuidanceLogitsProcessor
from .normalize import InfNanRemoveLogitsProcessor, LogitNormalization
from .penalties import (
    EncoderNoRepeatNGramLogitsProcessor,
    EncoderRepetitionPenaltyLogitsProcessor,
    ExponentialDecayLengthPenalty,
    HammingDiversityLogitsProcessor,
    NoRepeatNGramLogitsProcessor,
    RepetitionPenaltyLogitsProcessor,
)
from .warpers import (
    EpsilonLogitsWarper,
    EtaLogitsWarper,
    MinPLogitsWarper,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
    TypicalLogitsWarper,
)

# Defaults for fields a duck-typed config may lack (those of the reference's config).
_FALLBACKS = {
    "do_sample": False,
    "num_beams": 1,
    "num_beam_groups": 1,
    "use_cache": True,
    "remove_invalid_values": False,
    "renormalize_logits": False,
}


def _field(config: Any, name: str) -> Any:
    return getattr(config, name, _FALLBACKS.get(name))


def build_processors(
    config: Any,
    *,
    input_ids_seq_length: int,
    encoder_input_ids: torch.LongTensor | None = None,
    prefix_allowed_tokens_fn: Callable[[int, torch.Tensor], list[int]] | None = None,
    logits_processor: Iterable[Any] | None = None,
    model: Any = None,
    negative_prompt_ids: torch.LongTensor | None = None,
    negative_prompt_attention_mask: torch.LongTensor | None = None,
    device: Any = None,
    vocab_size: int | None = None,
    is_beam_sampling: bool = False,
) -> LogitsProcessorList:
    """The processors ``config`` asks for, in the reference's order, merged with the user's.

    ``config`` is read by attribute (genlab's or transformers' GenerationConfig). It must be
    the final config of the call: ``max_length`` already includes ``max_new_tokens`` and the
    model's defaults (EOS id...) already merged in. ``input_ids_seq_length`` is the prompt
    length; ``encoder_input_ids`` (batch, prompt_len) the prompt, for the encoder-side
    penalties. ``model`` (genlab protocol) is needed only for guidance (``guidance_scale !=
    1``); ``vocab_size`` (else ``model.info.vocab_size``) only for watermarking.
    ``is_beam_sampling`` forces the beam rule for ``min_tokens_to_keep`` (number of EOS ids
    + 1) even if ``config.num_beams`` is 1.

    A user processor of the same class as a built-in one (genlab's, or transformers' class
    of the same name) replaces it in place, with a warning; the others go after the
    built-in processors and before the warpers.

    >>> from types import SimpleNamespace as C
    >>> cfg = C(do_sample=True, temperature=0.7, top_k=50, top_p=1.0, eos_token_id=2)
    >>> build_processors(cfg, input_ids_seq_length=3).stage_names()
    ['temperature', 'top_k']
    """
    device = device if device is not None else "cpu"
    eos = eos_token_ids(config) or None
    processors = LogitsProcessorList(
        _core_processors(
            config,
            eos=eos,
            input_ids_seq_length=input_ids_seq_length,
            encoder_input_ids=encoder_input_ids,
            prefix_allowed_tokens_fn=prefix_allowed_tokens_fn,
            model=model,
            negative_prompt_ids=negative_prompt_ids,
            negative_prompt_attention_mask=negative_prompt_attention_mask,
            device=device,
        )
    )
    processors = merge_user_processors(processors, list(logits_processor or []))
    if _field(config, "do_sample"):
        beams = is_beam_sampling or (_field(config, "num_beams") or 1) > 1
        # beam sampling keeps one non-EOS token beyond the EOS ids, to explore continuations
        keep = ((len(eos) if eos is not None else 1) + 1) if beams else 1
        processors.extend(_warpers(config, min_tokens_to_keep=keep, device=device))
    watermarking = _field(config, "watermarking_config")
    if watermarking is not None:
        processors.append(
            _watermark(watermarking, vocab_size=vocab_size, model=model, device=device)
        )
    if _field(config, "renormalize_logits") is True:
        processors.append(LogitNormalization())
    return processors


def _core_processors(
    config: Any,
    *,
    eos: list[int] | None,
    input_ids_seq_length: int,
    encoder_input_ids,
    prefix_allowed_tokens_fn,
    model,
    negative_prompt_ids,
    negative_prompt_attention_mask,
    device,
) -> list[Any]:
    """Steps 1-17 of the reference order (everything before the user's processors)."""
    f = lambda name: _field(config, name)  # noqa: E731
    out: list[Any] = []
    guidance = f("guidance_scale")
    if guidance is not None and guidance != 1:
        if model is None:
            raise ValueError(
                f"`guidance_scale` is {guidance} but no model was given for the unconditional "
                "pass: pass `model=` to build_processors, or set guidance_scale=None"
            )
        out.append(
            UnbatchedClassifierFreeGuidanceLogitsProcessor(
                guidance,
                model,
                unconditional_ids=negative_prompt_ids,
                unconditional_attention_mask=negative_prompt_attention_mask,
                use_cache=f("use_cache"),
            )
        )
    if f("sequence_bias") is not None:
        out.append(SequenceBiasLogitsProcessor(f("sequence_bias")))
    if (f("diversity_penalty") or 0.0) > 0.0:
        out.append(
            HammingDiversityLogitsProcessor(
                f("diversity_penalty"), f("num_beams"), f("num_beam_groups")
            )
        )
    has_prompt = encoder_input_ids is not None and encoder_input_ids.dim() == 2
    penalty = f("encoder_repetition_penalty")
    if penalty is not None and penalty != 1.0:
        if has_prompt:
            out.append(EncoderRepetitionPenaltyLogitsProcessor(penalty, encoder_input_ids))
        else:
            _warn_no_prompt("encoder_repetition_penalty")
    if f("repetition_penalty") is not None and f("repetition_penalty") != 1.0:
        out.append(RepetitionPenaltyLogitsProcessor(f("repetition_penalty")))
    if (f("no_repeat_ngram_size") or 0) > 0:
        out.append(NoRepeatNGramLogitsProcessor(f("no_repeat_ngram_size")))
    if (f("encoder_no_repeat_ngram_size") or 0) > 0:
        if has_prompt:
            out.append(
                EncoderNoRepeatNGramLogitsProcessor(
                    f("encoder_no_repeat_ngram_size"), encoder_input_ids
                )
            )
        else:
            _warn_no_prompt("encoder_no_repeat_ngram_size")
    if f("bad_words_ids") is not None:
        out.append(NoBadWordsLogitsProcessor(f("bad_words_ids"), eos))
    if eos is not None and (f("min_length") or 0) > 0:
        out.append(MinLengthLogitsProcessor(f("min_length"), eos, device=device))
    if eos is not None and (f("min_new_tokens") or 0) > 0:
        out.append(
            MinNewTokensLengthLogitsProcessor(
                input_ids_seq_length, f("min_new_tokens"), eos, device=device
            )
        )
    if prefix_allowed_tokens_fn is not None:
        beams_per_group = (f("num_beams") or 1) // (f("num_beam_groups") or 1)
        out.append(PrefixConstrainedLogitsProcessor(prefix_allowed_tokens_fn, beams_per_group))
    if f("forced_bos_token_id") is not None:
        out.append(ForcedBOSTokenLogitsProcessor(f("forced_bos_token_id")))
    if f("forced_eos_token_id") is not None:
        out.append(
            ForcedEOSTokenLogitsProcessor(f("max_length"), f("forced_eos_token_id"), device=device)
        )
    if f("remove_invalid_values") is True:
        out.append(InfNanRemoveLogitsProcessor())
    if f("exponential_decay_length_penalty") is not None:
        out.append(
            ExponentialDecayLengthPenalty(
                f("exponential_decay_length_penalty"), eos, input_ids_seq_length
            )
        )
    if f("suppress_tokens") is not None:
        out.append(SuppressTokensLogitsProcessor(f("suppress_tokens"), device=device))
    if f("begin_suppress_tokens") is not None:
        # the first generated position, one later when a forced BOS follows a 1-token prompt
        begin = input_ids_seq_length
        if input_ids_seq_length <= 1 and f("forced_bos_token_id") is not None:
            begin += 1
        out.append(
            SuppressTokensAtBeginLogitsProcessor(f("begin_suppress_tokens"), begin, device=device)
        )
    return out


def _warn_no_prompt(name: str) -> None:
    warnings.warn(
        f"`{name}` is set but no prompt ids (encoder_input_ids, 2-D) were given: it is ignored",
        UserWarning,
        stacklevel=3,
    )


def _warpers(config: Any, *, min_tokens_to_keep: int, device: Any) -> list[Any]:
    """Steps 18-24: the sampling-only filters."""
    f = lambda name: _field(config, name)  # noqa: E731
    keep = min_tokens_to_keep
    out: list[Any] = []
    if f("temperature") is not None and f("temperature") != 1.0:
        out.append(TemperatureLogitsWarper(f("temperature")))
    if f("top_k") is not None and f("top_k") != 0:
        out.append(TopKLogitsWarper(top_k=f("top_k"), min_tokens_to_keep=keep))
    if f("top_p") is not None and f("top_p") < 1.0:
        out.append(TopPLogitsWarper(top_p=f("top_p"), min_tokens_to_keep=keep))
    if f("min_p") is not None:
        out.append(MinPLogitsWarper(min_p=f("min_p"), min_tokens_to_keep=keep))
    if f("typical_p") is not None and f("typical_p") < 1.0:
        out.append(TypicalLogitsWarper(mass=f("typical_p"), min_tokens_to_keep=keep))
    if f("epsilon_cutoff") is not None and 0.0 < f("epsilon_cutoff") < 1.0:
        out.append(EpsilonLogitsWarper(epsilon=f("epsilon_cutoff"), min_tokens_to_keep=keep))
    if f("eta_cutoff") is not None and 0.0 < f("eta_cutoff") < 1.0:
        out.append(EtaLogitsWarper(epsilon=f("eta_cutoff"), min_tokens_to_keep=keep, device=device))
    return out


def _watermark(watermarking_config: Any, *, vocab_size, model, device) -> Any:
    if vocab_size is None and model is not None:
        vocab_size = model.info.vocab_size
    if vocab_size is None:
        raise ValueError(
            "`watermarking_config` is set but the vocabulary size is unknown: pass "
            "`vocab_size=` (or `model=`) to build_processors"
        )
    # imported here: genlab.watermark's processors subclass processors.base.LogitsProcessor,
    # so the watermark package imports this package (not the other way round at load time)
    from genlab.watermark import watermark_processor

    return watermark_processor(watermarking_config, vocab_size=vocab_size, device=device)


def _same_kind(custom: Any, default: Any) -> bool:
    """Same class, or transformers' class of the same name as a genlab built-in."""
    if type(custom) is type(default):
        return True
    module = type(custom).__module__ or ""
    return module.startswith("transformers.") and type(custom).__name__ == type(default).__name__


def merge_user_processors(defaults: LogitsProcessorList, custom: list[Any]) -> LogitsProcessorList:
    """The reference's merge: each built-in processor is replaced by the first user
    processor of the same kind (with a warning); user processors not placed that way are
    appended after all the built-in ones.

    >>> from genlab.processors import TopKLogitsWarper
    >>> mine = TopKLogitsWarper(5)
    >>> merge_user_processors(LogitsProcessorList(), [mine]) == [mine]
    True
    """
    if not custom:
        return defaults
    merged = LogitsProcessorList()
    for default in defaults:
        replacement = next((c for c in custom if _same_kind(c, default)), None)
        if replacement is None:
            merged.append(default)
            continue
        name = type(default).__name__
        warnings.warn(
            f"A {name} was passed in `logits_processor` and the generation config also creates "
            f"one; the one passed in is used. Unset the config field it comes from (see "
            f"{name}'s docstring) to silence this warning.",
            UserWarning,
            stacklevel=3,
        )
        merged.append(replacement)
    for processor in custom:
        if not any(processor is placed for placed in merged):
            merged.append(processor)
    return merged
