"""Benchmark: a sampling sweep in one process against two Dask worker processes (not a test).

Run from the repository root (needs the ``cluster`` extra: ``pip install -e '.[cluster]'``)::

    .venv/bin/python benchmarks/bench_sweep.py [--n 8] [--max-new-tokens 24]

The demo model, a 3 x 2 grid (temperature x top_p), ``n`` samples per setting. One
process: ``genlab.sweep(lm, ...)``; two workers: the same call with
``executor=Client(LocalCluster(n_workers=2, threads_per_worker=1)).get_executor()``, timed
once with the workers' first load of the model included and once more with the model
already loaded in each worker. The tables are checked equal. On a machine with 2 cores the
in-process sweep already uses both (torch threads), so two workers can gain little here;
the figure that matters on a cluster is that the workers' time splits over machines.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import genlab  # noqa: E402  (before torch: genlab's thread defaults)

GRID = {"temperature": [0.7, 1.0, 1.3], "top_p": [0.9, 1.0]}
PROMPT = "Describe the sea in one sentence."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=24)
    args = parser.parse_args()
    import pandas as pd
    from dask.distributed import Client, LocalCluster

    os.environ["GENLAB_WEIGHT_FORM"] = "packed"  # the same products in every process
    kw = dict(n=args.n, seed=0, max_new_tokens=args.max_new_tokens, chat=True)
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} (shared machine)")
    lm = genlab.load("demo")
    genlab.sweep(lm, PROMPT, {"temperature": [1.0]}, n=2, max_new_tokens=4)  # warm-up
    start = time.perf_counter()
    one = genlab.sweep(lm, PROMPT, GRID, **kw)
    one_s = time.perf_counter() - start
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:  # fmt: skip
        executor = client.get_executor()
        start = time.perf_counter()
        first = genlab.sweep(lm, PROMPT, GRID, executor=executor, **kw)
        first_s = time.perf_counter() - start
        start = time.perf_counter()
        again = genlab.sweep(lm, PROMPT, GRID, executor=executor, **kw)
        again_s = time.perf_counter() - start
        loads = client.run(lambda: len(genlab.experiments.sweeps.WORKER_LOADS))
    pd.testing.assert_frame_equal(first.metrics, one.metrics)
    pd.testing.assert_frame_equal(again.samples, one.samples)
    settings = len(one.metrics)
    print(f"sweep: {settings} settings x {args.n} samples x {args.max_new_tokens} tokens")
    print(f"  one process (torch threads {genlab.runtime.threads.configure()}): {one_s:.1f} s")
    print(f"  two Dask workers, first sweep (each loads the model): {first_s:.1f} s")
    print(f"  two Dask workers, model already loaded: {again_s:.1f} s")
    print(f"  model loads per worker over both sweeps: {sorted(loads.values())}; tables equal")
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
