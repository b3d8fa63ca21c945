"""The measured choice of a weight matrix's form (genlab/runtime/matmul.py: choose_form) and
the form that keeps both (TwoForms: split rows for one row, packed for several)."""

from __future__ import annotations

import time

import pytest
import torch
import torch.nn.functional as F
from helpers import tiny_llama

import genlab
from genlab.models.architectures import build_decoder
from genlab.runtime import matmul as mm


@pytest.mark.parametrize("rows", [1, 2, 16, 40])
def test_two_forms_give_linear_for_any_number_of_rows(rows):
    g = torch.Generator().manual_seed(0)
    w = torch.randn(48, 40, generator=g)
    x, add = torch.randn(rows, 40, generator=g), torch.randn(rows, 48, generator=g)
    both = mm.pack_weight(w, 3, packed="both")
    assert isinstance(both, mm.TwoForms) and both.packed.is_mkldnn and both.split.dim() == 3
    assert mm.out_features(both) == 48 and torch.equal(mm.dense_weight(both), w)
    assert both.dtype == torch.float32 and tuple(both.shape) == (48, 40)
    torch.testing.assert_close(mm.matmul(x, both), F.linear(x, w), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(mm.matmul(x, both, add=add), F.linear(x, w) + add)


def test_the_form_is_a_function_of_the_machine_and_the_setting(monkeypatch):
    monkeypatch.delenv("GENLAB_WEIGHT_FORM", raising=False)
    monkeypatch.setattr(mm, "cpu_vendor", lambda: "GenuineIntel")
    intel = mm.choose_form(torch.float32)
    assert (intel.form, intel.parts) == ("split", 1) and "split in 1 block," in intel.reason
    monkeypatch.setattr(mm, "cpu_vendor", lambda: "AuthenticAMD")
    first = mm.choose_form(torch.float32)
    assert (first.form, first.parts) == ("split", torch.get_num_threads())
    assert "one copy" in first.reason and "GENLAB_WEIGHT_FORM=packed" in first.reason
    assert mm.choose_form(torch.bfloat16).form == "packed"  # oneDNN packs bfloat16 on a CPU

    # no timing decides it: with no product and no clock to read, the same answer
    def timed(*args, **kwargs):
        raise AssertionError("choose_form timed something")

    monkeypatch.setattr(mm, "matmul", timed)
    monkeypatch.setattr(time, "perf_counter", timed)
    assert mm.choose_form(torch.float32) == first


def test_split_blocks_follow_the_cpu_vendor(monkeypatch):
    monkeypatch.setattr(mm, "cpu_vendor", lambda: "GenuineIntel")
    assert mm.split_parts() == 1
    monkeypatch.setattr(mm, "cpu_vendor", lambda: "AuthenticAMD")
    assert mm.split_parts() == torch.get_num_threads()
    assert mm.split_parts("meta") == torch.get_num_threads()


def test_float16_and_the_environment_override(monkeypatch):
    monkeypatch.delenv("GENLAB_WEIGHT_FORM", raising=False)
    assert mm.choose_form(torch.float16).form == "split"  # no oneDNN float16 linear
    for form in mm.FORMS:
        monkeypatch.setenv("GENLAB_WEIGHT_FORM", form)
        choice = mm.choose_form(torch.float32)
        assert choice.form == form and choice.reason == f"GENLAB_WEIGHT_FORM={form}"
        assert (choice.parts is None) == (form == "packed")
    monkeypatch.setenv("GENLAB_WEIGHT_FORM", "packed")
    assert mm.choose_form(torch.float16).form == "split"  # cannot pack: said so
    assert "oneDNN cannot pack" in mm.choose_form(torch.float16).reason
    monkeypatch.setenv("GENLAB_WEIGHT_FORM", "fast")
    with pytest.raises(ValueError, match="GENLAB_WEIGHT_FORM='fast'.*packed, split or both"):
        mm.choose_form(torch.float32)


def test_a_decoder_keeping_both_forms_generates_the_reference_tokens():
    hf_model = tiny_llama()
    lm = build_decoder(hf_model.config.to_dict(), hf_model.state_dict(), packed="both")
    assert isinstance(lm.head, mm.TwoForms) and isinstance(lm.layers[0].qkv, mm.TwoForms)
    ids = torch.tensor([[5, 9, 2, 7, 11]])
    mask = torch.ones_like(ids)
    want = hf_model.generate(ids, attention_mask=mask, max_new_tokens=8, do_sample=False)
    for rows in (1, 3):  # one row uses the split view, three the packed copy
        got = genlab.generate(
            lm, input_ids=ids.repeat(rows, 1), attention_mask=mask.repeat(rows, 1),
            max_new_tokens=8, do_sample=False,
        )  # fmt: skip
        assert torch.equal(got, want.repeat(rows, 1))


def test_a_built_decoder_records_why_its_form_was_chosen(monkeypatch):
    monkeypatch.setenv("GENLAB_WEIGHT_FORM", "split")
    hf_model = tiny_llama()
    lm = build_decoder(hf_model.config.to_dict(), hf_model.state_dict())
    assert lm.form_choice.form == "split" and "GENLAB_WEIGHT_FORM" in lm.form_choice.reason
    assert lm.head.dim() == 3  # row blocks
    chosen = build_decoder(hf_model.config.to_dict(), hf_model.state_dict(), packed=True)
    assert chosen.form_choice is None


def test_shake_moves_each_logit_by_a_few_ulps_the_same_way_every_time():
    logits = torch.randn(2, 3, 1000) * 10
    shaken = mm.shake(logits, ulps=8)
    relative = ((shaken - logits) / logits).abs()
    assert float(relative.max()) <= 9 * 2.0**-23  # at most 8 ulps each, and the rounding
    assert float(relative.mean()) > 2 * 2.0**-23  # and most move: a real shake
    assert torch.equal(shaken, mm.shake(logits, ulps=8))  # fixed per token id
    assert torch.equal(mm.shake(logits, ulps=0), logits)
