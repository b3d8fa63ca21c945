"""Watermarking: green lists, processors, detectors, tables and plots vs transformers 4.56.2."""

from __future__ import annotations

import math
from types import SimpleNamespace

import matplotlib
import numpy as np
import pandas as pd
import pytest
import torch
from matplotlib.figure import Figure
from transformers import LlamaConfig
from transformers import SynthIDTextWatermarkingConfig as HFSynthIDConfig
from transformers import WatermarkingConfig as HFWatermarkingConfig
from transformers.generation import WatermarkDetector as HFWatermarkDetector
from transformers.generation.logits_process import (
    SynthIDTextWatermarkLogitsProcessor as HFSynthIDProcessor,
)
from transformers.generation.logits_process import (
    WatermarkLogitsProcessor as HFWatermarkProcessor,
)

from genlab.models.base import ModelInfo
from genlab.plots import watermark as wplots
from genlab.watermark import (
    SynthIDTextWatermarkLogitsProcessor,
    WatermarkDetection,
    WatermarkDetector,
    WatermarkHTML,
    WatermarkLogitsProcessor,
    green_token_mask,
    greenlist,
    greenlist_mask,
    greenlist_table,
    p_value_approx,
    p_value_exact,
    synthid_eos_mask,
    synthid_gvalues,
    synthid_gvalues_table,
    synthid_scores,
    token_colours,
    watermark_html,
    watermark_processor,
)

matplotlib.use("Agg")

VOCAB = 300
SCHEMES = ["lefthash", "selfhash"]
KEYS = [15485863, 7, 2**40 + 3]


def wm_config(scheme="lefthash", width=1, key=15485863, ratio=0.25, bias=2.0):
    return dict(
        greenlist_ratio=ratio,
        bias=bias,
        hashing_key=key,
        seeding_scheme=scheme,
        context_width=width,
    )


def hf_processor(cfg, vocab=VOCAB):
    return HFWatermarkProcessor(vocab_size=vocab, device="cpu", **cfg)


def model_config(vocab=VOCAB, bos=1):
    return LlamaConfig(vocab_size=vocab, bos_token_id=bos, hidden_size=8, num_attention_heads=2)


def watermarked_ids(cfg, length=40, rows=2, vocab=VOCAB, seed=0, bos=1):
    """Greedy text under a strong bias: mostly green tokens."""
    gen = torch.Generator().manual_seed(seed)
    proc = WatermarkLogitsProcessor(vocab, "cpu", **{**cfg, "bias": 8.0})
    ids = torch.cat(
        [torch.full((rows, 1), bos), torch.randint(3, vocab, (rows, 3), generator=gen)], 1
    )
    while ids.shape[1] < length:
        scores = torch.randn(rows, vocab, generator=gen)
        ids = torch.cat([ids, proc(ids, scores).argmax(-1, keepdim=True)], 1)
    return ids


def random_ids(length=40, rows=2, vocab=VOCAB, seed=1, bos=1):
    gen = torch.Generator().manual_seed(seed)
    body = torch.randint(3, vocab, (rows, length - 1), generator=gen)
    return torch.cat([torch.full((rows, 1), bos), body], 1)


# ---------------------------------------------------------------------------------------
# green lists and the green-list processor
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("width", [1, 2, 4])
@pytest.mark.parametrize("key", KEYS)
def test_greenlist_is_the_references(scheme, width, key):
    cfg = wm_config(scheme, width, key, ratio=0.3)
    ref = hf_processor(cfg)
    gen = torch.Generator().manual_seed(width + key % 97)
    for _ in range(4):
        context = torch.randint(0, VOCAB, (6,), generator=gen)
        ours = greenlist(context, VOCAB, cfg)
        assert torch.equal(ours, ref._get_greenlist_ids(context))
        assert ours.shape == (int(VOCAB * 0.3),)
        mask = greenlist_mask(context, VOCAB, cfg)
        assert mask.sum() == ours.numel() and bool(mask[ours].all())


