"""Beam traces: every candidate with its fate, the hypothesis pool, the early-stop decision,
the ``beam.candidates`` hook, and the beam-tree figure."""

from __future__ import annotations

import warnings

import matplotlib
import numpy as np
import pytest
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg

import genlab
from genlab.plots.beam import RETURNED, STYLE, beam_tree
from genlab.strategies.stepdata import BeamCandidates, BeamStep, EarlyStop, PoolEntry

OUT = dict(return_dict_in_generate=True, output_scores=True)
pytestmark = pytest.mark.filterwarnings("ignore:.*(Group|Constrained) Beam Search")


def _traced(model, batch, **cfg):
    ids, mask = batch
    run = genlab.start(model, input_ids=ids, attention_mask=mask, trace=True, **OUT, **cfg)
    out = run.run()
    return run, out, run.tracer.trace


@pytest.fixture(scope="module")
def beam_run(hf_llama):
    ids = torch.tensor([[0, 0, 5, 17, 33, 8], [4, 9, 21, 40, 11, 7]])
    mask = (ids != 0).long()
    return _traced(
        hf_llama,
        (ids, mask),
        num_beams=4,
        eos_token_id=[14, 76],
        max_new_tokens=10,
        length_penalty=1.5,
        num_return_sequences=2,
    )


def test_every_candidate_is_recorded_with_a_fate(beam_run):
    run, out, trace = beam_run
    tree = trace.beam_tree()
    k = 3 * 4  # max(2, 1 + two EOS ids) * num_beams
    assert len(tree) == k * 2 * len(trace)
    assert set(tree.fate) <= {"kept", "finished", "rejected", "pruned"}
    for (step, _b), col in tree.groupby(["step", "batch"]):
        assert sorted(col["rank"]) == list(range(k))
        kept = col[col.fate == "kept"]
        if not (step == len(trace) - 1):
            assert sorted(kept.beam) == [0, 1, 2, 3]
        finished = col[col.fate.isin(["finished", "rejected"])]
        # only EOS candidates within the first num_beams may finish (or all at max length)
        if step < len(trace) - 1:
            assert finished.token_id.isin([14, 76]).all() and (finished["rank"] < 4).all()
    assert (tree.fate == "finished").any() and (tree.fate == "pruned").any()


def test_scores_add_up_along_the_tree(beam_run):
    run, out, trace = beam_run
    tree = trace.beam_tree()
    score_of = dict(zip(tree.node, tree.score, strict=True))
    parent_score = tree.parent_node.map(lambda n: score_of.get(n, 0.0))
    np.testing.assert_allclose(tree.score, parent_score + tree.token_logprob, atol=1e-4, rtol=0)
    generated = tree.step + 1
    np.testing.assert_allclose(
        tree.normalized_score, tree.score / generated**1.5, atol=1e-5, rtol=0
    )


def test_returned_paths_spell_the_output(beam_run):
    run, out, trace = beam_run
    prompt = run.prompt_length
    for row in range(out.sequences.shape[0]):
        path = trace.returned_path(row)
        n = len(path)
        assert path.step.tolist() == list(range(n))
        assert all(row in rows for rows in path.returned_rows)
        assert path.token_id.tolist() == out.sequences[row, prompt : prompt + n].tolist()
        assert path.fate.iloc[-1] == "finished"
        assert path.normalized_score.iloc[-1] == pytest.approx(
            float(out.sequences_scores[row]), abs=1e-5
        )
        assert n == int((out.beam_indices[row] >= 0).sum())


def test_hypotheses_and_early_stop_views(beam_run):
    run, out, trace = beam_run
    pool = trace.hypotheses()
    last = pool[pool.step == pool.step.max()]
    for b in range(2):
        best = last[last.batch == b].sort_values("score", ascending=False).head(2)
        np.testing.assert_allclose(
            best.score, out.sequences_scores[2 * b : 2 * b + 2], atol=1e-5, rtol=0
        )
    stop = trace.early_stop()
    assert len(stop) == 2 * len(trace) and bool(stop.done.iloc[-1])
    assert not stop.done.iloc[:-2].any()
    steps = stop[stop.step < len(trace) - 1]
    # default rule: the best running beam, normalised at the current length
    np.testing.assert_allclose(
        steps.best_possible, steps.best_running / steps.generated_length**1.5, rtol=1e-6
    )


def test_candidates_hook_and_no_payload_without_listeners(hf_llama, padded_batch):
    ids, mask = padded_batch
    run = genlab.start(
        hf_llama,
        input_ids=ids,
        attention_mask=mask,
        num_beams=3,
        max_new_tokens=4,
        keep_history=True,
    )
    assert run.step().info is None  # nobody listens: nothing built
    seen = []
    with run.hooks({"beam.candidates": lambda payload, step: seen.append((step, payload))}):
        record = run.step()
    assert [s for s, _ in seen] == [1]
    payload = seen[0][1]
    assert record.info is payload and payload.kind == "beam_search"
    assert payload.candidates.token.shape == (2 * 2 * 3,)
    assert isinstance(payload, BeamStep) and isinstance(payload.candidates, BeamCandidates)
    assert all(isinstance(e, PoolEntry) for e in payload.pool)
    assert isinstance(payload.early_stop, EarlyStop)


