"""genlab's Tokenizer against transformers 4.56.2 tokenizers on the same files.

Two sources: the demo model's GGUF tokenizer (vs ``AutoTokenizer.from_pretrained(folder,
gguf_file=...)``) and small BPE tokenizers built here, saved by transformers'
``save_pretrained`` and loaded by both.
"""

from __future__ import annotations

import json

import pytest
import torch

from genlab.text.tokenizer import BatchEncoding, Tokenizer

TEXTS = [
    "Hello world",
    "The capital of France is Paris.",
    "  leading,   runs of   spaces\n\n\ttabs and\r\nnewlines  ",
    "Ünïcödé: 日本語のテキスト, emoji 🤗🎉, Ελληνικά",
    "digits 1234567890 3.14159 -42 1e-5 2026-11-22",
    "don't you're I'm we've they'll it's . , ! ?",
    "<|im_start|>user\nHi<|im_end|>\n",
    "x<|endoftext|>y",
    "a\u00a0b\u200bc",
    " ",
    "",
]
CHATS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Name a colour."},
        {"role": "assistant", "content": "Blue."},
        {"role": "user", "content": "Another 🌈?"},
    ],
]


# --------------------------------------------------------------------- demo GGUF


@pytest.fixture(scope="module")
def demo_pair():
    """(genlab tokenizer following the file, genlab tokenizer with BOS like transformers,
    transformers' GGUF tokenizer)."""
    from transformers import AutoTokenizer

    from genlab.models.gguf import (
        find_demo_gguf,
        gguf_tokenizer,
        open_reader,
        plain_view_reader_class,
    )

    path = find_demo_gguf()
    reader = open_reader(path)
    ours = gguf_tokenizer(reader)
    ours_bos = gguf_tokenizer(reader, add_bos_token=True)
    with pytest.MonkeyPatch.context() as patch:
        # same bytes, read through a plain view of the memory map: 4x faster to open
        patch.setattr("gguf.GGUFReader", plain_view_reader_class())
        theirs = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    return ours, ours_bos, theirs


@pytest.mark.parametrize("text", TEXTS)
def test_demo_encode_matches_transformers(demo_pair, text):
    ours, ours_bos, theirs = demo_pair
    expected = theirs.encode(text, add_special_tokens=False)
    assert ours.encode(text, add_special_tokens=False) == expected
    # transformers' GGUF loader ignores tokenizer.ggml.add_bos_token and always adds BOS
    assert ours_bos.encode(text) == theirs.encode(text)
    assert ours.encode(text) == expected  # the file says: no BOS
    assert ours.tokenize(text) == theirs.tokenize(text)


@pytest.mark.parametrize("text", TEXTS)
def test_demo_decode_matches_transformers(demo_pair, text):
    ours, _, theirs = demo_pair
    ids = theirs.encode(text)
    for skip in (False, True):
        # transformers' GGUF tokenizer cleans up spaces by default; genlab keeps text exact
        assert ours.decode(ids, skip) == theirs.decode(
            ids, skip, clean_up_tokenization_spaces=False
        )
        assert ours.decode(ids, skip, clean_up_tokenization_spaces=True) == theirs.decode(ids, skip)
    assert ours.decode(torch.tensor(ids)) == ours.decode(ids)


def test_demo_round_trip_is_exact(demo_pair):
    ours = demo_pair[0]
    for text in TEXTS:
        assert ours.decode(ours.encode(text)) == text


def test_a_token_holding_part_of_a_character_is_shown_as_its_bytes(demo_pair):
    """decode() gives "\ufffd" for a token that holds only some bytes of a character (日 is
    two tokens here); a person sees those bytes, read from the token's piece."""
    from transformers.models.gpt2.tokenization_gpt2 import bytes_to_unicode

    from genlab.text.tokens import piece_bytes, show_bytes, shown

    ours, _, _ = demo_pair
    # every one of GPT-2's 256 byte-level characters reads back as its byte
    assert all(piece_bytes(ch) == bytes([b]) for b, ch in bytes_to_unicode().items())
    ids = ours.encode("日本 é")
    assert [shown(ours, i) for i in ids] == ["\u27e8E6 97\u27e9", "\u27e8A5\u27e9", "本", "\u2423é"]
    assert all("\ufffd" in ours.decode([i]) for i in ids[:2])  # what decode alone gives
    assert piece_bytes("<0xE2>") == b"\xe2" and piece_bytes("\u2581said") is None
    assert show_bytes(b" \xe2\x80") == " \u27e8E2 80\u27e9"
    assert show_bytes(b"a\xe2b\xff") == "a\u27e8E2\u27e9b\u27e8FF\u27e9"