def test_lefthash_uses_only_the_last_token():
    cfg = wm_config("lefthash", width=3)
    a = greenlist(torch.tensor([4, 5, 6]), VOCAB, cfg)
    assert torch.equal(a, greenlist(torch.tensor([9, 9, 6]), VOCAB, cfg))
    assert not torch.equal(a, greenlist(torch.tensor([4, 5, 7]), VOCAB, cfg))
    sh = wm_config("selfhash", width=3)
    assert not torch.equal(greenlist([4, 5, 6], VOCAB, sh), greenlist([9, 9, 6], VOCAB, sh))


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("width", [1, 3])
def test_processor_output_is_the_references(scheme, width):
    cfg = wm_config(scheme, width, bias=1.75)
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(0, VOCAB, (3, 5), generator=gen)
    scores = torch.randn(3, VOCAB, generator=gen)
    scores[0, torch.randperm(VOCAB, generator=gen)[:200]] = -float("inf")  # as after top-k
    before = scores.clone()
    ours = WatermarkLogitsProcessor(VOCAB, "cpu", **cfg)(ids, scores)
    assert torch.equal(ours, hf_processor(cfg)(ids, scores))
    assert torch.equal(scores, before)  # never in place
    assert ours is not scores
    changed = (ours != scores) & torch.isfinite(scores)
    assert torch.allclose(ours[changed] - scores[changed], torch.tensor(1.75)) and changed.any()


def test_processor_skips_short_context_like_the_reference():
    cfg = wm_config("lefthash", width=4)
    ids, scores = torch.tensor([[5, 6]]), torch.randn(1, VOCAB)
    ours = WatermarkLogitsProcessor(VOCAB, "cpu", **cfg)(ids, scores)
    assert torch.equal(ours, scores) and torch.equal(hf_processor(cfg)(ids, scores), scores)


def test_selfhash_biases_only_top_candidates_in_their_own_list():
    cfg = wm_config("selfhash", width=2)
    proc = WatermarkLogitsProcessor(VOCAB, "cpu", **cfg)
    context, scores = torch.tensor([11, 12, 13]), torch.randn(VOCAB)
    ids = proc.green_ids(context, scores)
    top40 = set(scores.sort(descending=True).indices[:40].tolist())
    assert ids.numel() > 0 and set(ids.tolist()) <= top40
    for token in top40:
        own = greenlist(torch.cat([context, torch.tensor([token])]), VOCAB, cfg)
        assert (token in ids.tolist()) == bool((own == token).any())


def test_selfhash_with_no_green_candidate_leaves_scores_alone():
    # the reference raises IndexError when no candidate is green; genlab adds nothing
    cfg = wm_config("selfhash", ratio=0.004)  # one green token per list
    proc = WatermarkLogitsProcessor(VOCAB, "cpu", **cfg)
    gen = torch.Generator().manual_seed(0)  # seeded: the search below must not depend on
    for _ in range(20):  # the global random stream (it made this test flaky)
        scores = torch.randn(1, VOCAB, generator=gen)
        for last in range(VOCAB):
            if proc.green_ids(torch.tensor([last]), scores[0]).numel() == 0:
                assert torch.equal(proc(torch.tensor([[last]]), scores), scores)
                return
    raise AssertionError("expected a context without green candidates")


