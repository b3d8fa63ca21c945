"""Parity of the built-in decoders with transformers 4.56.2 on the same (tiny, random) weights.

Every model is built in the test from a config and a seed; the genlab decoder receives the
reference's ``config.to_dict()`` and ``state_dict()`` through ``build_decoder``. A batch with
left padding is run through a prefill (all positions kept) and several one-token decoding
steps with the cache, and logits (hidden states, attentions) are compared step by step.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
from helpers import tiny_gpt2 as gpt2_model
from helpers import tiny_llama as llama_model
from transformers import (
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
)
from transformers.utils import logging as hf_logging

from genlab.models.architectures import (
    FAMILIES,
    MODEL_TYPES,
    build_decoder,
    select_tensors,
    supported_model_types,
)
from genlab.models.base import KVCache, ModelInfo
from genlab.models.gpt2 import GPT2Decoder
from genlab.models.llama import LlamaDecoder
from genlab.runtime.matmul import dense_weight, row_blocks

hf_logging.set_verbosity_error()
TOL = 1e-4
VOCAB = 101

# ---- building tiny reference models ----------------------------------------------------------


def tiny_llama(attn="sdpa", seed=0, **overrides):
    """helpers.tiny_llama, wider (64), 64 positions, no pad id, with ``attn``."""
    kw = dict(
        hidden_size=64, intermediate_size=96, max_position_embeddings=64, rms_norm_eps=1e-5,
        rope_theta=10000.0, attn_implementation=attn, pad_token_id=None,
    )  # fmt: skip
    return llama_model(seed, vocab=VOCAB, **{**kw, **overrides})


def tiny_qwen2(attn="sdpa", seed=1):
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=VOCAB, hidden_size=48, intermediate_size=80, num_hidden_layers=2,
        num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=64,
        tie_word_embeddings=True, attn_implementation=attn,
    )  # fmt: skip
    model = Qwen2ForCausalLM(config).eval()
    with torch.no_grad():  # random init leaves biases at zero: make them matter
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.5)
    return model


def tiny_mistral(attn="sdpa", seed=2, sliding_window=3):
    torch.manual_seed(seed)
    config = MistralConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=1, max_position_embeddings=64,
        sliding_window=sliding_window, attn_implementation=attn,
    )  # fmt: skip
    return MistralForCausalLM(config).eval()


def tiny_gpt2(attn="sdpa", seed=3, **overrides):
    """helpers.tiny_gpt2 with GPT-2's own special ids and random (non-zero) biases."""
    kw = dict(attn_implementation=attn, bos_token_id=50256, eos_token_id=50256)
    model = gpt2_model(seed, vocab=VOCAB, **{**kw, **overrides})
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.2)
    return model


def genlab_from(hf_model, **kwargs):
    return build_decoder(hf_model.config.to_dict(), hf_model.state_dict(), **kwargs)


def left_padded_batch(lengths=(7, 4, 6), seed=0):
    """ids, attention mask and position ids (as transformers' generate derives them)."""
    g = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.randint(3, VOCAB, (len(lengths), width), generator=g)
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    for row, n in enumerate(lengths):
        mask[row, width - n :] = 1
        ids[row, : width - n] = 0
    return ids, mask, positions_from(mask)


def positions_from(mask):
    return (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)


# ---- step-by-step comparison -----------------------------------------------------------------


