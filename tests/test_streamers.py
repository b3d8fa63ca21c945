"""Streamers: the same put() sequence gives the reference's text, chunk for chunk."""

from __future__ import annotations

import html
import queue
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import IPython
import IPython.display
import pytest
import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
from transformers.generation import streamers as hf_streamers

from genlab import streamers
from genlab.streamers import (
    BaseStreamer,
    NotebookStreamer,
    TextIteratorStreamer,
    TextStreamer,
    is_cjk_char,
)

CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "hello world, this is a small corpus for a tiny tokenizer",
    "streaming text one token at a time",
] * 20

TEXTS = {
    "accents_emoji": "Héllo wörld, café crème 🙂🎉 naïve façade 👍🏽 señor<eos>",
    "cjk": "The 中文字符 test 日本語です ok 한국어 done",
    "newlines": "first line\nsecond líne 🚀\n\nthird <b>&amp;</b> end",
}


@pytest.fixture(scope="module")
def tokenizer():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=["<eos>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>")


def token_ids(tokenizer, key):
    return tokenizer(TEXTS[key], add_special_tokens=False)["input_ids"]


def feed(streamer, ids, prompt_len=4, per_put=1, shape_2d=True):
    """Drive a streamer the way generate() does: prompt in one put, then the new tokens."""
    prompt = torch.tensor([ids[:prompt_len]])
    streamer.put(prompt if shape_2d else prompt[0])
    for i in range(prompt_len, len(ids), per_put):
        streamer.put(torch.tensor(ids[i : i + per_put]))
    streamer.end()


def test_texts_split_multibyte_characters_across_tokens(tokenizer):
    for key in TEXTS:
        ids = token_ids(tokenizer, key)
        partial = [tokenizer.decode(ids[:n]) for n in range(1, len(ids))]
        assert any(p.endswith("\ufffd") for p in partial), key
        assert tokenizer.decode(ids) == TEXTS[key]


@pytest.mark.parametrize("key", list(TEXTS))
@pytest.mark.parametrize("skip_prompt", [False, True])
@pytest.mark.parametrize("decode_kwargs", [{}, {"skip_special_tokens": True}])
def test_text_streamer_prints_what_reference_prints(
    tokenizer, capsys, key, skip_prompt, decode_kwargs
):
    ids = token_ids(tokenizer, key)
    feed(hf_streamers.TextStreamer(tokenizer, skip_prompt, **decode_kwargs), ids)
    expected = capsys.readouterr().out
    feed(TextStreamer(tokenizer, skip_prompt, **decode_kwargs), ids)
    assert capsys.readouterr().out == expected
    if key == "accents_emoji":  # the special token is kept or dropped as decode_kwargs say
        assert expected.endswith("señor\n" if decode_kwargs else "<eos>\n")


@pytest.mark.parametrize("key", list(TEXTS))
@pytest.mark.parametrize("skip_prompt", [False, True])
@pytest.mark.parametrize("per_put, shape_2d", [(1, True), (1, False), (3, True)])
def test_iterator_chunks_equal_reference(tokenizer, key, skip_prompt, per_put, shape_2d):
    ids = token_ids(tokenizer, key)
    theirs = hf_streamers.TextIteratorStreamer(tokenizer, skip_prompt, timeout=1)
    ours = TextIteratorStreamer(tokenizer, skip_prompt, timeout=1)
    feed(theirs, ids, per_put=per_put, shape_2d=shape_2d)
    feed(ours, ids, per_put=per_put, shape_2d=shape_2d)
    expected = list(theirs)
    got = list(ours)
    assert got == expected
    # never ends on a half-decoded character (a skipped prompt may cut one at the start)
    assert not any(chunk.endswith("\ufffd") for chunk in got)
    assert "".join(got) == (tokenizer.decode(ids[4:]) if skip_prompt else TEXTS[key])


def test_streamer_is_reusable_for_a_second_generation(tokenizer, capsys):
    a, b = token_ids(tokenizer, "cjk"), token_ids(tokenizer, "newlines")
    theirs = hf_streamers.TextStreamer(tokenizer, skip_prompt=True)
    feed(theirs, a)
    feed(theirs, b)
    expected = capsys.readouterr().out
    ours = TextStreamer(tokenizer, skip_prompt=True)
    feed(ours, a)
    feed(ours, b)
    assert capsys.readouterr().out == expected
    assert expected.count("\n") == TEXTS["newlines"].count("\n") + 2