def test_processor_from_every_config_kind():
    from genlab.config import SynthIDTextWatermarkingConfig, WatermarkingConfig

    kinds = [
        WatermarkingConfig(bias=3.0, seeding_scheme="selfhash"),
        HFWatermarkingConfig(bias=3.0, seeding_scheme="selfhash"),
        {"bias": 3.0, "seeding_scheme": "selfhash"},
        SimpleNamespace(**wm_config("selfhash", bias=3.0)),
    ]
    ids, scores = torch.tensor([[4, 8, 15]]), torch.randn(1, VOCAB)
    expected = hf_processor(wm_config("selfhash", bias=3.0))(ids, scores)
    for cfg in kinds:
        proc = watermark_processor(cfg, vocab_size=VOCAB, device="cpu")
        assert isinstance(proc, WatermarkLogitsProcessor)
        assert torch.equal(proc(ids, scores), expected)
    for cfg in [
        SynthIDTextWatermarkingConfig(ngram_len=3, keys=[1, 2]),
        HFSynthIDConfig(ngram_len=3, keys=[1, 2]),
        {"ngram_len": 3, "keys": [1, 2]},
    ]:
        proc = watermark_processor(cfg, vocab_size=VOCAB, device="cpu")
        assert isinstance(proc, SynthIDTextWatermarkLogitsProcessor) and proc.ngram_len == 3


# ---------------------------------------------------------------------------------------
# SynthID
# ---------------------------------------------------------------------------------------

SYNTHID = dict(
    ngram_len=3,
    keys=[654, 400, 836, 123, 340],
    sampling_table_size=2**16,
    sampling_table_seed=0,
    context_history_size=6,
)


@pytest.mark.parametrize("skip_first", [False, True])
@pytest.mark.parametrize("debug", [False, True])
def test_synthid_processor_is_the_references_step_by_step(skip_first, debug):
    kw = dict(SYNTHID, device="cpu", skip_first_ngram_calls=skip_first, debug_mode=debug)
    ref, ours = HFSynthIDProcessor(**kw), SynthIDTextWatermarkLogitsProcessor(**kw)
    gen = torch.Generator().manual_seed(5)
    ids = torch.randint(0, 50, (2, 4), generator=gen)
    for _ in range(14):  # small alphabet: contexts repeat, so the history matters
        scores = torch.randn(2, 50, generator=gen)
        before = scores.clone()
        expected, got = ref(ids, scores), ours(ids, scores)
        assert torch.equal(got, expected)
        assert torch.equal(scores, before)
        ids = torch.cat([ids, torch.randint(0, 4, (2, 1), generator=gen)], 1)
    assert torch.equal(ours.state.context_history, ref.state.context_history)
    ours.reset()
    assert ours.state is None


def test_synthid_detector_helpers_are_the_references():
    kw = dict(SYNTHID, device="cpu")
    ref, ours = HFSynthIDProcessor(**kw), SynthIDTextWatermarkLogitsProcessor(**kw)
    ids = torch.randint(0, 6, (3, 40), generator=torch.Generator().manual_seed(2))
    ids[1, 20] = 9  # the only 9: an EOS mid-row
    g = ours.compute_g_values(ids)
    assert torch.equal(g, ref.compute_g_values(ids)) and g.shape == (3, 38, 5)
    assert torch.equal(synthid_gvalues(ids, SYNTHID), g)
    rep = ours.compute_context_repetition_mask(ids)
    assert torch.equal(rep, ref.compute_context_repetition_mask(ids).bool())
    assert not rep.all() and rep.any()
    eos = synthid_eos_mask(ids, 9)
    assert torch.equal(eos, ref.compute_eos_token_mask(ids, 9).bool())
    assert not eos[1, 20:].any() and eos[1, :20].all()


def _synthid_text(watermark: bool, length=160, vocab=100, seed=0):
    gen = torch.Generator().manual_seed(seed)
    proc = SynthIDTextWatermarkLogitsProcessor(**SYNTHID, device="cpu")
    ids = torch.randint(3, vocab, (1, 3), generator=gen)
    while ids.shape[1] < length:
        scores = 2 * torch.randn(1, vocab, generator=gen)
        if watermark:
            scores = proc(ids, scores)
        token = torch.multinomial(torch.softmax(scores, -1), 1, generator=gen)
        ids = torch.cat([ids, token], 1)
    return ids


