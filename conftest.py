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


def _kernel_peak_mib(item) -> float | None:
    """The high-water mark of resident memory (VmHWM) of the kernel running ``item``'s
    notebook, in MiB; None when it cannot be read."""
    kernel = getattr(item.parent, "kernel", None)
    km = getattr(kernel, "km", None)
    pid = getattr(getattr(km, "provisioner", None), "pid", None)
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def pytest_runtest_teardown(item, nextitem):
    """After a notebook's last cell under nbval: its kernel's peak memory, one line in the
    file ``GENLAB_KERNEL_PEAKS`` names (build/kernel-peaks.tsv by default), which
    scripts/kernel_peaks.py checks (``make notebooks``)."""
    if type(item).__name__ != "IPyNbCell":
        return
    if nextitem is not None and nextitem.parent is item.parent:
        return
    peak = _kernel_peak_mib(item)
    if peak is None:
        return
    path = os.environ.get("GENLAB_KERNEL_PEAKS", os.path.join("build", "kernel-peaks.tsv"))
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "a") as f:
        f.write(f"{os.path.basename(str(item.parent.fspath))}\t{peak:.0f}\n")
