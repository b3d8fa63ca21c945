"""Issue 37: click an alternative to branch (a fork: the original stays), and the
BranchTree of every run explored, as a list to choose from, a table and a static view.
Models are hand-written TableLMs (instant, exact numbers)."""

from __future__ import annotations

import re

import pytest

import genlab
from genlab.models.table import TableLM
from genlab.widgets.debugger import StepDebugger
from genlab.widgets.tree import TREE_COLUMNS, BranchTree, build_tree

WORDS = "a b c d e f g h i j k l m n o p q r s t".split()


@pytest.fixture(scope="module")
def uniform():
    row = {w: 1 / len(WORDS) for w in WORDS}
    return genlab.LM(TableLM({"": row}, fallback=row))


def ids(run):
    return run.sequences[0, run.prompt_length :].tolist()


def test_clicking_an_alternative_forks_and_takes_it(uniform):
    dbg = StepDebugger(uniform, "a", max_new_tokens=20)
    dbg.step(3)
    original = ids(dbg.run)
    shown = [b for b in dbg.alt_buttons if b.layout.display is None]
    assert shown and all(b.token_id != original[-1] for b in shown)  # alternatives only
    choice = shown[1]
    assert "a fork, this run stays" in choice.tooltip  # mouse and keyboard: a Button
    want = choice.token_id  # (the buttons are relabelled for the fork's step after)
    choice.click()
    dbg.wait()
    assert dbg.error is None and len(dbg.runs) == 2 and dbg.run is dbg.runs[1]
    assert ids(dbg.runs[0]) == original  # the original stays
    assert ids(dbg.run) == original[:-1] + [want]
    dbg.step()
    assert dbg.run.step_index == 4 and dbg.runs[0].step_index == 3


def test_a_refused_branch_leaves_no_fork(uniform):
    dbg = StepDebugger(uniform, "a", max_new_tokens=20)
    dbg.step(2)
    with pytest.raises(ValueError):
        dbg.branch("")
    assert len(dbg.runs) == 1 and dbg.run is dbg.runs[0] and dbg.run_picker.value == 0


def test_the_tree_merges_runs_where_they_agree_and_its_table_says_so(uniform):
    dbg = StepDebugger(uniform, "a", max_new_tokens=40)
    dbg.step(3)
    first = ids(dbg.run)
    other = next(b.token_id for b in dbg.alt_buttons if b.token_id is not None)
    dbg.branch(other)  # a fork at step 2
    dbg.step(2)
    dbg.select_run(0)
    dbg.step(25)  # the first run goes on: over 30 nodes in all
    dbg.tabs.selected_index = dbg.TREE_TAB
    table = dbg.tree.table()
    assert table.equals(build_tree(dbg.runs, uniform.tokenizer))
    assert list(table.columns) == TREE_COLUMNS
    assert len(table) == 1 + 28 + 3  # the prompt, run 0's 28 tokens, the fork's own 3
    shared = table[table.runs == "0, 1"]
    assert list(shared.token_id[1:]) == first[:2]  # the first two tokens are shared
    fork = table[table.runs == "1"]
    assert int(fork.token_id.iloc[0]) == other and bool(fork.forced.iloc[0])
    assert set(fork.depth) == {1} and table.depth.max() == 1  # indented once per branch
    assert (table.parent[1:] < table.node[1:]).all()


def test_choosing_a_node_continues_from_it_in_a_fork(uniform):
    dbg = StepDebugger(uniform, "a", max_new_tokens=40)
    dbg.step(6)
    before = ids(dbg.run)
    dbg.tabs.selected_index = dbg.TREE_TAB
    tree = dbg.tree
    assert len(tree.picker.options) == 7 and "◀ here" in tree.picker.options[-1][0]
    tree.picker.value = 3  # the third token
    tree.continue_button.click()
    dbg.wait()
    assert dbg.error is None and len(dbg.runs) == 2
    assert ids(dbg.run) == before[:3] and not dbg.run.pending_forced
    assert ids(dbg.runs[0]) == before  # the original stays
    assert "◀ here" in dict((v, k) for k, v in tree.picker.options)[3]
    dbg.step()
    assert ids(dbg.run)[:3] == before[:3] and dbg.run.step_index == 4


def test_the_tree_has_a_static_view_with_hover_details(uniform, tmp_path):
    dbg = StepDebugger(uniform, "a", max_new_tokens=40)
    dbg.step(3)
    dbg.branch(next(b.token_id for b in dbg.alt_buttons if b.token_id is not None))
    tree = BranchTree(dbg.runs, uniform.tokenizer)
    page = tree.static_html()
    assert page.count('class="genlab-tree-node"') == len(tree.table())
    assert re.search(r'title="step 2: \S+ p=0\.050 \(forced\)\nruns 1"', page)
    with pytest.raises(ValueError, match="nothing to continue"):
        tree.choose(1)
    path = tree.save_html(tmp_path / "tree.html")
    assert "genlab-tree-node" in path.read_text(encoding="utf-8")
    saved = dbg.save_html(tmp_path / "debugger.html").read_text(encoding="utf-8")
    assert "genlab-tree-node" in saved  # the debugger's view has the tree once it forks


def test_the_playground_continues_from_a_clicked_alternative_and_keeps_its_result(uniform):
    from genlab.widgets.playground import Playground

    pg = Playground(uniform, "a", max_new_tokens=6)
    original = pg.result.text
    pg.branch_at.value = 2
    shown = [b for b in pg.alt_buttons if b.layout.display is None]
    taken = int(pg.table.token_id[2])
    assert shown and all(b.token_id != taken for b in shown)  # alternatives of token 2
    want = shown[1].token_id
    shown[1].click()  # mouse, or Tab + Enter: a Button
    assert pg.error is None and len(pg.branches) == 1 and pg.result.text == original
    branch = pg.branches[0]
    ids_branch = branch.run.sequences[0, branch.run.prompt_length :].tolist()
    assert ids_branch[:3] == [*pg.table.token_id[:2].tolist(), want] and len(ids_branch) == 6
    assert "branch 1: from token 2" in pg.branch_view.value
    assert "branch 1" in pg.static_html()
    with pytest.raises(ValueError, match="position must be a token of the result"):
        pg.branch(99, want)


def test_beam_search_offers_no_alternatives_to_click(uniform):
    from genlab.widgets.playground import Playground

    pg = Playground(uniform, "a", max_new_tokens=3, num_beams=2)
    assert pg.alternatives(0) == [] and pg.alt_label.layout.display == "none"
    assert all(b.layout.display == "none" for b in pg.alt_buttons)
    pg.panel.set("num_beams", 1)
    pg.update(sync=True)
    assert pg.alt_label.layout.display is None and pg.alt_buttons[0].layout.display is None
