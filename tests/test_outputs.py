"""Output classes and compute_transition_scores, checked against transformers 4.56.2."""

from __future__ import annotations

import dataclasses
import pickle

import pytest
import torch
import transformers
import transformers.generation as hf_generation
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.generation import utils as hf_utils

from genlab import outputs
from genlab.outputs import (
    GenerateBeamDecoderOnlyOutput,
    GenerateBeamEncoderDecoderOutput,
    GenerateDecoderOnlyOutput,
    GenerateEncoderDecoderOutput,
    compute_transition_scores,
)

VOCAB = 24
EOS = 3
CLASS_NAMES = [
    "GenerateDecoderOnlyOutput",
    "GenerateEncoderDecoderOutput",
    "GenerateBeamDecoderOnlyOutput",
    "GenerateBeamEncoderDecoderOutput",
]


@pytest.fixture(scope="module")
def model():
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        bos_token_id=1,
        eos_token_id=EOS,
        pad_token_id=0,
    )
    return LlamaForCausalLM(config).eval()


@pytest.fixture(scope="module")
def prompts():
    g = torch.Generator().manual_seed(1)
    return torch.randint(4, VOCAB, (2, 5), generator=g)


def hf_generate(model, input_ids, seed=0, **kwargs):
    torch.manual_seed(seed)
    with torch.no_grad():
        return model.generate(
            input_ids,
            attention_mask=torch.ones_like(input_ids),
            return_dict_in_generate=True,
            output_scores=True,
            output_logits=True,
            **kwargs,
        )


# ---- the classes -------------------------------------------------------------------------


@pytest.mark.parametrize("name", CLASS_NAMES)
def test_field_names_and_order_match_reference(name):
    ours = [f.name for f in dataclasses.fields(getattr(outputs, name))]
    theirs = [f.name for f in dataclasses.fields(getattr(hf_utils, name))]
    assert ours == theirs


def test_every_alias_the_reference_exports_exists_and_points_to_the_same_class():
    exported = [n for n in dir(hf_generation) if n.endswith("Output") and hasattr(hf_utils, n)]
    exported = [n for n in exported if n != "ModelOutput"]
    assert len(exported) == 14
    for name in exported:
        ours = getattr(outputs, name)
        theirs = getattr(hf_utils, name)
        assert ours.__name__ == theirs.__name__, name


def test_only_first_field_is_required():
    for name in CLASS_NAMES:
        cls = getattr(outputs, name)
        first, *rest = dataclasses.fields(cls)
        assert first.name == "sequences"
        assert first.default is dataclasses.MISSING
        assert all(f.default is None for f in rest)


def _example_values():
    seq = torch.tensor([[5, 6, 7]])
    scores = (torch.randn(1, 4), torch.randn(1, 4))
    beam_indices = torch.tensor([[0, 0]])
    return dict(sequences=seq, scores=scores, beam_indices=beam_indices)


def test_views_behave_like_the_reference_model_output():
    values = _example_values()
    ours = GenerateBeamDecoderOnlyOutput(**values)
    theirs = hf_utils.GenerateBeamDecoderOnlyOutput(**values)
    assert list(ours.keys()) == list(theirs.keys()) == ["sequences", "scores", "beam_indices"]
    assert len(ours.to_tuple()) == len(theirs.to_tuple()) == 3
    for a, b in zip(ours.to_tuple(), theirs.to_tuple(), strict=True):
        assert a is b
    assert ours[0] is theirs[0] is values["sequences"]
    assert ours[1] is theirs[1] is values["scores"]
    assert ours[-1] is theirs[-1] is values["beam_indices"]
    assert ours[1:] == theirs[1:]
    assert [k for k, _ in ours.items()] == [k for k, _ in theirs.items()]
    assert ours["beam_indices"] is theirs["beam_indices"]
    assert list(ours) == list(theirs)
    assert len(ours) == len(theirs) == 3
    for key in ("sequences", "scores", "logits", "sequences_scores", "past_key_values"):
        assert (key in ours) == (key in theirs), key
    assert ours.beam_indices is values["beam_indices"]
    assert ours.logits is None and ours.sequences_scores is None


