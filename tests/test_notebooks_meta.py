"""Checks on the committed notebooks that nbval itself does not make.

Every notebook under ``notebooks/`` must be committed *executed* (nbval compares against the
stored outputs, so a notebook without them tests nothing), must set its seeds in the first
code cell, and must be listed in the course map, notebooks/README.md. Runs in well under a
second: nothing executes.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
SEED_CALL = re.compile(r"\b(torch\.manual_seed|set_seed)\(\s*\d+\s*\)")


def _code_cells(path: Path) -> list[dict]:
    nb = json.loads(path.read_text(encoding="utf-8"))
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


def _source(cell: dict) -> str:
    src = cell["source"]
    return src if isinstance(src, str) else "".join(src)


def _ids(paths):
    return [p.name for p in paths]


def test_the_teaching_notebooks_exist():
    names = {p.name for p in NOTEBOOKS}
    expected = {
        "01_quickstart.ipynb",
        "03_decoding_strategies.ipynb",
        "06_processor_waterfall.ipynb",
        "09_beam_search.ipynb",
        "11_watermarking.ipynb",
        "12_assisted_decoding.ipynb",
        "14_contrastive_search.ipynb",
        "15_guidance.ipynb",
        "16_hooks_and_interventions.ipynb",
        "18_inside_the_model.ipynb",
        "19_dola.ipynb",
        "05_sampling_sweeps.ipynb",
        # the course's added lessons (issue 20)
        "02_why_decoding_matters.ipynb",
        "04_temperature_and_truncation.ipynb",
        "08_stopping_and_batching.ipynb",
    }
    assert expected <= names, f"missing notebooks: {sorted(expected - names)}"
    # the widget tour is the appendix, numbered after the lessons; lessons are numbered
    # 01, 02, ... in teaching order, without gaps or letter suffixes (tests/test_course.py)
    assert max(names - {"nbval_sanitize.cfg"}) == "23_appendix_widget_tour.ipynb"
    assert all(re.fullmatch(r"\d\d_[a-z_]+\.ipynb", n) for n in names - {"nbval_sanitize.cfg"})


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_notebook_is_stored_executed_in_order(path):
    cells = [c for c in _code_cells(path) if _source(c).strip()]
    assert cells, f"{path.name} has no code cells"
    counts = [c.get("execution_count") for c in cells]
    assert None not in counts, (
        f"{path.name}: code cells {[i for i, n in enumerate(counts) if n is None]} were never "
        "run; execute it in place with jupyter nbconvert --execute --inplace"
    )
    assert counts == sorted(counts) and len(set(counts)) == len(counts), (
        f"{path.name}: execution counts {counts} are not increasing: run it top to bottom "
        "in a fresh kernel"
    )
    with_output = sum(bool(c.get("outputs")) for c in cells)
    assert with_output >= len(cells) // 2, f"{path.name}: only {with_output} cells have output"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_notebook_has_no_error_outputs(path):
    for i, cell in enumerate(_code_cells(path)):
        for out in cell.get("outputs", []):
            assert out.get("output_type") != "error", (
                f"{path.name}: code cell {i} stored an error: {out.get('ename')}"
            )
            if out.get("output_type") == "stream":
                assert out.get("name") != "stderr" or "Traceback" not in "".join(out["text"])


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_first_code_cell_sets_the_seed(path):
    first = _source(_code_cells(path)[0])
    assert SEED_CALL.search(first), (
        f"{path.name}: the first code cell must set the seed (torch.manual_seed(0)) so that "
        "the stored outputs can be reproduced"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_notebook_is_listed_in_the_course_map(path):
    course_map = (ROOT / "notebooks" / "README.md").read_text(encoding="utf-8")
    assert f"`{path.stem}`" in course_map, (
        f"notebooks/README.md does not list {path.stem}: add a row to its course map"
    )


def test_seed_pattern_rejects_a_missing_seed():
    assert SEED_CALL.search("_ = torch.manual_seed(0)")
    assert not SEED_CALL.search("torch.manual_seed  # later")
    assert not SEED_CALL.search("import torch")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_opening_a_lesson_leaves_it_unmodified(path):
    """JupyterLab rewrites a kernelspec whose display name differs from the kernel's own, so
    a lesson only opened would show as modified and ask to be saved when closed."""
    from ipykernel.kernelspec import get_kernel_dict

    spec = json.loads(path.read_text(encoding="utf-8"))["metadata"]["kernelspec"]
    assert spec == {
        "display_name": get_kernel_dict()["display_name"],
        "language": "python",
        "name": "python3",
    }