def test_demo_special_tokens_and_vocab(demo_pair):
    ours, _, theirs = demo_pair
    assert (ours.bos_token_id, ours.eos_token_id, ours.pad_token_id, ours.unk_token_id) == (
        1,
        2,
        2,
        0,
    )
    assert (ours.bos_token, ours.eos_token, ours.unk_token) == (
        "<|im_start|>",
        "<|im_end|>",
        "<|endoftext|>",
    )
    assert ours.all_special_ids == [1, 2, 0]
    assert len(ours) == len(theirs) == 49152
    assert ours.vocab_size == theirs.vocab_size
    assert ours.get_vocab() == theirs.get_vocab()
    ids = [0, 1, 2, 5, 17, 300, 49151]
    assert ours.convert_ids_to_tokens(ids) == theirs.convert_ids_to_tokens(ids)
    # ids 0-2 are bos/eos/unk; 5 (<file_sep>) is special in the backend but not a named token
    kept = theirs.convert_ids_to_tokens([5, 17, 300, 49151])
    assert ours.convert_ids_to_tokens(ids, skip_special_tokens=True) == kept
    assert ours.convert_ids_to_tokens(17) == "!"
    pieces = theirs.convert_ids_to_tokens(theirs.encode("Ünïcödé 🤗 x<|im_end|>"))
    assert ours.convert_tokens_to_string(pieces) == theirs.convert_tokens_to_string(pieces)
    assert ours.convert_tokens_to_string(pieces).endswith(" x<|im_end|>")
    tokens = ["Hello", "Ġworld", "<|im_end|>", "not-a-token"]
    assert ours.convert_tokens_to_ids(tokens) == theirs.convert_tokens_to_ids(tokens)
    assert ours.convert_tokens_to_ids("Ġworld") == 905


@pytest.mark.parametrize("chat", CHATS)
@pytest.mark.parametrize("add_generation_prompt", [False, True])
def test_demo_chat_template_matches_transformers(demo_pair, chat, add_generation_prompt):
    ours, _, theirs = demo_pair
    kw = dict(add_generation_prompt=add_generation_prompt)
    assert ours.apply_chat_template(chat, tokenize=False, **kw) == theirs.apply_chat_template(
        chat, tokenize=False, **kw
    )
    assert ours.apply_chat_template(chat, **kw) == theirs.apply_chat_template(chat, **kw)
    pt = ours.apply_chat_template(chat, return_tensors="pt", **kw)
    assert torch.equal(pt, theirs.apply_chat_template(chat, return_tensors="pt", **kw))


def test_demo_chat_template_text(demo_pair):
    text = demo_pair[0].apply_chat_template(CHATS[0], add_generation_prompt=True, tokenize=False)
    assert text == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
        "Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_demo_call_pads_left_like_transformers(demo_pair):
    ours, _, theirs = demo_pair
    theirs.padding_side = "left"
    theirs.pad_token = "<|im_end|>"
    texts = ["Hi", "A much longer prompt with more tokens", "Ünïcödé 🤗"]
    got = ours(texts)
    want = theirs(texts, padding=True, return_tensors="pt", add_special_tokens=False)
    assert torch.equal(got["input_ids"], want["input_ids"])
    assert torch.equal(got["attention_mask"], want["attention_mask"])
    assert got.input_ids.dtype == torch.long
    assert got["input_ids"][0, 0].item() == 2 and got["attention_mask"][0, 0].item() == 0
    # batched chat template, padded
    batch = ours.apply_chat_template(CHATS, padding=True, return_tensors="pt")
    assert batch.shape[0] == 2 and batch[0, 0].item() == 2


# ------------------------------------------------------- tokenizers saved by transformers


