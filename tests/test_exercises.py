"""No exercise's answer appears before the exercise (issue 47, section 2).

The README promises that "no answer appears before the exercise". An exercise asks for a
guess (`guess = None` in the cell after it) and folds its answer in a ``<details>`` cell
after that. Each answer starts with the value the student had to guess: a number, a token
or word in backticks or quotes, a named option from the exercise's menu (``guess =
"more"`` or ``"fewer"``), or ``True``/``False``. These tests take that value, and the
figures the answer's first sentence quotes with it, from the committed notebooks and
require that

* none of them is written in the prose a student reads before the attempt: the markdown
  cells from the previous section heading (or the previous exercise) to the exercise;
  the figures and quoted words that are specific enough (a decimal, a number of 20 or
  more, a quoted word of three letters or more) in none of the lesson's earlier prose;
* the key value is not printed by a code cell in that stretch either: an exercise whose
  answer the student can read off an output above it is a lookup, not a prediction.

``True``/``False`` is too generic to look for: an exercise that gives its yes-or-no
answer away in words (a sentence that states the mechanism) is beyond this test and is
the lesson owner's to keep out. The exemptions are explicit, short and each has a reason.

The last tests check the teacher's pack (issue 47, section 5): each quiz bank has at
least 12 questions, each with an answer and what it tests, and no marking guide of
``solutions.md`` stops mid-sentence.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from test_course import _cells, _outputs, _src  # the course tests' notebook readers

ROOT = Path(__file__).resolve().parents[1]
TEACHER = ROOT / "notebooks" / "teacher"
LESSONS = [p for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")) if p.stem[:2] != "00"]

# (lesson prefix, exercise number, value) -> why the value may appear before the exercise
EXEMPT: dict[tuple[str, int, str], str] = {
    ("03", 2, "4.06"): "the entropy bound is the rule the exercise applies, given on purpose;"
    " the answer is which steps of the table pass it",
}


def _is_heading(cell: dict) -> bool:
    return cell["cell_type"] == "markdown" and _src(cell).lstrip().startswith("#")


def _is_exercise(cell: dict) -> bool:
    return cell["cell_type"] == "markdown" and _src(cell).lstrip().startswith("### Exercise")


@dataclass
class Exercise:
    lesson: Path
    number: int
    cell: int  # index of the "### Exercise" cell
    question: str
    answer: str  # the folded answer's body
    window: list[int]  # the cells from the previous heading or exercise to the exercise


def exercises(path: Path) -> list[Exercise]:
    cells = _cells(path)
    found = []
    for i, cell in enumerate(cells):
        if not _is_exercise(cell):
            continue
        folded = next(
            (j for j in range(i + 1, len(cells)) if _src(cells[j]).startswith("<details>")), None
        )
        assert folded is not None, f"{path.name}, cell {i}: an exercise without a folded answer"
        body = _src(cells[folded]).split("</summary>", 1)[-1].split("</details>")[0].strip()
        start = next(j for j in range(i - 1, -1, -1) if j == 0 or _is_heading(cells[j]))
        found.append(Exercise(path, len(found) + 1, i, _src(cell), body, list(range(start, i))))
    return found


EVERY = [ex for path in LESSONS for ex in exercises(path)]


def _id(ex: Exercise) -> str:
    return f"{ex.lesson.stem[:2]}.{ex.number}"


# -- the answer's key values -------------------------------------------------------------

NUMBER = re.compile(r"(?<![\w.])[-−]?\d(?:[\d,]*\d)?(?:\.\d+)?(?:\s?%)?(?![\w])")
WORD_NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "none": 0}
QUOTED = re.compile(r'`([^`]+)`|\*\*([^*]+)\*\*|"([^"]+)"')


@dataclass(frozen=True)
class Value:
    kind: str  # "number", "word" (a token or word) or "option" (from the exercise's menu)
    text: str  # as the answer writes it
    number: float | None = None

    def specific(self) -> bool:
        """Specific enough to look for in the whole lesson, not just the section."""
        if self.kind == "number":
            return "." in self.text or "%" in self.text
        return self.kind == "word" and len(self.text.strip()) >= 3


def _number(text: str) -> float:
    t = text.replace("−", "-").replace(",", "").replace("%", "").strip()
    return float(t)


def _numbers(text: str) -> list[Value]:
    text = re.sub(r"\$[^$]*\$", " ", text)  # LaTeX is a formula, not a figure
    return [Value("number", m.group(), _number(m.group())) for m in NUMBER.finditer(text)]


def _menu(question: str) -> set[str]:
    """The options an exercise offers: the quoted strings of its question."""
    return {m.lower() for m in re.findall(r'"([^"\n]{1,30})"', question)}


def _literal(text: str, menu: set[str]) -> list[Value]:
    """The values of a backticked or bold answer: a Python literal, a number or a word."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        value = None
    if value is not None or text.strip() == "None":
        flat = list(value) if isinstance(value, (tuple, list, set, frozenset)) else [value]
        out = []
        for v in flat:
            if isinstance(v, bool) or v is None:
                continue  # True / False: too generic to look for
            if isinstance(v, (int, float)):
                out.append(Value("number", str(v), float(v)))
            else:
                kind = "option" if v.lower() in menu else "word"
                out.append(Value(kind, v))
        return out
    if text.lower() in menu:
        return [Value("option", text)]
    ordinal = re.fullmatch(r"(\d+)(?:st|nd|rd|th)", text.strip())
    if ordinal:
        return [Value("number", ordinal[1], float(ordinal[1]))]
    numbers = _numbers(text)
    return numbers or [Value("word", text)]


