"""The LM's forward cache: a run served from kept forward passes is bit-identical to a cold
model, whatever ran before, and nothing that changes a forward pass is ever served from it.

"Cold" is the same model object with an empty cache of its own (``genlab.LM(lm.model)``), so
that the two differ in nothing but the cache.
"""

from __future__ import annotations

import threading

import pytest
import torch
from helpers import tiny_gpt2, tiny_llama
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import genlab
from genlab.models.architectures import build_decoder
from genlab.runtime.forward_cache import ForwardCache, weights_key

PROMPT = torch.tensor([[1, 5, 17, 33, 8, 21, 40, 11, 7, 9]])
OUTPUTS = dict(output_scores=True, output_logits=True)
DICT = dict(OUTPUTS, return_dict_in_generate=True)


@pytest.fixture(scope="module")
def decoder():
    hf = tiny_llama(0)
    return build_decoder(hf.config.to_dict(), hf.state_dict())


def cold(lm):
    """The same model, with a cache of its own that has seen nothing."""
    return genlab.LM(lm.model, lm.tokenizer)


def assert_identical(a, b):
    """torch.equal on tokens, scores, logits, hidden states and attentions (where present)."""
    a, b = a.run.output, b.run.output
    assert torch.equal(a.sequences, b.sequences)
    for field in ("scores", "logits", "hidden_states", "attentions"):
        x, y = getattr(a, field, None), getattr(b, field, None)
        assert (x is None) == (y is None), field
        if x is None:
            continue
        flat_x = [t for t in _flatten(x)]
        flat_y = [t for t in _flatten(y)]
        assert len(flat_x) == len(flat_y), field
        for s, t in zip(flat_x, flat_y, strict=True):
            assert s.shape == t.shape and torch.equal(s, t), field


def _flatten(x):
    if isinstance(x, torch.Tensor):
        yield x
    else:
        for item in x:
            yield from _flatten(item)


SETTINGS = {
    "greedy": {},
    "sampling": {"do_sample": True, "temperature": 0.7, "top_k": 20, "seed": 3},
    "contrastive": {"penalty_alpha": 0.6, "top_k": 4},
    "processor change": {"repetition_penalty": 1.3, "no_repeat_ngram_size": 2},
}


@pytest.mark.parametrize("name", list(SETTINGS))
def test_a_run_served_from_the_cache_equals_a_cold_model(decoder, name):
    lm = genlab.LM(decoder)
    first = lm.generate(PROMPT, max_new_tokens=8, **OUTPUTS)  # greedy: fills the cache
    assert lm.cache_info().misses == 8 and lm.cache_info().hits == 0
    again = lm.generate(PROMPT, max_new_tokens=8, **SETTINGS[name], **OUTPUTS)
    assert_identical(
        again, cold(lm).generate(PROMPT, max_new_tokens=8, **SETTINGS[name], **OUTPUTS)
    )
    if name == "greedy":  # every forward pass served: not one computed
        assert_identical(again, first)
        assert lm.cache_info().hits == 8 and lm.cache_info().misses == 8
    elif name == "contrastive":  # it reads every pass's hidden states: always computed
        assert lm.cache_info().hits == 0
    else:
        assert lm.cache_info().hits >= 1  # at least the prompt's pass


def test_the_demo_served_from_the_cache_equals_a_cold_demo(demo):
    lm = genlab.LM(demo.model, demo.tokenizer)  # a cache of its own: the fixture is shared
    prompt = "The capital of France is"
    lm.generate(prompt, max_new_tokens=6)
    sampled = dict(do_sample=True, top_p=0.9, seed=0, max_new_tokens=10, **OUTPUTS)
    a = lm.generate(prompt, **sampled)
    b = cold(lm).generate(prompt, **sampled)
    assert_identical(a, b)
    assert lm.cache_info().hits >= 1


