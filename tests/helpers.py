"""Helpers shared by the test modules: tiny random transformers models, the comparison of
two generate() outputs, and a recording streamer.

Imported as ``from helpers import tiny_llama, assert_same`` (pytest puts tests/ on the path).
transformers is imported inside the model builders only, so that importing this module
does not need it (``-m "not reference"`` runs without transformers).
"""

from __future__ import annotations

import torch


def tiny_llama(seed: int = 0, vocab: int = 96, **overrides):
    """A tiny random LlamaForCausalLM (2 layers, hidden 32, GQA 4/2 heads), seeded."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = dict(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    cfg.update(overrides)
    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(**cfg)).eval()


def tiny_gpt2(seed: int = 3, vocab: int = 96, **overrides):
    """A tiny random GPT2LMHeadModel (2 layers, width 48, 4 heads, 64 positions), seeded;
    ``overrides`` are GPT2Config fields (``n_layer=3``, ``attn_implementation="eager"``)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = dict(
        vocab_size=vocab,
        n_positions=64,
        n_embd=48,
        n_layer=2,
        n_head=4,
        bos_token_id=1,
        eos_token_id=2,
    )
    cfg.update(overrides)
    torch.manual_seed(seed)
    return GPT2LMHeadModel(GPT2Config(**cfg)).eval()


def _assert_same_steps(name: str, ref_steps, our_steps, *, exact: bool, atol: float) -> None:
    """Per step: the same -inf/inf pattern, and the finite values equal (or within atol)."""
    ref_steps, our_steps = tuple(ref_steps or ()), tuple(our_steps or ())
    assert len(our_steps) == len(ref_steps), f"{name}: {len(our_steps)} steps, {len(ref_steps)}"
    for step, (a, b) in enumerate(zip(ref_steps, our_steps, strict=True)):
        assert torch.equal(torch.isinf(a), torch.isinf(b)), f"{name}[{step}]: inf differ"
        finite = torch.isfinite(a)
        if exact:
            assert torch.equal(a[finite], b[finite]), f"{name}[{step}] differ"
        else:
            torch.testing.assert_close(b[finite], a[finite], atol=atol, rtol=0)


def assert_same(ref, ours, *, exact: bool = False, atol: float = 1e-4, same_type: bool = False):
    """``ours`` (genlab's generate output) equals ``ref`` (transformers'): the sequences
    exactly; every step's scores and logits (same number of steps, same inf pattern, finite
    values within ``atol``, or equal when ``exact``); the beam indices and sequence scores
    when the reference has them. ``same_type``: the output classes have the same name."""
    if same_type:
        assert type(ours).__name__ == type(ref).__name__
    assert torch.equal(ref.sequences, ours.sequences), (ref.sequences, ours.sequences)
    _assert_same_steps("scores", ref.scores, ours.scores, exact=exact, atol=atol)
    ref_logits = getattr(ref, "logits", None)
    if ref_logits is not None:
        _assert_same_steps("logits", ref_logits, ours.logits, exact=exact, atol=atol)
    ref_beams = getattr(ref, "beam_indices", None)
    if ref_beams is None:
        assert getattr(ours, "beam_indices", None) is None
    else:
        assert ours.beam_indices.dtype == ref_beams.dtype
        assert torch.equal(ref_beams, ours.beam_indices)
        torch.testing.assert_close(ours.sequences_scores, ref.sequences_scores, atol=atol, rtol=0)


class Recorder:
    """A streamer that keeps every put() value (to compare what generate() sends)."""

    def __init__(self):
        self.puts, self.ends = [], 0

    def put(self, value):
        self.puts.append(torch.as_tensor(value).clone())

    def end(self):
        self.ends += 1


def assert_streams_like_reference(model, prompt, **cfg) -> None:
    """genlab.generate sends a streamer the same put() values, in the same order, and one
    end(), as the reference's ``model.generate`` with the same arguments and seed."""
    import genlab

    got = []
    for generate in (model.generate, lambda *a, **k: genlab.generate(model, *a, **k)):
        rec = Recorder()
        torch.manual_seed(0)
        generate(prompt, streamer=rec, **cfg)
        got.append(rec)
    ref, ours = got
    assert ours.ends == ref.ends == 1
    assert [tuple(p.shape) for p in ours.puts] == [tuple(p.shape) for p in ref.puts]
    assert all(torch.equal(a, b) for a, b in zip(ours.puts, ref.puts, strict=True))
