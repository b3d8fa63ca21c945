"""Benchmark: the demo on a busy machine, by thread setting and import order (not a test).

Run from the repository root::

    .venv/bin/python benchmarks/bench_busy.py [--repeats 2] [--competitors 0 2 3] [--late 2 3]

Shared servers (Binder, JupyterHub, a classroom machine) give a notebook fewer free cores
than it sees. This runs, in a **fresh process** for every measurement (so that OpenMP
starts with the environment given), the demo's greedy chat decode (24 new tokens, as
``python -m genlab.demo``) and a Playground-style re-run (20 sampled tokens on the same
chat prompt, the prompt's keys and values reused), under each thread setting:

* ``genlab default``: no thread variable set: genlab's own defaults (``genlab.runtime.threads``:
  OpenMP threads parked while other processes keep half a core busy, checked as it steps);
* ``torch default``: ``GENLAB_THREADS=off``: what genlab did before it chose threads
  (torch's default, one thread per core, OpenMP's default wait policy);
* ``OMP_NUM_THREADS=1``, ``OMP_WAIT_POLICY=PASSIVE`` (threads sleep at once instead of
  spinning), ``OMP_WAIT_POLICY=ACTIVE`` (threads spin while they wait), ``GOMP_SPINCOUNT``;

each in both import orders (``import torch`` then ``genlab``, as the lessons do, and
``genlab`` first), with 0, 2 and 3 CPU-bound competitor processes (``while True: pass``)
started before the process, and with 2 and 3 started *late*: after it has imported and
loaded the model, 1 s before it decodes. Settings and orders alternate within a repeat, so
that the machine's own load (other users) spreads over all of them. Printed: each figure
with the load average (``/proc/loadavg``, 1 minute) when it started, then a markdown table
of medians, each against the best setting in its row.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import signal
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


def child(order: str) -> None:
    """One measurement in this (fresh) process: import (in ``order``), load, then wait for
    a line on stdin (the parent may start competitors meanwhile), demo decode, re-run."""
    sys.path.insert(0, str(ROOT))
    t0 = time.perf_counter()
    if order == "torch first":  # as the lessons do
        import torch

        import genlab
    else:  # as a plain script does
        genlab = importlib.import_module("genlab")
        import torch

    lm = genlab.load("demo")
    load_s = time.perf_counter() - t0
    print("ready", flush=True)
    sys.stdin.readline()
    t = time.perf_counter()
    res = lm.generate(PROMPT, chat=True, max_new_tokens=24, min_new_tokens=24)
    decode_s = time.perf_counter() - t
    assert res.generated_ids.shape[1] == 24
    print(json.dumps({"decode_s": decode_s}), flush=True)  # kept if the re-run times out
    cfg = dict(do_sample=True, temperature=0.9, top_k=40, max_new_tokens=20, min_new_tokens=20)
    lm.generate(PROMPT, chat=True, seed=0, **cfg)  # the first result; the prompt is kept
    t = time.perf_counter()
    lm.generate(PROMPT, chat=True, seed=1, **cfg)  # a settings change: the re-run
    rerun_s = time.perf_counter() - t
    print(
        json.dumps({
            "load_s": load_s, "decode_s": decode_s, "rerun_s": rerun_s,
            "threads": torch.get_num_threads(),
            "parked": genlab.runtime.threads.status()["parked"],
        })
    )  # fmt: skip


def measure(setting: dict, order: str, late: int, timeout: float) -> dict:
    """One fresh process with ``setting`` in its environment, importing in ``order``;
    ``late`` competitors are started once it has loaded the model (1 s before it decodes)
    and stopped after it. A process that runs past ``timeout`` seconds after that is
    stopped; what it had not finished counts as ``timeout`` seconds (a lower bound)."""
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    env.update(setting, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", order], env=env, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    competitors: list[subprocess.Popen] = []
    try:
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the measuring process failed ({setting}):\n{proc.stderr.read()}")
        if late:
            competitors = start_competitors(late)
            time.sleep(1.0)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            done = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
            decode = done[0]["decode_s"] if done else timeout
            return {"decode_s": decode, "rerun_s": timeout, "threads": "?", "parked": "?"}
    finally:
        stop(competitors)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if proc.returncode:
        raise RuntimeError(f"the measuring process failed ({setting}):\n{err[-3000:]}")
    return json.loads(out.strip().splitlines()[-1])


def start_competitors(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def stop(processes: list[subprocess.Popen]) -> None:
    for p in processes:
        p.kill()
        p.wait()


ORDERS = ("torch first", "genlab first")


def load_average() -> float:
    return float(open("/proc/loadavg").read().split()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--child", choices=ORDERS, help=argparse.SUPPRESS)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--competitors", type=int, nargs="*", default=[0, 2, 3])
    parser.add_argument(
        "--late", type=int, nargs="*", default=[2, 3],
        help="competitor counts started after the import and load, 1 s before decoding",
    )  # fmt: skip
    parser.add_argument("--orders", nargs="+", choices=ORDERS, default=list(ORDERS))
    parser.add_argument(
        "--settings", nargs="+", choices=list(SETTINGS),
        default=["genlab default", "torch default", "OMP_NUM_THREADS=1", "OMP_WAIT_POLICY=PASSIVE"],
    )  # fmt: skip
    parser.add_argument("--timeout", type=float, default=60, help="seconds per process")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # competitors stopped on a kill
    if args.child:
        child(args.child)
        return
    cpu = next(
        (line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if "model name" in line),
        "?",
    )
    print(f"{os.cpu_count()} cores ({cpu}); load average at the start {load_average():.1f}")
    scenarios = [(n, False) for n in args.competitors] + [(n, True) for n in args.late]
    results: dict[tuple, list[dict]] = {}
    loads: dict[tuple, list[float]] = {}
    for repeat in range(args.repeats):
        for n, late in scenarios:
            competitors = [] if late else start_competitors(n)
            try:
                time.sleep(0 if late else 1.0)
                for order in args.orders if repeat % 2 == 0 else args.orders[::-1]:
                    names = args.settings if repeat % 2 == 0 else args.settings[::-1]
                    for name in names:
                        key = (order, n, late, name)
                        load = load_average()
                        r = measure(SETTINGS[name], order, n if late else 0, args.timeout)
                        results.setdefault(key, []).append(r)
                        loads.setdefault(key[:3], []).append(load)
                        when = "late" if late else "at start"
                        print(
                            f"  repeat {repeat} {order:12s} {n} competitors {when:8s} "
                            f"{name:24s} decode {r['decode_s']:6.2f} s re-run "
                            f"{r['rerun_s']:6.2f} s ({r['threads']} threads, parked "
                            f"{r['parked']}; load average {load:.1f})",
                            flush=True,
                        )
            finally:
                stop(competitors)
    print(
        "\nmedian seconds (24-token demo decode | 20-token re-run), x the best setting in the "
        f"same row; what had not finished {args.timeout:.0f} s after the go counts as that"
    )
    header = " | ".join(f"`{name}`" for name in args.settings)
    print(f"| import order | competitors | load average | {header} |")
    print("|---" * (3 + len(args.settings)) + "|")
    for order in args.orders:
        for n, late in scenarios:
            med = {
                name: (
                    statistics.median(r["decode_s"] for r in results[(order, n, late, name)]),
                    statistics.median(r["rerun_s"] for r in results[(order, n, late, name)]),
                )
                for name in args.settings
            }
            best_d = min(v[0] for v in med.values())
            best_r = min(v[1] for v in med.values())
            cells = " | ".join(
                f"{d:.2f} ({d / best_d:.2f}x) \\| {r:.2f} ({r / best_r:.2f}x)"
                for d, r in med.values()
            )
            lo, hi = min(loads[(order, n, late)]), max(loads[(order, n, late)])
            when = f"{n}, late" if late else str(n)
            print(f"| {order} | {when} | {lo:.1f}-{hi:.1f} | {cells} |")


if __name__ == "__main__":
    main()
