"""Inputs as transformers users give them (issue 24, items 13, 14, 15 and 17's CFG model).

* Folders whose tokenizer has no pad token (GPT-2 and Llama-3 style, and a transformers
  copy of the demo model: its tokenizer.json with no pad token) take a text or a list of
  texts, pad with EOS and log the reference's notice; the tokens equal transformers' on the
  same folder, and the logit lens, ``score`` and ``sweep`` work on them.
* ``lm.generate(**tokenizer(text, return_tensors="pt"))`` and ``lm.start(**enc)``.
* A config.json with absurd sizes fails at once, naming the field, before any weight is
  read or any per-layer work is done.
* The classifier-free guidance model may be a plain function returning a ``dict`` subclass
  that carries ``.logits`` as an attribute (transformers' own test does this).

Every folder is built here from a config and a seed (offline).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil

import pytest
import torch
from helpers import tiny_gpt2, tiny_llama
from test_loading import train_bpe

import genlab
from genlab.inside.lens import as_sequence

TEXT = "the quick brown fox"
TEXTS = ["hello world", "the quick brown fox jumps over"]
NOTICE = "Setting `pad_token_id` to `eos_token_id`:2 for open-end generation."


def padless_bpe_tokenizer():
    """The test BPE (ids 0-3 <unk> <s> </s> <pad>) with no pad token, GPT-2's input names."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=train_bpe(),
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        model_input_names=["input_ids", "attention_mask"],
    )


