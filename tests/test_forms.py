"""The measured choice of a weight matrix's form (genlab/models/matmul.py: choose_form) and
the form that keeps both (TwoForms: split rows for one row, packed for several)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import tiny_llama

import genlab
from genlab.models import matmul as mm
from genlab.models.architectures import build_decoder


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


def fake_measurement(monkeypatch, packed, split):
    """choose_form's timings replaced: {form: (ms for 1 row, ms for 16 rows)}."""
    monkeypatch.setattr(mm, "measure_forms", lambda dtype: {"packed": packed, "split": split})


def test_choice_follows_the_measurement(monkeypatch):
    monkeypatch.delenv("GENLAB_WEIGHT_FORM", raising=False)
    fake_measurement(monkeypatch, packed=(1.0, 2.0), split=(2.0, 4.0))
    assert mm.choose_form(torch.float32).form == "packed"
    fake_measurement(monkeypatch, packed=(2.0, 5.0), split=(1.0, 3.0))
    assert mm.choose_form(torch.float32).form == "split"
    fake_measurement(monkeypatch, packed=(2.0, 2.0), split=(1.0, 4.0))
    choice = mm.choose_form(torch.float32, weight_bytes=1000)
    assert choice.form == "both" and choice.packed == "both"
    assert (
        "split for 1 row, packed for 16" in choice.reason
        and "1 row: packed 2.00 ms" in choice.reason
    )
    # several rows stay packed unless split is clearly (25 %) faster: a near tie keeps both
    fake_measurement(monkeypatch, packed=(2.0, 4.0), split=(1.0, 3.6))
    assert mm.choose_form(torch.float32, weight_bytes=1000).form == "both"
    fake_measurement(monkeypatch, packed=(2.0, 4.0), split=(1.0, 2.9))
    assert mm.choose_form(torch.float32, weight_bytes=1000).form == "split"
    fake_measurement(monkeypatch, packed=(2.0, 2.0), split=(1.0, 4.0))
    # no room for a second copy: the one-row winner
    monkeypatch.setattr(mm, "free_memory_bytes", lambda: 3000)
    assert mm.choose_form(torch.float32, weight_bytes=1000).form == "split"
    # a near tie for one row is not worth a second copy of the weights, whatever the memory
    monkeypatch.setattr(mm, "free_memory_bytes", lambda: 10**12)
    fake_measurement(monkeypatch, packed=(12.22, 33.2), split=(12.0, 36.0))
    choice = mm.choose_form(torch.float32, weight_bytes=1000)
    assert choice.form == "split" and "not 15% faster for one row" in choice.reason


def test_the_split_form_takes_the_block_count_measured_fastest(monkeypatch):
    monkeypatch.delenv("GENLAB_WEIGHT_FORM", raising=False)
    monkeypatch.setattr(
        mm,
        "measure_forms",
        lambda dtype: {"packed": (3.0, 2.0), "split": (1.0, 4.0), "split_parts": 1},
    )
    monkeypatch.setattr(mm, "free_memory_bytes", lambda: 10**12)
    choice = mm.choose_form(torch.float32, weight_bytes=1000)
    assert (
        choice.form == "both" and choice.parts == 1 and "split in 1 block 1.00 ms" in choice.reason
    )
    hf_model = tiny_llama()
    lm = build_decoder(hf_model.config.to_dict(), dict(hf_model.state_dict()))
    assert lm.form_choice.parts == 1
    assert all(layer.qkv.split.shape[0] == 1 for layer in lm.layers)  # one block, as measured
    monkeypatch.setattr(
        mm,
        "measure_forms",
        lambda dtype: {"packed": (3.0, 2.0), "split": (1.0, 4.0), "split_parts": 2},
    )
    lm = build_decoder(hf_model.config.to_dict(), dict(hf_model.state_dict()))
    assert {layer.qkv.split.shape[0] for layer in lm.layers} <= {2, 1}  # 2 where it divides


def test_float16_and_the_environment_override(monkeypatch):
    monkeypatch.delenv("GENLAB_WEIGHT_FORM", raising=False)
    assert mm.choose_form(torch.float16).form == "split"  # no oneDNN float16 linear
    monkeypatch.setenv("GENLAB_WEIGHT_FORM", "packed")
    assert mm.choose_form(torch.float32).form == "packed"
    monkeypatch.setattr(
        mm, "measure_forms", lambda dtype: {"packed": (2, 2), "split": (1, 1), "split_parts": 1}
    )
    monkeypatch.setenv("GENLAB_WEIGHT_FORM", "both")  # the user's form, the measured blocks
    assert (mm.choose_form(torch.float32).form, mm.choose_form(torch.float32).parts) == ("both", 1)
    monkeypatch.setenv("GENLAB_WEIGHT_FORM", "fast")
    with pytest.raises(ValueError, match="GENLAB_WEIGHT_FORM='fast'.*packed, split or both"):
        mm.choose_form(torch.float32)


def test_measurement_is_taken_once_per_process_and_reports_both_forms():
    torch.set_num_threads(torch.get_num_threads())
    ms = mm.measure_forms(torch.float32, repeats=1)
    assert set(ms) == {"packed", "split", "split_parts"}
    assert all(len(ms[f]) == 2 and min(ms[f]) > 0 for f in ("packed", "split"))
    assert ms["split_parts"] in {1, torch.get_num_threads()}
    assert mm.measure_forms(torch.float32) is ms  # stored: not measured again


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
