"""Build the API reference from the docstrings with pdoc; any pdoc warning is an error,
and so is a cross-reference (``:class:`...```, ``:meth:`...``` ...) that resolves to
nothing (scripts/doc_refs.py), which pdoc would leave as plain text.

    python scripts/build_docs.py [OUTPUT_DIR]        # default build/docs (make docs)

genlab's packages load their public names lazily (module ``__getattr__``, so that
``import genlab`` stays light); pdoc reads a module's namespace, so every name of every
``__all__`` is resolved first. Documented: genlab, its subpackages and every module.
"""

from __future__ import annotations

import importlib
import pathlib
import sys
import warnings

ROOT = pathlib.Path(__file__).resolve().parents[1]


def main(out: str) -> int:
    warnings.simplefilter("error", UserWarning)  # pdoc's warnings are UserWarnings
    import pdoc

    sys.path.insert(0, str(ROOT / "scripts"))
    from doc_refs import broken, module_names

    bad = broken()
    if bad:
        print("Cross-references that resolve to nothing:", *bad, sep="\n  ", file=sys.stderr)
        return 1

    names = module_names()
    for name in names:
        mod = importlib.import_module(name)
        for attr in getattr(mod, "__all__", ()):
            # resolve lazy names into the module's namespace, where pdoc looks
            vars(mod).setdefault(attr, getattr(mod, attr))
    pdoc.render.configure(docformat="restructuredtext", search=True, show_source=False)
    pdoc.pdoc(*names, output_directory=pathlib.Path(out))
    pages = list(pathlib.Path(out).rglob("*.html"))
    print(f"API reference: {len(pages)} pages in {out}/ ({len(names)} modules)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "build/docs"))
