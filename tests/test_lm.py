"""The exploration API (genlab.load / LM.generate / LM.start) on the teaching model and the
embedded demo model."""

from __future__ import annotations

import pytest
import torch

import genlab
from genlab.models.table import TableLM


@pytest.fixture(scope="module")
def table_lm():
    return genlab.load(TableLM.classic())


def test_table_greedy_result(table_lm):
    res = table_lm.generate("The", max_new_tokens=4)
    assert res.text == "nice woman"
    assert res.token_texts[0][:3] == ["nice", "woman", "<eos>"]
    table = res.transition_scores()
    assert table.token.tolist() == ["nice", "woman", "<eos>"]
    assert table.prob.round(6).tolist() == [0.5, 0.4, 1.0]


def test_table_start_step_force(table_lm):
    run = table_lm.start("The", max_new_tokens=4)
    s = run.step()
    assert s.text == ["nice"]
    run.rewind(1)
    run.force("dog")
    assert run.step().text == ["dog"]
    run.run()
    assert run.result().text == "dog has"


def test_tokenizer_vocab_mismatch_is_an_error():
    lm = TableLM.classic()
    small = TableLM({"": {"a": 1.0}})
    with pytest.raises(ValueError, match="tokenizer"):
        genlab.LM(small, lm.tokenizer)


def test_demo_chat_answer(demo):
    res = demo.generate("What is the capital of France?", chat=True, max_new_tokens=10)
    assert "Paris" in res.text
    assert res.transition_scores().token.iloc[-1] in {"<|im_end|>", "."}


def test_demo_batch_with_left_padding_matches_single_rows(demo):
    prompts = ["The capital of Italy is", "Hello"]
    batch = demo.generate(prompts, max_new_tokens=6)
    for i, p in enumerate(prompts):
        single = demo.generate(p, max_new_tokens=6)
        assert batch.texts[i] == single.text
    ids, mask = demo.encode(prompts)
    assert mask[1, 0] == 0 and mask[0].all()  # left padding on the shorter prompt


def test_demo_matches_transformers_generate_on_same_weights(demo):
    """Greedy 32 tokens: built-in decoder + genlab loop vs transformers' model + generate."""
    transformers = pytest.importorskip("transformers")
    from genlab.models.gguf import find_demo_gguf, read_gguf

    ckpt = read_gguf(find_demo_gguf())
    hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(**ckpt.config)).eval()
    missing, unexpected = hf.load_state_dict(ckpt.state_dict, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}
    hf.tie_weights()
    ids, mask = demo.encode("What is the capital of France?", chat=True)
    ref = hf.generate(
        ids,
        attention_mask=mask,
        max_new_tokens=32,
        do_sample=False,
        eos_token_id=None,
        pad_token_id=2,
    )
    ours = genlab.generate(
        demo, ids, attention_mask=mask, max_new_tokens=32, eos_token_id=None, pad_token_id=2
    )
    assert torch.equal(ref, ours)


def test_readme_quickstart_runs_as_written(demo, monkeypatch, capsys):
    """The Quickstart block of README.md runs unchanged on the demo model and prints what
    the README says it prints (scripts/newcomer_check.py does the same in a fresh venv)."""
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Quickstart", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    promised = section.split("```text\n", 1)[1].split("```", 1)[0]
    monkeypatch.setattr(genlab, "load", lambda name, *a, **k: demo if name == "demo" else None)
    exec(compile(code, "README.md#quickstart", "exec"), {})
    assert capsys.readouterr().out == promised


def test_keep_history_is_a_keyword_of_start_and_generate(demo):
    # before: lm.start(..., keep_history=False) raised "got multiple values for keyword
    # argument 'keep_history'" from deep inside
    run = demo.start("Hi", keep_history=False, max_new_tokens=3)
    run.step()
    with pytest.raises(ValueError, match="keeps no history.*keep_history=True"):
        run.rewind(1)
    result = demo.generate("Hi", keep_history=True, max_new_tokens=3)
    steps = result.run.step_index
    assert steps >= 1 and result.run.rewind(1).step_index == steps - 1
    with pytest.raises(ValueError, match="keeps no history"):
        demo.generate("Hi", max_new_tokens=2).run.rewind(1)  # off by default in generate
    on = demo.start("Hi", max_new_tokens=3)  # on by default in start
    on.step()
    assert on.rewind(1).step_index == 0
