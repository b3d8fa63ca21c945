"""Benchmark: thread settings side by side in long-lived processes, beside competitors
(not a test).

Run from the repository root::

    .venv/bin/python benchmarks/bench_busy_ab.py [--rounds 5] [--competitors 2 3 0]
        [--order torch-first|genlab-first] [--settings "genlab default" "torch default"]

``bench_busy.py`` starts a fresh process for every figure, so on a machine shared with other
users its figures spread 2-3x from one process to the next. This starts one process per
setting (``import torch`` first, as the lessons do, or ``genlab`` first), loads the demo
once in each, then starts the CPU-bound competitors and has the processes decode the demo's
24-token chat prompt in turn, one at a time, alternating the order each round. Printed:
every figure with the load average, then the medians per setting. With ``--competitors 0``
and the settings ``genlab default`` and ``torch default`` (``GENLAB_THREADS=off``: no
parking, no looks) it answers whether genlab's checks cost anything on a quiet machine.
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
CHILD = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
if sys.argv[2] == "torch-first":
    import torch
import genlab
lm = genlab.load("demo")
lm.cache.max_bytes = 0  # every decode computes its passes (no forward cache)
lm.generate("Hi", max_new_tokens=2)
print("ready", lm.model.form_choice.form, flush=True)
for line in sys.stdin:
    t = time.perf_counter()
    lm.generate("What is the capital of France?", chat=True, max_new_tokens=24,
                min_new_tokens=24)
    seconds = time.perf_counter() - t
    parked = genlab.runtime.threads.status()["parked"]
    print(json.dumps({"s": seconds, "parked": parked}), flush=True)
"""
SETTINGS = {
    "genlab default": {},
    "torch default": {"GENLAB_THREADS": "off"},
    "OMP_WAIT_POLICY=PASSIVE": {"OMP_WAIT_POLICY": "PASSIVE"},
    "OMP_NUM_THREADS=1": {"OMP_NUM_THREADS": "1"},
}
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "GENLAB_THREADS")


def load_average() -> float:
    return float(open("/proc/loadavg").read().split()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--competitors", type=int, nargs="+", default=[2, 3, 0])
    parser.add_argument(
        "--weight-form", default="both", choices=["both", "split", "packed", "measured"],
        help="GENLAB_WEIGHT_FORM of every process (measured: each measures its own as it "
        "loads, so the settings may differ by form as well as by threads)",
    )  # fmt: skip
    parser.add_argument("--copies", type=int, default=2, help="processes per setting")
    parser.add_argument("--order", choices=["torch-first", "genlab-first"], default="torch-first")
    parser.add_argument(
        "--settings", nargs="+", choices=list(SETTINGS),
        default=["genlab default", "OMP_WAIT_POLICY=PASSIVE", "OMP_NUM_THREADS=1"],
    )  # fmt: skip
    args = parser.parse_args()
    base = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    base.update(HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    base.pop("GENLAB_WEIGHT_FORM", None)
    if args.weight_form != "measured":  # the same form in every process: threads alone differ
        base["GENLAB_WEIGHT_FORM"] = args.weight_form
    # one after another: a process measures its weight form as it loads (runtime/matmul.py),
    # and two processes loading together time each other's work into that choice. Each
    # setting runs in --copies processes loaded in mirrored order (A B B A): on the quiet
    # EPYC the process loaded first decoded 4-9 % slower than the others, whatever its setting
    chosen = [name for name in SETTINGS if name in args.settings]
    order = [(name, c) for c in range(args.copies) for name in (chosen[::-1] if c % 2 else chosen)]
    procs = {}
    try:
        for name, c in order:
            procs[(name, c)] = subprocess.Popen(
                [sys.executable, "-c", CHILD, str(ROOT), args.order],
                env={**base, **SETTINGS[name]},
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            ready = procs[(name, c)].stdout.readline().split()
            assert ready and ready[0] == "ready", ready
            print(f"{name} (copy {c}): loaded, weight form {ready[1]}", flush=True)
        for n in args.competitors:
            competitors = [
                subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)
            ]
            try:
                time.sleep(1.0)
                seconds: dict[str, list[float]] = {name: [] for name in chosen}
                loads = []
                for r in range(args.rounds):
                    for key in list(procs) if r % 2 == 0 else list(procs)[::-1]:
                        name = key[0]
                        loads.append(load_average())
                        procs[key].stdin.write("go\n")
                        procs[key].stdin.flush()
                        out = json.loads(procs[key].stdout.readline())
                        seconds[name].append(out["s"])
                        print(
                            f"  {n} competitors round {r} {name:24s} #{key[1]} {out['s']:6.2f} s "
                            f"(parked {out['parked']}; load average {loads[-1]:.1f})",
                            flush=True,
                        )
                best = min(statistics.median(v) for v in seconds.values())
                print(f"{n} competitors, load average {min(loads):.1f}-{max(loads):.1f}:")
                for name, v in seconds.items():
                    med = statistics.median(v)
                    print(f"  {name:24s} median {med:6.2f} s ({med / best:.2f}x)")
            finally:
                for c in competitors:
                    c.kill()
                    c.wait()
    finally:
        for p in procs.values():
            p.kill()
            p.wait()


if __name__ == "__main__":
    main()
