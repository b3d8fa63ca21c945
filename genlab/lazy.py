"""Public names that load on first use: one mechanism for ``genlab``, ``genlab.plots`` and
``genlab.widgets``.

A package lists its public names in a table, name -> the submodule that defines it (or
(submodule, attribute) where the names differ), and takes its module ``__getattr__`` and
``__dir__`` from :func:`lazy_exports`. ``import genlab`` then stays fast and light: torch,
matplotlib or ipywidgets are imported only when a name that needs them is first read, and
the value is kept in the package's namespace so the lookup happens once.

This module imports nothing but the standard library (``genlab/__init__.py`` uses it before
torch is imported).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping


def lazy_exports(
    package: str,
    table: Mapping[str, str | tuple[str, str]],
    subpackages: Iterable[str] = (),
    extra: Iterable[str] = (),
    all_for_pydoc: bool = True,
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of ``package`` (its ``__name__``).

    ``table``: public name -> submodule (relative to ``package``, or a full path such as
    ``genlab.text.tokenizer``) that defines it, or (submodule, attribute). ``subpackages``:
    submodules reached as attributes (``genlab.plots``). ``extra``: further names
    ``dir()`` lists (``__version__``).
    ``all_for_pydoc=False``: ``__all__`` is withheld from pydoc only, so that ``help()``
    shows the package's guide instead of every lazily loaded class in full (``from package
    import *`` and every other reader still get it).

    >>> getattr_, dir_ = lazy_exports("json", {"JSONDecoder": "decoder"})
    >>> getattr_("JSONDecoder").__module__, dir_()
    ('json.decoder', ['JSONDecoder'])
    """
    targets = {
        name: (where, name) if isinstance(where, str) else tuple(where)
        for name, where in table.items()
    }
    root = package.split(".")[0] + "."
    subpackages = tuple(subpackages)
    shown = sorted({*targets, *subpackages, *extra})

    def __getattr__(name: str):
        if name in targets:
            module, attribute = targets[name]
            path = module if module.startswith(root) else f"{package}.{module}"
            value = getattr(importlib.import_module(path), attribute)
            setattr(sys.modules[package], name, value)  # looked up once
            return value
        if name in subpackages:
            return importlib.import_module(f"{package}.{name}")
        if name == "__all__" and (
            all_for_pydoc or sys._getframe(1).f_globals.get("__name__") != "pydoc"
        ):
            return sorted(targets)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        # dir() and tab completion: every public name, loaded or not, and nothing private
        return list(shown)

    return __getattr__, __dir__


__all__ = ["lazy_exports"]


class LazyModule:
    """A module imported on its first attribute read: ``pd = LazyModule("pandas")`` at the
    top of a module whose functions use ``pd.DataFrame`` keeps pandas (34 MB resident)
    out of a process that only generates. Annotations such as ``-> pd.DataFrame`` are not
    evaluated (``from __future__ import annotations``), so they do not import it."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str):
        module = importlib.import_module(self._name)
        return getattr(module, attr)

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}>"