def test_synthid_scores_separate_watermarked_text():
    marked = synthid_scores(_synthid_text(True), SYNTHID, vocab_size=100)
    plain = synthid_scores(_synthid_text(False), SYNTHID, vocab_size=100)
    assert marked["mean"].item() > 0.56 and abs(plain["mean"].item() - 0.5) < 0.06
    assert marked["weighted_mean"].item() > 0.56
    assert abs(plain["weighted_mean"].item() - 0.5) < 0.08


def test_synthid_score_formulas_by_hand():
    ids = _synthid_text(False, length=30, seed=4)
    g = synthid_gvalues(ids, SYNTHID).double()[0]  # (28, 5)
    mask = torch.ones(1, 28, dtype=torch.bool)
    mask[0, :10] = False
    out = synthid_scores(ids, SYNTHID, vocab_size=100, mask=mask)
    kept = g[10:]
    assert out["mean"].item() == pytest.approx(kept.mean().item(), abs=1e-12)
    w = torch.linspace(10, 1, 5, dtype=torch.float64)
    w = w * 5 / w.sum()
    assert out["weighted_mean"].item() == pytest.approx((kept * w).mean().item(), abs=1e-12)
    assert out["num_scored"].item() == 18
    # default mask: non-repeated contexts (and before EOS when eos_token_id is given)
    default = synthid_scores(ids, SYNTHID, vocab_size=100)
    assert (
        default["num_scored"].item()
        == SynthIDTextWatermarkLogitsProcessor(**SYNTHID, device="cpu")
        .compute_context_repetition_mask(ids)
        .sum()
        .item()
    )
    eos = int(ids[0, 15])
    cut = synthid_scores(ids, SYNTHID, vocab_size=100, eos_token_id=eos)
    assert cut["num_scored"].item() <= 15 - 2


def test_synthid_gvalues_table_columns_and_values():
    ids = _synthid_text(False, length=12, seed=6)
    table = synthid_gvalues_table(ids, SYNTHID, tokenizer=lambda i: f"t{i}")
    assert list(table.columns) == [
        "row",
        "position",
        "token_id",
        "token",
        "depth",
        "g_value",
        "scored",
    ]
    assert len(table) == 10 * 5 and table.position.min() == 2
    g = synthid_gvalues(ids, SYNTHID)[0]
    first = table[table.position == 2].sort_values("depth")
    assert first.g_value.tolist() == g[0].tolist()
    assert first.token.iloc[0] == f"t{int(ids[0, 2])}"


# ---------------------------------------------------------------------------------------
# detector
# ---------------------------------------------------------------------------------------

REFERENCE_FIELDS = "num_tokens_scored num_green_tokens green_fraction z_score p_value"
REFERENCE_FIELDS = (*REFERENCE_FIELDS.split(), "confidence", "prediction")
DETECTOR_CASES = [(s, w) for s in SCHEMES for w in (1, 2)]


@pytest.mark.parametrize("scheme,width", DETECTOR_CASES)
@pytest.mark.parametrize("ignore_repeated", [False, True])
def test_detector_numbers_are_the_references(scheme, width, ignore_repeated):
    cfg = wm_config(scheme, width)
    for ids in (watermarked_ids(cfg), random_ids()):
        ids = torch.cat([ids, ids[:, 5:12]], 1)  # repeated n-grams
        ref = HFWatermarkDetector(
            model_config(),
            "cpu",
            HFWatermarkingConfig(**cfg),
            ignore_repeated_ngrams=ignore_repeated,
        )(ids, return_dict=True)
        ours = WatermarkDetector(
            model_config(), "cpu", cfg, ignore_repeated_ngrams=ignore_repeated
        )(ids, return_dict=True)
        assert isinstance(ours, WatermarkDetection)
        for name in REFERENCE_FIELDS:
            np.testing.assert_array_equal(getattr(ours, name), getattr(ref, name), err_msg=name)
        assert ours.green_mask.shape == ids.shape
        assert torch.equal(ours.green_mask.sum(1).double(), torch.tensor(ours.num_green_tokens))


