"""Encoder-decoder generation (T5, BART, Speech2Text built tiny and random) against
transformers 4.56.2 on the same model objects: greedy, sampling, beam search, beam
sampling, group beam and constrained beam; inputs, outputs, processors, the Run and
bad input."""

from __future__ import annotations

import warnings

import pytest
import torch
from helpers import assert_same

import genlab
from genlab.run.encdec import decoder_start_ids, initial_decoder_ids, split_encoder_kwargs

VOCAB = 96


def tiny_t5(seed: int = 0):
    from transformers import T5Config, T5ForConditionalGeneration

    torch.manual_seed(seed)
    cfg = T5Config(
        vocab_size=VOCAB,
        d_model=32,
        d_kv=8,
        d_ff=64,
        num_layers=2,
        num_decoder_layers=2,
        num_heads=4,
        decoder_start_token_id=0,
        pad_token_id=0,
        eos_token_id=1,
    )
    return T5ForConditionalGeneration(cfg).eval()


def tiny_bart(seed: int = 0):
    from transformers import BartConfig, BartForConditionalGeneration

    torch.manual_seed(seed)
    cfg = BartConfig(
        vocab_size=VOCAB,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
        bos_token_id=0,
        pad_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=2,
        forced_bos_token_id=0,
        forced_eos_token_id=2,
        attn_implementation="eager",
    )
    return BartForConditionalGeneration(cfg).eval()


def tiny_speech2text(seed: int = 0):
    from transformers import Speech2TextConfig, Speech2TextForConditionalGeneration

    torch.manual_seed(seed)
    cfg = Speech2TextConfig(
        vocab_size=VOCAB,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        input_feat_per_channel=8,
        input_channels=1,
        conv_channels=16,
        conv_kernel_sizes=[5, 5],
        num_conv_layers=2,
        max_source_positions=64,
        max_target_positions=64,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        decoder_start_token_id=2,
        attn_implementation="eager",
    )
    return Speech2TextForConditionalGeneration(cfg).eval()


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """These models are tiny: one thread is faster than two and steadier on a busy machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def models():
    return {"t5": tiny_t5(), "bart": tiny_bart(), "s2t": tiny_speech2text()}


# sources: T5 pads with 0 (the mask is inferred from it), BART with 1
SOURCES = {
    "t5": torch.tensor([[5, 17, 33, 8, 40, 1], [4, 9, 21, 11, 1, 0]]),
    "bart": torch.tensor([[0, 5, 17, 33, 8, 2], [0, 4, 9, 21, 2, 1]]),
}
OUT = dict(return_dict_in_generate=True, output_scores=True, output_logits=True)

GREEDY = [
    ("plain", {}),
    ("encoder_rep", {"encoder_repetition_penalty": 1.8}),
    ("encoder_no_repeat", {"encoder_no_repeat_ngram_size": 2}),
    ("forced_bos", {"forced_bos_token_id": 9}),
    ("rep_ngram", {"repetition_penalty": 1.5, "no_repeat_ngram_size": 2}),
    ("min_new", {"min_new_tokens": 6}),
    ("start_per_row", {"decoder_start_token_id": [3, 7]}),
    ("return_2", {"num_return_sequences": 1, "max_length": 9}),
]
SAMPLE = [
    ("seed0", {"seed": 0}),
    ("seed1_topk", {"seed": 1, "top_k": 5}),
    ("topp_temp", {"seed": 2, "top_p": 0.8, "temperature": 0.7}),
    ("return_3", {"seed": 3, "num_return_sequences": 3}),
    (
        "encoder_procs",
        {"seed": 4, "encoder_repetition_penalty": 1.5, "encoder_no_repeat_ngram_size": 2},
    ),
]
BEAM = [
    ("beams3", {"num_beams": 3}),
    ("return_2", {"num_beams": 4, "num_return_sequences": 2}),
    ("length_penalty", {"num_beams": 3, "length_penalty": 0.5, "early_stopping": True}),
    (
        "encoder_procs",
        {"num_beams": 3, "encoder_repetition_penalty": 1.5, "encoder_no_repeat_ngram_size": 2},
    ),
    ("forced_bos", {"num_beams": 2, "forced_bos_token_id": 9}),
]
BEAM_SAMPLE = [
    ("seed0", {"seed": 0, "num_beams": 3}),
    ("seed1_return", {"seed": 1, "num_beams": 3, "num_return_sequences": 2, "top_k": 10}),
]
GROUP = [
    ("groups2", {"num_beams": 4, "num_beam_groups": 2, "diversity_penalty": 1.0}),
    (
        "groups3_return",
        {"num_beams": 6, "num_beam_groups": 3, "diversity_penalty": 0.5, "num_return_sequences": 3},
    ),
]
CONSTRAINED = [
    ("force_word", {"num_beams": 3, "force_words_ids": [[7]]}),
    ("force_phrase_or", {"num_beams": 4, "force_words_ids": [[[12, 13], [30]], [20]]}),
]
STRATEGIES = {
    "greedy": GREEDY,
    "sample": SAMPLE,
    "beam": BEAM,
    "beam_sample": BEAM_SAMPLE,
    "group_beam": GROUP,
    "constrained_beam": CONSTRAINED,
}
PARITY = [
    pytest.param(model, strategy, cfg, id=f"{model}-{strategy}-{name}")
    for model in ("t5", "bart")
    for strategy, cases in STRATEGIES.items()
    for name, cfg in cases
]


def _generate_both(model, source, *, seed=None, **cfg):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(0 if seed is None else seed)
        ref = model.generate(source, **cfg)
        torch.manual_seed(0 if seed is None else seed)
        ours = genlab.generate(model, source, **cfg)
    return ref, ours


@pytest.mark.parametrize("model_name, strategy, cfg", PARITY)
def test_parity_with_reference(models, model_name, strategy, cfg):
    cfg = dict(cfg)
    seed = cfg.pop("seed", None)
    if strategy in ("sample", "beam_sample"):
        cfg["do_sample"] = True
    cfg.setdefault("max_new_tokens", 8)
    ref, ours = _generate_both(models[model_name], SOURCES[model_name], seed=seed, **OUT, **cfg)
    assert_same(ref, ours, same_type=True)
    # the decoder prompt is the start token (or one per row), not the source
    start = cfg.get("decoder_start_token_id", models[model_name].config.decoder_start_token_id)
    rows = ours.sequences.shape[0] // 2
    expected = torch.tensor(start if isinstance(start, list) else [start] * 2)
    assert torch.equal(ours.sequences[:, 0], expected.repeat_interleave(rows))


def test_parity_case_counts():
    """The report's numbers: parity cases per strategy (two models each)."""
    counts = {s: 2 * len(c) for s, c in STRATEGIES.items()}
    assert counts == {
        "greedy": 16,
        "sample": 10,
        "beam": 10,
        "beam_sample": 4,
        "group_beam": 4,
        "constrained_beam": 4,
    }


