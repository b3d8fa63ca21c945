"""Shared fixtures: tiny random transformers models (built from a config and a seed)."""

from __future__ import annotations

import inspect
import os
import pathlib
import re

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


# ---- options, markers, and the install under test -------------------------------------------

# a module needs transformers when it imports it (anywhere), a helper that does, or the
# tiny transformers models above; a test also when it uses a fixture built on them
_REFERENCE_IMPORT = re.compile(
    r"^\s*(from|import)\s+(transformers|record_\w+)\b|^\s*from conftest import .*\btiny_llama\b",
    re.M,
)
_REFERENCE_FIXTURES = {"hf_llama"}
_REFERENCE_INSIDE = re.compile(r"importorskip\(\s*[\"']transformers")


def _needs_transformers(path) -> bool:
    """True for a test module that needs transformers (the reference) to be imported."""
    try:
        return bool(_REFERENCE_IMPORT.search(pathlib.Path(path).read_text(encoding="utf-8")))
    except OSError:
        return False


def pytest_addoption(parser):
    parser.addoption(
        "--device",
        default="cpu",
        help="torch device for the device-parity tests (tests/test_dispatch.py), e.g. cuda",
    )


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "reference: compares with transformers (set on every test of a module importing it); "
        'the runtime-only part of the suite is -m "not reference"',
    )
    if os.environ.get("GENLAB_FROM_WHEEL"):
        import genlab

        assert "site-packages" in genlab.__file__, (
            f"GENLAB_FROM_WHEEL is set but genlab is imported from {genlab.__file__}"
        )


def pytest_ignore_collect(collection_path, config):
    # `-m "not reference"` runs without transformers installed: modules importing it are
    # not even imported (their tests all carry the marker, see below)
    if (
        config.getoption("markexpr", "") == "not reference"
        and collection_path.suffix == ".py"
        and collection_path.name.startswith("test_")
        and _needs_transformers(collection_path)
    ):
        return True
    return None


def _imports_reference_inside(item) -> bool:
    fn = getattr(item, "function", None)
    try:
        return fn is not None and bool(_REFERENCE_INSIDE.search(inspect.getsource(fn)))
    except (OSError, TypeError):
        return False


def pytest_collection_modifyitems(config, items):
    cache: dict = {}
    for item in items:
        path = item.path
        if path not in cache:
            cache[path] = _needs_transformers(path)
        if (
            cache[path]
            or _REFERENCE_FIXTURES & set(getattr(item, "fixturenames", ()))
            or _imports_reference_inside(item)
        ):
            item.add_marker(pytest.mark.reference)


@pytest.fixture(scope="session")
def device(request):
    """The torch device named by ``--device`` (cpu by default); skips where it is absent."""
    name = request.config.getoption("--device")
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        pytest.skip(f"--device {name}: no CUDA GPU on this machine (torch {torch.__version__})")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        pytest.skip(f"--device {name}: no MPS device on this machine")
    return dev