def test_detector_tells_watermarked_from_random():
    cfg = wm_config("lefthash")
    det = WatermarkDetector(model_config(), "cpu", cfg)
    assert det(watermarked_ids(cfg)).tolist() == [True, True]
    assert det(random_ids()).tolist() == [False, False]
    out = det(watermarked_ids(cfg), return_dict=True)
    assert (out.z_score > 4).all() and (out.green_fraction > 0.6).all()


def test_detector_model_config_kinds_and_bos():
    cfg = wm_config("selfhash", 2)
    ids = watermarked_ids(cfg, rows=1)
    configs = [
        model_config(),
        {"vocab_size": VOCAB, "bos_token_id": 1},
        ModelInfo(vocab_size=VOCAB, bos_token_id=1),
    ]
    outs = [WatermarkDetector(c, "cpu", cfg)(ids, return_dict=True) for c in configs]
    for out in outs[1:]:
        np.testing.assert_array_equal(out.z_score, outs[0].z_score)
    # the BOS at position 0 is dropped: neither scored nor green
    assert not outs[0].scored_mask[0, 0] and not outs[0].green_mask[0, 0]
    assert outs[0].scored_mask[0].sum() == ids.shape[1] - 1 - 1  # BOS, then width-1 context
    no_bos = WatermarkDetector({"vocab_size": VOCAB, "bos_token_id": 99}, "cpu", cfg)
    assert no_bos(ids, return_dict=True).num_tokens_scored[0] == ids.shape[1] - 1


def test_ignore_repeated_ngrams_dedupe_by_value():
    cfg = wm_config("lefthash")
    ids = torch.tensor([[1, 5, 7, 5, 7, 5, 7, 9]])  # bigrams 5-7 x3, 7-5 x2, 7-9
    det = WatermarkDetector(model_config(), "cpu", cfg, ignore_repeated_ngrams=True)
    assert det(ids, return_dict=True).num_tokens_scored.tolist() == [6.0]  # as the reference
    dedupe = WatermarkDetector(
        model_config(), "cpu", cfg, ignore_repeated_ngrams=True, dedupe_by_value=True
    )
    out = dedupe(ids, return_dict=True)
    assert out.num_tokens_scored.tolist() == [3.0]
    assert out.scored_mask[0].tolist() == [False, False, True, True, False, False, False, True]
    expected = sum(
        bool((greenlist([a], VOCAB, cfg) == b).any()) for a, b in [(5, 7), (7, 5), (7, 9)]
    )
    assert out.num_green_tokens.tolist() == [float(expected)]


def test_exact_p_value_beside_the_approximation():
    assert p_value_exact(0.0) == 0.5
    assert p_value_exact(1.6448536269514722) == pytest.approx(0.05, abs=1e-12)
    assert p_value_exact(3.0) == pytest.approx(0.0013498980316301, rel=1e-12)
    assert p_value_approx(3.0) == pytest.approx(0.5 * math.exp(-18 / math.pi), rel=1e-12)
    assert abs(p_value_approx(3.0) - p_value_exact(3.0)) > 1e-4  # they do differ
    cfg = wm_config()
    out = WatermarkDetector(model_config(), "cpu", cfg)(watermarked_ids(cfg), return_dict=True)
    expected = [0.5 * math.erfc(z / math.sqrt(2)) for z in out.z_score]
    np.testing.assert_allclose(out.p_value_exact, expected, rtol=1e-12)
    frame = out.to_frame()
    assert {"z_score", "p_value", "p_value_exact", "prediction"} <= set(frame.columns)
    assert len(frame) == 2


