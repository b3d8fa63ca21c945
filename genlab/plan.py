"""From ``generate()``'s arguments to what a run works with.

* :func:`prepare_config` -- the GenerationConfig from the model's defaults, a given config
  and keyword arguments, with the reference's precedence;
* :func:`prepare_inputs` -- the prompt and attention mask as checked tensors;
* :func:`make_plan` -- what a config means for the next step (:class:`~genlab.state.Plan`):
  the effective config, the generation mode, processors and stopping criteria;
* :func:`switch_strategy` -- a new strategy when the mode changes between steps, or a
  ValueError saying why it cannot.
"""

from __future__ import annotations

import copy
import logging
import warnings

import torch

from .ids import as_ids, check_ids, eos_token_ids
from .inputs import TOKEN_TYPES_HINT, check_generated_length, prompt_ids
from .state import Given, Plan
from .strategies import strategy_for

logger = logging.getLogger(__name__)

#: config values compared without a copy
_IMMUTABLE = (int, float, str, type(None))


def prepare_config(model, generation_config=None, use_model_defaults=None, **kwargs):
    """Base config (the model's defaults or the given one) updated with ``kwargs``.

    Returns ``(config, unused_kwargs)``, mirroring the reference's precedence: explicit
    kwargs > the given config > the model's generation defaults > global defaults.
    """
    from .config import GenerationConfig

    info = model.info
    defaults = dict(info.generation_defaults or {})
    # a model without a generation_config.json still knows its special tokens
    for key in ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id"):
        if defaults.get(key) is None and getattr(info, key, None) is not None:
            defaults[key] = getattr(info, key)
    if generation_config is None:
        config = GenerationConfig.from_dict(defaults) if defaults else GenerationConfig()
    else:
        config = copy.deepcopy(GenerationConfig.from_any(generation_config))
        if use_model_defaults is not False and defaults:
            plain = GenerationConfig()
            for key, value in defaults.items():
                if key.startswith("_") or key == "transformers_version":
                    continue
                if getattr(config, key, None) == getattr(plain, key, None) and value != getattr(
                    plain, key, None
                ):
                    setattr(config, key, value)
            if config.temperature == 0.0:
                config.do_sample = False
    unused = config.update(**kwargs)
    return config, unused


def prepare_inputs(model, config, unused: dict, input_ids, attention_mask, tokenizer, generate):
    """The prompt as tensors, checked: ``(ids, mask, pad_token_id, eos_ids, encdec,
    device)``. ``unused`` holds the keyword arguments that were no config fields (model
    inputs); encoder-decoder models run their encoder here (``encdec``)."""
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
    if unused:
        raise ValueError(
            f"unknown generate() arguments: {', '.join(sorted(unused))}. They are neither "
            "GenerationConfig fields nor model inputs (input_ids, attention_mask, tokenizer)."
            + (TOKEN_TYPES_HINT if "token_type_ids" in unused else "")
        )
    ids = as_ids(prompt_ids(input_ids, "input_ids"), "input_ids")
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
    if encdec is None and ids.shape[0] > 1:  # the reference's check, and the mask's word
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
        from .healing import heal_tokens

        ids = heal_tokens(model, ids, tokenizer, generate)
        if mask.shape != ids.shape:
            mask = infer_attention_mask(ids, pad, eos)
    return ids, mask, pad, eos, encdec, device


def infer_attention_mask(ids: torch.LongTensor, pad: int | None, eos: list[int]):
    """0 on padding when the pad id occurs in the prompt and is not an EOS id, else ones."""
    if pad is not None and (ids == pad).any() and pad not in eos:
        return ids.ne(pad).long()
    return torch.ones_like(ids)


def effective_config(config, given: Given):
    """A copy of ``config`` with lengths resolved against the prompt of ``given``."""
    cfg = copy.deepcopy(config)
    n = given.prompt_length
    if cfg.max_new_tokens is not None:
        cfg.max_length = cfg.max_new_tokens + n
    elif given.has_default_max_length and cfg.max_length == 20:
        cfg.max_length = 20 + n
        if given.info.max_position_embeddings is not None:
            cfg.max_length = min(cfg.max_length, given.info.max_position_embeddings)
    if cfg.min_new_tokens is not None:
        cfg.min_length = cfg.min_new_tokens + n
    if cfg.pad_token_id is None and given.pad_token_id is not None:
        cfg.pad_token_id = given.pad_token_id
    check_generated_length(cfg, n, given.has_default_max_length, given.encdec is not None)
    return cfg


