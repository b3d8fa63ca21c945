"""Benchmark: what the LM's forward cache saves when a person explores (not a test).

Run from the repository root::

    .venv/bin/python benchmarks/bench_cache.py [--moves 11] [--repeats 3]

Everything runs in one process, on the demo, each figure beside its baseline:

1. **The same continuation asked again**: a 20-token greedy generation with the cache
   cleared (cold) against the same call answered from the cache. Target: <= 5 %.
2. **Slider moves as the Playground makes them**: a chat prompt, 20 sampled tokens with a
   seed, and a sequence of ``--moves`` setting changes that mix temperature, top_p,
   repetition_penalty and max_new_tokens, going back and forth as a hand on a slider does.
   Each re-run's time is divided by a cold 20-token generation of the same settings measured
   right after it (cache cleared); the median ratio is the figure. Target: <= 0.35.
   The cache's hits and misses over the moves are printed.

Results are checked too: every cached answer must equal the cold one (torch.equal on the
tokens), or the benchmark stops.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import genlab

PROMPT = "Write one sentence about the sea."
BASE = dict(chat=True, do_sample=True, temperature=0.7, top_p=0.9, max_new_tokens=20, seed=0)
MOVES = [
    {"temperature": 0.8},
    {"temperature": 0.7},
    {"top_p": 0.95},
    {"top_p": 0.9},
    {"max_new_tokens": 24},
    {"max_new_tokens": 20},
    {"repetition_penalty": 1.2},
    {"repetition_penalty": 1.0},
    {"temperature": 0.75},
    {"temperature": 0.7},
    {"max_new_tokens": 16},
]


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def same_again(lm, repeats):
    cold, warm = [], []
    for _ in range(repeats):
        lm.cache_clear()
        t, a = timed(lambda: lm.generate(PROMPT, chat=True, max_new_tokens=20, min_new_tokens=20))
        cold.append(t)
        t, b = timed(lambda: lm.generate(PROMPT, chat=True, max_new_tokens=20, min_new_tokens=20))
        warm.append(t)
        assert torch.equal(a.sequences, b.sequences)
    c, w = statistics.median(cold), statistics.median(warm)
    print("1. the same 20-token continuation asked again")
    print(f"   cold {c * 1e3:8.1f} ms   from the cache {w * 1e3:8.1f} ms   ratio {w / c:.3f}")


def slider_moves(lm, n_moves):
    settings = dict(BASE)
    lm.cache_clear()
    lm.generate(PROMPT, **settings)  # the panel's first result
    start = lm.cache_info()
    ratios = []
    print(f"\n2. {n_moves} slider moves (chat prompt, sampled, seed 0)")
    print(f"   {'move':28}{'re-run ms':>10}{'cold ms':>10}{'ratio':>8}{'hits':>6}{'misses':>7}")
    for i in range(n_moves):
        move = MOVES[i % len(MOVES)]
        settings.update(move)
        before = lm.cache_info()
        t_warm, warm = timed(lambda: lm.generate(PROMPT, **settings))
        after = lm.cache_info()
        fresh = genlab.LM(lm.model, lm.tokenizer)  # the same model, an empty cache
        t_cold, cold = timed(lambda f=fresh: f.generate(PROMPT, **settings))
        assert torch.equal(warm.sequences, cold.sequences), move
        ratios.append(t_warm / t_cold)
        name = ", ".join(f"{k}={v}" for k, v in move.items())
        print(
            f"   {name:28}{t_warm * 1e3:>10.0f}{t_cold * 1e3:>10.0f}{ratios[-1]:>8.2f}"
            f"{after.hits - before.hits:>6}{after.misses - before.misses:>7}"
        )
    end = lm.cache_info()
    hits, misses = end.hits - start.hits, end.misses - start.misses
    print(
        f"   median ratio {statistics.median(ratios):.2f} over {n_moves} moves; forward passes "
        f"served {hits} of {hits + misses} ({hits / max(1, hits + misses):.0%}); cache "
        f"{end.bytes / 2**20:.1f} MiB of {end.max_bytes / 2**20:.0f}"
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--moves", type=int, default=11)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    lm = genlab.load("demo")
    print(f"demo, {torch.get_num_threads()} threads, weights: {lm.model.form_choice.form}\n")
    same_again(lm, args.repeats)
    slider_moves(lm, args.moves)


if __name__ == "__main__":
    main()
