"""Contrastive search: parity with transformers 4.52.4 (recorded fixtures) and its trace.

The fixtures come from tests/record_contrastive_fixtures.py run under transformers 4.52.4;
the models here are rebuilt from the same config + seed, and their weight checksums must
equal the recorded ones (otherwise the comparison would be meaningless).
"""

from __future__ import annotations

import pytest
import torch
from record_contrastive_fixtures import (
    CASES,
    FIXTURE,
    MODELS,
    assert_matches_recorded,
    assert_recorded_models,
    build_all,
    run_case,
)

import genlab
from genlab.run.trace import contrastive_table
from genlab.strategies.contrastive import (
    ContrastiveSearch,
    contrastive_scores,
    degeneration_penalty,
)

REFERENCE = torch.load(FIXTURE, weights_only=True)


@pytest.fixture(scope="module")
def models():
    return build_all(MODELS)


def test_fixture_models_are_the_recorded_ones(models):
    assert_recorded_models(models, REFERENCE)


@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_transformers_4_52_4(models, case):
    model_name, ids, mask, kwargs = CASES[case]
    out = run_case(lambda **k: genlab.generate(models[model_name], **k), ids, mask, kwargs)
    assert_matches_recorded(out, REFERENCE["cases"][case])


def test_padded_row_reaches_eos_then_pads(models):
    seqs = REFERENCE["cases"]["batch_left_padding_eos"]["sequences"]
    row = seqs[0, 6:].tolist()
    assert 2 in row  # the fixture really covers an EOS inside the generation
    assert all(t == 0 for t in row[row.index(2) + 1 :])


def test_mode_is_contrastive_and_builtin_path_differs_from_greedy(models):
    model = models["llama_s0"]
    ids = torch.tensor([[3, 14, 15, 9, 26]])
    run = genlab.start(model, input_ids=ids, penalty_alpha=0.9, top_k=5, max_new_tokens=6)
    assert isinstance(run.views.strategy, ContrastiveSearch)
    contrastive = run.run()
    greedy = genlab.generate(model, input_ids=ids, max_new_tokens=6)
    assert not torch.equal(contrastive, greedy)  # alpha 0.9 changes the choice


def test_degeneration_penalty_values_and_padding():
    context = torch.tensor([[[1.0, 0.0], [0.0, 0.0], [0.6, 0.8]]])  # (1, 3, 2); pos 1 a pad
    candidate = torch.tensor([[[0.0, 2.0]]])
    penalty = degeneration_penalty(context, candidate, torch.tensor([[1, 0, 1]]))
    torch.testing.assert_close(penalty, torch.tensor([0.8]))
    # all-zero hidden state at a pad would give NaN; masked, it must not leak
    assert torch.isfinite(penalty).all()
    only_first = degeneration_penalty(context, candidate, torch.tensor([[1, 0, 0]]))
    torch.testing.assert_close(only_first, torch.tensor([0.0]))


def test_contrastive_scores_formula():
    probs, penalty = torch.tensor([0.5, 0.2]), torch.tensor([0.9, 0.1])
    torch.testing.assert_close(contrastive_scores(probs, penalty, 0.6), 0.4 * probs - 0.6 * penalty)


def test_trace_table_has_every_candidate_and_the_choice(models):
    model = models["llama_s0"]
    ids = torch.tensor([[3, 14, 15, 9, 26]])
    run = genlab.run.engine.start(
        model, input_ids=ids, penalty_alpha=0.5, top_k=4, max_new_tokens=5, keep_history=True
    )
    out = run.run()
    table = contrastive_table(run.history)
    assert len(table) == 5 * 4
    assert table.groupby("step")["chosen"].sum().tolist() == [1] * 5
    chosen = table[table.chosen]
    assert chosen.token_id.tolist() == out[0, 5:].tolist()
    # the chosen candidate has the best combined score, and the score is the formula
    best = table.loc[table.groupby("step")["score"].idxmax()]
    assert best.token_id.tolist() == chosen.token_id.tolist()
    expected = 0.5 * table.confidence - 0.5 * table.penalty
    assert (table.score - expected).abs().max() < 1e-6
    assert ((table.penalty >= -1) & (table.penalty <= 1 + 1e-6)).all()


def test_rewind_and_force_keep_contrastive_state_consistent(models):
    model = models["llama_s0"]
    ids = torch.tensor([[3, 14, 15, 9, 26]])
    kwargs = dict(input_ids=ids, penalty_alpha=0.6, top_k=3, max_new_tokens=6)
    full = genlab.generate(model, **kwargs)
    run = genlab.run.engine.start(model, keep_history=True, **kwargs)
    run.step()
    run.step()
    run.step()
    run.rewind(2)
    assert torch.equal(run.run(), full)
    # forcing the reference's own next token reproduces the same continuation
    forced = genlab.run.engine.start(model, **kwargs)
    forced.force(int(full[0, 5]))
    assert torch.equal(forced.run(), full)


def test_contrastive_plot_marks_the_chosen_candidate(models):
    from genlab.plots import contrastive_plot

    ids = torch.tensor([[3, 14, 15, 9, 26]])
    run = genlab.run.engine.start(
        models["llama_s0"], input_ids=ids, penalty_alpha=0.5, top_k=3, max_new_tokens=2,
        keep_history=True,
    )  # fmt: skip
    run.run()
    table = contrastive_table(run.history)
    ax = contrastive_plot(table, step=1).axes[0]
    scores = ax.patches[6:9]
    chosen = table[(table.step == 1)].chosen.tolist()
    assert [p.get_linewidth() == 2 for p in scores] == chosen
    with pytest.raises(ValueError, match="no candidates"):
        contrastive_plot(table, step=9)