def config_values(config) -> dict:
    """The config's values; shallow copies of mutable ones, so that an edit in place
    counts as a change."""
    return {k: v if isinstance(v, _IMMUTABLE) else copy.copy(v) for k, v in vars(config).items()}


def make_plan(config, given: Given, seen: dict | None = None) -> Plan:
    """Processors, stopping criteria and mode for the current config (validated)."""
    from .processors import build_processors
    from .stopping import build_stopping_criteria

    config.validate()
    config.check_token_ids(given.info.vocab_size)
    cfg = effective_config(config, given)
    mode = cfg.get_generation_mode(given.assistant_model)
    mode = getattr(mode, "value", mode)
    strategy_for(mode)  # an unknown mode fails here, before anything is built
    encoder_ids = given.input_ids if given.encdec is None else given.encdec.encoder_input_ids
    processors = build_processors(
        cfg,
        input_ids_seq_length=given.prompt_length,
        encoder_input_ids=encoder_ids,
        prefix_allowed_tokens_fn=given.prefix_allowed_tokens_fn,
        logits_processor=given.user_processors,
        model=given.model,
        negative_prompt_ids=given.negative_prompt_ids,
        negative_prompt_attention_mask=given.negative_prompt_attention_mask,
        device=given.device,
        vocab_size=given.info.vocab_size,
        is_beam_sampling=mode == "beam_sample",
    )
    criteria = build_stopping_criteria(
        cfg,
        tokenizer=given.tokenizer,
        user_criteria=given.user_criteria,
        max_position_embeddings=given.info.max_position_embeddings,
    )
    return Plan(
        config=cfg,
        mode=mode,
        processors=processors,
        stopping_criteria=criteria,
        has_eos_stopping=any(hasattr(c, "eos_token_id") for c in criteria),
        compiled=None,
        seen=seen if seen is not None else config_values(config),
    )


def switch_strategy(old, cls, plan: Plan, old_plan: Plan, ctx):
    """The strategy for a new generation mode between steps, or a ValueError (raised before
    anything changed) naming the field and saying why.

    Token-by-token modes (greedy, sampling, contrastive, DoLa, assisted / prompt lookup /
    early exit) hand over which rows are finished; beam search and beam sampling hand over
    their whole state. Moving between one row per input and beams is refused: the rows
    mean different things (start a new run, or fork before changing the mode).
    """
    family_old, family_new = old.family, cls.family
    if family_old == family_new == "token":
        if cls.rows_per_input(plan.config) != old.rows_per_input(old_plan.config):
            raise ValueError(
                "num_return_sequences cannot change during a run (it fixes the number of rows): "
                "set it back, or start a new run"
            )
        old.leave(ctx)
        new = cls(plan.config)
        new.start(ctx)
        new.unfinished = old.unfinished.clone()
        return new
    if family_old == family_new == "beam":
        new = cls(plan.config)
        new.set_state(old.get_state())
        new.config = plan.config
        return new
    field = "num_beams" if "token" in (family_old, family_new) else _beam_field(old, cls)
    raise ValueError(
        f"cannot switch a running generation from {old.mode} to {cls.mode} ({field} changed): "
        f"{_why(family_old, family_new)} Set {field} back, or start a new run (fork first to "
        "keep this one)."
    )


def _beam_field(old, cls) -> str:
    modes = {old.mode, cls.mode}
    if "group_beam_search" in modes:
        return "num_beam_groups"
    if "constrained_beam_search" in modes:
        return "constraints / force_words_ids"
    return "num_beams"


def _why(a: str, b: str) -> str:
    if "token" in (a, b):
        return (
            "a token-by-token run has one row per sequence, a beam search one row per beam "
            "with scores and a hypothesis pool, so neither can go on from the other's state."
        )
    return "these beam searches keep different hypothesis pools and cannot take over each other's."
