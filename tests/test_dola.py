"""DoLa decoding: parity with transformers 4.52.4 (recorded fixtures, see
tests/record_dola_fixtures.py) on the transformers models and on genlab's built-in decoder
with the same weights, the layer choice, its trace, and clear errors."""

from __future__ import annotations

import pytest
import torch
from record_contrastive_fixtures import (
    assert_matches_recorded,
    assert_recorded_models,
    build_all,
    run_case,
)
from record_dola_fixtures import CASES, FIXTURE, MODELS

import genlab
from genlab.models.architectures import build_decoder
from genlab.models.table import TableLM
from genlab.run.trace import dola_table
from genlab.strategies.dola import candidate_layers, contrast_logits

REFERENCE = torch.load(FIXTURE, weights_only=True)


@pytest.fixture(scope="module")
def models():
    return build_all(MODELS)


def test_fixture_models_are_the_recorded_ones(models):
    assert_recorded_models(models, REFERENCE)


@pytest.mark.parametrize("kind", ["transformers", "builtin"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_transformers_4_52_4(models, case, kind):
    model_name, ids, mask, kwargs = CASES[case]
    hf = models[model_name]
    model = hf if kind == "transformers" else build_decoder(hf.config.to_dict(), hf.state_dict())
    out = run_case(lambda **k: genlab.generate(model, **k), ids, mask, kwargs)
    assert_matches_recorded(out, REFERENCE["cases"][case])


def test_cases_cover_the_layer_rules():
    """The recorded cases reach one and several candidates, tied and untied heads."""
    chosen = {
        "untied_2": candidate_layers("high", 2, False),
        "untied_6 low": candidate_layers("low", 6, False),
        "untied_6 high": candidate_layers("high", 6, False),
        "tied_4": candidate_layers("low", 4, True),
    }
    assert chosen == {
        "untied_2": [1],
        "untied_6 low": [0, 2],
        "untied_6 high": [3, 5],
        "tied_4": [2],
    }
    assert candidate_layers("low", 2, True) == [1]  # start layer 1 == 2 // 2
    assert candidate_layers("low", 48, True) == list(range(2, 20, 2))
    assert candidate_layers("high", 48, False) == list(range(28, 48, 2))
    assert candidate_layers([0, 4, 9], 6, False) == [0, 4]


def test_contrast_is_final_minus_premature_log_probs_on_the_kept_tokens():
    final = torch.tensor([[2.0, 1.9, -3.0, -0.5]])  # token 3: e^-2.5 < 0.1 of the best
    premature = {1: torch.tensor([[1.0, 2.0, 0.0, 0.0]])}
    scores, layer, js = contrast_logits(final, premature)
    assert layer == 1 and js is None
    logp, base = final.log_softmax(-1), premature[1].log_softmax(-1)
    keep = logp >= logp.max() + torch.log(torch.tensor(0.1))  # within 10 % of the best
    assert keep.tolist() == [[True, True, False, False]]
    torch.testing.assert_close(scores[keep], (logp - base)[keep])
    assert torch.isinf(scores[~keep]).all()
    # with several candidates, the one furthest from the final distribution is contrasted
    far = {0: torch.tensor([[-5.0, 5.0, 0.0, 0.0]]), 2: torch.tensor([[2.0, 1.8, -3.0, 0.0]])}
    _, layer, js = contrast_logits(final, far)
    assert layer == 0 and js.shape == (2,) and js[0] > js[1]


def test_trace_shows_the_dola_stage_and_the_layer_chosen(models):
    lm = genlab.load(models["untied_6"])
    res = genlab.generate(
        lm.model, torch.tensor([[3, 14, 15, 9]]), dola_layers="high", max_new_tokens=4,
        return_dict_in_generate=True, output_logits=True,
    )  # fmt: skip
    run = genlab.start(
        lm.model, torch.tensor([[3, 14, 15, 9]]), dola_layers="high", max_new_tokens=4,
        trace=True, keep_history=True,
    )  # fmt: skip
    run.run()
    assert run.tracer.trace.stages()[:2] == ["raw", "dola"]
    table = dola_table(run.history)
    assert list(table.columns) == ["step", "layer", "js_divergence", "chosen"]
    assert table.layer.tolist() == [3, 5] * 4 and table.groupby("step").chosen.sum().eq(1).all()
    assert torch.equal(run.output, res.sequences)
    # the recorded logits are the final layer's own, as a plain forward gives them
    plain = genlab.generate(
        lm.model, torch.tensor([[3, 14, 15, 9]]), max_new_tokens=1,
        return_dict_in_generate=True, output_logits=True,
    )  # fmt: skip
    torch.testing.assert_close(res.logits[0], plain.logits[0], atol=1e-6, rtol=0)


def test_bad_layers_and_models_are_clear_errors(models):
    ids = torch.tensor([[3, 14, 15]])
    with pytest.raises(ValueError, match=r"dola_layers=\[7, 9\] names no layer below .* 6"):
        genlab.generate(models["untied_6"], ids, dola_layers=[7, 9], max_new_tokens=2)
    with pytest.raises(ValueError, match="DoLa needs a model whose output head"):
        genlab.generate(TableLM.classic(), torch.tensor([[1]]), dola_layers="low")