def run_both(hf_model, lm, ids, mask, steps=4, seed=0, **flags):
    """Prefill then ``steps`` one-token steps on both; yields (ours, theirs) per call."""
    g = torch.Generator().manual_seed(seed)
    positions = positions_from(mask)
    cache = lm.new_cache(ids.shape[0])
    with torch.no_grad():
        theirs = hf_model(input_ids=ids, attention_mask=mask, position_ids=positions,
                          use_cache=True, **flags)  # fmt: skip
    ours = lm.forward(ids, attention_mask=mask, position_ids=positions, cache=cache,
                      logits_to_keep=0, **flags)  # fmt: skip
    yield ours, theirs
    past = theirs.past_key_values
    for _ in range(steps):
        token = torch.randint(3, VOCAB, (ids.shape[0], 1), generator=g)
        mask = torch.cat([mask, torch.ones_like(token)], dim=1)
        step_pos = positions[:, -1:] + 1
        positions = torch.cat([positions, step_pos], dim=1)
        with torch.no_grad():
            theirs = hf_model(input_ids=token, attention_mask=mask, position_ids=step_pos,
                              past_key_values=past, use_cache=True, **flags)  # fmt: skip
        ours = lm.forward(token, attention_mask=mask, position_ids=step_pos, cache=cache, **flags)
        past = theirs.past_key_values
        yield ours, theirs


def assert_logits_match(hf_model, lm, ids=None, mask=None, steps=4):
    if ids is None:
        ids, mask, _ = left_padded_batch()
    calls = 0
    for ours, theirs in run_both(hf_model, lm, ids, mask, steps):
        assert ours.logits.dtype == torch.float32
        assert ours.logits.shape == theirs.logits[:, -ours.logits.shape[1] :].shape
        diff = (ours.logits - theirs.logits[:, -ours.logits.shape[1] :]).abs().max().item()
        assert diff <= TOL, f"call {calls}: max |diff| = {diff}"
        calls += 1
    assert calls == steps + 1


# ---- logits parity ---------------------------------------------------------------------------


def test_llama_gqa_untied_matches_reference():
    hf_model = tiny_llama()
    lm = genlab_from(hf_model, packed=True)
    assert isinstance(lm, LlamaDecoder)
    assert lm.head.is_mkldnn  # packed (oneDNN) on the CPU
    assert not torch.equal(dense_weight(lm.head), lm.embed)
    assert_logits_match(hf_model, lm)
    split = genlab_from(hf_model, packed=False)
    assert split.head.untyped_storage().data_ptr() != split.embed.untyped_storage().data_ptr()
    assert_logits_match(hf_model, split)


def test_llama_tied_mha_explicit_head_dim_and_llama3_rope_match_reference():
    rope = {
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 16,
    }  # fmt: skip
    hf_model = tiny_llama(
        num_key_value_heads=4, head_dim=24, tie_word_embeddings=True, rope_scaling=rope
    )
    lm = genlab_from(hf_model, packed=True)
    assert torch.equal(dense_weight(lm.head), lm.embed)  # packed: a copy of the embedding
    assert_logits_match(hf_model, lm)
    split = genlab_from(hf_model, packed=False)  # row blocks: a view of the embedding
    assert split.head.untyped_storage().data_ptr() == split.embed.untyped_storage().data_ptr()
    assert_logits_match(hf_model, split)


def test_llama_with_biases_and_linear_rope_matches_reference():
    hf_model = tiny_llama(
        attention_bias=True, mlp_bias=True, rope_scaling={"type": "linear", "factor": 2.0}
    )
    with torch.no_grad():
        for name, p in hf_model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.5)
    assert_logits_match(hf_model, genlab_from(hf_model))


def test_qwen2_qkv_bias_matches_reference():
    hf_model = tiny_qwen2()
    lm = genlab_from(hf_model)
    assert lm.layers[0].qkv_bias is not None and lm.layers[0].o_bias is None
    assert_logits_match(hf_model, lm)


def test_mistral_sliding_window_matches_reference():
    hf_model = tiny_mistral(sliding_window=3)
    lm = genlab_from(hf_model)
    assert lm.settings.sliding_window == 3
    assert_logits_match(hf_model, lm, steps=5)


