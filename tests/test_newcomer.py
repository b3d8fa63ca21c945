"""What a newcomer meets first: the README's shape, help(genlab), warnings, docstring examples.

The Quickstart itself runs in make wheel-check's fresh venv (scripts/newcomer_check.py);
the docstring examples run in make doctest. These tests check the rules around them.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil
import pydoc
import re
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import newcomer_check  # noqa: E402

README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_readme_is_short_and_its_quickstart_states_its_output():
    assert len(README.splitlines()) <= 150
    pairs = newcomer_check.quickstart(README)
    code, out = pairs[0]
    assert len(code.splitlines()) <= 10, "the Quickstart is at most ten lines"
    assert "run.text" in code and out.strip()  # the documented way to read a run's text
    # forced, rewound and hooked in an order whose effect shows: rewind before force
    assert code.index("rewind") < code.index("force") < code.index("hooks")


def test_readme_names_the_commands_in_order_and_links_exist():
    steps = [README.index(f"make {t}") for t in ("demo", "lab", "test")]
    assert steps == sorted(steps)
    for link in re.findall(r"\]\(([^)#]+)\)", README):
        if link.startswith("notebooks/README.md"):
            continue  # written by the course (issue 27)
        assert (ROOT / link).exists(), f"README links to {link}, which does not exist"


def test_help_genlab_is_a_short_guide():
    import genlab

    text = pydoc.render_doc(genlab, renderer=pydoc.plaintext)
    assert len(text.splitlines()) < 120, len(text.splitlines())
    assert "genlab.load" in text and "Where to look next" in text
    ns: dict = {}
    exec("from genlab import *", ns)
    assert {"load", "generate", "Run", "GenerationConfig"} <= set(ns)


def test_a_set_up_warning_is_shown_once_at_the_users_line():
    import genlab

    lm = genlab.LM(genlab.TableLM.classic())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lm.start("The", temperature=0.5, max_new_tokens=2)  # temperature without sampling
    shown = [w for w in caught if "temperature" in str(w.message)]
    assert len(shown) == 1, [str(w.message) for w in caught]
    assert shown[0].filename == __file__


def _docstring_tests():
    import genlab

    finder = doctest.DocTestFinder()
    for info in pkgutil.walk_packages(genlab.__path__, "genlab."):
        try:
            module = importlib.import_module(info.name)
        except ImportError:  # a module being written beside this test
            continue
        yield from (t for t in finder.find(module) if t.examples)


def test_every_docstring_example_not_run_says_why():
    """An example marked +SKIP sits in a docstring that says why it is not run."""
    unexplained = []
    for test in _docstring_tests():
        skipped = [e for e in test.examples if e.options.get(doctest.SKIP)]
        if skipped and "not run" not in (test.docstring or "").lower():
            unexplained.append(f"{test.name}: {skipped[0].source.strip()}")
    assert not unexplained, "examples skipped without a reason:\n" + "\n".join(unexplained)


@pytest.mark.parametrize("line", ["prob_colour(1.0)"])
def test_known_wrong_examples_stay_right(line):
    from genlab.widgets import render

    assert "'#006837'" in render.__doc__ and render.prob_colour(1.0) == "#006837", line