def test_hidden_states_and_attentions_after_a_cached_run_cover_the_whole_prompt(decoder):
    lm = genlab.LM(decoder)
    lm.generate(PROMPT, max_new_tokens=3)
    asked = dict(max_new_tokens=3, output_hidden_states=True, output_attentions=True)
    out = lm.generate(PROMPT, **asked)
    hidden, attn = out.run.output.hidden_states, out.run.output.attentions
    assert hidden[0][0].shape == (1, 10, 32)
    assert attn[0][0].shape == (1, 4, 10, 10)
    assert_identical(out, cold(lm).generate(PROMPT, **asked))


def test_a_torch_hook_on_a_transformers_model_is_never_skipped():
    """Through the adapter: a forward hook added after a first run sees the whole prompt
    again, and its change reaches the logits, as in transformers."""
    hf = tiny_llama(0)
    lm = genlab.load(hf)
    lm.generate(PROMPT, max_new_tokens=2)
    seen = []

    def hook(module, args, output):
        seen.append(output[0].shape[1] if isinstance(output, tuple) else output.shape[1])
        return (output[0] * 1.5, *output[1:]) if isinstance(output, tuple) else output * 1.5

    handle = hf.model.layers[0].register_forward_hook(hook)
    try:
        ours = lm.generate(PROMPT, max_new_tokens=2, **OUTPUTS)
        seen_first = seen[0]
        with torch.no_grad():
            want = hf(PROMPT).logits[:, -1]
    finally:
        handle.remove()
    assert seen_first == PROMPT.shape[1]
    torch.testing.assert_close(ours.run.output.logits[0], want, atol=1e-5, rtol=1e-5)


def test_a_model_with_active_hooks_or_a_replaced_forward_is_not_served(decoder, monkeypatch):
    lm = genlab.LM(decoder)
    lm.generate(PROMPT, max_new_tokens=2)
    hits = lm.cache_info().hits
    real = decoder.forward
    calls = []

    def doubled(*args, **kwargs):
        calls.append(1)
        out = real(*args, **kwargs)
        out.logits = out.logits * 2
        return out

    monkeypatch.setattr(decoder, "forward", doubled)
    out = lm.generate(PROMPT, max_new_tokens=2, **OUTPUTS)
    monkeypatch.undo()
    assert len(calls) == 2 and lm.cache_info().hits == hits
    plain = cold(lm).generate(PROMPT, max_new_tokens=2, **OUTPUTS)
    assert torch.equal(out.run.output.logits[0], 2 * plain.run.output.logits[0])
    monkeypatch.setattr(type(decoder), "has_active_hooks", lambda self: True, raising=False)
    lm.generate(PROMPT, max_new_tokens=2)
    assert lm.cache_info().hits == hits


def test_new_weights_are_a_new_key():
    hf = tiny_llama(1)
    model = build_decoder(hf.config.to_dict(), hf.state_dict(), packed=False)
    lm = genlab.LM(model)
    key = weights_key(model)
    before = lm.generate(PROMPT, max_new_tokens=4, **OUTPUTS)
    with torch.no_grad():
        model.layers[0].down.mul_(1.01)  # in place: the version counter moves
    assert weights_key(model) != key
    after = lm.generate(PROMPT, max_new_tokens=4, **OUTPUTS)
    assert not torch.equal(before.run.output.logits[0], after.run.output.logits[0])
    assert_identical(after, cold(lm).generate(PROMPT, max_new_tokens=4, **OUTPUTS))
    model.layers[1].down = model.layers[1].down.clone()  # a new tensor
    assert weights_key(model) != key


def test_the_byte_cap_drops_the_least_recently_used_branches(decoder):
    lm = genlab.LM(decoder)
    lm.generate(PROMPT, max_new_tokens=4)
    per_run = lm.cache_info().bytes
    lm.cache.max_bytes = int(per_run * 2.5)
    prompts = [PROMPT + i for i in range(4)]  # four prompts: no shared chunk
    for p in prompts:
        lm.generate(p, max_new_tokens=4)
    info = lm.cache_info()
    assert info.bytes <= info.max_bytes and info.entries < 4 * 4
    hits = info.hits
    lm.generate(prompts[-1], max_new_tokens=4)  # the most recent is kept whole
    assert lm.cache_info().hits == hits + 4
    lm.generate(prompts[0], max_new_tokens=4)  # the oldest was dropped
    assert lm.cache_info().hits == hits + 4
    lm.cache.max_bytes = 0
    assert lm.cache_info().entries == 0 and lm.cache_info().bytes == 0
    with pytest.raises(ValueError, match="max_bytes=-1 must be a whole number"):
        lm.cache.max_bytes = -1


