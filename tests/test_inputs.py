"""Bad prompts and settings get a clear error before any model work, or work as a
transformers user expects: tokenizer outputs as prompts, tokenizers without a pad token,
the reference's length checks, and the cases where genlab goes beyond the reference
(settings on which the reference hangs, overflows or fails with an unrelated error)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import genlab
from genlab.models.architectures import build_decoder

IDS = torch.tensor([[5, 6, 7, 8]])


@pytest.fixture(scope="module")
def builtin(hf_llama):
    """The same weights on genlab's built-in decoder."""
    return build_decoder(hf_llama.config.to_dict(), hf_llama.state_dict(), name="tiny")


@pytest.fixture(scope="module")
def bpe_tokenizer():
    """A byte-level BPE transformers tokenizer with EOS but no pad token (like GPT-2)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=90,
        special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()[:60],
        show_progress=False,
    )
    backend.train_from_iterator(["once upon a time there was a fox"] * 4, trainer=trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        model_input_names=["input_ids", "attention_mask"],  # as GPT-2's tokenizer
    )
    assert tok.pad_token is None and len(tok) <= 96
    return tok


# ------------------------------------------------------------------------- prompts


@pytest.mark.parametrize("path", ["hf", "builtin"])
@pytest.mark.parametrize(
    "prompt, message",
    [
        (torch.zeros((1, 0), dtype=torch.long), r"input_ids is empty \(shape \(1, 0\)\)"),
        (torch.tensor([[5.0, 6.0]]), "integer token ids .* got a torch.float32 tensor"),
        (torch.tensor([[True, False]]), "got a torch.bool tensor"),
        (torch.tensor([[5, 6]], dtype=torch.int8), "got a torch.int8 tensor"),
        ([[5, 6], [7]], r"rows of different lengths \[2, 1\]: pad them"),
        ([5.0, 6.0], r"integer token ids; got 5.0 \(float\)"),
        ([True, 5], r"integer token ids; got True \(bool\)"),
        ({"text": "x"}, r"mapping with keys \['text'\] but no 'input_ids'"),
        ({"input_ids": [[5]], "token_type_ids": [[0]]}, r"keys \['token_type_ids'\] besides"),
    ],
)
def test_bad_prompts_fail_before_the_model(hf_llama, builtin, path, prompt, message):
    model = hf_llama if path == "hf" else builtin
    with pytest.raises(ValueError, match=message) as info:
        genlab.generate(model, prompt, max_new_tokens=2)
    assert str(info.traceback[-1].path).endswith("genlab/run/inputs.py")  # checked up front


def test_int16_and_uint8_ids_work_like_int64(hf_llama):
    want = genlab.generate(hf_llama, IDS, max_new_tokens=3)
    for dtype in (torch.int16, torch.uint8, torch.int32):
        assert torch.equal(genlab.generate(hf_llama, IDS.to(dtype), max_new_tokens=3), want)


def test_tokenizer_output_is_the_prompt(hf_llama, bpe_tokenizer):
    tok = bpe_tokenizer
    tok.pad_token, tok.padding_side = tok.eos_token, "left"
    try:
        enc = tok(["once upon", "a fox was there"], padding=True, return_tensors="pt")
        want = hf_llama.generate(**enc, max_new_tokens=4, do_sample=False)
        ours = genlab.generate(hf_llama, enc, max_new_tokens=4)  # BatchEncoding, positional
        assert torch.equal(ours, want)
        ours = genlab.generate(hf_llama, input_ids=dict(enc), max_new_tokens=4)
        assert torch.equal(ours, want)
        lm = genlab.load(hf_llama, tok)
        assert (
            lm.generate(tok("once upon"), max_new_tokens=4).text
            == lm.generate("once upon", max_new_tokens=4).text
        )
        assert lm.generate(enc, max_new_tokens=4).sequences.tolist() == want.tolist()
    finally:
        tok.pad_token, tok.padding_side = None, "right"
    with pytest.raises(ValueError, match="attention_mask was given twice"):
        genlab.generate(hf_llama, dict(enc), attention_mask=enc["attention_mask"])


def test_tokenizer_without_pad_token_pads_with_eos(hf_llama, bpe_tokenizer, caplog):
    tok = bpe_tokenizer
    lm = genlab.load(hf_llama, tok)
    one = lm.generate("once upon a time", max_new_tokens=4)
    want = hf_llama.generate(**tok("once upon a time", return_tensors="pt"), max_new_tokens=4)
    assert one.sequences.tolist() == want.tolist()
    with caplog.at_level("WARNING", logger="genlab.lm"):
        two = lm.generate(["once upon a time", "a fox"], max_new_tokens=4)
    # the tokenizer pads with EOS; the model has a pad id (0), so no "Setting pad_token_id"
    assert "has no pad token: the prompts are padded on the right" in caplog.text
    assert "Setting `pad_token_id`" not in caplog.text
    tok.pad_token = tok.eos_token  # what a reference user does by hand
    try:
        enc = tok(["once upon a time", "a fox"], padding=True, return_tensors="pt")
        want = hf_llama.generate(**enc, max_new_tokens=4, do_sample=False)
    finally:
        tok.pad_token = None
    # right padding (this tokenizer's side) as in the reference, EOS as the pad id
    assert two.sequences.tolist() == want.tolist()


# -------------------------------------------------------------------------- lengths


def reference_outcome(fn):
    """('ok', tokens, warnings) or ('error', message, warnings)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = fn()
            result = ("ok", out.tolist())
        except ValueError as err:
            result = ("error", str(err))
    return (*result, [str(w.message) for w in caught if "Unfeasible" in str(w.message)])