@pytest.mark.parametrize("strategy", ["greedy", "beam"])
def test_every_output_field_matches(models, strategy):
    model = models["bart"]
    cfg = dict(OUT, output_attentions=True, output_hidden_states=True, max_new_tokens=5)
    if strategy == "beam":
        cfg["num_beams"] = 3
    ref, ours = _generate_both(model, SOURCES["bart"], **cfg)
    assert_same(ref, ours, same_type=True)
    assert set(ours.keys()) == set(ref.keys())
    # encoder fields: one tuple per layer (embeddings first for hidden states), not expanded
    for name in ("encoder_attentions", "encoder_hidden_states"):
        assert len(getattr(ours, name)) == len(getattr(ref, name))
        for a, b in zip(getattr(ref, name), getattr(ours, name), strict=True):
            assert a.shape[0] == 2
            torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    # decoder fields: per step, per layer
    for name in ("decoder_attentions", "cross_attentions", "decoder_hidden_states"):
        assert len(getattr(ours, name)) == len(ours.scores)
        for step_ref, step_ours in zip(getattr(ref, name), getattr(ours, name), strict=True):
            for a, b in zip(step_ref, step_ours, strict=True):
                torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    assert ours.cross_attentions[0][0].shape[-1] == SOURCES["bart"].shape[1]
    assert type(ours.past_key_values).__name__ == "EncoderDecoderCache"
    assert ours.past_key_values.get_seq_length() == ref.past_key_values.get_seq_length()


