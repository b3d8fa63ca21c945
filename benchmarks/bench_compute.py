"""Benchmark: best-of-N, self-consistency and coverage on the demo model (not a test).

Run from the repository root::

    .venv/bin/python benchmarks/bench_compute.py [--tasks 40] [--n 256] [--batch-size 64]

The capital-city tasks of ``genlab.experiments.tasks.capitals()``: first the greedy solve rate
of all of them (4 new tokens each), then one ``genlab.coverage_curve`` call over the first
``--tasks`` of them with ``--n`` samples each (4 new tokens, batches of ``--batch-size``
rows, seed 0), timed (wall and CPU time), and the three curves with their 95 % bootstrap
intervals. Prints the load average before and after: the wall time depends on what else
the machine runs.
``--out`` writes the coverage figure as a PNG.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import genlab  # noqa: E402  (before torch: genlab's thread defaults)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=40)
    parser.add_argument("--n", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-new-tokens", type=int, default=4)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    import pandas as pd
    import torch

    lm = genlab.load("demo")
    every = genlab.experiments.tasks.capitals()
    print(f"load average {os.getloadavg()[0]:.1f}; torch threads {torch.get_num_threads()}")
    t0 = time.perf_counter()
    solved = sum(
        task.check(lm.generate(task.prompt, max_new_tokens=args.max_new_tokens).text)
        for task in every
    )
    print(
        f"greedy solves {solved} of {len(every)} capital tasks ({solved / len(every):.0%}) "
        f"in {time.perf_counter() - t0:.1f} s"
    )
    tasks = every[: args.tasks]
    ns = tuple(2**i for i in range(args.n.bit_length()) if 2**i <= args.n)
    cpu0 = time.process_time()
    cov = genlab.coverage_curve(
        lm, tasks, ns=ns, n=args.n, batch_size=args.batch_size,
        max_new_tokens=args.max_new_tokens, seed=0, progress=True,
    )  # fmt: skip
    samples = len(tasks) * args.n
    print(
        f"coverage_curve: {len(tasks)} tasks x {args.n} samples = {samples} samples of "
        f"{args.max_new_tokens} tokens in {cov.seconds:.1f} s "
        f"({samples / cov.seconds:.0f} samples/s), {time.process_time() - cpu0:.0f} s of CPU "
        f"time; load average {os.getloadavg()[0]:.1f}"
    )
    print(
        f"greedy on these {len(tasks)}: {int(cov.tasks.greedy_correct.sum())} solved; "
        f"one sample at temperature 1 right {cov.value('pass@N', 1):.3f} of the time"
    )
    with pd.option_context("display.width", 120):
        table = cov.table.round(3)
        print(table.pivot(index="N", columns="curve", values=["value", "low", "high"]))
    if args.out is not None:
        genlab.plots.coverage_plot(cov).savefig(args.out, dpi=100)
        print("figure:", args.out)


if __name__ == "__main__":
    main()
