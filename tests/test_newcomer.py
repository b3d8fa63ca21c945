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


# ---- the first hour: make lab's URL and the set-up texts (issue 33, section 6) -------------

#: the first lesson, opened in genlab's workspace (left panel folded: issue 50)
LESSON_PATH = "/lab/workspaces/genlab/tree/notebooks/01_quickstart.ipynb"


def _make_lab_command() -> list[str]:
    """The command `make lab LAB_ARGS=--no-browser` runs (read with make -n: nothing runs)."""
    import shlex
    import shutil
    import subprocess

    if shutil.which("make") is None:
        pytest.fail("make is needed: the README's set-up commands are make targets")
    out = subprocess.run(
        ["make", "-n", "--no-print-directory", "lab", "LAB_ARGS=--no-browser"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "/bin/jupyter lab workspaces import" in out, out  # the workspace, before the server
    lines = [ln for ln in out.splitlines() if "/bin/jupyter lab --" in ln]  # the server
    assert len(lines) == 1, out
    return shlex.split(lines[0])


def test_make_lab_prints_the_lessons_own_url(tmp_path):
    """With --no-browser, JupyterLab prints a URL: it must open the first lesson, not a
    Launcher. The server is started for real (on a free port) and its log is read."""
    import os
    import subprocess
    import time
    import urllib.parse

    pytest.importorskip("jupyterlab")  # not in make wheel-check's runtime-only venv
    cmd = _make_lab_command()
    assert "--no-browser" in cmd
    files = [a for a in cmd if a.endswith(".ipynb") and not a.startswith("-")]
    assert not files, f"a file argument {files} makes its folder the server's root"
    cmd = [sys.executable, "-m", "jupyter", *cmd[1:], "--ServerApp.port=0"]
    env = dict(os.environ)
    for var, sub in [("JUPYTER_CONFIG_DIR", "cfg"), ("JUPYTER_DATA_DIR", "data"),
                     ("JUPYTER_RUNTIME_DIR", "rt"), ("IPYTHONDIR", "ipy")]:  # fmt: skip
        env[var] = str(tmp_path / sub)
    log = tmp_path / "lab.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, env=env)
    try:
        url = None
        deadline = time.monotonic() + 90
        while url is None and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.5)
            found = re.findall(r"http://(?:localhost|127\.0\.0\.1):\d+/\S*", log.read_text())
            url = found[0] if found else None
        assert url is not None, log.read_text()[-3000:]
        parts = urllib.parse.urlsplit(url)
        assert parts.path == LESSON_PATH, url
        assert "token=" in parts.query, url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_the_set_up_texts_name_the_lessons_and_commands_that_exist():
    make = (ROOT / "Makefile").read_text(encoding="utf-8")
    fresh = (ROOT / "scripts" / "fresh_venv_check.sh").read_text(encoding="utf-8")
    binder = (ROOT / "docs" / "binder.md").read_text(encoding="utf-8")
    # the README has three set-up commands; the Makefile's header says so
    header = make.splitlines()[0]
    assert "three set-up commands" in header
    assert all(f"make {t}" in header for t in ("demo", "lab", "test")), header
    # the notebooks make help and the fresh-venv check name are the ones the script runs
    ran = re.search(r"NB=\$\(ls (.*)\)", fresh).group(1).split()
    numbers = sorted(re.match(r"notebooks/(\d+)_", nb).group(1) for nb in ran)
    named = f"notebooks {numbers[0]} and {numbers[1]}"
    wheel_help = next(ln for ln in make.splitlines() if ln.startswith("## wheel-check:"))
    assert named in wheel_help, wheel_help
    assert re.findall(r"notebooks \d+ and \d+", fresh) == [named, named]
    for nb in ran:
        assert list(ROOT.glob(nb)), f"{nb} does not exist"
    # every lesson docs/binder.md names exists
    for name in re.findall(r"`(\d\d[a-z]?_\w+?)(?:\.ipynb)?`", binder):
        assert (ROOT / "notebooks" / f"{name}.ipynb").exists(), f"docs/binder.md names {name}"


def test_the_test_extra_lists_each_package_once():
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    for name, deps in extras["project"]["optional-dependencies"].items():
        names = [re.split(r"[<>=!~\[ ;]", d, maxsplit=1)[0].lower() for d in deps]
        assert len(names) == len(set(names)), f"[{name}] lists {names}"