def test_user_decoder_input_ids(models):
    model, src = models["t5"], SOURCES["t5"]
    # without the start token: it is put in front; with it: kept as given
    for dec in ([[5, 6], [7, 8]], [[0, 5], [0, 7]]):
        dec = torch.tensor(dec)
        ref, ours = _generate_both(model, src, decoder_input_ids=dec, max_new_tokens=5, **OUT)
        assert_same(ref, ours, same_type=True)
    assert ours.sequences[:, :2].tolist() == [[0, 5], [0, 7]]
    # a decoder mask (with a hole) travels and grows with the decoder tokens
    dec = torch.tensor([[5, 6, 9], [7, 8, 9]])
    dmask = torch.tensor([[1, 1, 1], [0, 1, 1]])
    ref, ours = _generate_both(
        model, src, decoder_input_ids=dec, decoder_attention_mask=dmask, max_new_tokens=5, **OUT
    )
    assert_same(ref, ours, same_type=True)
    assert ours.sequences.shape[1] == 4 + 5


def test_precomputed_encoder_outputs_and_explicit_mask(models):
    model, src = models["bart"], SOURCES["bart"]
    mask = (src != 1).long()

    def encoded():
        return model.get_encoder()(input_ids=src, attention_mask=mask, return_dict=True)

    torch.manual_seed(0)
    ref = model.generate(
        encoder_outputs=encoded(), attention_mask=mask, max_new_tokens=6, num_beams=2, **OUT
    )
    enc = encoded()
    ours = genlab.generate(
        model, encoder_outputs=enc, attention_mask=mask, max_new_tokens=6, num_beams=2, **OUT
    )
    assert_same(ref, ours, same_type=True)
    assert enc.last_hidden_state.shape[0] == 2  # the caller's object is not expanded in place
    plain = genlab.generate(model, src, attention_mask=mask, max_new_tokens=6, num_beams=2)
    assert torch.equal(plain, ours.sequences)


def test_input_features_reach_the_encoder(models):
    model = models["s2t"]
    torch.manual_seed(5)
    feats = torch.randn(2, 24, 8) * 3
    for cfg in ({}, {"num_beams": 3}, {"do_sample": True}):
        torch.manual_seed(1)
        ref = model.generate(input_features=feats, max_new_tokens=6, **OUT, **cfg)
        torch.manual_seed(1)
        ours = genlab.generate(model, input_features=feats, max_new_tokens=6, **OUT, **cfg)
        assert_same(ref, ours, same_type=True)
        torch.manual_seed(1)
        positional = genlab.generate(model, feats, max_new_tokens=6, **cfg)
        assert torch.equal(positional, ours.sequences)


@pytest.mark.parametrize("num_beams", [1, 3])
def test_encoder_runs_once(models, num_beams):
    model, src = models["t5"], SOURCES["t5"]
    calls = {"encoder": 0, "model": 0}
    hooks = [
        model.get_encoder().register_forward_hook(
            lambda *a: calls.__setitem__("encoder", calls["encoder"] + 1)
        ),
        model.register_forward_hook(lambda *a: calls.__setitem__("model", calls["model"] + 1)),
    ]
    try:
        out = genlab.generate(model, src, max_new_tokens=6, min_new_tokens=6, num_beams=num_beams)
    finally:
        for h in hooks:
            h.remove()
    assert calls["encoder"] == 1
    assert calls["model"] == out.shape[1] - 1 == 6  # one decoder step per new token


def test_compute_transition_scores_input_length_one(models):
    """The reference's documented example: for encoder-decoder models the generated tokens
    start after one decoder token."""
    model, src = models["bart"], SOURCES["bart"]
    ref, ours = _generate_both(model, src, max_new_tokens=6, **OUT)
    ts = genlab.compute_transition_scores(ours.sequences, ours.scores, normalize_logits=True)
    expected = model.compute_transition_scores(ref.sequences, ref.scores, normalize_logits=True)
    torch.testing.assert_close(ts, expected, atol=1e-5, rtol=0)
    generated = ours.sequences[:, 1:]
    assert ts.shape == generated.shape
    logp = torch.stack([torch.log_softmax(s, -1) for s in ours.scores], 1)
    torch.testing.assert_close(ts, logp.gather(2, generated[..., None])[..., 0])
    # beams: summing a row over its length (length_penalty 1) gives sequences_scores
    ref, ours = _generate_both(model, src, max_new_tokens=6, num_beams=3, **OUT)
    ts = genlab.compute_transition_scores(ours.sequences, ours.scores, ours.beam_indices)
    expected = model.compute_transition_scores(ref.sequences, ref.scores, ref.beam_indices)
    torch.testing.assert_close(ts, expected, atol=1e-5, rtol=0)
    length = (ours.beam_indices >= 0).sum(1)
    torch.testing.assert_close(ts.sum(1) / length, ours.sequences_scores, atol=1e-4, rtol=0)


