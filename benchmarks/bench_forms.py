"""Benchmark: the packed and the split weight form on the demo, side by side (not a test).

Run from the repository root::

    .venv/bin/python benchmarks/bench_forms.py [--rounds 5]

Loads the demo twice in one process, once with ``GENLAB_WEIGHT_FORM=packed`` and once with
``split``, and times, in alternating order each round, a one-row greedy decode (32 tokens)
and a 16-row sampled decode (16 tokens each), with the forward cache off. Prints tokens per
second for each form and the ratio packed / split, plus the largest logit difference
between the forms on one prompt (their products sum in different orders). Also prints the
CPU flags and torch's CPU capability, which decide the form genlab uses by default
(:func:`genlab.runtime.matmul.choose_form`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

import genlab
from genlab.runtime.matmul import machine_summary

PROMPT = "Write a short story about a robot who learns to paint."


def load(form: str):
    os.environ["GENLAB_WEIGHT_FORM"] = form
    try:
        lm = genlab.load("demo")
    finally:
        del os.environ["GENLAB_WEIGHT_FORM"]
    lm.cache.max_bytes = 0
    return lm


def rate(lm, rows: int, tokens: int) -> float:
    kw = dict(do_sample=True, num_return_sequences=rows, seed=0) if rows > 1 else {}
    start = time.perf_counter()
    lm.generate(PROMPT, max_new_tokens=tokens, min_new_tokens=tokens, **kw)
    return rows * tokens / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(machine_summary(), f"threads={torch.get_num_threads()}")
    lms = {form: load(form) for form in ("packed", "split")}
    for lm in lms.values():
        rate(lm, 1, 4)  # warm-up
        rate(lm, 16, 2)
    rates = {(form, rows): [] for form in lms for rows in (1, 16)}
    for r in range(args.rounds):
        order = list(lms) if r % 2 == 0 else list(reversed(lms))
        for rows, tokens in ((1, 32), (16, 16)):
            for form in order:
                rates[(form, rows)].append(rate(lms[form], rows, tokens))
    for rows in (1, 16):
        p = statistics.median(rates[("packed", rows)])
        s = statistics.median(rates[("split", rows)])
        print(
            f"{rows:>2} row(s): packed {p:7.1f} tok/s, split {s:7.1f} tok/s, "
            f"packed/split {p / s:.2f}"
        )
    ids = lms["packed"].tokenizer(PROMPT, return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        a = lms["packed"].model(ids).logits
        b = lms["split"].model(ids).logits
    print(f"largest logit difference between the forms: {float((a - b).abs().max()):.2e}")


if __name__ == "__main__":
    main()