# ---------------------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,field,value",
    [
        ({"greenlist_ratio": 0.0}, "greenlist_ratio", "0.0"),
        ({"greenlist_ratio": 1.0}, "greenlist_ratio", "1.0"),
        ({"greenlist_ratio": -0.2}, "greenlist_ratio", "-0.2"),
        ({"seeding_scheme": "midhash"}, "seeding_scheme", "midhash"),
        ({"context_width": 0}, "context_width", "0"),
        ({"context_width": 1.5}, "context_width", "1.5"),
        ({"hashing_key": "key"}, "hashing_key", "key"),
    ],
)
def test_bad_green_list_settings(kwargs, field, value):
    with pytest.raises(ValueError, match=field) as err:
        WatermarkLogitsProcessor(VOCAB, "cpu", **kwargs)
    assert value in str(err.value)
    with pytest.raises(ValueError, match=field):
        greenlist([3], VOCAB, kwargs)
    with pytest.raises(ValueError, match=field):
        WatermarkDetector(model_config(), "cpu", kwargs)


@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"keys": []}, "keys"),
        ({"ngram_len": 1}, "ngram_len"),
        ({"sampling_table_size": 2**25}, "sampling_table_size"),
        ({"context_history_size": -1}, "context_history_size"),
        ({"keys": [1, "a"]}, "keys"),
    ],
)
def test_bad_synthid_settings(kwargs, field):
    with pytest.raises(ValueError, match=field):
        SynthIDTextWatermarkLogitsProcessor(**{**SYNTHID, **kwargs}, device="cpu")


def test_vocabulary_mismatch_and_other_bad_input():
    proc = WatermarkLogitsProcessor(VOCAB, "cpu")
    with pytest.raises(ValueError, match=f"vocab_size={VOCAB}"):
        proc(torch.tensor([[1, 2]]), torch.randn(1, VOCAB - 10))
    det = WatermarkDetector({"vocab_size": 50, "bos_token_id": 1}, "cpu", {})
    with pytest.raises(ValueError, match=r"token id 120.*\[0, 50\)"):
        det(torch.tensor([[1, 3, 120, 4]]))
    with pytest.raises(ValueError, match="context_width"):
        det(torch.tensor([[1, 3]]))
    with pytest.raises(ValueError, match="vocab_size"):
        WatermarkDetector({"bos_token_id": 1}, "cpu", {})
    with pytest.raises(ValueError, match="unknown WatermarkingConfig field"):
        greenlist([3], VOCAB, {"bias": 1.0, "greenlist_ration": 0.5})
    with pytest.raises(ValueError, match="vocab_size"):
        greenlist([3], 0, {})
    with pytest.raises(ValueError, match="vocab_size"):
        token_colours([1, 2, 3], {})
    with pytest.raises(ValueError, match="token id"):
        synthid_scores([1, 2, 300], {"ngram_len": 2, "keys": [1]}, vocab_size=100)


# ---------------------------------------------------------------------------------------
# tables and HTML
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", SCHEMES)
def test_greenlist_table(scheme):
    cfg = wm_config(scheme, bias=2.5)
    context = torch.tensor([7, 8, 9])
    scores = torch.randn(VOCAB, generator=torch.Generator().manual_seed(9))
    table = greenlist_table(context, scores, cfg, tokenizer=lambda i: f"<{i}>")
    assert list(table.columns) == [
        "token",
        "id",
        "green",
        "logit_before",
        "logit_after",
        "prob_before",
        "prob_after",
    ]
    assert len(table) == VOCAB and table.logit_before.is_monotonic_decreasing
    after = hf_processor(cfg)(context[None], scores[None])[0].double().numpy()
    np.testing.assert_array_equal(table.sort_values("id").logit_after.to_numpy(), after)
    delta = table.logit_after - table.logit_before
    assert np.allclose(delta[table.green], 2.5) and np.allclose(delta[~table.green], 0)
    assert table.prob_before.sum() == pytest.approx(1) and table.prob_after.sum() == pytest.approx(
        1
    )
    if scheme == "lefthash":
        assert set(table.id[table.green]) == set(greenlist(context, VOCAB, cfg).tolist())
    assert table.token.iloc[0] == f"<{table.id.iloc[0]}>"
    assert len(greenlist_table(context, scores, cfg, top=5)) == 5


