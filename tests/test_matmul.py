"""The two forms of a decoder's weight matrices (genlab/runtime/matmul.py): packed into
oneDNN's layout (the CPU default) and row blocks (elsewhere). Both must give the products
torch's ``F.linear`` gives, for any number of rows, and decoders built either way must
generate the same tokens as transformers."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import tiny_llama
from test_decoders import tiny_gpt2

import genlab
from genlab.models.architectures import build_decoder
from genlab.runtime.matmul import can_pack, dense_weight, matmul, out_features, pack_weight


def weights(out=48, inp=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(out, inp, generator=g), g


@pytest.mark.parametrize("rows", [1, 2, 4, 16, 17, 40])
@pytest.mark.parametrize("packed", [True, False], ids=["packed", "split"])
def test_products_equal_linear_for_any_number_of_rows(rows, packed):
    w, g = weights()
    x = torch.randn(rows, w.shape[1], generator=g)
    add = torch.randn(rows, w.shape[0], generator=g)
    m = pack_weight(w, parts=3, packed=packed)
    assert m.is_mkldnn == packed
    assert out_features(m) == 48 and torch.equal(dense_weight(m), w)
    torch.testing.assert_close(matmul(x, m), F.linear(x, w), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(matmul(x, m, add=add), F.linear(x, w) + add, atol=1e-5, rtol=1e-5)


def test_packed_product_takes_strided_rows():
    w, g = weights()
    h = torch.randn(3, 5, w.shape[1], generator=g)
    rows = h[:, -2:].reshape(6, -1)  # rows from a slice of a sequence: not contiguous
    torch.testing.assert_close(matmul(rows, pack_weight(w, 2)), F.linear(rows, w))


def test_bfloat16_packs_where_the_cpu_can_and_float16_keeps_row_blocks():
    """oneDNN packs bfloat16 only on CPUs with bfloat16 instructions (AVX-512 BF16, AVX-NE-CONVERT
    or AMX; torch reports it as ``_is_mkldnn_bf16_supported``). Elsewhere, an AVX2-only EPYC for
    one, the split form is used. Either way the product is right."""
    w, g = weights()
    x = torch.randn(4, w.shape[1], generator=g)
    packed = pack_weight(w.bfloat16(), 2)
    hardware_can = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    assert can_pack(w.bfloat16()) == hardware_can
    assert packed.is_mkldnn == hardware_can and packed.dtype == torch.bfloat16
    if not hardware_can:
        assert packed.shape == (2, 24, 40)
    want = F.linear(x.bfloat16().float(), w.bfloat16().float())
    torch.testing.assert_close(matmul(x.bfloat16(), packed).float(), want, atol=0.1, rtol=0.02)
    half = pack_weight(w.half(), 2)  # no oneDNN float16 linear: the split form
    assert not half.is_mkldnn and half.shape == (2, 24, 40)
    assert not can_pack(w.half())


def test_asking_for_packed_where_it_cannot_be_says_what_to_do():
    with pytest.raises(ValueError, match=r"packed=True.*float16.*packed=None"):
        pack_weight(torch.zeros(4, 4, dtype=torch.float16), 2, packed=True)


def test_compiled_graphs_see_one_opaque_operator():
    w, g = weights()
    m = pack_weight(w, 2)
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    x = torch.randn(1, w.shape[1], generator=g)
    got = torch.compile(lambda x: matmul(x, m) * 2, backend=backend, fullgraph=True)(x)
    torch.testing.assert_close(got, 2 * F.linear(x, w))
    targets = [str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"]
    assert "genlab.matmul" in targets


@pytest.mark.parametrize("make", [tiny_llama, tiny_gpt2], ids=["llama", "gpt2"])
@pytest.mark.parametrize(
    "settings",
    [dict(), dict(num_beams=4, num_return_sequences=2), dict(do_sample=True, top_k=20)],
    ids=["greedy", "beams", "sampling"],
)
def test_both_forms_generate_the_reference_tokens(make, settings):
    hf_model = make(tie_word_embeddings=True, bos_token_id=1, eos_token_id=2)
    ids = torch.tensor([[5, 17, 33, 8], [9, 21, 40, 11]])
    common = dict(max_new_tokens=10, min_new_tokens=10, pad_token_id=0, **settings)
    torch.manual_seed(7)
    with torch.no_grad():
        want = hf_model.generate(ids, attention_mask=torch.ones_like(ids), **common)
    for packed in (None, False):
        lm = build_decoder(hf_model.config.to_dict(), hf_model.state_dict(), packed=packed)
        torch.manual_seed(7)
        got = genlab.generate(lm, ids, attention_mask=torch.ones_like(ids), **common)
        assert torch.equal(got, want), packed


def test_consume_frees_the_loaders_dict_and_leaves_a_users_dict_alone():
    hf_model = tiny_llama()
    config = hf_model.config.to_dict()
    users = hf_model.state_dict()
    build_decoder(config, users)
    assert len(users) == len(hf_model.state_dict())  # untouched
    own = hf_model.state_dict()
    lm = build_decoder(config, own, consume=True)
    assert own == {}
    ids = torch.tensor([[5, 17, 33]])
    torch.testing.assert_close(lm.forward(ids).logits[0, -1], hf_model(ids).logits[0, -1].detach())


@pytest.mark.parametrize("with_add", [False, True])
def test_gradients_flow_through_packed_products(with_add):
    w, g = weights()
    x = torch.randn(3, w.shape[1], generator=g, requires_grad=True)
    add = torch.randn(3, w.shape[0], generator=g, requires_grad=True) if with_add else None
    y = matmul(x, pack_weight(w, 2, packed=True), add=add)
    (y * torch.arange(48.0)).sum().backward()
    ref_x = x.detach().clone().requires_grad_()
    ref_add = add.detach().clone().requires_grad_() if with_add else None
    ref = F.linear(ref_x, w) + (ref_add if with_add else 0)
    (ref * torch.arange(48.0)).sum().backward()
    torch.testing.assert_close(x.grad, ref_x.grad)
    if with_add:
        torch.testing.assert_close(add.grad, ref_add.grad)


def test_input_gradients_of_a_packed_decoder_equal_the_row_block_form():
    hf_model = tiny_llama()
    ids = torch.tensor([[5, 17, 33, 8]])
    grads = []
    for packed in (None, False):
        lm = build_decoder(hf_model.config.to_dict(), hf_model.state_dict(), packed=packed)
        embeds = lm.embed_tokens(ids).detach().requires_grad_()
        lm.embed_tokens = lambda _ids, e=embeds: e  # saliency: d logit / d input embedding
        lm.forward(ids).logits[0, -1, 7].backward()
        grads.append(embeds.grad)
    assert grads[0].abs().sum() > 0
    torch.testing.assert_close(grads[0], grads[1], atol=1e-5, rtol=1e-4)