def test_encoder_processors_change_the_result(models):
    """Guards against the encoder-side processors silently seeing the decoder prompt."""
    model, src = models["t5"], SOURCES["t5"]
    plain = genlab.generate(model, src, max_new_tokens=8, **OUT)
    banned = genlab.generate(model, src, max_new_tokens=8, encoder_no_repeat_ngram_size=1, **OUT)
    source_ids = set(src[0].tolist()) - {0}
    assert not source_ids & set(banned.sequences[0, 1:].tolist())
    assert any(torch.isinf(s[0, list(source_ids)]).all() for s in banned.scores)
    assert not torch.isinf(plain.scores[0][0, list(source_ids)]).any()


def test_kwargs_split_and_start_ids():
    kw = {
        "head_mask": 1,
        "decoder_head_mask": 2,
        "cross_attn_head_mask": 3,
        "use_cache": 4,
        "attention_mask": 5,
    }
    assert sorted(split_encoder_kwargs(kw)) == ["attention_mask", "head_mask"]
    assert decoder_start_ids(torch.tensor([4, 5]), 2).tolist() == [[4], [5]]
    ids, mask = initial_decoder_ids(
        torch.tensor([[0, 4], [5, 6]]), torch.tensor([[0], [0]]), torch.tensor([[1, 1], [1, 1]])
    )
    assert ids.tolist() == [[0, 4], [5, 6]] and mask.shape == (2, 2)  # one row starts right
    ids, mask = initial_decoder_ids(
        torch.tensor([[4], [5]]), torch.tensor([[0], [0]]), torch.tensor([[1], [0]])
    )
    assert ids.tolist() == [[0, 4], [0, 5]] and mask.tolist() == [[1, 1], [1, 0]]


# -- the Run, hooks, trace ---------------------------------------------------------------
def _word_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"w{i}": i for i in range(VOCAB)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="w2"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="w0", eos_token="w1", unk_token="w2"
    )


def test_run_steps_fork_and_rewind_like_generate(models):
    model, src = models["t5"], SOURCES["t5"]
    full = genlab.generate(model, src, max_new_tokens=7, min_new_tokens=7)
    run = genlab.start(model, input_ids=src, max_new_tokens=7, min_new_tokens=7, keep_history=True)
    assert run.prompt_length == 1 and run.sequences.tolist() == [[0], [0]]
    for _ in range(3):
        run.step()
    other = run.fork()
    assert torch.equal(run.run(), full)
    assert torch.equal(other.run(), full)
    run.rewind(4)
    assert run.sequences.shape[1] == 4
    assert torch.equal(run.run(), full)


def test_hooks_see_and_steer_decoder_steps(models):
    model, src = models["bart"], SOURCES["bart"]
    seen = []

    def only_seven(logits, *, step):
        seen.append((step, tuple(logits.shape)))
        out = torch.full_like(logits, -1e4)
        out[:, 7] = 0.0
        return out

    run = genlab.start(
        model,
        input_ids=src,
        max_new_tokens=4,
        num_beams=3,
        forced_bos_token_id=None,
        forced_eos_token_id=None,
    )
    with run.hooks(logits=only_seven):
        out = run.run()
    assert seen == [(i, (6, VOCAB)) for i in range(4)]  # rows = batch * num_beams
    assert out[:, 1:].eq(7).all()


