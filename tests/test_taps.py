"""Hook points inside the built-in decoders (genlab/inside/taps.py): TransformerLens names,
values equal to transformers' hidden states and attentions, hooks that replace and
observers that only see, exact with the KV cache, kept by rewind / fork / replay, and the
forward-result cache's contract (``model.has_active_hooks()``)."""

from __future__ import annotations

import pytest
import torch
from helpers import tiny_gpt2, tiny_llama

import genlab
from genlab.inside.hooks import HookRegistry
from genlab.inside.taps import Taps
from genlab.models.architectures import build_decoder

IDS = torch.tensor([[5, 17, 33, 8, 9, 12, 40]])


def _pair(make):
    hf = make(attn_implementation="eager")
    return hf, build_decoder(hf.config.to_dict(), hf.state_dict())


def _capture(model, ids, names=None, hooks=None):
    reg = HookRegistry()
    reg.bind(model)
    got = {}
    for n in names or model.hook_points():
        reg.observe(n, lambda p, v, s: got.__setitem__(p, v.clone()))
    for n, fn in (hooks or {}).items():
        reg.add(n, fn)
    n = ids.shape[1]
    out = model.forward(
        ids,
        attention_mask=torch.ones_like(ids),
        position_ids=torch.arange(n)[None],
        cache=model.new_cache(1),
        logits_to_keep=0,
        taps=Taps(reg, 0, 0),
    )
    return got, out


@pytest.mark.parametrize("make", [tiny_llama, tiny_gpt2], ids=["llama", "gpt2"])
def test_values_equal_transformers(make):
    hf, model = _pair(make)
    with torch.no_grad():
        ref = hf(IDS, output_hidden_states=True, output_attentions=True)
    got, out = _capture(model, IDS)
    layers = model.settings.num_layers
    assert model.hook_points()[0] == "hook_embed"
    assert f"blocks.{layers - 1}.attn.hook_z" in model.hook_points()
    assert model.hook_points()[-1] == "ln_final.hook_normalized"
    worst = 0.0
    for i in range(layers):
        pairs = [(got[f"blocks.{i}.hook_resid_pre"], ref.hidden_states[i])]
        pairs.append((got[f"blocks.{i}.attn.hook_pattern"], ref.attentions[i]))
        if i < layers - 1:
            pairs.append((got[f"blocks.{i}.hook_resid_post"], ref.hidden_states[i + 1]))
            # the residual stream adds up: pre + attn_out = mid, mid + mlp_out = post
            mid = got[f"blocks.{i}.hook_resid_pre"] + got[f"blocks.{i}.hook_attn_out"]
            pairs.append((got[f"blocks.{i}.hook_resid_mid"], mid))
            post = got[f"blocks.{i}.hook_resid_mid"] + got[f"blocks.{i}.hook_mlp_out"]
            pairs.append((got[f"blocks.{i}.hook_resid_post"], post))
        for a, b in pairs:
            assert a.shape == b.shape
            worst = max(worst, float((a - b).abs().max()))
    final = got["ln_final.hook_normalized"]
    worst = max(worst, float((final - ref.hidden_states[layers]).abs().max()))
    assert worst < 1e-5, worst
    assert torch.allclose(out.logits, ref.logits, atol=1e-5)
    z = got["blocks.0.attn.hook_z"]
    assert z.shape == (1, IDS.shape[1], model.settings.num_heads, model.settings.head_dim)


@pytest.mark.parametrize("make", [tiny_llama, tiny_gpt2], ids=["llama", "gpt2"])
def test_interveners_replace_observers_see(make):
    _, model = _pair(make)
    plain, out0 = _capture(model, IDS, names=["blocks.1.hook_resid_pre"])
    seen = []
    _, out1 = _capture(
        model,
        IDS,
        names=["blocks.1.hook_resid_pre"],
        hooks={"blocks.0.hook_mlp_out": lambda x, step: seen.append(x)},
    )  # returns None: observes only
    assert seen and torch.equal(out0.logits, out1.logits)
    zeroed, out2 = _capture(
        model,
        IDS,
        names=["blocks.1.hook_resid_pre"],
        hooks={"blocks.0.hook_mlp_out": lambda x, step: torch.zeros_like(x)},
    )
    expect = plain["blocks.1.hook_resid_pre"] - _capture(model, IDS)[0]["blocks.0.hook_mlp_out"]
    assert torch.allclose(zeroed["blocks.1.hook_resid_pre"], expect, atol=1e-5)
    assert not torch.allclose(out0.logits, out2.logits)

    # a uniform pattern replaces the attention: the output follows it
    def uniform(p, step):
        return torch.tril(torch.ones_like(p)) / torch.arange(1, p.shape[-1] + 1).view(-1, 1)

    _, out3 = _capture(model, IDS, hooks={"blocks.0.attn.hook_pattern": uniform})
    assert not torch.allclose(out0.logits, out3.logits)


def test_bad_hook_names_list_close_names():
    _, model = _pair(tiny_llama)
    run = genlab.start(model, IDS, max_new_tokens=2)
    with pytest.raises(ValueError, match=r"2 layers.*blocks\.1\.hook_resid_post"):
        with run.hooks({"blocks.31.hook_resid_post": lambda x, step: None}):
            pass
    with pytest.raises(ValueError, match=r"close names: blocks\.0\.hook_resid_pre"):
        run.add_hook("blocks.0.hook_resid_pr", lambda x, step: None)
    with pytest.raises(ValueError, match="returned shape"):
        with run.hooks({"blocks.0.hook_resid_post": lambda x, step: x[..., :3]}):
            run.step()
    assert run.step_index == 0 and not model.has_active_hooks()  # nothing left broken
    run.step()