@pytest.mark.parametrize(
    "cfg",
    [
        dict(num_beams=4, do_sample=True, eos_token_id=[14, 76]),
        dict(num_beams=4, num_beam_groups=2, diversity_penalty=2.0, eos_token_id=[14, 76]),
        dict(num_beams=3, force_words_ids=[[20, 21], [[5], [6, 7]]], eos_token_id=[14, 76]),
    ],
)
def test_tracing_does_not_change_the_result(hf_llama, padded_batch, cfg):
    ids, mask = padded_batch
    torch.manual_seed(1)
    plain = genlab.generate(hf_llama, ids, attention_mask=mask, max_new_tokens=8, **OUT, **cfg)
    torch.manual_seed(1)
    run, traced, trace = _traced(hf_llama, padded_batch, max_new_tokens=8, **cfg)
    assert torch.equal(plain.sequences, traced.sequences)
    for row in range(traced.sequences.shape[0]):  # the returned paths spell the output
        path = trace.returned_path(row)
        n = len(path)
        assert n > 0
        tokens, written = path.token_id.tolist(), traced.sequences[row, 6 : 6 + n].tolist()
        if tokens[-1] in (14, 76):  # group/constrained write the first EOS id, as the
            tokens[-1] = written[-1] = 14  # reference does, whichever EOS ended the beam
        assert tokens == written


def test_group_tree_shows_the_diversity_penalty(hf_llama, padded_batch):
    run, out, trace = _traced(
        hf_llama,
        padded_batch,
        num_beams=4,
        num_beam_groups=2,
        diversity_penalty=2.0,
        max_new_tokens=6,
    )
    tree = trace.beam_tree()
    lost = tree[tree.fate == "diversity"]
    assert len(lost) and (lost.group == 1).all() and (lost.source == "unpenalized").all()
    kept = tree[(tree.fate == "kept") & (tree.step == 0)]
    assert sorted(kept[kept.batch == 0].beam) == [0, 1, 2, 3]
    assert set(kept.group) == {0, 1}
    # a candidate lost to the penalty repeats a token group 0 chose for the same input
    for _key, col in tree.groupby(["step", "batch"]):
        chosen_by_group0 = set(col[(col.group == 0) & (col.fate == "kept")].token_id)
        assert set(col[col.fate == "diversity"].token_id) <= chosen_by_group0


@pytest.fixture(scope="module")
def group_done_run(hf_llama):
    """Group beam search where group 1 of input 0 fills its pool and is done after step 1:
    its step-1 EOS candidate (rank 0) enters the pool and the group stops there."""
    ids = torch.tensor([[0, 0, 5, 17, 33, 8], [4, 9, 21, 40, 11, 7]])
    return _traced(
        hf_llama,
        (ids, (ids != 0).long()),
        num_beams=4,
        num_beam_groups=2,
        diversity_penalty=1.0,
        eos_token_id=15,
        max_new_tokens=8,
    )


def _done_groups_after(trace):
    """{(batch, group): first step after which it is done}"""
    done = {}
    for rec in trace.records:
        if not isinstance(rec.info, BeamStep):
            continue
        for b, flags in enumerate(rec.info.early_stop.group_done.tolist()):
            for g, flag in enumerate(flags):
                if flag:
                    done.setdefault((b, g), rec.step)
    return done


def test_group_tree_marks_every_pooled_hypothesis_finished(group_done_run):
    run, out, trace = group_done_run
    tree, pool = trace.beam_tree(), trace.hypotheses()
    assert _done_groups_after(trace).get((0, 1)) == 1  # the settings still reproduce it
    finished = tree[tree.fate == "finished"]
    assert set(finished.node) == set(pool.node)  # including the one that closed the group
    last = pool[pool.step == pool.step.max()]
    per_group = finished[finished.node.isin(last.node)].groupby(["batch", "group"]).size()
    assert per_group.to_dict() == last.groupby(["batch", "group"]).size().to_dict()
    # the beams kept at the step that closed the group are kept, with their beam index
    closing = tree[(tree.step == 1) & (tree.batch == 0) & (tree.group == 1)]
    assert sorted(closing[closing.fate == "kept"].beam) == [2, 3]


def test_group_tree_has_no_candidates_of_a_done_group(group_done_run):
    run, out, trace = group_done_run
    tree = trace.beam_tree()
    for (b, g), step in _done_groups_after(trace).items():
        later = tree[(tree.batch == b) & (tree.group == g) & (tree.step > step)]
        assert later.empty, f"group {g} of input {b} is done after step {step}"
    # so every candidate after the first step extends a beam kept one step earlier
    kept = tree[tree.fate == "kept"]
    key = dict(zip(kept.node, zip(kept.step, kept.batch, strict=True), strict=True))
    for r in tree[tree.step > 0].itertuples():
        assert key.get(r.parent_node) == (r.step - 1, r.batch), r
    assert (tree[tree.step == 0].parent_node == -1).all()