def train_bpe(vocab_size=320, add_prefix_space=False):
    """A small byte-level BPE trained here, with special tokens <s>, </s>, <pad>, <unk>."""
    from tokenizers import Tokenizer as Backend
    from tokenizers import decoders, models, pre_tokenizers, trainers

    backend = Backend(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<unk>", "<s>", "</s>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = [t for t in TEXTS if t.strip()] * 3 + [
        "the quick brown fox jumps over the lazy dog"
    ] * 5
    backend.train_from_iterator(corpus, trainer=trainer)
    return backend


TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}"
    "{% if m['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('bad role ' + m['role']) }}{% endif %}"
    "{% if loop.index0 > 5 %}{% break %}{% endif %}\n"
    "  <{{ m['role'] }}>{% if m['role'] == 'assistant' %}{% generation %}"
    "{{ m['content'] | trim }}{% endgeneration %}{% else %}{{ m['content'] }}{% endif %}</s>\n"
    "{% endfor %}{% if tools %}TOOLS {{ tools | tojson }}{% endif %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}{{ extra | default('') }}"
)


@pytest.fixture(scope="module")
def saved_pair(tmp_path_factory):
    """(genlab, transformers) for a PreTrainedTokenizerFast saved by transformers."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    folder = tmp_path_factory.mktemp("tok")
    hf = PreTrainedTokenizerFast(
        tokenizer_object=train_bpe(),
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        additional_special_tokens=["<tool>"],
    )
    hf.chat_template = {"default": TEMPLATE, "tool_use": "TOOL " + TEMPLATE}
    hf.save_pretrained(folder)
    return Tokenizer.from_folder(folder), AutoTokenizer.from_pretrained(folder), folder


@pytest.mark.parametrize("text", TEXTS + ["<s>inside</s> and <tool> and <pad>"])
def test_saved_tokenizer_matches_transformers(saved_pair, text):
    ours, theirs, _ = saved_pair
    for special in (True, False):
        ids = theirs.encode(text, add_special_tokens=special)
        assert ours.encode(text, add_special_tokens=special) == ids
        for skip in (True, False):
            assert ours.decode(ids, skip_special_tokens=skip) == theirs.decode(
                ids, skip_special_tokens=skip
            )


def test_saved_tokenizer_attributes(saved_pair):
    ours, theirs, _ = saved_pair
    for attr in ("bos_token", "eos_token", "pad_token", "unk_token"):
        assert getattr(ours, attr) == getattr(theirs, attr)
        assert getattr(ours, attr + "_id") == getattr(theirs, attr + "_id")
    assert ours.all_special_ids == theirs.all_special_ids
    assert ours.all_special_tokens == theirs.all_special_tokens
    assert len(ours) == len(theirs) and ours.vocab_size == theirs.vocab_size
    assert ours.get_vocab() == theirs.get_vocab()
    assert ours.special_tokens_map == theirs.special_tokens_map
    assert ours.padding_side == "left"


def test_saved_tokenizer_call_and_batch_decode(saved_pair):
    ours, theirs, _ = saved_pair
    theirs.padding_side = "left"
    texts = ["the quick fox", "a", "Ünïcödé 🤗 and more words here"]
    for tensors in ("pt", None):
        got = ours(texts, return_tensors=tensors)
        want = theirs(texts, padding=True, return_tensors=tensors)
        for key in ("input_ids", "attention_mask"):
            assert torch.equal(torch.as_tensor(got[key]), torch.as_tensor(want[key]))
    single = ours("the quick fox", return_tensors=None)
    assert single["input_ids"] == theirs("the quick fox")["input_ids"]
    right = ours(texts, padding_side="right")
    want = theirs(texts, padding=True, return_tensors="pt", padding_side="right")
    assert torch.equal(right["input_ids"], want["input_ids"])
    maxed = ours(texts, padding="max_length", max_length=40)
    assert maxed["input_ids"].shape == (3, 40)
    cut = ours(texts, truncation=True, max_length=3, padding=False, return_tensors=None)
    assert cut["input_ids"] == theirs(texts, truncation=True, max_length=3)["input_ids"]
    batch = ours(texts)["input_ids"]
    assert ours.batch_decode(batch, skip_special_tokens=True) == theirs.batch_decode(
        batch, skip_special_tokens=True
    )
    assert ours.batch_decode(batch) == theirs.batch_decode(batch.tolist())
    moved = ours(texts).to("cpu")
    assert isinstance(moved, BatchEncoding) and moved.input_ids.device.type == "cpu"


def test_saved_tokenizer_chat_templates(saved_pair):
    ours, theirs, folder = saved_pair
    assert (folder / "chat_template.jinja").is_file()
    assert set(ours.chat_template) == {"default", "tool_use"}
    chat = CHATS[1]
    tools = [{"type": "function", "function": {"name": "f", "description": "<b>&</b>"}}]
    cases = [
        dict(),
        dict(add_generation_prompt=True),
        dict(tools=tools),
        dict(chat_template="tool_use"),
        dict(extra="EXTRA", eos_token="OVERRIDDEN"),
        dict(continue_final_message=True),
        dict(chat_template="{{ messages | length }}|{{ strftime_now('%Y') }}"),
    ]
    for kwargs in cases:
        text = ours.apply_chat_template(chat, tokenize=False, **kwargs)
        assert text == theirs.apply_chat_template(chat, tokenize=False, **kwargs), kwargs
        assert ours.apply_chat_template(chat, **kwargs) == theirs.apply_chat_template(
            chat, **kwargs
        )
    assert "TOOL" in ours.apply_chat_template(chat, tools=tools, tokenize=False)
    assert '"<b>&</b>"' in ours.apply_chat_template(chat, tools=tools, tokenize=False)
    out = ours.apply_chat_template(
        [CHATS[0], chat], return_dict=True, padding=True, return_tensors="pt"
    )
    want = theirs.apply_chat_template(
        [CHATS[0], chat], return_dict=True, padding=True, return_tensors="pt"
    )
    assert torch.equal(out["input_ids"], want["input_ids"])
    assert torch.equal(out["attention_mask"], want["attention_mask"])


def test_llama_class_adds_bos_and_eos_like_transformers(tmp_path):
    from transformers import AutoTokenizer, LlamaTokenizerFast

    hf = LlamaTokenizerFast(
        tokenizer_object=train_bpe(),
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        add_bos_token=True,
        add_eos_token=True,
        clean_up_tokenization_spaces=True,
        legacy=False,
    )
    hf.save_pretrained(tmp_path)
    ours, theirs = Tokenizer.from_folder(tmp_path), AutoTokenizer.from_pretrained(tmp_path)
    assert type(theirs).__name__ == "LlamaTokenizerFast"
    assert json.loads((tmp_path / "tokenizer_config.json").read_text())["add_eos_token"] is True
    for text in TEXTS:
        ids = theirs.encode(text)
        assert ours.encode(text) == ids
        assert ids[0] == theirs.bos_token_id and ids[-1] == theirs.eos_token_id
        assert ours.decode(ids) == theirs.decode(ids)  # clean_up_tokenization_spaces=True
    assert ours.clean_up_tokenization_spaces is True
    assert ours.decode(ours.encode("a . b", add_special_tokens=False)) == "a. b"
    # the config, not tokenizer.json's stored post-processor, decides (as in transformers)
    config_path = tmp_path / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config_path.write_text(json.dumps({**config, "add_eos_token": False}))
    ours, theirs = Tokenizer.from_folder(tmp_path), AutoTokenizer.from_pretrained(tmp_path)
    ids = theirs.encode("the quick fox")
    assert ours.encode("the quick fox") == ids and ids[-1] != theirs.eos_token_id


def test_config_overrides_add_prefix_space_like_transformers(tmp_path):
    """tokenizer.json says add_prefix_space=True; transformers' config default (False) wins."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    backend = train_bpe(add_prefix_space=True)
    backend.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "</s>"})
    )
    theirs = AutoTokenizer.from_pretrained(tmp_path)
    assert isinstance(theirs, PreTrainedTokenizerFast)
    ours = Tokenizer.from_folder(tmp_path)
    for text in ("hello world", " hello", "fox"):
        assert ours.encode(text) == theirs.encode(text)
    assert ours.eos_token_id == theirs.eos_token_id == 2


