"""Quantized weights (genlab.runtime.quant): the demo's int4 weights are its GGUF file's own
blocks, products agree with the dense weights they stand for, the memory is a quarter of
float32 or less, and the float32 model drafted by its own int4 copy writes its own tokens."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import tiny_gpt2, tiny_llama

import genlab
from genlab.experiments.agreement import summary
from genlab.models.architectures import build_decoder
from genlab.runtime.matmul import dense_weight, weight_bytes
from genlab.runtime.quant import Int4Weight, Int8Weight, check_quantization

MATRICES = ("qkv", "o", "gate_up", "down")


@pytest.fixture(scope="module")
def demo_int4():
    return genlab.load("demo", quantization="int4")


@pytest.mark.parametrize("cls", [Int4Weight, Int8Weight])
@pytest.mark.parametrize("compute", [torch.float32, torch.bfloat16])
def test_products_equal_the_dense_weights_they_stand_for(cls, compute):
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(96, 64, generator=gen)
    q = cls.quantize(w)
    q.set_compute(compute)
    dense = q.dense()
    # the quantization error is at most half a step: a 15th (int4) or 127th (int8) of a
    # group's range, halved
    step = (w.unflatten(1, (-1, 32)).amax(-1) - w.unflatten(1, (-1, 32)).amin(-1)) / 15
    if cls is Int4Weight:
        err = (dense - w).abs().unflatten(1, (-1, 32)).amax(-1)
        assert bool((err <= step / 2 + 1e-6).all())
    else:
        assert bool(((dense - w).abs() <= w.abs().amax(1, keepdim=True) / 127 / 2 + 1e-6).all())
    x = torch.randn(5, 64, generator=gen)
    want = F.linear(x.to(compute).float(), dense)
    got = q.matmul(x)
    assert got.dtype == torch.float32 and got.shape == (5, 96)
    # float32: rounding of the sums only; bfloat16: inputs and scales rounded to 8 bits
    tol = 1e-5 if compute == torch.float32 else 2e-2 * float(want.abs().max())
    torch.testing.assert_close(got, want, atol=tol, rtol=0 if compute == torch.bfloat16 else 1e-5)
    add = torch.randn(5, 96, generator=gen)
    torch.testing.assert_close(q.matmul(x, add), got + add)


@pytest.mark.slow
def test_the_demos_int4_weights_are_its_files_own_blocks(demo, demo_int4):
    """The file's Q4_1 blocks read as codes * d + m are the float32 path's weights, bit for
    bit; the int4 demo's matrices dequantize to them (o and down against the float32 demo's
    own matrices; qkv and gate_up, into which the float32 demo folds the norm weights,
    against the file's tensors)."""
    from genlab.models.gguf import find_demo_gguf, read_gguf

    checkpoint = read_gguf(find_demo_gguf())  # floats
    with_blocks = read_gguf(find_demo_gguf(), blocks=True)
    assert len(with_blocks.blocks) == 211  # 210 Q4_1 matrices and the Q8_0 embedding
    # the blocks' tensors are shapes alone: their floats are never made
    embed = with_blocks.blocks.pop("model.embed_tokens.weight")()  # Q8_0: int8 rows
    want = Int8Weight.quantize(checkpoint.state_dict["model.embed_tokens.weight"])
    assert torch.equal(embed.codes, want.codes) and torch.equal(embed.scale, want.scale)
    assert all(with_blocks.state_dict[name].is_meta for name in with_blocks.blocks)
    for name, arrays in with_blocks.blocks.items():
        codes, scale, minimum = arrays()
        groups = codes.float().unflatten(1, (-1, 32))
        values = (scale[..., None] * groups + minimum[..., None]).flatten(1)
        assert torch.equal(values, checkpoint.state_dict[name]), name
    for i, (ours, ref) in enumerate(zip(demo_int4.model.layers, demo.model.layers, strict=True)):
        for name in ("o", "down"):
            assert torch.equal(getattr(ours, name).dense(), dense_weight(getattr(ref, name))), i
    sd = checkpoint.state_dict
    layer = demo_int4.model.layers[0]
    gate_up = torch.cat(
        [sd["model.layers.0.mlp.gate_proj.weight"], sd["model.layers.0.mlp.up_proj.weight"]]
    )
    assert torch.equal(layer.gate_up.dense(), gate_up)