def write_demo_copy(folder):
    """A transformers-format folder with the demo's tokenizer.json and, as in the folder
    transformers writes from the demo GGUF, no pad token; a tiny Llama of the demo's
    vocabulary (49152) with EOS 2 and no pad id."""
    from genlab.models.gguf import find_demo_gguf, gguf_tokenizer, open_reader

    tok = gguf_tokenizer(open_reader(find_demo_gguf()))
    model = tiny_llama(seed=3, vocab=49152, pad_token_id=None, bos_token_id=1, eos_token_id=2)
    model.save_pretrained(folder)
    tok.backend_tokenizer.save(str(folder / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<|im_start|>",
        "eos_token": "<|im_end|>",
        "unk_token": "<|endoftext|>",
        "model_input_names": ["input_ids", "attention_mask"],
        "clean_up_tokenization_spaces": False,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return model


@pytest.fixture(scope="module")
def padless(tmp_path_factory):
    """name -> (folder, transformers model as saved) for GPT-2, Llama and the demo copy."""
    root = tmp_path_factory.mktemp("padless")
    tok = padless_bpe_tokenizer()
    vocab = len(tok) + 4
    models = {
        "gpt2": tiny_gpt2(vocab=vocab),
        "llama": tiny_llama(vocab=vocab, pad_token_id=None),
    }
    for name, model in models.items():
        model.save_pretrained(root / name)
        tok.save_pretrained(root / name)
    models["demo_copy"] = write_demo_copy(root / "demo_copy")
    return {name: (root / name, model) for name, model in models.items()}


def reference_pair(folder):
    """transformers' model and tokenizer read from ``folder``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    tok = AutoTokenizer.from_pretrained(folder)
    assert tok.pad_token is None and model.generation_config.pad_token_id is None
    return model, tok


def reference_generate(model, enc, caplog, **kwargs):
    """``model.generate(**enc)`` (greedy) and the warnings transformers logged."""
    import transformers

    transformers.logging.enable_propagation()  # so that caplog sees transformers' notices
    verbosity = transformers.logging.get_verbosity()  # other test files turn it down
    transformers.logging.set_verbosity_warning()
    caplog.clear()
    try:
        with caplog.at_level(logging.WARNING):
            out = model.generate(**enc, do_sample=False, **kwargs)
    finally:
        transformers.logging.disable_propagation()
        transformers.logging.set_verbosity(verbosity)
    return out, [r.getMessage() for r in caplog.records]


# ------------------------------------------------------------------ 13: pad-less folders


@pytest.mark.parametrize("name", ["gpt2", "llama", "demo_copy"])
def test_padless_folder_takes_text_like_transformers(padless, name, caplog):
    folder, _ = padless[name]
    lm = genlab.load(folder)
    assert lm.tokenizer.pad_token is None
    hf, tok = reference_pair(folder)
    text = "Once upon a time" if name == "demo_copy" else TEXT

    want, ref_log = reference_generate(hf, tok(text, return_tensors="pt"), caplog, max_new_tokens=5)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        got = lm.generate(text, max_new_tokens=5)
    assert got.sequences.tolist() == want.tolist()
    assert NOTICE in ref_log  # the reference's notice, word for word, in both
    assert [r.getMessage() for r in caplog.records] == [NOTICE]

    # a batch: the reference needs pad = EOS and left padding set by hand; genlab pads so
    texts = ["Once upon a time", "Hi"] if name == "demo_copy" else TEXTS
    tok.pad_token, tok.padding_side = tok.eos_token, "left"
    enc = tok(texts, padding=True, return_tensors="pt")
    assert (enc["attention_mask"] == 0).any()  # the rows differ in length: padding matters
    want, _ = reference_generate(hf, enc, caplog, max_new_tokens=5)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        got = lm.generate(texts, max_new_tokens=5)
    assert got.sequences.tolist() == want.tolist()
    messages = [r.getMessage() for r in caplog.records]
    assert NOTICE in messages and any("has no pad token" in m for m in messages)
    mask = got.run.views.attention_mask[:, : got.prompt_length]
    assert mask.tolist() == enc["attention_mask"].tolist()


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_padless_folder_score_lens_and_sweep(padless, name):
    folder, _ = padless[name]
    lm = genlab.load(folder)
    hf, tok = reference_pair(folder)
    ids = tok(TEXT, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        logits = hf(ids).logits[0]
    want = torch.log_softmax(logits[:-1], -1).gather(-1, ids[0, 1:, None])[:, 0]

    scores = lm.score(TEXT)
    assert scores.ids[0].tolist() == ids[0].tolist()
    torch.testing.assert_close(
        torch.tensor(scores.table.logprob.tolist()), want, atol=1e-4, rtol=1e-4
    )
    both = lm.score(TEXTS)  # a batch of texts of different lengths
    assert [len(i) for i in both.ids] == [len(tok(t)["input_ids"]) for t in TEXTS]

    lens = genlab.logit_lens(lm, TEXT)
    assert lens.inputs == ids[0].tolist()
    assert lens.top_ids[-1, :, 0].tolist() == logits.argmax(-1).tolist()  # the model's own

    batch = lm.generate(TEXTS, max_new_tokens=3)  # row 0 is padded with EOS on the left
    seen = as_sequence(batch, row=0)  # what the lens reads: the padding is dropped
    assert seen.ids[: seen.prompt_length].tolist() == tok(TEXTS[0])["input_ids"]
    lens = genlab.logit_lens(batch, row=0)
    assert lens.steps == [0, 1, 2]
    assert lens.inputs == seen.ids[seen.prompt_length - 1 : -1].tolist()

    sweep = genlab.sweep(lm, TEXT, {"temperature": [0.5, 1.5]}, n=2, max_new_tokens=3)
    assert sweep.metrics.temperature.tolist() == [0.5, 1.5]
    assert sweep.metrics.length.tolist() == [3.0, 3.0]


def test_padless_transformers_tokenizer_pads_on_its_side_like_the_reference(padless, caplog):
    """A transformers tokenizer pads on its own side (right, for this one): the tokens equal
    the reference's on the same right-padded batch (pad = EOS set by hand), and genlab logs
    the reference's right-padding warning."""
    folder, _ = padless["llama"]
    hf, tok = reference_pair(folder)
    lm = genlab.load(hf, tok)
    assert tok.padding_side == "right"
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        got = lm.generate(TEXTS, max_new_tokens=3)
    ours = [r.getMessage() for r in caplog.records]
    tok.pad_token = tok.eos_token
    try:
        enc = tok(TEXTS, padding=True, return_tensors="pt")
    finally:
        tok.pad_token = None
    assert enc["attention_mask"][0, -1] == 0  # right-padded
    want, ref_log = reference_generate(hf, enc, caplog, max_new_tokens=3)
    assert got.sequences.tolist() == want.tolist()
    mask = got.run.views.attention_mask[:, : got.prompt_length]
    assert mask.tolist() == enc["attention_mask"].tolist()
    right = [m for m in ref_log if "right-padding was detected" in m]
    assert right and right[0] in ours


def test_batch_without_pad_nor_eos_token_says_what_to_do(padless):
    folder, _ = padless["gpt2"]
    lm = genlab.load(folder)
    lm.tokenizer.eos_token = None
    with pytest.raises(ValueError, match="neither a pad token nor an EOS token"):
        lm.generate(TEXTS, max_new_tokens=2)


# -------------------------------------------------------- 14: lm.generate(**tokenizer(...))


@pytest.mark.parametrize("which", ["genlab", "transformers"])
def test_generate_and_start_take_unpacked_tokenizer_output(padless, which):
    folder, _ = padless["llama"]
    lm = genlab.load(folder)
    hf, hf_tok = reference_pair(folder)
    tok = lm.tokenizer if which == "genlab" else hf_tok
    want = lm.generate(TEXT, max_new_tokens=4).sequences

    enc = tok(TEXT, return_tensors="pt")
    assert lm.generate(**enc, max_new_tokens=4).sequences.tolist() == want.tolist()
    assert lm.start(**enc, max_new_tokens=4).run().sequences.tolist() == want.tolist()
    run = lm.start(**enc, max_new_tokens=4)
    run.step()
    assert run.sequences.tolist() == want[:, : enc["input_ids"].shape[1] + 1].tolist()

    # numpy arrays (return_tensors="np"), ids alone, ids with a separate mask
    np_enc = tok(TEXT, return_tensors="np")
    assert lm.generate(**np_enc, max_new_tokens=4).sequences.tolist() == want.tolist()
    ids = enc["input_ids"]
    assert lm.generate(input_ids=ids, max_new_tokens=4).sequences.tolist() == want.tolist()
    got = lm.generate(ids, attention_mask=enc["attention_mask"], max_new_tokens=4)
    assert got.sequences.tolist() == want.tolist()

    # a padded batch (pad = EOS set by hand, as a reference user does) equals the reference
    tok.pad_token, tok.padding_side = tok.eos_token, "left"
    batch = tok(TEXTS, padding=True, return_tensors="pt")
    ref = hf.generate(**batch, max_new_tokens=4, do_sample=False)
    assert lm.generate(**batch, max_new_tokens=4).sequences.tolist() == ref.tolist()


def test_prompt_keywords_given_twice_or_alone_say_what_to_do(padless):
    lm = genlab.load(padless["gpt2"][0])
    enc = lm.tokenizer(TEXT)
    with pytest.raises(ValueError, match=r"prompt was given twice .*input_ids="):
        lm.generate(TEXT, input_ids=enc["input_ids"], max_new_tokens=2)
    with pytest.raises(ValueError, match="attention_mask= goes with token ids"):
        lm.generate(TEXT, attention_mask=enc["attention_mask"], max_new_tokens=2)
    with pytest.raises(ValueError, match="attention_mask= was given without a prompt"):
        lm.start(attention_mask=enc["attention_mask"], max_new_tokens=2)
    with pytest.raises(ValueError, match="attention_mask was given twice"):
        lm.generate(enc, attention_mask=enc["attention_mask"], max_new_tokens=2)
    with pytest.raises(ValueError, match="numpy array of float64"):
        lm.generate(input_ids=enc["input_ids"].numpy().astype("float64"), max_new_tokens=2)
    # a tokenizer whose model_input_names list token_type_ids: refused with what to do
    typed = {**enc, "token_type_ids": torch.zeros_like(enc["input_ids"])}
    with pytest.raises(ValueError, match=r"token_type_ids.*return_token_type_ids=False"):
        lm.generate(**typed, max_new_tokens=2)
    with pytest.raises(ValueError, match=r"token_type_ids.*return_token_type_ids=False"):
        lm.generate(typed, max_new_tokens=2)


# ------------------------------------------------------------- 15: absurd config.json sizes

HUGE = 1_000_000_000


def edited_copy(src, dst, **fields):
    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    config.update(fields)
    (dst / "config.json").write_text(json.dumps(config))
    return dst


@pytest.fixture
def nothing_built(monkeypatch):
    """Fails the test if any weight is read or any per-layer tensor list is made."""
    from genlab.models import architectures, checkpoints

    def refuse(*args, **kwargs):
        raise AssertionError("weights were read / per-layer shapes were listed")

    monkeypatch.setattr(checkpoints, "read_safetensors", refuse)
    for kind, family in list(architectures.FAMILIES.items()):
        monkeypatch.setitem(
            architectures.FAMILIES, kind, dataclasses.replace(family, expected_shapes=refuse)
        )


@pytest.mark.parametrize(
    "name, field, value",
    [
        ("llama", "num_hidden_layers", HUGE),
        ("llama", "num_attention_heads", HUGE),
        ("llama", "hidden_size", HUGE),
        ("llama", "vocab_size", HUGE),
        ("llama", "intermediate_size", HUGE),
        ("llama", "head_dim", HUGE),
        ("llama", "num_key_value_heads", HUGE),
        ("llama", "num_attention_heads", 10**12),
        ("gpt2", "n_layer", HUGE),
        ("gpt2", "num_hidden_layers", HUGE),  # the alias transformers' GPT2Config takes
        ("gpt2", "n_embd", HUGE),
        ("gpt2", "vocab_size", HUGE),
        ("gpt2", "n_positions", HUGE),
        ("gpt2", "n_inner", HUGE),
        ("gpt2", "n_head", HUGE),
    ],
)
def test_absurd_config_sizes_fail_at_once_naming_the_field(
    padless, tmp_path, name, field, value, nothing_built
):
    folder = edited_copy(padless[name][0], tmp_path / "edited", **{field: value})
    if name == "gpt2" and field == "num_hidden_layers":
        config = json.loads((folder / "config.json").read_text())
        del config["n_layer"]
        (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=rf"config\.json.*{field}={value}") as info:
        genlab.load(folder)  # refused before any tensor is built (nothing_built)
    assert "1000000000" in str(info.value) or str(value) in str(info.value)


def test_build_decoder_checks_sizes_before_listing_tensors(padless, nothing_built):
    """The GGUF and state-dict path (build_decoder) refuses the same configs."""
    from genlab.models.architectures import build_decoder

    model = padless["llama"][1]
    config = {**model.config.to_dict(), "num_hidden_layers": HUGE}
    with pytest.raises(ValueError, match=r"num_hidden_layers=1000000000 .* hold 2 layer"):
        build_decoder(config, model.state_dict())


def test_fewer_layers_than_saved_still_load(padless, tmp_path):
    """A config that keeps the first layers of a checkpoint is no error (extra tensors are
    ignored, as before); only sizes the weights cannot provide are refused."""
    folder = edited_copy(padless["llama"][0], tmp_path / "one", num_hidden_layers=1)
    assert genlab.load(folder).info.num_hidden_layers == 1


# ------------------------------------------------------- 17: the CFG model as a function


class Namespace(dict):
    """A dict subclass carrying attributes, as in transformers' own CFG test."""


def test_cfg_model_returning_a_dict_subclass_with_attributes():
    from transformers.generation.logits_process import (
        UnbatchedClassifierFreeGuidanceLogitsProcessor as Reference,
    )

    from genlab.processors import UnbatchedClassifierFreeGuidanceLogitsProcessor as Ours

    uncond = torch.tensor([[[1.0, 0.0, 1.5]]])
    cond = torch.tensor([[[1.0, 1.0, 1.0]]])

    def model(input_ids, attention_mask, use_cache=True, past_key_values=None):
        out = Namespace()
        out.logits = uncond
        out.past_key_values = None
        return out

    ids = torch.LongTensor([[0]])
    for args in ((ids, torch.ones_like(ids)), (ids,), ()):
        want = Reference(1.5, model, *args)(ids, cond)
        got = Ours(1.5, model, *args)(ids, cond)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    expected = torch.log_softmax(uncond, -1) + 1.5 * (
        torch.log_softmax(cond, -1) - torch.log_softmax(uncond, -1)
    )
    torch.testing.assert_close(Ours(1.5, model)(ids, cond), expected)


def test_cfg_function_over_a_real_model_steps_like_the_reference(hf_llama):
    """Several steps through a function that wraps a model's output in a dict subclass
    with attributes only: genlab calls it and keeps (or drops) the cache as the reference
    does (``out.get("past_key_values")``: None here, so each call sees no cache)."""
    from transformers.generation.logits_process import (
        UnbatchedClassifierFreeGuidanceLogitsProcessor as Reference,
    )

    from genlab.processors import UnbatchedClassifierFreeGuidanceLogitsProcessor as Ours

    calls = {"ref": [], "ours": []}

    def wrapper(key):
        def model(input_ids, attention_mask=None, use_cache=None, past_key_values=None):
            calls[key].append((input_ids.shape[1], past_key_values is None))
            inner = hf_llama(input_ids, attention_mask=attention_mask, use_cache=use_cache)
            out = Namespace()
            out.logits, out.past_key_values = inner.logits, inner.past_key_values
            return out

        return model

    negative = torch.tensor([[1, 7, 9]])
    ref, ours = Reference(2.0, wrapper("ref"), negative), Ours(2.0, wrapper("ours"), negative)
    ids = torch.tensor([[1, 5, 6, 7]])
    with torch.no_grad():
        for step in range(3):
            scores = torch.randn(1, 96, generator=torch.Generator().manual_seed(step))
            want, got = ref(ids, scores.clone()), ours(ids, scores.clone())
            torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)
            ids = torch.cat([ids, got.argmax(-1, keepdim=True)], dim=1)
    assert calls["ours"] == calls["ref"] == [(3, True), (1, True), (1, True)]


def test_cfg_function_results_genlab_also_reads_or_refuses():
    from genlab.processors import UnbatchedClassifierFreeGuidanceLogitsProcessor as Ours

    logits = torch.tensor([[[1.0, 0.0, 1.5]]])
    cond = torch.tensor([[2.0, 0.0, 0.0]])
    ids = torch.LongTensor([[0]])
    want = Ours(1.5, lambda *a, **k: Namespace(logits=logits))(ids, cond)  # the key only
    got = Ours(1.5, lambda *a, **k: dataclasses.make_dataclass("O", ["logits"])(logits))(ids, cond)
    torch.testing.assert_close(got, want)
    with pytest.raises(ValueError, match="returned Namespace without logits"):
        Ours(1.5, lambda *a, **k: Namespace(scores=logits))(ids, cond)
    with pytest.raises(ValueError, match=r"logits of shape \(1, 3\)"):
        Ours(1.5, lambda *a, **k: Namespace(logits=logits[0]))(ids, cond)
