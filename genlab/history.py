"""A run's history: the snapshot before each step, and going back to one.

:func:`take_snapshot` records the state before a step; :func:`restore_snapshot` puts it
back (cache cropped, strategy state restored); :func:`replay` rebuilds the state after
``target`` steps from the start, for runs whose state cannot be cropped back (beam search
reorders its cache in place; CFG and SynthID processors carry their own state).
"""

from __future__ import annotations

import copy

import torch

from .caches import make_cache
from .hooks import HookRegistry
from .prepare import make_plan
from .state import RECORDED, STATEFUL_PROCESSORS, Snapshot, Undo


def take_snapshot(run, undo: Undo | None = None) -> Snapshot:
    """The state of ``run`` before a step (``undo``: the step's undo, to share its copies)."""
    st = run.state
    rng = st.rng if st.rng is not None else (undo.global_rng if undo else None)
    return Snapshot(
        sequences=st.sequences,
        attention_mask=st.attention_mask,
        cache_len=st.cache.length(),
        lengths={k: len(v) for k, v in st.recorded.items()},
        strategy=st.strategy,
        strategy_state=undo.strategy_state if undo else st.strategy.get_state(),
        plan=st.plan,
        rng=(rng if rng is not None else torch.get_rng_state()).clone(),
        config=copy.deepcopy(run.config),
        forced=list(st.forced),
    )


def restore_snapshot(run, snap: Snapshot, target: int) -> None:
    """Put ``run`` back to ``snap``, the state before step ``target``."""
    st = run.state
    st.sequences, st.attention_mask = snap.sequences, snap.attention_mask
    st.cache.crop(snap.cache_len)
    st.strategy, st.plan = snap.strategy, snap.plan
    st.strategy.set_state(snap.strategy_state)
    st.strategy.config = snap.plan.config
    for name, n in snap.lengths.items():
        del st.recorded[name][n:]
    if st.rng is not None:
        st.rng = snap.rng.clone()
    else:
        torch.set_rng_state(snap.rng)
    run.config = copy.deepcopy(snap.config)
    st.forced = list(snap.forced)
    st.step_index = target


def replay(run, target: int) -> None:
    """Rebuild the state after ``target`` steps by re-running them from the start."""
    plan = [(s.config, s.took_forced) for s in run._snapshots[:target]]
    forced_after = list(run._snapshots[target].forced)
    init = run._initial
    st = run.state
    st.cache = make_cache(
        run.given.model,
        init.sequences.shape[0],
        init.plan.config,
        init.plan.mode,
        run.given.assistant_model is not None,
    )
    st.sequences, st.attention_mask = init.sequences, init.attention_mask
    st.strategy, st.plan = init.strategy, init.plan
    st.strategy.set_state(init.strategy_state)
    st.strategy.config = init.plan.config
    restore_processors_fresh(run, init)
    for name in RECORDED:
        st.recorded[name].clear()
    if st.rng is not None:
        st.rng = init.rng.clone()
    else:
        torch.set_rng_state(init.rng)
    st.step_index, st.finished = 0, False
    registry, tracer, history = run.registry, run._tracer, run.history
    run.registry, run._tracer = HookRegistry(), None
    run._snapshots, run.history = [], []
    try:
        for config, took in plan:
            run.config = copy.deepcopy(config)
            run.state.forced = [] if took is None else [took]
            run._step(want_record=False)
    finally:
        run.registry, run._tracer = registry, tracer
        run.history = history[:target]
        run.state.forced = forced_after


def restore_processors_fresh(run, init: Snapshot) -> None:
    """Stateful processors start over: rebuild the plan the replay starts from."""
    if any(type(p).__name__ in STATEFUL_PROCESSORS for p in init.plan.processors):
        saved = run.config
        run.config = copy.deepcopy(init.config)
        try:
            plan = make_plan(run.config, run.given)
        finally:
            run.config = saved
        plan.compiled = init.plan.compiled
        run.state.plan = plan
        run.state.strategy.config = plan.config
