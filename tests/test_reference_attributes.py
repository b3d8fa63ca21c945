"""Every logits processor, warper, stopping criterion, constraint and watermark processor
that genlab shares with transformers 4.56.2 carries the reference's public attributes, with
the reference's meanings: built from the same arguments, both objects have the same public
attribute names and equal values (code written against the reference's objects works on
genlab's). genlab may have more attributes; the reference's exceptions are listed."""

from __future__ import annotations

import importlib
import time

import pytest
import torch

ENC = torch.tensor([[5, 6, 7, 8, 5, 6]])
T0 = time.time()


def prefix_fn(batch_id, ids):
    return [1, 2, 3]


def unconditional(input_ids, attention_mask=None, use_cache=None, past_key_values=None):
    return None  # never called here


def bpe_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<unk>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )  # fmt: skip
    backend.train_from_iterator(["stop here, the end of the story"] * 4, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>")


# class name -> how to build it (the same call on both sides)
CASES = {
    "SequenceBiasLogitsProcessor": lambda c: c([[[1, 2], -1.0], [[4], 2.0]]),
    "NoBadWordsLogitsProcessor": lambda c: c([[3], [4, 5], [2]], eos_token_id=2),
    "MinLengthLogitsProcessor": lambda c: c(5, 2),
    "MinNewTokensLengthLogitsProcessor": lambda c: c(3, 4, [2, 7]),
    "PrefixConstrainedLogitsProcessor": lambda c: c(prefix_fn, 2),
    "ForcedBOSTokenLogitsProcessor": lambda c: c(1),
    "ForcedEOSTokenLogitsProcessor": lambda c: c(10, [2, 3]),
    "SuppressTokensLogitsProcessor": lambda c: c([3, 4]),
    "SuppressTokensAtBeginLogitsProcessor": lambda c: c([3, 4], 5),
    "ClassifierFreeGuidanceLogitsProcessor": lambda c: c(1.5),
    "UnbatchedClassifierFreeGuidanceLogitsProcessor": lambda c: c(1.5, unconditional, ENC),
    "InfNanRemoveLogitsProcessor": lambda c: c(),
    "LogitNormalization": lambda c: c(),
    "RepetitionPenaltyLogitsProcessor": lambda c: c(1.2),
    "EncoderRepetitionPenaltyLogitsProcessor": lambda c: c(1.25, ENC),
    "NoRepeatNGramLogitsProcessor": lambda c: c(2),
    "EncoderNoRepeatNGramLogitsProcessor": lambda c: c(2, ENC),
    "HammingDiversityLogitsProcessor": lambda c: c(0.5, 4, 2),
    "ExponentialDecayLengthPenalty": lambda c: c((2, 1.1), 2, 5),
    "TemperatureLogitsWarper": lambda c: c(0.7),
    "TopKLogitsWarper": lambda c: c(5, min_tokens_to_keep=2),
    "TopPLogitsWarper": lambda c: c(0.9, min_tokens_to_keep=2),
    "MinPLogitsWarper": lambda c: c(0.1),
    "TypicalLogitsWarper": lambda c: c(0.9),
    "EpsilonLogitsWarper": lambda c: c(0.01),
    "EtaLogitsWarper": lambda c: c(0.01, device="cpu"),
    "MaxLengthCriteria": lambda c: c(10),
    "MaxTimeCriteria": lambda c: c(5.0, initial_timestamp=T0),
    "EosTokenCriteria": lambda c: c([2, 3]),
    "ConfidenceCriteria": lambda c: c(0.4),
    "StopStringCriteria": lambda c: c(bpe_tokenizer(), ["the end", "stop"]),
    "PhrasalConstraint": lambda c: c([1, 2, 3]),
    "DisjunctiveConstraint": lambda c: c([[1, 2], [1, 3, 4]]),
    "DisjunctiveTrie": lambda c: c([[1, 2], [1, 3, 4]]),
    "WatermarkLogitsProcessor": lambda c: c(
        vocab_size=96,
        device="cpu",
        greenlist_ratio=0.25,
        bias=2.0,
        hashing_key=15485863,
        seeding_scheme="selfhash",
        context_width=2,
    ),  # fmt: skip
    "SynthIDTextWatermarkLogitsProcessor": lambda c: c(
        ngram_len=3,
        keys=[1, 2, 3],
        sampling_table_size=2**8,
        sampling_table_seed=0,
        context_history_size=16,
        device="cpu",
    ),  # fmt: skip
}
# public attributes of the reference that genlab leaves out, and why
REFERENCE_ONLY = {
    # continuous-batching context (set_continuous_batching_context): genlab has no
    # continuous batching; both are None until the reference's batching engine sets them
    "RepetitionPenaltyLogitsProcessor": {"logits_indices", "cu_seq_lens_q"},
    # the reference's precomputed tables for its vectorised matching (per-token valid
    # positions and end lengths, packed in one embedding); genlab matches the decoded
    # tail of each row against the stop strings instead, and keeps stop_strings and
    # maximum_token_len with the reference's meanings
    "StopStringCriteria": {
        "embedding_vec",
        "max_valid_end_lens",
        "max_valid_positions",
        "num_stop_strings",
        "target_lens",
    },
}
GENLAB_MODULES = [
    "genlab.processors",
    "genlab.stopping",
    "genlab.strategies.constraints",
    "genlab.watermark",
]
REFERENCE_MODULES = [
    "transformers.generation.logits_process",
    "transformers.generation.stopping_criteria",
    "transformers.generation.beam_constraints",
    "transformers.generation.watermarking",
]


def find(name, modules):
    for module in map(importlib.import_module, modules):
        if hasattr(module, name):
            return getattr(module, name)
    raise LookupError(name)


def public(obj) -> dict:
    """Public attributes: instance attributes and the class's properties."""
    names = {k for k in vars(obj) if not k.startswith("_")}
    names |= {
        k for k in dir(type(obj))
        if not k.startswith("_") and isinstance(getattr(type(obj), k, None), property)
    }  # fmt: skip
    return {k: getattr(obj, k) for k in names}


def same(a, b) -> bool:
    if isinstance(a, torch.Generator) or isinstance(b, torch.Generator):
        return isinstance(a, torch.Generator) and isinstance(b, torch.Generator)
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        a, b = torch.as_tensor(a), torch.as_tensor(b)
        return a.shape == b.shape and torch.equal(a.to(b.dtype), b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if type(a).__name__ == type(b).__name__ and hasattr(a, "__dict__"):
        return same(public(a), public(b))  # nested objects (tries, tokenizers' parts)
    if callable(a) and callable(b):
        return a is b
    return bool(a == b)


def test_every_shared_class_is_compared():
    import inspect

    shared = set()
    for module in map(importlib.import_module, GENLAB_MODULES):
        for name, cls in vars(module).items():
            if inspect.isclass(cls) and cls.__module__.startswith("genlab"):
                try:
                    find(name, REFERENCE_MODULES)
                except LookupError:
                    continue
                shared.add(name)
    # base classes, lists, list states and the detector are built from other objects
    skipped = {
        "LogitsProcessor", "LogitsProcessorList", "StoppingCriteria", "StoppingCriteriaList",
        "Constraint", "ConstraintListState", "WatermarkDetector",
    }  # fmt: skip
    assert shared - skipped == set(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_public_attributes_match_the_reference(name):
    build = CASES[name]
    ref = build(find(name, REFERENCE_MODULES))
    ours = build(find(name, GENLAB_MODULES))
    ref_attrs, our_attrs = public(ref), public(ours)
    missing = set(ref_attrs) - set(our_attrs) - REFERENCE_ONLY.get(name, set())
    assert not missing, f"{name} lacks the reference's attributes {sorted(missing)}"
    differ = [k for k in ref_attrs if k in our_attrs and not same(ref_attrs[k], our_attrs[k])]
    assert not differ, [(k, ref_attrs[k], our_attrs[k]) for k in differ]


def test_constraint_list_state_attributes():
    from transformers.generation.beam_constraints import ConstraintListState as RefState
    from transformers.generation.beam_constraints import PhrasalConstraint as RefPhrasal

    from genlab.strategies.constraints import ConstraintListState, PhrasalConstraint

    ref = RefState([RefPhrasal([1, 2]), RefPhrasal([3, 4, 5])])
    ours = ConstraintListState([PhrasalConstraint([1, 2]), PhrasalConstraint([3, 4, 5])])
    for state in (ref, ours):
        state.reset([1, 2, 3])
    assert set(public(ref)) <= set(public(ours))
    for key in set(public(ref)) - {"constraints", "complete_constraints", "inprogress_constraint",
                                   "pending_constraints"}:  # fmt: skip
        assert same(public(ref)[key], public(ours)[key]), key
