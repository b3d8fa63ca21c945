"""What a config means for the next step: the third stage of a run's set-up.

A run's set-up is a pipeline, each stage entered once on the way to the first step:
:func:`genlab.config.prepare_config` (the call's config) -> :func:`genlab.run.inputs.prepare_inputs`
(what the run was given, :class:`~genlab.run.inputs.Given`) -> :func:`make_plan` (the
:class:`Plan`) -> :func:`genlab.run.state.initial_state` (the :class:`~genlab.run.state.RunState`).

* :func:`make_plan` -- what a config means for the next step: the config in force (lengths
  resolved for the prompt, :func:`effective_config`), the generation mode, processors and
  stopping criteria; rebuilt between steps when the config changes;
* :func:`resolve_lengths` -- max/min lengths as totals for a prompt (runs and scoring);
* :func:`check_generated_length` -- the reference's length checks on the config in force;
* :func:`switch_strategy` -- a new strategy when the mode changes between steps, or a
  ValueError saying why it cannot.
"""

from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass
from typing import Any

from ..ids import eos_token_ids
from ..strategies import strategy_for
from .inputs import Given

#: config values compared without a copy
_IMMUTABLE = (int, float, str, type(None))


@dataclass
class Plan:
    """What the config means for the next step."""

    config: Any  # effective GenerationConfig (lengths resolved for the prompt)
    mode: str
    processors: Any
    stopping_criteria: Any
    has_eos_stopping: bool
    eos_token_ids: list[int]  # the config's EOS ids, a list
    pad_token_id: int | None  # the id finished rows receive (the config's, else the 1st EOS)
    compiled: Any  # compiled decoding step, or None
    seen: dict  # the user's config values this plan was built from
    #: how a step's own forward pass runs (:func:`forward_route`), chosen with the plan
    route: str = "eager"


def effective_config(config, given: Given):
    """A copy of ``config`` with lengths resolved against the prompt of ``given``."""
    cfg = copy.deepcopy(config)
    n = given.prompt_length
    resolve_lengths(
        cfg,
        n,
        has_default_max_length=given.has_default_max_length,
        max_position_embeddings=given.info.max_position_embeddings,
    )
    if cfg.pad_token_id is None:  # as at the start: the first EOS id (the one in force)
        eos = eos_token_ids(cfg)
        cfg.pad_token_id = eos[0] if eos else given.pad_token_id
    check_generated_length(cfg, n, given.has_default_max_length, given.encdec is not None)
    return cfg


def resolve_lengths(
    cfg: Any,
    prompt_length: int,
    *,
    has_default_max_length: bool,
    max_position_embeddings: int | None = None,
) -> Any:
    """Set ``cfg``'s lengths (in place) as totals for a prompt of ``prompt_length`` tokens,
    the reference's rule: ``max_new_tokens`` wins over ``max_length``; a ``max_length``
    left at its default 20 means 20 new tokens (at most ``max_position_embeddings`` in
    all); ``min_new_tokens`` sets ``min_length``. Returns ``cfg``. A run's
    :func:`effective_config` and :func:`genlab.experiments.scoring.score`'s processors use it.

    >>> from genlab.config import GenerationConfig
    >>> cfg = resolve_lengths(GenerationConfig(max_new_tokens=5, min_new_tokens=2), 7,
    ...                       has_default_max_length=True)
    >>> cfg.max_length, cfg.min_length
    (12, 9)
    >>> resolve_lengths(GenerationConfig(), 7, has_default_max_length=True,
    ...                 max_position_embeddings=24).max_length
    24
    """
    if cfg.max_new_tokens is not None:
        cfg.max_length = cfg.max_new_tokens + prompt_length
    elif has_default_max_length and cfg.max_length == 20:
        cfg.max_length = 20 + prompt_length
        if max_position_embeddings is not None:
            cfg.max_length = min(cfg.max_length, max_position_embeddings)
    if cfg.min_new_tokens is not None:
        cfg.min_length = cfg.min_new_tokens + prompt_length
    return cfg


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


def config_values(config) -> dict:
    """The config's values; shallow copies of mutable ones, so that an edit in place
    counts as a change."""
    return {k: v if isinstance(v, _IMMUTABLE) else copy.copy(v) for k, v in vars(config).items()}


def make_plan(config, given: Given, seen: dict | None = None) -> Plan:
    """Processors, stopping criteria and mode for the current config (validated)."""
    from ..processors import build_processors
    from ..stopping import build_stopping_criteria

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
        tokenizer=given.tokenizer,
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
        eos_token_ids=eos_token_ids(cfg),
        pad_token_id=None if cfg.pad_token_id is None else int(cfg.pad_token_id),
        compiled=None,
        seen=seen if seen is not None else config_values(config),
    )


def forward_route(plan: Plan, given: Given) -> str:
    """How the steps of this plan run the model, chosen once when the plan is built (and
    after :attr:`Plan.compiled` is set): ``"compiled"`` (decoding steps through the compiled
    static-cache step), ``"cached"`` (through the run's forward cache, which serves a pass
    it has kept and keeps the ones it computes) or ``"eager"`` (the model's forward). A
    quantized model is a model like any other here. Hooks inside the layers (the "tapped"
    pass) are the one per-step question, since they may be added between any two steps."""
    cfg = plan.config
    if plan.compiled is not None:
        return "compiled"
    if (
        given.forward_cache is not None
        and cfg.use_cache is not False
        and given.encdec is None
        and not cfg.output_attentions
        and not cfg.output_hidden_states
    ):
        return "cached"
    return "eager"


def carry_processor_state(old_processors, new_processors) -> None:
    """After a config change, each new processor that keeps run state (one with a
    ``carry_from`` method: mirostat's μ) takes it from the old processor of its class, so
    that the state survives a change of an unrelated field."""
    for proc in new_processors or ():
        carry = getattr(proc, "carry_from", None)
        if carry is None:
            continue
        for old in old_processors or ():
            if type(old) is type(proc):
                carry(old)
                break


def check_row_layout(old, cls, plan: Plan, old_plan: Plan) -> None:
    """A ValueError, before anything changed, when a token-by-token run's config changes its
    rows per input (``num_return_sequences``): the rows were laid out at the start. Beam
    strategies refuse changes of their own layout when given the config."""
    if not old.family == cls.family == "token":
        return
    was, now = old.rows_per_input(old_plan.config), cls.rows_per_input(plan.config)
    if was != now:
        raise ValueError(
            f"num_return_sequences cannot change during a run (was {was}, got {now}): it fixes "
            "the number of rows, laid out at the start. Set it back, or start a new run with "
            f"num_return_sequences={now}"
        )


def switch_strategy(old, cls, plan: Plan, old_plan: Plan, ctx):
    """The strategy for a new generation mode between steps, or a ValueError (raised before
    anything changed) naming the field and saying why. The caller has run
    :func:`check_row_layout` already (the engine does, for every config change).

    Token-by-token modes (greedy, sampling, contrastive, DoLa, assisted / prompt lookup /
    early exit) hand over which rows are finished; beam search and beam sampling hand over
    their whole state. Moving between one row per input and beams is refused: the rows
    mean different things (start a new run, or fork before changing the mode).
    """
    family_old, family_new = old.family, cls.family
    if family_old == family_new == "token":  # the caller checked the row layout
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