@pytest.mark.parametrize(
    "settings",
    [
        {"max_length": 4},
        {"max_length": 3},
        {"max_length": 5},
        {"max_length": 6, "min_length": 9},
        {"max_length": 7, "min_new_tokens": 5},
        {"min_length": 40},
        {"max_new_tokens": 2, "min_new_tokens": 5},
    ],
)
def test_length_checks_match_the_reference(hf_llama, settings):
    ref = reference_outcome(lambda: hf_llama.generate(IDS, do_sample=False, **settings))
    ours = reference_outcome(lambda: genlab.generate(hf_llama, IDS, **settings))
    assert ours == ref


def test_max_length_none_is_a_clear_error(hf_llama):
    with pytest.raises(ValueError, match="`max_length` is None: set max_new_tokens"):
        genlab.generate(hf_llama, IDS, max_length=None)
    out = genlab.generate(hf_llama, IDS, max_length=None, max_new_tokens=2)
    assert out.shape == (1, 6)


# ------------------------------------------------------- beyond the reference


@pytest.mark.parametrize("value", [10**30, 200, 200.0, -51, None, float("nan"), "1"])
def test_length_penalty_out_of_bounds(hf_llama, value):
    # the reference hangs (10**30: a Python int power), overflows (200) or fails with a
    # TypeError (None) in the middle of beam search
    with pytest.raises(ValueError, match="`length_penalty` must be a number in \\[-50, 50\\]"):
        genlab.generate(hf_llama, IDS, num_beams=2, length_penalty=value, max_new_tokens=3)


def test_is_assistant_on_a_plain_run(hf_llama):
    with pytest.raises(ValueError, match="do not set is_assistant on a run of your own"):
        genlab.generate(hf_llama, IDS, is_assistant=True, max_new_tokens=3)


def test_constraints_must_be_constraint_objects(hf_llama):
    with pytest.raises(ValueError, match="`constraints` must be a list of Constraint objects"):
        genlab.generate(hf_llama, IDS, num_beams=2, constraints=[1, 2], max_new_tokens=3)
    from transformers.generation import PhrasalConstraint

    ref_constraint = [PhrasalConstraint([9, 10])]  # the reference's objects are accepted
    out = genlab.generate(hf_llama, IDS, num_beams=2, constraints=ref_constraint, max_new_tokens=4)
    want = hf_llama.generate(IDS, num_beams=2, constraints=ref_constraint, max_new_tokens=4)
    assert torch.equal(out, want)


