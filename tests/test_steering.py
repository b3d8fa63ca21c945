"""Steering vectors, ablation and patching (genlab/inside/steering.py) and input attribution
(genlab/inside/attribution.py), against the steering-vectors package and captum on the same
transformers model, and on the demo model."""

from __future__ import annotations

import pytest
import torch
from helpers import tiny_gpt2, tiny_llama

import genlab
from genlab.inside.attribution import attribute
from genlab.models.architectures import build_decoder

WORDS = "the a cat dog sat ran on mat happy sad good bad day night I you love hate it is".split()


def word_tokenizer():
    """A transformers tokenizer of whole words (ids 3 and up), offline."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{w: i + 3 for i, w in enumerate(WORDS)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<unk>",
    )


@pytest.fixture(scope="module")
def twins():
    """A tiny transformers Llama, genlab's decoder on its weights, and a word tokenizer."""
    hf = tiny_llama(num_hidden_layers=3)
    tok = word_tokenizer()
    lm = genlab.LM(build_decoder(hf.config.to_dict(), hf.state_dict()), tok)
    return hf, tok, lm


PAIRS = [
    ("I love the cat", "I hate the cat"),
    ("a good day", "a bad day"),
    ("happy dog", "sad dog"),
]


def test_steering_vector_equals_steering_vectors_package(twins):
    from steering_vectors import train_steering_vector

    hf, tok, lm = twins
    for layer in (0, 1):
        ref = train_steering_vector(hf, tok, PAIRS, layers=[layer]).layer_activations[layer]
        ours = genlab.steering_vector(lm, [p for p, _ in PAIRS], [n for _, n in PAIRS], layer=layer)
        assert ours.shape == ref.shape
        assert float((ours - ref).abs().max()) < 1e-5


def test_steering_vector_bad_input(twins):
    _, _, lm = twins
    with pytest.raises(ValueError, match="in pairs"):
        genlab.steering_vector(lm, ["a", "b"], ["c"], layer=0)
    with pytest.raises(ValueError, match="3 layers"):
        genlab.steering_vector(lm, ["a"], ["b"], layer=5)
    run = lm.start("the cat", max_new_tokens=2)
    with pytest.raises(ValueError, match="size 7 at a point of width 32"):
        with run.hooks({"blocks.0.hook_resid_post": genlab.steer(torch.ones(7))}):
            run.run()
    assert run.step_index == 0  # nothing left broken
    run.run()


def test_steering_applies_with_a_strength(twins):
    _, _, lm = twins
    vec = genlab.steering_vector(lm, ["good day"], ["bad day"], layer=1)
    texts = set()
    for strength in (0.0, 20.0, -20.0):
        run = lm.start("the cat", max_new_tokens=6)
        with run.hooks({"blocks.1.hook_resid_post": genlab.steer(vec, strength)}):
            run.run()
        texts.add(tuple(run.sequences[0].tolist()))
    assert len(texts) > 1


def _captum_target(hf, ids, t, alt=None):
    def forward(emb):
        lp = torch.log_softmax(hf(inputs_embeds=emb).logits[:, t - 1].float(), -1)
        out = lp[:, ids[0, t]]
        return out - lp[:, alt] if alt is not None else out

    return forward


@pytest.mark.parametrize("adapter", [False, True], ids=["builtin", "transformers"])
def test_attribution_equals_captum(twins, adapter):
    from captum.attr import InputXGradient, IntegratedGradients

    hf, tok, lm = twins
    model = hf if adapter else lm.model
    ids = torch.tensor([[5, 7, 9, 4, 11, 8]])
    run = genlab.start(model, ids, max_new_tokens=3, tokenizer=tok)
    run.run()
    seq = run.sequences
    emb = hf.get_input_embeddings()(seq).detach()
    gxi = attribute(run).matrix()
    ig = attribute(run, method="integrated_gradients", n_steps=12).matrix()
    con = attribute(run, method="integrated_gradients", n_steps=12, contrast=10).matrix()
    worst = 0.0
    for s in range(3):
        t = ids.shape[1] + s
        for ours, ref in (
            (gxi, InputXGradient(_captum_target(hf, seq, t)).attribute(emb)),
            (ig, IntegratedGradients(_captum_target(hf, seq, t)).attribute(emb, n_steps=12)),
            (
                con,
                IntegratedGradients(_captum_target(hf, seq, t, alt=10)).attribute(emb, n_steps=12),
            ),
        ):
            ref = ref[0, :t].sum(-1)
            got = torch.tensor(ours.loc[s].values[:t], dtype=ref.dtype)
            worst = max(worst, float((got - ref).abs().max()))
            assert float(ref.abs().max()) > 0
    assert worst < 1e-4, worst


