"""Shared fixtures: the demo model (loaded once per session), a tiny random Llama, a padded
batch; the markers (``reference``, ``slow``) and the ``--device`` option.

Helpers that are not fixtures (tiny models, output comparisons) live in tests/helpers.py.
"""

from __future__ import annotations

import inspect
import os
import pathlib
import re

import pytest
import torch
from helpers import (  # noqa: F401 (re-exported: older modules import them from conftest)
    Recorder,
    assert_streams_like_reference,
    tiny_llama,
)

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
# under pytest-xdist each worker gets one core's worth of threads
_workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
torch.set_num_threads(max(1, (os.cpu_count() or 1) // _workers))


@pytest.fixture(scope="session")
def demo():
    """The embedded demo model, ``genlab.load("demo")``, loaded once for the whole session
    (tests using it are marked ``slow``). Tests must not change it: fork a run instead."""
    import genlab

    return genlab.load("demo")


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


# ---- options, markers, and the install under test -------------------------------------------

# a module needs transformers when it imports it (anywhere), a helper that does, or the
# tiny transformers models above; a test also when it uses a fixture built on them
_REFERENCE_IMPORT = re.compile(
    r"^\s*(from|import)\s+(transformers|record_\w+)\b"
    r"|^\s*from (conftest|helpers) import .*\b(tiny_llama|tiny_gpt2)\b",
    re.M,
)
_REFERENCE_FIXTURES = {"hf_llama"}
_REFERENCE_INSIDE = re.compile(r"importorskip\(\s*[\"']transformers")
# a test is slow when it, or a fixture it uses, loads the demo model's weights or GGUF file
_LOADS_DEMO = re.compile(r"find_demo_gguf\(\)|load(_model)?\(\s*[\"']demo[\"']")


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


def _source_matches(fn, pattern, cache: dict) -> bool:
    if fn not in cache:
        try:
            cache[fn] = bool(pattern.search(inspect.getsource(fn)))
        except (OSError, TypeError):
            cache[fn] = False
    return cache[fn]


def _loads_demo(item, cache: dict) -> bool:
    """True when the test function or any fixture it uses (at any depth) loads the demo."""
    functions = [getattr(item, "function", None)]
    info = getattr(item, "_fixtureinfo", None)
    for defs in getattr(info, "name2fixturedefs", {}).values():
        functions.extend(d.func for d in defs)
    return any(fn is not None and _source_matches(fn, _LOADS_DEMO, cache) for fn in functions)


def pytest_collection_modifyitems(config, items):
    cache: dict = {}
    sources: dict = {}
    for item in items:
        if _loads_demo(item, sources):
            item.add_marker(pytest.mark.slow)
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
