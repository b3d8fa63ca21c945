"""genlab.processors against transformers 4.56.2's processors: the same constructor
arguments give the same outputs bit for bit (-inf where the reference has -inf) on
hand-made and random tensors, the input is never modified, bad arguments raise ValueError
naming the field, and build_processors assembles the reference's list in its order."""

from __future__ import annotations

import sys
import types
import warnings

import pytest
import torch
import transformers.generation.logits_process as hf
from transformers import GenerationConfig

import genlab.processors as gp
from genlab.processors import LogitsProcessorList, build_processors

VOCAB = 32
ROWS = 4


def assert_identical(ours: torch.Tensor, ref: torch.Tensor) -> None:
    """Same shape, dtype, NaN positions, and every other value bit for bit (inf included)."""
    assert ours.shape == ref.shape and ours.dtype == ref.dtype
    assert torch.equal(ours.isnan(), ref.isnan())
    assert torch.equal(ours.isinf(), ref.isinf())
    assert torch.equal(torch.where(ours.isnan(), 0.0, ours), torch.where(ref.isnan(), 0.0, ref))


def make_scores(kind: str, rows: int = ROWS, vocab: int = VOCAB, seed: int = 0) -> torch.Tensor:
    """(rows, vocab) test scores of a given flavour."""
    g = torch.Generator().manual_seed(seed)
    if kind == "randn":  # logits
        return torch.randn(rows, vocab, generator=g) * 3
    if kind == "ties":  # many equal values: exercises sort/topk tie handling
        return torch.randint(-2, 3, (rows, vocab), generator=g).float()
    if kind == "logprobs":  # beam mode: log-probabilities
        return torch.log_softmax(torch.randn(rows, vocab, generator=g) * 2, dim=-1)
    if kind == "some_inf":  # after an earlier filter
        s = torch.randn(rows, vocab, generator=g) * 3
        s[:, ::5] = -float("inf")
        return s
    if kind == "invalid":
        s = torch.randn(rows, vocab, generator=g)
        s[0, 3], s[1, 4], s[2, 5] = float("nan"), float("inf"), -float("inf")
        return s
    raise AssertionError(kind)


