"""Write a student copy of the course notebooks: no answers, no stored outputs.

    python scripts/make_student.py [OUT_DIR]        (default: build/student)

The committed notebooks are the teacher's copy: they hold every output and, under each
exercise, the answer folded in a ``<details>`` block. The student copy keeps the lessons,
the exercises and their ``guess = None`` check cells, and removes

* every markdown cell that holds an answer (a ``<details>`` block, or a cell the old
  lessons hid with JupyterLab's ``source_hidden``);
* every stored output and execution count, so that no result (the check cells' and the
  cells after them, which print the answer) is on screen before the student runs it;
* the widget state saved in the notebook's metadata;

and words that point to a folded answer (the exercises' "folded under **Answer**", the
check functions' "Open the answer below") are reworded for a copy without one.

The course map (``notebooks/README.md``) is copied along; ``notebooks/teacher/`` is not.
Uses the standard library only.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
# the exercises' pointer to their folded answer, which the student copy does not have
FOLDED = " The answer is folded under **Answer** below it (click to open)."
# what the check cells say about that answer, and what the student copy says instead
POINTERS = {
    ". Open the answer below.": ". Run the cells below and find out why.",
    ": see the answer below.": ": run the cells below and find out why.",
}


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return src if isinstance(src, str) else "".join(src)


def is_answer(cell: dict) -> bool:
    """Whether a cell is an exercise's answer (removed from the student copy)."""
    if cell.get("cell_type") != "markdown":
        return False
    hidden = cell.get("metadata", {}).get("jupyter", {}).get("source_hidden", False)
    return bool(hidden) or "<details>" in _source(cell)


def student_copy(nb: dict) -> dict:
    """The notebook dict without its answers, outputs and widget state (a new dict)."""
    out = json.loads(json.dumps(nb))
    cells = []
    for cell in out["cells"]:
        if is_answer(cell):
            continue
        if cell["cell_type"] == "markdown":
            cell["source"] = _source(cell).replace(FOLDED, "")
        if cell["cell_type"] == "code":
            text = _source(cell)
            for old, new in POINTERS.items():
                text = text.replace(old, new)
            cell["source"] = text
            cell["outputs"] = []
            cell["execution_count"] = None
        cell.get("metadata", {}).pop("jupyter", None)
        cells.append(cell)
    out["cells"] = cells
    out.get("metadata", {}).pop("widgets", None)
    return out


def main(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__)
        return 0
    target = Path(argv[0]) if argv else ROOT / "build" / "student"
    dest = target / "notebooks"
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    paths = sorted(NOTEBOOKS.glob("*.ipynb"))
    if not paths:
        print(f"no notebooks found in {NOTEBOOKS}", file=sys.stderr)
        return 1
    removed = 0
    for path in paths:
        nb = json.loads(path.read_text(encoding="utf-8"))
        copy = student_copy(nb)
        removed += len(nb["cells"]) - len(copy["cells"])
        text = json.dumps(copy, ensure_ascii=False, indent=1) + "\n"
        (dest / path.name).write_text(text, encoding="utf-8")
    for extra in ("README.md", "nbval_sanitize.cfg"):
        if (NOTEBOOKS / extra).exists():
            shutil.copy(NOTEBOOKS / extra, dest / extra)
    print(f"{len(paths)} notebooks -> {dest} ({removed} answer cells removed, outputs cleared)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
