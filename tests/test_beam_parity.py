"""genlab.generate vs transformers 4.56.2 on the same tiny Llama: beam search, beam
sampling, group (diverse) beam search and constrained beam search.

Every case compares sequences and beam_indices exactly, and scores, logits and
sequences_scores within 1e-4 (-inf exactly where the reference has -inf). The EOS ids used
(14, 76, 61, 65, 68, 10) are tokens this model produces often, so hypotheses do finish
inside the beams; ``test_cases_exercise_eos`` checks that they do.
"""

from __future__ import annotations

import pytest
import torch
from helpers import assert_same
from transformers.generation import DisjunctiveConstraint as HFDisjunctive
from transformers.generation import PhrasalConstraint as HFPhrasal

import genlab

OUT = dict(return_dict_in_generate=True, output_scores=True, output_logits=True)

BEAM_CASES = [
    ("plain", dict(num_beams=4)),
    ("eos_default_stop", dict(num_beams=4, eos_token_id=[14, 76])),
    ("eos_early_true", dict(num_beams=4, eos_token_id=[14, 76], early_stopping=True)),
    ("eos_never", dict(num_beams=4, eos_token_id=[14, 76], early_stopping="never")),
    ("three_eos", dict(num_beams=4, eos_token_id=[61, 65, 68])),
    (
        "three_eos_never_lp2",
        dict(num_beams=4, eos_token_id=[61, 65, 68], early_stopping="never", length_penalty=2.0),
    ),
    ("lp0", dict(num_beams=3, eos_token_id=[14, 76], length_penalty=0.0)),
    (
        "lp_negative",
        dict(num_beams=3, eos_token_id=[14, 76], length_penalty=-1.5, early_stopping="never"),
    ),
    ("return_all", dict(num_beams=4, eos_token_id=[14, 76], num_return_sequences=4)),
    (
        "return_two_early",
        dict(num_beams=5, eos_token_id=[10], num_return_sequences=2, early_stopping=True),
    ),
    (
        "processors",
        dict(num_beams=4, repetition_penalty=1.3, no_repeat_ngram_size=2, eos_token_id=[14, 76]),
    ),
    ("min_new_tokens", dict(num_beams=4, min_new_tokens=6, eos_token_id=[14, 76])),
    ("pad_is_eos", dict(num_beams=3, eos_token_id=[14], pad_token_id=14)),
]
SAMPLE_CASES = [
    ("plain", dict(num_beams=4)),
    ("eos", dict(num_beams=4, eos_token_id=[14, 76], early_stopping=True)),
    ("warpers", dict(num_beams=3, temperature=0.7, top_k=20, top_p=0.9, eos_token_id=[61, 65])),
]
GROUP_CASES = [
    ("plain", dict(num_beams=4, num_beam_groups=2, diversity_penalty=1.0)),
    (
        "eos_done_groups",
        dict(
            num_beams=4,
            num_beam_groups=2,
            diversity_penalty=1.5,
            eos_token_id=[14, 76],
            early_stopping=True,
        ),
    ),
    (
        "three_groups",
        dict(
            num_beams=6,
            num_beam_groups=3,
            diversity_penalty=0.5,
            eos_token_id=[61, 65, 68],
            num_return_sequences=3,
        ),
    ),
    (
        "never_lp",
        dict(
            num_beams=6,
            num_beam_groups=2,
            diversity_penalty=3.0,
            eos_token_id=[10],
            early_stopping="never",
            length_penalty=0.5,
        ),
    ),
    ("no_scores_kept", dict(num_beams=4, num_beam_groups=4, diversity_penalty=2.0)),
]
PHRASE, ALTERNATIVES = [20, 21], [[30], [31, 32]]
CONSTRAINED_CASES = [
    ("phrase", dict(num_beams=4, force_words_ids=[PHRASE])),
    (
        "phrase_and_disjunctive",
        dict(num_beams=4, force_words_ids=[PHRASE, ALTERNATIVES], eos_token_id=[14, 76]),
    ),
    (
        "disjunctive_early",
        dict(
            num_beams=3,
            force_words_ids=[[[5], [6, 7]]],
            eos_token_id=[61, 65, 68],
            early_stopping=True,
        ),
    ),
    (
        "return_two",
        dict(
            num_beams=4,
            force_words_ids=[[40]],
            eos_token_id=[10],
            num_return_sequences=2,
            length_penalty=0.5,
        ),
    ),
]


