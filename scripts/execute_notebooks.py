"""Run notebooks top to bottom and save them with their new outputs and widget state.

    python scripts/execute_notebooks.py [--no-widget-state] notebooks/12_*.ipynb [...]

Each notebook runs in a fresh kernel (the one it names), in its own folder, offline, as
``make notebooks`` runs it (one OpenMP thread), so that the committed outputs are the ones
nbval compares against. The widget state is stored in the notebook's metadata, so that a
viewer without a kernel (GitHub, nbviewer, the docs) still draws the panels as they were;
``--no-widget-state`` leaves it out (notebooks/00_app.ipynb: Voila always runs it live).

Only the state a saved view needs is kept (:func:`slim_widget_state`): a genlab panel's
output keeps its static HTML view (``Panel.static_html``, what a viewer without a kernel
shows) and loses its widget view, so its control tree is not saved; the other widgets
keep the models their views reach, each without the values that are its defaults.
``--slim`` slims the saved state of the notebooks given, without running them.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import warnings
from pathlib import Path

import nbformat
from nbclient import NotebookClient

STATE = "application/vnd.jupyter.widget-state+json"
VIEW = "application/vnd.jupyter.widget-view+json"
STATIC = 'class="genlab-static"'  # the static HTML view of every genlab panel
REFERENCE = re.compile(r"IPY_MODEL_([0-9a-f]{32})")


def state_size(nb) -> int:
    """Bytes of the notebook's saved widget state (its metadata.widgets as JSON)."""
    widgets = nb.metadata.get("widgets")
    return len(json.dumps(widgets)) if widgets else 0


def _defaults(entry: dict) -> dict:
    """The default value of every synced trait of the model class of a state ``entry``
    (as JSON); {} for a class this ipywidgets does not know."""
    from ipywidgets.widgets.widget import Widget

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        registry = Widget.widget_types
    state = entry["state"]
    try:
        cls = registry.get(
            entry["model_module"], entry["model_module_version"], entry["model_name"],
            state.get("_view_module"), state.get("_view_module_version"),
            state.get("_view_name"),
        )  # fmt: skip
    except KeyError:
        return {}
    out = {}
    for name, trait in cls.class_traits(sync=True).items():
        try:
            value = trait.default()
        except Exception:  # a default made at instantiation: keep the saved value
            continue
        if value is None or isinstance(value, (bool, int, float, str)):
            out[name] = value
        elif isinstance(value, (list, tuple)) and not value:
            out[name] = []
    return out


def slim_widget_state(nb) -> tuple[int, int]:
    """Keep only the widget state the notebook's saved views need (see the module
    docstring); returns the state's size in bytes (before, after)."""
    before = state_size(nb)
    roots = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if VIEW not in data:
                continue
            if STATIC in data.get("text/html", ""):
                del data[VIEW]  # the panel's static HTML is its saved view
            else:
                roots.append(data[VIEW]["model_id"])
    widgets = nb.metadata.get("widgets", {})
    state = widgets.get(STATE, {}).get("state", {})
    keep, todo = {}, list(roots)
    while todo:
        model = todo.pop()
        if model in keep or model not in state:
            continue
        keep[model] = state[model]
        todo.extend(REFERENCE.findall(json.dumps(state[model]["state"])))
    cache: dict[tuple, dict] = {}
    for entry in keep.values():
        key = (entry["model_module"], entry["model_name"], entry["state"].get("_view_name"))
        if key not in cache:
            cache[key] = _defaults(entry)
        defaults = cache[key]
        entry["state"] = {
            k: v
            for k, v in entry["state"].items()
            if k.startswith("_") or k not in defaults or defaults[k] != v
        }
    if keep:
        widgets[STATE]["state"] = dict(sorted(keep.items()))
    else:
        nb.metadata.pop("widgets", None)
    return before, state_size(nb)


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
    slim_widget_state(nb)
    name_kernel_as_jupyterlab_does(nb)
    nbformat.write(nb, path)
    return time.perf_counter() - t0


def name_kernel_as_jupyterlab_does(nb) -> None:
    """The kernelspec's display name as ipykernel gives it ("Python 3 (ipykernel)"): with
    another name JupyterLab rewrites it when the kernel starts, and a lesson a student only
    opened shows as modified (and asks to be saved on closing)."""
    from ipykernel.kernelspec import get_kernel_dict

    spec = nb.metadata.setdefault("kernelspec", {})
    spec.update(name="python3", language="python", display_name=get_kernel_dict()["display_name"])


def main(paths: list[str]) -> int:
    widget_state = "--no-widget-state" not in paths
    slim_only = "--slim" in paths
    paths = [p for p in paths if p not in ("--no-widget-state", "--slim")]
    if not paths:
        print(__doc__)
        return 2
    if slim_only:
        for name in paths:
            nb = nbformat.read(name, as_version=4)
            before, after = slim_widget_state(nb)
            nbformat.write(nb, name)
            print(f"{name}: widget state {before / 1e3:.1f} kB -> {after / 1e3:.1f} kB")
        return 0
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    for name in paths:
        path = Path(name)
        secs = execute(path, widget_state)
        print(f"{path}: {secs:.1f} s, {path.stat().st_size / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