def test_config_special_token_not_in_backend_is_added_as_special(tmp_path):
    from transformers import AutoTokenizer

    backend = train_bpe()
    backend.save(str(tmp_path / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "[BOS]",
        "pad_token": "<pad>",
    }
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    (tmp_path / "special_tokens_map.json").write_text(
        json.dumps({"eos_token": {"content": "[END]"}})
    )
    ours, theirs = Tokenizer.from_folder(tmp_path), AutoTokenizer.from_pretrained(tmp_path)
    assert ours.bos_token_id == theirs.bos_token_id == len(backend.get_vocab())
    assert ours.eos_token == theirs.eos_token == "[END]"
    text = "x[BOS]y[END]"
    assert ours.encode(text) == theirs.encode(text)
    assert ours.decode(ours.encode(text), skip_special_tokens=True) == theirs.decode(
        theirs.encode(text), skip_special_tokens=True
    )


def test_package_exports():
    import genlab.models as models

    assert models.Tokenizer is Tokenizer
    assert {"load_model", "load_demo", "ModelInfo", "ModelOutput", "KVCache"} <= set(models.__all__)
    with pytest.raises(AttributeError):
        models.NoSuchThing  # noqa: B018


def test_special_token_id_setters(saved_pair, tmp_path):
    ours = Tokenizer.from_file(saved_pair[2] / "tokenizer.json")
    assert ours.pad_token is None and ours.pad_token_id is None
    with pytest.raises(ValueError, match="pad token"):
        ours(["a", "a longer text"])
    ours.pad_token_id = 2
    assert ours.pad_token == "</s>"
    assert ours(["a", "a longer text"])["input_ids"][0, 0].item() == 2


# ---------------------------------------------------------------------- bad input


def test_bad_inputs_name_the_field(saved_pair, tmp_path):
    ours = saved_pair[0]
    with pytest.raises(ValueError, match="text must be a str"):
        ours.encode(123)
    with pytest.raises(ValueError, match="text must be a str or a non-empty list"):
        ours([])
    with pytest.raises(ValueError, match="padding='sideways'"):
        ours("a", padding="sideways")
    with pytest.raises(ValueError, match="return_tensors='tf'"):
        ours("a", return_tensors="tf")
    with pytest.raises(ValueError, match="padding_side='up'"):
        ours("a", padding_side="up")
    with pytest.raises(ValueError, match="max_length=None"):
        ours("a", padding="max_length")
    with pytest.raises(ValueError, match="different lengths"):
        ours(["a", "a much longer text"], padding=False)
    with pytest.raises(ValueError, match="batch_decode"):
        ours.decode([[1, 2], [3, 4]])
    with pytest.raises(ValueError, match="single sequence"):
        ours.batch_decode([1, 2])
    with pytest.raises(ValueError, match="token ids must be"):
        ours.decode("abc")
    with pytest.raises(ValueError, match="conversation must be"):
        ours.apply_chat_template("hello")
    with pytest.raises(ValueError, match="'role'"):
        ours.apply_chat_template([{"content": "no role"}])
    with pytest.raises(ValueError, match="cannot be combined"):
        ours.apply_chat_template(CHATS[0], add_generation_prompt=True, continue_final_message=True)
    with pytest.raises(ValueError, match="JSON-schema"):
        ours.apply_chat_template(CHATS[0], tools=[len])
    import jinja2

    with pytest.raises(jinja2.TemplateError, match="bad role tool"):
        ours.apply_chat_template([{"role": "tool", "content": "x"}])
    plain = Tokenizer.from_file(saved_pair[2] / "tokenizer.json")
    with pytest.raises(ValueError, match="no chat template"):
        plain.apply_chat_template(CHATS[0])
    with pytest.raises(ValueError, match="tokenizer_file="):
        Tokenizer.from_file(tmp_path / "missing.json")
    (tmp_path / "tokenizer.json").write_text('{"version": "1.0", "trunc')
    with pytest.raises(ValueError, match="could not be read"):
        Tokenizer.from_file(tmp_path / "tokenizer.json")
    with pytest.raises(ValueError, match="no tokenizer.json"):
        Tokenizer.from_folder(tmp_path / "nowhere")
    with pytest.raises(ValueError, match="backend must be"):
        Tokenizer("not a backend")
