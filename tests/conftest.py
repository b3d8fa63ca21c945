"""Shared fixtures: tiny random transformers models (built from a config and a seed)."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
# under pytest-xdist each worker gets one core's worth of threads
_workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
torch.set_num_threads(max(1, (os.cpu_count() or 1) // _workers))


def tiny_llama(seed: int = 0, vocab: int = 96, **overrides):
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
    model = LlamaForCausalLM(LlamaConfig(**cfg)).eval()
    return model


@pytest.fixture(scope="session")
def hf_llama():
    """A tiny random LlamaForCausalLM (vocab 96, 2 layers), shared by the session."""
    return tiny_llama()


@pytest.fixture
def padded_batch():
    """Two prompts, the first left-padded (pad id 0)."""
    ids = torch.tensor([[0, 0, 5, 17, 33, 8], [4, 9, 21, 40, 11, 7]])
    mask = (ids != 0).long()
    mask[1] = 1
    return ids, mask


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
    assert all(torch.equal(a, b) for a, b in zip(ours.puts, ref.puts))