def test_missing_field_key_error_like_reference_and_get_default():
    values = _example_values()
    ours = GenerateDecoderOnlyOutput(sequences=values["sequences"])
    theirs = hf_utils.GenerateDecoderOnlyOutput(sequences=values["sequences"])
    with pytest.raises(KeyError):
        theirs["scores"]
    with pytest.raises(KeyError, match="output_scores=True"):
        ours["scores"]
    with pytest.raises(KeyError):
        ours["not_a_field"]
    with pytest.raises(IndexError):
        ours[1]
    assert ours.get("scores") is None
    assert ours.get("sequences") is values["sequences"]
    assert 0 not in ours


def test_setting_a_field_shows_in_every_view():
    values = _example_values()
    out = GenerateDecoderOnlyOutput(sequences=values["sequences"])
    out.scores = values["scores"]
    assert list(out.keys()) == ["sequences", "scores"]
    out["logits"] = values["scores"]
    assert out.logits is values["scores"] and out[2] is values["scores"]
    with pytest.raises(KeyError, match="not a field"):
        out["beam_indices"] = 1
    assert dict(out) == {
        "sequences": values["sequences"],
        "scores": values["scores"],
        "logits": values["scores"],
    }


def test_encoder_decoder_classes_views():
    seq = torch.tensor([[0, 4]])
    enc = (torch.zeros(1, 2, 3, 3),)
    out = GenerateEncoderDecoderOutput(sequences=seq, encoder_attentions=enc)
    assert list(out.keys()) == ["sequences", "encoder_attentions"]
    assert out[1] is enc
    beam = GenerateBeamEncoderDecoderOutput(sequences=seq, sequences_scores=torch.tensor([-1.0]))
    assert list(beam.keys()) == ["sequences", "sequences_scores"]


def test_pickle_round_trip_keeps_values():
    values = _example_values()
    out = GenerateBeamDecoderOnlyOutput(**values)
    back = pickle.loads(pickle.dumps(out))
    assert type(back) is GenerateBeamDecoderOnlyOutput
    assert torch.equal(back.sequences, values["sequences"])
    assert list(back.keys()) == list(out.keys())


# ---- compute_transition_scores: parity with real generate() runs --------------------------


def assert_same_transition_scores(model, out, normalize):
    beam_indices = getattr(out, "beam_indices", None)
    expected = model.compute_transition_scores(
        out.sequences, out.scores, beam_indices, normalize_logits=normalize
    )
    got = compute_transition_scores(out.sequences, out.scores, beam_indices, normalize)
    assert got.shape == expected.shape
    assert got.dtype == expected.dtype
    assert torch.equal(got, expected)
    return got


@pytest.mark.parametrize("normalize", [False, True])
def test_greedy_matches_reference(model, prompts, normalize):
    out = hf_generate(model, prompts, max_new_tokens=7, do_sample=False)
    got = assert_same_transition_scores(model, out, normalize)
    assert got.shape == (2, len(out.scores))
    # greedy: the chosen token is the argmax of the processed scores
    assert torch.equal(got[:, 0], out.scores[0].max(-1).values) or normalize


@pytest.mark.parametrize("normalize", [False, True])
def test_sampling_with_return_sequences_matches_reference(model, prompts, normalize):
    out = hf_generate(
        model,
        prompts,
        seed=3,
        max_new_tokens=8,
        do_sample=True,
        top_k=6,
        temperature=0.7,
        num_return_sequences=3,
    )
    got = assert_same_transition_scores(model, out, normalize)
    assert got.shape == (6, len(out.scores))
    # a token the sampler chose is never one a warper removed; only padding after EOS may be
    generated = out.sequences[:, -len(out.scores) :]
    after_eos = (generated == EOS).long().cumsum(-1) - (generated == EOS).long() > 0
    assert torch.isfinite(got[~after_eos]).all()
    assert after_eos.any() or torch.isfinite(got).all()


@pytest.mark.parametrize("normalize", [False, True])
@pytest.mark.parametrize("length_penalty", [1.0, 0.5])
def test_beam_search_matches_reference(model, prompts, normalize, length_penalty):
    out = hf_generate(
        model,
        prompts,
        max_new_tokens=10,
        num_beams=4,
        num_return_sequences=3,
        length_penalty=length_penalty,
    )
    assert (out.beam_indices < 0).any(), "setup: some beams must end early (EOS)"
    assert (out.beam_indices >= 4).any(), "setup: the second prompt's beams are offset"
    got = assert_same_transition_scores(model, out, normalize)
    assert got.shape[0] == 6