def test_streamers_work_inside_reference_generate(tokenizer):
    torch.manual_seed(0)
    transformers.logging.set_verbosity_error()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
    )
    model = LlamaForCausalLM(config).eval()
    prompt = torch.tensor([token_ids(tokenizer, "accents_emoji")[:6]])
    chunks = []
    for cls in (hf_streamers.TextIteratorStreamer, TextIteratorStreamer):
        streamer = cls(tokenizer, skip_prompt=False, timeout=1)
        with torch.no_grad():
            out = model.generate(
                prompt,
                attention_mask=torch.ones_like(prompt),
                max_new_tokens=25,
                do_sample=False,
                streamer=streamer,
                pad_token_id=0,
            )
        chunks.append(list(streamer))
    assert chunks[1] == chunks[0]
    assert "".join(chunks[1]) == tokenizer.decode(out[0])
    assert len(chunks[1]) == 1 + 25 + 1  # prompt, one per step, end


def test_batch_of_two_is_refused_like_reference(tokenizer):
    two_rows = torch.tensor([[5, 6], [7, 8]])
    with pytest.raises(ValueError, match="batch size 1"):
        hf_streamers.TextStreamer(tokenizer).put(two_rows)
    with pytest.raises(ValueError, match=r"batch size 1.*2 rows"):
        TextStreamer(tokenizer).put(two_rows)
    with pytest.raises(ValueError, match="batch size 1"):
        NotebookStreamer(tokenizer).put(two_rows)


def test_plain_lists_and_ints_are_accepted(tokenizer):
    ids = token_ids(tokenizer, "cjk")
    ours = TextIteratorStreamer(tokenizer)
    ours.put(ids[:3])
    for t in ids[3:]:
        ours.put(t)
    ours.end()
    assert "".join(ours) == TEXTS["cjk"]


def test_iterator_timeout_raises_queue_empty(tokenizer):
    streamer = TextIteratorStreamer(tokenizer, timeout=0.01)
    with pytest.raises(queue.Empty):
        next(streamer)


def test_base_streamer_requires_put_and_end():
    with pytest.raises(NotImplementedError, match="put"):
        BaseStreamer().put([1])
    with pytest.raises(NotImplementedError, match="end"):
        BaseStreamer().end()


def test_is_cjk_char_matches_reference_on_every_code_point():
    reference = hf_streamers.TextStreamer(None)._is_chinese_char
    ours = [code for code in range(0x110000) if is_cjk_char(chr(code))]
    assert ours == [code for code in range(0x110000) if reference(code)]
    assert len(ours) == 81_520  # the eight blocks, not an empty set on both sides


# ---- NotebookStreamer -----------------------------------------------------------------------


class FakeHandle:
    def __init__(self, log, clock):
        self.log, self.clock = log, clock

    def update(self, obj):
        self.log.append(("update", obj.data, self.clock.now))


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


@pytest.fixture
def notebook(monkeypatch):
    """A pretend Jupyter kernel: records display()/update() calls and controls the clock."""
    log: list = []
    clock = FakeClock()

    def fake_display(obj, display_id=None):
        assert display_id is True
        log.append(("display", obj.data, clock.now))
        return FakeHandle(log, clock)

    monkeypatch.setattr(IPython, "get_ipython", lambda: SimpleNamespace(kernel=object()))
    monkeypatch.setattr(IPython.display, "display", fake_display)
    monkeypatch.setattr(streamers, "_clock", clock)
    return SimpleNamespace(log=log, clock=clock)


def shown_text(data):
    prefix = '<pre class="genlab-stream" style="white-space: pre-wrap; margin: 0">'
    assert data.startswith(prefix) and data.endswith("</pre>")
    return html.unescape(data[len(prefix) : -len("</pre>")])


