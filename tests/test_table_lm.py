"""TableLM: the hand-written teaching model, its tokenizer and its cache."""

from __future__ import annotations

import math

import pytest
import torch

from genlab.models.base import ModelInfo, ModelOutput
from genlab.models.table import ZERO_PROB_LOGIT, TableCache, TableLM, WordTokenizer

CLASSIC_VOCAB = [
    "<pad>", "<bos>", "<eos>", "<unk>", "The", "nice", "dog", "car", "woman", "house", "guy",
    "has", "runs", "and", "is", "drives", "turns",
]  # fmt: skip


@pytest.fixture(scope="module")
def lm() -> TableLM:
    return TableLM.classic()


def log_row(lm: TableLM, probs: dict[str, float]) -> torch.Tensor:
    """The (vocab,) logits the table must give for a row with these probabilities."""
    row = torch.full((lm.info.vocab_size,), ZERO_PROB_LOGIT, dtype=torch.float32)
    for word, p in probs.items():
        row[lm.tokenizer.convert_tokens_to_ids(word)] = math.log(p)
    return row


def run(lm, ids, mask=None, cache=None, **kwargs) -> ModelOutput:
    """One forward with a fresh cache unless given; mask defaults to all ones."""
    cache = lm.new_cache(ids.shape[0]) if cache is None else cache
    if mask is None:
        mask = torch.ones(ids.shape[0], cache.length() + ids.shape[1], dtype=torch.long)
    positions = torch.zeros_like(ids)
    return lm.forward(ids, attention_mask=mask, position_ids=positions, cache=cache, **kwargs)


# ---------------------------------------------------------------- protocol and info


def test_info_and_vocabulary(lm):
    assert isinstance(lm.info, ModelInfo)
    assert (lm.info.name, lm.info.vocab_size) == ("table", len(CLASSIC_VOCAB))
    assert (lm.info.pad_token_id, lm.info.bos_token_id, lm.info.eos_token_id) == (0, 1, 2)
    assert lm.tokenizer.get_vocab() == {w: i for i, w in enumerate(CLASSIC_VOCAB)}
    assert len(lm.tokenizer) == lm.info.vocab_size
    assert lm.info.hidden_size == 16 and lm.info.num_hidden_layers == 1


@pytest.mark.parametrize(
    "prefix, probs",
    [
        ("", {"The": 1.0}),
        ("The", {"nice": 0.5, "dog": 0.4, "car": 0.1}),
        ("The dog", {"has": 0.9, "runs": 0.05, "and": 0.05}),
        ("The car drives", {"<eos>": 1.0}),
        ("The cat", {"<eos>": 1.0}),  # unknown prefix: fallback "eos"
        ("The dog has <eos>", {"<eos>": 1.0}),
    ],
)
def test_logits_are_exact_log_probs_of_the_prefix(lm, prefix, probs):
    ids = lm.tokenizer(prefix, return_tensors="pt").input_ids  # BOS + words
    out = run(lm, ids)
    assert out.logits.dtype == torch.float32 and out.logits.shape == (1, 1, lm.info.vocab_size)
    assert torch.equal(out.logits[0, -1], log_row(lm, probs))
    # a softmax gives the table back: exp(-1e4) is exactly 0 in float32
    expected = torch.tensor([probs.get(w, 0.0) for w in CLASSIC_VOCAB])
    torch.testing.assert_close(out.logits[0, -1].softmax(-1), expected, rtol=0, atol=1e-7)
    # log_softmax (what beam search applies first) changes them only by float32 rounding
    torch.testing.assert_close(out.logits[0, -1].log_softmax(-1), out.logits[0, -1])


def test_prompt_without_bos_is_keyed_the_same(lm):
    with_bos = run(lm, lm.tokenizer.encode("The dog", return_tensors="pt"))
    without = lm.tokenizer.encode("The dog", add_special_tokens=False, return_tensors="pt")
    assert torch.equal(run(lm, without).logits, with_bos.logits)


def test_left_padded_batch_matches_single_rows(lm):
    batch = lm.tokenizer(["The", "The nice", ""], return_tensors="pt")
    assert batch.input_ids.tolist() == [[0, 1, 4], [1, 4, 5], [0, 0, 1]]
    out = run(lm, batch.input_ids, batch.attention_mask)
    for row, text in enumerate(["The", "The nice", ""]):
        single = run(lm, lm.tokenizer(text, return_tensors="pt").input_ids)
        assert torch.equal(out.logits[row], single.logits[0])