def _both(model, ids, mask, seed, ref_extra=None, our_extra=None, **cfg):
    torch.manual_seed(seed)
    ref = model.generate(ids, attention_mask=mask, **OUT, **cfg, **(ref_extra or {}))
    torch.manual_seed(seed)
    ours = genlab.generate(model, ids, attention_mask=mask, **OUT, **cfg, **(our_extra or {}))
    return ref, ours


@pytest.mark.parametrize("name,cfg", BEAM_CASES, ids=[c[0] for c in BEAM_CASES])
def test_beam_search_parity(hf_llama, padded_batch, name, cfg):
    ids, mask = padded_batch
    ref, ours = _both(hf_llama, ids, mask, 0, max_new_tokens=12, **cfg)
    assert_same(ref, ours)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name,cfg", SAMPLE_CASES, ids=[c[0] for c in SAMPLE_CASES])
def test_beam_sample_parity(hf_llama, padded_batch, name, cfg, seed):
    ids, mask = padded_batch
    ref, ours = _both(hf_llama, ids, mask, seed, max_new_tokens=10, do_sample=True, **cfg)
    assert_same(ref, ours)


@pytest.mark.filterwarnings("ignore:.*Group Beam Search")
@pytest.mark.parametrize("name,cfg", GROUP_CASES, ids=[c[0] for c in GROUP_CASES])
def test_group_beam_search_parity(hf_llama, padded_batch, name, cfg):
    ids, mask = padded_batch
    ref, ours = _both(hf_llama, ids, mask, 0, max_new_tokens=12, **cfg)
    assert_same(ref, ours)


@pytest.mark.parametrize("name,cfg", CONSTRAINED_CASES, ids=[c[0] for c in CONSTRAINED_CASES])
def test_constrained_beam_search_parity(hf_llama, padded_batch, name, cfg):
    ids, mask = padded_batch
    ref, ours = _both(hf_llama, ids, mask, 0, max_new_tokens=12, **cfg)
    assert_same(ref, ours)
    # every returned sequence that completes the constraints contains the phrase
    if cfg["force_words_ids"] == [PHRASE]:
        for row in ours.sequences.tolist():
            assert any(row[i : i + 2] == PHRASE for i in range(len(row) - 1))


def test_constraint_objects_parity(hf_llama, padded_batch):
    ids, mask = padded_batch
    ref, ours = _both(
        hf_llama,
        ids,
        mask,
        0,
        num_beams=4,
        max_new_tokens=12,
        eos_token_id=[14, 76],
        ref_extra=dict(constraints=[HFPhrasal(PHRASE), HFDisjunctive(ALTERNATIVES)]),
        our_extra=dict(
            constraints=[
                genlab.PhrasalConstraint(PHRASE),
                genlab.DisjunctiveConstraint(ALTERNATIVES),
            ]
        ),
    )
    assert_same(ref, ours)


def test_cases_exercise_eos(hf_llama, padded_batch):
    """The EOS cases above really finish hypotheses early (not only at max length)."""
    ids, mask = padded_batch
    run = genlab.start(
        hf_llama,
        input_ids=ids,
        attention_mask=mask,
        max_new_tokens=12,
        num_beams=4,
        eos_token_id=[14, 76],
        early_stopping=True,
        trace=True,
    )
    out = run.run()
    assert out.shape[1] < ids.shape[1] + 12  # stopped before max length
    tree = run.tracer.trace.beam_tree()
    assert (tree.fate == "finished").sum() >= 8 and tree.token_id[tree.fate == "finished"].isin(
        [14, 76]
    ).all()


