"""CONTRIBUTING.md is where `make help` sends a contributor, and it covers what they need:
every make target, the commit rules, notebooks' re-execution and the browser check."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "CONTRIBUTING.md"


def _make_help() -> str:
    if shutil.which("make") is None:
        pytest.fail("make is needed: the contributor's commands are make targets")
    return subprocess.run(
        ["make", "--no-print-directory", "help"], cwd=ROOT, capture_output=True, text=True,
        check=True,
    ).stdout  # fmt: skip


def test_make_help_points_to_the_guide_which_covers_every_target():
    shown = _make_help()
    assert "CONTRIBUTING.md" in shown and GUIDE.exists()
    targets = re.findall(r"^  make ([a-z-]+)", shown, flags=re.M)
    assert "test" in targets and "browser" in targets, shown
    guide = GUIDE.read_text(encoding="utf-8")
    missing = [t for t in targets if t != "help" and f"`make {t}`" not in guide]
    assert not missing, f"CONTRIBUTING.md does not say when to run: {missing}"


def test_the_guide_states_the_commit_rules_and_the_checks():
    guide = GUIDE.read_text(encoding="utf-8")
    for needed in ("at most 72 characters", "ruff format", "ruff check", "Lint:",
                   "scripts/execute_notebooks.py", "nbval_sanitize.cfg",
                   "tests/browser/run.sh", "go red"):  # fmt: skip
        assert needed in guide, needed
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "](CONTRIBUTING.md)" in readme
