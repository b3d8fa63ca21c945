"""Benchmark: what a person exploring feels, on the demo model (not a test).

Run from the repository root::

    .venv/bin/python benchmarks/bench_live.py [--changes 20]

Everything is measured in one process, each figure beside its baseline:

1. **A change of settings** (temperature, top-k, seed, max_new_tokens, cycling) on the same
   chat prompt, as the Playground re-runs it: time to the first new token and to a complete
   20-token sampled result, p50 / p90 over ``--changes`` changes, with the LM's forward
   cache (``lm.cache``: passes an earlier run computed are reused) and without it (cleared
   before each change).
2. **Prefill on a re-run**: the first step's time of a re-run with and without the kept
   prompt pass, and for a prompt edited near its end (computed again: a cold model computes
   a prompt in one pass, so the cache never splits one).
3. **Many samples**: tokens/s of ``num_return_sequences=16`` and of 16 prompts in a batch
   against one sequence (greedy and sampling), whole generations (prompt included) and
   decoding steps alone (top-k and top-p sampling).
4. **Beam search**: the time of a 4-beam step against a greedy step, for genlab and for
   transformers on the same weights.

Timings on a shared machine are noisy: each figure is a median (or p50/p90) of interleaved
repeats; compare ratios, not absolute times across runs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import genlab  # noqa: E402

PROMPT = "Write a short story about a dragon who learns to bake bread."


def pct(values, q):
    values = sorted(values)
    i = min(len(values) - 1, max(0, round(q / 100 * (len(values) - 1))))
    return values[i]


def settings_cycle(n):
    temps, ks = [0.7, 0.9, 1.1, 1.3], [20, 40, 0, 50]
    for i in range(n):
        yield dict(
            do_sample=True,
            temperature=temps[i % 4],
            top_k=ks[(i // 2) % 4],
            max_new_tokens=20 + (i % 3),
            min_new_tokens=20,
            seed=i,
        )


def one_change(lm, cfg, reuse: bool):
    """(time to first token, time to 20 tokens) of one re-run as the Playground does it."""
    if not reuse:
        lm.cache_clear()
    t0 = time.perf_counter()
    run = lm.start(PROMPT, chat=True, **cfg)
    run.step()
    first = time.perf_counter() - t0
    while run.step_index < 20 and not run.finished:
        run.step()
    return first, time.perf_counter() - t0


def bench_changes(lm, n):
    rows = {True: ([], []), False: ([], [])}
    one_change(lm, next(settings_cycle(1)), True)  # warm-up
    for i, cfg in enumerate(settings_cycle(n)):
        for reuse in (i % 2 == 0, i % 2 == 1):  # interleaved, alternating order
            first, full = one_change(lm, cfg, reuse)
            rows[reuse][0].append(first)
            rows[reuse][1].append(full)
    print(f"\n1. a settings change -> new result (chat prompt, 20 sampled tokens, {n} changes)")
    print(f"{'':28}{'first token p50/p90':>24}{'20 tokens p50/p90':>24}")
    for reuse in (False, True):
        first, full = rows[reuse]
        name = "prompt reused" if reuse else "prompt recomputed"
        print(
            f"{name:28}{pct(first, 50) * 1e3:>11.0f} / {pct(first, 90) * 1e3:<6.0f} ms"
            f"{pct(full, 50) * 1e3:>11.0f} / {pct(full, 90) * 1e3:<6.0f} ms"
        )
    return rows


def bench_prefill(lm, repeats=7):
    ids, mask = lm.encode(PROMPT, chat=True)
    edited, _ = lm.encode(PROMPT.replace("bread.", "cakes."), chat=True)

    def first_step(prompt_ids, reuse):
        if not reuse:
            lm.cache_clear()
        run = lm.start(prompt_ids, max_new_tokens=2)
        t0 = time.perf_counter()
        run.step()
        return time.perf_counter() - t0

    out = {"cold": [], "re-run": [], "edited end": []}
    for _ in range(repeats):
        out["cold"].append(first_step(ids, False))
        lm.start(ids, max_new_tokens=1).run()  # remember the prompt
        out["re-run"].append(first_step(ids, True))
        lm.start(ids, max_new_tokens=1).run()
        out["edited end"].append(first_step(edited, True))
    print(f"\n2. the first step (prompt of {ids.shape[1]} tokens)")
    for name, values in out.items():
        print(f"{name:28}{statistics.median(values) * 1e3:>8.1f} ms")


def tokens_per_second(fn, new_tokens, rows):
    t0 = time.perf_counter()
    fn()
    return rows * new_tokens / (time.perf_counter() - t0)


def bench_batches(lm, new_tokens=24, repeats=3):
    ids, mask = lm.encode("Once upon a time", chat=False)
    batch_ids, batch_mask = lm.encode(
        [f"Story number {i}: once upon a time" for i in range(16)], chat=False
    )
    common = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens)
    cases = {
        "greedy, 1 row": (lambda: genlab.generate(lm.model, ids, attention_mask=mask, **common), 1),
        "greedy, 16 prompts": (
            lambda: genlab.generate(lm.model, batch_ids, attention_mask=batch_mask, **common),
            16,
        ),
        "sampling, 1 row": (
            lambda: genlab.generate(
                lm.model, ids, attention_mask=mask, do_sample=True, top_k=50, **common
            ),
            1,
        ),
        "sampling, 16 returns": (
            lambda: genlab.generate(
                lm.model,
                ids,
                attention_mask=mask,
                do_sample=True,
                top_k=50,
                num_return_sequences=16,
                **common,
            ),
            16,
        ),
    }
    rates = {name: [] for name in cases}
    for _ in range(repeats):
        for name, (fn, rows) in cases.items():
            rates[name].append(tokens_per_second(fn, new_tokens, rows))
    med = {k: statistics.median(v) for k, v in rates.items()}
    print(f"\n3. many rows ({new_tokens} new tokens each)")
    for name, value in med.items():
        base = med["greedy, 1 row"] if name.startswith("greedy") else med["sampling, 1 row"]
        print(f"{name:28}{value:>8.1f} tok/s   x{value / base:.1f} of one row")


def step_time(lm, prompt, steps=24, **settings):
    """Median seconds of one decoding step (after the prompt's) of ``lm.start(prompt)``."""
    run = lm.start(prompt, max_new_tokens=steps + 1, min_new_tokens=steps + 1, **settings)
    run.step()  # the prompt
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        run.step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_steps(lm, repeats=5):
    """Decoding steps alone (no prompt): the rate of new tokens with 16 rows against one."""
    ids, _ = lm.encode("Once upon a time", chat=False)
    batch = [f"Story number {i}: once upon a time" for i in range(16)]
    top_k, top_p = dict(do_sample=True, top_k=50), dict(do_sample=True, top_p=0.9)
    cases = {
        "greedy, 1 row": (ids, {}, 1),
        "greedy, 16 prompts": (batch, {}, 16),
        "top-k 50, 1 row": (ids, top_k, 1),
        "top-k 50, 16 returns": (ids, dict(top_k, num_return_sequences=16), 16),
        "top-p 0.9, 1 row": (ids, top_p, 1),
        "top-p 0.9, 16 returns": (ids, dict(top_p, num_return_sequences=16), 16),
    }
    times = {name: [] for name in cases}
    for _ in range(repeats):
        for name, (prompt, settings, _rows) in cases.items():
            times[name].append(step_time(lm, prompt, **settings))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"\n3b. decoding steps alone (median step of 24, median of {repeats} runs)")
    for name, (_p, _s, rows) in cases.items():
        one = med[name.split(",")[0] + ", 1 row"]
        print(
            f"{name:28}{med[name] * 1e3:>8.1f} ms/step  {rows / med[name]:>7.1f} tok/s"
            f"   x{rows * one / med[name]:.1f} of one row"
        )