def key_values(ex: Exercise) -> tuple[list[Value], list[Value]]:
    """(the value the student had to guess, the other figures of the answer's first
    sentence that are results: not given by the question or printed above it)."""
    menu = _menu(ex.question)
    sentence = re.split(r"(?<=[.!?])\s+(?=[A-Z(`*\"])|\n\n", ex.answer, maxsplit=1)[0]
    head = re.split(r":\s|\.\s|\.$|;\s|,\s|\s\(", re.sub(r"^\([a-z]\)\s*", "", sentence))[0]
    marked = QUOTED.search(sentence)
    first = None if marked is None else next(g for g in marked.groups() if g is not None)
    key: list[Value] = []
    if re.match(r"\W{0,2}(True|False)\b", sentence):
        pass  # too generic to look for
    elif marked and marked.start() <= sentence.index(head) + len(head):
        key = _literal(first, menu)
    else:
        word = head.strip().split(" ")[0].lower().strip(".,:")
        key = _numbers(head)
        if not key and word in WORD_NUMBERS:
            key = [Value("number", word, float(WORD_NUMBERS[word]))]
        if not key:
            key = [
                Value("option", o) for o in menu if re.search(rf"\b{re.escape(o)}\b", head, re.I)
            ]
        if not key and first:
            key = _literal(first, menu)
    # a number the question itself gives is one of its options, not a result
    key = [
        Value("option", v.text) if v.kind == "number" and _numbers_in(ex.question, v) else v
        for v in key
    ]
    cells = _cells(ex.lesson)
    given = ex.question + "\n".join(
        _src(c) + _outputs(c) for c in cells[: ex.cell] if c["cell_type"] == "code"
    )
    others = [
        v
        for v in _numbers(sentence.replace(head, "", 1))
        if v.specific()
        and not _numbers_in(given, v)
        and all(v.number != k.number for k in key if k.kind == "number")
    ]
    return key, others


# -- where a value is found ------------------------------------------------------------


def _decimals(text: str) -> int:
    t = text.replace("%", "").strip()
    return len(t.split(".")[1]) if "." in t else 0


def _numbers_in(text: str, value: Value) -> bool:
    """Whether `text` writes `value`, at the answer's precision (0.102 is not 0.1)."""
    places = _decimals(value.text)
    percent = "%" in value.text
    for m in NUMBER.finditer(re.sub(r"\$[^$]*\$", " ", text)):
        try:
            n = _number(m.group())
        except ValueError:
            continue
        if "%" in m.group() and not percent:
            n /= 100
        elif percent and "%" not in m.group():
            n *= 100
        written = _decimals(m.group())
        if places == 0 and written and n != int(n):
            continue  # 0.77 does not write the integer 1
        if written >= places and round(n, places) == round(value.number, places):
            return True
    return False


