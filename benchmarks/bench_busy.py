"""Benchmark: the demo on a busy machine, by thread setting (not a test).

Run from the repository root::

    .venv/bin/python benchmarks/bench_busy.py [--repeats 2] [--competitors 0 2 3]

Shared servers (Binder, JupyterHub, a classroom machine) give a notebook fewer free cores
than it sees. This runs, in a **fresh process** for every measurement (so that OpenMP
starts with the environment given), the demo's greedy chat decode (24 new tokens, as
``python -m genlab.demo``) and a Playground-style re-run (20 sampled tokens on the same
chat prompt, the prompt's keys and values reused), under each thread setting:

* ``genlab default``: no thread variable set: genlab's own defaults (``genlab.threads``:
  ``OMP_WAIT_POLICY=PASSIVE`` when other processes keep half a core busy at import);
* ``torch default``: ``GENLAB_THREADS=off``: what genlab did before it chose threads
  (torch's default, one thread per core, OpenMP's default wait policy);
* ``OMP_NUM_THREADS=1``, ``OMP_WAIT_POLICY=PASSIVE`` (threads sleep at once instead of
  spinning), ``OMP_WAIT_POLICY=ACTIVE`` (threads spin while they wait);

each with 0, 2 and 3 CPU-bound competitor processes (``while True: pass``) started
beside it. Settings alternate within a repeat, so that the machine's own load (other users)
spreads over all of them. Printed: median seconds per setting and load, and each setting
against the best one at that load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROMPT = "What is the capital of France?"
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "GENLAB_THREADS")
SETTINGS = {
    "genlab default": {},
    "torch default": {"GENLAB_THREADS": "off"},
    "OMP_NUM_THREADS=1": {"OMP_NUM_THREADS": "1"},
    "OMP_WAIT_POLICY=PASSIVE": {"OMP_WAIT_POLICY": "PASSIVE", "GENLAB_THREADS": "off"},
    "OMP_WAIT_POLICY=ACTIVE": {"OMP_WAIT_POLICY": "ACTIVE", "GENLAB_THREADS": "off"},
    "GOMP_SPINCOUNT=10000": {"GOMP_SPINCOUNT": "10000", "GENLAB_THREADS": "off"},
    "GOMP_SPINCOUNT=100000": {"GOMP_SPINCOUNT": "100000", "GENLAB_THREADS": "off"},
}


def child() -> None:
    """One measurement in this (fresh) process: load, demo decode, Playground re-run."""
    sys.path.insert(0, str(ROOT))
    t0 = time.perf_counter()
    import genlab

    lm = genlab.load("demo")
    load_s = time.perf_counter() - t0
    import torch

    t = time.perf_counter()
    res = lm.generate(PROMPT, chat=True, max_new_tokens=24, min_new_tokens=24)
    decode_s = time.perf_counter() - t
    assert res.generated_ids.shape[1] == 24
    cfg = dict(do_sample=True, temperature=0.9, top_k=40, max_new_tokens=20, min_new_tokens=20)
    lm.generate(PROMPT, chat=True, seed=0, **cfg)  # the first result; the prompt is kept
    t = time.perf_counter()
    lm.generate(PROMPT, chat=True, seed=1, **cfg)  # a settings change: the re-run
    rerun_s = time.perf_counter() - t
    print(
        json.dumps({
            "load_s": load_s, "decode_s": decode_s, "rerun_s": rerun_s,
            "threads": torch.get_num_threads(),
            "form": getattr(lm.model.form_choice, "form", None),
        })
    )  # fmt: skip


def measure(setting: dict, timeout: float) -> dict:
    """One fresh process with ``setting`` in its environment; a process that runs past
    ``timeout`` seconds is stopped and counted as that long (a lower bound)."""
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    env.update(setting, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    try:
        out = subprocess.run(
            [sys.executable, __file__, "--child"], env=env, capture_output=True, text=True,
            timeout=timeout,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"decode_s": timeout, "rerun_s": timeout, "threads": "?", "form": "timed out"}
    if out.returncode:
        raise RuntimeError(f"the measuring process failed ({setting}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def start_competitors(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def stop(processes: list[subprocess.Popen]) -> None:
    for p in processes:
        p.kill()
        p.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--competitors", type=int, nargs="+", default=[0, 2, 3])
    parser.add_argument(
        "--settings", nargs="+", choices=list(SETTINGS),
        default=["genlab default", "torch default", "OMP_NUM_THREADS=1", "OMP_WAIT_POLICY=PASSIVE"],
    )  # fmt: skip
    parser.add_argument("--timeout", type=float, default=150, help="seconds per process")
    args = parser.parse_args()
    if args.child:
        child()
        return
    print(f"{os.cpu_count()} cores; load average at the start {os.getloadavg()[0]:.1f}")
    results: dict[tuple[int, str], list[dict]] = {}
    loads: dict[int, list[float]] = {}
    for repeat in range(args.repeats):
        for n in args.competitors:
            competitors = start_competitors(n)
            try:
                time.sleep(1.0)
                order = args.settings if repeat % 2 == 0 else args.settings[::-1]
                for name in order:
                    loads.setdefault(n, []).append(os.getloadavg()[0])
                    r = measure(SETTINGS[name], args.timeout)
                    results.setdefault((n, name), []).append(r)
                    print(
                        f"  repeat {repeat} competitors {n} {name:24s} decode "
                        f"{r['decode_s']:.2f} s re-run {r['rerun_s']:.2f} s "
                        f"({r['threads']} threads, {r['form']})",
                        flush=True,
                    )
            finally:
                stop(competitors)
    print(
        "\nmedian seconds (24-token demo decode | 20-token re-run); x best at that load; "
        f"a process stopped at {args.timeout:.0f} s counts as {args.timeout:.0f} s"
    )
    for n in args.competitors:
        med = {
            name: (
                statistics.median(r["decode_s"] for r in results[(n, name)]),
                statistics.median(r["rerun_s"] for r in results[(n, name)]),
                results[(n, name)][-1]["threads"],
            )
            for name in args.settings
        }
        best_d = min(v[0] for v in med.values())
        best_r = min(v[1] for v in med.values())
        load = statistics.median(loads[n])
        print(f"{n} competitors (load average during the runs {load:.1f}):")
        for name, (d, r, threads) in med.items():
            print(
                f"  {name:26s} {threads} threads  decode {d:6.2f} s ({d / best_d:4.2f}x)  "
                f"re-run {r:6.2f} s ({r / best_r:4.2f}x)"
            )


if __name__ == "__main__":
    main()