@pytest.mark.slow
def test_quantized_demos_take_a_quarter_of_float32s_memory_or_less(demo, demo_int4):
    # what a decoding step reads, one copy each, whatever form this machine chose for the
    # float32 matrices (packed, split or both)
    fp32 = weight_bytes(demo.model)
    int8 = genlab.load("demo", quantization="int8")
    # int8: one byte a weight plus one float32 scale per row (4 / in_features of a byte:
    # 0.7 % for rows of 576), so a quarter plus that (25.15 % measured)
    rows = sum(getattr(layer, n).shape[0] for layer in int8.model.layers for n in MATRICES)
    rows += int8.model.head.shape[0]
    assert weight_bytes(int8.model) <= fp32 / 4 + 4 * rows
    assert weight_bytes(demo_int4.model) <= fp32 / 4
    assert isinstance(demo_int4.model.layers[3].qkv, Int4Weight)
    assert isinstance(int8.model.layers[3].qkv, Int8Weight)
    table = demo.compare(int8, ["What is 2 + 2?"], max_new_tokens=8)
    s = summary(table)
    assert s["tokens"] == len(table) > 0 and 0 <= s["mean_kl"] and s["top1_agreement"] > 0.5


@pytest.mark.slow
def test_self_speculation_writes_the_float32_models_greedy_tokens(demo, demo_int4):
    for prompt in ("The capital of France is", "Once upon a time"):
        plain = demo.generate(prompt, max_new_tokens=16, min_new_tokens=16)
        drafted = demo.generate(
            prompt, max_new_tokens=16, min_new_tokens=16, assistant_model=demo_int4.model
        )
        assert torch.equal(plain.sequences, drafted.sequences)


def test_compare_with_itself_is_perfect_agreement():
    hf = tiny_llama(0)
    lm = genlab.LM(build_decoder(hf.config.to_dict(), hf.state_dict()))
    table = lm.compare(lm, [torch.tensor([[1, 5, 9]])], max_new_tokens=4, chat=False)
    assert len(table) == 4 and bool(table["top1_agree"].all())
    assert float(table["kl"].abs().max()) < 1e-6
    other = genlab.LM(build_decoder(hf.config.to_dict(), hf.state_dict(), quantization="int4"))
    table = lm.compare(other, [torch.tensor([[1, 5, 9]])], max_new_tokens=4, chat=False)
    assert float(table["kl"].min()) > 0


def test_a_quantized_tiny_llama_generates_as_its_dense_weights_do():
    """The quantized decoder equals a float32 decoder built from its own dequantized weights
    (bfloat16 products aside: compared with float32 products)."""
    hf = tiny_llama(0)
    q = build_decoder(hf.config.to_dict(), dict(hf.state_dict()), quantization="int8")
    for layer in q.layers:
        for name in MATRICES:
            getattr(layer, name).set_compute(torch.float32)
    q.head.set_compute(torch.float32)
    ids = torch.tensor([[1, 5, 17, 33]])
    ours = genlab.generate(
        q, ids, max_new_tokens=6, output_logits=True, return_dict_in_generate=True
    )
    assert ours.sequences.shape == (1, 10)
    logits = q.forward(
        ids, attention_mask=torch.ones_like(ids), position_ids=torch.arange(4)[None],
        cache=q.new_cache(1),
    ).logits[0, -1]  # fmt: skip
    torch.testing.assert_close(ours.logits[0][0], logits)


def test_bad_quantization_arguments_say_what_to_give():
    with pytest.raises(ValueError, match=r"quantization='int3' is not supported: give 'int4'"):
        check_quantization("int3")
    assert check_quantization(" INT4 ") == "int4" and check_quantization(None) is None
    with pytest.raises(ValueError, match="quantized weights take float32 activations"):
        genlab.load("demo", quantization="int8", dtype=torch.bfloat16)
    hf = tiny_llama(0)
    with pytest.raises(ValueError, match="give quantization with a name or folder"):
        genlab.load(hf, quantization="int8")
    gpt2 = tiny_gpt2()
    with pytest.raises(ValueError, match="supported for Llama-family decoders"):
        build_decoder(gpt2.config.to_dict(), dict(gpt2.state_dict()), quantization="int8")
    with pytest.raises(ValueError, match="int4 needs in_features divisible by 32"):
        Int4Weight.quantize(torch.randn(8, 48))


@pytest.mark.slow
def test_a_sweeps_workers_load_the_same_quantization(demo_int4):
    """genlab.sweep(..., executor=...) sends the load arguments to its workers: they must
    load the int4 model, not the float32 one."""
    from genlab.experiments.sweeps import spec_of, worker_model

    spec = spec_of(demo_int4)
    assert spec.quantization == "int4"
    assert isinstance(worker_model(spec).model.layers[0].qkv, Int4Weight)


def test_int4_refuses_an_output_row_count_its_packing_cannot_take():
    with pytest.raises(ValueError, match="int4 needs out_features divisible by 16.*int8"):
        Int4Weight.quantize(torch.randn(40, 64))