@pytest.mark.parametrize("scheme", SCHEMES)
def test_token_colours_agree_with_the_detector(scheme):
    cfg = wm_config(scheme, 2)
    ids = watermarked_ids(cfg, rows=1, length=30)
    det = WatermarkDetector(model_config(), "cpu", cfg)
    out = det(ids, return_dict=True)
    table = token_colours(ids[0], det)
    assert list(table.columns) == [
        "position",
        "id",
        "token",
        "scored",
        "green",
        "num_scored",
        "num_green",
        "running_z",
    ]
    assert table.green.tolist() == out.green_mask[0].tolist()
    assert table.scored.tolist() == out.scored_mask[0].tolist()
    assert table.running_z.iloc[-1] == pytest.approx(out.z_score[0], rel=1e-12)
    assert np.isnan(table.running_z.iloc[0])
    same = token_colours(ids, cfg, vocab_size=VOCAB, bos_token_id=1)
    pd.testing.assert_frame_equal(same, table)
    green, scored = green_token_mask(ids[0, 1:], VOCAB, cfg)
    assert green.tolist() == table.green.tolist()[1:]


def test_watermark_html_marks_each_token():
    cfg = wm_config()
    ids = watermarked_ids(cfg, rows=1, length=20)[0]
    table = token_colours(ids, cfg, vocab_size=VOCAB, bos_token_id=1)
    page = watermark_html(ids, cfg, lambda i: f"<{i}>", vocab_size=VOCAB, bos_token_id=1)
    assert isinstance(page, WatermarkHTML) and page._repr_html_() == page.html
    assert page.html.count('class="wm-green"') == int(table.green.sum())
    assert page.html.count('class="wm-red"') == int((table.scored & ~table.green).sum())
    assert page.html.count('class="wm-unscored"') == 2  # BOS + first token (no context yet)
    assert "&lt;" in page.html and "<1>" not in page.html  # token text is escaped
    assert watermark_html(table).html.count("<span") == len(ids)


# ---------------------------------------------------------------------------------------
# plots (Agg)
# ---------------------------------------------------------------------------------------


def _check_png(fig: Figure, name: str):
    assert isinstance(fig, Figure)
    path = f"/tmp/genlab_watermark_{name}.png"
    fig.savefig(path, dpi=80)
    with open(path, "rb") as fh:
        assert fh.read(8) == b"\x89PNG\r\n\x1a\n"


def _colour_table():
    cfg = wm_config()
    # watermarked first half, unwatermarked second half: z rises, then falls
    ids = torch.cat([watermarked_ids(cfg, rows=1, length=26)[0], random_ids(22, rows=1)[0, 1:]])
    return token_colours(ids, cfg, lambda i: f"w{i}", vocab_size=VOCAB, bos_token_id=1)


def test_green_red_tokens_figure():
    table = _colour_table()
    fig = wplots.green_red_tokens(table, width=50)
    texts = [t for t in fig.axes[0].texts]
    assert len(texts) == len(table)
    green_rgb = matplotlib.colors.to_rgb(wplots.LIGHT["green"])
    greens = sum(t.get_bbox_patch().get_facecolor()[:3] == green_rgb for t in texts)
    assert greens == int(table.green.sum())
    _check_png(fig, "green_red_tokens")


def test_running_z_figure():
    table = _colour_table()
    fig = wplots.running_z(table, z_threshold=4.0)
    ax = fig.axes[0]
    x, y = ax.lines[0].get_data()
    np.testing.assert_allclose(y, table.running_z[table.scored])
    assert [line.get_ydata()[0] for line in ax.lines[1:]] == [4.0, 0.0]
    _check_png(fig, "running_z")