def test_notebook_streamer_updates_one_output_every_n_tokens(tokenizer, notebook, capsys):
    ids = token_ids(tokenizer, "newlines")
    streamer = NotebookStreamer(tokenizer, every=3, min_interval=0)
    feed(streamer, ids, prompt_len=4)
    generated = len(ids) - 4
    assert capsys.readouterr().out == ""  # nothing printed in a notebook
    kinds = [kind for kind, _, _ in notebook.log]
    assert kinds == ["display"] + ["update"] * (generated // 3)
    assert streamer.refreshes == generated // 3 + 1
    final = tokenizer.decode(ids[4:])
    assert shown_text(notebook.log[-1][1]) == final == streamer.text
    assert "&lt;b&gt;&amp;amp;" in notebook.log[-1][1]  # the text is escaped, not rendered
    for _, data, _ in notebook.log:
        text = shown_text(data)
        assert "\ufffd" not in text
        assert final.startswith(text)
    assert len({shown_text(data) for _, data, _ in notebook.log}) > 3  # it grows


def test_notebook_streamer_refreshes_at_most_every_min_interval(tokenizer, notebook):
    ids = token_ids(tokenizer, "accents_emoji")
    streamer = NotebookStreamer(tokenizer, every=1, min_interval=1.0)
    streamer.put(torch.tensor([ids[:4]]))
    generated = ids[4:]
    for i, token in enumerate(generated):
        notebook.clock.now = 0.25 * i
        streamer.put(torch.tensor([token]))
    notebook.clock.now += 0.1
    streamer.end()
    times = [t for _, _, t in notebook.log]
    assert times[:-1] == [0.25 * i for i in range(0, len(generated), 4)]
    assert times[-1] == pytest.approx(0.25 * (len(generated) - 1) + 0.1)
    assert shown_text(notebook.log[-1][1]) == tokenizer.decode(generated)


def test_notebook_streamer_second_generation_gets_a_new_output(tokenizer, notebook):
    streamer = NotebookStreamer(tokenizer, every=100)
    feed(streamer, token_ids(tokenizer, "cjk"))
    feed(streamer, token_ids(tokenizer, "newlines"))
    kinds = [kind for kind, _, _ in notebook.log]
    assert kinds == ["display", "display"]  # every=100: only the final refresh of each
    assert shown_text(notebook.log[1][1]) == tokenizer.decode(token_ids(tokenizer, "newlines")[4:])


def test_notebook_streamer_without_prompt_skip_shows_prompt(tokenizer, notebook):
    ids = token_ids(tokenizer, "cjk")
    streamer = NotebookStreamer(tokenizer, skip_prompt=False, every=1, min_interval=0)
    feed(streamer, ids)
    assert shown_text(notebook.log[-1][1]) == TEXTS["cjk"]
    assert streamer.refreshes == 1 + (len(ids) - 4) + 1


@pytest.mark.parametrize("shell", [None, SimpleNamespace()])  # plain Python; terminal IPython
def test_notebook_streamer_prints_outside_a_kernel(tokenizer, capsys, monkeypatch, shell):
    monkeypatch.setattr(IPython, "get_ipython", lambda: shell)
    ids = token_ids(tokenizer, "accents_emoji")
    feed(hf_streamers.TextStreamer(tokenizer, skip_prompt=True), ids)
    expected = capsys.readouterr().out
    streamer = NotebookStreamer(tokenizer, every=2)
    feed(streamer, ids)
    assert capsys.readouterr().out == expected
    assert streamer.text + "\n" == expected


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(every=0), r"every: expected an integer >= 1 .*; got 0"),
        (dict(every=1.5), "every"),
        (dict(min_interval=-1), "min_interval: .* >= 0; got -1"),
        (dict(min_interval=float("nan")), "min_interval"),
    ],
)
def test_notebook_streamer_bad_settings(tokenizer, kwargs, match):
    with pytest.raises(ValueError, match=match):
        NotebookStreamer(tokenizer, **kwargs)


def test_streamers_import_neither_ipython_nor_ipywidgets_outside_a_notebook():
    code = textwrap.dedent(
        """
        import sys
        from genlab.streamers import NotebookStreamer

        class Chars:
            def decode(self, ids, **kwargs):
                return "".join(map(chr, ids))

        s = NotebookStreamer(Chars(), every=1, min_interval=0)
        for piece in ["Q:", " an", "swer", " here"]:
            s.put([ord(c) for c in piece])
        s.end()
        print("IPython" in sys.modules, "ipywidgets" in sys.modules)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout == " answer here\nFalse False\n"


@pytest.mark.parametrize(
    "cfg",
    [
        {"do_sample": False},
        {"do_sample": True, "num_return_sequences": 3},
        {"do_sample": False, "prompt_lookup_num_tokens": 2},
    ],
    ids=["greedy", "sample_return_3", "prompt_lookup"],
)
def test_put_sequence_equals_reference_generate(cfg):
    """What a streamer receives from genlab.generate, put by put, is what transformers'
    generate sends: the prompt rows as generation starts (expanded when several sequences
    are returned per prompt), then the new tokens of each step."""
    from helpers import assert_streams_like_reference, tiny_llama

    prompt = torch.tensor([[1, 5, 17, 33, 8, 5, 17]])
    assert_streams_like_reference(tiny_llama(), prompt, max_new_tokens=6, **cfg)