@pytest.mark.filterwarnings("ignore:.*Group Beam Search")
def test_group_case_has_a_done_group_while_others_run(hf_llama, padded_batch):
    """eos_done_groups reaches the reference's 'finished group keeps padding' branch."""
    ids, mask = padded_batch
    cfg = dict(GROUP_CASES[1][1])
    run = genlab.start(hf_llama, input_ids=ids, attention_mask=mask, max_new_tokens=12, **cfg)
    mixed = False
    while not run.finished:
        run.step()
        flags = [f for row in run.views.strategy.done_groups for f in row]
        mixed |= any(flags) and not all(flags)
    assert mixed


@pytest.mark.parametrize(
    "cfg",
    [
        dict(num_beams=4, eos_token_id=[14, 76], length_penalty=1.5),
        dict(num_beams=3, length_penalty=-0.5, num_return_sequences=3),
    ],
)
def test_transition_scores_reproduce_sequences_scores(hf_llama, padded_batch, cfg):
    """As in the reference's docstring example: summing the transition scores of a row and
    dividing by generated_length ** length_penalty gives sequences_scores."""
    from transformers.generation.utils import GenerationMixin

    ids, mask = padded_batch
    ref, ours = _both(hf_llama, ids, mask, 0, max_new_tokens=10, **cfg)
    ts = genlab.compute_transition_scores(ours.sequences, ours.scores, ours.beam_indices)
    ref_ts = GenerationMixin.compute_transition_scores(
        hf_llama, ref.sequences, ref.scores, ref.beam_indices
    )
    torch.testing.assert_close(ts, ref_ts, atol=1e-4, rtol=0)
    lengths = (ours.beam_indices >= 0).sum(dim=1)
    rebuilt = ts.sum(dim=1) / lengths ** cfg["length_penalty"]
    torch.testing.assert_close(rebuilt, ours.sequences_scores, atol=1e-4, rtol=0)


def test_plain_tensor_output_and_single_prompt(hf_llama):
    ids = torch.tensor([[4, 9, 21, 40, 11, 7]])
    torch.manual_seed(0)
    ref = hf_llama.generate(ids, num_beams=3, max_new_tokens=8, eos_token_id=[14, 76])
    ours = genlab.generate(hf_llama, ids, num_beams=3, max_new_tokens=8, eos_token_id=[14, 76])
    assert isinstance(ours, torch.Tensor) and torch.equal(ref, ours)


def test_sequences_scores_none_without_output_scores(hf_llama, padded_batch):
    ids, mask = padded_batch
    out = genlab.generate(
        hf_llama,
        ids,
        attention_mask=mask,
        num_beams=3,
        max_new_tokens=5,
        return_dict_in_generate=True,
    )
    assert out.sequences_scores is None and out.scores is None
    assert out.beam_indices.shape == (2, 5)


@pytest.mark.filterwarnings("ignore:.*Group Beam Search")
def test_low_memory_is_refused_by_beam_search_and_ignored_by_group_and_constrained(
    hf_llama, padded_batch
):
    """As in the reference: beam search and beam sampling refuse low_memory=True (a clear
    error naming the field), group and constrained beam search run as without it."""
    ids, mask = padded_batch
    for extra in ({}, {"do_sample": True}):
        with pytest.raises(ValueError, match="low_memory"):
            hf_llama.generate(ids, attention_mask=mask, num_beams=2, low_memory=True, **extra)
        with pytest.raises(ValueError, match="low_memory=True is not supported by beam"):
            genlab.generate(
                hf_llama, ids, attention_mask=mask, num_beams=2, low_memory=True, **extra
            )
    others = (
        dict(num_beams=4, num_beam_groups=2, diversity_penalty=1.0),
        dict(num_beams=3, force_words_ids=[[40]]),
    )
    for cfg in others:
        ref, ours = _both(hf_llama, ids, mask, 0, max_new_tokens=6, low_memory=True, **cfg)
        assert_same(ref, ours)
    run = genlab.start(hf_llama, ids, attention_mask=mask, num_beams=2, max_new_tokens=4)
    run.step()
    run.config.low_memory = True  # a live change is refused before the next step
    with pytest.raises(ValueError, match="low_memory"):
        run.step()