def _quoted_in(text: str, word: str) -> bool:
    """Whether `text` names `word` as a token or an answer: quoted, backticked or bold."""
    w = re.escape(word.strip())
    return bool(re.search(rf'(["`*]|“) ?{w}(["`*]|”)', text, re.I))


def found_in(text: str, value: Value) -> bool:
    if value.kind == "number":
        # an integer below 10 is in every paragraph (a step, a count, a layer)
        return (value.number != int(value.number) or abs(value.number) >= 10) and _numbers_in(
            text, value
        )
    return _quoted_in(text, value.text)


_NOT_PROSE = re.compile(
    r"\]\([^)]*\)|https?://\S+|"  # links
    r"\b(?:[Ll]esson|[Nn]otebook|[Ee]xercise|[Cc]ell|[Ss]ection|[Ss]tep)s? \d+|"  # references
    r"^#+ .*$|(?:19|20)\d\d\b",  # headings and years
    re.M,
)


def _prose(cells: list[dict], indices) -> str:
    return "\n".join(
        _NOT_PROSE.sub(" ", _src(cells[j])) for j in indices if cells[j]["cell_type"] == "markdown"
    )


def giveaways(ex: Exercise) -> list[str]:
    cells = _cells(ex.lesson)
    key, others = key_values(ex)
    near = _prose(cells, ex.window)
    earlier = _prose(cells, range(ex.window[0]))
    rivals = _menu(ex.question) - {v.text.lower() for v in key}
    found = []
    for value in key + others:
        if (ex.lesson.stem[:2], ex.number, value.text) in EXEMPT:
            continue
        if value.kind == "option" and any(_quoted_in(near, r) for r in rivals):
            continue  # the prose names the rival options as well: it chooses none
        if found_in(near, value):
            found.append(f"{value.text!r} in the prose of cells {ex.window[0]}-{ex.cell - 1}")
        elif value.specific() and found_in(earlier, value):
            found.append(f"{value.text!r} in the prose of cells 0-{ex.window[0] - 1}")
    return found + stated_options(ex)


# an option written as a verb or adjective in prose ("mu keeps rising" answers "up")
SYNONYMS = {
    "up": ["up", "rise", "rises", "rising", "grows", "increases", "climbs"],
    "down": ["down", "falls", "drops", "decreases", "shrinks"],
    "fewer": ["fewer", "less"],
}


def _subjects(question: str) -> set[str]:
    """What the question asks about: its Greek symbols (μ, γ...) and the adjective of its
    comparison ("more probable" -> "probable")."""
    asked = question.split("Write your prediction")[0]
    found = set(re.findall(r"[αγδεημστ]", asked))
    return found | {w.lower() for w in re.findall(r"\b(?:more|most|less|least)\s+(\w{5,})", asked)}


def _statements(text: str) -> list[str]:
    """The sentences of a markdown text, without the questions."""
    parts = re.split(r"(?<=[.!?])\s+|\n\n", text.replace("\n", " "))
    return [s for s in parts if s.strip() and not s.strip().endswith("?")]


def stated_options(ex: Exercise) -> list[str]:
    """Sentences of the lesson's earlier prose that state the answer's option about what the
    question asks (its subject), and name no rival option."""
    key, _ = key_values(ex)
    options = [v.text.lower() for v in key if v.kind == "option" and not NUMBER.fullmatch(v.text)]
    subjects = _subjects(ex.question)
    if not options or not subjects:
        return []
    rivals = _menu(ex.question) - set(options)

    def names(sentence: str, option: str) -> bool:
        forms = SYNONYMS.get(option, [option])
        return any(re.search(rf"\b{re.escape(f)}\b", sentence) for f in forms)

    cells = _cells(ex.lesson)
    found = []
    for j in range(ex.cell):
        if cells[j]["cell_type"] != "markdown":
            continue
        for sentence in _statements(_NOT_PROSE.sub(" ", _src(cells[j])).lower()):
            if (
                any(names(sentence, o) for o in options)
                and not any(names(sentence, r) for r in rivals)
                and any(s in sentence for s in subjects)
            ):
                found.append(f"cell {j} states {options}: {sentence[-160:]!r}")
    return found