def test_logits_to_keep(lm):
    ids = lm.tokenizer("The dog has", return_tensors="pt").input_ids  # 4 tokens
    every = run(lm, ids, logits_to_keep=0).logits
    assert every.shape == (1, 4, lm.info.vocab_size)
    expected = [{"The": 1.0}, {"nice": 0.5, "dog": 0.4, "car": 0.1}]
    expected += [{"has": 0.9, "runs": 0.05, "and": 0.05}, {"<eos>": 1.0}]
    for pos, probs in enumerate(expected):
        assert torch.equal(every[0, pos], log_row(lm, probs))
    assert torch.equal(run(lm, ids, logits_to_keep=2).logits, every[:, -2:])
    assert torch.equal(run(lm, ids, logits_to_keep=9).logits, every)  # at most new_len
    assert torch.equal(run(lm, ids).logits, every[:, -1:])


def test_incremental_decoding_with_cache_matches_one_pass(lm):
    batch = lm.tokenizer(["The", "The car"], return_tensors="pt")
    full_ids = torch.cat([batch.input_ids, torch.tensor([[6, 11], [15, 2]])], dim=1)
    mask = torch.cat([batch.attention_mask, torch.ones(2, 2, dtype=torch.long)], dim=1)
    one_pass = run(lm, full_ids, mask, logits_to_keep=0).logits  # (2, 5, vocab)

    cache = lm.new_cache(2)
    first = run(lm, batch.input_ids, batch.attention_mask, cache=cache).logits
    assert cache.length() == 3
    second = run(lm, full_ids[:, 3:4], mask[:, :4], cache=cache).logits
    third = run(lm, full_ids[:, 4:5], mask, cache=cache).logits
    assert cache.length() == 5 and torch.equal(cache.ids, full_ids)
    assert torch.equal(torch.cat([first, second, third], 1), one_pass[:, 2:])


def test_cache_reorder_crop_copy(lm):
    tok = lm.tokenizer
    batch = tok(["The nice", "The dog"], return_tensors="pt")
    cache = lm.new_cache(2)
    run(lm, batch.input_ids, batch.attention_mask, cache=cache)

    snapshot = cache.copy()
    cache.reorder(torch.tensor([1, 1, 0]))  # beams: row 1 twice, then row 0
    assert cache.ids.tolist() == [[1, 4, 6], [1, 4, 6], [1, 4, 5]]
    step = torch.tensor([[11], [12], [8]])  # has, runs, woman
    out = run(lm, step, cache=cache)
    assert torch.equal(out.logits[:, -1], log_row(lm, {"<eos>": 1.0}).expand(3, -1))
    assert snapshot.ids.tolist() == [[1, 4, 5], [1, 4, 6]]  # the copy did not move

    snapshot.crop(2)  # back to "<bos> The"
    assert snapshot.length() == 2
    out = run(lm, torch.tensor([[7], [5]]), cache=snapshot)  # car, nice
    assert torch.equal(out.logits[0, -1], log_row(lm, {"is": 0.3, "drives": 0.5, "turns": 0.2}))
    assert torch.equal(out.logits[1, -1], log_row(lm, {"woman": 0.4, "house": 0.3, "guy": 0.3}))
    snapshot.crop(-1)
    assert snapshot.ids.tolist() == [[1, 4], [1, 4]]
    assert isinstance(lm.new_cache(4), TableCache) and lm.new_cache(4).length() == 0


def test_hidden_states_are_fixed_token_embeddings(lm):
    ids = lm.tokenizer(["The dog", "The nice"], return_tensors="pt").input_ids
    out = run(lm, ids, output_hidden_states=True)
    assert len(out.hidden_states) == lm.info.num_hidden_layers + 1
    for layer in out.hidden_states:
        assert layer.shape == (2, 3, lm.info.hidden_size)
        assert torch.equal(layer, lm.embedding[ids])
    # same vocabulary, same matrix (in a new object); another vocabulary, another matrix
    assert torch.equal(TableLM.classic().embedding, lm.embedding)
    other = TableLM({"": {"a": 1.0}})
    assert not torch.equal(other.embedding[:4], lm.embedding[:4])
    assert run(lm, ids).hidden_states is None and run(lm, ids).attentions is None


