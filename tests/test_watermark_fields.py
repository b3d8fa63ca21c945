"""Every watermark setting is declared once, in the field table, and the config's
``validate()`` and the processors accept and refuse the same values; the detector and the
SynthID scores refuse what they cannot score; SynthID keys as any sequence of ints.

The property tests are bounded: 150 examples each, derandomized, no deadline. Each example
has valid values in every field but up to two, drawn from anything (bounds, wrong kinds,
int64 edges), so a refusal is the drawn field's; an extra rule in a processor alone fails
them (checked by hand: ratio > 0.9, context_width > 4, bias < 0, ngram_len > 5, ...).
"""

from __future__ import annotations

import inspect
from dataclasses import fields

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers.generation.logits_process import (
    SynthIDTextWatermarkLogitsProcessor as HFSynthIDProcessor,
)

from genlab.config import (
    SYNTHID_FIELDS,
    WATERMARK_FIELDS,
    GenerationConfig,
    SynthIDTextWatermarkingConfig,
    WatermarkingConfig,
)
from genlab.watermark import (
    GreenlistParams,
    SynthIDParams,
    SynthIDTextWatermarkLogitsProcessor,
    WatermarkDetector,
    WatermarkLogitsProcessor,
    synthid_scores,
    watermark_processor,
)

VOCAB = 50
PROPERTY = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

# values around every bound and of every wrong kind, for any field
INT64 = 2**63
ODD_VALUES = st.sampled_from(
    [None, True, False, "1", 0.5, float("nan"), float("inf"), [], [1], -1, 0, 1, 2]
)
BIG_INTS = st.sampled_from([-INT64 - 1, -INT64, INT64 - 1, INT64, 2**64 - 1, 2**64])


def _number(spec):
    """Values near the spec's own bounds plus small and odd ones."""
    near = [v for b in (spec.min, spec.max) if b is not None for v in (b - 1, b, b + 1)]
    floats = st.floats(min_value=-3, max_value=3)  # NaN and inf are in ODD_VALUES
    ints = st.integers(min_value=-5, max_value=5000)
    return st.one_of(st.sampled_from(near or [0]), floats, ints, ODD_VALUES, BIG_INTS)


# every field: (values that are valid, any value at all)
GREENLIST_VALUES = {
    "greenlist_ratio": (
        st.floats(min_value=0.01, max_value=0.99),
        _number(WATERMARK_FIELDS["greenlist_ratio"]),
    ),
    "bias": (st.floats(min_value=-10, max_value=10), _number(WATERMARK_FIELDS["bias"])),
    "hashing_key": (
        st.integers(min_value=-INT64, max_value=INT64 - 1),
        _number(WATERMARK_FIELDS["hashing_key"]),
    ),
    "seeding_scheme": (
        st.sampled_from(["lefthash", "selfhash"]),
        st.sampled_from(["lefthash", "selfhash", "midhash", "", None, 1]),
    ),
    "context_width": (
        st.integers(min_value=1, max_value=8),
        _number(WATERMARK_FIELDS["context_width"]),
    ),
}

VALID_KEYS = st.lists(st.integers(min_value=0, max_value=INT64 - 1), min_size=1, max_size=4)
KEYS = st.one_of(
    st.lists(st.integers(min_value=-(2**65), max_value=2**65), max_size=4),
    st.lists(st.integers(min_value=0, max_value=999), min_size=1, max_size=4).map(tuple),
    st.lists(st.integers(min_value=0, max_value=999), min_size=1, max_size=4).map(np.array),
    st.lists(st.integers(min_value=0, max_value=999), min_size=1, max_size=4).map(torch.tensor),
    st.sampled_from([[1.5], ["a"], "12", 7, None, [True], np.array([0.5])]),
)
FLAGS = st.sampled_from([True, False, 0, 1, None, "yes"])
SYNTHID_VALUES = {
    "ngram_len": (st.integers(min_value=2, max_value=8), _number(SYNTHID_FIELDS["ngram_len"])),
    "keys": (VALID_KEYS, KEYS),
    "context_history_size": (
        st.integers(min_value=0, max_value=2048),
        _number(SYNTHID_FIELDS["context_history_size"]),
    ),
    "sampling_table_seed": (
        st.integers(min_value=-INT64, max_value=2**64 - 1),
        _number(SYNTHID_FIELDS["sampling_table_seed"]),
    ),
    # the table is allocated: valid sizes stay small, the upper bound is probed from above
    "sampling_table_size": (
        st.integers(min_value=1, max_value=4096),
        st.one_of(
            st.integers(min_value=-2, max_value=4096),
            st.sampled_from([2**24 + 1, 2**25, 1.0, None, True]),
        ),
    ),
    "skip_first_ngram_calls": (st.booleans(), FLAGS),
    "debug_mode": (st.booleans(), FLAGS),
}