@pytest.mark.parametrize("tied", [True, False])
def test_gpt2_matches_reference(tied):
    hf_model = tiny_gpt2(tie_word_embeddings=tied)
    lm = genlab_from(hf_model)
    assert isinstance(lm, GPT2Decoder)
    assert torch.equal(dense_weight(lm.head), lm.wte) == tied
    assert_logits_match(hf_model, lm)
    split = genlab_from(hf_model, packed=False)
    shared = split.head.untyped_storage().data_ptr() == split.wte.untyped_storage().data_ptr()
    assert shared == tied
    assert_logits_match(hf_model, split)


def test_gpt2_inverse_layer_scaling_matches_reference_eager():
    # transformers honours this flag only in its eager attention; without padding, eager and
    # SDPA agree everywhere (with padding they differ on the padded rows only)
    hf_model = tiny_gpt2(attn="eager", scale_attn_by_inverse_layer_idx=True)
    ids, mask, _ = left_padded_batch(lengths=(6, 6))
    assert_logits_match(hf_model, genlab_from(hf_model), ids, mask, steps=2)


def build_with_parts(hf_model, parts):
    """build_decoder's steps, with matrices as an explicit number of row blocks."""
    config = hf_model.config.to_dict()
    family = FAMILIES[MODEL_TYPES[config["model_type"]]]
    settings = family.settings({**family.defaults[config["model_type"]], **config})
    tensors = select_tensors(hf_model.state_dict(), family.expected_shapes(settings), "")
    info = ModelInfo(vocab_size=VOCAB)
    return family.build(settings, tensors, info, parts=parts, packed=False)


@pytest.mark.parametrize("parts", [1, 3, 4])
@pytest.mark.parametrize("make", [tiny_llama, tiny_gpt2], ids=["llama", "gpt2"])
def test_any_number_of_column_blocks_gives_the_same_logits(make, parts):
    hf_model = make(tie_word_embeddings=True)
    lm = build_with_parts(hf_model, parts)
    qkv = lm.layers[0].qkv  # (parts, out // parts, in)
    assert qkv.shape[0] == row_blocks(qkv.shape[0] * qkv.shape[1], parts) <= parts
    assert_logits_match(hf_model, lm, steps=2)


@pytest.mark.parametrize(
    "make", [tiny_llama, tiny_qwen2, tiny_gpt2], ids=["llama", "qwen2", "gpt2"]
)
def test_one_row_decoding_matches_reference(make):
    # batch 1 takes the one-row path of every matrix product
    hf_model = make()
    ids, mask, _ = left_padded_batch(lengths=(5,))
    assert_logits_match(hf_model, genlab_from(hf_model), ids, mask, steps=3)


def test_positions_beyond_the_initial_rope_table_match_reference():
    hf_model = tiny_llama()
    lm = genlab_from(hf_model)
    lm.rope.initial_length = 8  # force the table to grow during the run
    ids = torch.randint(3, VOCAB, (2, 5), generator=torch.Generator().manual_seed(4))
    positions = torch.arange(5000, 5005).expand(2, 5)
    with torch.no_grad():
        theirs = hf_model(input_ids=ids, position_ids=positions).logits
    ours = lm.forward(ids, position_ids=positions, cache=None, logits_to_keep=0).logits
    assert (ours - theirs).abs().max().item() <= TOL
    assert lm.rope.table.shape[0] > 5004


# ---- hidden states and attentions ------------------------------------------------------------


@pytest.mark.parametrize(
    "make", [tiny_llama, tiny_gpt2, tiny_qwen2], ids=["llama", "gpt2", "qwen2"]
)
def test_hidden_states_and_attentions_match_reference(make):
    hf_model = make(attn="eager")
    lm = genlab_from(hf_model)
    ids, mask, _ = left_padded_batch()
    flags = {"output_hidden_states": True, "output_attentions": True}
    for ours, theirs in run_both(hf_model, lm, ids, mask, steps=2, **flags):
        n = hf_model.config.num_hidden_layers
        assert len(ours.hidden_states) == len(theirs.hidden_states) == n + 1
        assert len(ours.attentions) == len(theirs.attentions) == n
        for a, b in zip(ours.hidden_states, theirs.hidden_states, strict=True):
            assert a.shape == b.shape and (a - b).abs().max().item() <= TOL
        for a, b in zip(ours.attentions, theirs.attentions, strict=True):
            assert a.shape == b.shape and (a - b).abs().max().item() <= TOL
        assert (ours.logits - theirs.logits[:, -ours.logits.shape[1] :]).abs().max() <= TOL