def lookups(ex: Exercise) -> list[str]:
    cells = _cells(ex.lesson)
    key, _ = key_values(ex)
    printed = "\n".join(_outputs(cells[j]) for j in ex.window if cells[j]["cell_type"] == "code")
    return [
        f"{v.text!r} is printed above the exercise"
        for v in key
        if (v.kind == "word" or (v.kind == "number" and v.specific()))
        and (ex.lesson.stem[:2], ex.number, v.text) not in EXEMPT
        and found_in(printed.replace("'", '"'), v)
    ]


# -- the tests -------------------------------------------------------------------------


def test_every_lesson_has_exercises_and_each_answer_has_a_key_value():
    assert len(EVERY) >= 45, len(EVERY)
    keyed = [ex for ex in EVERY if key_values(ex)[0]]
    # True/False answers have no key value to look for; the others must have one
    assert len(keyed) * 2 >= len(EVERY), [_id(ex) for ex in EVERY if not key_values(ex)[0]]


@pytest.mark.parametrize("ex", EVERY, ids=[_id(ex) for ex in EVERY])
def test_no_answer_appears_before_its_exercise(ex):
    found = giveaways(ex)
    assert not found, (
        f"{ex.lesson.name}, exercise {ex.number} (cell {ex.cell}) gives its answer away: "
        + "; ".join(found)
    )


@pytest.mark.parametrize("ex", EVERY, ids=[_id(ex) for ex in EVERY])
def test_no_answer_is_a_lookup_of_an_output_above_it(ex):
    found = lookups(ex)
    assert not found, f"{ex.lesson.name}, exercise {ex.number} (cell {ex.cell}): " + "; ".join(
        found
    )


