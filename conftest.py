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


#: the most resident memory a lesson's kernel may reach (MiB): Binder gives 2 GB, of which
#: JupyterLab's server takes about 125 MB and the browser's tab state some more (issue 44)
KERNEL_LIMIT_MIB = 1536


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
    """After a notebook's last cell under nbval: its kernel's peak memory, written to
    build/kernel-peaks.tsv (one line per notebook), and an error when it passes
    :data:`KERNEL_LIMIT_MIB`."""
    if type(item).__name__ != "IPyNbCell":
        return
    if nextitem is not None and nextitem.parent is item.parent:
        return
    peak = _kernel_peak_mib(item)
    if peak is None:
        return
    name = os.path.basename(str(item.parent.fspath))
    os.makedirs("build", exist_ok=True)
    with open(os.path.join("build", "kernel-peaks.tsv"), "a") as f:
        f.write(f"{name}\t{peak:.0f}\n")
    if peak > KERNEL_LIMIT_MIB:
        raise AssertionError(
            f"{name}: its kernel peaked at {peak:.0f} MiB, over the {KERNEL_LIMIT_MIB} MiB a "
            "lesson may take on Binder (2 GB with JupyterLab): free what the lesson no longer "
            "needs (del, gc.collect()) or load less"
        )