def test_clear_and_info():
    fc = ForwardCache(max_bytes=10)
    assert repr(fc).startswith("ForwardCache(0 chunks")
    lm = genlab.LM(build_decoder(tiny_llama(0).config.to_dict(), tiny_llama(0).state_dict()))
    lm.generate(PROMPT, max_new_tokens=3)
    assert lm.cache_info().entries == 3 and lm.cache_info().bytes > 0
    lm.cache_clear()
    assert lm.cache_info().entries == 0 and lm.cache_info().misses == 3


def test_rewind_fork_and_force_are_served_and_stay_exact(decoder):
    lm = genlab.LM(decoder)
    run = lm.start(PROMPT, max_new_tokens=6, **OUTPUTS)
    run.run()
    hits = lm.cache_info().hits
    run.rewind(3)
    branch = run.fork()
    branch.force(50)
    branch.run()
    run.run()
    assert lm.cache_info().hits > hits
    ref = cold(lm).start(PROMPT, max_new_tokens=6, **OUTPUTS)
    ref.run()
    ref.rewind(3)
    ref_branch = ref.fork()
    ref_branch.force(50)
    ref_branch.run()
    ref.run()
    assert torch.equal(run.output.sequences, ref.output.sequences)
    assert torch.equal(branch.output.sequences, ref_branch.output.sequences)
    for a, b in zip(branch.output.logits, ref_branch.output.logits, strict=True):
        assert torch.equal(a, b)


def test_several_rows_padding_and_no_cache_are_computed_cold(decoder):
    lm = genlab.LM(decoder)
    lm.generate(PROMPT, max_new_tokens=3)
    hits = lm.cache_info().hits
    lm.generate(PROMPT, max_new_tokens=3, num_beams=2)
    lm.generate(PROMPT, max_new_tokens=3, do_sample=True, num_return_sequences=2, seed=0)
    lm.generate(PROMPT, max_new_tokens=3, use_cache=False)
    mask = torch.ones_like(PROMPT)
    mask[0, 0] = 0
    lm.generate({"input_ids": PROMPT, "attention_mask": mask}, max_new_tokens=3)
    assert lm.cache_info().hits == hits


def test_threads_share_the_cache_safely(decoder):
    lm = genlab.LM(decoder)
    want = cold(lm).generate(PROMPT, max_new_tokens=6).sequences
    results, errors = [], []

    def work(seed):
        try:
            for _ in range(3):
                results.append(lm.generate(PROMPT, max_new_tokens=6).sequences)
                lm.generate(PROMPT + seed, max_new_tokens=3)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert all(torch.equal(r, want) for r in results) and len(results) == 6


CALLS = st.lists(
    st.fixed_dictionaries(
        {
            "prompt": st.sampled_from([0, 1]),
            "max_new_tokens": st.integers(1, 6),
            "mode": st.sampled_from(
                ["greedy", "sample", "penalty", "hidden", "attn", "hook", "edit", "rewind"]
            ),
            "dtype": st.sampled_from(["float32", "bfloat16"]),
            "seed": st.integers(0, 3),
        }
    ),
    min_size=2,
    max_size=7,
)


