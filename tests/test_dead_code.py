"""No dead code in genlab: vulture, at 60% confidence (its lowest, where unused functions,
classes, methods, attributes and variables are reported), finds nothing but the names
below, each read by something vulture cannot see. Code counts as used when genlab, the
tests, the scripts or the benchmarks use it (the notebooks use only what those do)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

# vulture comes with the test extra, as the references do: make wheel-check's runtime-only
# venv deselects `reference` tests (-m "not reference")
pytestmark = pytest.mark.reference

ROOT = Path(__file__).resolve().parents[1]
CONFIDENCE = 60

#: name -> who reads it. Vulture matches names only, so a name here hides nothing else of
#: the same name that is used; every name must still be reported (no stale entries).
READ_UNSEEN = {
    # read by a library through a protocol
    "tags": "jinja2 reads an Extension's tags",
    "_render_body": "jinja2 calls it by the name given to call_method",
    "_matmul_shape": "torch.library calls the registered fake for shapes",
    "_close_all": "atexit calls it at the interpreter's exit",
    "post_processor": "the tokenizers backend reads it when encoding",
    "_vocab_mask_cache": "read through self.__dict__.get (a processor built by copy lacks it)",
    "handle_starttag": "html.parser.HTMLParser calls it (widgets/base.py's _ActiveContent)",
    "handle_endtag": "html.parser.HTMLParser calls it (widgets/base.py's _ActiveContent)",
    "handle_data": "html.parser.HTMLParser calls it (widgets/base.py's _ActiveContent)",
    # the reference's public names, which transformers users read
    "extra_output_flags": "transformers' GenerationConfig.extra_output_flags",
    "transformers_version": "written to generation_config.json, as the reference does",
    "_original_object_hash": "the reference's metadata field (METADATA_FIELDS)",
    "_from_model_config": "the reference's metadata field, written to JSON from __dict__",
    "encoder_attentions": "a field of the reference's generate outputs",
    "encoder_hidden_states": "a field of the reference's generate outputs",
    "set_begin_index": "the reference's SuppressTokensAtBeginLogitsProcessor method",
    "encoder_repetition_penalty": "the reference processor's attribute",
    "table_size": "the reference watermark processor's attribute",
    "fixed_table": "the reference watermark processor's attribute",
    "sep_token_id": "a tokenizer's special-token id, as in transformers",
    "cls_token_id": "a tokenizer's special-token id, as in transformers",
    "mask_token_id": "a tokenizer's special-token id, as in transformers",
    # values of public enums (a step record's source compares by value)
    "SEARCH": "CandidateSource value",
    "UNPENALIZED": "CandidateSource value",
    "ASSISTANT": "DraftSource value",
    "PROMPT_LOOKUP": "DraftSource value",
}

FINDING = re.compile(r"^(?P<where>genlab/\S+): unused \w+ '(?P<name>[^']+)' \((?P<conf>\d+)%")


def _findings() -> list[tuple[str, str]]:
    paths = ["genlab", "tests", "scripts", "benchmarks", "conftest.py"]
    done = subprocess.run(
        [sys.executable, "-m", "vulture", *paths, f"--min-confidence={CONFIDENCE}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode in (0, 3), done.stderr  # 3: dead code found
    lines = [line for line in done.stdout.splitlines() if line.startswith("genlab/")]
    found = [FINDING.match(line) for line in lines]
    assert all(found), [line for line, m in zip(lines, found, strict=True) if not m]
    return [(m["where"], m["name"]) for m in found]


def test_vulture_finds_no_dead_code_in_genlab():
    findings = _findings()
    dead = [f"{where}: {name}" for where, name in findings if name not in READ_UNSEEN]
    assert not dead, "dead code (delete it, or add its name to READ_UNSEEN with who reads it)"
    stale = set(READ_UNSEEN) - {name for _, name in findings}
    assert not stale, f"no longer reported, drop from READ_UNSEEN: {sorted(stale)}"


def test_the_check_sees_dead_code(tmp_path):
    """The check is live: vulture reports an unused function at this confidence."""
    (tmp_path / "dead.py").write_text("def never_called():\n    return 1\n")
    done = subprocess.run(
        [sys.executable, "-m", "vulture", str(tmp_path), f"--min-confidence={CONFIDENCE}"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert "unused function 'never_called'" in done.stdout
