"""The public API as a user meets it: dir() and tab completion, docstrings, examples.

Walks every name in ``__all__`` of genlab, genlab.plots and genlab.widgets and the public
methods and properties of the classes among them (scripts/apiwalk.py, also the coverage
report), and fails on a missing docstring, an argument a docstring does not mention, or a
main name without an example.
"""

from __future__ import annotations

import importlib
import rlcompleter
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import apiwalk  # noqa: E402

# Names still waiting for their docstring, arguments or example (empty: everything is done).
TODO_NO_DOCSTRING: set[str] = set()
TODO_ARGUMENTS: set[str] = set()
TODO_EXAMPLE: set[str] = set()

API = list(apiwalk.public_api())
IDS = [q for q, _ in API]


def _main_names():
    plots = importlib.import_module("genlab.plots").__all__
    widgets = [n for n in importlib.import_module("genlab.widgets").__all__ if n != "PRESETS"]
    return [
        *apiwalk.MAIN,
        *(f"genlab.plots.{n}" for n in plots),
        *(f"genlab.widgets.{n}" for n in widgets),
    ]


@pytest.mark.parametrize("modname", apiwalk.MODULES)
def test_dir_lists_every_public_name_and_nothing_private(modname):
    mod = importlib.import_module(modname)
    shown = dir(mod)
    assert set(mod.__all__) <= set(shown), set(mod.__all__) - set(shown)
    private = [n for n in shown if n.startswith("_") and n != "__version__"]
    assert not private, f"dir({modname}) shows private names {private}"
    assert "annotations" not in shown and "importlib" not in shown
    # every name shown is reachable
    for name in shown:
        getattr(mod, name)


def test_tab_completion_offers_the_lazy_names():
    import genlab

    complete = rlcompleter.Completer({"genlab": genlab}).complete

    def all_completions(text):
        out, i = [], 0
        while (c := complete(text, i)) is not None:
            out.append(c)
            i += 1
        return out

    assert "genlab.plots.token_probs(" in all_completions("genlab.plots.tok")
    assert "genlab.widgets.StepDebugger(" in all_completions("genlab.widgets.Ste")
    assert all_completions("genlab.loa") == ["genlab.load("]
    assert not [c for c in all_completions("genlab.plots.") if c.startswith("genlab.plots._")]


@pytest.mark.parametrize("qual,obj", API, ids=IDS)
def test_public_name_has_a_docstring(qual, obj):
    if qual in TODO_NO_DOCSTRING:
        assert not apiwalk.docstring(obj), f"{qual} has a docstring now: remove it from TODO"
        return
    assert apiwalk.docstring(obj), f"{qual} has no docstring"


@pytest.mark.parametrize("qual,obj", API, ids=IDS)
def test_docstring_names_every_argument(qual, obj):
    missing = apiwalk.missing_arguments(obj)
    if qual in TODO_ARGUMENTS | TODO_NO_DOCSTRING:
        return
    assert not missing, f"{qual}: the docstring does not mention {missing}"


@pytest.mark.parametrize("qual", _main_names())
def test_main_names_show_an_example(qual):
    obj = dict(API)[qual]
    if qual in TODO_EXAMPLE:
        return
    assert ">>>" in apiwalk.docstring(obj), f"{qual}: add an example (>>> ...) to its docstring"


def test_todo_lists_only_hold_names_that_still_need_work():
    rows = dict(API)
    for q in TODO_ARGUMENTS:
        assert apiwalk.missing_arguments(rows[q]), f"{q} is done: remove it from TODO_ARGUMENTS"
    for q in TODO_EXAMPLE:
        assert ">>>" not in apiwalk.docstring(rows[q]), f"{q} has an example: remove from TODO"


def test_the_glossary_names_what_the_code_uses():
    import genlab.glossary as glossary

    text = glossary.__doc__
    for name in ("run.step_index", "run.views.gen_config", "eos_token_ids", "Timeline", "depth",
                 "stepdata", "finished_by", "RunRandom"):  # fmt: skip
        assert name in text, name
