"""Stopping criteria, checked against transformers 4.56.2's on the same inputs."""

from __future__ import annotations

import random
import time
import types
import warnings

import pytest
import torch
import transformers
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast
from transformers.generation import GenerationMixin
from transformers.generation import stopping_criteria as ref_sc

from genlab.config import GenerationConfig
from genlab.stopping import (
    ConfidenceCriteria,
    EosTokenCriteria,
    MaxLengthCriteria,
    MaxTimeCriteria,
    StoppingCriteria,
    StoppingCriteriaList,
    StopStringCriteria,
    build_stopping_criteria,
    merge_criteria,
    token_strings,
    validate_stopping_criteria,
)

# ------------------------------------------------------------------ tiny tokenizers

CORPUS = [
    "The cat stopped at the stop sign, then it stopped again and again.",
    "Stop! said the end of the story. THE END. The end came, unstoppable.",
    "café naïve résumé — stopping is hard\n\nnew paragraph\n\nanother one",
    "a b c d e f abcdef: laptop, stopper, topper, pedal, stepped aside",
    "spaced out . like this , and it 's so ! isn't it ?",  # text that decode() may "clean up"
] * 10


def _train(model, pre_tokenizer, decoder, trainer, normalizer=None) -> PreTrainedTokenizerFast:
    raw = Tokenizer(model)
    raw.pre_tokenizer = pre_tokenizer
    raw.decoder = decoder
    if normalizer is not None:
        raw.normalizer = normalizer
    raw.train_from_iterator(CORPUS, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=raw)


def _byte_level() -> PreTrainedTokenizerFast:
    return _train(
        models.BPE(),
        pre_tokenizers.ByteLevel(add_prefix_space=False),
        decoders.ByteLevel(),
        trainers.BpeTrainer(
            vocab_size=360,
            special_tokens=["<|endoftext|>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        ),
    )


def _metaspace() -> PreTrainedTokenizerFast:  # SentencePiece-style "▁" word starts
    return _train(
        models.BPE(unk_token="<unk>"),
        pre_tokenizers.Metaspace(),
        decoders.Metaspace(),
        trainers.BpeTrainer(vocab_size=220, special_tokens=["<unk>", "</s>"], show_progress=False),
    )


def _wordpiece() -> PreTrainedTokenizerFast:  # BERT-style "##" continuations
    return _train(
        models.WordPiece(unk_token="[UNK]"),
        pre_tokenizers.BertPreTokenizer(),
        decoders.WordPiece(),
        trainers.WordPieceTrainer(
            vocab_size=220, special_tokens=["[UNK]", "[SEP]"], show_progress=False
        ),
        normalizer=normalizers.BertNormalizer(lowercase=False),
    )


@pytest.fixture(scope="module", params=["byte_level", "metaspace", "wordpiece"])
def tokenizer(request):
    return {"byte_level": _byte_level, "metaspace": _metaspace, "wordpiece": _wordpiece}[
        request.param
    ]()


STOPS = ["stop", "the end", "\n\n", "ped a", "END."]
PIECES = ["st", "op", "sto", "pper", "s", "to", "pped", "las", "topper", "the", " end", " the",
          "END", ".", "\n", "\n\n", " ", "ped", " a", "stop", "e", "nd", "é", "x"]  # fmt: skip


def _texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(PIECES) for _ in range(rng.randint(3, 14))) for _ in range(n)]


def _windows(seqs: list[list[int]], width: int) -> dict[int, list[list[int]]]:
    """Every suffix window of every prefix, grouped by length (rows must share a length)."""
    by_len: dict[int, list[list[int]]] = {}
    for seq in seqs:
        for end in range(1, len(seq) + 1):
            row = seq[max(0, end - width) : end]
            by_len.setdefault(len(row), []).append(row)
    return by_len


def _compare(ours, ref, by_len) -> int:
    positives = 0
    for rows in by_len.values():
        ids = torch.tensor(rows)
        before = ids.clone()
        expected = ref(ids, None)
        got = ours(ids, None)
        assert torch.equal(ids, before)  # the input is not modified
        assert got.dtype == torch.bool and got.shape == (len(rows),)
        assert torch.equal(got, expected), [
            r for r, a, b in zip(rows, got, expected, strict=True) if a != b
        ]
        positives += int(got.sum())
    return positives


# ------------------------------------------------------------------ stop strings


