"""Issue 50 (item 7, item 2) and issue 46 (item 5) in the panels: a 321 px notebook (the file
browser open at 768 px) reads the tab titles whole and the waterfall's key columns first;
BeamExplorer's Early stop table puts the decision first; the StepDebugger greys the
candidates a grammar forbids; the Playground's JSON-schema box refuses a bad schema in
place and keeps the last good result. (tests/browser/ui_check.py measures the same in
Chromium.)"""

from __future__ import annotations

import re

import pytest

import genlab
from genlab.models.table import TableLM
from genlab.widgets import BeamExplorer, StepDebugger
from genlab.widgets.base import FOCUS_CSS
from genlab.widgets.debugger import MASKED_TIP, grammar_masked, masked_html
from genlab.widgets.explorers import EARLY_COLUMNS
from genlab.widgets.playground import DEFAULT_SCHEMA, Playground

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
    "required": ["city", "population"],
}


def test_tab_titles_wrap_whole_onto_a_second_row_instead_of_being_cut():
    css = re.sub(r"\s+", " ", FOCUS_CSS)
    assert ".lm-TabBar > .lm-TabBar-content { flex-wrap: wrap; }" in css
    assert ".lm-TabBar .lm-TabBar-tab { flex: 0 0 auto; min-width: fit-content; }" in css
    assert ".lm-TabBar .lm-TabBar-tabLabel { overflow: visible; }" in css


def test_the_waterfall_puts_the_stage_and_its_counts_before_the_tokens():
    row = {"a": 0.4, "b": 0.3, "c": 0.2, "d": 0.1}
    dbg = StepDebugger(genlab.LM(TableLM({"": row}, fallback=row)), "a", do_sample=True,
                       top_k=2, max_new_tokens=3)  # fmt: skip
    dbg.step()
    view = dbg.waterfall_view.value
    heads = re.findall(r"<th(?: [^>]*)?>(.*?)</th>", view)
    assert heads[0] == "stage: tokens left, mass removed"
    assert heads[1].startswith("most likely tokens after the stage")
    assert len(heads) == 2  # no column of counts between the stage and its tokens
    first = re.search(r"<tbody><tr><td>(.*?)</td>", view).group(1)
    assert "<b>raw</b>" in first and "left" in first and "removed" not in first
    top_k = re.search(r"<tr><td><b>top_<wbr>k</b>(.*?)</td>", view).group(1)
    assert "2 left" in top_k and "removed" in top_k
    assert "genlab-masked" not in view and dbg.masked_view.value == ""  # no grammar


def test_the_early_stop_table_puts_the_decision_first_and_names_its_rule_above():
    lm = genlab.LM(TableLM.classic())
    bx = BeamExplorer(lm, "The", num_beams=2)
    view = bx.early_view.value
    heads = [h for h in re.findall(r"<th(?: [^>]*)?>(.*?)</th>", view)]
    names = [h.replace("<wbr>", "") for h in heads]
    assert names[0] == "done" and names[1] == "improvable"
    assert names == [c for c in EARLY_COLUMNS if c in names]  # decision, scores, lengths
    assert "rule" not in names and "step" not in names
    assert "(early_stopping=" in view and "rule False" not in view


@pytest.mark.slow
def test_the_debugger_greys_what_the_grammar_forbids_with_why(demo):
    pytest.importorskip("llguidance")  # genlab[grammar]; not in make wheel-check's venv
    dbg = StepDebugger(demo, "Describe a city as JSON:", json_schema=SCHEMA, max_new_tokens=6)
    for _ in range(2):
        dbg.step()
    trace = dbg.run.tracer.trace
    gone = grammar_masked(trace, dbg.current_step)
    assert len(gone)  # the model wanted tokens the schema does not allow here
    allowed = trace.topk(dbg.current_step, stage="grammar")
    allowed = set(allowed.token_id[allowed.prob > 0].astype(int))
    assert not set(gone.token_id.astype(int)) & allowed
    row = dbg.masked_view.value
    assert row == masked_html(trace, dbg.current_step, k=6)
    assert row.startswith('<div class="genlab-masked-row"')
    assert "masked by the grammar stage:" in row and "line-through" in row
    assert row.count('class="genlab-masked"') == len(gone)
    assert "cannot be chosen or forced" in MASKED_TIP
    view = dbg.waterfall_view.value  # the raw row: the same tokens greyed, with why
    raw_row = view.split("<b>grammar</b>")[0]
    assert raw_row.count('class="genlab-masked"') >= 1
    assert "grey, struck through: masked by the grammar" in view
    # the options and buttons offer only what the grammar allows
    offered = {int(v) for _, v in dbg.candidates.options}
    assert offered <= allowed


@pytest.mark.slow
def test_the_playgrounds_schema_box_refuses_in_place_and_keeps_the_last_good_result(demo):
    pytest.importorskip("llguidance")  # genlab[grammar]; not in make wheel-check's venv
    pg = Playground(demo, "A city as JSON:", max_new_tokens=12, debounce=0.0)
    assert not pg.constrain_box.value and pg.schema_box.value == DEFAULT_SCHEMA
    assert pg.schema_box.layout.display == "none" and pg.constraint == {}
    assert pg.constrain_box in pg.options_row.children  # the switch beside chat and seed,
    assert pg.options_row.layout.flex_flow == "row wrap"  # on a line of its own at 321 px
    pg.constrain_box.value = True
    pg.wait()
    assert pg.schema_box.layout.display is None and pg.error is None
    good = pg.result.text
    assert good.startswith("{") and pg.constraint == {"json_schema": DEFAULT_SCHEMA}
    version = pg.version
    for typed, reason in (
        ('{"type": "object", "properties": {"a": {"type": "strin"}}}', "strin"),
        ('{"type": "string", "pattern": "([a-z"}', "regex"),
        ('{"type": ', "not JSON"),
    ):
        pg.schema_box.value = typed
        pg.wait()
        assert reason in pg.schema_error, typed
        note = pg.schema_note.value
        assert "genlab-error" in note and "The last good result is still shown." in note
        assert pg.version == version and pg.result.text == good  # nothing generated
    pg.panel.set("max_new_tokens", 10)  # another setting: refused while the box is wrong
    pg.wait()
    assert pg.version == version and "not JSON" in pg.error
    pg.schema_box.value = DEFAULT_SCHEMA
    pg.wait()
    assert pg.schema_note.value == "" and pg.version == version + 1
    assert pg.result.text.startswith("{")


def test_the_settings_header_wraps_whole_pieces_in_a_narrow_notebook():
    from genlab import GenerationConfig
    from genlab.widgets import ConfigPanel

    panel = ConfigPanel(GenerationConfig(max_new_tokens=20))
    header = next(
        c for c in panel.children if hasattr(c, "children") and panel.preset in c.children
    )
    assert header.layout.flex_flow == "row wrap"  # it squeezed "Generatio / n settings"
    assert panel.preset.layout.flex == panel.reset_button.layout.flex == "0 0 auto"
    title = header.children[0]
    assert "Generation settings" in title.value and title.layout.flex == "0 1 auto"