def bench_beams(lm, new_tokens=24, repeats=3):
    ids, mask = lm.encode("Once upon a time", chat=False)
    common = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens)
    out = {}
    hf = _transformers_model()
    for name, model in (("genlab", lm.model), ("transformers", hf)):
        if model is None:
            continue
        times = {1: [], 4: []}
        for _ in range(repeats):
            for beams in (1, 4):
                t0 = time.perf_counter()
                if name == "genlab":
                    genlab.generate(model, ids, attention_mask=mask, num_beams=beams, **common)
                else:
                    with torch.no_grad():
                        model.generate(ids, attention_mask=mask, num_beams=beams, **common)
                times[beams].append(time.perf_counter() - t0)
        out[name] = statistics.median(times[4]) / statistics.median(times[1])
    print(f"\n4. a 4-beam generation against greedy ({new_tokens} tokens)")
    for name, ratio in out.items():
        print(f"{name:28}{ratio:>8.2f}x")


def _transformers_model():
    """The demo weights in a transformers LlamaForCausalLM (None without transformers)."""
    try:
        from bench_generate import demo_model
    except ImportError:
        return None
    return demo_model()[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--changes", type=int, default=20)
    args = ap.parse_args()
    torch.set_num_threads(2)
    lm = genlab.load("demo")
    print(f"demo model; torch {torch.__version__}, {torch.get_num_threads()} threads")
    with torch.no_grad():
        bench_changes(lm, args.changes)
        bench_prefill(lm)
        bench_batches(lm)
        bench_steps(lm)
        bench_beams(lm)


if __name__ == "__main__":
    main()