def test_constrained_tree_shows_constraint_fates(hf_llama, padded_batch):
    run, out, trace = _traced(
        hf_llama, padded_batch, num_beams=3, force_words_ids=[[20, 21]], max_new_tokens=6
    )
    tree = trace.beam_tree()
    proposed = tree[tree.source == "constraint"]
    assert len(proposed) and proposed.token_id.isin([20, 21]).all()
    assert (proposed.fate == "kept").any()
    assert (tree.fate == "constraint").any()
    for _key, col in tree.groupby(["step", "batch"]):
        assert sorted(col[col.fate == "kept"].beam) == [0, 1, 2]


def test_beam_tree_needs_a_beam_trace(hf_llama, padded_batch):
    ids, mask = padded_batch
    run = genlab.start(hf_llama, input_ids=ids, attention_mask=mask, max_new_tokens=3, trace=True)
    run.run()
    with pytest.raises(ValueError, match="num_beams"):
        run.tracer.trace.beam_tree()


# -- the figure -----------------------------------------------------------------------------------
class _Words:
    words = [
        "the",
        "a",
        "cat",
        "dog",
        "sat",
        "on",
        "mat",
        "and",
        "ran",
        "away",
        "quickly",
        "home",
        "with",
        "big",
        "small",
        "red",
        "garden",
        "river",
        "mountain",
        "children",
    ]

    def decode(self, ids, **_):
        return " ".join(self.words[i % 20] + str(i // 20 or "") for i in ids)

    def convert_ids_to_tokens(self, ids):
        return [self.decode([i]) for i in ids]


def test_beam_tree_figure_8_beams_30_steps(hf_llama):
    ids = torch.tensor([[4, 9, 21, 40, 11, 7]])
    run = genlab.start(
        hf_llama,
        input_ids=ids,
        num_beams=8,
        max_new_tokens=30,
        eos_token_id=[14],
        trace=True,
        tokenizer=_Words(),
        **OUT,
    )
    out = run.run()
    fig = beam_tree(run.tracer.trace)
    assert isinstance(fig, matplotlib.figure.Figure)
    width, height = fig.get_size_inches()
    # 31 steps wrap into bands of at most 6: the figure fits a 768 px output area (7.2 in
    # wide at most, readable at 100 dpi)
    assert width <= 7.2 and len(fig.axes) == 6 and 25 <= height <= 45
    fig.savefig("/tmp/genlab_beam_tree_8x30.png", dpi=100)
    texts = [t for ax in fig.axes for t in ax.texts]
    labels = [t.get_text() for t in texts]
    assert "prompt" in labels
    first = out.sequences[0, 6].item()
    assert any(label.startswith(_Words().decode([first]) + "\n") for label in labels)
    orange = [line for ax in fig.axes for line in ax.lines if line.get_color() == RETURNED]
    assert len(orange) == int((out.beam_indices[0] >= 0).sum())  # one edge per returned step
    bold = [
        t
        for t in texts
        if t.get_bbox_patch() is not None
        and matplotlib.colors.same_color(t.get_bbox_patch().get_edgecolor(), RETURNED)
    ]
    assert len(bold) == len(orange)


def test_beam_tree_figure_options(beam_run):
    run, out, trace = beam_run
    full = beam_tree(trace, batch=1)
    part = beam_tree(trace, batch=1, steps=(2, 5), pruned=False, score="token_logprob")
    assert part.get_size_inches()[0] < full.get_size_inches()[0]
    grey = matplotlib.colors.to_rgba(STYLE["pruned"]["text"])
    assert not any(
        matplotlib.colors.same_color(t.get_color(), grey) for t in part.axes[0].texts
    )  # no pruned (grey) labels
    with pytest.raises(ValueError, match="batch=5"):
        beam_tree(trace, batch=5)
    with pytest.raises(ValueError, match="score"):
        beam_tree(trace, score="nope")
    with pytest.raises(ValueError, match="steps"):
        beam_tree(trace, steps=(4, 2))


@pytest.mark.parametrize(
    "cfg", [dict(num_beams=2), dict(num_beams=4, num_beam_groups=2, diversity_penalty=1.0)]
)
def test_beam_tree_figure_small_tree_lays_out(hf_llama, cfg):
    ids = torch.tensor([[4, 9, 21, 40, 11, 7]])
    run = genlab.start(hf_llama, input_ids=ids, max_new_tokens=3, trace=True, **cfg)
    run.run()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "constrained_layout not applied"
        fig = beam_tree(run.tracer.trace)
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
    renderer = canvas.get_renderer()
    fig_box = fig.bbox
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "kept beam" in labels and "dropped by constraint" not in labels  # only drawn fates
    legend = fig.axes[0].get_legend().get_window_extent(renderer)
    assert fig_box.x0 - 1 <= legend.x0 and legend.x1 <= fig_box.x1 + 1  # the legend fits
    axes = fig.axes[0].get_window_extent(renderer)
    assert axes.width > 0.5 * fig_box.width and axes.height > 0.3 * fig_box.height