def test_attentions_uniform_over_real_positions(lm):
    batch = lm.tokenizer(["The", "The dog"], return_tensors="pt")  # row 0 padded once
    cache = lm.new_cache(2)
    (att,) = run(
        lm, batch.input_ids, batch.attention_mask, cache, output_attentions=True
    ).attentions
    expected_row0 = [[0, 0, 0], [0, 1, 0], [0, 0.5, 0.5]]  # the padding query attends nowhere
    expected_row1 = [[1, 0, 0], [0.5, 0.5, 0], [1 / 3, 1 / 3, 1 / 3]]
    assert att.shape == (2, 1, 3, 3)
    torch.testing.assert_close(att[:, 0], torch.tensor([expected_row0, expected_row1]))
    mask = torch.cat([batch.attention_mask, torch.ones(2, 1, dtype=torch.long)], 1)
    (att,) = run(lm, torch.tensor([[2], [2]]), mask, cache, output_attentions=True).attentions
    torch.testing.assert_close(att[:, 0, 0], torch.tensor([[0, 1 / 3, 1 / 3, 1 / 3], [0.25] * 4]))


# ---------------------------------------------------------------- the table itself


def test_sequence_probability_and_enumeration(lm):
    assert lm.sequence_probability("The nice woman <eos>") == pytest.approx(0.2)
    assert lm.sequence_probability("The dog has <eos>") == pytest.approx(0.36)
    assert lm.sequence_probability("dog has", prompt="The") == pytest.approx(0.36)
    assert lm.sequence_probability("<bos> The dog") == pytest.approx(0.4)
    assert lm.sequence_probability("The cat") == 0.0
    ranked = lm.enumerate_sequences()
    assert len(ranked) == 9
    assert ranked[0] == ("The dog has <eos>", pytest.approx(0.36))
    assert sum(p for _, p in ranked) == pytest.approx(1.0)  # every path ends in EOS
    assert all(p == pytest.approx(lm.sequence_probability(t)) for t, p in ranked)
    assert [p for _, p in ranked] == sorted((p for _, p in ranked), reverse=True)
    assert lm.enumerate_sequences("The nice", max_new_words=1)[0] == ("woman", 0.4)


def test_to_frame(lm):
    frame = lm.to_frame()
    assert list(frame.columns) == ["prefix", "token", "prob"]
    assert len(frame) == 1 + 3 + 3 * 3 + 9
    assert frame.iloc[0].tolist() == ["", "The", 1.0]
    assert frame.groupby("prefix")["prob"].sum().tolist() == pytest.approx([1.0] * 14)
    dog = frame[frame.prefix == "The dog"]
    assert dict(zip(dog.token, dog.prob, strict=True)) == {"has": 0.9, "runs": 0.05, "and": 0.05}


def test_prefixes_as_tuples_and_custom_eos():
    lm = TableLM({(): {"a": 0.5, "</s>": 0.5}, ("a",): {"</s>": 1}}, eos="</s>")
    assert lm.tokenizer.eos_token == "</s>" and lm.info.eos_token_id == 2
    assert lm.tree == {(): {"a": 0.5, "</s>": 0.5}, ("a",): {"</s>": 1.0}}
    assert lm.next_word_probs(("a",)) == {"</s>": 1.0}
    out = run(lm, torch.tensor([[1]]))
    torch.testing.assert_close(out.logits[0, 0, 2:5].exp(), torch.tensor([0.5, 0.0, 0.5]))


