"""Benchmark: what the forward cache's weights check costs (not a test).

Run from the repository root::

    .venv/bin/python benchmarks/bench_fingerprint.py [--rounds 7] [--quantization int4]

The forward cache reads the model's structure and content once per call into a run
(genlab/runtime/forward_cache.py, "Never stale"). This times, in one process and alternating, a
cold 20-token greedy run of the demo (no forward cache), the same run with the cache on
but every pass missing (each run's prompt is new), the structure key alone and the full
fingerprint, and prints medians and the fingerprint's share of the cold run.
"""

from __future__ import annotations

import argparse
import statistics
import time

import genlab
from genlab.runtime.forward_cache import weights_fingerprint, weights_key
from genlab.runtime.matmul import machine_summary


def seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--quantization", default=None)
    args = parser.parse_args()
    lm = genlab.load("demo", quantization=args.quantization)
    print(machine_summary(), "|", lm.info.numerics)
    cold = genlab.LM(lm.model, lm.tokenizer)
    cold.cache.max_bytes = 0
    prompt = "Write a short story about a robot who learns to paint."
    kw = dict(max_new_tokens=20, min_new_tokens=20)
    cold.generate(prompt, **kw)  # warm-up
    times = {"cold run": [], "cached run, all misses": [], "structure": [], "fingerprint": []}
    for i in range(args.rounds):
        times["cold run"].append(seconds(lambda: cold.generate(prompt, **kw)))
        new = f"{prompt} ({i})"  # a prompt the cache has not seen: every pass a miss
        times["cached run, all misses"].append(seconds(lambda p=new: lm.generate(p, **kw)))
        times["structure"].append(seconds(lambda: weights_key(lm.model)))
        times["fingerprint"].append(seconds(lambda: weights_fingerprint(lm.model)))
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    for name, ms in med.items():
        print(f"{name:>24}: {ms:8.1f} ms")
    check = med["structure"] + med["fingerprint"]
    print(f"weights check / cold 20-token run: {check / med['cold run']:.1%}")
    print(f"cached (all misses) / cold: {med['cached run, all misses'] / med['cold run']:.2f}x")


if __name__ == "__main__":
    main()