def _lesson(tmp_path: Path, cells: list[tuple[str, str, str]]) -> Path:
    """A notebook of (type, source, printed output) cells."""
    nb = {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    for kind, source, printed in cells:
        cell = {"cell_type": kind, "metadata": {}, "source": source}
        if kind == "code":
            cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": printed}]
        nb["cells"].append(cell)
    path = tmp_path / "99_made_up.ipynb"
    path.write_text(json.dumps(nb), encoding="utf-8")
    return path


def _exercise(question: str, answer: str) -> list[tuple[str, str, str]]:
    folded = f"<details><summary><b>Answer</b> (click to open)</summary>\n\n{answer}\n</details>"
    return [
        ("markdown", f"### Exercise 1: predict, then run\n\n{question}", ""),
        ("code", "guess = None\ncheck(guess, value)", ""),
        ("markdown", folded, ""),
    ]


@pytest.mark.parametrize(
    ("prose", "printed", "question", "answer", "caught"),
    [
        # a figure of the answer written in the section above
        ("Top-p keeps a mean of 0.42 here.", "", "Above or below 0.5?", "**below**: 0.42.", True),
        ("Top-p keeps a mean of 0.4.", "", "Above or below 0.5?", "**below**: 0.42.", False),
        # the token the student must name, quoted in the prose
        ('The lens ranks " city" first.', "", "Which token leads?", '`" city"` (below).', True),
        ("Every city has one.", "", "Which token leads?", '`" city"` (below).', False),
        # an option stated about the question's subject
        ("Here μ keeps rising.", "", 'Does μ go "up" or "down"?', '`"up"` (below).', True),
        ("Here μ keeps rising.", "", 'Does μ go "up" or "down"?', '`"down"` (below).', False),
        # a lookup: the answer printed by a code cell above the exercise
        ("The table:", "share 0.731", "What share?", "**0.731** (the table).", True),
        ("The table:", "share 0.73", "What share?", "**0.731** (the table).", False),
        # True / False is too generic to look for
        ("It is true.", "True", "Same?", "`True`: the same.", False),
    ],
)
def test_the_check_finds_an_answer_written_or_printed_above_its_exercise(
    tmp_path, prose, printed, question, answer, caught
):
    path = _lesson(
        tmp_path,
        [("markdown", "## 1. A section", ""), ("markdown", prose, ""), ("code", "x", printed)]
        + _exercise(question, answer),
    )
    (ex,) = exercises(path)
    assert bool(giveaways(ex) or lookups(ex)) == caught, (giveaways(ex), lookups(ex))


# -- the teacher's pack: quiz banks and marking guides ------------------------------------


def _quiz_banks() -> dict[str, list[str]]:
    text = (TEACHER / "quizzes.md").read_text(encoding="utf-8")
    banks = {}
    for part in re.split(r"^## ", text, flags=re.M)[1:]:
        title = part.splitlines()[0]
        banks[title] = re.split(r"^(?=\*\*\d\.\d+\*\* )", part, flags=re.M)[1:]
    return banks


def test_each_quiz_bank_has_twelve_questions_with_an_answer_and_what_each_tests():
    banks = _quiz_banks()
    assert [t.split(":")[0] for t in banks] == ["Quiz 1", "Quiz 2"], list(banks)
    for title, questions in banks.items():
        assert len(questions) >= 12, (title, len(questions))
        for q in questions:
            number = q.split("**")[1]
            asked = q.split("*Answer.*")[0]
            assert "?" in asked or "Estimate" in asked, f"{title} {number}: no question"
            assert re.search(r"\*Answer\.\* \S", q), f"{title} {number}: no answer"
            assert re.search(r"\*Tests:\* \S", q), f"{title} {number}: does not say what it tests"
            assert re.search(r"\*Lessons:\* `\d\d_", q), f"{title} {number}: no lesson"
    # every question draws on a lesson of the quiz's weeks (in the syllabus), and the bank
    # covers at least three quarters of those lessons
    syllabus = (TEACHER / "syllabus.md").read_text(encoding="utf-8")
    for title, questions in banks.items():
        weeks = re.search(r"weeks? (\d)-(\d)", title)
        assert weeks, title
        taught = set()
        for week in range(int(weeks[1]), int(weeks[2]) + 1):
            block = syllabus.split(f"### Week {week}:")[1].split("### Week")[0]
            taught |= set(re.findall(r"\| `(\d\d)_", block))
        covered = set()
        for q in questions:
            lessons = set(re.findall(r"`(\d\d)_", q.split("*Lessons:*")[1]))
            assert lessons & taught, (title, q.split("**")[1], lessons)
            covered |= lessons & taught
        assert len(covered) * 4 >= len(taught) * 3, (title, taught - covered)


def test_no_marking_guide_stops_mid_sentence():
    text = (TEACHER / "solutions.md").read_text(encoding="utf-8")
    entries = re.split(r"^### ", text, flags=re.M)[1:]
    assert len(entries) >= len(EVERY)
    for entry in entries:
        name = entry.splitlines()[0]
        guide = re.search(r"\*\*Marking \((\d) points\)\.\*\*(.*?)(?:\n\n|\Z)", entry, re.S)
        assert guide, f"solutions.md, {name}: no marking guide"
        assert guide[1] == "3", f"{name}: every exercise is worth 3 points, not {guide[1]}"
        body = " ".join(guide[2].split())
        assert re.search(r"[.!?)]$", body), f"{name}: the marking guide stops mid-sentence"


def _solutions() -> dict[str, str]:
    """solutions.md's answer paragraph per exercise, by "<lesson>, exercise <n>"."""
    text = (TEACHER / "solutions.md").read_text(encoding="utf-8")
    found = {}
    for entry in re.split(r"^### ", text, flags=re.M)[1:]:
        answer = re.search(r"\*\*Answer\.\*\*(.*?)\n\n\*\*Marking", entry, re.S)
        found[entry.splitlines()[0].strip()] = answer[1].strip() if answer else ""
    return found


def _verdict(ex: Exercise) -> tuple[str, ...]:
    """The answer's key values, or its first word where it has none (True, False...)."""
    key, _ = key_values(ex)
    if key:
        return tuple(sorted(v.text.lower().strip() for v in key))
    return (re.match(r"\W*(\w+)", ex.answer)[1].lower(),)


@pytest.mark.parametrize("ex", EVERY, ids=[_id(ex) for ex in EVERY])
def test_solutions_md_gives_the_notebooks_answer(ex):
    # the teacher's pack repeats every answer: the day an exercise changes, its entry must
    name = f"{ex.lesson.stem}, exercise {ex.number}"
    answer = _solutions().get(name)
    assert answer, f"notebooks/teacher/solutions.md has no answer for {name}"
    entry = Exercise(ex.lesson, ex.number, ex.cell, ex.question, answer, ex.window)
    assert _verdict(entry) == _verdict(ex), (
        f"{name}: solutions.md answers {_verdict(entry)}, the notebook {_verdict(ex)}"
    )
