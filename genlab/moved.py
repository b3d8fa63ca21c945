"""Old import paths that keep working for one release, with a DeprecationWarning.

A moved module leaves behind a stub whose ``__getattr__`` is :func:`moved_to`'s result:
names that exist in the new module are returned from it, with a warning naming the new
path; anything else is a plain AttributeError (so tools probing the stub stay quiet). A
module that stays but gave some names away sets ``__getattr__ = moved_to(..., names=...)``.
"""

from __future__ import annotations

import importlib
import warnings


def moved_to(old: str, new: str, shown: str | None = None, names=None):
    """A module ``__getattr__`` for the stub ``old`` of a module moved to ``new``;
    ``shown`` is the public path to name in the warning (default: ``new``). ``names``: only
    these names moved (the module ``old`` stays, with the rest of its contents); None: all."""

    def __getattr__(name: str):
        if names is not None and name not in names:
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        target = importlib.import_module(new)
        if name.startswith("__") or not hasattr(target, name):
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        warnings.warn(
            f"{old}.{name} moved to {shown or new}.{name}; the old path goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(target, name)

    return __getattr__


def moved_apart(old: str, routes: dict[str, str], rest: str | None = None, shown=None):
    """A module ``__getattr__`` for ``old``, whose names went to several modules: ``routes``
    maps a name to its new module; every other name went to ``rest`` (None: the others
    stay in ``old``, and an unknown name is a plain AttributeError). ``shown`` as in
    :func:`moved_to`."""

    def __getattr__(name: str):
        new = routes.get(name, rest)
        if new is None:
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        return moved_to(old, new, shown)(name)

    return __getattr__


def warn_renamed(old: str, new: str) -> None:
    """Warn that the method or name ``old`` a caller used is now ``new`` (one release)."""
    warnings.warn(
        f"{old} is now {new}; the old name goes in the next release",
        DeprecationWarning,
        stacklevel=3,
    )


__all__ = ["moved_apart", "moved_to", "warn_renamed"]