def test_outputs_are_none_unless_asked():
    lm = genlab_from(tiny_llama())
    out = lm.forward(torch.tensor([[5, 6, 7]]), cache=lm.new_cache(1))
    assert out.hidden_states is None and out.attentions is None
    assert out.logits.shape == (1, 1, VOCAB)


@pytest.mark.parametrize("make", [tiny_llama, tiny_gpt2], ids=["llama", "gpt2"])
def test_a_view_on_the_first_layers_matches_a_truncated_reference(make):
    # what assistant_early_exit does: copy the decoder, keep its first k layers
    hf_model = make()
    lm = genlab_from(hf_model)
    view = copy.copy(lm)
    view.layers = lm.layers[:1]
    view.settings = dataclasses.replace(lm.settings, num_layers=1)
    base = hf_model.model if hasattr(hf_model, "model") else hf_model.transformer
    if hasattr(base, "layers"):
        base.layers = base.layers[:1]
    else:
        base.h = base.h[:1]
    ids, mask, pos = left_padded_batch()
    with torch.no_grad():
        expected = hf_model(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    ours = view.forward(ids, attention_mask=mask, position_ids=pos, cache=view.new_cache(3),
                        logits_to_keep=0).logits  # fmt: skip
    assert (ours - expected).abs().max().item() <= TOL


# ---- cache behaviour -------------------------------------------------------------------------


def test_logits_to_keep_selects_the_last_positions():
    lm = genlab_from(tiny_llama())
    ids, mask, pos = left_padded_batch()
    full = lm.forward(ids, attention_mask=mask, position_ids=pos, logits_to_keep=0).logits
    last2 = lm.forward(ids, attention_mask=mask, position_ids=pos, logits_to_keep=2).logits
    assert full.shape == (3, ids.shape[1], VOCAB) and last2.shape == (3, 2, VOCAB)
    torch.testing.assert_close(last2, full[:, -2:], atol=1e-6, rtol=0)


@pytest.mark.parametrize("make", [tiny_llama, tiny_gpt2], ids=["llama", "gpt2"])
def test_prompt_in_chunks_equals_one_prefill(make):
    lm = genlab_from(make())
    ids, mask, pos = left_padded_batch()
    whole = lm.forward(ids, attention_mask=mask, position_ids=pos, cache=lm.new_cache(3),
                       logits_to_keep=0).logits  # fmt: skip
    cache = lm.new_cache(3)
    first = lm.forward(ids[:, :4], attention_mask=mask[:, :4], position_ids=pos[:, :4],
                       cache=cache, logits_to_keep=0).logits  # fmt: skip
    second = lm.forward(ids[:, 4:], attention_mask=mask, position_ids=pos[:, 4:], cache=cache,
                        logits_to_keep=0).logits  # fmt: skip
    assert cache.length() == ids.shape[1]
    valid = mask.bool()
    torch.testing.assert_close(torch.cat([first, second], 1)[valid], whole[valid], atol=TOL, rtol=0)


def test_cache_crop_reorder_and_copy_work_with_the_decoder():
    lm = genlab_from(tiny_llama())
    ids, mask, pos = left_padded_batch()
    cache = lm.new_cache(3)
    lm.forward(ids, attention_mask=mask, position_ids=pos, cache=cache)
    snapshot = cache.copy()
    step = torch.tensor([[9], [10], [11]])
    step_mask = torch.cat([mask, torch.ones_like(step)], 1)
    step_pos = pos[:, -1:] + 1
    a = lm.forward(step, attention_mask=step_mask, position_ids=step_pos, cache=cache).logits
    # crop back to the prompt and repeat the step: same logits
    cache.crop(ids.shape[1])
    b = lm.forward(step, attention_mask=step_mask, position_ids=step_pos, cache=cache).logits
    torch.testing.assert_close(a, b, atol=1e-6, rtol=0)
    # the snapshot was not touched by the steps; reordering its rows permutes the result
    order = torch.tensor([2, 0, 1])
    snapshot.reorder(order)
    c = lm.forward(step[order], attention_mask=step_mask[order], position_ids=step_pos[order],
                   cache=snapshot).logits  # fmt: skip
    torch.testing.assert_close(c, a[order], atol=1e-6, rtol=0)


def test_greedy_loop_matches_reference_generate():
    hf_model = tiny_llama(seed=5)
    lm = genlab_from(hf_model)
    ids, mask, pos = left_padded_batch(lengths=(6, 3), seed=5)
    with torch.no_grad():
        expected = hf_model.generate(ids, attention_mask=mask, max_new_tokens=10, do_sample=False,
                                     min_new_tokens=10, pad_token_id=0)  # fmt: skip
    cache = lm.new_cache(2)
    logits = lm.forward(ids, attention_mask=mask, position_ids=pos, cache=cache).logits
    tokens = []
    for _ in range(10):
        logits[..., hf_model.config.eos_token_id] = float("-inf")  # as min_new_tokens does
        token = logits[:, -1].argmax(-1, keepdim=True)  # (rows, 1)
        tokens.append(token)
        mask = torch.cat([mask, torch.ones_like(token)], 1)
        pos = pos[:, -1:] + 1
        logits = lm.forward(token, attention_mask=mask, position_ids=pos, cache=cache).logits
    assert torch.equal(torch.cat(tokens, 1), expected[:, ids.shape[1] :])


def test_forward_works_inside_and_outside_inference_mode():
    lm = genlab_from(tiny_gpt2())
    ids, step = torch.tensor([[4, 5, 6]]), torch.tensor([[7]])
    outside = lm.new_cache(1)
    a = lm.forward(ids, cache=outside).logits
    b = lm.forward(step, cache=outside).logits
    inside = lm.new_cache(1)
    with torch.inference_mode():
        c = lm.forward(ids, cache=inside).logits
        d = lm.forward(step, cache=inside).logits
    # a snapshot of a cache filled in inference mode is an ordinary cache again
    e = lm.forward(step, cache=inside.copy(), attention_mask=torch.ones(1, 5)).logits
    assert not (a.requires_grad or b.requires_grad or e.requires_grad)
    torch.testing.assert_close(a, c, atol=1e-6, rtol=0)
    torch.testing.assert_close(b, d, atol=1e-6, rtol=0)
    assert e.shape == (1, 1, VOCAB)


def test_lower_precision_weights_still_give_float32_logits():
    hf_model = tiny_llama()
    lm = genlab_from(hf_model, dtype=torch.bfloat16)
    assert lm.head.dtype == torch.bfloat16
    ids, mask, pos = left_padded_batch()
    out = lm.forward(ids, attention_mask=mask, position_ids=pos, cache=lm.new_cache(3))
    assert out.logits.dtype == torch.float32
    with torch.no_grad():
        ref = hf_model(input_ids=ids, attention_mask=mask, position_ids=pos).logits[:, -1:]
    assert (out.logits - ref).abs().max().item() < 0.1  # bf16 rounding, not a different model


# ---- build_decoder: dispatch, info, names ----------------------------------------------------


def test_info_is_filled_from_the_config():
    hf_model = tiny_llama(bos_token_id=1, eos_token_id=[2, 3], pad_token_id=0)
    lm = genlab_from(hf_model, name="tiny", generation_defaults={"temperature": 0.7})
    assert lm.info == ModelInfo(
        vocab_size=VOCAB, bos_token_id=1, eos_token_id=[2, 3], pad_token_id=0,
        max_position_embeddings=64, name="tiny", architecture="llama",
        num_hidden_layers=2, hidden_size=64, generation_defaults={"temperature": 0.7},
        numerics=lm.info.numerics,
    )  # fmt: skip
    assert lm.info.numerics.startswith("float32 weights, split form: ")  # and why
    gpt = genlab_from(tiny_gpt2())
    assert (gpt.info.bos_token_id, gpt.info.eos_token_id) == (50256, 50256)
    assert (gpt.info.max_position_embeddings, gpt.info.architecture) == (64, "gpt2")
    assert isinstance(gpt.new_cache(2), KVCache)
    assert supported_model_types() == ["gpt2", "llama", "mistral", "qwen2"]
    assert repr(lm) == (
        "LlamaDecoder('tiny', llama, 2 layers, hidden 64, heads 4/2 kv, vocab 101, float32)"
    )
    assert repr(gpt).startswith("GPT2Decoder('model', 2 layers, hidden 48, heads 4")


def test_minimal_config_json_takes_reference_defaults():
    hf_model = tiny_llama()
    config = {
        "model_type": "llama", "vocab_size": VOCAB, "hidden_size": 64,
        "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "rms_norm_eps": 1e-5,
    }  # fmt: skip
    lm = build_decoder(config, hf_model.state_dict())
    assert (lm.info.bos_token_id, lm.info.eos_token_id, lm.info.max_position_embeddings) == (
        1, 2, 2048,
    )  # fmt: skip
    assert_logits_match(hf_model, lm, steps=1)


def test_state_dicts_without_the_base_model_prefix_are_accepted():
    hf_llama, hf_gpt2 = tiny_llama(), tiny_gpt2()
    bare_llama = {k.removeprefix("model."): v for k, v in hf_llama.state_dict().items()}
    # the original gpt2 checkpoint: no "transformer." prefix, no lm_head (tied)
    bare_gpt2 = {
        k.removeprefix("transformer."): v
        for k, v in hf_gpt2.state_dict().items()
        if k != "lm_head.weight"
    }
    bare_gpt2["h.0.attn.bias"] = torch.ones(1, 1, 64, 64)  # old buffers are ignored
    assert_logits_match(hf_llama, build_decoder(hf_llama.config.to_dict(), bare_llama), steps=1)
    assert_logits_match(hf_gpt2, build_decoder(hf_gpt2.config.to_dict(), bare_gpt2), steps=1)


# ---- errors ----------------------------------------------------------------------------------


def test_unknown_architecture_names_it_and_the_supported_ones():
    with pytest.raises(ValueError, match=r"model_type='bert'.*gpt2.*llama.*mistral.*qwen2"):
        build_decoder({"model_type": "bert"}, {})
    with pytest.raises(ValueError, match="model_type=None"):
        build_decoder({}, {})
    with pytest.raises(ValueError, match="config must be a dict"):
        build_decoder("llama", {})


def test_missing_tensors_are_named():
    hf_model = tiny_llama()
    sd = dict(hf_model.state_dict())
    del sd["model.layers.1.mlp.up_proj.weight"]
    del sd["lm_head.weight"]  # untied: required
    with pytest.raises(ValueError, match=r"lacks 2 tensor.*layers\.1\.mlp\.up_proj.*lm_head"):
        build_decoder(hf_model.config.to_dict(), sd)


def test_shape_mismatch_names_tensor_and_shapes():
    hf_model = tiny_gpt2()
    sd = dict(hf_model.state_dict())
    sd["transformer.h.0.attn.c_attn.weight"] = torch.zeros(48, 100)
    with pytest.raises(
        ValueError, match=r"h\.0\.attn\.c_attn\.weight: expected \(48, 144\), found \(48, 100\)"
    ):
        build_decoder(hf_model.config.to_dict(), sd)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"rope_scaling": {"rope_type": "yarn", "factor": 2.0}}, r"'yarn'.*supported.*llama3"),
        ({"rope_scaling": {"rope_type": "llama3", "factor": 2.0}}, r"lacks.*low_freq_factor"),
        ({"hidden_act": "gelu"}, r"hidden_act='gelu'.*silu"),
        ({"num_key_value_heads": 3}, r"num_key_value_heads=3.*num_attention_heads=4"),
        ({"hidden_size": 0}, r"hidden_size=0 must be a positive integer"),
        ({"model_type": "qwen2", "use_sliding_window": True}, r"use_sliding_window"),
    ],
)
def test_bad_config_values_are_reported(change, message):
    config = {**tiny_llama().config.to_dict(), **change}
    with pytest.raises(ValueError, match=message):
        build_decoder(config, {})


