"""Issue 37: every panel that shows tokens with their alternatives lets you click one to
continue from there, in a run of its own (the original stays), through the one
click-to-branch code (genlab/widgets/branching.py). Models: a hand-written TableLM
(instant, exact numbers) and, for the logit lens, a tiny random Llama."""

from __future__ import annotations

import pytest
import torch
from helpers import tiny_llama

import genlab
from genlab.models.table import TableLM
from genlab.widgets import branching
from genlab.widgets.compare import CompareView
from genlab.widgets.explorers import BeamExplorer, WatermarkExplorer
from genlab.widgets.lens import LensView

WORDS = "a b c d e f g h i j k l m n o p q r s t".split()


@pytest.fixture(scope="module")
def skewed():
    row = {w: (i + 1) / 210 for i, w in enumerate(WORDS)}  # distinct probabilities
    return genlab.LM(TableLM({"": row}, fallback=row))


def generated(result):
    run = result.run
    return run.sequences[0, run.prompt_length :].tolist()


def click_second(picker):
    shown = [b for b in picker.buttons if b.layout.display is None]
    assert len(shown) >= 2 and picker.label.layout.display is None
    shown[1].click()  # mouse, or Tab + Enter: a Button
    return shown[1].token_id


def test_the_panels_share_one_click_to_branch_code():
    import inspect

    from genlab.widgets import compare, debugger, explorers, lens, playground

    for module in (compare, debugger, explorers, lens, playground):
        source = inspect.getsource(module)
        assert "branching import" in source and 'add_class("genlab-alternative")' not in source


def test_compare_view_continues_a_column_from_a_clicked_alternative(skewed):
    cv = CompareView(skewed, "a", {"greedy": {"max_new_tokens": 5},
                                   "top_k=3": {"do_sample": True, "top_k": 3,
                                               "max_new_tokens": 5}})  # fmt: skip
    before = cv.texts()
    cv.branch_column.value = "top_k=3"
    cv.picker.at.value = 2
    taken = int(cv.tables["top_k=3"].token_id[2])
    want = click_second(cv.picker)
    assert cv.error is None and want != taken and cv.texts() == before
    ids = generated(cv.branches[0])
    assert ids[:3] == [*cv.tables["top_k=3"].token_id[:2].tolist(), want]
    assert "branch 1: from top_k=3, token 2" in cv.picker.view.value
    assert "branch 1: from top_k=3" in cv.static_html()  # the saved view keeps it
    with pytest.raises(ValueError, match="column must be one of"):
        cv.branch("nope", 0, want)


def test_watermark_explorer_continues_from_a_green_list_token(skewed):
    wm = WatermarkExplorer(skewed, "a", max_new_tokens=6)
    original = generated(wm.result)
    wm.position.value = 3
    want = click_second(wm.picker)
    assert wm.error is None and want != original[3] and generated(wm.result) == original
    ids = generated(wm.branches[0])
    assert ids[:4] == [*original[:3], want]
    assert wm.branches[0].run.config.watermarking_config is not None  # still watermarked
    assert "branch 1: from position 3" in wm.picker.view.value


def test_beam_explorer_continues_the_search_from_a_clicked_candidate(skewed):
    bx = BeamExplorer(skewed, "a", num_beams=2, max_new_tokens=4)
    bx.step_slider.value = 1
    alts = bx.alternatives(1)
    assert len(alts) >= 2
    key = click_second(bx.picker)
    row = bx.tree.loc[key]
    assert bx.error is None and int(row.step) == 1
    branch = bx.branches[0]
    run = branch.run
    prefix = run.sequences[0, : run.prompt_length].tolist()
    assert prefix[-1] == int(row.token_id)  # the candidate's token is now part of the input
    assert len(generated(branch)) == 4 and "branch 1: from step 1" in bx.picker.view.value
    assert "branch 1: from step 1" in bx.static_html()


@pytest.mark.parametrize("last", [0, 1, 4])
def test_the_beam_trees_caption_is_not_cut_at_its_edges(skewed, last):
    """Issue 37: at steps 0-1 the figure is narrow; its caption's centred lines were
    wider than it and cut on both sides (dark pixels in the outer pixel columns)."""
    import io

    import matplotlib.image as mpimg

    from genlab.plots.beam import beam_tree

    result = skewed.generate("a", num_beams=3, max_new_tokens=6, trace=True)
    fig = beam_tree(result.trace, steps=(0, last), steps_per_row=5, title="Beam tree")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    buf.seek(0)
    grey = mpimg.imread(buf)[..., :3].mean(axis=2)
    assert (grey[:, [0, 1, 2, -3, -2, -1]] < 0.85).sum() == 0


def test_lens_view_continues_from_an_alternative_of_the_chosen_step():
    lm = genlab.LM(tiny_llama(num_hidden_layers=2))
    view = LensView(lm, torch.tensor([[1, 5, 17, 33]]), max_new_tokens=4, eos_token_id=None)
    original = generated(view.source)
    view.step_slider.value = 1
    want = click_second(view.picker)
    assert view.error is None and want != original[1] and generated(view.source) == original
    assert generated(view.branches[0])[:2] == [original[0], want]
    assert "branch 1: from step 1" in view.picker.view.value


def test_a_given_run_offers_nothing_to_click():
    lm = genlab.LM(tiny_llama(num_hidden_layers=2))
    result = lm.generate(torch.tensor([[1, 5, 17]]), max_new_tokens=3, eos_token_id=None)
    view = LensView(result)
    assert view.alternatives(0) == [] and view.picker.label.layout.display == "none"
    with pytest.raises(ValueError, match="given run"):
        view.branch(0, 3)


def test_alternatives_never_list_the_taken_token_or_impossible_ones(skewed):
    result = skewed.generate("a", max_new_tokens=3, top_k=3, do_sample=True, trace=True)
    for pos in range(3):
        alts = branching.result_alternatives(branching.stepwise_trace(result), pos)
        taken = generated(result)[pos]
        assert len(alts) == 2 and all(i != taken and p > 0 for i, _, p in alts)
