"""Every number a lesson's prose quotes is bound to an output beside it (issue 47, item 1).

A lesson's markdown may state a figure only where a reader can see it: the number must be
printed by one of the nearest code cells (two before and two after the markdown cell),
written in their source (a setting such as ``top_p=0.9``), or stated by a ``claim(...)``
check in the next code cell. Then nbval fails the day the output changes under the prose.

The rules, so that every lesson's owner can read what this test wants:

* numbers are read from markdown prose outside LaTeX (``$...$``), links and URLs,
  references to lessons, notebooks, cells, exercises and sections ("lesson 04",
  "Exercise 2", "## 3."), citations ("et al. 2023", "(2018)") and identifiers
  (``09_beam_search``, ``fp16``, version strings such as 4.56.2);
* also outside fenced code, inline settings (`` `top_p=0.9` ``), strings shown in
  quotes (``"25"``), version numbers (transformers 4.56) and the goals' "Runs in about
  N s";
* integers below 20 without a ``%`` are ignored;
* a prose number matches an output number within the prose's printed precision
  (0.5 matches 0.503, 53 % matches 53.2 or 0.532, −3.23 matches -3.23, 1,234 matches
  1234); the sign may differ ("a drop of 2.0 nats" beside a printed -2.0);
* what remains must be in ``EXEMPT`` with its reason. Keep that list short: prefer
  printing the number.

Pure JSON reading, no kernel: it runs in well under a second.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LESSONS = [
    p
    for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    if not p.name.startswith("00_")
]
NEAR = 2  # code cells looked at on each side of a markdown cell

# (notebook prefix or "*" for every lesson, number as the prose writes it): why the number
# needs no output beside it
EXEMPT: dict[tuple[str, str], str] = {
    ("*", "49,152"): "the demo tokenizer's vocabulary size, printed in lesson 01",
    ("11", "200"): "the length up to which Kirchenbauer et al.'s z-score figure runs (the paper)",
}


def _src(cell: dict) -> str:
    s = cell["source"]
    return s if isinstance(s, str) else "".join(s)


_TAGS = re.compile(r"<[^>]+>")


def _out_text(cell: dict) -> str:
    texts = []
    for out in cell.get("outputs", []):
        texts.append("".join(out.get("text", "")))
        data = out.get("data", {})
        texts.append("".join(data.get("text/plain", "")))
        texts.append(_TAGS.sub(" ", "".join(data.get("text/html", ""))))
        texts.append("".join(data.get("text/markdown", "")))
    return "\n".join(texts)


# -- reading numbers -------------------------------------------------------------------

_MINUS = "\u2212"
# a number that is not part of an identifier, a version or a longer number
_NUM = re.compile(
    r"(?:(?<![\w.,/:#\u00b7-])|(?<=(?<!\w)x))"  # not inside a word, version, path, range
    r"(?P<sign>[-\u2212+])?"
    r"(?P<body>\d{1,3}(?:,\d{3})+(?!\d)|\d+)"
    r"(?P<frac>\.\d+)?"
    r"(?P<exp>[eE][-\u2212+]?\d+)?"
    r"(?![\w]|\.\d)"  # not followed by letters or another dotted part
    r"(?P<pct>\s?%)?"
)
# in outputs and code, numbers sit next to anything (x1.14, 0.50/0.56, top_p=0.9)
_LOOSE = re.compile(r"(?<![\d.])[-\u2212]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")

_LATEX = re.compile(r"\$\$.*?\$\$|\$[^$\n]+\$", re.S)
_LINK = re.compile(r"\]\([^)]*\)")
_URL = re.compile(r"https?://\S+|arXiv:\s?\S+|doi:\s?\S+", re.I)
_IMG = re.compile(r"!\[[^\]]*\]\([^)]*\)")
_REF_WORDS = (
    r"\b(?:lessons?|notebooks?|cells?|exercises?|sections?|parts?|chapters?|items?|issues?|"
    r"figures?|fig\.|tables?|eq\.|equations?|PR)|§|#"
)
_LIST_OF_REFS = r"\d+(?:\.\d+)?(?:\s*(?:,|and|or|to|-|\u2013|&)\s*\d+(?:\.\d+)?)*"
_REF = re.compile(rf"(?i)(?:{_REF_WORDS})\s*{_LIST_OF_REFS}")
_CITE = re.compile(
    r"(?:et al\.?,?|&\s*[A-Z][\w\u00c0-\u017f-]+,?|[A-Z][\w\u00c0-\u017f-]+,)"
    r"\s*\(?(?:19|20)\d\d[a-z]?\)?"
    r"|\((?:[^()]*?\s)?(?:19|20)\d\d[a-z]?\)"
    r"|\b(?:19|20)\d\d[a-z]?\)"
)
_HEADING_NUM = re.compile(r"^(#+\s*)\d+(?:\.\d+)*\.?", re.M)
_LIST_NUM = re.compile(r"^(\s*)\d+\.\s", re.M)
_FILE = re.compile(r"\b\w*\d\w*\.(?:ipynb|py|md|json|csv|png)\b")
_FENCE = re.compile(r"```.*?```", re.S)
_SETTING = re.compile(r"`[^`\n]*?\w=[^`\n]*`")  # `top_p=0.9`: a setting, not a figure
_QUOTED = re.compile(r"[\"\u201c]\d+[\"\u201d]")  # "25": a string shown, not a figure
_VERSION = re.compile(r"(?i)\b(?:transformers|torch|python|numpy|version|v)\s*\d+(?:\.\d+)+")
_RUNTIME = re.compile(r"Runs\s+in\s+about\s+\d+\s+s")  # the goals' runtime, an estimate


_BLANKED = (_FENCE, _SETTING, _IMG, _LATEX, _LINK, _URL, _FILE, _VERSION, _QUOTED, _RUNTIME)
_BLANKED += (_REF, _CITE)


def _clean(prose: str) -> str:
    """The prose with everything that is not a quoted figure blanked out."""
    for pat in (
        _FENCE,
        _SETTING,
        _IMG,
        _LATEX,
        _LINK,
        _URL,
        _FILE,
        _VERSION,
        _QUOTED,
        _RUNTIME,
        _REF,
        _CITE,
    ):
        prose = pat.sub(" ", prose)
    prose = _HEADING_NUM.sub(r"\1", prose)
    return _LIST_NUM.sub(r"\1", prose)


def prose_numbers(prose: str) -> list[tuple[str, float, float, bool]]:
    """(text, value, half a unit of its last printed digit, percent?) of each figure."""
    found = []
    for m in _NUM.finditer(_clean(prose)):
        body, frac, exp = m["body"], m["frac"] or "", m["exp"] or ""
        pct = bool(m["pct"])
        if not frac and not exp and not pct and int(body.replace(",", "")) < 20:
            continue
        sign = "-" if m["sign"] in ("-", _MINUS) else ""
        mant = body.replace(",", "") + frac
        e = int(exp[1:].replace(_MINUS, "-")) if exp else 0
        value = float(f"{sign}{mant}") * 10.0**e
        half = 0.5 * 10.0 ** (e - (len(frac) - 1 if frac else 0))
        found.append((m.group(0).strip(), value, half, pct))
    return found


def loose_numbers(text: str) -> list[float]:
    text = text.replace(_MINUS, "-")
    values = []
    for m in _LOOSE.finditer(re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)):
        try:
            values.append(float(m.group(0)))
        except ValueError:
            continue
    return values


def _bound(value: float, half: float, pct: bool, seen: list[float]) -> bool:
    tol = half * (1 + 1e-9) + 1e-12
    targets = [(abs(value), tol)] + ([(abs(value) / 100, tol / 100)] if pct else [])
    return any(abs(abs(o) - t) <= tt for o in seen for t, tt in targets)


# -- the binding -----------------------------------------------------------------------


def _neighbours(cells: list[dict], i: int) -> list[int]:
    before = [j for j in range(i - 1, -1, -1) if cells[j]["cell_type"] == "code"][:NEAR]
    after = [j for j in range(i + 1, len(cells)) if cells[j]["cell_type"] == "code"][:NEAR]
    return before + after


def unbound_numbers(path: Path) -> list[str]:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    prefix = path.name[:2]
    problems = []
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "markdown":
            continue
        prose = _src(cell)
        figures = prose_numbers(prose)
        if not figures:
            continue
        near = _neighbours(cells, i)
        seen = []
        for j in near:
            seen += loose_numbers(_out_text(cells[j]))
            seen += loose_numbers(_src(cells[j]))
        for text, value, half, pct in dict.fromkeys(figures):
            if (prefix, text) in EXEMPT or ("*", text) in EXEMPT or _bound(value, half, pct, seen):
                continue
            flat = " ".join(prose.split())
            k = flat.find(text)
            snippet = flat[max(0, k - 60) : k + len(text) + 40] if k >= 0 else flat[:100]
            problems.append(f"cell {i}: {text!r} in '...{snippet}...'")
    return problems


# -- the self-test of the reader: what it must take and what it must leave -------------


@pytest.mark.parametrize(
    "prose,expected",
    [
        ("the mean z is 4.22 against 4.39", ["4.22", "4.39"]),
        ("it keeps 53 % of the mass", ["53 %"]),
        ("a log p of −12.36 and -16.2", ["−12.36", "-16.2"]),
        ("1,234 tokens", ["1,234"]),
        ("see lesson 04 and cells 35 and 41, Exercise 2", []),
        ("## 3. Twenty-one samples", []),
        ("Koehn & Knowles, 2017; Yang et al. 2018; (Holtzman et al., 2020)", []),
        ("transformers 4.56.2 on fp16 with `09_beam_search`", []),
        ("$p = 0.37$ and [a link](https://x.org/2302.00666)", []),
        ("three beams and 12 samples", []),
        ("speed-up x1.14, 40 new tokens", ["1.14", "40"]),
        ("p = 3e-5 here", ["3e-5"]),
        ("keep `top_k=20, top_p=0.9`; transformers 4.56 and later", []),
        ('how it wrote "25" or "1987"', []),
        ("**Runs in about 25 s** on a CPU", []),
        ("```python\nlm.generate(max_new_tokens=48)\n```", []),
    ],
)
def test_the_reader_takes_figures_and_leaves_references(prose, expected):
    assert [t for t, *_ in prose_numbers(prose)] == expected


@pytest.mark.parametrize(
    "prose,output,ok",
    [
        ("0.5", "0.503", True),
        ("0.5", "0.56", False),
        ("53 %", "53.2", True),
        ("53 %", "0.532", True),
        ("53 %", "0.54", False),
        ("−3.23", "-3.23", True),
        ("1,234", "1234", True),
        ("1.14", "speed-up x1.14", True),
        ("0.89", "speed-up x1.14", False),
        ("4.22", "deleted 4.2249 replaced 4.39", True),
    ],
)
def test_a_prose_figure_matches_an_output_within_its_printed_precision(prose, output, ok):
    (_, value, half, pct) = prose_numbers(prose)[0]
    assert _bound(value, half, pct, loose_numbers(output)) is ok


# -- the lessons -----------------------------------------------------------------------


@pytest.mark.parametrize("path", LESSONS, ids=[p.stem for p in LESSONS])
def test_every_number_in_the_prose_is_printed_beside_it(path):
    problems = unbound_numbers(path)
    assert not problems, (
        f"{path.name}: {len(problems)} number(s) in the prose that no nearby output, code "
        "or claim() shows (print it, claim it, or exempt it with a reason in "
        "tests/test_claims.py):\n  " + "\n  ".join(problems)
    )


def test_every_exemption_names_a_number_the_prose_still_quotes():
    stale = []
    for (prefix, text), reason in EXEMPT.items():
        assert reason.strip(), f"exemption {prefix} {text!r} has no reason"
        found = LESSONS if prefix == "*" else [p for p in LESSONS if p.name[:2] == prefix]
        quoted = any(
            text == t
            for path in found
            for c in json.loads(path.read_text(encoding="utf-8"))["cells"]
            if c["cell_type"] == "markdown"
            for t, *_ in prose_numbers(_src(c))
        )
        if not quoted:
            stale.append(f"{prefix} {text!r}")
    assert not stale, f"exemptions for numbers no lesson quotes any more: {stale}"


_CLAIM_DEF = re.compile(r"^def claim\(holds, statement\):", re.M)


@pytest.mark.parametrize("path", LESSONS, ids=[p.stem for p in LESSONS])
def test_the_set_up_cell_defines_claim(path):
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    first = next(c for c in cells if c["cell_type"] == "code")
    assert _CLAIM_DEF.search(_src(first)), (
        f"{path.name}: the first code cell must define claim(holds, statement) (issue 47)"
    )


# The comparative sentences issue 47 found contradicted by their outputs. Each is either
# gone from the lesson or followed, in the next code cell, by a claim() that checks it.
NAMED = [
    ("10", "mode is degenerate"),
    ("10", "most probable answer of all is nearly empty"),
    ("11", "deleting costs less evidence than replacing"),
    ("13", "the self-drafter does not pay"),
    ("03", "typical-p may skip the favourite"),
    ("16", "processor.<ClassName>"),
    ("*_appendix_widget_tour", "notebook 11 does the same"),
    ("02", "greedy and beam search loop"),
    ("09", "so seeds differ"),
    ("04", "keeps too much on a peaked distribution"),
    ("05", "recovers much of"),
    ("17", "does not begin with a letter"),
]


def _flat(text: str) -> str:
    return " ".join(text.replace("*", "").replace("`", "").split()).lower()


@pytest.mark.parametrize("prefix,sentence", NAMED, ids=[f"{p}-{s[:24]}" for p, s in NAMED])
def test_a_contradicted_sentence_is_gone_or_claimed(prefix, sentence):
    pattern = prefix if "*" in prefix else f"{prefix}_*"
    found = sorted((ROOT / "notebooks").glob(f"{pattern}.ipynb"))
    assert found, f"no lesson {prefix}"
    cells = json.loads(found[0].read_text(encoding="utf-8"))["cells"]
    unclaimed = []
    for i, c in enumerate(cells):
        if c["cell_type"] != "markdown" or _flat(sentence) not in _flat(_src(c)):
            continue
        nxt = next((d for d in cells[i + 1 :] if d["cell_type"] == "code"), None)
        if nxt is None or "claim(" not in _src(nxt):
            unclaimed.append(i)
    assert not unclaimed, (
        f"{found[0].name} cells {unclaimed} still say '{sentence}' without a claim() after "
        "them; issue 47 found the output contradicts it"
    )
