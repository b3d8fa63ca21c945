"""A run's timeline: what :meth:`~genlab.run.engine.Run.rewind` needs, owned by one Run.

:class:`Timeline` keeps an :class:`Entry` per step and has three verbs:

* :meth:`Timeline.begin` / :meth:`Timeline.commit` -- before each step, a small entry:
  lengths (the tokens, the cache, the recorded outputs), the strategy's state, the config
  in force, the forced queue and where the random generator stood; kept once the step
  commits;
* :meth:`Timeline.rewind` -- put the run back to the state before step ``target``, by
  restoring it or, for runs whose state cannot be cut back (beam search reorders its cache
  in place; classifier-free guidance and SynthID keep state in their processors), by
  replaying the steps from the start through the run's public ``step(record=False)``;
* :meth:`Timeline.copy` -- the timeline of a fork.

It grows linearly with the length: tokens and masks only grow, so an entry keeps their
length, not a copy; the config is copied only when it changed; the strategy's state is
shared with the entry before when equal; the random generator's full state is kept only
every few steps (:mod:`genlab.run.randomness`). Entries are never changed once written, so a
fork shares them and copies only the strategies and plans they point to.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from typing import Any

import torch

from ..inside.hooks import HookRegistry
from ..processors.base import is_stateful
from ..runtime.kv_cache import make_cache
from .branches import shared_objects
from .plan import Plan, config_values, make_plan
from .randomness import RandomMark
from .state import RECORDED


@dataclass(frozen=True)
class Entry:
    """The run before one step (never changed once written; shared with forks)."""

    length: int  # width of the sequences
    cache_length: int
    recorded: tuple[int, ...]  # lengths of the recorded output lists (RECORDED order)
    strategy: Any  # the strategy object in force (its state is ``strategy_state``)
    strategy_state: dict | None  # None for replayed runs
    plan: Plan
    config: Any  # the user's config in force at this step (a private copy)
    config_values: dict  # what plan.config_values gave for it
    forced: tuple[int, ...]  # the forced queue before the step
    took: int | None = None  # the forced id this step took (filled at the commit)
    random: RandomMark | None = None  # the generator before the step
    inside: dict | None = None  # the hooks inside the model in force (a replay keeps them)


def needs_replay(run) -> bool:
    """Whether rewinding ``run`` must replay: beam rows reorder the cache in place, and some
    processors keep state of their own."""
    stateful = any(is_stateful(p) for p in run.state.plan.processors)
    return run.state.strategy.reorders_rows or stateful


class Timeline:
    """The entries of one run (see the module docstring)."""

    __slots__ = ("entries", "initial", "replays")

    def __init__(self, run, replays: bool) -> None:
        #: entries[i]: the run before step i
        self.entries: list[Entry] = []
        #: the run before its first step, for replays: the entry plus the start's objects
        self.initial: tuple[Entry, torch.Tensor, torch.Tensor] | None = None
        #: this run rewinds by replaying (set when it starts, or when a mode needs it)
        self.replays = replays
        first = self._entry(run, None)
        # the strategy object goes on changing; a replay starts from a copy made now
        first = replace(first, strategy=copy.deepcopy(first.strategy, shared_objects(run)))
        self.initial = (first, run.state.sequences, run.state.attention_mask)

    def __len__(self) -> int:
        return len(self.entries)

    # -- record ------------------------------------------------------------------------------
    def _entry(self, run, values: dict | None) -> Entry:
        st = run.state
        last = self.entries[-1] if self.entries else (self.initial[0] if self.initial else None)
        values = values if values is not None else config_values(run.config)
        if last is not None and last.config_values == values:
            config, values = last.config, last.config_values
        else:
            config = copy.deepcopy(run.config)
        state = None
        if not self.replays:
            state = st.strategy.get_state()
            same_strategy = last is not None and last.strategy is st.strategy
            if same_strategy and _same(state, last.strategy_state):
                state = last.strategy_state
        return Entry(
            length=st.sequences.shape[1],
            cache_length=st.kv_cache.length(),
            recorded=tuple(len(st.recorded[k]) for k in RECORDED),
            strategy=st.strategy,
            strategy_state=state,
            plan=st.plan,
            config=config,
            config_values=values,
            forced=tuple(st.forced),
            random=run.random.mark(st.step_index),
            inside=run.registry.inside_hooks(),
        )

    def begin(self, run, values: dict) -> Entry:
        """The entry of the step about to run (kept only if it commits: :meth:`commit`)."""
        return self._entry(run, values)

    def commit(self, entry: Entry, took: int | None, random) -> None:
        """The step of ``entry`` committed: keep it, with the forced id it took and the
        random draws it made."""
        mark = entry.random
        if mark is not None:
            mark = RandomMark(mark.state, random.drawn())
        self.entries.append(replace(entry, took=took, random=mark))

    # -- rewind ------------------------------------------------------------------------------
    def rewind(self, run, target: int) -> None:
        """Put ``run`` back to the state before step ``target`` (restored, or replayed where
        the state cannot be cut back), its Step records and its trace cut there too."""
        if self.replays or needs_replay(run):
            self.replays = True  # once a mode needed it, the entries hold no strategy state
            self.replay(run, target)
        else:
            self.restore(run, target)
        del run.history[target:]
        if run.tracer is not None:
            run.tracer.truncate(target)

    def restore(self, run, target: int) -> None:
        """Put ``run`` back to the state before step ``target`` (without replaying)."""
        e, st = self.entries[target], run.state
        st.sequences = st.sequences[:, : e.length]  # views: the next step makes new tensors
        st.attention_mask = st.attention_mask[:, : e.length]
        st.kv_cache.crop(e.cache_length)
        st.strategy, st.plan = e.strategy, e.plan
        st.strategy.set_state(e.strategy_state)
        st.strategy.config = e.plan.config
        for name, n in zip(RECORDED, e.recorded, strict=True):
            del st.recorded[name][n:]
        run.random.restore([x.random for x in self.entries], target)
        run.config = copy.deepcopy(e.config)
        st.forced = list(e.forced)
        st.step_index = target
        del self.entries[target:]

    def replay(self, run, target: int) -> None:
        """Rebuild the state before step ``target`` by running steps 0..target-1 again,
        each with the config and forced token it had."""
        steps = [(e.config, e.took, e.inside) for e in self.entries[:target]]
        at_target = self.entries[target] if target < len(self.entries) else None
        init, sequences, mask = self.initial
        st, given = run.state, run.given
        st.kv_cache = make_cache(
            given.model,
            sequences.shape[0],
            init.plan.config,
            init.plan.mode,
            given.assistant_model is not None,
        )
        st.sequences, st.attention_mask = sequences, mask
        st.strategy = copy.deepcopy(init.strategy, shared_objects(run))
        st.plan = _fresh_plan(run, init)
        st.strategy.config = st.plan.config
        for name in RECORDED:
            st.recorded[name].clear()
        run.random.restore([init.random], 0)
        st.step_index, st.finished = 0, False
        self.entries = []
        registry = run.registry
        try:
            for config, took, inside in steps:
                # each step again with the hooks inside the model it had (they changed what
                # the model computed); the loop's hooks and observers (the trace) are not
                # run again: they stay on the registry put back below
                run.registry = HookRegistry.holding(given.model, inside)
                run.config = copy.deepcopy(config)
                run.state.forced = [] if took is None else [took]
                run.step(record=False)
        finally:
            run.registry = registry
        run.config = copy.deepcopy(at_target.config if at_target is not None else init.config)
        run.state.forced = list(at_target.forced) if at_target is not None else list(init.forced)

    # -- forks -------------------------------------------------------------------------------
    def copy(self, strategies: dict, plans: dict, copy_strategy, copy_plan) -> Timeline:
        """A history for a fork: the same entries, pointing at the fork's own copies of the
        strategies and plans (``copy_strategy`` / ``copy_plan``, memoised in the dicts)."""

        def own(e: Entry) -> Entry:
            return replace(
                e,
                strategy=_memo(strategies, e.strategy, copy_strategy),
                plan=_memo(plans, e.plan, copy_plan),
            )

        other = Timeline.__new__(Timeline)
        other.replays = self.replays
        other.entries = [own(e) for e in self.entries]
        init, sequences, mask = self.initial
        other.initial = (own(init), sequences, mask)
        return other


def _memo(seen: dict, obj, make):
    key = id(obj)
    if key not in seen:
        seen[key] = make(obj)
    return seen[key]


def _fresh_plan(run, init: Entry) -> Plan:
    """The plan a replay starts from: the first one, or a new one where processors keep
    state between steps (they must start over)."""
    if not any(is_stateful(p) for p in init.plan.processors):
        return init.plan
    saved = run.config
    run.config = copy.deepcopy(init.config)
    try:
        plan = make_plan(run.config, run.given)
    finally:
        run.config = saved
    plan.compiled = init.plan.compiled
    return plan


def _same(a: dict | None, b: dict | None) -> bool:
    """Two strategy states hold equal values (tensors compared exactly)."""
    if a is None or b is None or a.keys() != b.keys():
        return False
    for k, x in a.items():
        y = b[k]
        if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            if not (
                isinstance(x, torch.Tensor)
                and isinstance(y, torch.Tensor)
                and x.shape == y.shape
                and x.dtype == y.dtype
                and torch.equal(x, y)
            ):
                return False
        elif type(x) is not type(y) or not isinstance(x, (int, float, bool, str, type(None))):
            return False
        elif x != y:
            return False
    return True


__all__ = ["Entry", "Timeline", "needs_replay"]
