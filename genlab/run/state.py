"""The parts of a :class:`~genlab.run.engine.Run`, how it starts, and how a step is undone.

* :class:`~genlab.run.inputs.Given` -- what the run was given: model, tokenizer, prompt, user
  objects. Never changes after the start (made by :func:`genlab.run.inputs.prepare_inputs`).
* :class:`~genlab.run.plan.Plan` -- what the config currently means: the effective config, the
  generation mode, processors, stopping criteria, the compiled step. Rebuilt when the
  config changes (:func:`genlab.run.plan.make_plan`).
* :class:`RunState` -- everything a step changes and a snapshot holds: sequences, mask,
  cache, plan, strategy, recorded outputs, random state, the forced queue, the step index.
  :func:`initial_state` makes the first one: the last stage of a run's set-up.

A step first takes an :class:`Undo` (cheap: references, lengths, the strategy's state and
a cache checkpoint); if anything in the step raises, :meth:`Undo.restore` puts the state
back exactly as it was.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import torch

from ..processors.base import is_stateful
from ..runtime.kv_cache import cache_checkpoint, cache_restore, compiled_forward, make_cache
from ..strategies import strategy_for
from .inputs import Given
from .plan import Plan, forward_route
from .randomness import RunRandom

#: the per-step output lists a run records (scores, raw logits, attentions, hidden states)
RECORDED = ("scores", "logits", "attentions", "cross", "hidden")


@dataclass
class RunState:
    """Everything one step changes."""

    sequences: torch.LongTensor
    attention_mask: torch.LongTensor
    kv_cache: Any
    plan: Plan
    strategy: Any
    recorded: dict[str, list] = field(default_factory=lambda: {k: [] for k in RECORDED})
    forced: list[int] = field(default_factory=list)
    step_index: int = 0
    finished: bool = False
    streaming: bool = False  # the streamer still receives tokens


def initial_state(run, plan: Plan, ctx, random: RunRandom | None = None) -> RunState:
    """The run's state before its first step, and its strategy started.

    run: the Run being set up (its ``given`` is read; its ``random`` and ``state`` are set
    here, before the strategy starts, since the strategy reads them through ``ctx``);
    plan: the run's first :class:`~genlab.run.plan.Plan`; ctx: the run's step context; random:
    a :class:`~genlab.run.randomness.RunRandom` to draw from (a nested run shares its parent's),
    or None for the run's own. Builds the strategy, repeats the prompt for its rows (beams,
    num_return_sequences), makes the cache and
    starts the streamer.
    """
    given: Given = run.given
    ids, model = given.input_ids, given.model
    strategy = strategy_for(plan.mode)(plan.config)
    expand = strategy.rows_per_input(plan.config)
    if given.encdec is not None:
        given.encdec.expand(expand)
    sequences = ids.repeat_interleave(expand, dim=0)
    has_assistant = given.assistant_model is not None
    cache = make_cache(model, sequences.shape[0], plan.config, plan.mode, has_assistant)
    if given.encdec is None:
        plan.compiled = compiled_forward(model, plan.config, cache, plan.mode)
    plan.route = forward_route(plan, given)
    # where this run's random draws come from (its own generator unless it is a plain
    # generate() call without a seed: see genlab.run.randomness)
    run.random = random or RunRandom.for_run(given.seed, given.keep_history, given.device)
    run.state = state = RunState(
        sequences=sequences,
        attention_mask=given.attention_mask.to(given.device).repeat_interleave(expand, dim=0),
        kv_cache=cache,
        plan=plan,
        strategy=strategy,
    )
    strategy.start(ctx)
    if given.beam_streamer is not None:  # a step_end hook: it reads the beams, no put()
        given.beam_streamer.attach(run)
    elif given.streamer is not None:
        state.streaming = True
        given.streamer.put(sequences.cpu())  # the prompt rows as generation starts (expanded)
    return state


# ----------------------------------------------------------------------------------------
# checkpoints of caches and stateful processors
# ----------------------------------------------------------------------------------------
def processor_states(processors) -> list[tuple[Any, dict]] | None:
    """The state of every stateful processor (``stateful = True``: its
    :meth:`~genlab.processors.base.LogitsProcessor.get_state`), or None if none keeps any."""
    out = [(p, p.get_state()) for p in processors or () if is_stateful(p)]
    return out or None


def restore_processor_states(states) -> None:
    """Put the processors of :func:`processor_states` back as they were."""
    for p, saved in states or ():
        p.set_state(saved)


# ----------------------------------------------------------------------------------------
# undo
# ----------------------------------------------------------------------------------------
@dataclass
class Undo:
    """What :meth:`restore` needs to put a run's state back as it was when taken."""

    state: RunState
    lengths: dict[str, int]
    strategy_state: dict
    cache: Any
    processors: Any
    random: Any  # the run's RunRandom
    random_state: torch.Tensor | None  # its generator's state (None: torch's global one)

    @classmethod
    def take(cls, state: RunState, random) -> Undo:
        """The undo point of ``state`` (and of the run's random source) before a step."""
        return cls(
            state=replace(state, forced=list(state.forced)),
            lengths={k: len(v) for k, v in state.recorded.items()},
            strategy_state=state.strategy.get_state(),
            cache=cache_checkpoint(state.kv_cache),
            processors=processor_states(state.plan.processors),
            random=random,
            random_state=random.get_state(),
        )

    def restore(self) -> RunState:
        """Put caches, processors, strategy and random state back; returns the state."""
        state = self.state
        for name, n in self.lengths.items():
            del state.recorded[name][n:]
        state.strategy.set_state(self.strategy_state)
        cache_restore(state.kv_cache, self.cache)
        restore_processor_states(self.processors)
        self.random.set_state(self.random_state)  # the global generator is never touched
        return state


__all__ = [
    "RECORDED",
    "Given",
    "Plan",
    "RunState",
    "Undo",
    "initial_state",
    "processor_states",
    "restore_processor_states",
]