def test_greenlist_bars_figure():
    cfg = wm_config(bias=3.0)
    scores = 2 * torch.randn(VOCAB, generator=torch.Generator().manual_seed(1))
    table = greenlist_table([5], scores, cfg, tokenizer=lambda i: f"w{i}")
    fig = wplots.greenlist_bars(table, top=12)
    bars = fig.axes[0].patches
    assert len(bars) == 24
    heights = [b.get_height() for b in bars]
    np.testing.assert_allclose(heights[:12], table.prob_before.head(12))
    np.testing.assert_allclose(heights[12:], table.prob_after.head(12))
    _check_png(fig, "greenlist_bars")


def test_synthid_heatmap_figure():
    ids = _synthid_text(True, length=40)
    table = synthid_gvalues_table(ids, SYNTHID, tokenizer=lambda i: f"w{i}")
    fig = wplots.synthid_gvalues_heatmap(table)
    image = fig.axes[0].images[0].get_array()
    assert image.shape == (5, 38)
    np.testing.assert_array_equal(np.asarray(image), synthid_gvalues(ids, SYNTHID)[0].T.numpy())
    _check_png(fig, "synthid_heatmap")
    with pytest.raises(ValueError, match="row"):
        wplots.synthid_gvalues_heatmap(table, row=3)
    with pytest.raises(ValueError, match="synthid_gvalues_table"):
        wplots.synthid_gvalues_heatmap(table.drop(columns="depth"))


# ---------------------------------------------------------------------------------------
# end to end: genlab.generate vs transformers generate on a tiny random Llama
# ---------------------------------------------------------------------------------------

E2E_CASES = [
    ("lefthash", False),
    ("lefthash", True),
    ("selfhash", False),
    ("selfhash", True),
    ("synthid", False),
    ("synthid", True),
]


def _e2e_configs(kind):
    from genlab.config import SynthIDTextWatermarkingConfig, WatermarkingConfig

    if kind == "synthid":
        kw = dict(ngram_len=3, keys=[3, 5, 7], context_history_size=16)
        return HFSynthIDConfig(**kw), SynthIDTextWatermarkingConfig(**kw)
    kw = dict(seeding_scheme=kind, context_width=2 if kind == "selfhash" else 1, bias=3.0)
    return HFWatermarkingConfig(**kw), WatermarkingConfig(**kw)


@pytest.mark.parametrize("kind,do_sample", E2E_CASES)
def test_generate_with_watermark_matches_transformers(hf_llama, kind, do_sample):
    import genlab

    hf_config, our_config = _e2e_configs(kind)
    prompt = torch.tensor([[1, 5, 9, 33, 17]])
    kw = dict(max_new_tokens=10, do_sample=do_sample, output_scores=True, pad_token_id=0)
    kw.update(return_dict_in_generate=True, top_k=20 if do_sample else None)
    torch.manual_seed(7)
    ref = hf_llama.generate(prompt, watermarking_config=hf_config, **kw)
    torch.manual_seed(7)
    ours = genlab.generate(hf_llama, input_ids=prompt, watermarking_config=our_config, **kw)
    torch.manual_seed(7)
    plain = hf_llama.generate(prompt, **kw)
    assert torch.equal(ours.sequences, ref.sequences)
    assert len(ours.scores) == len(ref.scores) == ref.sequences.shape[1] - prompt.shape[1]
    for a, b in zip(ours.scores, ref.scores, strict=True):
        assert torch.equal(torch.isinf(a), torch.isinf(b))
        torch.testing.assert_close(a[torch.isfinite(b)], b[torch.isfinite(b)], atol=1e-4, rtol=0)
    # the watermark did act: the first step's scores differ from unwatermarked ones
    assert not torch.equal(ref.scores[0], plain.scores[0])
