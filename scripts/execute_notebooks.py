"""Run notebooks top to bottom and save them with their new outputs and widget state.

    python scripts/execute_notebooks.py [--no-widget-state] notebooks/12_*.ipynb [...]

Each notebook runs in a fresh kernel (the one it names), in its own folder, offline, as
``make notebooks`` runs it (one OpenMP thread), so that the committed outputs are the ones
nbval compares against. The widget state is stored in the notebook's metadata, so that a
viewer without a kernel (GitHub, nbviewer, the docs) still draws the panels as they were;
``--no-widget-state`` leaves it out (notebooks/00_app.ipynb: Voila always runs it live).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def execute(path: Path, widget_state: bool = True) -> float:
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=600,
        kernel_name=nb.metadata.get("kernelspec", {}).get("name", "python3"),
        resources={"metadata": {"path": str(path.parent)}},
        store_widget_state=widget_state,
    )
    t0 = time.perf_counter()
    client.execute()
    if not widget_state:
        nb.metadata.pop("widgets", None)  # a state saved by an earlier run
    nbformat.write(nb, path)
    return time.perf_counter() - t0


def main(paths: list[str]) -> int:
    widget_state = "--no-widget-state" not in paths
    paths = [p for p in paths if p != "--no-widget-state"]
    if not paths:
        print(__doc__)
        return 2
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    for name in paths:
        path = Path(name)
        secs = execute(path, widget_state)
        print(f"{path}: {secs:.1f} s, {path.stat().st_size / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
