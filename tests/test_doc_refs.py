"""Every cross-reference in genlab's docstrings names something that exists
(scripts/doc_refs.py; ``make docs`` fails on a broken one too)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import doc_refs  # noqa: E402


def test_no_docstring_cross_reference_resolves_to_nothing():
    assert doc_refs.broken() == []


def test_a_reference_to_a_moved_or_missing_name_is_caught():
    import genlab.run.engine as engine

    assert doc_refs.resolves("~genlab.run.result.GenerationResult", engine)
    assert not doc_refs.resolves("~genlab.run.records.GenerationResult", engine)  # it moved
    assert doc_refs.resolves("rewind", engine, engine.Run)
    assert doc_refs.resolves("timeline", engine, engine.Run)  # set in __init__
    assert not doc_refs.resolves("stop_now", engine, engine.Run)
    assert doc_refs.resolves("torch.Tensor", engine)