def test_token_texts_equal_the_references_cleaned_vocabulary(tokenizer):
    ref_texts, ref_ids = ref_sc.StopStringCriteria.clean_tokenizer_vocab(tokenizer)
    expected = dict(zip(ref_ids, ref_texts, strict=True))
    assert token_strings(tokenizer) == expected
    # the raw `tokenizers` object (decode() instead of convert_tokens_to_string()) agrees
    assert token_strings(tokenizer.backend_tokenizer) == expected


def test_stop_strings_match_the_reference_on_tokenized_text(tokenizer):
    texts = _texts(150, seed=0) + CORPUS[:4]
    seqs = [tokenizer.encode(t, add_special_tokens=False) for t in texts]
    ref = ref_sc.StopStringCriteria(tokenizer, STOPS)
    ours = StopStringCriteria(tokenizer, STOPS)
    by_len = _windows(seqs, ours.maximum_token_len + 3)
    assert _compare(ours, ref, by_len) > 40


def test_stop_strings_match_the_reference_on_random_ids(tokenizer):
    vocab = len(tokenizer.get_vocab())
    texts = token_strings(tokenizer)
    # ids whose text shares a character with a stop string make matches likely;
    # a few ids beyond the vocabulary must simply never match
    near = [i for i, t in texts.items() if t and set(t) & set("".join(STOPS))]
    pool = near + [vocab, vocab + 7]
    gen = random.Random(1)
    rows = [[gen.choice(pool) for _ in range(9)] for _ in range(800)]
    ref = ref_sc.StopStringCriteria(tokenizer, STOPS)
    ours = StopStringCriteria(tokenizer, STOPS)
    assert _compare(ours, ref, {9: rows}) > 10


@pytest.mark.parametrize("stops", ["é", ["e"], ["!"], ["stop", "stopper"]])
def test_single_character_and_overlapping_stop_strings_match_the_reference(stops):
    tok = _byte_level()
    seqs = [tok.encode(t, add_special_tokens=False) for t in _texts(80, seed=2) + CORPUS[:4]]
    ref = ref_sc.StopStringCriteria(tok, stops)
    ours = StopStringCriteria(tok, stops)
    _compare(ours, ref, _windows(seqs, ours.maximum_token_len + 2))


@pytest.mark.parametrize(
    "pieces, stops",
    [
        (["st", "op"], True),
        (["stop"], True),
        (["st", "opera"], True),
        (["sto", "pper"], True),
        (["las", "topper"], True),
        (["s", "to", "pped"], True),
        (["x", "xstopx"], True),
        (["stop", "at"], False),
        (["st", "op", "at"], False),
        (["st", "opera", "tion"], False),
        (["s", "x", "top"], False),
        (["", "stop"], True),
    ],
)
def test_stop_string_overhang_rules(pieces, stops):
    token_texts = {i: p for i, p in enumerate(pieces)}
    crit = StopStringCriteria.from_token_strings(token_texts, ["stop"])
    ids = torch.tensor([list(range(len(pieces)))])
    assert crit(ids, None).tolist() == [stops]


def test_stop_strings_look_back_at_most_the_longest_stop_string_in_tokens():
    # "ab" spread over "a", "", "b": the empty token uses up the 2-token window
    crit = StopStringCriteria.from_token_strings({0: "a", 1: "", 2: "b"}, "ab")
    assert crit(torch.tensor([[0, 1, 2]]), None).tolist() == [False]
    assert crit(torch.tensor([[0, 2]]), None).tolist() == [True]


def test_stop_string_criteria_reject_empty_stop_strings_and_bad_tokenizers():
    with pytest.raises(ValueError, match="stop_strings"):
        StopStringCriteria.from_token_strings({0: "a"}, [""])
    with pytest.raises(ValueError, match="get_vocab"):
        StopStringCriteria(object(), ["a"])


class DuckTokenizer:
    """Not a transformers tokenizer: get_vocab, encode, convert_ids_to_tokens and
    convert_tokens_to_string only (e.g. a notebook user's own wrapper)."""

    def __init__(self, hf):
        self._hf = hf

    def get_vocab(self):
        return self._hf.get_vocab()

    def encode(self, text, add_special_tokens=False):
        return self._hf.encode(text, add_special_tokens=add_special_tokens)

    def convert_ids_to_tokens(self, ids):
        return self._hf.convert_ids_to_tokens(ids)

    def convert_tokens_to_string(self, tokens):
        return self._hf.convert_tokens_to_string(tokens)


