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

from ..config.sampler_fields import SAMPLER_NAMES, sampler_setting
from ..ids import eos_token_ids
from .base import LogitsProcessorList, merge_with_builtins
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
from .samplers import (
    DRYLogitsProcessor,
    DynamicTemperatureLogitsWarper,
    MirostatLogitsWarper,
    MirostatV2LogitsWarper,
    QuadraticSmoothingLogitsWarper,
    TopNSigmaLogitsWarper,
    XTCLogitsWarper,
    dry_breakers,
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
    tokenizer: Any = None,
) -> LogitsProcessorList:
    """The processors ``config`` asks for, in the reference's order, merged with the user's.

    ``config`` is read by attribute (genlab's or transformers' GenerationConfig). It must be
    the final config of the call: ``max_length`` already includes ``max_new_tokens`` and the
    model's defaults (EOS id...) already merged in. ``input_ids_seq_length`` is the prompt
    length; ``encoder_input_ids`` (batch, prompt_len) the prompt, for the encoder-side
    penalties. ``model`` (genlab protocol) is needed only for guidance (``guidance_scale !=
    1``); ``vocab_size`` (else ``model.info.vocab_size``) only for watermarking.
    ``is_beam_sampling`` forces the beam rule for ``min_tokens_to_keep`` (number of EOS ids
    + 1) even if ``config.num_beams`` is 1. ``tokenizer`` turns DRY's sequence breakers
    (text) into tokens; it is needed only when ``dry_multiplier`` > 0.

    The samplers beyond the reference (:mod:`genlab.processors.samplers`, off by default)
    go in too: DRY after the built-in processors, the others among the warpers, in the
    order of ``sampler_order`` when it is set (see :func:`order_warpers`).

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
    sampling = bool(_field(config, "do_sample"))
    order = sampler_setting(config, "sampler_order")
    dry = _dry(config, tokenizer)
    if dry is not None and not (sampling and order is not None and "dry" in order):
        processors.append(dry)  # a penalty: after the built-in ones, sampling or not
        dry = None
    processors = merge_user_processors(processors, list(logits_processor or []))
    if sampling:
        beams = is_beam_sampling or (_field(config, "num_beams") or 1) > 1
        # beam sampling keeps one non-EOS token beyond the EOS ids, to explore continuations
        keep = ((len(eos) if eos is not None else 1) + 1) if beams else 1
        chosen = _warpers(config, min_tokens_to_keep=keep, device=device)
        if dry is not None:
            chosen["dry"] = dry
        processors.extend(order_warpers(chosen, order))
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


def _warpers(config: Any, *, min_tokens_to_keep: int, device: Any) -> dict[str, Any]:
    """Steps 18-24, the sampling-only filters, and the samplers that only run when sampling:
    ``{name in SAMPLER_NAMES: processor}`` for those that are on."""
    f = lambda name: _field(config, name)  # noqa: E731
    s = lambda name: sampler_setting(config, name)  # noqa: E731
    keep = min_tokens_to_keep
    out: dict[str, Any] = {}
    if s("top_n_sigma") is not None:
        out["top_n_sigma"] = TopNSigmaLogitsWarper(s("top_n_sigma"))
    if f("temperature") is not None and f("temperature") != 1.0:
        out["temperature"] = TemperatureLogitsWarper(f("temperature"))
    if s("dynatemp_low") is not None:
        out["dynatemp"] = DynamicTemperatureLogitsWarper(
            s("dynatemp_low"), s("dynatemp_high"), s("dynatemp_exponent")
        )
    if s("smoothing_factor") > 0:
        out["smoothing"] = QuadraticSmoothingLogitsWarper(
            s("smoothing_factor"), s("smoothing_curve")
        )
    if f("top_k") is not None and f("top_k") != 0:
        out["top_k"] = TopKLogitsWarper(top_k=f("top_k"), min_tokens_to_keep=keep)
    if f("top_p") is not None and f("top_p") < 1.0:
        out["top_p"] = TopPLogitsWarper(top_p=f("top_p"), min_tokens_to_keep=keep)
    if f("min_p") is not None:
        out["min_p"] = MinPLogitsWarper(min_p=f("min_p"), min_tokens_to_keep=keep)
    if f("typical_p") is not None and f("typical_p") < 1.0:
        out["typical_p"] = TypicalLogitsWarper(mass=f("typical_p"), min_tokens_to_keep=keep)
    if f("epsilon_cutoff") is not None and 0.0 < f("epsilon_cutoff") < 1.0:
        out["epsilon_cutoff"] = EpsilonLogitsWarper(
            epsilon=f("epsilon_cutoff"), min_tokens_to_keep=keep
        )
    if f("eta_cutoff") is not None and 0.0 < f("eta_cutoff") < 1.0:
        out["eta_cutoff"] = EtaLogitsWarper(
            epsilon=f("eta_cutoff"), min_tokens_to_keep=keep, device=device
        )
    if s("xtc_probability") > 0:
        out["xtc"] = XTCLogitsWarper(
            s("xtc_threshold"), s("xtc_probability"), min_tokens_to_keep=keep
        )
    mode = s("mirostat_mode")
    if mode:
        cls = MirostatLogitsWarper if mode == 1 else MirostatV2LogitsWarper
        out["mirostat"] = cls(s("mirostat_tau"), s("mirostat_eta"))
    return out


def order_warpers(chosen: dict[str, Any], order: list[str] | None) -> list[Any]:
    """The warpers and samplers that are on, in ``order`` (``sampler_order``; None: the
    default, the reference's order with the samplers placed as text-generation-webui
    places them). Refused, naming why: a sampler that is on but missing from the order,
    and mirostat before another sampler (it chooses the token's pool itself, so whatever
    ran after it would change a distribution it already measured its surprise on).

    >>> from genlab.processors import TopKLogitsWarper, TemperatureLogitsWarper
    >>> chosen = {"top_k": TopKLogitsWarper(5), "temperature": TemperatureLogitsWarper(0.7)}
    >>> [p.stage_name for p in order_warpers(chosen, ["top_k", "temperature"])]
    ['top_k', 'temperature']
    """
    names = list(SAMPLER_NAMES if order is None else order)
    missing = [name for name in chosen if name not in names]
    if missing:
        raise ValueError(
            f"`sampler_order` {list(order or [])} leaves out {missing}, which the config turns "
            f"on: add {missing[0]!r} to sampler_order, or turn it off"
        )
    ordered = [name for name in names if name in chosen]
    if "mirostat" in ordered and ordered[-1] != "mirostat":
        after = ordered[ordered.index("mirostat") + 1 :]
        raise ValueError(
            f"`sampler_order` places mirostat before {after}: mirostat picks the pool the "
            "token is drawn from and measures the chosen token's surprise there, so it must "
            "run last; move 'mirostat' to the end of sampler_order"
        )
    return [chosen[name] for name in ordered]


def check_samplers(config: Any, tokenizer: Any = None) -> None:
    """What building the samplers of ``config`` would refuse, refused now, without a model
    (the panels check a value with it before they take it): an order that cannot work
    (:func:`order_warpers`), and, with ``tokenizer``, sequence breakers that tokenize to
    nothing. A ValueError names the field."""
    breakers = sampler_setting(config, "dry_sequence_breakers")
    wanted = "dry_sequence_breakers" in vars(config) or sampler_setting(config, "dry_multiplier")
    if tokenizer is not None and breakers and wanted:
        _breaker_table(tokenizer, tuple([breakers] if isinstance(breakers, str) else breakers))
    if not _field(config, "do_sample"):
        return
    chosen = _warpers(config, min_tokens_to_keep=1, device=None)
    order = sampler_setting(config, "sampler_order")
    if sampler_setting(config, "dry_multiplier") and order is not None and "dry" in order:
        chosen["dry"] = None
    order_warpers(chosen, order)


def _dry(config: Any, tokenizer: Any) -> DRYLogitsProcessor | None:
    s = lambda name: sampler_setting(config, name)  # noqa: E731
    if not s("dry_multiplier"):
        return None
    breakers = s("dry_sequence_breakers")
    if breakers:
        if tokenizer is None:
            raise ValueError(
                "`dry_sequence_breakers` are text and no tokenizer was given to turn them into "
                "tokens: load the model with its tokenizer, or set dry_sequence_breakers=[]"
            )
        breakers = _breaker_table(
            tokenizer, tuple([breakers] if isinstance(breakers, str) else breakers)
        )
    return DRYLogitsProcessor(
        s("dry_multiplier"),
        s("dry_base"),
        s("dry_allowed_length"),
        breakers or None,
        s("dry_penalty_last_n"),
    )


_BREAKERS: dict[tuple[int, tuple[str, ...]], tuple[Any, dict]] = {}


def _breaker_table(tokenizer: Any, strings: tuple[str, ...]) -> dict:
    # reading the whole vocabulary takes a while: once per tokenizer and breakers
    key = (id(tokenizer), strings)
    if key not in _BREAKERS:
        if len(_BREAKERS) > 16:
            _BREAKERS.clear()
        _BREAKERS[key] = (tokenizer, dry_breakers(tokenizer, list(strings)))
    return _BREAKERS[key][1]


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


def merge_user_processors(defaults: LogitsProcessorList, custom: list[Any]) -> LogitsProcessorList:
    """The reference's merge (:func:`~genlab.processors.base.merge_with_builtins`): each
    built-in processor is replaced by the first user processor of the same kind (with a
    warning); user processors not placed that way are appended after all the built-in ones.

    >>> from genlab.processors import TopKLogitsWarper
    >>> mine = TopKLogitsWarper(5)
    >>> merge_user_processors(LogitsProcessorList(), [mine]) == [mine]
    True
    """
    return merge_with_builtins(defaults, custom, _replaced_processor)


def _replaced_processor(custom: Any) -> str:
    name = type(custom).__name__
    return (
        f"A {name} was passed in `logits_processor` and the generation config also creates "
        f"one; the one passed in is used. Unset the config field it comes from (see "
        f"{name}'s docstring) to silence this warning."
    )