def test_attribution_table_and_bad_input(twins):
    _, tok, lm = twins
    run = lm.start("the cat sat", max_new_tokens=2)
    run.run()
    res = attribute(run, method="integrated_gradients", n_steps=4)
    assert list(res.table.columns) == ["step", "target", "position", "token", "score", "method"]
    assert len(res.table) == 3 + 4  # step 0 sees 3 tokens, step 1 sees 4
    fig = genlab.plots.attribution_heatmap(res)
    assert fig.axes
    with pytest.raises(ValueError, match="method="):
        attribute(run, method="saliency")
    with pytest.raises(ValueError, match="contrast="):
        attribute(run, contrast="the cat")


def test_patching_and_ablation_gpt2():
    hf = tiny_gpt2()
    lm = genlab.LM(build_decoder(hf.config.to_dict(), hf.state_dict()), word_tokenizer())
    clean, corrupt = "the cat sat on", "the dog sat on"
    table = genlab.patching_table(lm, clean, corrupt, target=5)
    assert set(table.layer) == {0, 1} and set(table.position) == {0, 1, 2, 3}
    # patching every position at the first layer's input gives the clean run back
    acts = lm.activations(clean, names=["blocks.0.hook_resid_pre"])["blocks.0.hook_resid_pre"]
    patched = genlab.activations(
        lm, corrupt, names=["ln_final.hook_normalized"],
        hooks={"blocks.0.hook_resid_pre": genlab.patch(acts)},
    )["ln_final.hook_normalized"]  # fmt: skip
    want = lm.activations(clean, names=["ln_final.hook_normalized"])["ln_final.hook_normalized"]
    assert torch.allclose(patched, want, atol=1e-6)
    # the patched position is the one that moves the target (the others change nothing)
    effect = table[table.layer == 0].set_index("position").effect
    assert effect[1] != 0 and effect[0] == 0 and effect[2] == 0
    with pytest.raises(ValueError, match="same number of tokens"):
        genlab.patching_table(lm, "the cat", "the cat sat")
    z = lm.activations(clean, names=["blocks.1.attn.hook_z"])["blocks.1.attn.hook_z"]
    out = genlab.activations(
        lm,
        clean,
        names=["blocks.1.attn.hook_z"],
        hooks={"blocks.1.attn.hook_z": genlab.ablate_head(2)},
    )["blocks.1.attn.hook_z"]
    assert torch.equal(out[:, :, 2], torch.zeros_like(out[:, :, 2]))
    assert torch.equal(out[:, :, 1], z[:, :, 1])


def test_sweep_table_on_demo(demo):
    vec = genlab.steering_vector(demo, ["I love this"], ["I hate this"], layer=12)
    table = genlab.steering_sweep(
        demo, "The movie was", vec, layer=12, strengths=[0.0, 0.6], max_new_tokens=8
    )
    assert list(table.strength) == [0.0, 0.6]
    assert table.changed.iloc[0] == 0 and table.changed.iloc[1] > 0


def test_attribution_on_a_quantized_model_says_so():
    lm = genlab.load("demo", quantization="int8")
    run = lm.start("The capital of France is", max_new_tokens=2)
    run.run()
    with pytest.raises(ValueError, match="quantization="):
        attribute(run)
    # hooks inside still work there: adding zeros changes nothing
    same = lm.start("The capital of France is", max_new_tokens=2)
    with same.hooks({"blocks.3.hook_resid_post": genlab.steer(torch.zeros(576))}):
        same.run()
    assert same.sequences.tolist() == run.sequences.tolist()
