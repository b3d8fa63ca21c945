"""genlab.load(source, dtype=torch.bfloat16): the built-in decoders in bfloat16 follow
transformers run in bfloat16 on the same weights; float32 stays the default and exact."""

from __future__ import annotations

import pytest
import torch
from helpers import tiny_llama

import genlab
from genlab.runtime.matmul import dense_weight


def reference_in(dtype, seed=5):
    """transformers' tiny Llama built in ``dtype`` with the float32 model's weights, as
    ``from_pretrained(..., torch_dtype=dtype)`` builds it."""
    from transformers import LlamaForCausalLM

    fp32 = tiny_llama(seed=seed, vocab=128, hidden_size=64, intermediate_size=128)
    model = LlamaForCausalLM._from_config(fp32.config, torch_dtype=dtype).eval()
    model.load_state_dict(fp32.state_dict())
    return fp32, model


@pytest.fixture
def folder(tmp_path):
    fp32, _ = reference_in(torch.bfloat16)
    fp32.save_pretrained(tmp_path / "tiny")
    return tmp_path / "tiny"


def test_bfloat16_weights_take_half_the_memory_and_float32_stays_the_default(folder):
    lm32, lm16 = genlab.load(folder), genlab.load(folder, dtype=torch.bfloat16)
    assert lm32.model.dtype == torch.float32 and lm16.model.dtype == torch.bfloat16
    m32, m16 = lm32.model, lm16.model
    assert m16.embed.dtype == torch.bfloat16 and m16.layers[0].attn_norm.dtype == torch.bfloat16
    for a, b in zip(m32.layers, m16.layers, strict=True):
        for name in ("qkv", "o", "gate_up", "down"):
            w32, w16 = dense_weight(getattr(a, name)), dense_weight(getattr(b, name))
            assert w16.dtype == torch.bfloat16
            assert w16.numel() * w16.element_size() * 2 == w32.numel() * w32.element_size()
    assert genlab.load(folder, dtype="bfloat16").model.dtype == torch.bfloat16


def test_bfloat16_greedy_tokens_follow_transformers_bfloat16():
    fp32, ref16 = reference_in(torch.bfloat16)
    from genlab.models.architectures import build_decoder

    lm = build_decoder(fp32.config.to_dict(), fp32.state_dict(), dtype=torch.bfloat16)
    g = torch.Generator().manual_seed(1)
    for _ in range(4):
        ids = torch.randint(3, 128, (1, 7), generator=g)
        mask = torch.ones_like(ids)
        want = ref16.generate(ids, attention_mask=mask, max_new_tokens=12, do_sample=False)
        got = genlab.generate(lm, input_ids=ids, attention_mask=mask, max_new_tokens=12)
        assert torch.equal(got, want)
        # logits: genlab's bfloat16 is as close to float32 as transformers' own bfloat16
        with torch.no_grad():
            ref32_logits = fp32(ids).logits
            ref16_logits = ref16(ids).logits.float()
        ours = lm.forward(
            ids, attention_mask=mask, position_ids=torch.arange(7)[None], cache=lm.new_cache(1),
            logits_to_keep=0,
        ).logits  # fmt: skip
        theirs_err = (ref16_logits - ref32_logits).abs().max()
        assert (ours - ref32_logits).abs().max() <= theirs_err
        assert (ours - ref16_logits).abs().max() <= theirs_err


def test_dtype_is_checked_and_model_objects_say_how_to_convert(folder):
    with pytest.raises(ValueError, match=r"dtype=torch.int8.*bfloat16"):
        genlab.load(folder, dtype=torch.int8)
    with pytest.raises(ValueError, match=r"hf_model.to\(torch.bfloat16\)"):
        genlab.load(tiny_llama(), dtype=torch.bfloat16)
