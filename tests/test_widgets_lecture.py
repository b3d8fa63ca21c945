"""Issue 50, the panels as a class reads them at 768 px: a refused value's message wraps
under the controls (never a column a few letters wide), a setting that changes nothing
in a greedy panel says so beside itself, codes are named, and a stale message goes.
(The browser check, tests/browser/ui_check.py, measures the same in Chromium.)"""

from __future__ import annotations

import re

import ipywidgets as widgets

from genlab import GenerationConfig
from genlab.widgets import ConfigPanel
from genlab.widgets.base import FOCUS_CSS
from genlab.widgets.config_panel import field_notes, plain_note
from genlab.widgets.fields import STATUS_MIN_WIDTH


def test_a_field_row_wraps_and_its_message_takes_a_line_of_its_own_when_short():
    panel = ConfigPanel(GenerationConfig(max_new_tokens=20))
    control = panel.controls["max_new_tokens"]
    assert control.box.layout.flex_flow == "row wrap"
    assert control.status.layout.display == "none"  # no empty line under every field
    assert not panel.set("max_new_tokens", "abc")
    status = control.status.layout
    assert status.display is None
    # at least 16em wide: beside the inputs when there is room, else on the next line
    assert status.flex == f"1 1 {STATUS_MIN_WIDTH}" and STATUS_MIN_WIDTH == "16em"
    assert "max_new_tokens: &#x27;abc&#x27; is not a whole number" in control.status.value
    assert panel.set("max_new_tokens", 24)
    assert control.status.layout.display == "none"


def test_sampling_only_settings_say_so_beside_themselves_in_a_greedy_panel():
    panel = ConfigPanel(GenerationConfig(max_new_tokens=20))  # greedy
    for name, value in (("xtc_probability", 0.5), ("mirostat_mode", 2), ("temperature", 0.5)):
        assert panel.set(name, value)
        status = panel.controls[name].status.value
        assert "only used when sampling" in status and "genlab-warn" in status, name
        assert "`" not in status
    notes = panel.notes_label.value
    assert "only used when sampling" in notes and "`" not in notes and "['" not in notes
    assert panel.set("do_sample", True)  # sampling: every note goes
    for name in ("xtc_probability", "mirostat_mode", "temperature"):
        assert panel.controls[name].status.value == "", name
    assert panel.notes_label.value == ""


def test_notes_are_read_per_field_and_in_words():
    note = (
        "These generation settings are inconsistent and may be ignored: ['top_k', 'min_p']."
        "\n- `top_k`: 5 is only used when sampling; set do_sample=True or reset it to 50."
        "\n- `min_p`: 0.1 is only used when sampling; set do_sample=True or reset it to None."
    )
    assert field_notes([note]) == {
        "top_k": "5 is only used when sampling; set do_sample=True or reset it to 50.",
        "min_p": "0.1 is only used when sampling; set do_sample=True or reset it to None.",
    }
    assert plain_note(note).splitlines()[0].endswith("may be ignored: top_k, min_p.")


def test_mirostat_modes_are_named():
    panel = ConfigPanel()
    dropdown = panel.controls["mirostat_mode"].input
    assert [label for label, _ in dropdown.options] == [
        "0: off",
        "1: Mirostat",
        "2: Mirostat 2.0",
    ]
    assert panel.set("mirostat_mode", 2) and dropdown.choice == 2
    dropdown.value = 1  # chosen in the browser: the number reaches the config
    assert panel.config.mirostat_mode == 1


def test_reset_clears_the_saved_message(tmp_path):
    panel = ConfigPanel(GenerationConfig(max_new_tokens=20))
    panel.save(tmp_path / "g.json")
    assert "saved" in panel.file_status.value
    panel.reset()
    assert panel.file_status.value == ""


def test_page_css_lets_genlab_tables_and_figures_win():
    # pandas' DataFrame HTML brings `.dataframe thead th {text-align: right}` to the page
    # (specificity 0,1,2) and genlab's tables carry the class: the panels' rule outranks it
    assert ".genlab-panel table.genlab-table thead th { text-align: left; }" in FOCUS_CSS
    assert "thead th.genlab-num { text-align: right; }" in FOCUS_CSS
    assert ".genlab-panel .widget-image { max-width: 100%;" in FOCUS_CSS
    assert isinstance(widgets.HTML(FOCUS_CSS), widgets.HTML)


def test_inside_views_strength_box_refuses_in_words_and_keeps_the_last_good_value():
    from helpers import tiny_llama
    from test_steering import word_tokenizer

    import genlab
    from genlab.models.architectures import build_decoder
    from genlab.widgets import InsideView

    hf = tiny_llama(num_hidden_layers=3)
    lm = genlab.LM(build_decoder(hf.config.to_dict(), hf.state_dict()), word_tokenizer())
    view = InsideView(
        lm, "the cat", positive="good day", negative="bad day", layer=1, strength=0.5,
        max_new_tokens=3, debounce=0.0,
    )  # fmt: skip
    view.auto_box.value = False
    box = view.strength_box
    for typed, said in (("1e9", "out of range"), ("abc", "is not a number"), ("", "not a")):
        box.text.value = typed
        assert said in box.status.value and "genlab-error" in box.status.value, typed
        assert view.strength_slider.value == 0.5  # neither clamped to 1.00 nor moved
        assert "strength=0.5" in repr(view)
    box.text.value = "-0.25"
    assert box.status.value == "" and view.strength_slider.value == -0.25
    assert "strength=-0.25" in repr(view)
    # the strongest source of each generated token: the largest |score|, either sign
    table = view.attribution.table
    want = table.loc[table.score.abs().groupby(table.step).idxmax()]
    shown = [
        float(x)
        for x in re.findall(r'<td class="genlab-num">(-?[\d.]+)</td>\s*</tr>', view.sources.value)
    ]
    assert shown == [round(float(x), 3) for x in want.score]
    assert "largest |score|" in view.sources.value


