"""The docstring examples' namespace (`make doctest`: pytest --doctest-modules genlab).

Every example in genlab's docstrings may use, without importing them: ``genlab``,
``torch``, ``lm`` (the embedded demo model, ``genlab.load("demo")``, loaded once per session
and only when a doctest runs) and ``tok`` (its tokenizer, ``lm.tokenizer``).
Examples that need the Hugging Face Hub, a GPU, a display or minutes of compute are marked
``# doctest: +SKIP`` with the reason beside them.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

_CACHE: dict = {}


def _namespace() -> dict:
    if not _CACHE:
        import torch

        import genlab

        lm = genlab.load("demo")
        _CACHE.update(genlab=genlab, torch=torch, lm=lm, tok=lm.tokenizer)
    return _CACHE


@pytest.fixture(autouse=True)
def _genlab_doctest_names(request):
    """Fill the doctest namespace (only for doctest items: the unit tests never load it)."""
    if type(request.node).__name__ == "DoctestItem":
        request.getfixturevalue("doctest_namespace").update(_namespace())
        import matplotlib.pyplot as plt

        yield
        plt.close("all")
        return
    yield
