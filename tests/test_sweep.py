"""genlab.sweep: every setting of the grid, n samples each in one batched generation,
seeded and reproducible; metrics recomputed from the samples; figures; errors."""

from __future__ import annotations

import pytest
import torch
from helpers import tiny_llama
from test_lens import assert_legible

import genlab
from genlab.experiments.sweeps import METRICS, distinct, repetition

PROMPT = torch.tensor([[1, 5, 17, 33]])
GRID = {"temperature": [0.6, 1.4], "top_p": [0.5, 1.0]}


@pytest.fixture(scope="module")
def lm():
    # EOS id 3 is common enough in the tiny model's samples that some rows end early
    return genlab.LM(tiny_llama(0, eos_token_id=3))


@pytest.fixture(scope="module")
def result(lm):
    return genlab.sweep(lm, PROMPT, GRID, n=6, seed=0, max_new_tokens=12)


def test_every_setting_n_samples(result):
    m, s = result.metrics, result.samples
    assert list(zip(m.temperature, m.top_p, strict=True)) == [
        (0.6, 0.5),
        (0.6, 1.0),
        (1.4, 0.5),
        (1.4, 1.0),
    ]
    assert set(METRICS) <= set(m.columns)
    assert len(s) == 24 and s.groupby(["temperature", "top_p"]).size().eq(6).all()
    assert result.seconds > 0 and result.n == 6


def test_samples_are_one_seeded_batched_generate_per_setting(lm, result):
    for (t, p), part in result.samples.groupby(["temperature", "top_p"], sort=False):
        res = lm.generate(PROMPT, do_sample=True, temperature=t, top_p=p, seed=0,
                          num_return_sequences=6, max_new_tokens=12)  # fmt: skip
        for row, ids in zip(part.itertuples(), res.generated_ids.tolist(), strict=True):
            n = row.length
            assert row.token_ids == ids[:n]
            assert row.ended_with_eos == (3 in ids[:n])
            assert row.ended_with_eos or n == 12


def test_reproducible_and_seed_dependent(lm, result):
    again = genlab.sweep(lm, PROMPT, GRID, n=6, seed=0, max_new_tokens=12)
    assert again.samples.token_ids.tolist() == result.samples.token_ids.tolist()
    assert again.metrics.drop(columns=[]).equals(result.metrics)
    other = genlab.sweep(lm, PROMPT, GRID, n=6, seed=1, max_new_tokens=12)
    assert other.samples.token_ids.tolist() != result.samples.token_ids.tolist()


def test_metrics_recomputed_from_the_samples(lm, result):
    assert result.samples.ended_with_eos.any() and not result.samples.ended_with_eos.all()
    for (t, p), part in result.samples.groupby(["temperature", "top_p"], sort=False):
        row = result.metrics[(result.metrics.temperature == t) & (result.metrics.top_p == p)]
        row = row.iloc[0]
        toks = part.token_ids.tolist()
        assert row.distinct_1 == pytest.approx(distinct(toks, 1))
        assert row.distinct_2 == pytest.approx(distinct(toks, 2))
        assert row.length == pytest.approx(part.length.mean())
        assert row.eos_rate == pytest.approx(part.ended_with_eos.mean())
        assert row.repetition == pytest.approx(part.repetition.mean())
        # the raw model's log-prob of each sample, the prompt as context
        scored = lm.score(toks, context=PROMPT[0])
        assert part.mean_logprob.tolist() == pytest.approx(
            scored.summary.mean_logprob.tolist(), abs=1e-5
        )
        assert row.mean_logprob == pytest.approx(part.mean_logprob.mean())
    # hotter and wider sampling strays further from what the model finds likely
    m = result.metrics.set_index(["temperature", "top_p"])
    assert m.loc[(0.6, 0.5), "mean_logprob"] > m.loc[(1.4, 1.0), "mean_logprob"]


def test_distinct_and_repetition():
    assert distinct([[1, 2, 3], [1, 2, 4]], 1) == pytest.approx(4 / 6)
    assert distinct([[1, 2, 3], [1, 2, 4]], 2) == pytest.approx(3 / 4)
    assert distinct([[1]], 2) == 0.0
    assert repetition([1, 2, 1, 2, 1, 2]) == pytest.approx(3 / 5)
    assert repetition([1, 2, 3, 4]) == 0.0


def test_plot_is_legible(result, tmp_path):
    fig = genlab.plots.sweep_metrics(result)
    assert_legible(fig)
    assert len([ax for ax in fig.axes if ax.get_visible()]) == len(METRICS)
    fig = genlab.plots.sweep_metrics(result, metrics=["distinct_2"])
    assert fig.axes[0].get_title() == "distinct-2"
    with pytest.raises(ValueError, match="not sweep metrics"):
        genlab.plots.sweep_metrics(result, metrics=["speed"])
    assert "sweep" in result._repr_html_()


def test_errors_name_what_to_fix(lm):
    with pytest.raises(ValueError, match="'temprature' is not a GenerationConfig field"):
        genlab.sweep(lm, PROMPT, {"temprature": [0.5]})
    with pytest.raises(ValueError, match="grid\\['top_p'\\]: give at least one value"):
        genlab.sweep(lm, PROMPT, {"top_p": []})
    with pytest.raises(ValueError, match="given both in grid and as a setting"):
        genlab.sweep(lm, PROMPT, {"top_p": [0.5]}, top_p=0.9)
    with pytest.raises(ValueError, match="n=0"):
        genlab.sweep(lm, PROMPT, {"top_p": [0.5]}, n=0)
    with pytest.raises(ValueError, match="grid"):
        genlab.sweep(lm, PROMPT, [0.5])


def test_sweep_view_runs_the_typed_grid(lm):
    from genlab.widgets import SweepView

    view = SweepView(lm, PROMPT, {"temperature": [0.6, 1.4]}, n=3, max_new_tokens=5)
    assert view.error is None and len(view.result.metrics) == 2
    assert view.plot_image.value[:4] == b"\x89PNG" and view.progress.value == 2
    view.grid_boxes["temperature"].value = "0.5, 1, 2"
    view.n_box.value = "2"
    view.run_sweep()
    assert view.result.metrics.temperature.tolist() == [0.5, 1, 2] and view.result.n == 2
    assert len(view.setting_pick.options) == 3 and "<table" in view.samples_view.value
    view.setting_pick.value = view.setting_pick.options[2]
    assert "temperature=2" in view.samples_view.value
    view.grid_boxes["temperature"].value = " , "
    view.run_sweep()
    assert "type at least one value" in view.error and view.result.n == 2
