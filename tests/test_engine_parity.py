"""genlab.generate vs transformers 4.56.2 generate on the same model object and seed:
greedy and multinomial sampling, every processor alone and in combinations."""

from __future__ import annotations

import pytest
import torch
from helpers import assert_same

import genlab

# (name, config) pairs; each runs greedy (if valid) and sampling with several seeds
PROCESSOR_CASES = [
    ("plain", {}),
    ("repetition_penalty", {"repetition_penalty": 1.7}),
    ("no_repeat_ngram", {"no_repeat_ngram_size": 2}),
    ("bad_words", {"bad_words_ids": [[7], [12, 30]]}),
    ("min_new_tokens", {"min_new_tokens": 5, "eos_token_id": 3}),
    ("min_length", {"min_length": 10, "eos_token_id": [3, 4]}),
    ("forced_bos", {"forced_bos_token_id": 9}),
    ("forced_eos", {"forced_eos_token_id": 5}),
    ("suppress", {"suppress_tokens": [3, 4, 10]}),
    ("begin_suppress", {"begin_suppress_tokens": [3, 4]}),
    ("sequence_bias", {"sequence_bias": {(40,): 3.0, (12, 13): -2.0}}),
    ("exp_decay", {"exponential_decay_length_penalty": (3, 1.5), "eos_token_id": 6}),
    ("remove_invalid", {"remove_invalid_values": True}),
    ("renormalize", {"renormalize_logits": True}),
    ("encoder_rep", {"encoder_repetition_penalty": 1.5}),
]
SAMPLING_CASES = [
    ("top_k", {"top_k": 5}),
    ("top_p", {"top_p": 0.8, "top_k": 0}),
    ("temperature", {"temperature": 0.7}),
    ("min_p", {"min_p": 0.1}),
    ("typical", {"typical_p": 0.9}),
    ("epsilon", {"epsilon_cutoff": 0.01}),
    ("eta", {"eta_cutoff": 0.01}),
    (
        "combo",
        {
            "temperature": 1.3,
            "top_k": 20,
            "top_p": 0.9,
            "repetition_penalty": 1.2,
            "no_repeat_ngram_size": 3,
        },
    ),
    ("combo_renorm", {"temperature": 0.5, "min_p": 0.05, "renormalize_logits": True}),
]
OUT = dict(return_dict_in_generate=True, output_scores=True, output_logits=True)


def _both(hf_model, ids, mask, seed, **cfg):
    torch.manual_seed(seed)
    ref = hf_model.generate(ids, attention_mask=mask, **OUT, **cfg)
    torch.manual_seed(seed)
    ours = genlab.generate(hf_model, ids, attention_mask=mask, **OUT, **cfg)
    return ref, ours


@pytest.mark.parametrize("name,cfg", PROCESSOR_CASES, ids=[c[0] for c in PROCESSOR_CASES])
def test_greedy_parity(hf_llama, padded_batch, name, cfg):
    ids, mask = padded_batch
    ref, ours = _both(hf_llama, ids, mask, 0, max_new_tokens=12, do_sample=False, **cfg)
    assert_same(ref, ours)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize(
    "name,cfg",
    PROCESSOR_CASES + SAMPLING_CASES,
    ids=[c[0] for c in PROCESSOR_CASES + SAMPLING_CASES],
)
def test_sampling_parity(hf_llama, padded_batch, name, cfg, seed):
    ids, mask = padded_batch
    ref, ours = _both(hf_llama, ids, mask, seed, max_new_tokens=10, do_sample=True, **cfg)
    assert_same(ref, ours)


def test_num_return_sequences_and_eos_padding(hf_llama, padded_batch):
    ids, mask = padded_batch
    # pick an EOS the model actually produces so that rows finish at different steps
    first = hf_llama.generate(ids, attention_mask=mask, max_new_tokens=6, do_sample=False)
    eos = int(first[0, ids.shape[1] + 2])
    for seed in range(3):
        ref, ours = _both(
            hf_llama,
            ids,
            mask,
            seed,
            max_new_tokens=12,
            do_sample=True,
            num_return_sequences=3,
            eos_token_id=eos,
            pad_token_id=0,
            top_k=8,
        )
        assert_same(ref, ours)
    ref, ours = _both(hf_llama, ids, mask, 0, max_new_tokens=12, eos_token_id=eos)
    assert_same(ref, ours)
    assert (ours.sequences[0, ids.shape[1] + 3 :] == 0).all()  # padded after EOS


def test_length_semantics(hf_llama, padded_batch):
    ids, mask = padded_batch
    for cfg in (
        {"max_length": 15},
        {},
        {"max_new_tokens": 3},
        {"min_length": 12, "max_length": 14},
    ):
        ref, ours = _both(hf_llama, ids, mask, 0, **cfg)
        assert_same(ref, ours)


def test_attentions_hidden_states(padded_batch):
    from helpers import tiny_llama

    ids, mask = padded_batch
    hf_llama = tiny_llama()
    hf_llama.set_attn_implementation("eager")  # sdpa returns no attention weights
    kw = dict(max_new_tokens=4, output_attentions=True, output_hidden_states=True)
    ref, ours = _both(hf_llama, ids, mask, 0, **kw)
    assert len(ref.attentions) == len(ours.attentions) == 4
    for a_step, b_step in zip(ref.attentions, ours.attentions, strict=True):
        for a, b in zip(a_step, b_step, strict=True):
            torch.testing.assert_close(a, b)
    for a_step, b_step in zip(ref.hidden_states, ours.hidden_states, strict=True):
        for a, b in zip(a_step, b_step, strict=True):
            torch.testing.assert_close(a, b)


def test_plain_tensor_output_and_transition_scores(hf_llama, padded_batch):
    ids, mask = padded_batch
    ref = hf_llama.generate(ids, attention_mask=mask, max_new_tokens=5)
    ours = genlab.generate(hf_llama, ids, attention_mask=mask, max_new_tokens=5)
    assert isinstance(ours, torch.Tensor) and torch.equal(ref, ours)
    ref, ours = _both(hf_llama, ids, mask, 3, max_new_tokens=6, do_sample=True, top_k=10)
    for norm in (False, True):
        a = hf_llama.compute_transition_scores(ref.sequences, ref.scores, normalize_logits=norm)
        b = genlab.compute_transition_scores(ours.sequences, ours.scores, normalize_logits=norm)
        torch.testing.assert_close(a, b)


def test_user_processors_and_criteria_from_transformers(hf_llama, padded_batch):
    from transformers import (
        LogitsProcessorList,
        MaxLengthCriteria,
        StoppingCriteriaList,
        TopKLogitsWarper,
    )

    ids, mask = padded_batch
    procs = LogitsProcessorList([TopKLogitsWarper(4)])
    crit = StoppingCriteriaList([MaxLengthCriteria(ids.shape[1] + 5)])
    for seed in range(2):
        torch.manual_seed(seed)
        ref = hf_llama.generate(
            ids,
            attention_mask=mask,
            do_sample=True,
            top_k=0,
            logits_processor=procs,
            stopping_criteria=crit,
            max_new_tokens=20,
            **OUT,
        )
        torch.manual_seed(seed)
        ours = genlab.generate(
            hf_llama,
            ids,
            attention_mask=mask,
            do_sample=True,
            top_k=0,
            logits_processor=procs,
            stopping_criteria=crit,
            max_new_tokens=20,
            **OUT,
        )
        assert_same(ref, ours)
        assert ours.sequences.shape[1] == ids.shape[1] + 5
