"""Walk genlab's public API and report docstring coverage.

The public API is every name in ``__all__`` of ``genlab``, ``genlab.plots`` and
``genlab.widgets``, and, for the classes among them, every public method and property
defined in genlab (not inherited from torch, ipywidgets or the standard library).

    python scripts/apiwalk.py            # coverage figures and the names without a docstring
    python scripts/apiwalk.py --args     # also: documented callables that omit an argument
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys

MODULES = ("genlab", "genlab.plots", "genlab.widgets")
# the main names: their docstring also shows an example (">>>")
MAIN = (
    "genlab.load",
    "genlab.generate",
    "genlab.LM.generate",
    "genlab.LM.start",
    "genlab.Run",
    "genlab.Trace",
)


def _own(obj) -> bool:
    mod = getattr(obj, "__module__", None) or ""
    return mod == "genlab" or mod.startswith("genlab.")


def public_api():
    """Yield ``(qualified name, object)`` for every public name and public member."""
    seen = set()
    for modname in MODULES:
        mod = importlib.import_module(modname)
        yield modname, mod
        for name in mod.__all__:
            obj = getattr(mod, name)
            qual = f"{modname}.{name}"
            if not (inspect.isclass(obj) or callable(obj)):
                continue  # constants (PRESETS) are described in their module's docstring
            yield qual, obj
            if inspect.isclass(obj) and id(obj) not in seen:
                seen.add(id(obj))
                yield from _members(qual, obj)


def _members(qual, cls):
    for name, attr in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(attr, (staticmethod, classmethod)):
            attr = attr.__func__
        if isinstance(attr, property) or inspect.isfunction(attr):
            # dataclass fields and enum members are data, documented by their class
            yield f"{qual}.{name}", attr
    # methods inherited from a genlab base class are walked on that base (if public)
    # and documented there


def docstring(obj) -> str:
    if isinstance(obj, property):
        return inspect.cleandoc(obj.fget.__doc__ or "") if obj.fget else ""
    doc = obj.__dict__.get("__doc__") if inspect.isclass(obj) else obj.__doc__
    return inspect.cleandoc(doc or "")


def arguments(obj) -> list[str]:
    """The argument names a docstring has to mention (not self, cls, *args, **kwargs)."""
    if isinstance(obj, property) or inspect.ismodule(obj):
        return []
    target = obj.__init__ if inspect.isclass(obj) else obj
    if inspect.isclass(obj) and "__init__" not in vars(obj):
        # dataclasses and inherited constructors: fields are described in the class text
        return []
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):
        return []
    out = []
    for p in sig.parameters.values():
        if p.name in ("self", "cls") or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        out.append(p.name)
    return out


def missing_arguments(obj) -> list[str]:
    doc = docstring(obj)
    return [a for a in arguments(obj) if not re.search(rf"\b{re.escape(a)}\b", doc)]


def coverage():
    rows = list(public_api())
    with_doc = [q for q, o in rows if docstring(o)]
    without = [q for q, o in rows if not docstring(o)]
    return rows, with_doc, without


def main(argv):
    rows, with_doc, without = coverage()
    print(
        f"public names and members: {len(rows)}; with a docstring: {len(with_doc)} "
        f"({100 * len(with_doc) / len(rows):.1f} %)"
    )
    for q in without:
        print("  no docstring:", q)
    if "--args" in argv:
        for q, o in rows:
            miss = missing_arguments(o) if docstring(o) else []
            if miss:
                print("  arguments not described:", q, miss)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