@st.composite
def settings_dicts(draw, table):
    """Valid values for every field, then up to two fields (of any) replaced by any value:
    each example probes a field while the others are valid, so a refusal is that field's."""
    values = {name: draw(valid) for name, (valid, _) in table.items()}
    for name in draw(st.lists(st.sampled_from(sorted(table)), max_size=2, unique=True)):
        values[name] = draw(table[name][1])
    return values


def _accepts(fn) -> bool:
    try:
        fn()
    except ValueError:
        return False
    return True


def test_the_drawn_fields_are_the_table():
    assert set(GREENLIST_VALUES) == set(WATERMARK_FIELDS)
    assert set(SYNTHID_VALUES) == set(SYNTHID_FIELDS)


def test_every_default_is_the_tables():
    """The configs, the params and the processors' keyword defaults all come from the
    table: one declaration per setting."""
    for cls in (WatermarkingConfig, GreenlistParams):
        assert [f.name for f in fields(cls)] == list(WATERMARK_FIELDS)
        for f in fields(cls):
            assert f.default == WATERMARK_FIELDS[f.name].default, (cls, f.name)
    for cls in (SynthIDTextWatermarkingConfig, SynthIDParams):
        assert [f.name for f in fields(cls)] == list(SYNTHID_FIELDS)
        for f in fields(cls):
            if SYNTHID_FIELDS[f.name].default is not None:
                assert f.default == SYNTHID_FIELDS[f.name].default, (cls, f.name)
    for proc, specs in (
        (WatermarkLogitsProcessor, WATERMARK_FIELDS),
        (SynthIDTextWatermarkLogitsProcessor, SYNTHID_FIELDS),
    ):
        params = inspect.signature(proc).parameters
        for name, spec in specs.items():
            default = params[name].default
            if default is not inspect.Parameter.empty:
                assert default == spec.default, (proc.__name__, name)


def assert_all_agree(values, config_class, make_processor):
    """The small config's validate(), GenerationConfig, the processor and
    watermark_processor all accept ``values``, or all refuse them."""
    verdicts = {
        "validate": _accepts(config_class(**values).validate),
        "GenerationConfig": _accepts(lambda: GenerationConfig(watermarking_config=dict(values))),
        "processor": _accepts(lambda: make_processor(values)),
        "watermark_processor": _accepts(lambda: watermark_processor(values, vocab_size=VOCAB)),
    }
    assert len(set(verdicts.values())) == 1, (values, verdicts)


def test_the_panel_controls_are_built_from_the_same_specs():
    """The ConfigPanel's watermark editor reads the very specs validate() checks."""
    from genlab.config import FIELDS
    from genlab.widgets.fields import make_control

    control = make_control(FIELDS["watermarking_config"], None)
    for scheme, specs in (("greenlist", WATERMARK_FIELDS), ("synthid", SYNTHID_FIELDS)):
        assert list(control.sub[scheme]) == list(specs)
        for name, sub in control.sub[scheme].items():
            assert sub.spec is specs[name], (scheme, name)


@PROPERTY
@given(settings_dicts(GREENLIST_VALUES))
def test_greenlist_validate_and_processor_agree(values):
    assert_all_agree(
        values, WatermarkingConfig, lambda v: WatermarkLogitsProcessor(VOCAB, "cpu", **v)
    )


@PROPERTY
@given(settings_dicts(SYNTHID_VALUES))
def test_synthid_validate_and_processor_agree(values):
    assert_all_agree(
        values,
        SynthIDTextWatermarkingConfig,
        lambda v: SynthIDTextWatermarkLogitsProcessor(**v, device="cpu"),
    )


@pytest.mark.parametrize(
    "values,field",
    [
        ({"greenlist_ratio": 1.0}, "greenlist_ratio"),
        ({"greenlist_ratio": 0.0}, "greenlist_ratio"),
        ({"hashing_key": 2**63}, "hashing_key"),
    ],
)
def test_the_old_disagreements_are_refused_by_both(values, field):
    """greenlist_ratio=1.0 used to pass validate() and fail in the processor."""
    with pytest.raises(ValueError, match=field):
        GenerationConfig(watermarking_config=values)
    with pytest.raises(ValueError, match=field):
        WatermarkLogitsProcessor(VOCAB, "cpu", **values)