class DecodingTokenizer:
    """Only get_vocab, encode and decode, and decode cleans up spaces unless told not to
    (like genlab's own Tokenizer with clean_up_tokenization_spaces=True)."""

    def __init__(self, hf):
        self._hf = hf

    def get_vocab(self):
        return self._hf.get_vocab()

    def encode(self, text, add_special_tokens=False):
        return self._hf.encode(text, add_special_tokens=add_special_tokens)

    def decode(self, ids, skip_special_tokens=True, clean_up_tokenization_spaces=True):
        return self._hf.decode(
            ids,
            skip_special_tokens=skip_special_tokens,
            clean_up_tokenization_spaces=clean_up_tokenization_spaces,
        )


def test_any_tokenizer_with_the_same_methods_works():
    tok = _byte_level()
    seqs = [tok.encode(t, add_special_tokens=False) for t in _texts(60, seed=3)]
    ref = ref_sc.StopStringCriteria(tok, STOPS)
    by_len = _windows(seqs, 10)
    assert _compare(StopStringCriteria(DuckTokenizer(tok), STOPS), ref, by_len) > 5
    assert _compare(StopStringCriteria(tok.backend_tokenizer, STOPS), ref, by_len) > 5
    assert _compare(StopStringCriteria(DecodingTokenizer(tok), STOPS), ref, by_len) > 5
    ref_texts, ref_ids = ref_sc.StopStringCriteria.clean_tokenizer_vocab(tok)
    assert token_strings(DecodingTokenizer(tok)) == dict(zip(ref_ids, ref_texts, strict=True))


# ------------------------------------------------------------------ simple criteria


def test_max_length_matches_the_reference():
    for length in (3, 5, 8):
        ids = torch.randint(0, 50, (3, length))
        for limit in (4, 5, 6):
            expected = ref_sc.MaxLengthCriteria(limit)(ids, None)
            assert torch.equal(MaxLengthCriteria(limit)(ids, None), expected)


def test_max_length_warns_past_the_models_context():
    crit = MaxLengthCriteria(10, max_position_embeddings=4)
    with pytest.warns(UserWarning, match="context"):
        assert crit(torch.zeros(2, 5, dtype=torch.long), None).tolist() == [False, False]
    with pytest.raises(ValueError, match="max_length"):
        MaxLengthCriteria(0)


def test_max_time():
    ids = torch.zeros(2, 3, dtype=torch.long)
    assert MaxTimeCriteria(0.2, initial_timestamp=time.time() - 1)(ids, None).tolist() == [
        True,
        True,
    ]
    assert MaxTimeCriteria(60.0)(ids, None).tolist() == [False, False]
    with pytest.raises(ValueError, match="max_time"):
        MaxTimeCriteria(0)


@pytest.mark.parametrize("eos", [2, [2, 5], torch.tensor([5, 2]), torch.tensor(2)])
def test_eos_matches_the_reference(eos):
    ids = torch.tensor([[1, 2], [2, 1], [0, 5], [3, 3]])
    expected = ref_sc.EosTokenCriteria(eos)(ids, None)
    assert torch.equal(EosTokenCriteria(eos)(ids, None), expected)
    with pytest.raises(ValueError, match="eos_token_id"):
        EosTokenCriteria([])


def test_confidence_matches_the_reference():
    ids = torch.tensor([[1, 3]])
    scores = (torch.zeros(1, 4), torch.tensor([[0.0, 0.0, 0.0, 2.0]]))
    for threshold in (0.4, 0.9):
        expected = bool(ref_sc.ConfidenceCriteria(threshold)(ids, scores))
        assert ConfidenceCriteria(threshold)(ids, scores).tolist() == [expected]


def test_list_ors_its_members_and_finds_max_length():
    ids = torch.tensor([[1, 2, 9], [1, 2, 3]])
    crit = StoppingCriteriaList([EosTokenCriteria(9), ref_sc.MaxLengthCriteria(10)])
    assert crit(ids, None).tolist() == [True, False]
    assert crit.max_length == 10
    assert StoppingCriteriaList().max_length is None
    with pytest.raises(NotImplementedError):
        StoppingCriteria()(ids, None)


def test_validate_stopping_criteria_adds_or_checks_max_length():
    out = validate_stopping_criteria(StoppingCriteriaList([EosTokenCriteria(1)]), 7)
    assert out.max_length == 7 and len(out) == 2
    with pytest.warns(UserWarning, match="max_length"):
        validate_stopping_criteria(StoppingCriteriaList([MaxLengthCriteria(5)]), 7)


# ------------------------------------------------------------------ building the list


