"""A run's branches: what :meth:`~genlab.run.engine.Run.fork` copies and what it shares.

A fork shares only the model, the draft model and the tokenizer (:func:`shared_objects`);
:func:`fork_parts` copies everything else a run holds (state, config, plans and
processors, strategies, random stream, hooks, Step records and
:class:`~genlab.run.timeline.Timeline`), reading the run only through its public attributes.
The Run puts the parts together (:mod:`genlab.run.engine`); rewinding is the timeline's
(:mod:`genlab.run.timeline`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from .state import RunState


@dataclass(frozen=True)
class ForkParts:
    """The copies a fork is made of (see :func:`fork_parts`)."""

    state: RunState
    config: Any
    random: Any
    registry: Any
    history: list
    timeline: Any


def shared_objects(run) -> dict:
    """What forks and copies share instead of copying (a ``deepcopy`` memo): the model,
    the draft model, the tokenizer. They are read, never written, by a run."""
    given = run.given
    keep = {}
    for obj in (given.model, given.tokenizer, given.assistant_model):
        if obj is not None:
            keep[id(obj)] = obj
            hf = getattr(obj, "hf", None)
            if hf is not None:
                keep[id(hf)] = hf
    return keep


def fork_parts(run) -> ForkParts:
    """Independent copies of everything ``run`` changes as it steps; the plans and
    strategies its timeline points to are copied once each and shared within the fork."""
    keep = shared_objects(run)

    def copy_plan(plan):
        out = copy.copy(plan)
        out.config = copy.deepcopy(plan.config)
        out.processors = copy.deepcopy(plan.processors, memo=dict(keep))
        out.stopping_criteria = copy.deepcopy(plan.stopping_criteria, memo=dict(keep))
        out.seen = dict(plan.seen)
        return out

    strategies, plans = {}, {}

    def copy_strategy(strategy):
        out = copy.deepcopy(strategy, memo=dict(keep))
        out.config = plans[id(strategy_plan[id(strategy)])].config
        return out

    st, timeline = run.state, run.timeline
    plans[id(st.plan)] = copy_plan(st.plan)
    strategy_plan = {id(st.strategy): st.plan}
    if timeline is not None:
        for e in (*timeline.entries, timeline.initial[0]):
            strategy_plan.setdefault(id(e.strategy), e.plan)
            if id(e.plan) not in plans:
                plans[id(e.plan)] = copy_plan(e.plan)
    strategy = copy_strategy(st.strategy)
    strategies[id(st.strategy)] = strategy
    state = RunState(
        sequences=st.sequences.clone(),
        attention_mask=st.attention_mask.clone(),
        kv_cache=st.kv_cache.copy(),
        plan=plans[id(st.plan)],
        strategy=strategy,
        recorded={k: list(v) for k, v in st.recorded.items()},
        forced=list(st.forced),
        step_index=st.step_index,
        finished=st.finished,
        streaming=False,
    )
    own_timeline = None
    if timeline is not None:
        own_timeline = timeline.copy(strategies, plans, copy_strategy, lambda p: plans[id(p)])
    return ForkParts(
        state=state,
        config=copy.deepcopy(run.config),
        random=run.random.copy(),
        registry=run.registry.copy(),
        history=list(run.history),
        timeline=own_timeline,
    )


__all__ = ["ForkParts", "fork_parts", "shared_objects"]
