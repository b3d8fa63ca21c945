"""lm.score: per-token scores under teacher forcing, equal to transformers' forward +
log-softmax on the same weights; under processors, equal to what generate recorded."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import tiny_llama
from test_lens import assert_legible
from transformers import (
    LogitsProcessorList,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

import genlab
from genlab.models.architectures import build_decoder


@pytest.fixture(scope="module")
def hf():
    return tiny_llama(0)


@pytest.fixture(scope="module", params=["transformers", "builtin"])
def lm(request, hf):
    model = (
        hf
        if request.param == "transformers"
        else build_decoder(hf.config.to_dict(), hf.state_dict())
    )
    return genlab.LM(model)


def reference_logprobs(hf, ids) -> torch.Tensor:
    with torch.no_grad():
        return torch.log_softmax(hf(torch.tensor([ids])).logits[0].float(), -1)


def test_scores_equal_transformers_forward_log_softmax(hf, lm):
    rows = [[1, 5, 17, 33, 8, 40, 41], [1, 60, 2, 9], [1, 7, 7, 7, 7, 7, 7, 7, 7, 3]]
    s = lm.score(rows, alternatives=3)
    assert list(s.summary.tokens) == [6, 3, 9]
    worst = 0.0
    for i, ids in enumerate(rows):
        ref = reference_logprobs(hf, ids)[:-1]
        target = torch.tensor(ids[1:])
        lp = ref.gather(-1, target[:, None])[:, 0]
        t = s.table[s.table.row == i]
        got = torch.tensor(t.logprob.values, dtype=torch.float32)
        worst = max(worst, float((got - lp).abs().max()))
        assert list(t.position) == list(range(1, len(ids))) and list(t.token_id) == ids[1:]
        assert list(t["rank"]) == (ref > lp[:, None]).sum(-1).tolist()
        entropy = -(ref.exp() * ref).sum(-1)
        assert torch.allclose(
            torch.tensor(t.entropy.values, dtype=torch.float32), entropy, atol=1e-4
        )
        assert torch.allclose(torch.tensor(t.prob.values, dtype=torch.float32), lp.exp(), atol=1e-5)
        row = s.summary.iloc[i]
        assert abs(row.mean_logprob - float(lp.mean())) < 1e-4
        assert abs(row.perplexity - math.exp(-float(lp.mean()))) < 1e-3
        top = ref[0].topk(3).indices.tolist()
        assert t.top.iloc[0].split(", ")[0].split(" ")[0] == str(top[0])
    assert worst < 1e-4
    assert s.mean_logprob == pytest.approx(float(s.summary.mean_logprob[0]))


def test_context_is_conditioned_on_not_scored(hf, lm):
    ctx, text = [1, 5, 17, 33], [8, 40, 41]
    s = lm.score(torch.tensor(text), context=torch.tensor(ctx))
    ref = reference_logprobs(hf, ctx + text)
    expected = ref[3:6].gather(-1, torch.tensor(text)[:, None])[:, 0]
    assert list(s.table.position) == [4, 5, 6]
    assert (torch.tensor(s.table.logprob.values, dtype=torch.float32) - expected).abs().max() < 1e-4
    one = lm.score([1, 5, 17, 33, 8, 40, 41])
    assert one.table.logprob.tail(3).tolist() == pytest.approx(s.table.logprob.tolist(), abs=1e-5)


def test_under_processors_it_is_what_generate_recorded(lm):
    """Scoring a sampled continuation under the same settings gives the log-softmax of the
    scores generate recorded at each step (the processors see the same ids)."""
    cfg = dict(do_sample=True, temperature=0.7, top_k=20, top_p=0.9, repetition_penalty=1.3)
    prompt = torch.tensor([[1, 5, 17, 33]])
    out = genlab.generate(lm.model, prompt, max_new_tokens=8, eos_token_id=None, seed=0,
                          return_dict_in_generate=True, output_scores=True, **cfg)  # fmt: skip
    new = out.sequences[0, 4:]
    s = lm.score(new, context=prompt[0], eos_token_id=None, **cfg)
    recorded = torch.log_softmax(torch.cat(out.scores).float(), -1)
    expected = recorded.gather(-1, new[:, None])[:, 0]
    got = torch.tensor(s.table.logprob.values, dtype=torch.float32)
    assert torch.isfinite(got).all() and (got - expected).abs().max() < 1e-4
    assert s.processed and "raw_logprob" in s.table
    assert (s.table.logprob >= s.table.raw_logprob - 1e-6).mean() > 0.5  # sharpened


def test_lengths_resolve_as_in_a_run(lm):
    """max_new_tokens counts from the context, from a keyword or a generation_config alike:
    forced_eos_token_id then forces the run's last token (the 2nd one here), not later."""
    ctx, text, eos = torch.tensor([1, 5, 17, 33]), torch.tensor([8, 40, 41, 42]), 9
    kw = lm.score(text, context=ctx, max_new_tokens=2, forced_eos_token_id=eos)
    cfg = genlab.GenerationConfig(max_new_tokens=2, forced_eos_token_id=eos)
    gc = lm.score(text, context=ctx, generation_config=cfg)
    for s in (kw, gc):
        assert math.isfinite(s.table.logprob[0]) and s.table.logprob[1] == -math.inf
        assert s.table.logprob[2:].map(math.isfinite).all()
    # left at its default, max_length stretches over the scored text: nothing is forced
    free = lm.score(text, context=ctx, forced_eos_token_id=eos)
    assert free.table.logprob.map(math.isfinite).all()