def _reference_list(config_kwargs, *, tokenizer=None, user=None, max_pos=None):
    """What transformers' generate() builds for the same settings and user list."""
    hf_config = transformers.GenerationConfig(**config_kwargs)
    eos = hf_config.eos_token_id
    hf_config._eos_token_tensor = None if eos is None else torch.tensor(eos).reshape(-1)
    fake = types.SimpleNamespace(config=types.SimpleNamespace(max_position_embeddings=max_pos))
    fake._merge_criteria_processor_list = types.MethodType(
        GenerationMixin._merge_criteria_processor_list, fake
    )
    transformers.logging.set_verbosity_error()
    try:
        return GenerationMixin._get_stopping_criteria(
            fake, hf_config, ref_sc.StoppingCriteriaList(user or []), tokenizer=tokenizer
        )
    finally:
        transformers.logging.set_verbosity_warning()


def _names(criteria):
    return [type(c).__name__ for c in criteria]


def _quiet_build(config, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return build_stopping_criteria(config, **kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(),
        dict(max_length=9, eos_token_id=[2, 3]),
        dict(max_time=3.0, eos_token_id=2, stop_strings=["stop"]),
        dict(stop_strings="the end", max_length=None),
        dict(is_assistant=True, eos_token_id=1),
        dict(is_assistant=True, assistant_confidence_threshold=0.0),
    ],
)
def test_build_order_matches_the_reference(kwargs):
    tok = _byte_level()
    ref = _reference_list(kwargs, tokenizer=tok, max_pos=32)
    ours = build_stopping_criteria(
        GenerationConfig(**kwargs), tokenizer=tok, max_position_embeddings=32
    )
    assert _names(ours) == _names(ref)
    for mine, theirs in zip(ours, ref, strict=True):
        for attr in ("max_length", "max_position_embeddings", "max_time", "stop_strings"):
            assert getattr(mine, attr, None) == getattr(theirs, attr, None)
        if isinstance(mine, EosTokenCriteria):
            assert mine.eos_token_id.tolist() == theirs.eos_token_id.tolist()


def test_user_criteria_merge_like_the_reference():
    def plain_function(input_ids, scores, **kwargs):
        return torch.zeros(input_ids.shape[0], dtype=torch.bool)

    kwargs = dict(max_length=9, eos_token_id=2, max_time=5.0)
    for user_max in (MaxLengthCriteria(4), ref_sc.MaxLengthCriteria(4)):
        user = [ref_sc.EosTokenCriteria(7), user_max, plain_function]
        ref_user = [ref_sc.EosTokenCriteria(7), ref_sc.MaxLengthCriteria(4), plain_function]
        ref = _reference_list(kwargs, user=ref_user)
        with pytest.warns(UserWarning, match="replaces"):
            ours = build_stopping_criteria(GenerationConfig(**kwargs), user_criteria=user)
        # the user's max length and EOS replace the config's, in the config's slots
        assert ours[0] is user_max and ours.max_length == 4 and ours[2] is user[0]
        assert _names(ours) == _names(ref)
        assert ours[-1] is plain_function
        ids = torch.tensor([[0, 1, 7], [0, 1, 2], [0, 0, 0]])
        assert ours(ids, None).tolist() == ref(ids, None).tolist() == [True, False, False]


def test_merge_keeps_builtins_when_no_user_list():
    built = StoppingCriteriaList([MaxLengthCriteria(3)])
    assert merge_criteria(built, None) is built
    assert merge_criteria(built, []) is built


def test_transformers_criteria_work_unchanged_in_a_genlab_list():
    tok = _byte_level()
    user = [ref_sc.StopStringCriteria(tok, ["stop"]), ref_sc.MaxTimeCriteria(60.0)]
    crit = _quiet_build(GenerationConfig(max_length=50), user_criteria=user)
    ids = torch.tensor([tok.encode("we stop", add_special_tokens=False)])
    assert crit(ids, None).tolist() == [True]


def test_stop_strings_without_a_tokenizer_say_what_to_do():
    with pytest.raises(ValueError, match="tokenizer=") as err:
        build_stopping_criteria(GenerationConfig(stop_strings=["###"]))
    assert "stop_strings" in str(err.value)


def test_built_criteria_stop_on_the_right_rows():
    tok = _byte_level()
    config = GenerationConfig(max_length=8, eos_token_id=0, stop_strings=["the end"])
    crit = build_stopping_criteria(config, tokenizer=tok)
    end = tok.encode("and the end", add_special_tokens=False)
    rows = [end[-3:], [5, 6, 0], [5, 6, 7]]
    width = max(map(len, rows))
    ids = torch.tensor([[1] * (width - len(r)) + r for r in rows])
    assert crit(ids, None).tolist() == [True, True, False]
