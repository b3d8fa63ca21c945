"""The same call gives the same bits in every process on one machine, whatever else the
machine is doing (issue 44): the weight form and the quantized products' activations are
chosen from what the machine is, never timed (genlab/runtime/matmul.py, choose_form)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
CHILD = r"""
import json, sys, torch, genlab
lm = genlab.load("demo")
lm.cache.max_bytes = 0
prompts = ["The capital of France is", "My favourite word is", "def fib(n):"]
with torch.inference_mode():
    logits = [lm.model(lm.encode(p)[0]).logits for p in prompts]
torch.save(logits, sys.argv[1])
text = lm.generate(prompts[0], do_sample=True, seed=3, max_new_tokens=16).text
print(json.dumps({"text": text, "numerics": lm.info.numerics}))
"""
BUSY = "import time\nend = time.time() + 600\nwhile time.time() < end: pass\n"


def child(path: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("GENLAB_WEIGHT_FORM",)}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # loads the demo, in a child process
def test_two_processes_one_beside_busy_neighbours_give_equal_bits(tmp_path):
    quiet = child(tmp_path / "quiet.pt")
    competitors = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(3)]
    try:
        busy = child(tmp_path / "busy.pt")
    finally:
        for p in competitors:
            p.kill()
            p.wait()
    assert quiet == busy  # the sampled text and the numerics line
    assert "packed form" in quiet["numerics"] or "split form" in quiet["numerics"]
    a, b = torch.load(tmp_path / "quiet.pt"), torch.load(tmp_path / "busy.pt")
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