def test_stop_strings_with_a_word_level_tokenizer(hf_llama):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, **{f"w{i}": i for i in range(1, 96)}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]")
    with pytest.raises(ValueError, match="substring not found"):  # the reference
        hf_llama.generate(IDS, stop_strings=["w5"], tokenizer=tok, max_new_tokens=3)
    with pytest.raises(ValueError, match="stop_strings cannot be used with this tokenizer"):
        genlab.generate(hf_llama, IDS, stop_strings=["w5"], tokenizer=tok, max_new_tokens=3)


# ------------------------------------------------------- accepted like the reference


def test_bad_words_only_eos_is_a_no_op(hf_llama):
    want = hf_llama.generate(IDS, bad_words_ids=[[2]], max_new_tokens=5)
    assert torch.equal(genlab.generate(hf_llama, IDS, bad_words_ids=[[2]], max_new_tokens=5), want)
    assert torch.equal(genlab.generate(hf_llama, IDS, max_new_tokens=5), want)


def test_synthid_keys_as_numpy_array(hf_llama):
    keys = np.array([654, 400, 836, 123])
    config = {"ngram_len": 2, "keys": keys}
    torch.manual_seed(0)
    ours = genlab.generate(
        hf_llama, IDS, do_sample=True, watermarking_config=config, max_new_tokens=4
    )
    from transformers import SynthIDTextWatermarkingConfig

    torch.manual_seed(0)
    want = hf_llama.generate(
        IDS,
        do_sample=True,
        watermarking_config=SynthIDTextWatermarkingConfig(ngram_len=2, keys=keys),
        max_new_tokens=4,
    )
    assert torch.equal(ours, want)


def test_cfg_unconditional_model_may_be_any_callable(hf_llama):
    from transformers.generation.logits_process import (
        UnbatchedClassifierFreeGuidanceLogitsProcessor as Reference,
    )

    from genlab.processors import UnbatchedClassifierFreeGuidanceLogitsProcessor as Ours

    calls = []

    def plain(input_ids, attention_mask=None, use_cache=None, past_key_values=None):
        calls.append(input_ids.shape[1])
        return hf_llama(
            input_ids,
            attention_mask=attention_mask,
            use_cache=use_cache,
            past_key_values=past_key_values,
        )

    ref, ours = Reference(1.5, plain), Ours(1.5, plain)
    assert ours.model is plain
    ids = IDS.clone()
    with torch.no_grad():
        for step in range(3):
            scores = torch.randn(1, 96, generator=torch.Generator().manual_seed(step))
            want, got = ref(ids, scores.clone()), ours(ids, scores.clone())
            assert torch.allclose(got, want, atol=1e-6)
            ids = torch.cat([ids, got.argmax(-1, keepdim=True)], dim=1)
    assert calls == [1, 1, 1, 1, 1, 1]  # the newest token each step, with the cache
    assert set(ours.unconditional_context) == set(ref.unconditional_context)


# ----------------------------------------------------------------------------- Hub


def test_offline_hub_error_is_short_with_the_right_advice(monkeypatch, tmp_path):
    from genlab.models.checkpoints import load_checkpoint

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError, match="HF_HUB_OFFLINE is set. Unset HF_HUB_OFFLINE") as info:
        load_checkpoint("org/not-cached")
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert len(info.traceback) <= 4

    import huggingface_hub
    from huggingface_hub.errors import LocalEntryNotFoundError

    def no_connection(*args, **kwargs):
        raise LocalEntryNotFoundError("cannot reach the Hub")

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(huggingface_hub, "snapshot_download", no_connection)
    with pytest.raises(ValueError, match="the Hub could not be reached") as info:
        load_checkpoint("org/not-cached")
    assert "HF_HUB_OFFLINE" not in str(info.value)


def test_eos_token_ids_takes_every_form():
    from genlab.ids import eos_token_ids

    cfg = genlab.GenerationConfig(eos_token_id=[4, 9])
    assert eos_token_ids(cfg) == [4, 9]
    assert eos_token_ids(3) == [3] and eos_token_ids(None) == []
    assert eos_token_ids(torch.tensor([[5, 6]])) == [5, 6] and eos_token_ids((7,)) == [7]