def _edit(model, seed: int, factor: float) -> None:
    """Scale layer 0's output matrix by one of four routes torch offers."""
    weight = model.layers[0].o
    kind = seed % 4
    if kind == 0:
        with torch.no_grad():
            weight.mul_(factor)  # in place: the version counter moves
    elif kind == 1:
        weight.data.mul_(factor)  # .data: it does not
    elif kind == 2 and weight.dtype == torch.float32:
        weight.numpy()[...] *= factor  # a NumPy view: torch sees nothing
    else:
        model.layers[0].o = weight * factor  # a new tensor, same shape


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(calls=CALLS)
def test_random_sequences_of_calls_equal_a_fresh_computation(calls):
    """Outputs asked for, processors, seeds, hooks inside the layers, weight edits of every
    kind (in place, through ``.data``, through NumPy, a swapped tensor), edits between a run
    and its rewind, and two dtypes sharing one cache, in any order: each answer equals the
    same calls without a cache."""
    hf = tiny_llama(2)
    models = {
        name: build_decoder(hf.config.to_dict(), hf.state_dict(), packed=False, dtype=dtype)
        for name, dtype in [("float32", torch.float32), ("bfloat16", torch.bfloat16)]
    }
    shared = ForwardCache()
    prompts = [PROMPT, torch.tensor([[1, 9, 9, 4]])]
    for call in calls:
        model = models[call["dtype"]]
        if call["mode"] == "edit":
            _edit(model, call["seed"], 1.0 + 0.01 * (call["seed"] + 1))
            continue
        cfg = dict(max_new_tokens=call["max_new_tokens"], **OUTPUTS, return_dict_in_generate=True)
        if call["mode"] == "rewind":  # a run, an edit, a rewind, on to the end: twice
            ends = []
            for cache in (shared, None):
                layer = model.layers[0]
                original, saved = layer.o, layer.o.clone()
                run = genlab.start(model, prompts[call["prompt"]], forward_cache=cache, **cfg)
                run.run()
                _edit(model, call["seed"], 1.5)
                run.rewind(min(call["max_new_tokens"], 2))
                ends.append(run.run())
                layer.o = original  # as before, for the second pass
                with torch.no_grad():
                    original.copy_(saved)
            for a, b in zip(_flatten(ends[0].logits), _flatten(ends[1].logits), strict=True):
                assert torch.equal(a, b)
            assert torch.equal(ends[0].sequences, ends[1].sequences)
            continue
        if call["mode"] == "sample":
            cfg.update(do_sample=True, seed=call["seed"])
        elif call["mode"] == "penalty":
            cfg.update(repetition_penalty=1.5)
        elif call["mode"] == "hidden":
            cfg.update(output_hidden_states=True)
        elif call["mode"] == "attn":
            cfg.update(output_attentions=True)
        outputs = []
        for cache in (shared, None):
            run = genlab.start(model, prompts[call["prompt"]], forward_cache=cache, **cfg)
            if call["mode"] == "hook":
                shift = torch.full((32,), 0.05 * (call["seed"] + 1), dtype=model.dtype)
                with run.hooks({"blocks.0.hook_resid_post": genlab.steer(shift)}):
                    outputs.append(run.run())
            else:
                outputs.append(run.run())
        served, fresh = outputs
        assert torch.equal(served.sequences, fresh.sequences)
        for field in ("logits", "hidden_states", "attentions"):
            a, b = getattr(served, field, None), getattr(fresh, field, None)
            assert (a is None) == (b is None)
            if a is not None:
                for x, y in zip(_flatten(a), _flatten(b), strict=True):
                    assert torch.equal(x, y), field


# -- never stale (issue 44): every edit a user can make, then a rewind or a new run --------


def _twins(make):
    """Two identical models: one served from a forward cache, one computed without."""
    return (make(), ForwardCache()), (make(), None)


def _edit_then_rewind_and_rerun(make, edit):
    """A 6-step run, ``edit(model)``, rewind(3) and on to the end, then a new run: with the
    cache and without, the same logits bit for bit (and the edit changed something)."""
    outputs = []
    for model, kept in _twins(make):
        run = genlab.start(model, PROMPT, forward_cache=kept, max_new_tokens=6, **DICT)
        run.run()
        before = [t.clone() for t in run.output.logits]
        edit(model)
        run.rewind(3)
        run.run()
        again = genlab.start(model, PROMPT, forward_cache=kept, max_new_tokens=6, **DICT)
        again.run()
        outputs.append((before, run.output, again.output))
    (before, served, served_again), (_, fresh, fresh_again) = outputs
    assert not torch.equal(before[-1], fresh.logits[-1])  # the edit changed the logits
    for a, b in ((served, fresh), (served_again, fresh_again)):
        assert torch.equal(a.sequences, b.sequences)
        for x, y in zip(a.logits, b.logits, strict=True):
            assert torch.equal(x, y)


