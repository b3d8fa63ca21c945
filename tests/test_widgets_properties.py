"""Property-based: random control changes on the Playground, valid and invalid, typed into
controls or set from code, interleaved with debounced and synchronous updates; once with
worker threads (no event loop), once inside an asyncio loop on the main thread (a kernel).

Whatever the sequence: no exception escapes, never two generations run at once, and once
everything has settled the result shown belongs to the final settings (or, if the final
settings cannot run, the error is shown and the last good result stays).

And random opens, closes, sets, presets and resets of a ConfigPanel, whose groups are
built when first opened: every group shows the config's values, whenever it was built."""

from __future__ import annotations

import asyncio
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_widgets import WORDS, SlowModel

import genlab
from genlab.models.table import TableLM
from genlab.widgets.playground import Playground

VALUES = {
    "max_new_tokens": st.one_of(st.integers(-2, 9), st.just("x"), st.just(2.5), st.none()),
    "top_k": st.one_of(st.integers(-1, 30), st.just("x"), st.just(None)),
    "top_p": st.one_of(st.floats(-0.5, 1.5), st.just(float("nan")), st.just("0.9"), st.none()),
    "temperature": st.one_of(st.floats(-1, 3, allow_nan=False), st.just("hot"), st.none()),
    "do_sample": st.one_of(st.booleans(), st.just("x")),
    "num_beams": st.one_of(st.integers(0, 3), st.just("x")),
    "repetition_penalty": st.one_of(st.floats(-1, 3, allow_nan=False), st.none()),
    "bad_words_ids": st.one_of(st.just([[5]]), st.just(5), st.just("'cat"), st.none()),
}
TYPED = {  # text typed into a field's box (what a person can do in the browser)
    "bad_words_ids": st.sampled_from(["'cat", "5, 6", "x y", "' a'", "", "99999"]),
    "suppress_tokens": st.sampled_from(["1 2", "'", "-3", "a"]),
    "sequence_bias": st.sampled_from(["5: -2", "5 -2", ": x", "'a': 1e9"]),
}

action = st.one_of(
    st.tuples(st.just("set"), st.sampled_from(sorted(VALUES))).flatmap(
        lambda t: st.tuples(st.just("set"), st.just(t[1]), VALUES[t[1]])
    ),
    st.tuples(st.just("type"), st.sampled_from(sorted(TYPED))).flatmap(
        lambda t: st.tuples(st.just("type"), st.just(t[1]), TYPED[t[1]])
    ),
    st.tuples(st.just("seed"), st.integers(-5, 5)),
    st.tuples(st.just("prompt"), st.sampled_from(["a", "b c", "", "  ", "a b c d"])),
    st.tuples(st.just("sync")),
    st.tuples(st.just("pause"), st.sampled_from([0.0, 0.01, 0.05])),
)


@pytest.fixture(scope="module")
def slow_lm():
    row = {w: 1 / len(WORDS) for w in WORDS}
    table = TableLM({"": row}, fallback=row)
    slow = SlowModel(table, delay=0.002)
    return slow, genlab.LM(slow, table.tokenizer)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(actions=st.lists(action, min_size=1, max_size=10))
def test_random_control_changes_never_escape_and_never_overlap(slow_lm, actions):
    for pause in storm(slow_lm, actions):
        time.sleep(pause)


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(actions=st.lists(action, min_size=1, max_size=10))
def test_the_same_storm_in_an_event_loop_on_the_main_thread(slow_lm, actions):
    """As in a Jupyter kernel: changes arrive on the loop's thread, generations step on
    it, and a pause lets the loop run (debounce, steps) between changes."""
    errors = []

    async def main():
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, ctx: errors.append(ctx))
        for pause in storm(slow_lm, actions):
            await asyncio.sleep(pause)

    asyncio.run(main())
    assert errors == []


def storm(slow_lm, actions):
    """Play ``actions`` on a new Playground, yielding the pauses (the caller sleeps or
    lets its event loop run), then check the outcome."""
    slow, lm = slow_lm
    slow.max_active = 0
    pg = Playground(lm, "a", max_new_tokens=4, debounce=0.01, run=False)
    for act in actions:  # nothing here may raise
        kind = act[0]
        if kind == "set":
            pg.panel.set(act[1], act[2])
        elif kind == "type":
            pg.panel.controls[act[1]].input.value = act[2]
        elif kind == "seed":
            pg.seed_box.value = str(act[1])
        elif kind == "prompt":
            pg.prompt_box.value = act[1]
        elif kind == "sync":
            pg.update(sync=True)
        else:
            yield act[1]
    pg.update(sync=True)
    yield 0.03
    pg.wait(timeout=10)
    assert slow.max_active <= 1  # never two generations at once
    if pg.error is None:  # the result belongs to the final settings
        cfg = pg.result.run.config
        for name in ("max_new_tokens", "top_k", "top_p", "temperature", "do_sample",
                     "num_beams", "repetition_penalty", "bad_words_ids"):  # fmt: skip
            assert getattr(cfg, name) == getattr(pg.panel.config, name), name
        assert f"seed {pg.seed_box.value}" in pg.status.value
        prompt_ids, _ = lm.encode(pg.prompt_box.value)
        n = prompt_ids.shape[1]
        assert pg.result.sequences[0, :n].tolist() == prompt_ids[0].tolist()
    else:  # shown in the panel, never raised; the settings that cannot run are named
        assert "genlab-error" in pg.status.value


# ----------------------------------------------------------------------------------------
# ConfigPanel: groups built lazily show the same values as groups built at once
# ----------------------------------------------------------------------------------------
from genlab.config import FIELDS, GenerationConfig  # noqa: E402
from genlab.widgets.config_panel import PRESETS, ConfigPanel  # noqa: E402

SIMPLE = [n for n, s in FIELDS.items() if s.kind in ("int", "float", "bool") and not s.token_ids]
panel_action = st.one_of(
    st.tuples(st.just("open"), st.integers(0, 9)),
    st.tuples(st.just("close")),
    st.tuples(st.just("set"), st.sampled_from(sorted(VALUES))).flatmap(
        lambda t: st.tuples(st.just("set"), st.just(t[1]), VALUES[t[1]])
    ),
    st.tuples(st.just("preset"), st.sampled_from(sorted(PRESETS))),
    st.tuples(st.just("reset")),
    st.tuples(st.just("read"), st.sampled_from(SIMPLE)),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(panel_action, min_size=1, max_size=12))
def test_lazily_built_groups_always_show_the_config(actions):
    panel = ConfigPanel(GenerationConfig(max_new_tokens=8))
    for act in actions:
        if act[0] == "open":
            panel.accordion.selected_index = act[1] % len(panel.groups)
        elif act[0] == "close":
            panel.accordion.selected_index = None
        elif act[0] == "set":
            panel.set(act[1], act[2])
        elif act[0] == "preset":
            panel.apply_preset(act[1])
        elif act[0] == "reset":
            panel.reset()
        else:
            panel.controls[act[1]]  # code reads a control: its group is built
        values = panel.values()
        for name in SIMPLE:
            if name in panel.errors:
                continue  # a refused value stays in its control, the config keeps its own
            shown, value = values[name], getattr(panel.config, name)
            if isinstance(value, float) and isinstance(shown, float):  # a slider's step
                assert abs(shown - value) <= (FIELDS[name].step or 0.01), (act, name)
            else:
                assert shown == value, (act, name)
        for i, page in enumerate(panel.accordion.pages):
            names = list(panel.groups.values())[i]
            built = names[0] in panel.controls.built
            assert len(page.children) == (len(names) if built else 0)