def test_synthid_ngram_len_one_is_refused_by_both():
    values = {"ngram_len": 1, "keys": [3, 4]}
    with pytest.raises(ValueError, match="ngram_len"):
        GenerationConfig(watermarking_config=values)
    with pytest.raises(ValueError, match="ngram_len"):
        watermark_processor(values, vocab_size=VOCAB)


# ---------------------------------------------------------------------------------------
# issue 24, item 17: SynthID keys as any sequence of ints, as the reference takes them
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "keys", [np.array([654, 400, 836]), (654, 400, 836), torch.tensor([654, 400, 836])]
)
def test_synthid_keys_as_any_sequence_match_the_reference(keys):
    kw = dict(ngram_len=3, sampling_table_size=2**10, sampling_table_seed=0)
    kw.update(context_history_size=4)
    ours = SynthIDTextWatermarkLogitsProcessor(keys=keys, device="cpu", **kw)
    ref = HFSynthIDProcessor(keys=np.array([654, 400, 836]), device="cpu", **kw)
    assert ours.params.keys == (654, 400, 836)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, VOCAB, (2, 4), generator=gen)
    for _ in range(4):
        scores = torch.randn(2, VOCAB, generator=gen)
        torch.testing.assert_close(ours(ids, scores), ref(ids, scores))
        ids = torch.cat([ids, torch.randint(0, VOCAB, (2, 1), generator=gen)], dim=1)
    config = SynthIDTextWatermarkingConfig(ngram_len=3, keys=keys)
    GenerationConfig(watermarking_config=config)  # validates
    assert config.keys == [654, 400, 836]


# ---------------------------------------------------------------------------------------
# issue 24, item 16: the detector refuses what it cannot score, never NaN
# ---------------------------------------------------------------------------------------


def _detector(**kw):
    return WatermarkDetector({"vocab_size": VOCAB, "bos_token_id": 1}, "cpu", {}, **kw)


@pytest.mark.parametrize("score_from", [5, 6, 100])
def test_detector_refuses_score_from_at_or_past_the_end(score_from):
    ids = torch.tensor([[1, 5, 6, 7, 8]])
    with pytest.raises(ValueError, match=rf"score_from={score_from} .*5 tokens"):
        _detector()(ids, return_dict=True, score_from=score_from)
    with pytest.raises(ValueError, match="score_from"):
        _detector()(ids, score_from=score_from)  # the plain prediction too


def test_detector_scores_the_last_token_and_refuses_bad_score_from_types():
    out = _detector()(torch.tensor([[1, 5, 6, 7, 8]]), return_dict=True, score_from=4)
    assert out.num_tokens_scored.tolist() == [1.0]
    assert np.isfinite(out.z_score).all() and np.isfinite(out.p_value).all()
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="score_from"):
            _detector()(torch.tensor([[1, 5, 6, 7, 8]]), score_from=bad)


def test_detector_refuses_a_row_whose_only_scored_ngram_is_a_repeat():
    # n-grams (5, 6), (6, 5), (5, 6): with dedupe the last one is not scored
    det = _detector(ignore_repeated_ngrams=True, dedupe_by_value=True)
    ids = torch.tensor([[1, 5, 6, 5, 6]])
    assert det(ids, return_dict=True).num_tokens_scored.tolist() == [2.0]
    with pytest.raises(ValueError, match=r"row\(s\) \[0\] have no token to score"):
        det(ids, return_dict=True, score_from=4)


def test_synthid_scores_refuse_a_row_with_nothing_scored():
    config = {"ngram_len": 2, "keys": [3, 4]}
    ids = [[5, 6, 7, 8], [2, 6, 7, 8]]  # the second row starts with EOS
    with pytest.raises(ValueError, match=r"row\(s\) \[1\] have no n-gram to score"):
        synthid_scores(ids, config, vocab_size=VOCAB, eos_token_id=2)
    with pytest.raises(ValueError, match="not all zero"):
        synthid_scores(ids[:1], config, vocab_size=VOCAB, weights=[0.0, 0.0])
    out = synthid_scores(ids[:1], config, vocab_size=VOCAB, eos_token_id=2)
    assert torch.isfinite(out["mean"]).all() and out["num_scored"].tolist() == [3.0]