def _own(hf) -> dict:
    """A copy of the reference model's weights (a decoder may hold views of what it is
    given: two twins must not share a tensor)."""
    return {k: v.clone() for k, v in hf.state_dict().items()}


def _llama(packed=None, quantization=None, **config):
    hf = tiny_llama(4, **config)
    return lambda: build_decoder(
        hf.config.to_dict(), _own(hf), packed=packed, quantization=quantization
    )


@pytest.mark.parametrize("packed", [True, False])
def test_an_in_place_edit_then_a_rewind_is_not_served_stale(packed):
    def edit(model):
        with torch.no_grad():
            model.embed.mul_(3.0)  # in place: the version counter moves

    _edit_then_rewind_and_rerun(_llama(packed), edit)


@pytest.mark.parametrize("packed", [True, False])
@pytest.mark.parametrize("how", ["mul", "copy", "numpy", "packed-matrix"])
def test_edits_through_data_and_numpy_are_seen(packed, how):
    def edit(model):
        if how == "mul":
            model.embed.data.mul_(-1)  # .data: the version counter does not move
        elif how == "copy":
            model.embed.data.copy_(model.embed.flip(0))
        elif how == "numpy":
            model.embed.numpy()[:] *= 2.0  # a NumPy view: torch sees nothing
        else:  # a layer matrix in its stored form (packed: oneDNN's opaque layout)
            weight = model.layers[0].gate_up
            weight.data.mul_(4.0)

    _edit_then_rewind_and_rerun(_llama(packed), edit)


def test_a_swapped_part_or_function_is_seen():
    from genlab.models.llama import RotaryTable

    def new_rope(model):
        model.rope = RotaryTable(model.rope.inv_freq / 8)

    _edit_then_rewind_and_rerun(_llama(), new_rope)
    hf = tiny_gpt2()

    def relu(model):
        model.act = torch.relu

    _edit_then_rewind_and_rerun(lambda: build_decoder(hf.config.to_dict(), _own(hf)), relu)


@pytest.mark.parametrize("mode", ["int8", "int4"])
def test_quantized_scales_and_swapped_matrices_are_seen(mode):
    from genlab.runtime.quant import Int4Weight

    def scale(model):
        with torch.no_grad():
            model.layers[0].down.scale.mul_(3)

    make = _llama(quantization=mode, vocab=128, hidden_size=64, intermediate_size=128)
    if mode == "int8":  # int4's product reads its packed scales and zeros, not .scale
        _edit_then_rewind_and_rerun(make, scale)

    def swap(model):
        dense = model.layers[1].gate_up.dense()
        model.layers[1].gate_up = Int4Weight.quantize(dense * 2)

    _edit_then_rewind_and_rerun(make, swap)


def test_the_weights_are_read_once_per_call_not_per_step(decoder, monkeypatch):
    import genlab.runtime.forward_cache as fc

    reads = []
    real = fc.weights_fingerprint
    monkeypatch.setattr(fc, "weights_fingerprint", lambda m: reads.append(1) or real(m))
    lm = genlab.LM(decoder)
    run = lm.start(PROMPT, max_new_tokens=8)
    run.run()
    assert len(reads) == 1  # one call: one read, whatever the number of steps
    run.rewind(2)
    run.step()
    run.step()
    assert len(reads) == 3  # rewind replays nothing here; each step is a call
    lm.cache.max_bytes = 0
    lm.generate(PROMPT, max_new_tokens=4)
    assert len(reads) == 3  # no cache: nothing read
