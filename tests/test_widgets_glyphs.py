"""Every symbol the panels and plots print is a glyph of DejaVu Sans, the font a Linux
classroom machine falls back to (JupyterLab, Voila and matplotlib): a symbol no installed
font has draws as an empty box (issue 50: the end-of-text mark U+23F9 did).

The symbols are read from the string literals of genlab's panels, plots and token
labels (docstrings left out: nobody reads them in a panel), so a new symbol is checked
the day it is written."""

from __future__ import annotations

import ast
import unicodedata
from pathlib import Path

import matplotlib
import pytest
from fontTools.ttLib import TTFont

import genlab
from genlab.widgets.render import END_MARK

ROOT = Path(genlab.__file__).parent
SOURCES = sorted(
    [*ROOT.glob("widgets/*.py"), *ROOT.glob("plots/*.py"), ROOT / "text" / "tokens.py"],
    key=str,
)
DEJAVU = Path(matplotlib.get_data_path()) / "fonts" / "ttf"


def printed_symbols(path: Path) -> set[str]:
    """The non-ASCII characters of ``path``'s string literals, docstrings left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            docstrings.add(id(body[0].value))
    return {
        ch
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        if id(node) not in docstrings
        for ch in node.value
        if ord(ch) > 127
    }


def cmap(name: str) -> set[int]:
    return set(TTFont(DEJAVU / name).getBestCmap())


def test_the_scan_finds_the_panels_symbols():
    found = set().union(*(printed_symbols(p) for p in SOURCES))
    # the marks of text/tokens.py, the tree's branch mark and the end-of-text mark
    assert {"\u2423", "\u21b5", "\u21b3", END_MARK[0]} <= found
    assert "\u23f9" not in found  # drew an empty box in JupyterLab and Voila (issue 50)


@pytest.mark.parametrize("font", ["DejaVuSans.ttf", "DejaVuSansMono.ttf"])
def test_every_printed_symbol_is_in_dejavu(font):
    glyphs = cmap(font)
    missing = sorted(
        f"U+{ord(ch):04X} {unicodedata.name(ch, '?')} in {path.relative_to(ROOT)}"
        for path in SOURCES
        for ch in printed_symbols(path)
        if ord(ch) not in glyphs
    )
    assert missing == [], f"symbols {font} lacks (they draw as empty boxes): {missing}"


def test_a_missing_glyph_is_caught():
    # the check itself: the old end-of-text mark is not a glyph of DejaVu Sans
    assert ord("\u23f9") not in cmap("DejaVuSans.ttf")
    assert ord(END_MARK[0]) in cmap("DejaVuSans.ttf")