def test_trace_and_beam_tree_name_decoder_tokens(models):
    lm = genlab.load(models["t5"], _word_tokenizer())
    res = lm.generate("w5 w17 w33 w8", max_new_tokens=5, min_new_tokens=5, trace=True)
    assert res.prompt_length == 1
    steps = res.trace.steps()
    generated = res.sequences[0, 1:].tolist()
    assert steps.token_id.tolist() == generated
    assert steps.token.tolist() == [f"w{t}" for t in generated]
    assert res.text == " ".join(f"w{t}" for t in generated)
    beams = lm.generate("w5 w17 w33 w8", max_new_tokens=4, num_beams=3, trace=True)
    tree = beams.trace.beam_tree()
    assert len(tree) and set(tree.token) <= {f"w{i}" for i in range(VOCAB)}
    best = tree[tree.returned].sort_values("step").token.tolist()
    n_generated = int((beams.output.beam_indices[0] >= 0).sum())
    assert best == [f"w{t}" for t in beams.sequences[0, 1 : 1 + n_generated].tolist()]


# -- bad input ---------------------------------------------------------------------------
def test_decoder_only_model_rejects_encoder_decoder_inputs(hf_llama):
    ids = torch.tensor([[5, 6, 7]])
    for kw in (
        {"decoder_input_ids": torch.tensor([[0]])},
        {"encoder_outputs": object()},
        {"decoder_attention_mask": torch.ones(1, 1, dtype=torch.long)},
    ):
        with pytest.raises(ValueError, match=f"{next(iter(kw))}.*encoder-decoder.*decoder-only"):
            genlab.generate(hf_llama, ids, max_new_tokens=2, **kw)


def test_encoder_decoder_model_rejects_bad_inputs(models):
    model, src = models["t5"], SOURCES["t5"]
    with pytest.raises(ValueError, match="position_ids"):
        genlab.generate(model, src, position_ids=torch.arange(6)[None])
    with pytest.raises(ValueError, match="encoder-decoder model: give its source"):
        genlab.generate(model, max_new_tokens=2)
    with pytest.raises(ValueError, match="decoder_start_token_id has 3 ids.*one id per input"):
        genlab.generate(model, src, decoder_start_token_id=[0, 0, 0])
    with pytest.raises(ValueError, match=r"decoder_input_ids contain ids outside .*\[500\]"):
        genlab.generate(model, src, decoder_input_ids=torch.tensor([[500], [3]]))
    with pytest.raises(ValueError, match=r"input_ids contain ids outside .*\[96\]"):
        genlab.generate(model, torch.tensor([[5, 96]]))
    with pytest.raises(ValueError, match="decoder_attention_mask has shape"):
        genlab.generate(
            model,
            src,
            decoder_input_ids=torch.tensor([[0, 4], [0, 5]]),
            decoder_attention_mask=torch.ones(2, 3, dtype=torch.long),
        )
    with pytest.raises(ValueError, match="attention_mask has shape"):
        genlab.generate(model, src, attention_mask=torch.ones(2, 2, dtype=torch.long))


def test_inputs_embeds_feed_the_encoder(models):
    model, src = models["t5"], SOURCES["t5"]
    embeds = model.get_input_embeddings()(src).detach()
    ref, ours = _generate_both(model, None, inputs_embeds=embeds, max_new_tokens=5, **OUT)
    assert_same(ref, ours, same_type=True)
    with pytest.raises(ValueError, match="inputs_embeds and input_ids were both given"):
        genlab.generate(model, src, inputs_embeds=embeds)


def test_beam_run_rewinds_by_replay(models):
    model, src = models["bart"], SOURCES["bart"]
    full = genlab.generate(model, src, max_new_tokens=6, num_beams=3)
    run = genlab.start(model, input_ids=src, max_new_tokens=6, num_beams=3, keep_history=True)
    for _ in range(4):
        run.step()
    run.rewind(3)
    assert run.step_index == 1
    assert torch.equal(run.run(), full)


@pytest.mark.parametrize(
    "cfg", [{"do_sample": False}, {"do_sample": True, "num_return_sequences": 2}]
)
def test_streamer_puts_equal_reference(models, cfg):
    """A streamer gets the decoder's start ids (one row per returned sequence) and then each
    step's tokens, as from the reference."""
    from helpers import assert_streams_like_reference

    assert_streams_like_reference(models["t5"], SOURCES["t5"][:1], max_new_tokens=5, **cfg)