def test_processors_match_transformers_warpers(hf, lm):
    ids = [1, 5, 17, 33, 8, 40, 41, 8]
    s = lm.score(ids, do_sample=True, temperature=0.5, top_k=10, top_p=0.8,
                 repetition_penalty=1.2, keep_logprobs=True)  # fmt: skip
    with torch.no_grad():
        logits = hf(torch.tensor([ids])).logits[0].float()
    procs = LogitsProcessorList(
        [RepetitionPenaltyLogitsProcessor(1.2), TemperatureLogitsWarper(0.5),
         TopKLogitsWarper(10), TopPLogitsWarper(0.8)]
    )  # fmt: skip
    for j in range(len(ids) - 1):
        processed = procs(torch.tensor([ids[: j + 1]]), logits[j : j + 1].clone())
        ref = torch.log_softmax(processed, -1)[0]
        got = s.logprobs[0][j]
        finite = torch.isfinite(ref)
        assert torch.equal(finite, torch.isfinite(got))
        assert (ref[finite] - got[finite]).abs().max() < 1e-4
    assert (s.table.logprob == -math.inf).any() or (s.table["rank"] >= 0).all()


def test_batch_equals_rows_scored_one_by_one(lm):
    rows = [[1, 5, 17, 33, 8], [1, 60, 2], [1, 9, 9, 9, 9, 9, 9, 9]]
    batch = lm.score(rows, batch_size=2)
    for i, ids in enumerate(rows):
        alone = lm.score(ids)
        assert batch.table[batch.table.row == i].logprob.tolist() == pytest.approx(
            alone.table.logprob.tolist(), abs=1e-5
        )


def test_errors_name_what_to_fix(lm):
    with pytest.raises(ValueError, match="nothing to score"):
        lm.score([5])
    with pytest.raises(ValueError, match="not GenerationConfig fields"):
        lm.score([1, 2, 3], temprature=0.5)
    with pytest.raises(ValueError, match="this model has no tokenizer"):
        lm.score("some text")
    with pytest.raises(ValueError, match="alternatives"):
        lm.score([1, 2, 3], alternatives=-1)


# -- the demo model: text, chat, conversations, and the same weights in transformers -----


@pytest.fixture(scope="module")
def demo_twin():
    import transformers

    from genlab.models.gguf import find_demo_gguf, read_gguf

    ckpt = read_gguf(find_demo_gguf())
    hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(**ckpt.config)).eval()
    hf.load_state_dict(ckpt.state_dict, strict=False)
    hf.tie_weights()
    return hf


def test_demo_text_and_chat_equal_transformers(demo, demo_twin):
    s = demo.score("The capital of France is Paris.", context="What is the capital of France?",
                   chat=True)  # fmt: skip
    ids = s.ids[0].tolist()
    context, _ = demo.encode("What is the capital of France?", chat=True)
    assert ids[: context.shape[1]] == context[0].tolist()
    assert s.table.token.tolist()[-2:] == ["\u2423Paris", "."]
    ref = reference_logprobs(demo_twin, ids)
    start = context.shape[1]
    expected = ref[start - 1 : -1].gather(-1, torch.tensor(ids[start:])[:, None])[:, 0]
    got = torch.tensor(s.table.logprob.values, dtype=torch.float32)
    assert (got - expected).abs().max() < 1e-4
    assert s.table.set_index("token").loc["\u2423Paris", "rank"] == 0
    conversation = [
        {"role": "user", "content": "What is the capital of France?"},
        {"role": "assistant", "content": "The capital of France is Paris."},
    ]
    conv = demo.score(conversation)
    text = demo.tokenizer.apply_chat_template(conversation, tokenize=False)
    expected_ids = torch.as_tensor(demo.tokenizer(text, add_special_tokens=False)["input_ids"])
    assert conv.ids[0].tolist() == expected_ids.reshape(-1).tolist()
    assert len(conv.table) == len(conv.ids[0]) - 1
    worse = demo.score("The capital of France is London.", context="What is the capital of France?",
                       chat=True)  # fmt: skip
    assert worse.perplexity > s.perplexity
    fig = genlab.plots.score_bars(s)
    assert_legible(fig)
    assert "perplexity" in s._repr_html_()
