"""A character split over several tokens (字 is 3 byte-level tokens in the demo model) is
shown whole on the token that completes it, in the StepDebugger's text, its history
table, its waterfall table and figure; the pieces before it are ◌, their bytes only in a
tooltip."""

from __future__ import annotations

import re

import matplotlib.text
import pytest

from genlab.plots.tokens import candidates, label, waterfall
from genlab.text.tokens import PARTIAL, candidate_labels, piece_labels
from genlab.widgets.debugger import StepDebugger
from genlab.widgets.render import steps_table

pytestmark = pytest.mark.slow


def visible(markup: str) -> str:
    """The text of HTML a person reads (tags and their attributes, e.g. titles, removed)."""
    return re.sub(r"<[^>]*>", "", markup)


@pytest.fixture(scope="module")
def dbg(demo):
    view = StepDebugger(demo, "Write it: ")
    view.step()
    view.take(" 字")  # three tokens: ⟨E5⟩ ⟨AD⟩ ⟨97⟩
    for _ in range(2):
        view.step()
    return view


def test_the_split_character_is_shown_on_the_token_that_completes_it(dbg, demo):
    ids = demo.tokenizer.encode(" 字", add_special_tokens=False)
    assert len(ids) == 3
    labels = piece_labels(demo.tokenizer, ids)
    assert [t for t, _ in labels] == ["␣" + PARTIAL, PARTIAL, "字"]
    assert "E5" in labels[0][1] and "E5 AD 97" in labels[2][1]  # the bytes in the tip
    assert candidate_labels(demo.tokenizer, ids[:2], [ids[2]])[0][0] == "字"
    table = steps_table(dbg.run.tracer.trace)
    assert table.token.tolist()[:3] == ["␣" + PARTIAL, PARTIAL, "字"]
    for view in (dbg.text_view, dbg.history_view, dbg.waterfall_view):
        assert "⟨" not in visible(view.value), view
    assert "字" in visible(dbg.text_view.value) and "字" in visible(dbg.history_view.value)
    assert 'title="part of' in dbg.history_view.value  # the bytes are in the tooltip


def test_the_waterfall_names_the_completed_character(dbg):
    trace = dbg.run.tracer.trace
    top = candidates(trace, 2, k=8)
    assert "字" in top[top.chosen].token.tolist()
    fig = waterfall(trace, 2)
    texts = [t.get_text() for t in fig.findobj(matplotlib.text.Text)]
    assert not any("⟨" in t for t in texts)
    assert label("字") in texts  # drawn as U+5B57 when the font has no glyph for it
    if label("字") == "U+5B57":
        assert label("🙂a") == "U+1F642a"
