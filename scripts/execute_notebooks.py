"""Run notebooks top to bottom and save them with their new outputs and widget state.

    python scripts/execute_notebooks.py notebooks/08_appendix_widget_tour.ipynb [...]

Each notebook runs in a fresh kernel (the one it names), in its own folder, offline, as
``make notebooks`` runs it (one OpenMP thread), so that the committed outputs are the ones
nbval compares against. The widget state is stored in the notebook's metadata, so that a
viewer without a kernel (GitHub, nbviewer, the docs) still draws the panels as they were.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def execute(path: Path) -> float:
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=600,
        kernel_name=nb.metadata.get("kernelspec", {}).get("name", "python3"),
        resources={"metadata": {"path": str(path.parent)}},
        store_widget_state=True,
    )
    t0 = time.perf_counter()
    client.execute()
    nbformat.write(nb, path)
    return time.perf_counter() - t0


def main(paths: list[str]) -> int:
    if not paths:
        print(__doc__)
        return 2
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    for name in paths:
        path = Path(name)
        secs = execute(path)
        print(f"{path}: {secs:.1f} s, {path.stat().st_size / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
