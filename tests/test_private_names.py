"""No genlab module reads another module's private names.

The rule, checked on the AST of every module under genlab/ (tests are not checked):

* A *private name* is an attribute ``x._name`` with one leading underscore (dunders such
  as ``__init__`` are not private). IPython's display protocol (``_repr_html_``,
  ``_repr_mimebundle_`` ...) and namedtuple's ``_replace``, ``_asdict``, ``_fields`` and
  ``_make`` are public by their protocols.
* A module *defines* ``_name`` when it binds it: a ``def`` or ``class`` of that name, an
  assignment to that name at module or class level, an assignment to ``self._name`` or
  ``cls._name``, or a string in a ``__slots__``.
* ``x._name`` (read, written or deleted) is allowed when the module defines ``_name``:
  the module is the unit of privacy, so ``other._len`` in a class's ``__eq__`` is fine.
* ``self._name`` / ``cls._name`` is also allowed when a genlab class the enclosing class
  derives from (its bases, followed through genlab) defines ``_name``: a subclass may
  use what its base class keeps for it. A mixin reaching into its host's names is not:
  the host is not its base.
* Anything else is a violation, except the third-party private names in ``ALLOWED``
  (torch's, Python's), each with its reason; no genlab module may define an allowed
  name, so genlab's own private names can never be allowed that way.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "genlab"

PROTOCOL = {"_replace", "_asdict", "_fields", "_make"}

#: third-party private names genlab reads on purpose, and why
ALLOWED = {
    # Python: the caller's frame (warnings at the user's line, lazy imports' importer)
    "_getframe": "sys._getframe",
    # torch: a tensor's in-place version counter (the forward cache's key)
    "_version": "torch.Tensor._version",
    # torch: the global and per-module hook dicts (the forward cache must see every hook)
    "_global_forward_hooks": "torch.nn.modules.module",
    "_global_forward_pre_hooks": "torch.nn.modules.module",
    "_forward_hooks": "torch.nn.Module",
    "_forward_pre_hooks": "torch.nn.Module",
    # torch's packed CPU kernels (int4/int8 weights, oneDNN linear): no public name yet
    "_convert_weight_to_int4pack_for_cpu": "torch.ops.aten",
    "_weight_int4pack_mm_for_cpu": "torch.ops.aten",
    "_weight_int8pack_mm": "torch",
    "_reorder_linear_weight": "torch.ops.mkldnn",
    "_linear_pointwise": "torch.ops.mkldnn",
    # transformers: CompileConfig's flag (genlab's own is ``all_devices``), set on the
    # reference's config that its get_compiled_call compares
    "_compile_all_devices": "transformers.CompileConfig",
}


def _private(name: str) -> bool:
    if not name.startswith("_") or name.startswith("__") or name in PROTOCOL:
        return False
    return not (name.startswith("_repr_") and name.endswith("_"))


def _defined(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id in ("self", "cls")
        ):
            names.add(node.attr)
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets
        ):
            for c in ast.walk(node.value):
                if isinstance(c, ast.Constant) and isinstance(c.value, str):
                    names.add(c.value)
    return names


def _class_names(cls: ast.ClassDef) -> set[str]:
    """What a class body defines (its methods, class attributes, self.x it assigns)."""
    names = _defined(ast.Module(body=cls.body, type_ignores=[]))
    return names


def _modules(package: Path = PACKAGE):
    return {p: ast.parse(p.read_text()) for p in sorted(package.rglob("*.py"))}


def _classes(trees) -> dict[str, list[tuple[set[str], list[str]]]]:
    """Class name -> [(names it defines, its base names)] over genlab."""
    out: dict[str, list] = {}
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases = [ast.unparse(b).rpartition(".")[2] for b in node.bases]
                out.setdefault(node.name, []).append((_class_names(node), bases))
    return out


def _inherited(bases: list[str], classes, seen=None) -> set[str]:
    seen = set() if seen is None else seen
    names: set[str] = set()
    for base in bases:
        if base in seen:
            continue
        seen.add(base)
        for defined, more in classes.get(base, ()):
            names |= defined | _inherited(more, classes, seen)
    return names


def violations(package: Path = PACKAGE) -> list[str]:
    trees = _modules(package)
    classes = _classes(trees)
    found = []
    for path, tree in trees.items():
        own = _defined(tree)

        def visit(node, inherited, own=own, path=path):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.ClassDef):
                    bases = [ast.unparse(b).rpartition(".")[2] for b in child.bases]
                    visit(child, _inherited(bases, classes), own, path)
                    continue
                if isinstance(child, ast.Attribute) and _private(child.attr):
                    name = child.attr
                    on_self = isinstance(child.value, ast.Name) and child.value.id in (
                        "self",
                        "cls",
                    )
                    ok = name in own or name in ALLOWED or (on_self and name in inherited)
                    if not ok:
                        rel = path.relative_to(package.parent)
                        found.append(f"{rel}:{child.lineno}: {ast.unparse(child)}")
                visit(child, inherited, own, path)

        visit(tree, set())
    return found


def test_no_module_reads_another_modules_private_names():
    found = violations()
    assert found == [], f"{len(found)} cross-module private accesses:\n" + "\n".join(found)


def test_the_allowed_names_are_not_genlabs_own():
    own = set()
    for tree in _modules().values():
        own |= _defined(tree)
    assert sorted(own & set(ALLOWED)) == []


def test_the_rule_catches_a_mixin_and_a_foreign_read(tmp_path):
    """The check itself: a mixin using its host's private name, and a module reading
    another's, are both found; a subclass using its base's is not."""
    pkg = tmp_path / "genlab"
    pkg.mkdir()
    (pkg / "host.py").write_text(
        "class Base:\n    def _helper(self):\n        self._state = 1\n"
        "class Host(Base):\n    def go(self):\n        return self._helper()\n"
    )
    (pkg / "mixin.py").write_text("class Mixin:\n    def go(self):\n        return self._state\n")
    (pkg / "reader.py").write_text("def read(run):\n    return run._state\n")
    found = violations(pkg)
    assert found == ["genlab/mixin.py:3: self._state", "genlab/reader.py:2: run._state"]