def make_ids(length: int, rows: int = ROWS, seed: int = 1) -> torch.LongTensor:
    """(rows, length) token ids with repeats (so penalties and n-grams have work to do)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 10, (rows, length), generator=g)
    if length >= 4:
        ids[:, -2:] = ids[:, :2]  # the last bigram repeats the first one
    return ids


ENC = make_ids(6, rows=2, seed=7)  # (batch=2, prompt_len=6): two beams per prompt below


# (case id, factory(module) -> processor, input length). The factory is called with
# genlab.processors and with transformers' logits_process module: same names, same args.
CASES = [
    ("min_length_on", lambda m: m.MinLengthLogitsProcessor(10, 3), 8),
    ("min_length_off", lambda m: m.MinLengthLogitsProcessor(5, [3, 4]), 8),
    ("min_length_edge", lambda m: m.MinLengthLogitsProcessor(8, 3), 8),
    ("min_new_on", lambda m: m.MinNewTokensLengthLogitsProcessor(5, 4, 3), 8),
    ("min_new_edge", lambda m: m.MinNewTokensLengthLogitsProcessor(5, 3, 3), 8),
    ("min_new_off", lambda m: m.MinNewTokensLengthLogitsProcessor(2, 3, [1, 2]), 8),
    ("temperature_low", lambda m: m.TemperatureLogitsWarper(0.7), 8),
    ("temperature_high", lambda m: m.TemperatureLogitsWarper(1.3), 8),
    ("repetition", lambda m: m.RepetitionPenaltyLogitsProcessor(1.3), 8),
    ("repetition_reward", lambda m: m.RepetitionPenaltyLogitsProcessor(0.8), 8),
    ("repetition_skip_prompt", lambda m: m.RepetitionPenaltyLogitsProcessor(1.5, 4), 8),
    (
        "encoder_repetition",
        lambda m: m.EncoderRepetitionPenaltyLogitsProcessor(1.7, ENC[[0, 0, 1, 1]]),
        8,
    ),
    ("top_p", lambda m: m.TopPLogitsWarper(0.9), 8),
    ("top_p_keep3", lambda m: m.TopPLogitsWarper(0.3, min_tokens_to_keep=3), 8),
    ("top_p_zero", lambda m: m.TopPLogitsWarper(0.0), 8),
    ("top_p_filter", lambda m: m.TopPLogitsWarper(0.5, filter_value=-100.0), 8),
    ("top_k", lambda m: m.TopKLogitsWarper(5), 8),
    ("top_k_one", lambda m: m.TopKLogitsWarper(1), 8),
    ("top_k_above_vocab", lambda m: m.TopKLogitsWarper(40), 8),
    ("top_k_keep7", lambda m: m.TopKLogitsWarper(3, min_tokens_to_keep=7), 8),
    ("min_p", lambda m: m.MinPLogitsWarper(0.1), 8),
    ("min_p_keep2", lambda m: m.MinPLogitsWarper(0.5, min_tokens_to_keep=2), 8),
    ("typical", lambda m: m.TypicalLogitsWarper(0.9), 8),
    ("typical_keep3", lambda m: m.TypicalLogitsWarper(0.2, min_tokens_to_keep=3), 8),
    ("epsilon", lambda m: m.EpsilonLogitsWarper(0.02), 8),
    ("epsilon_keep3", lambda m: m.EpsilonLogitsWarper(0.2, min_tokens_to_keep=3), 8),
    ("eta", lambda m: m.EtaLogitsWarper(0.01), 8),
    ("eta_keep2", lambda m: m.EtaLogitsWarper(0.3, min_tokens_to_keep=2), 8),
    ("ngram1", lambda m: m.NoRepeatNGramLogitsProcessor(1), 8),
    ("ngram2", lambda m: m.NoRepeatNGramLogitsProcessor(2), 8),
    ("ngram3", lambda m: m.NoRepeatNGramLogitsProcessor(3), 8),
    ("ngram_too_long", lambda m: m.NoRepeatNGramLogitsProcessor(10), 8),
    ("encoder_ngram2", lambda m: m.EncoderNoRepeatNGramLogitsProcessor(2, ENC), 8),
    ("encoder_ngram1", lambda m: m.EncoderNoRepeatNGramLogitsProcessor(1, ENC), 8),
    ("encoder_ngram_short_ctx", lambda m: m.EncoderNoRepeatNGramLogitsProcessor(4, ENC), 2),
    ("sequence_bias", lambda m: m.SequenceBiasLogitsProcessor([[[3], 2.0], [[4, 5], -1.5]]), 8),
    ("sequence_bias_dict", lambda m: m.SequenceBiasLogitsProcessor({(5,): 1.0, (1, 7): 3.0}), 8),
    ("sequence_bias_short_ctx", lambda m: m.SequenceBiasLogitsProcessor({(1, 2, 3): 2.0}), 2),
    ("bad_words", lambda m: m.NoBadWordsLogitsProcessor([[4], [7, 9], [3]], 3), 8),
    ("bad_words_no_eos", lambda m: m.NoBadWordsLogitsProcessor([[4, 4, 9], [11]]), 8),
    ("prefix", lambda m: m.PrefixConstrainedLogitsProcessor(_allowed, 2), 8),
    ("forced_bos_on", lambda m: m.ForcedBOSTokenLogitsProcessor(2), 1),
    ("forced_bos_off", lambda m: m.ForcedBOSTokenLogitsProcessor(2), 8),
    ("forced_eos_on", lambda m: m.ForcedEOSTokenLogitsProcessor(9, [3, 6]), 8),
    ("forced_eos_off", lambda m: m.ForcedEOSTokenLogitsProcessor(20, 3), 8),
    ("exp_decay_on", lambda m: m.ExponentialDecayLengthPenalty((2, 1.3), [3, 4], 4), 8),
    ("exp_decay_off", lambda m: m.ExponentialDecayLengthPenalty((10, 1.5), 3, 4), 8),
    ("suppress", lambda m: m.SuppressTokensLogitsProcessor([1, 5, 31]), 8),
    ("begin_suppress_on", lambda m: m.SuppressTokensAtBeginLogitsProcessor([2, 3], 8), 8),
    ("begin_suppress_off", lambda m: m.SuppressTokensAtBeginLogitsProcessor([2], 5), 8),
    ("renormalize", lambda m: m.LogitNormalization(), 8),
]
SCORE_KINDS = ["randn", "ties", "logprobs", "some_inf"]


def _allowed(batch_id: int, row_ids: torch.Tensor) -> list[int]:
    return [batch_id, int(row_ids[-1]) % VOCAB, 7]


def _check_pair(factory, ids, scores, **kwargs):
    ours_p, ref_p = factory(gp), factory(hf)
    assert type(ours_p).__module__.startswith("genlab.processors")
    before = scores.clone()
    ours = ours_p(ids, scores, **kwargs)
    assert_identical(scores, before)  # input untouched
    ref = ref_p(ids, scores.clone(), **kwargs)
    assert_identical(ours, ref)
    return ours


@pytest.mark.parametrize("kind", SCORE_KINDS)
@pytest.mark.parametrize("case_id, factory, length", CASES, ids=[c[0] for c in CASES])
def test_processor_matches_reference(case_id, factory, length, kind):
    ids = make_ids(length)
    _check_pair(factory, ids, make_scores(kind))


def test_cases_actually_change_scores():
    """Guard against vacuous parity: every '_on' case and most others modify the scores."""
    unchanged = []
    for case_id, factory, length in CASES:
        scores = make_scores("randn")
        if torch.equal(factory(gp)(make_ids(length), scores), scores):
            unchanged.append(case_id)
    expected = {
        "min_length_off",
        "min_length_edge",
        "min_new_edge",
        "min_new_off",
        "ngram_too_long",
        "encoder_ngram_short_ctx",
        "sequence_bias_short_ctx",
        "forced_bos_off",
        "forced_eos_off",
        "exp_decay_off",
        "begin_suppress_off",
        "top_k_above_vocab",
    }
    assert set(unchanged) == expected


def test_inf_nan_removal_matches_reference():
    scores = make_scores("invalid")
    out = _check_pair(lambda m: m.InfNanRemoveLogitsProcessor(), make_ids(8), scores)
    assert out[0, 3] == 0 and out[1, 4] == torch.finfo(torch.float32).max
    assert out[2, 5] == torch.finfo(torch.float32).min and torch.isfinite(out).all()


def test_classifier_free_guidance_batched_matches_reference():
    scores = make_scores("randn", rows=2 * ROWS)
    out = _check_pair(lambda m: m.ClassifierFreeGuidanceLogitsProcessor(3.0), make_ids(5), scores)
    assert out.shape == (ROWS, VOCAB)
    with pytest.raises(ValueError, match="2 \\* 4 rows"):
        gp.ClassifierFreeGuidanceLogitsProcessor(2.0)(make_ids(5), make_scores("randn"))


@pytest.mark.parametrize("group", [0, 1, 2])
def test_hamming_diversity_matches_reference(group):
    # 2 prompts x 6 beams in 3 groups of 2; scores are the current group's rows
    current = torch.tensor([4, 4, 9, 1, 0, 0, 7, 7, 7, 3, 2, 2])
    ids = make_ids(5, rows=4)
    factory = lambda m: m.HammingDiversityLogitsProcessor(0.75, 6, 3)  # noqa: E731
    out = _check_pair(
        factory, ids, make_scores("logprobs"), current_tokens=current, beam_group_idx=group
    )
    if group == 2:  # prompt 0's earlier groups chose 4, 4, 9, 1: token 4 lowered twice
        base = make_scores("logprobs")
        assert out[0, 4] == base[0, 4] - 0.75 * 2 and out[0, 9] == base[0, 9] - 0.75


def test_sequence_bias_hand_made():
    # row 0 ends with 4 -> completes (4, 5); row 1 does not
    ids = torch.tensor([[1, 4], [4, 1]])
    p = gp.SequenceBiasLogitsProcessor([[[3], 2.0], [[4, 5], -1.5], [[1, 5], 0.5]])
    out = p(ids, torch.zeros(2, 6))
    assert out.tolist() == [[0, 0, 0, 2.0, 0, -1.5], [0, 0, 0, 2.0, 0, 0.5]]
    with pytest.raises(ValueError, match=r"token ids \[9\].*6 tokens"):
        gp.SequenceBiasLogitsProcessor([[[9], 1.0]])(ids, torch.zeros(2, 6))


def test_warpers_hand_made():
    scores = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    ninf = -float("inf")
    assert gp.TopKLogitsWarper(2)(None, scores).tolist() == [[ninf, ninf, 3.0, 4.0]]
    # probabilities 0.032 0.087 0.237 0.644: the top two hold 0.88 >= 0.8
    assert gp.TopPLogitsWarper(0.8)(None, scores).tolist() == [[ninf, ninf, 3.0, 4.0]]
    assert gp.MinPLogitsWarper(0.3)(None, scores).tolist() == [[ninf, ninf, 3.0, 4.0]]
    assert gp.EpsilonLogitsWarper(0.05)(None, scores).tolist() == [[ninf, 2.0, 3.0, 4.0]]


def test_warper_boundaries_match_reference():
    """Exact-boundary cases: cumulative mass equal to 1 - top_p, probability equal to
    min_p * top probability (both remove on equality / keep on equality as the reference)."""
    flat = torch.zeros(1, 4)  # probabilities 0.25 each
    top_p = _check_pair(lambda m: m.TopPLogitsWarper(0.5), None, flat)
    assert top_p.isinf().sum() == 2  # cumulative 0.25 and 0.5 are <= 0.5: removed
    min_p = _check_pair(lambda m: m.MinPLogitsWarper(1.0), None, flat)
    assert not min_p.isinf().any()  # equal to the threshold: kept
    typical = _check_pair(lambda m: m.TypicalLogitsWarper(0.5), None, flat)
    assert not typical.isinf().any()  # all equally typical


def test_penalties_hand_made():
    ids = torch.tensor([[0, 2, 2]])
    scores = torch.tensor([[2.0, 1.0, -3.0, 5.0]])
    out = gp.RepetitionPenaltyLogitsProcessor(2.0)(ids, scores)
    assert out.tolist() == [[1.0, 1.0, -6.0, 5.0]]
    ngram = gp.NoRepeatNGramLogitsProcessor(2)(torch.tensor([[1, 2, 3, 1]]), torch.zeros(1, 4))
    assert ngram.tolist() == [[0.0, 0.0, -float("inf"), 0.0]]
    assert gp.ngram_table([1, 2, 1, 3], 2) == {(1,): {2, 3}, (2,): {1}}


def test_bad_words_keep_eos_and_accept_only_eos_as_a_no_op():
    p = gp.NoBadWordsLogitsProcessor([[2], [5]], eos_token_id=2)
    out = p(torch.tensor([[0]]), torch.zeros(1, 6))
    assert out[0, 2] == 0 and out[0, 5] == -float("inf")
    only_eos = gp.NoBadWordsLogitsProcessor([[2]], eos_token_id=[2, 3])  # as the reference
    scores = torch.randn(2, 6)
    assert torch.equal(only_eos(torch.tensor([[0], [2]]), scores), scores)
    assert only_eos.bad_word_ids == [[2]]


def test_prefix_constraint_empty_list_raises():
    p = gp.PrefixConstrainedLogitsProcessor(lambda b, ids: [], num_beams=1)
    with pytest.raises(ValueError, match="no allowed token for batch_id 0"):
        p(torch.tensor([[1]]), torch.zeros(1, 4))


# (factory, message fragment: the field, the value and the allowed range)
BAD_ARGS = [
    (
        lambda: gp.TemperatureLogitsWarper(0.0),
        r"`temperature` must be a float > 0 \(for greedy.*0\.0",
    ),
    (lambda: gp.TemperatureLogitsWarper(-1.0), r"`temperature` must be a float > 0, got -1\.0"),
    (lambda: gp.TemperatureLogitsWarper("hot"), r"`temperature`.*'hot'"),
    (lambda: gp.TopKLogitsWarper(0), r"`top_k` must be an integer >= 1, got 0"),
    (lambda: gp.TopKLogitsWarper(2.5), r"`top_k` must be an integer >= 1, got 2\.5"),
    (lambda: gp.TopPLogitsWarper(1.5), r"`top_p` must be a float in \[0, 1\], got 1\.5"),
    (lambda: gp.TopPLogitsWarper(0.5, min_tokens_to_keep=0), r"`min_tokens_to_keep`.*>= 1, got 0"),
    (lambda: gp.MinPLogitsWarper(-0.1), r"`min_p` must be a float in \[0, 1\], got -0\.1"),
    (lambda: gp.TypicalLogitsWarper(1.0), r"`typical_p` must be a float in \(0, 1\), got 1\.0"),
    (
        lambda: gp.EpsilonLogitsWarper(0.0),
        r"`epsilon_cutoff` must be a float in \(0, 1\), got 0\.0",
    ),
    (lambda: gp.EtaLogitsWarper(1.0), r"`eta_cutoff` must be a float in \(0, 1\), got 1\.0"),
    (lambda: gp.RepetitionPenaltyLogitsProcessor(0.0), r"`repetition_penalty` must be a float > 0"),
    (
        lambda: gp.RepetitionPenaltyLogitsProcessor(1.2, prompt_ignore_length=-1),
        r"`prompt_ignore_length` must be an integer >= 0, got -1",
    ),
    (
        lambda: gp.EncoderRepetitionPenaltyLogitsProcessor(-2.0, ENC),
        r"`encoder_repetition_penalty` must be a float > 0.*-2\.0",
    ),
    (
        lambda: gp.NoRepeatNGramLogitsProcessor(0),
        r"`no_repeat_ngram_size` must be an integer >= 1, got 0",
    ),
    (
        lambda: gp.EncoderNoRepeatNGramLogitsProcessor(0, ENC),
        r"`encoder_no_repeat_ngram_size` must be an integer >= 1, got 0",
    ),
    (lambda: gp.MinLengthLogitsProcessor(-1, 2), r"`min_length` must be an integer >= 0, got -1"),
    (
        lambda: gp.MinLengthLogitsProcessor(3, -2),
        r"`eos_token_id` must hold integer token ids >= 0",
    ),
    (lambda: gp.MinNewTokensLengthLogitsProcessor(3, -1, 2), r"`min_new_tokens`.*>= 0, got -1"),
    (lambda: gp.ForcedEOSTokenLogitsProcessor(10, [2, -1]), r"`forced_eos_token_id`.*\[2, -1\]"),
    (lambda: gp.ForcedBOSTokenLogitsProcessor(-3), r"`forced_bos_token_id`.*>= 0, got -3"),
    (lambda: gp.SuppressTokensLogitsProcessor(["a"]), r"`suppress_tokens` must be a token id"),
    (lambda: gp.SequenceBiasLogitsProcessor([]), r"`sequence_bias` must be .*empty one"),
    (lambda: gp.SequenceBiasLogitsProcessor([[[1, -2], 1.0]]), r"integers >= 0, got \[1, -2\]"),
    (
        lambda: gp.SequenceBiasLogitsProcessor({(1,): "x"}),
        r"bias for \[1\] must be a float, got 'x'",
    ),
    (lambda: gp.NoBadWordsLogitsProcessor([3, 4]), r"`bad_words_ids` must be .*got 3"),
    (lambda: gp.NoBadWordsLogitsProcessor([[]]), r"`bad_words_ids` must be .*got \[\]"),
    (
        lambda: gp.PrefixConstrainedLogitsProcessor("fn", 1),
        r"`prefix_allowed_tokens_fn` must be a function",
    ),
    (
        lambda: gp.HammingDiversityLogitsProcessor(0.0, 4, 2),
        r"`diversity_penalty` must be a float > 0",
    ),
    (
        lambda: gp.HammingDiversityLogitsProcessor(0.5, 1, 2),
        r"`num_beams` must be an integer >= 2, got 1",
    ),
    (lambda: gp.HammingDiversityLogitsProcessor(0.5, 4, 1), r"`num_beam_groups`.*>= 2, got 1"),
    (
        lambda: gp.HammingDiversityLogitsProcessor(0.5, 2, 3),
        r"`num_beam_groups` must be <= num_beams",
    ),
    (
        lambda: gp.ExponentialDecayLengthPenalty(5, 2, 3),
        r"`exponential_decay_length_penalty` must be a pair \(start_index, decay_factor\), got 5",
    ),
    (
        lambda: gp.ExponentialDecayLengthPenalty((2, 1.5), None, 3),
        r"`exponential_decay_length_penalty` needs `eos_token_id`",
    ),
    (
        lambda: gp.ClassifierFreeGuidanceLogitsProcessor(1.0),
        r"`guidance_scale` must be a float > 1, got 1\.0",
    ),
]


@pytest.mark.parametrize("factory, message", BAD_ARGS)
def test_constructor_errors_name_field_value_and_range(factory, message):
    with pytest.raises(ValueError, match=message):
        factory()


def test_list_passes_extra_kwargs_only_to_processors_that_take_them():
    seen = {}

    class Grouped:
        def __call__(self, input_ids, scores, beam_group_idx):
            seen["group"] = beam_group_idx
            return scores + beam_group_idx

    procs = LogitsProcessorList([gp.TemperatureLogitsWarper(2.0), Grouped(), lambda i, s: s * 10])
    out = procs(torch.tensor([[1]]), torch.tensor([[4.0, 2.0]]), beam_group_idx=3)
    assert out.tolist() == [[50.0, 40.0]] and seen == {"group": 3}
    with pytest.raises(ValueError, match=r"needs the keyword arguments \['beam_group_idx'\]"):
        procs(torch.tensor([[1]]), torch.tensor([[4.0, 2.0]]))


def test_stage_names_warpers_and_describe():
    procs = LogitsProcessorList(
        [gp.RepetitionPenaltyLogitsProcessor(1.2), gp.TopKLogitsWarper(5), hf.TopPLogitsWarper(0.9)]
    )
    assert procs.stage_names() == ["repetition_penalty", "top_k", "TopPLogitsWarper"]
    assert [gp.is_warper(p) for p in procs] == [False, True, True]
    assert gp.TopKLogitsWarper(5).describe() == "top_k(top_k=5)"
    assert "penalty=1.2" in gp.RepetitionPenaltyLogitsProcessor(1.2).describe()
    warpers = {n for n in gp.__all__ if getattr(getattr(gp, n), "is_warper", False) is True}
    # WARPER_NAMES are the reference's warpers (recognised by class name on transformers'
    # own objects too); the samplers beyond the reference are warpers by their flag alone
    from genlab.processors import samplers

    beyond = {n for n in samplers.__all__ if getattr(getattr(samplers, n), "is_warper", False)}
    assert beyond and not beyond & set(gp.WARPER_NAMES)
    assert warpers - beyond == set(gp.WARPER_NAMES)


# ---------------------------------------------------------------------------------------
# build_processors vs transformers' _get_logits_processor

PROMPT_LEN = 6


def _allowed_96(batch_id, row_ids):
    return [batch_id + 3, int(row_ids[-1]), 40, 41]


# (id, GenerationConfig kwargs, rows of scores per prompt, prefix fn, extra list kwargs)
BUILD_GRID = [
    ("greedy_default", {}, 1, None),
    ("sample_default", {"do_sample": True}, 1, None),
    (
        "all_warpers",
        {
            "do_sample": True,
            "temperature": 0.7,
            "top_k": 10,
            "top_p": 0.9,
            "min_p": 0.05,
            "typical_p": 0.9,
            "epsilon_cutoff": 3e-4,
            "eta_cutoff": 1e-3,
        },
        1,
        None,
    ),
    (
        "beam_sample_two_eos",
        {"do_sample": True, "num_beams": 3, "top_k": 2, "top_p": 0.4, "eos_token_id": [1, 2]},
        3,
        None,
    ),
    (
        "beam_sample_no_eos",
        {"do_sample": True, "num_beams": 2, "top_k": 1, "eos_token_id": None},
        2,
        None,
    ),
    (
        "penalties",
        {
            "repetition_penalty": 1.3,
            "encoder_repetition_penalty": 1.1,
            "no_repeat_ngram_size": 2,
            "encoder_no_repeat_ngram_size": 3,
            "bad_words_ids": [[5], [6, 7], [2]],
            "min_length": 12,
            "min_new_tokens": 3,
            "eos_token_id": 2,
        },
        1,
        None,
    ),
    (
        "min_length_without_eos",
        {"min_length": 12, "min_new_tokens": 3, "eos_token_id": None},
        1,
        None,
    ),
    (
        "forcing",
        {
            "sequence_bias": [[[3], 2.0], [[4, 5], -1.5]],
            "forced_bos_token_id": 0,
            "forced_eos_token_id": 2,
            "max_length": PROMPT_LEN + 1,
            "remove_invalid_values": True,
            "exponential_decay_length_penalty": (1, 1.5),
            "suppress_tokens": [8, 9],
            "begin_suppress_tokens": [10, 11],
            "renormalize_logits": True,
            "eos_token_id": [2, 3],
        },
        1,
        None,
    ),
    ("prefix_beams", {"num_beams": 2, "repetition_penalty": 0.9}, 2, _allowed_96),
    (
        "sample_and_everything",
        {
            "do_sample": True,
            "top_k": 4,
            "no_repeat_ngram_size": 3,
            "suppress_tokens": [40],
            "renormalize_logits": True,
        },
        1,
        None,
    ),
]


def _prepared_config(hf_model, **kwargs) -> GenerationConfig:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = GenerationConfig(**{"eos_token_id": 2, **kwargs})
    hf_model._prepare_special_tokens(cfg, kwargs_has_attention_mask=True, device="cpu")
    return cfg


def _hf_list(hf_model, cfg, prompt, prefix_fn=None, user=(), length=PROMPT_LEN, **extra):
    return hf_model._get_logits_processor(
        generation_config=cfg,
        input_ids_seq_length=length,
        encoder_input_ids=prompt,
        prefix_allowed_tokens_fn=prefix_fn,
        logits_processor=hf.LogitsProcessorList(user),
        device="cpu",
        **extra,
    )


@pytest.mark.parametrize(
    "case_id, kwargs, beams, prefix_fn", BUILD_GRID, ids=[c[0] for c in BUILD_GRID]
)
def test_build_matches_reference_order_and_output(hf_llama, case_id, kwargs, beams, prefix_fn):
    vocab = hf_llama.config.vocab_size
    prompt = make_ids(PROMPT_LEN, rows=2, seed=3) + 3  # (2, 6)
    cfg = _prepared_config(hf_llama, **kwargs)
    ref = _hf_list(hf_llama, cfg, prompt, prefix_fn)
    ours = build_processors(
        cfg,
        input_ids_seq_length=PROMPT_LEN,
        encoder_input_ids=prompt,
        prefix_allowed_tokens_fn=prefix_fn,
    )
    assert [type(p).__name__ for p in ours] == [type(p).__name__ for p in ref]
    assert all(type(p).__module__.startswith("genlab.") for p in ours)
    # apply both: one step at the prompt length, one 3 tokens later
    for step, extra in enumerate([[], [40, 41, 7]]):
        ids = (
            torch.cat([prompt, torch.tensor([extra] * 2, dtype=torch.long)], dim=1)
            if extra
            else prompt
        )
        ids = ids.repeat_interleave(beams, dim=0)
        scores = make_scores("randn", rows=ids.shape[0], vocab=vocab, seed=step)
        assert_identical(ours(ids, scores.clone()), ref(ids, scores.clone()))


def test_build_min_tokens_to_keep_rule():
    cfg = GenerationConfig(do_sample=True, num_beams=1, top_p=0.5, eos_token_id=[1, 2])
    (top_k, top_p) = build_processors(cfg, input_ids_seq_length=3)
    assert (top_k.top_k, top_p.min_tokens_to_keep) == (50, 1)
    (_, top_p) = build_processors(cfg, input_ids_seq_length=3, is_beam_sampling=True)
    assert top_p.min_tokens_to_keep == 3


def test_build_begin_suppress_index_shifts_after_forced_bos(hf_llama):
    for prompt_len, forced, expected in [(1, 5, 2), (1, None, 1), (4, 5, 4)]:
        cfg = _prepared_config(hf_llama, begin_suppress_tokens=[3], forced_bos_token_id=forced)
        prompt = torch.ones(1, prompt_len, dtype=torch.long)
        ref = _hf_list(hf_llama, cfg, prompt, length=prompt_len)[-1]
        ours = build_processors(cfg, input_ids_seq_length=prompt_len)[-1]
        assert ours.begin_index == ref.begin_index == expected


def test_build_hamming_diversity_matches_reference(hf_llama):
    cfg = _prepared_config(
        hf_llama, num_beams=4, num_beam_groups=2, diversity_penalty=0.5, repetition_penalty=1.2
    )
    prompt = make_ids(PROMPT_LEN, rows=2, seed=3)
    ref = _hf_list(hf_llama, cfg, prompt)
    ours = build_processors(cfg, input_ids_seq_length=PROMPT_LEN, encoder_input_ids=prompt)
    assert [type(p).__name__ for p in ours] == [type(p).__name__ for p in ref]
    group_ids = prompt.repeat_interleave(2, dim=0)  # (batch * group_size, len)
    scores = make_scores("logprobs", rows=4, vocab=96)
    current = torch.tensor([5, 9, 0, 0, 7, 7, 0, 0])
    kw = {"current_tokens": current, "beam_group_idx": 1}
    assert_identical(ours(group_ids, scores.clone(), **kw), ref(group_ids, scores.clone(), **kw))
    with pytest.raises(ValueError, match="`num_beams` must be an integer >= 2, got 1"):
        build_processors(GenerationConfig(diversity_penalty=0.5), input_ids_seq_length=3)


def test_build_merges_user_processors_like_reference(hf_llama):
    cfg = _prepared_config(
        hf_llama, do_sample=True, top_k=5, repetition_penalty=1.2, suppress_tokens=[4]
    )
    prompt = make_ids(PROMPT_LEN, rows=1)

    def custom(input_ids, scores):
        return scores * 0.5

    ref_user = [hf.RepetitionPenaltyLogitsProcessor(2.0), custom]
    ref = _hf_list(hf_llama, cfg, prompt, user=ref_user)
    # genlab replaces its built-in by the user's genlab processor ...
    ours_user = [gp.RepetitionPenaltyLogitsProcessor(2.0), custom]
    with pytest.warns(UserWarning, match="RepetitionPenaltyLogitsProcessor was passed"):
        ours = build_processors(cfg, input_ids_seq_length=PROMPT_LEN, logits_processor=ours_user)
    names = [type(p).__name__ for p in ours]
    assert names == [type(p).__name__ for p in ref]
    assert names == [
        "RepetitionPenaltyLogitsProcessor",
        "SuppressTokensLogitsProcessor",
        "function",
        "TopKLogitsWarper",
    ]
    assert ours[0] is ours_user[0] and ours[2] is custom
    # ... and by transformers' processor of the same name, which then runs unchanged
    with pytest.warns(UserWarning):
        mixed = build_processors(cfg, input_ids_seq_length=PROMPT_LEN, logits_processor=ref_user)
    assert mixed[0] is ref_user[0] and len(mixed) == 4
    scores = make_scores("randn", rows=1, vocab=96)
    assert_identical(mixed(prompt, scores.clone()), ref(prompt, scores.clone()))
    assert_identical(ours(prompt, scores.clone()), ref(prompt, scores.clone()))


def test_build_watermark_goes_after_warpers_before_renormalize(monkeypatch):
    calls = []

    def watermark_processor(watermarking_config, *, vocab_size, device):
        calls.append((watermarking_config, vocab_size, device))
        return lambda input_ids, scores: scores + 1

    stub = types.ModuleType("genlab.watermark")
    stub.watermark_processor = watermark_processor
    monkeypatch.setitem(sys.modules, "genlab.watermark", stub)
    cfg = types.SimpleNamespace(
        do_sample=True, top_k=3, watermarking_config="wm", renormalize_logits=True
    )
    procs = build_processors(cfg, input_ids_seq_length=2, vocab_size=50)
    assert procs.stage_names() == ["top_k", "function", "renormalize"]
    assert calls == [("wm", 50, "cpu")]
    with pytest.raises(ValueError, match="vocabulary size is unknown"):
        build_processors(cfg, input_ids_seq_length=2)


def test_build_duck_typed_config_and_guidance_needs_model():
    cfg = types.SimpleNamespace(repetition_penalty=1.5, eos_token_id=torch.tensor(2), min_length=4)
    assert build_processors(cfg, input_ids_seq_length=2).stage_names() == [
        "repetition_penalty",
        "min_length",
    ]
    with pytest.raises(ValueError, match="`guidance_scale` is 1.5 but no model"):
        build_processors(types.SimpleNamespace(guidance_scale=1.5), input_ids_seq_length=2)
    with pytest.warns(UserWarning, match="`encoder_repetition_penalty` is set but no prompt ids"):
        assert (
            build_processors(
                types.SimpleNamespace(encoder_repetition_penalty=1.2), input_ids_seq_length=2
            )
            == []
        )


# ---------------------------------------------------------------------------------------
# unbatched classifier-free guidance: the unconditional pass through genlab's model protocol


def _cfg_steps(hf_model, ours, ref, prompt, steps=3):
    vocab = hf_model.config.vocab_size
    ids = prompt
    for step in range(steps):
        scores = make_scores("randn", rows=ids.shape[0], vocab=vocab, seed=10 + step)
        before = scores.clone()
        with torch.no_grad():
            got, want = ours(ids, scores), ref(ids, scores.clone())
        assert_identical(scores, before)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        ids = torch.cat([ids, got.argmax(-1, keepdim=True)], dim=1)


@pytest.mark.parametrize("use_cache", [True, False])
def test_unbatched_cfg_matches_reference(hf_llama, use_cache):
    from genlab.models.hf import HFModel

    prompt = make_ids(5, rows=2, seed=4) + 3
    # a genlab-protocol model, or (use_cache=False) the raw transformers model, wrapped inside
    model = HFModel(hf_llama) if use_cache else hf_llama
    ours = gp.UnbatchedClassifierFreeGuidanceLogitsProcessor(1.5, model, use_cache=use_cache)
    ref = hf.UnbatchedClassifierFreeGuidanceLogitsProcessor(1.5, hf_llama, use_cache=use_cache)
    _cfg_steps(hf_llama, ours, ref, prompt)


def test_unbatched_cfg_negative_prompt_matches_reference(hf_llama):
    from genlab.models.hf import HFModel

    negative = torch.tensor([[0, 0, 12, 13], [20, 21, 22, 23]])
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    prompt = make_ids(5, rows=2, seed=5) + 3
    ours = gp.UnbatchedClassifierFreeGuidanceLogitsProcessor(
        0.5, HFModel(hf_llama), negative, mask.clone()
    )
    ref = hf.UnbatchedClassifierFreeGuidanceLogitsProcessor(0.5, hf_llama, negative, mask.clone())
    _cfg_steps(hf_llama, ours, ref, prompt)


def test_unbatched_cfg_from_build_and_scale_one(hf_llama):
    from genlab.models.hf import HFModel

    cfg = _prepared_config(hf_llama, guidance_scale=2.0, do_sample=True, top_k=7)
    prompt = make_ids(4, rows=1) + 3
    ref = _hf_list(hf_llama, cfg, prompt, length=4)
    ours = build_processors(
        cfg, input_ids_seq_length=4, model=HFModel(hf_llama), encoder_input_ids=prompt
    )
    assert [type(p).__name__ for p in ours] == [type(p).__name__ for p in ref]
    scores = make_scores("randn", rows=1, vocab=96)
    with torch.no_grad():
        assert_identical(ours(prompt, scores.clone()), ref(prompt, scores.clone()))
    named = gp.UnbatchedClassifierFreeGuidanceLogitsProcessor(2.0, "gpt2")  # as the reference
    with pytest.raises(ValueError, match="`model` is a str: pass a genlab or transformers model"):
        named(prompt, scores)
    plain = gp.UnbatchedClassifierFreeGuidanceLogitsProcessor(1, HFModel(hf_llama))
    assert_identical(plain(prompt, scores), torch.log_softmax(scores, dim=-1))


def test_suppression_mask_is_reused_and_follows_edits():
    """The suppressing processors build their vocabulary mask once per loop, and a changed
    token list (replaced, or edited in place), vocabulary size or device gives a new one."""
    p = gp.SuppressTokensLogitsProcessor([1, 3])
    scores = torch.zeros(1, 8)
    out = p(make_ids(2, rows=1), scores)
    assert out[0].isinf().nonzero().flatten().tolist() == [1, 3]
    mask = p.vocab_mask(p.suppress_tokens, scores)
    assert p.vocab_mask(p.suppress_tokens, torch.ones(3, 8)) is mask  # same list, same vocab
    p.suppress_tokens[0] = 5  # edited in place
    assert p(make_ids(2, rows=1), scores)[0].isinf().nonzero().flatten().tolist() == [3, 5]
    p.suppress_tokens = torch.tensor([0])  # replaced
    assert p(make_ids(2, rows=1), scores)[0].isinf().nonzero().flatten().tolist() == [0]
    wider = p(make_ids(2, rows=1), torch.zeros(1, 12))
    assert wider.shape == (1, 12) and wider[0].isinf().nonzero().flatten().tolist() == [0]
    m = gp.MinNewTokensLengthLogitsProcessor(2, 3, eos_token_id=[4])
    assert m(make_ids(3, rows=1), scores)[0, 4] == -float("inf")
    m.eos_token_id = torch.tensor([6])
    assert m(make_ids(3, rows=1), scores)[0].isinf().nonzero().flatten().tolist() == [6]
    with torch.inference_mode():  # ids made in inference mode (no version counter)
        e = gp.MinLengthLogitsProcessor(5, eos_token_id=2)
        for _ in range(2):
            assert e(make_ids(3, rows=1), scores)[0].isinf().nonzero().flatten().tolist() == [2]
