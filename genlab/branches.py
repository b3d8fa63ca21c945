"""A run's past and its branches: :meth:`~genlab.engine.Run.rewind`,
:meth:`~genlab.engine.Run.fork`, and going on after a raised length limit.

:class:`Branching` is the part of :class:`~genlab.engine.Run` that works on the run's
:class:`~genlab.history.RunHistory` (restore or replay to an earlier step) and copies a run
(a fork shares only the model, the draft model and the tokenizer). The step loop itself
stays in :mod:`genlab.engine`.
"""

from __future__ import annotations

import copy
import threading

from .context import StepContext
from .plan import effective_config
from .state import STATEFUL_PROCESSORS, RunState


class Branching:
    """Rewind, fork and resume, for :class:`~genlab.engine.Run` (a base class of it: the
    methods use the run's ``given``, ``state``, ``config``, history and hooks)."""

    def _resume_if_longer(self) -> None:
        """A run that ended by length goes on when its limit was raised: its last step is
        computed again under the new config (so rows that ended by EOS stay ended)."""
        if not self._can_go_on():
            return
        config = copy.deepcopy(self.config)
        self._rewind(1)
        self.config = config
        self._step(want_record=True)

    def _can_go_on(self) -> bool:
        """Whether the run ended by length under a limit that is now higher (it then goes
        on); a ValueError when it would but cannot (it keeps no history)."""
        st = self.state
        if not (st.finished and self._finished_by == "length" and st.step_index):
            return False
        if int(effective_config(self.config, self.given).max_length) <= st.sequences.shape[1]:
            return False
        if self._history is None:
            raise ValueError(
                "this run ended by length and keeps no history, so it cannot go on: start it "
                "with keep_history=True (lm.start does), or start a new run"
            )
        return True

    def rewind(self, n: int = 1) -> Branching:
        """Undo the last ``n`` steps, restoring the exact earlier state: tokens, cache,
        random state, the config in force at that step and the forced queue. ``rewind(0)``
        does nothing."""
        with self._exclusive("rewind"):
            self._rewind(n)
        return self

    def _rewind(self, n: int) -> None:
        if self._history is None:
            raise ValueError(
                "this run keeps no history: start it with keep_history=True "
                "(lm.start does) to rewind"
            )
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= self.state.step_index:
            raise ValueError(f"can rewind 0..{self.state.step_index} steps, not {n!r}")
        if n == 0:
            return
        target = self.state.step_index - n
        if self._history.replays or self._replays():
            self._history.replays = True
            self._history.replay(self, target)
        else:
            self._history.restore(self, target)
        del self.history[target:]
        self.state.finished = False
        self.interrupted = False
        self._finished_by = None
        self._output = None
        if self._tracer is not None:
            self._tracer.truncate(target)

    def _replays(self) -> bool:
        """Whether rewinding must replay: beam rows reorder the cache in place, and some
        processors keep state of their own."""
        stateful = any(type(p).__name__ in STATEFUL_PROCESSORS for p in self.processors)
        return self.state.strategy.reorders_rows or stateful

    def shared_objects(self) -> dict:
        """What forks and copies share instead of copying (a ``deepcopy`` memo): the model,
        the draft model, the tokenizer. They are read, never written, by a run."""
        given = self.given
        keep = {}
        for obj in (given.model, given.tokenizer, given.assistant_model):
            if obj is not None:
                keep[id(obj)] = obj
                hf = getattr(obj, "hf", None)
                if hf is not None:
                    keep[id(hf)] = hf
        return keep

    def fork(self) -> Branching:
        """An independent copy: stepping, forcing, rewinding or editing one never changes
        the other. It shares only the model and tokenizer; everything else (cache, config,
        strategy, plan and processors, forced queue, random state, history, hooks, trace)
        is its own."""
        with self._exclusive("fork", committed_ok=True):
            return self._fork()

    def _fork(self) -> Branching:
        other = copy.copy(self)
        other.given = copy.copy(self.given)
        other.given.streamer = None
        other._lock, other._owner, other._stop_requested = threading.Lock(), None, False
        keep = self.shared_objects()

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

        st = self.state
        plan = copy_plan(st.plan)
        plans[id(st.plan)] = plan
        strategy_plan = {id(st.strategy): st.plan}
        if self._history is not None:
            for e in (*self._history.entries, self._history.initial[0]):
                strategy_plan.setdefault(id(e.strategy), e.plan)
                if id(e.plan) not in plans:
                    plans[id(e.plan)] = copy_plan(e.plan)
        strategy = copy_strategy(st.strategy)
        strategies[id(st.strategy)] = strategy
        other.random = self.random.copy()
        other.state = RunState(
            sequences=st.sequences.clone(),
            attention_mask=st.attention_mask.clone(),
            cache=st.cache.copy(),
            plan=plan,
            strategy=strategy,
            recorded={k: list(v) for k, v in st.recorded.items()},
            forced=list(st.forced),
            step_index=st.step_index,
            finished=st.finished,
            streaming=False,
        )
        other.config = copy.deepcopy(self.config)
        other.registry = self.registry.copy()
        other.history = list(self.history)
        if self._history is not None:
            other._history = self._history.copy(
                strategies, plans, copy_strategy, lambda p: plans[id(p)]
            )
        other._ctx = StepContext(other)
        other._tracer, other._tracer_off = None, []
        if self._tracer is not None:
            other.attach_tracer(self._tracer.fork(other))
        return other


__all__ = ["Branching"]
