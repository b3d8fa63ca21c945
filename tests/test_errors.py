"""Bad input raises a ValueError naming the field, before any forward pass."""

from __future__ import annotations

import pytest
import torch

import genlab

PROMPT = torch.tensor([[1, 5, 17, 33, 8]])

CASES = [
    ({"do_sample": True, "temperature": 0.0}, "temperature"),
    ({"do_sample": True, "temperature": -1.0}, "temperature"),
    ({"do_sample": True, "top_p": 1.5}, "top_p"),
    ({"do_sample": True, "top_p": -0.1}, "top_p"),  # 0.0 is allowed, as in the reference
    ({"do_sample": True, "top_k": -1}, "top_k"),
    ({"num_beams": 0}, "num_beams"),
    ({"max_new_tokens": 0}, "max_new_tokens"),
    ({"eos_token_id": "2"}, "eos_token_id"),
    ({"pad_token_id": 1.5}, "pad_token_id"),
    ({"eos_token_id": 500}, "eos_token_id"),
    ({"suppress_tokens": [3, 1000]}, "suppress_tokens"),
    ({"repetition_penalty": 0.0}, "repetition_penalty"),
    ({"early_stopping": "sometimes", "num_beams": 2}, "early_stopping"),
]


@pytest.fixture
def counted(hf_llama):
    calls = []
    handle = hf_llama.register_forward_pre_hook(lambda *a, **k: calls.append(1))
    yield hf_llama, calls
    handle.remove()


@pytest.mark.parametrize("cfg,field", CASES, ids=[f for _, f in CASES])
def test_invalid_config_names_field(counted, cfg, field):
    model, calls = counted
    with pytest.raises(ValueError, match=field):
        genlab.generate(model, PROMPT, **cfg)
    assert calls == []


def test_ids_outside_vocabulary(counted):
    model, calls = counted
    with pytest.raises(ValueError, match="input_ids.*vocabulary"):
        genlab.generate(model, torch.tensor([[1, 2, 96]]))
    assert calls == []


def test_prompt_longer_than_context(counted):
    model, calls = counted
    with pytest.raises(ValueError, match="max_position_embeddings"):
        genlab.generate(model, torch.ones(1, 300, dtype=torch.long))
    assert calls == []


def test_unknown_argument(counted):
    model, calls = counted
    with pytest.raises(ValueError, match="top_kk"):
        genlab.generate(model, PROMPT, top_kk=3)
    assert calls == []


def test_mask_shape_mismatch(counted):
    model, calls = counted
    with pytest.raises(ValueError, match="attention_mask"):
        genlab.generate(model, PROMPT, attention_mask=torch.ones(1, 3, dtype=torch.long))
    assert calls == []


def test_not_a_model():
    with pytest.raises(TypeError, match="genlab model"):
        genlab.generate(object(), PROMPT)


def test_interrupted_generation_keeps_tokens(hf_llama):
    run = genlab.start(hf_llama, input_ids=PROMPT, max_new_tokens=10)

    def interrupt(step_record, step):
        if step == 2:
            raise KeyboardInterrupt

    run.add_hook("step_end", interrupt)
    with pytest.warns(UserWarning, match="interrupted"):
        out = run.run()
    assert run.finished_by == "interrupted" and out.shape[1] == PROMPT.shape[1] + 3