def test_the_watermark_explorer_marks_the_end_of_text_never_shows_its_raw_token():
    import torch

    from genlab import WatermarkingConfig
    from genlab.widgets.explorers import generated_colours
    from genlab.widgets.render import END_MARK

    class Tokenizer:  # id 2 is the end-of-text token, as <|im_end|> in the demo model
        all_special_ids = [2]

        def decode(self, ids):
            return "<|im_end|>" if ids == [2] else f" w{ids[0]}"

    seq = torch.tensor([1, 5, 6, 7, 8, 2])
    table = generated_colours(seq, 3, WatermarkingConfig(), Tokenizer(), 20)
    assert table.token.tolist() == [" w7", " w8", END_MARK]
    assert END_MARK == "\u25a0 end"


def test_a_branch_tree_over_a_callable_follows_it_and_says_how():
    import genlab
    from genlab.models.table import TableLM
    from genlab.widgets.debugger import StepDebugger
    from genlab.widgets.tree import BranchTree

    row = {w: 1 / 4 for w in "a b c d".split()}
    lm = genlab.LM(TableLM({"": row}, fallback=row))
    dbg = StepDebugger(lm, "a", max_new_tokens=20)
    tree = BranchTree(lambda: dbg.runs, lm.tokenizer)  # standalone: no on_continue
    assert "0 tokens over 1 run(s)" in tree.status.value
    assert "Refresh reads the runs again" in tree.status.value
    assert tree.continue_button.layout.display == "none"  # a button that cannot work
    dbg.step(5)
    dbg.fork()
    dbg.step(2)
    tree.refresh_button.click()
    assert "7 tokens over 2 run(s)" in tree.status.value
    dbg.step(3)
    assert "10 tokens over 2 run(s)" in tree.static_html()  # saved as it is now
    fixed = BranchTree(list(dbg.runs), lm.tokenizer)  # a list: what it was given
    assert fixed.refresh_button.layout.display == "none"
    assert "Refresh" not in fixed.status.value


def test_a_second_branch_is_shown_above_the_first_not_instead():
    import genlab
    from genlab.models.table import TableLM
    from genlab.widgets.branching import BRANCHES_SHOWN
    from genlab.widgets.playground import Playground

    row = {w: 1 / 4 for w in "a b c d".split()}
    pg = Playground(genlab.LM(TableLM({"": row}, fallback=row)), "a", max_new_tokens=6)
    pg.branch_at.value = 2
    shown = [b for b in pg.alt_buttons if b.layout.display is None]
    shown[0].click()
    pg.branch_at.value = 4
    [b for b in pg.alt_buttons if b.layout.display is None][0].click()
    view = pg.branch_view.value
    assert pg.error is None and len(pg.branches) == 2
    assert view.index("branch 2: from token 4") < view.index("branch 1: from token 2")
    assert "branch 2" in pg.static_html() and "branch 1" in pg.static_html()
    for _ in range(BRANCHES_SHOWN):
        pg.branch(1, int(pg.table.token_id[1]))
    assert pg.branch_view.value.count('class="genlab-branch"') == BRANCHES_SHOWN
    pg.panel.set("max_new_tokens", 5)  # a new result: its branches start afresh
    pg.wait()
    assert pg.branch_view.value == ""


def test_the_playground_has_a_branches_tab_with_the_result_and_its_branches():
    import genlab
    from genlab.models.table import TableLM
    from genlab.widgets.playground import Playground

    row = {w: 1 / 4 for w in "a b c d".split()}
    pg = Playground(genlab.LM(TableLM({"": row}, fallback=row)), "a", max_new_tokens=6)
    assert pg.tabs.titles == ("Tokens", "Plots", "Branches")
    pg.branch(2, int(pg.table.token_id[2]) % 4 + 1)  # another token at position 2
    pg.branch(4, int(pg.table.token_id[4]) % 4 + 1)
    assert "0 tokens" in pg.tree.status.value  # drawn only once its tab is open
    pg.tabs.selected_index = pg.TREE_TAB
    tree = pg.tree.table()
    assert "over 3 run(s)" in pg.tree.status.value
    # the result's 6 tokens, the first branch's 4 after position 2, the second's 2 after 4
    assert len(tree) - 1 == 6 + 4 + 2
    assert tree.groupby("parent").node.count().max() == 2  # forks where they part
    pg.panel.set("max_new_tokens", 5)  # a new result: its tree has no branch yet
    pg.wait()
    assert "5 tokens over 1 run(s)" in pg.tree.status.value