def test_fallbacks():
    tree = {"": {"a": 0.25, "b": 0.75}}
    ids = torch.tensor([[1, 4, 4]])  # "a a": not in the table
    eos_fb = run(TableLM(tree), ids).logits[0, -1]
    assert eos_fb[2] == 0.0 and (eos_fb[[0, 1, 3, 4, 5]] == ZERO_PROB_LOGIT).all()
    uniform = run(TableLM(tree, fallback="uniform"), ids).logits[0, -1]
    assert torch.equal(uniform[[2, 4, 5]], torch.full((3,), math.log(1 / 3)))  # eos, a, b
    assert (uniform[[0, 1, 3]] == ZERO_PROB_LOGIT).all()  # pad, bos, unk never
    explicit = TableLM(tree, fallback={"c": 1.0})
    assert explicit.tokenizer.convert_tokens_to_ids("c") == 6  # fallback words join the vocab
    assert run(explicit, ids).logits[0, -1, 6] == 0.0
    strict = TableLM(tree, fallback="error")
    with pytest.raises(ValueError, match="prefix 'a a' is not in the table"):
        run(strict, ids)
    with pytest.raises(ValueError, match="fallback='error'"):
        strict.sequence_probability("a a")


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "tree, kwargs, message",
    [
        ({"The": {"a": 0.5, "b": 0.4}}, {}, r"prefix 'The' probabilities must sum to 1.*0\.9"),
        ({"": {"a": 1.2, "b": -0.2}}, {}, r"probability of 'a' must be in \[0, 1\], got 1\.2"),
        ({"": {"a": True}}, {}, "probability of 'a' must be in"),
        ({"": {"a": "1"}}, {}, "probability of 'a' must be in"),
        ({"": {}}, {}, "non-empty dict"),
        ({}, {}, "`tree` must be a non-empty dict"),
        ({"": {"two words": 1.0}}, {}, "one non-empty word"),
        ({"": {"<pad>": 1.0}}, {}, "reserved word '<pad>'"),
        ({"a  b": {"x": 1.0}, ("a", "b"): {"y": 1.0}}, {}, "prefix 'a b' twice"),
        ({3: {"x": 1.0}}, {}, "`tree prefix` must be"),
        ({"": {"a": 1.0}}, {"fallback": "random"}, "`fallback` must be one of"),
        ({"": {"a": 1.0}}, {"fallback": {"a": 0.5}}, "`fallback` probabilities must sum"),
        ({"": {"a": 1.0}}, {"eos": "<bos>"}, "`eos` must differ"),
        ({"": {"a": 1.0}}, {"eos": "end here"}, "`eos` must be one non-empty word"),
        ({"": {"a": 1.0}}, {"hidden_size": 0}, "`hidden_size` must be a positive int"),
    ],
)
def test_constructor_errors(tree, kwargs, message):
    with pytest.raises(ValueError, match=message):
        TableLM(tree, **kwargs)


def test_rows_within_tolerance_are_accepted():
    lm = TableLM({"": {"a": 0.1, "b": 0.2, "c": 0.7 + 5e-7}})
    assert lm.next_word_probs("")["c"] == pytest.approx(0.7)


def test_forward_errors(lm):
    ids = torch.tensor([[1, 4]])
    ones = torch.ones(1, 2, dtype=torch.long)
    cases = [
        (dict(input_ids=torch.tensor([1, 4])), "`input_ids` must be a 2-D"),
        (dict(input_ids=torch.tensor([[1.0, 4.0]])), "integer ids"),
        (dict(input_ids=torch.tensor([[1, 17]])), r"`input_ids` must be in \[0, 16\]"),
        (dict(input_ids=torch.zeros(1, 0, dtype=torch.long)), "no new tokens"),
        (dict(attention_mask=torch.ones(1, 3)), r"`attention_mask` must cover.*\(1, 2\)"),
        (dict(cache=object()), "`cache` must be a TableCache"),
        (dict(logits_to_keep=-1), "`logits_to_keep` must be >= 0"),
        (dict(logits_to_keep=1.5), "`logits_to_keep` must be an int"),
    ]
    for override, message in cases:
        kwargs = (
            dict(input_ids=ids, attention_mask=ones, position_ids=ids, cache=lm.new_cache(1))
            | override
        )
        input_ids = kwargs.pop("input_ids")
        with pytest.raises(ValueError, match=message):
            lm.forward(input_ids, **kwargs)
    cache = lm.new_cache(1)
    run(lm, ids, cache=cache)
    with pytest.raises(ValueError, match="`input_ids` has 2 rows but the cache holds 1"):
        run(lm, torch.tensor([[4], [5]]), torch.ones(2, 3), cache=cache)
    assert cache.length() == 2  # a rejected call leaves the cache as it was


# ---------------------------------------------------------------- tokenizer


