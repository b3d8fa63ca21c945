"""Classifier-free guidance, token healing, prefix_allowed_tokens_fn, max_time,
synced_gpus, use_cache=False, custom_generate and cache_implementation: parity with
transformers 4.56.2 on the same model objects."""

from __future__ import annotations

import warnings

import pytest
import torch
from helpers import assert_same, tiny_llama

import genlab
from genlab.models.architectures import build_decoder
from genlab.run.engine import start
from genlab.runtime.kv_cache import StaticKVCache
from genlab.text.healing import heal_tokens, token_extensions

IDS = torch.tensor([[5, 17, 33, 8, 5, 17, 40, 5, 17]])
COMMON = dict(
    max_new_tokens=10,
    eos_token_id=95,
    pad_token_id=0,
    return_dict_in_generate=True,
    output_scores=True,
    output_logits=True,
)


@pytest.fixture(scope="module")
def model():
    return tiny_llama(0)


def both(model, ids=IDS, seed=3, **kwargs):
    kwargs = {**COMMON, **kwargs}
    outs = []
    for fn in (model.generate, lambda **kw: genlab.generate(model, **kw)):
        torch.manual_seed(seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            outs.append(fn(input_ids=ids, **kwargs))
    return outs


# -- classifier-free guidance ---------------------------------------------------------------
@pytest.mark.parametrize(
    "settings",
    [
        dict(guidance_scale=1.5),
        dict(guidance_scale=2.0, negative_prompt_ids=torch.tensor([[5, 6, 7]])),
        dict(
            guidance_scale=3.0,
            negative_prompt_ids=torch.tensor([[0, 5, 6, 7]]),
            negative_prompt_attention_mask=torch.tensor([[0, 1, 1, 1]]),
        ),
        dict(guidance_scale=1.5, do_sample=True),
        dict(guidance_scale=1.5, use_cache=False),
    ],
    ids=["unconditional", "negative_prompt", "negative_prompt_mask", "sampling", "no_cache"],
)
def test_classifier_free_guidance_matches_reference(model, settings):
    ref, mine = both(model, **settings)
    assert_same(ref, mine)
    plain = genlab.generate(model, input_ids=IDS, **{**COMMON, "return_dict_in_generate": False})
    if not settings.get("do_sample"):  # guidance really changed something
        assert not torch.equal(torch.stack(mine.scores), torch.stack(ref.logits))
        assert plain.shape == mine.sequences.shape


# -- prefix_allowed_tokens_fn, max_time, synced_gpus ---------------------------------------
def allowed(batch_id, sent):
    return [int(sent[-1]) % 10 + 10, 50, 60]


def test_prefix_allowed_tokens_fn_matches_reference(model):
    ref, mine = both(model, prefix_allowed_tokens_fn=allowed)
    assert_same(ref, mine)
    seq = mine.sequences[0]
    for i in range(IDS.shape[1], seq.shape[0]):
        assert int(seq[i]) in allowed(0, seq[:i])


def test_max_time_matches_reference_and_stops_early(model):
    ref, mine = both(model, max_time=60.0)
    assert_same(ref, mine)
    ref, mine = both(model, max_time=1e-9, max_new_tokens=50)
    assert ref.sequences.shape[1] == mine.sequences.shape[1] == IDS.shape[1] + 1


def test_synced_gpus_is_accepted_and_changes_nothing(model):
    base = genlab.generate(model, input_ids=IDS, max_new_tokens=8)
    for flag in (True, False):
        assert torch.equal(
            genlab.generate(model, input_ids=IDS, max_new_tokens=8, synced_gpus=flag), base
        )


# -- use_cache=False --------------------------------------------------------------------------
class Calls:
    def __init__(self, module):
        self.shapes = []
        module.register_forward_pre_hook(self.hook, with_kwargs=True)

    def hook(self, module, args, kwargs):
        self.shapes.append(tuple(kwargs["input_ids"].shape))


@pytest.mark.parametrize("sample", [False, True])
def test_use_cache_false_runs_the_whole_sequence_like_the_reference(sample):
    fresh = tiny_llama(0)
    calls = Calls(fresh)
    ref = both(fresh, use_cache=False, do_sample=sample)
    ref_shapes, calls.shapes = calls.shapes[: len(calls.shapes) // 2], []
    assert_same(*ref, exact=True)
    genlab.generate(fresh, input_ids=IDS, use_cache=False, max_new_tokens=10, eos_token_id=95)
    assert calls.shapes == ref_shapes == [(1, IDS.shape[1] + i) for i in range(10)]
    assert ref[1].past_key_values is None


# -- custom_generate --------------------------------------------------------------------------
def hf_style_greedy(model, input_ids, logits_processor, stopping_criteria, generation_config,
                    **kwargs):  # fmt: skip
    """A decoding loop written for the reference: no cache, greedy, 3 tokens."""
    mask = kwargs["attention_mask"]
    for _ in range(3):
        logits = model(input_ids=input_ids, attention_mask=mask).logits[:, -1, :]
        scores = logits_processor(input_ids, logits)
        input_ids = torch.cat([input_ids, scores.argmax(-1, keepdim=True)], dim=-1)
        mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=-1)
    return input_ids


def test_custom_generate_callable_in_both_styles(model):
    kwargs = dict(input_ids=IDS, repetition_penalty=1.5, max_new_tokens=3, eos_token_id=95)
    ref = model.generate(custom_generate=hf_style_greedy, **kwargs)
    mine = genlab.generate(model, custom_generate=hf_style_greedy, **kwargs)
    assert torch.equal(ref, mine)
    assert torch.equal(mine, genlab.generate(model, **kwargs))  # same as built-in greedy

    def genlab_style(run):
        run.force(7)  # a user loop can steer the prepared Run
        return run.run().tolist()

    out = genlab.generate(model, custom_generate=genlab_style, **kwargs)
    assert out[0][IDS.shape[1]] == 7 and len(out[0]) == IDS.shape[1] + 3
    with pytest.raises(ValueError, match="custom_generate must be a callable"):
        genlab.generate(model, custom_generate="someone/repo", **kwargs)


# -- cache_implementation ---------------------------------------------------------------------
def test_static_cache_matches_reference_on_transformers_model(model):
    ref, mine = both(model, cache_implementation="static")
    assert_same(ref, mine, exact=True)
    cache = type(mine.past_key_values).__name__
    assert cache == type(ref.past_key_values).__name__ == "StaticCache"


def test_static_cache_on_builtin_decoder_is_preallocated_and_exact(model):
    builtin = build_decoder(model.config.to_dict(), model.state_dict())
    kwargs = dict(input_ids=IDS, max_new_tokens=12, eos_token_id=95)
    run = start(builtin, cache_implementation="static", **kwargs)
    assert isinstance(run.views.kv_cache, StaticKVCache)
    assert run.views.kv_cache.capacity == IDS.shape[1] + 12 - 1
    run.step()
    buffer = run.views.kv_cache.keys[0]
    out = run.run()
    assert run.views.kv_cache.keys[0] is buffer  # written in place, never reallocated
    assert torch.equal(out, genlab.generate(builtin, **kwargs))
    assert torch.equal(out, model.generate(**kwargs))


def test_dynamic_cache_names_and_unsupported_caches(model):
    base = genlab.generate(model, input_ids=IDS, max_new_tokens=6)
    for name in ("dynamic", "dynamic_full"):
        out = genlab.generate(model, input_ids=IDS, max_new_tokens=6, cache_implementation=name)
        assert torch.equal(out, base)
    for name in ("offloaded", "offloaded_static", "quantized"):
        with pytest.raises(ValueError, match="supported by genlab: use one of 'dynamic'"):
            genlab.generate(model, input_ids=IDS, max_new_tokens=6, cache_implementation=name)
    cache = StaticKVCache(num_layers=1, capacity=2)
    cache.append(0, torch.zeros(1, 1, 2, 4), torch.zeros(1, 1, 2, 4))
    with pytest.raises(ValueError, match="static cache holds 2 positions"):
        cache.append(0, torch.zeros(1, 1, 1, 4), torch.zeros(1, 1, 1, 4))


# -- token healing ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    text = [
        "the url is https://example.com and http://test.org",
        "apples and applications apply",
        "hello world, the app is here",
    ] * 20
    backend = Tokenizer(models.BPE(unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=330,
        special_tokens=["<pad>", "<s>", "</s>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    backend.train_from_iterator(text, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
        unk_token="<unk>",
    )  # fmt: skip


def test_token_extensions_follow_the_reference_trie():
    vocab = {"http": 0, "https": 1, "ht": 2, "x": 3}
    assert sorted(token_extensions(vocab, "http")) == ["http", "https"]
    assert token_extensions(vocab, "x") == ["x"]
    # a partial walk keeps the whole prefix in front of the rest of each token below it
    assert sorted(token_extensions(vocab, "htz")) == ["htz", "htztp", "htztps"]


def test_token_healing_matches_reference(tokenizer):
    model = tiny_llama(0, vocab=len(tokenizer))
    ids = tokenizer(["(appl"], return_tensors="pt").input_ids
    assert tokenizer.convert_ids_to_tokens(ids[0]) == ["(", "appl"]
    # make the model prefer "apples" after "(" so that healing has work to do
    hidden = model.model(input_ids=ids[:, :-1]).last_hidden_state[0, -1]
    apples, appl = tokenizer.convert_tokens_to_ids(["apples", "appl"])
    with torch.no_grad():
        model.lm_head.weight[apples] = model.lm_head.weight[appl] + 3 * hidden / hidden.dot(hidden)
    healed = heal_tokens(model, ids, tokenizer, genlab.generate)
    assert tokenizer.convert_ids_to_tokens(healed[0]) == ["(", "apples"]
    kwargs = dict(input_ids=ids, token_healing=True, tokenizer=tokenizer, max_new_tokens=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = model.generate(**kwargs)
        mine = genlab.generate(model, **kwargs)
    assert torch.equal(ref, mine)
    assert ref[0, 1] == apples
    # a tail with a leading space: the reference's space handling finds no extension
    for prompt in ("the url is http", "x appl", "http"):
        kwargs["input_ids"] = tokenizer([prompt], return_tensors="pt").input_ids
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert torch.equal(model.generate(**kwargs), genlab.generate(model, **kwargs))
    with pytest.raises(ValueError, match="needs the model's tokenizer"):
        genlab.generate(model, input_ids=ids, token_healing=True, max_new_tokens=2)