def test_points_inside_need_a_builtin_decoder():
    hf = tiny_llama()
    run = genlab.start(hf, IDS, max_new_tokens=2)  # the transformers adapter
    with pytest.raises(ValueError, match="built-in"):
        run.add_hook("blocks.0.hook_resid_post", lambda x, step: None)


# ---- generation with the KV cache -----------------------------------------------------------


def _steered(lm, hooks, use_cache=True, prompt="The movie was", n=10):
    run = lm.start(prompt, max_new_tokens=n, use_cache=use_cache)
    with run.hooks(hooks):
        run.run()
    return run


@pytest.fixture(scope="module")
def vec(demo):
    return genlab.steering_vector(
        demo, ["I love this. It is wonderful"], ["I hate this. It is awful"], layer=12
    )


def test_interventions_exact_with_the_cache(demo, vec):
    src = demo.activations("My dog is", names=["blocks.8.hook_resid_pre"])
    means = genlab.inside.steering.head_means(demo, ["The cat sat on the mat."], 0)
    cases = {
        "steer": {"blocks.12.hook_resid_post": genlab.steer(vec, 0.3)},
        "steer at positions": {"blocks.3.hook_resid_mid": genlab.steer(vec, 0.6, [1, 4, 6])},
        "zero head": {"blocks.0.attn.hook_z": [genlab.ablate_head(4), genlab.ablate_head(7)]},
        "mean head": {"blocks.0.attn.hook_z": genlab.ablate_head(4, mean=means[4])},
        "patch": {"blocks.8.hook_resid_pre": genlab.patch(src["blocks.8.hook_resid_pre"])},
    }
    plain = _steered(demo, {})
    for name, hooks in cases.items():
        cached = _steered(demo, hooks)
        fresh = _steered(demo, hooks, use_cache=False)
        assert cached.sequences.tolist() == fresh.sequences.tolist(), name
        if name != "mean head":  # these change the text (so the test can fail)
            assert cached.sequences.tolist() != plain.sequences.tolist(), name


def test_adding_zeros_is_bit_identical(demo, vec):
    plain = _steered(demo, {})
    for point in ("blocks.0.hook_resid_pre", "blocks.12.hook_resid_post", "hook_embed"):
        zero = _steered(demo, {point: genlab.steer(torch.zeros_like(vec))})
        assert torch.equal(zero.sequences, plain.sequences)
        assert [s.logprobs for s in zero.history] == [s.logprobs for s in plain.history]


def test_steps_see_the_positions_they_compute(demo):
    run = demo.start("Once upon a time", max_new_tokens=6)
    seen = []
    with run.hooks({"blocks.4.hook_resid_post": lambda x, step: seen.append(x.clone())}):
        run.run()
    assert seen[0].shape[1] == run.prompt_length and all(s.shape[1] == 1 for s in seen[1:])
    whole = demo.activations(run, names=["blocks.4.hook_resid_post"])["blocks.4.hook_resid_post"]
    steps = torch.cat(seen, dim=1)  # every position but the last token's (never run)
    assert steps.shape[1] == whole.shape[1] - 1
    assert torch.allclose(steps, whole[:, :-1], atol=1e-4)


def test_rewind_fork_and_replay_keep_interventions(demo, vec):
    hooks = {"blocks.12.hook_resid_post": genlab.steer(vec, 0.3)}
    steered = _steered(demo, hooks).sequences.tolist()
    run = demo.start("The movie was", max_new_tokens=10)
    off = run.add_hook("blocks.12.hook_resid_post", genlab.steer(vec, 0.3))
    run.run(max_steps=4)
    other = run.fork()
    run.rewind(2)
    run.run()
    other.run()
    assert run.sequences.tolist() == steered and other.sequences.tolist() == steered
    off()
    other.registry.clear()
    # beam search rewinds by replaying: the replay runs each step with the hooks it had
    beams = dict(num_beams=2, max_new_tokens=6)
    a = demo.start("The movie was", **beams)
    with a.hooks(hooks):
        a.run(max_steps=4)
    a.rewind(2)
    a.run()
    b = demo.start("The movie was", **beams)
    with b.hooks(hooks):
        b.run(max_steps=2)
    b.run()
    assert a.sequences.tolist() == b.sequences.tolist()


def test_forward_cache_never_serves_a_hooked_run(demo, vec):
    """The contract with the LM's forward-result cache (genlab/runtime/forward_cache.py): it
    bypasses
    itself while ``model.has_active_hooks()``; the passes of an identical earlier run are
    not used by a run with hooks inside the model."""
    import gc

    gc.collect()  # runs of other tests that kept permanent hooks
    model = demo.model
    hooks = {"blocks.2.hook_resid_post": genlab.steer(vec, 0.3)}
    assert not model.has_active_hooks()
    demo.start("A day in the life of", max_new_tokens=6).run()  # fills the caches
    run = demo.start("A day in the life of", max_new_tokens=6)
    with run.hooks(hooks):
        assert model.has_active_hooks()
        run.run()
    assert not model.has_active_hooks()
    ids = demo.encode("A day in the life of")[0]
    ref = genlab.start(model, ids, max_new_tokens=6)  # no prefix cache at all
    with ref.hooks(hooks):
        ref.run()
    assert run.sequences.tolist() == ref.sequences.tolist()
    plain = demo.start("A day in the life of", max_new_tokens=6)
    plain.run()
    assert plain.sequences.tolist() != ref.sequences.tolist()
    off = plain.add_hook("blocks.2.hook_resid_post", lambda x, step: None)  # observers too
    assert model.has_active_hooks()
    off()
    assert not model.has_active_hooks()