@pytest.mark.parametrize("make", [tiny_llama, tiny_gpt2], ids=["llama", "gpt2"])
def test_bad_forward_inputs_are_reported_before_any_work(make):
    lm = genlab_from(make())
    ids = torch.tensor([[1, 2, 3]])
    cache = lm.new_cache(1)
    with pytest.raises(ValueError, match=rf"token id {VOCAB}.*\[0, {VOCAB}\)"):
        lm.forward(torch.tensor([[1, VOCAB]]), cache=cache)
    with pytest.raises(ValueError, match=r"token id -1"):
        lm.forward(torch.tensor([[-1, 2]]), cache=cache)
    with pytest.raises(ValueError, match=r"input_ids must be a 2-D tensor"):
        lm.forward(torch.tensor([1, 2]), cache=cache)
    with pytest.raises(ValueError, match=r"integer token ids"):
        lm.forward(ids.float(), cache=cache)
    with pytest.raises(ValueError, match=r"attention_mask has shape \(1, 2\).*\(1, 0 \+ 3\)"):
        lm.forward(ids, attention_mask=torch.ones(1, 2), cache=cache)
    with pytest.raises(ValueError, match=r"position_ids has shape \(1, 2\).*\(1, 3\)"):
        lm.forward(ids, position_ids=torch.tensor([[0, 1]]), cache=cache)
    with pytest.raises(ValueError, match=r"position_ids contains -1"):
        lm.forward(ids, position_ids=torch.tensor([[-1, 0, 1]]), cache=cache)
    with pytest.raises(ValueError, match=r"logits_to_keep=-1"):
        lm.forward(ids, cache=cache, logits_to_keep=-1)
    with pytest.raises(ValueError, match=r"batch_size=0"):
        lm.new_cache(0)
    assert cache.length() == 0  # nothing was appended by the failed calls
    lm.forward(ids, cache=cache)
    with pytest.raises(ValueError, match=r"cache holds 1 rows but input_ids has 2"):
        lm.forward(torch.tensor([[1], [2]]), cache=cache)
    with pytest.raises(ValueError, match=r"cache has 5 layers"):
        lm.forward(ids, cache=KVCache(5))


def test_gpt2_positions_past_its_table_are_reported():
    lm = genlab_from(tiny_gpt2())
    with pytest.raises(ValueError, match=r"position_ids contains 64.*\[0, 64\)"):
        lm.forward(torch.tensor([[1]]), position_ids=torch.tensor([[64]]))


def test_numeric_attention_mask_gives_sdpa_the_numbers_of_its_boolean_one():
    from genlab.models.masks import sdpa_keep_mask

    mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    keep, _ = sdpa_keep_mask(mask, past=2, new_len=4)
    numbers, causal = sdpa_keep_mask(mask, past=2, new_len=4, dtype=torch.float32)
    assert keep.dtype == torch.bool and numbers.dtype == torch.float32 and not causal
    assert torch.equal(numbers == 0, keep) and bool((numbers[~keep] == -float("inf")).all())
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 4 if i == 0 else 6, 8, generator=g) for i in range(3))
    by_bool = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep)
    by_numbers = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=numbers)
    assert torch.equal(by_bool, by_numbers)