@pytest.mark.parametrize("length_penalty", [1.0, 0.5, 2.0])
def test_beam_transition_scores_rebuild_sequences_scores(model, prompts, length_penalty):
    out = hf_generate(
        model,
        prompts,
        max_new_tokens=10,
        num_beams=4,
        num_return_sequences=4,
        length_penalty=length_penalty,
    )
    transition = compute_transition_scores(out.sequences, out.scores, out.beam_indices)
    lengths = (out.beam_indices >= 0).sum(-1)  # generated tokens per row, EOS included
    if length_penalty <= 1.0:  # a length penalty of 2 favours long beams: all reach the end
        assert len(set(lengths.tolist())) > 1, "setup: rows of different lengths"
    rebuilt = transition.sum(-1) / lengths.to(transition.dtype) ** length_penalty
    torch.testing.assert_close(rebuilt, out.sequences_scores, atol=1e-4, rtol=0)


def test_beam_sampling_matches_reference(model, prompts):
    out = hf_generate(
        model, prompts, seed=5, max_new_tokens=6, num_beams=3, do_sample=True, top_k=8
    )
    assert_same_transition_scores(model, out, normalize=False)
    assert_same_transition_scores(model, out, normalize=True)


# ---- compute_transition_scores: hand-made cases and bad input -----------------------------


def test_hand_made_beams_with_early_end():
    # 2 beams, vocab 3, 3 steps; row 0 follows beam 1 then 0 then 0; row 1 ends after 1 step
    scores = (
        torch.tensor([[0.1, 0.2, 0.3], [1.1, 1.2, 1.3]]),
        torch.tensor([[2.1, 2.2, 2.3], [3.1, 3.2, 3.3]]),
        torch.tensor([[4.1, 4.2, 4.3], [5.1, 5.2, 5.3]]),
    )
    sequences = torch.tensor([[9, 2, 0, 1], [9, 1, 0, 0]])
    beam_indices = torch.tensor([[1, 0, 0, -1], [0, -1, -1, -1]])
    got = compute_transition_scores(sequences, scores, beam_indices)
    expected = torch.tensor([[1.3, 2.1, 4.2], [0.2, 0.0, 0.0]])
    assert torch.equal(got, expected)


def test_normalize_logits_gives_log_probs():
    scores = (torch.tensor([[0.0, 0.0]]),)
    got = compute_transition_scores(torch.tensor([[7, 1]]), scores, normalize_logits=True)
    torch.testing.assert_close(got, torch.log(torch.tensor([[0.5]])))


def test_inputs_are_not_modified():
    scores = (torch.tensor([[0.5, 1.0]]), torch.tensor([[2.0, -1.0]]))
    beam_indices = torch.tensor([[0, -1]])
    before = [s.clone() for s in scores], beam_indices.clone()
    compute_transition_scores(torch.tensor([[3, 1, 0]]), scores, beam_indices, True)
    assert all(torch.equal(a, b) for a, b in zip(before[0], scores, strict=True))
    assert torch.equal(before[1], beam_indices)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(sequences=torch.tensor([1, 2]), scores=(torch.zeros(1, 3),)), "sequences: expected"),
        (dict(sequences=torch.zeros(1, 2), scores=(torch.zeros(1, 3),)), "integer token ids"),
        (dict(sequences=torch.tensor([[1, 2]]), scores=()), "scores: expected a non-empty"),
        (
            dict(sequences=torch.tensor([[1, 2]]), scores=(torch.zeros(1, 3), torch.zeros(2, 3))),
            "one shape",
        ),
        (dict(sequences=torch.tensor([[1]]), scores=(torch.zeros(1, 3),) * 2), "2 steps"),
        (dict(sequences=torch.tensor([[1, 2]]), scores=(torch.zeros(2, 3),)), "beam_indices="),
        (
            dict(
                sequences=torch.tensor([[1, 2]]),
                scores=(torch.zeros(2, 3),),
                beam_indices=torch.tensor([[0], [1]]),
            ),
            "beam_indices: 2 rows",
        ),
        (
            dict(
                sequences=torch.tensor([[1, 2]]),
                scores=(torch.zeros(2, 3),),
                beam_indices=torch.tensor([[5]]),
            ),
            "valid beam indices",
        ),
        (
            dict(
                sequences=torch.tensor([[1, 2, 2]]),
                scores=(torch.zeros(2, 3),),
                beam_indices=torch.tensor([[0, 1]]),
            ),
            "only 1 steps",
        ),
    ],
)
def test_bad_input_names_the_field(kwargs, match):
    with pytest.raises(ValueError, match=match):
        compute_transition_scores(**kwargs)
