"""Benchmark: what the hook points inside the layers cost (not a test).

Run from the repository root::

    .venv/bin/python benchmarks/bench_taps.py [--tokens 48] [--rounds 5]

Greedy decoding on the demo model (one row, ``genlab.start`` on the decoder itself, so the
LM's forward cache is out of the way), timed per token in three settings that alternate
within each round, so that the machine's own load spreads over all of them:

* ``no hook``: nothing inside the model listens (the decoders then test ``taps is None``
  once per pass and once per point of each layer);
* ``observer``: a hook at ``blocks.15.hook_resid_post`` that returns None;
* ``steer``: ``genlab.steer`` at the same point (a vector added to every position).

Printed: the median CPU time of this process per token (one thread: on a shared machine
its wall time mostly measures the other users) and the median wall time, for each.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import genlab


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    lm = genlab.load("demo")
    ids = lm.encode("Once upon a time, in a small village by the sea,")[0]
    point = "blocks.15.hook_resid_post"
    vector = torch.zeros(lm.info.hidden_size)
    settings = {
        "no hook": {},
        "observer": {point: lambda x, step: None},
        "steer": {point: genlab.steer(vector, 1.0)},
    }
    n = args.tokens

    def one(hooks) -> tuple[float, float]:
        run = genlab.start(lm.model, ids, max_new_tokens=n, min_new_tokens=n)
        with run.hooks(hooks):
            cpu, wall = time.process_time(), time.perf_counter()
            run.run()
            return (time.process_time() - cpu) / n, (time.perf_counter() - wall) / n

    for hooks in settings.values():  # warm up
        one(hooks)
    times: dict[str, list] = {name: [] for name in settings}
    for _ in range(args.rounds):
        for name, hooks in settings.items():
            times[name].append(one(hooks))
    print("| setting | CPU ms / token | wall ms / token |")
    print("|---|---|---|")
    for name, got in times.items():
        cpu = statistics.median(c for c, _ in got) * 1e3
        wall = statistics.median(w for _, w in got) * 1e3
        print(f"| {name} | {cpu:.1f} | {wall:.1f} |")


if __name__ == "__main__":
    main()
