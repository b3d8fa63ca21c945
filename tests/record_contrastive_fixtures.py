"""Record transformers 4.52.4's contrastive search outputs as test fixtures.

transformers 4.56.2 (the project's reference) fetches contrastive search from the Hub, so
the last version that runs it locally, 4.52.4, is the reference for it. One environment
holds one transformers version; run this file with 4.52.4 importable, for example::

    pip install --no-deps --target /tmp/tf452 transformers==4.52.4 "tokenizers>=0.21,<0.22"
    PYTHONPATH=/tmp/tf452 .venv/bin/python tests/record_contrastive_fixtures.py

It builds the same tiny random Llama models as tests/test_contrastive.py (config + seed,
torch 2.13 CPU), stores a checksum of their weights (the test checks that its model is the
same one), runs ``generate`` for each case in CASES and writes
tests/fixtures/contrastive_4_52_4.pt (a few KB).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch
from helpers import tiny_llama  # the tests' own tiny model (tests/ is on the path)

FIXTURE = Path(__file__).parent / "fixtures" / "contrastive_4_52_4.pt"

#: model settings shared with the test: (seed, overrides of tiny_llama's config)
MODELS = {
    "llama_s0": dict(seed=0, vocab=96),
    "llama_s3": dict(seed=3, vocab=64, num_hidden_layers=3),
}

PADDED = ([[0, 0, 5, 17, 33, 8], [4, 9, 21, 40, 11, 7]], [[0, 0, 1, 1, 1, 1], [1] * 6])

#: name -> (model, input_ids, attention_mask, generate kwargs)
CASES = {
    "batch_left_padding_eos": (
        "llama_s0",
        *PADDED,
        dict(
            penalty_alpha=0.6,
            top_k=4,
            max_new_tokens=10,
            return_dict_in_generate=True,
            output_scores=True,
            output_logits=True,
        ),
    ),
    "single_alpha_0_3_k3": (
        "llama_s0",
        [[3, 14, 15, 9, 26]],
        None,
        dict(
            penalty_alpha=0.3,
            top_k=3,
            max_new_tokens=12,
            return_dict_in_generate=True,
            output_scores=True,
        ),
    ),
    "alpha_0_9_k6_repetition_penalty": (
        "llama_s3",
        [[5, 6, 7, 8], [9, 10, 11, 12]],
        None,
        dict(
            penalty_alpha=0.9,
            top_k=6,
            max_new_tokens=9,
            repetition_penalty=1.3,
            no_repeat_ngram_size=2,
            return_dict_in_generate=True,
            output_scores=True,
            output_logits=True,
        ),
    ),
    "low_memory": (
        "llama_s0",
        [[3, 14, 15, 9, 26]],
        None,
        dict(
            penalty_alpha=0.5,
            top_k=4,
            max_new_tokens=8,
            low_memory=True,
            return_dict_in_generate=True,
            output_scores=True,
        ),
    ),
    "plain_tensor_no_eos": (
        "llama_s3",
        [[1, 2, 3]],
        None,
        dict(penalty_alpha=0.4, top_k=2, max_new_tokens=7, eos_token_id=None),
    ),
}


def weights_checksum(model) -> str:
    """sha256 over the float32 bytes of every parameter, in state_dict order."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().float().contiguous().numpy().tobytes())
    return digest.hexdigest()


def build(name: str, models: dict = MODELS):
    spec = dict(models[name])
    return tiny_llama(spec.pop("seed"), spec.pop("vocab"), **spec)


def build_all(model_specs: dict = MODELS) -> dict:
    """Every model of ``model_specs``, by name."""
    return {name: build(name, model_specs) for name in model_specs}


def run_case(generate, ids, mask, kwargs):
    """Call ``generate(**inputs, **kwargs)`` for one case (tensors made, ``seed`` applied)."""
    inputs = {"input_ids": torch.tensor(ids)}
    if mask is not None:
        inputs["attention_mask"] = torch.tensor(mask)
    kwargs = dict(kwargs)
    if "seed" in kwargs:
        torch.manual_seed(kwargs.pop("seed"))
    with torch.no_grad():
        return generate(**inputs, **kwargs)


def assert_recorded_models(models: dict, reference: dict) -> None:
    """The fixture comes from 4.52.4 and from these very weights (same checksums)."""
    assert reference["transformers"] == "4.52.4"
    for name, model in models.items():
        assert weights_checksum(model) == reference["checksums"][name], name


def assert_matches_recorded(out, ref: dict) -> None:
    """Sequences identical; scores and logits within 1e-4, -inf exactly where recorded."""
    sequences = out if isinstance(out, torch.Tensor) else out.sequences
    assert torch.equal(sequences, ref["sequences"])
    for field in ("scores", "logits"):
        if field in ref:
            mine = torch.stack(getattr(out, field))
            assert mine.shape == ref[field].shape
            assert torch.equal(torch.isinf(mine), torch.isinf(ref[field]))
            finite = torch.isfinite(ref[field])
            torch.testing.assert_close(mine[finite], ref[field][finite], atol=1e-4, rtol=0)


def record(model_specs: dict = MODELS, case_specs: dict = CASES) -> dict:
    """Run every case under transformers 4.52.4; a case's ``seed`` (if any) seeds torch
    right before its ``generate``."""
    import transformers

    if transformers.__version__ != "4.52.4":
        raise SystemExit(f"run with transformers 4.52.4, found {transformers.__version__}")
    models = build_all(model_specs)
    cases = {}
    for case, (model_name, ids, mask, kwargs) in case_specs.items():
        out = run_case(models[model_name].generate, ids, mask, kwargs)
        entry = {"sequences": out if isinstance(out, torch.Tensor) else out.sequences}
        if not isinstance(out, torch.Tensor):
            for field in ("scores", "logits"):
                value = getattr(out, field, None)
                if value is not None:
                    entry[field] = torch.stack(value)  # (steps, rows, vocab)
        cases[case] = entry
    return {
        "transformers": transformers.__version__,
        "torch": str(torch.__version__),
        "checksums": {name: weights_checksum(m) for name, m in models.items()},
        "cases": cases,
    }


if __name__ == "__main__":
    FIXTURE.parent.mkdir(exist_ok=True)
    torch.save(record(), FIXTURE)
    print(f"wrote {FIXTURE} ({FIXTURE.stat().st_size} bytes)")
