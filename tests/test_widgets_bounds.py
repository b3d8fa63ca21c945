"""Issue 37: panels a class can explore freely. Number boxes read one way and never widen a
slider; each field has an upper bound the model and the machine can honour, refused before
anything is allocated; messages describe the present state and say why a run stopped;
forcing keeps the text the user chose; a panel's view saves as one HTML file.

Models are hand-written TableLMs (instant, exact numbers)."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import genlab
from genlab.config import GenerationConfig
from genlab.config.limits import MAX_ROWS, Limits, model_limits
from genlab.models.table import TableLM
from genlab.widgets.base import error_text, parse_number
from genlab.widgets.config_panel import ConfigPanel
from genlab.widgets.debugger import StepDebugger
from genlab.widgets.explorers import BeamExplorer
from genlab.widgets.live import ended_text, limits_of
from genlab.widgets.playground import Playground
from genlab.widgets.render import END_MARK
from genlab.widgets.sweep import SweepView

WORDS = "a b c d e f g h i j k l m n o p q r s t".split()


@pytest.fixture(scope="module")
def classic():
    return genlab.LM(TableLM.classic())


@pytest.fixture(scope="module")
def uniform():
    """Every word equally likely after any prefix, EOS never."""
    row = {w: 1 / len(WORDS) for w in WORDS}
    return genlab.LM(TableLM({"": row}, fallback=row))


# ----------------------------------------------------------------------------------------
# one parser for every number box
# ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("typed,value", [("1e9", 10**9), ("1_000", 1000), (" 24 ", 24)])
def test_every_number_box_reads_the_same_text_the_same_way(classic, typed, value):
    assert parse_number(typed, "n", whole=True) == value
    assert parse_number(typed, "x") == float(value)
    pg = Playground(classic, "The", run=False)
    pg.seed_box.value = typed
    assert pg.seed == value  # the seed box
    panel = ConfigPanel(GenerationConfig(max_new_tokens=8))
    panel.open_group("logits")
    panel.controls["top_k"].text.value = typed  # a field's box (no limits here)
    panel.controls["temperature"].text.value = typed
    assert panel.config.top_k == value and panel.config.temperature == float(value)
    dbg = StepDebugger(classic, "The", max_new_tokens=3)
    dbg.rewind_count.value = typed  # the rewind box: same reading, then its own range
    dbg.rewind_button.click()
    assert f"{value} is out of range" in dbg.error


@pytest.mark.parametrize("typed", ["2.5", "ten", "nan", "inf", "1e999999999", ""])
def test_what_is_not_a_whole_number_is_refused_in_words(typed):
    with pytest.raises(ValueError, match=r"^n: .*(whole|finite|too large)") as err:
        parse_number(typed, "n", whole=True)
    assert str(err.value).endswith(".")


# ----------------------------------------------------------------------------------------
# a slider's range is part of the field
# ----------------------------------------------------------------------------------------
def test_a_typed_number_never_widens_the_slider(classic):
    pg = Playground(classic, "The", max_new_tokens=3, run=False)
    control = pg.panel.controls["max_new_tokens"]
    start = (control.slider.min, control.slider.max)
    control.text.value = "-1"  # refused with the range; the slider stays where it was
    assert ">= 1" in pg.panel.errors["max_new_tokens"] and control.slider.value == 3
    control.text.value = "1e9"  # over the model's bound: refused with it, before any run
    assert "4,096" in pg.panel.errors["max_new_tokens"] and control.slider.value == 3
    assert "positions" in pg.panel.errors["max_new_tokens"]
    control.text.value = "24"
    assert pg.panel.config.max_new_tokens == 24 and "max_new_tokens" not in pg.panel.errors
    assert (control.slider.min, control.slider.max) == start and control.slider.value == 24
    assert "genlab-error" not in control.status.value  # the refusal went with its cause
    pg.panel.reset()
    assert (control.slider.min, control.slider.max) == start


def test_a_value_the_field_allows_past_the_slider_rests_it_at_its_end():
    panel = ConfigPanel(GenerationConfig(do_sample=True, max_new_tokens=8))
    panel.open_group("logits")
    control = panel.controls["temperature"]
    start = (control.slider.min, control.slider.max)
    control.text.value = "1e9"  # temperature has no upper end: taken as typed
    assert panel.config.temperature == 1e9
    assert (control.slider.min, control.slider.max) == start
    assert control.slider.value == start[1] and control.text.value == "1e9"  # as typed
    control.slider.value = 0.5  # dragging it again writes the slider's value
    assert panel.config.temperature == 0.5


# ----------------------------------------------------------------------------------------
# upper bounds from the model and the memory, before any allocation
# ----------------------------------------------------------------------------------------
def test_limits_follow_the_model_and_the_memory():
    info = genlab.LM(TableLM.classic()).info
    small = model_limits(info, memory=10**6)
    big = model_limits(info, memory=10**12)
    assert small.bounds()["num_beams"] < big.bounds()["num_beams"] == MAX_ROWS
    assert big.bounds()["max_new_tokens"] == 4096  # the model does not say: the default
    lim = Limits(vocab_size=1000, context=512, row_token_bytes=10**4, row_step_bytes=10**4,
                 memory=10**8)  # fmt: skip
    lim.check(GenerationConfig(num_beams=8, max_new_tokens=100))
    with pytest.raises(ValueError, match=r"`num_beams` = 30 with `max_new_tokens` = 400 needs"):
        lim.check(GenerationConfig(num_beams=30, max_new_tokens=400))
    with pytest.raises(ValueError, match=r"`num_beams` = 60 is over 38, the most rows"):
        lim.check(GenerationConfig(num_beams=60, max_new_tokens=4))
    with pytest.raises(ValueError, match=r"`max_new_tokens` = 600 is over 512"):
        lim.check(GenerationConfig(max_new_tokens=600))


@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")
def test_a_huge_beam_count_from_code_is_refused_before_any_allocation(classic, monkeypatch):
    import gc

    import genlab.widgets.live as live

    started = []
    monkeypatch.setattr(live, "start_run", lambda *a, **k: started.append(1))
    with pytest.raises(ValueError, match=r"`num_beams` = 1000000000 is over \d+"):
        BeamExplorer(classic, "Hi", num_beams=10**9, max_new_tokens=3)
    assert not started  # refused before a run is started or any beam allocated
    gc.collect()  # the refused panel is closed by ipywidgets' __del__: no error (no worker yet)


def test_a_huge_beam_count_typed_is_refused_next_to_its_field(classic):
    beam = BeamExplorer(classic, "The", num_beams=2, max_new_tokens=2)
    before = beam.version
    beam.panel.controls["num_beams"].text.value = "1e9"
    beam.wait()
    assert beam.panel.config.num_beams == 2 and "most rows" in beam.panel.errors["num_beams"]
    assert beam.version == before  # nothing ran


def test_no_raw_torch_error_reaches_a_panel(classic, monkeypatch):
    alloc = RuntimeError(
        "[enforce fail at alloc_cpu.cpp:127] data. DefaultCPUAllocator: not enough memory: "
        "you tried to allocate 48000000000 bytes."
    )
    for err in (alloc, MemoryError(), RuntimeError("shape '[2, 3]' is invalid for input")):
        text = error_text(err)
        assert "RuntimeError" not in text and "enforce" not in text and "alloc_cpu" not in text
    assert "num_beams" in error_text(alloc)
    pg = Playground(classic, "The", max_new_tokens=2)
    monkeypatch.setattr(genlab.Run, "result", lambda run: (_ for _ in ()).throw(alloc))
    pg.update(sync=True)
    assert "enforce" not in pg.status.value and "memory" in pg.error
    assert re.search(r"\. The last good result is still shown", pg.status.value)


# ----------------------------------------------------------------------------------------
# messages describe the present state
# ----------------------------------------------------------------------------------------
def test_the_debugger_says_the_step_the_waterfall_shows_and_drops_stale_errors(uniform):
    dbg = StepDebugger(uniform, "a", max_new_tokens=6)
    dbg.step(4)
    assert "step 3 (4 tokens)" in dbg.status.value and "<b>step 3</b>" in dbg.waterfall_view.value
    dbg.panel.set("max_new_tokens", 2)  # below what the run holds: refused, in red
    assert "genlab-error" in dbg.status.value
    dbg.panel.set("max_new_tokens", 8)  # a valid value: the refusal goes at once
    assert "genlab-error" not in dbg.status.value and dbg.error is None


def test_panels_say_why_a_run_stopped(classic, uniform):
    pg = Playground(classic, "The", max_new_tokens=30)
    assert pg.result.run.finished_by == "eos" and "end-of-text" in pg.status.value
    shown = re.sub(r'title="[^"]*"', "", pg.text_view.value)  # the text, not its tooltips
    assert END_MARK in shown and "&lt;eos&gt;" not in shown
    pg = Playground(uniform, "a", max_new_tokens=3)
    assert "reached max_new_tokens (3 tokens)" in pg.status.value
    for by, config, words in (
        ("criteria", {"stop_strings": ["x"]}, "a stop string ended the text after 2 tokens"),
        ("criteria", {}, "a stopping criterion (max_time or your own) ended"),
        ("interrupted", {}, "stopped by Stop after 2 tokens"),
        (None, {}, ""),
    ):
        run = SimpleNamespace(step_index=2, finished_by=by, config=SimpleNamespace(**config))
        assert ended_text(run) == words or words in ended_text(run)
    dbg = StepDebugger(uniform, "a", max_new_tokens=2)
    dbg.step(2)
    assert "reached max_new_tokens" in dbg.status.value


def test_misc_messages_read_as_sentences_and_load_names_the_file(tmp_path, classic):
    panel = ConfigPanel(GenerationConfig(max_new_tokens=8))
    panel.path.value = str(tmp_path / "missing.json")
    panel.load_button.click()
    text = panel.file_status.value
    assert "missing.json" in text and "Hub" not in text and "HF_HUB" not in text
    sweep = SweepView(classic, "The", run=False)
    sweep.n_box.value = "0"
    sweep.update(sync=True)
    assert "from 1 to 256." in sweep.error
    sweep.n_box.value = "many"  # the example it gives is inside the range
    sweep.update(sync=True)
    assert "type one such as 1 or 256." in sweep.error


# ----------------------------------------------------------------------------------------
# forcing keeps the text the user chose
# ----------------------------------------------------------------------------------------
ACTIONS = st.lists(
    st.one_of(
        st.tuples(st.just("step"), st.integers(1, 3)),
        st.tuples(st.just("text"), st.lists(st.sampled_from(WORDS), min_size=1, max_size=3)),
        st.tuples(st.just("take"), st.sampled_from(WORDS)),
        st.tuples(st.just("rewind"), st.integers(0, 3)),
    ),
    min_size=1,
    max_size=8,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(actions=ACTIONS)
def test_forcing_then_taking_a_candidate_keeps_the_users_text(uniform, actions):
    """Every sequence of Step / force a text / take a candidate / Rewind gives the text
    the same calls on ``run.force`` and ``run.rewind`` give, and the text chosen."""
    tok = uniform.tokenizer
    dbg = StepDebugger(uniform, "a", max_new_tokens=40)
    ref = uniform.start("a", max_new_tokens=40, keep_history=True)
    spans: list[tuple[int, int]] = []  # forced texts of the reference run (start, end)

    def ids(run):
        return run.sequences[0, run.prompt_length :].tolist()

    for kind, arg in actions:
        before = ids(ref)
        if kind == "step":
            dbg.step(arg)
            for _ in range(arg):
                ref.step()
            continue
        if kind == "rewind":
            arg = min(arg, ref.step_index)
            dbg.rewind(arg)
            ref.rewind(arg)
            ref.clear_forced()
            dbg.clear_forced()
            spans = [s for s in spans if s[1] <= ref.step_index]
            continue
        token = " ".join(arg) if kind == "text" else tok.encode(arg, add_special_tokens=False)[0]
        chosen = tok.encode(token, add_special_tokens=False) if kind == "text" else [token]
        whole = kind == "text" and spans and spans[-1][1] == ref.step_index
        back = (spans[-1][1] - spans[-1][0]) if whole else min(1, ref.step_index)
        dbg.take(token)
        ref.rewind(back)
        ref.clear_forced()
        ref.force(token)
        start = ref.step_index
        while ref.pending_forced:
            ref.step()
        spans = [s for s in spans if s[1] <= start] + [(start, ref.step_index)]
        assert ids(ref) == before[: len(before) - back] + chosen  # the text chosen
        assert ids(dbg.run) == ids(ref)
    assert ids(dbg.run) == ids(ref) and dbg.text() == tok.decode(ids(ref))


def test_taking_a_candidate_after_a_forced_text_replaces_only_its_last_piece(uniform):
    dbg = StepDebugger(uniform, "a", max_new_tokens=12)
    dbg.step()
    dbg.token_box.value = "' b c d'"
    dbg.take_button.click()
    assert dbg.text().endswith("b c d")  # (the table tokenizer joins words with spaces)
    alt = next(v for label, v in dbg.candidates.options if "(taken)" not in label)
    dbg.candidates.value = alt  # the last piece's alternatives are offered
    dbg.take_button.click()  # a candidate of the current step: that step only
    assert dbg.text().endswith("b c " + uniform.tokenizer.decode([alt]))
    dbg.token_box.value = " "  # spaces are typed text, never the dropdown's choice
    dbg.take_button.click()
    assert dbg.error is not None and "no tokens" in dbg.error  # (spaces: no word here)


def test_limits_of_reads_the_lm(classic):
    assert limits_of(classic).vocab_size == classic.info.vocab_size


# ----------------------------------------------------------------------------------------
# a view saved as one HTML file
# ----------------------------------------------------------------------------------------
def test_a_panels_view_saves_as_one_self_contained_html_file(classic, tmp_path):
    pg = Playground(classic, "The", max_new_tokens=4)
    path = pg.save_html(tmp_path / "view.html")
    page = path.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    assert all(f">{word}<" in page for word in pg.result.text.split())
    assert 'title="' in page  # hover details
    assert "http://" not in page and "https://" not in page and "<script" not in page
    panel = ConfigPanel(GenerationConfig(max_new_tokens=8))
    assert "max_new_tokens" in panel.save_html(tmp_path / "c.html").read_text(encoding="utf-8")


def test_a_refused_click_message_goes_when_the_run_ends(uniform):
    import asyncio

    dbg = StepDebugger(uniform, "a", max_new_tokens=200)

    async def main():
        dbg.run_button.click()
        await asyncio.sleep(0.05)
        dbg.rewind_button.click()  # refused while the Run goes on, in words
        assert "not applied" in dbg.status.value and "Press Stop first" in dbg.status.value
        dbg.stop_button.click()
        await asyncio.sleep(0.05)

    asyncio.run(main())
    dbg.wait()
    assert not dbg.worker.busy and "stopped after" in dbg.status.value  # why it stopped
    assert "not applied" not in dbg.status.value  # its cause (the Run) is gone


def test_panels_test_only_the_endings_a_run_gives(classic, uniform):
    """Every ``finished_by`` value a panel compares with is one a real run gives (a panel
    once tested "stop", which no run produces), and the debugger words each ending."""
    import ast
    from pathlib import Path

    runs = {
        "length": uniform.start("a", max_new_tokens=2),
        "criteria": uniform.start("a", max_new_tokens=5, max_time=1e-9),
        "eos": classic.start("The", max_new_tokens=30),
        "interrupted": uniform.start("a", max_new_tokens=5),
    }
    for by, run in runs.items():
        if by == "interrupted":
            run.step()
            run.stop()
        else:
            run.run()
        assert run.finished_by == by
        assert ended_text(run), by
    compared = set()
    for path in Path(genlab.widgets.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare) and isinstance(node.ops[0], ast.Eq):
                left = node.left
                name = left.attr if isinstance(left, ast.Attribute) else getattr(left, "id", "")
                if name in ("by", "finished_by"):
                    compared |= {c.value for c in node.comparators if isinstance(c, ast.Constant)}
    assert compared and compared <= set(runs), compared - set(runs)
    dbg = StepDebugger(uniform, "a", max_new_tokens=5, max_time=1e-9)
    dbg.run_to_end()
    assert "a stopping criterion (max_time or your own) ended" in dbg.finished_message()
