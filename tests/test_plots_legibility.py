"""Every public plot function, drawn on realistic inputs, writes no text smaller than 9 px
as shown in a 1000 px wide notebook output:

    font size (pt) * dpi / 72 * min(1, 1000 / figure width in px) >= 9

and draws no candidate of probability 0 while always drawing the chosen token. Inputs
come from hand-written TableLMs (instant) with realistic shapes: a 7-stage waterfall,
12-step x 4-beam and 30-step x 8-beam trees, a diverse beam search, 60-token watermark
texts."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.text import Text

import genlab
from genlab.config import WatermarkingConfig
from genlab.models.table import TableLM
from genlab.plots import beam, strategies, tokens, watermark
from genlab.watermark import greenlist_table, synthid_gvalues_table, token_colours

DPI = 100
MIN_PX = 9.0
WORDS = [f"w{i}" for i in range(40)] + ["the", "dog", "said", "$5", "cat"]


def text_heights(fig, dpi: int = DPI) -> list[tuple[float, str]]:
    """(height in px as shown in a 1000 px output, text) of every visible text."""
    FigureCanvasAgg(fig)
    fig.canvas.draw()
    width_px = fig.get_figwidth() * dpi
    scale = min(1.0, 1000.0 / width_px)
    out = []
    for t in fig.findobj(Text):
        if not t.get_visible() or not t.get_text().strip():
            continue
        out.append((t.get_fontsize() * dpi / 72 * scale, t.get_text()))
    return out


def smallest(fig) -> tuple[float, str]:
    return min(text_heights(fig))


def assert_legible(fig, what: str) -> float:
    px, text = smallest(fig)
    assert px >= MIN_PX, f"{what}: {text!r} is {px:.1f} px tall (< {MIN_PX} px)"
    return px


@pytest.fixture(scope="module")
def zipf():
    """45 words, Zipf-like probabilities after any prefix; EOS rare."""
    weights = 1.0 / np.arange(1, len(WORDS) + 1)
    row = {w: float(p) for w, p in zip(WORDS, weights / weights.sum() * 0.98, strict=True)}
    row["<eos>"] = 0.02
    return genlab.LM(TableLM({"": row}, fallback=row))


@pytest.fixture(scope="module")
def seven_stages(zipf):
    run = zipf.start("the dog", do_sample=True, repetition_penalty=1.3, no_repeat_ngram_size=3,
                     temperature=0.7, top_k=20, top_p=0.9, min_p=0.01, seed=0, trace=True,
                     max_new_tokens=12)  # fmt: skip
    run.run()
    return run.tracer.trace


def beam_trace(lm, beams: int, steps: int, **kw):
    out = lm.generate("the dog", num_beams=beams, max_new_tokens=steps, min_new_tokens=steps,
                      trace=True, **kw)  # fmt: skip
    return out.trace


def test_waterfall_reads_at_seven_stages(seven_stages):
    assert len(seven_stages.stages()) == 8  # raw, 6 processors, final
    fig = tokens.waterfall(seven_stages, 3)
    assert_legible(fig, "waterfall")
    titles = " ".join(ax.get_title(loc="left") for ax in fig.axes)
    for name in ("repetition_penalty", "no_repeat_ngram", "temperature", "top_k", "top_p", "min_p"):
        assert name in titles  # full stage names, not cut


def test_token_figures_are_legible(seven_stages, zipf):
    assert_legible(tokens.token_probs(seven_stages), "token_probs")
    assert_legible(tokens.topk_bars(seven_stages, 2), "topk_bars")
    a = zipf.generate("the dog", max_new_tokens=30, trace=True)
    b = zipf.generate("the dog", max_new_tokens=30, do_sample=True, seed=1, trace=True)
    assert_legible(tokens.compare_logprobs([a, b], ["greedy", "sampled"]), "compare_logprobs")


def test_long_text_probs_stay_within_the_width(zipf):
    res = zipf.generate("the dog", max_new_tokens=120, min_new_tokens=120, trace=True)
    fig = tokens.token_probs(res.trace)
    assert fig.get_figwidth() * DPI <= 1000
    assert_legible(fig, "token_probs, 120 tokens")


def test_no_zero_probability_candidates_and_the_chosen_one_always(zipf):
    run = zipf.start("the dog", do_sample=True, top_k=3, seed=0, trace=True, max_new_tokens=4)
    run.step()
    run.force("w30")  # far outside the top 3: probability 0 after top-k
    run.step()
    trace = run.tracer.trace
    for fig in (tokens.topk_bars(trace, 1, k=10), tokens.waterfall(trace, 1, k=10)):
        final = fig.axes[-1] if len(fig.axes) > 1 else fig.axes[0]
        if len(fig.axes) > 1:  # the waterfall: the last drawn panel is "final"
            final = [ax for ax in fig.axes if "final" in ax.get_title(loc="left")][0]
        labels = [t.get_text() for t in final.get_yticklabels()]
        assert "w30" in labels  # the forced token is drawn ...
        widths = [p.get_width() for p in final.patches]
        assert sum(w == 0 for w in widths) == 1  # ... and it is the only p = 0 bar
        assert len(labels) == 4  # 3 still possible + the forced one


def test_tokens_are_labelled_as_decoded_text(seven_stages):
    assert tokens.label(" said") == "\u2423said"  # genlab.text.tokens.show_token's rule
    assert tokens.label("\n") == "\u21b5" and tokens.label("$5") == r"\$5"
    fig = tokens.topk_bars(seven_stages, 0)
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    expected = tokens.candidates(seven_stages, 0).token
    assert labels == [tokens.label(t) for t in expected]
    assert not any(lab.startswith(("'", "\u0120")) for lab in labels)  # no repr, no Ġ


@pytest.mark.parametrize("beams,steps", [(4, 12), (8, 30)])
def test_beam_tree_reads_at_size(zipf, beams, steps):
    trace = beam_trace(zipf, beams, steps)
    fig = beam.beam_tree(trace)
    assert fig.get_figwidth() * DPI <= 1000  # wraps into bands instead of shrinking
    px = assert_legible(fig, f"beam tree {steps}x{beams}")
    assert px >= 10
    texts = " ".join(t for _, t in text_heights(fig))
    assert "length_penalty" in texts  # the score in the boxes is explained


def test_beam_tree_labels_eos_and_shades_groups(zipf):
    trace = beam_trace(zipf, 4, 8, num_beam_groups=2, diversity_penalty=1.0)
    fig = beam.beam_tree(trace)
    assert_legible(fig, "diverse beam tree")
    labels = [h.get_label() for h in fig.axes[0].get_legend().legend_handles]
    assert "group 0" in labels and "group 1" in labels
    shades = {p.get_facecolor() for ax in fig.axes for p in ax.patches}
    assert len(shades) >= 2
    classic = genlab.LM(TableLM.classic())  # every 3-word sentence ends
    ended = classic.generate("The", num_beams=2, max_new_tokens=5, trace=True)
    texts = [t for _, t in text_heights(beam.beam_tree(ended.trace))]
    assert any(t.startswith(beam.EOS_LABEL) for t in texts)
    assert not any("<eos>" in t for t in texts)


def test_watermark_figures_are_legible(zipf):
    cfg = WatermarkingConfig()
    res = zipf.generate("the dog", max_new_tokens=60, do_sample=True, seed=0,
                        watermarking_config=cfg)  # fmt: skip
    colours = token_colours(res.sequences[0], cfg, zipf.tokenizer, vocab_size=zipf.info.vocab_size)
    assert_legible(watermark.green_red_tokens(colours), "green_red_tokens")
    assert_legible(watermark.running_z(colours), "running_z")
    scores = torch.randn(zipf.info.vocab_size)
    table = greenlist_table(res.sequences[0, :5], scores, cfg, tokenizer=zipf.tokenizer, top=20)
    assert_legible(watermark.greenlist_bars(table), "greenlist_bars")
    synth = {"ngram_len": 3, "keys": [654, 400, 836, 123, 340, 443, 597, 160, 57, 29]}
    ids = torch.randint(
        5, zipf.info.vocab_size, (1, 120), generator=torch.Generator().manual_seed(0)
    )
    g = synthid_gvalues_table(ids, synth, tokenizer=zipf.tokenizer)
    assert_legible(watermark.synthid_gvalues_heatmap(g), "synthid_gvalues_heatmap")


def test_assisted_figures_are_legible():
    table = pd.DataFrame(
        {
            "step": range(30),
            "n_drafted": [5] * 30,
            "n_accepted": [i % 6 for i in range(30)],
            "num_assistant_tokens": [5 + i % 3 for i in range(30)],
        }
    )
    assert_legible(strategies.acceptance_plot(table), "acceptance_plot")
    cands = pd.DataFrame(
        {
            "step": 0,
            "row": 0,
            "token_id": range(6),
            "token": [" the", " dog", "\n", " said", " a", " cat"],
            "confidence": np.linspace(0.5, 0.1, 6),
            "penalty": np.linspace(0.2, 0.9, 6),
            "score": np.linspace(0.3, -0.2, 6),
            "chosen": [True] + [False] * 5,
        }
    )
    assert_legible(strategies.contrastive_plot(cands), "contrastive_plot")


def test_legends_stay_outside_the_data(zipf):
    """Legends of bar and line charts sit outside the axes (they never cover data)."""
    table = pd.DataFrame({"step": range(8), "n_drafted": [5] * 8, "n_accepted": [5] * 8,
                          "num_assistant_tokens": [5] * 8})  # fmt: skip
    fig = strategies.acceptance_plot(table)
    FigureCanvasAgg(fig)
    fig.canvas.draw()
    ax = fig.axes[0]
    legend = ax.get_legend().get_window_extent()
    assert legend.x0 >= ax.get_window_extent().x1 - 1