def test_tokenizer_round_trips(lm):
    tok = lm.tokenizer
    assert tok.encode("The dog barks") == [1, 4, 6, 3]  # unknown word -> <unk>
    assert tok.encode("The  dog", add_special_tokens=False) == [4, 6]
    assert tok.encode("The", return_tensors="pt").tolist() == [[1, 4]]
    assert tok.decode([1, 4, 6, 2]) == "<bos> The dog <eos>"
    assert tok.decode(torch.tensor([1, 4, 6, 2]), skip_special_tokens=True) == "The dog"
    assert tok.decode(4) == "The"
    assert tok.batch_decode(torch.tensor([[0, 1, 4], [1, 4, 5]]), skip_special_tokens=True) == [
        "The",
        "The nice",
    ]
    assert tok.convert_ids_to_tokens(5) == "nice"
    assert tok.convert_ids_to_tokens([4, 5]) == ["The", "nice"]
    assert tok.convert_tokens_to_ids("dog") == 6 and tok.convert_tokens_to_ids("cat") == 3
    assert tok.convert_tokens_to_ids(["dog", "nice"]) == [6, 5]
    assert (tok.bos_token, tok.eos_token, tok.pad_token, tok.unk_token) == (
        "<bos>",
        "<eos>",
        "<pad>",
        "<unk>",
    )
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id, tok.unk_token_id) == (1, 2, 0, 3)
    assert tok.padding_side == "left" and sorted(tok.all_special_ids) == [0, 1, 2, 3]


def test_tokenizer_call_padding_and_lists():
    tok = WordTokenizer(["<pad>", "<bos>", "<eos>", "<unk>", "a", "b"])
    batch = tok(["a", "a b b"])
    assert batch.input_ids.tolist() == [[0, 0, 1, 4], [1, 4, 5, 5]]
    assert batch["attention_mask"].tolist() == [[0, 0, 1, 1], [1, 1, 1, 1]]
    tok.padding_side = "right"
    assert tok(["a", "a b b"]).input_ids.tolist() == [[1, 4, 0, 0], [1, 4, 5, 5]]
    assert tok("b a", return_tensors=None) == {"input_ids": [1, 5, 4], "attention_mask": [1, 1, 1]}
    lists = tok(["a", "b b"], padding=False, return_tensors=None)
    assert lists.input_ids == [[1, 4], [1, 5, 5]]
    with pytest.raises(ValueError, match="padding=True"):
        tok(["a", "b b"], padding=False)
    with pytest.raises(ValueError, match="`return_tensors` must be None or 'pt'"):
        tok("a", return_tensors="np")
    with pytest.raises(ValueError, match="token id 9 is out of range"):
        tok.decode([9])
    with pytest.raises(ValueError, match="`eos_token` '<end>' is not in the vocabulary"):
        WordTokenizer(["<pad>", "<bos>", "<unk>"], eos_token="<end>")


def test_chat_template_joins_contents(lm):
    messages = [{"role": "system", "content": "The"}, {"role": "user", "content": "dog"}]
    tok = lm.tokenizer
    assert tok.apply_chat_template(messages, tokenize=False) == "The dog"
    assert tok.apply_chat_template(messages) == [1, 4, 6]
    assert tok.apply_chat_template(messages, return_tensors="pt").tolist() == [[1, 4, 6]]
    as_dict = tok.apply_chat_template(messages, return_dict=True, return_tensors="pt")
    assert as_dict.attention_mask.tolist() == [[1, 1, 1]]
    with pytest.raises(ValueError, match=r"`conversation\[1\]` must be a dict"):
        tok.apply_chat_template([{"content": "a"}, {"role": "user"}])
    with pytest.raises(ValueError, match="`conversation` must be a list"):
        tok.apply_chat_template({"content": "a"})


# ---------------------------------------------------------------- decoding on the table


def greedy(lm: TableLM, prompt: str, max_new_tokens: int = 10) -> list[int]:
    """Argmax decoding with the cache, one token per forward, until EOS."""
    ids = lm.tokenizer.encode(prompt, return_tensors="pt")  # (1, n)
    cache, new = lm.new_cache(1), ids
    for _ in range(max_new_tokens):
        mask = torch.ones(1, cache.length() + new.shape[1], dtype=torch.long)
        logits = lm.forward(new, attention_mask=mask, position_ids=new, cache=cache).logits
        new = logits[:, -1].argmax(-1, keepdim=True)  # (1, 1)
        ids = torch.cat([ids, new], dim=1)
        if new.item() == lm.info.eos_token_id:
            break
    return ids[0].tolist()


