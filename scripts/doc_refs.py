"""Cross-references in genlab's docstrings that resolve to nothing (``make docs`` fails on
them): every ``:class:``, ``:func:``, ``:meth:``, ``:mod:``, ``:attr:``, ``:data:`` and
``:exc:`` target must name something that exists.

    python scripts/doc_refs.py        # lists the broken ones; exit status 1 if any

A target is looked up as Sphinx would: a leading ``~`` and a trailing ``()`` are dropped; a
dotted name starting with ``genlab`` (or an installed package such as ``torch``) is
imported; a short name is looked up in the docstring's class, then its module, then the
builtins.
"""

from __future__ import annotations

import builtins
import importlib
import inspect
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
ROLE = re.compile(r":(class|func|meth|mod|attr|data|exc|obj):`([^`]+)`")
OTHER_PACKAGES = (
    "torch", "transformers", "tokenizers", "numpy", "pandas", "matplotlib", "ipywidgets",
    "concurrent", "dask", "llguidance", "gguf", "safetensors", "typing", "collections",
    "threading", "json", "re", "os",
)  # fmt: skip


def module_names() -> list[str]:
    names = []
    for path in sorted((ROOT / "genlab").rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        parts = path.relative_to(ROOT).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def _lookup(obj, dotted: list[str]) -> bool:
    for part in dotted:
        try:
            obj = inspect.getattr_static(obj, part) if inspect.isclass(obj) else getattr(obj, part)
        except AttributeError:
            if isinstance(obj, type):
                hints = getattr(obj, "__annotations__", {})
                slots = getattr(obj, "__slots__", ())
                fields = getattr(obj, "__dataclass_fields__", {})
                if part in hints or part in slots or part in fields:
                    return True
                try:  # an instance attribute its methods set (``self.timeline = ...``)
                    source = inspect.getsource(obj)
                except (OSError, TypeError):
                    return False
                return re.search(rf"self\.{re.escape(part)}\b[^=\n]*=[^=]", source) is not None
            return False
    return True


def _import_dotted(target: str) -> bool:
    parts = target.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            mod = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        return _lookup(mod, parts[cut:])
    return False


def resolves(target: str, module, cls=None) -> bool:
    target = target.strip().lstrip("~").removesuffix("()")
    if "<" in target:  # "text <target>"
        target = target[target.index("<") + 1 : target.rindex(">")]
    head = target.split(".")[0]
    if head == "genlab" or head in OTHER_PACKAGES:
        return _import_dotted(target)
    parts = target.split(".")
    if cls is not None and _lookup(cls, parts):
        return True
    if _lookup(module, parts):
        return True
    if len(parts) == 1 and hasattr(builtins, target):
        return True
    return _import_dotted(f"{module.__name__.rsplit('.', 1)[0]}.{target}")


def _docstrings(module):
    """(docstring, class or None, where) for the module, its classes, functions and members."""
    yield module.__doc__ or "", None, module.__name__
    for name, obj in list(vars(module).items()):
        if getattr(obj, "__module__", None) != module.__name__:
            continue
        if inspect.isclass(obj):
            yield obj.__doc__ or "", obj, f"{module.__name__}.{name}"
            for attr, member in list(vars(obj).items()):
                doc = getattr(member, "__doc__", None)
                if isinstance(member, (staticmethod, classmethod)):
                    doc = member.__func__.__doc__
                kinds = (property, staticmethod, classmethod)
                if isinstance(doc, str) and (callable(member) or isinstance(member, kinds)):
                    yield doc, obj, f"{module.__name__}.{name}.{attr}"
        elif inspect.isfunction(obj):
            yield obj.__doc__ or "", None, f"{module.__name__}.{name}"


def broken() -> list[str]:
    found = []
    for name in module_names():
        module = importlib.import_module(name)
        for doc, cls, where in _docstrings(module):
            for role, target in ROLE.findall(doc):
                if not resolves(target, module, cls):
                    found.append(f"{where}: :{role}:`{target}`")
    return sorted(set(found))


def main() -> int:
    bad = broken()
    for line in bad:
        print(line)
    print(f"{len(bad)} cross-reference(s) that resolve to nothing", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
