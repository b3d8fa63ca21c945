"""Follow the README as a newcomer would: run its Quickstart code exactly as written and
compare what it prints with what the README says it prints.

    python scripts/newcomer_check.py [README.md]     # with the Python of the venv to check

Each ```python block of the README's "## Quickstart" section runs as it stands, all of them
in one interpreter (as one script, from a scratch directory outside the checkout); the
```text block that follows a python block is what that block must print. Lines are compared
exactly (trailing spaces aside). make wheel-check runs this in its fresh venv, where genlab
comes from the built wheel (scripts/fresh_venv_check.sh).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.M | re.S)


def quickstart(readme: str) -> list[tuple[str, str]]:
    """The (code, expected output) pairs of the README's Quickstart section.

    >>> text = "## Quickstart\\n```python\\nprint(1)\\n```\\nIt prints\\n```text\\n1\\n```\\n"
    >>> quickstart(text)
    [('print(1)\\n', '1\\n')]
    """
    m = re.search(r"^## Quickstart\n(.*?)(?=^## |\Z)", readme, re.M | re.S)
    if m is None:
        raise SystemExit("README.md has no '## Quickstart' section")
    pairs: list[tuple[str, str]] = []
    for kind, body in FENCE.findall(m.group(1)):
        if kind == "python":
            pairs.append((body, ""))
        elif kind == "text" and pairs and not pairs[-1][1]:
            pairs[-1] = (pairs[-1][0], body)
    if not pairs:
        raise SystemExit("the README's Quickstart has no ```python block")
    for code, out in pairs:
        if not out:
            raise SystemExit(f"no ```text block says what this prints:\n{code}")
    return pairs


def lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.rstrip("\n").split("\n")]


def main(path: str = "README.md") -> int:
    readme = Path(path).read_text(encoding="utf-8")
    pairs = quickstart(readme)
    failed = 0
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.pop("PYTHONPATH", None)  # genlab as installed, never the checkout
    with tempfile.TemporaryDirectory() as scratch:
        # one interpreter for all blocks, as a newcomer pastes them one after the other; a
        # marker line between blocks splits the output per block
        marker = "----newcomer-check-block----"
        script = f"\nprint({marker!r})\n".join(code for code, _ in pairs)
        proc = subprocess.run(
            [sys.executable, "-c", script], cwd=scratch, env=env, capture_output=True, text=True
        )
    if proc.returncode != 0:
        print(proc.stdout + proc.stderr)
        print(f"newcomer check: the Quickstart failed (exit {proc.returncode})")
        return 1
    got = proc.stdout.split(marker + "\n")
    for i, ((_code, want), out) in enumerate(zip(pairs, got, strict=True), 1):
        if lines(out) != lines(want):
            failed += 1
            print(f"Quickstart block {i}: the README says it prints\n{want}but it printed\n{out}")
    if proc.stderr.strip():
        print(f"(stderr of the Quickstart)\n{proc.stderr}")
    if failed:
        print(f"newcomer check: {failed} of {len(pairs)} Quickstart block(s) differ from README")
        return 1
    print(f"newcomer check: the README's Quickstart ({len(pairs)} block(s)) prints what it says")
    return 0


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line: ``[README.md]``; ``--help`` prints the usage."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument(
        "readme", nargs="?", default="README.md", help="the README to check (README.md)"
    )
    args = parser.parse_args(argv)
    if not Path(args.readme).is_file():
        parser.error(f"{args.readme}: no such file; give the path of the README to check")
    return args


if __name__ == "__main__":
    sys.exit(main(parse_args(sys.argv[1:]).readme))