def test_greedy_misses_the_most_probable_sequence(lm):
    tokens = greedy(lm, "The")
    text = lm.tokenizer.decode(tokens, skip_special_tokens=True)
    assert tokens[-1] == lm.info.eos_token_id and text == "The nice woman"
    greedy_prob = lm.sequence_probability(lm.tokenizer.decode(tokens[1:]))
    best_text, best_prob = lm.enumerate_sequences()[0]
    assert best_text == "The dog has <eos>"
    assert greedy_prob == pytest.approx(0.2) and best_prob == pytest.approx(0.36)
    assert greedy_prob < best_prob


def test_transformers_generate_cannot_run_on_the_table(lm):
    from transformers import GenerationMixin, PreTrainedModel

    assert not isinstance(lm, (torch.nn.Module, PreTrainedModel))
    ids = lm.tokenizer("The", return_tensors="pt").input_ids
    with pytest.raises(AttributeError):
        GenerationMixin.generate(lm, ids, max_new_tokens=3)


def _hf_wrapper(table: TableLM):
    """A test-only transformers model that recomputes the table on the whole sequence."""
    from transformers import GenerationMixin, PretrainedConfig, PreTrainedModel
    from transformers.modeling_outputs import CausalLMOutputWithPast

    class TableForHF(PreTrainedModel, GenerationMixin):
        config_class = PretrainedConfig

        def __init__(self):
            info = table.info
            super().__init__(
                PretrainedConfig(
                    vocab_size=info.vocab_size,
                    bos_token_id=info.bos_token_id,
                    eos_token_id=info.eos_token_id,
                    pad_token_id=info.pad_token_id,
                )
            )
            self.anchor = torch.nn.Parameter(torch.zeros(1))  # gives the model a device

        def forward(self, input_ids, attention_mask=None, **_):
            out = table.forward(
                input_ids,
                attention_mask=attention_mask,
                position_ids=input_ids,
                cache=table.new_cache(input_ids.shape[0]),
                logits_to_keep=0,
            )
            return CausalLMOutputWithPast(logits=out.logits)

    return TableForHF().eval()


@pytest.mark.filterwarnings("ignore")
def test_reference_greedy_and_beam_search_through_a_wrapper_agree_with_the_table(lm):
    hf = _hf_wrapper(lm)
    batch = lm.tokenizer("The", return_tensors="pt")
    common = dict(use_cache=False, return_dict_in_generate=True, output_scores=True)
    out = hf.generate(**batch, max_new_tokens=5, do_sample=False, **common)
    assert out.sequences[0].tolist() == greedy(lm, "The")
    # greedy scores are the raw logits: the table's log-probs
    assert torch.equal(out.scores[0][0], log_row(lm, {"nice": 0.5, "dog": 0.4, "car": 0.1}))

    out = hf.generate(**batch, max_new_tokens=5, num_beams=2, num_return_sequences=2, **common)
    texts = lm.tokenizer.batch_decode(out.sequences, skip_special_tokens=True)
    assert texts == ["The dog has", "The nice woman"]
    # sequences_scores: sum of log-probs over generated length (3 tokens, length_penalty 1)
    expected = torch.tensor([math.log(0.36) / 3, math.log(0.2) / 3])
    torch.testing.assert_close(out.sequences_scores, expected)


def test_stage_summary_masses_in_both_terms():
    """removed_mass is in the previous stage's terms, raw_mass_* in the raw distribution's:
    after 'The' the table gives nice .5, dog .4, car .1; top_k=2 cuts car, then top_p=0.5
    cuts dog, which had 0.4 / 0.9 of what top_k left."""
    from genlab import LM

    lm = LM(TableLM.classic())
    res = lm.generate("The", do_sample=True, top_k=2, top_p=0.5, max_new_tokens=1, trace=True)
    summary = res.trace.stage_summary(0).set_index("stage")
    assert list(summary.index) == ["raw", "top_k", "top_p", "final"]
    expect = {  # stage: (removed_mass, raw_mass_kept, raw_mass_removed)
        "raw": (0.0, 1.0, 0.0),
        "top_k": (0.1, 0.9, 0.1),
        "top_p": (0.4 / 0.9, 0.5, 0.4),
        "final": (0.0, 0.5, 0.0),
    }
    for stage, values in expect.items():
        got = tuple(summary.loc[stage, ["removed_mass", "raw_mass_kept", "raw_mass_removed"]])
        assert got == pytest.approx(values, abs=1e-6), stage
    assert summary.loc["top_p", "removed_tokens"] == 1
    with pytest.raises(ValueError, match=r"one of the steps recorded, \[0\]; got 3"):
        res.trace.stage_summary(3)
