"""Benchmark: one matrix product of each of the demo model's shapes, for 1 and 16 rows, in
float32 and bfloat16, in each form torch offers on the CPU (not a test).

Run from the repository root::

    .venv/bin/python benchmarks/bench_products.py [--threads 2]

For each shape (qkv, o, gate/up, down of one layer, and the vocabulary head) it prints
microseconds per product and, for one row, the rate the weights are read at (GB/s; one
row is bound by memory), for 16 rows the arithmetic rate (GFLOP/s; 16 rows are bound by
compute). Forms: packed (oneDNN's layout, ``pack_weight``'s packed form), split (row blocks
through a batched product, float32's one-row form) and ``F.linear``. Enough copies of each
matrix are cycled that they do not stay in the cache. This is where
``benchmarks/README.md``'s figures on 16 rows and on bfloat16 come from.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from genlab.runtime import matmul as mm  # noqa: E402

SHAPES = {  # SmolLM2-135M: (out, in); the layer's four products and the head
    "qkv": (960, 576),
    "o": (576, 576),
    "gate_up": (3072, 576),
    "down": (576, 1536),
    "head": (49152, 576),
}
COUNTS = {"qkv": 30, "o": 30, "gate_up": 30, "down": 30, "head": 1}  # products per step


def seconds(fn, n: int) -> float:
    for k in range(5):
        fn(k)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for k in range(n):
            fn(k)
        best = min(best, (time.perf_counter() - start) / n)
    return best


def forms(weights: list[torch.Tensor], dtype: torch.dtype) -> dict:
    out = {"F.linear": weights}
    if mm.can_pack(weights[0]):
        out["packed"] = [mm.pack_weight(w, torch.get_num_threads(), True) for w in weights]
    out["split"] = [mm.pack_weight(w, torch.get_num_threads(), False) for w in weights]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    torch.manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16):
        for rows in (1, 16):
            totals: dict[str, float] = {}
            print(f"\n{str(dtype).removeprefix('torch.')}, {rows} row(s):")
            for name, (o, i) in SHAPES.items():
                copies = max(1, int(64e6 // (o * i * 4)))
                weights = [torch.randn(o, i).to(dtype) for _ in range(copies)]
                x = torch.randn(rows, i).to(dtype)
                cells = []
                for form, ws in forms(weights, dtype).items():
                    product = F.linear if form == "F.linear" else mm.matmul
                    t = seconds(lambda k, f=product, ws=ws, x=x, n=copies: f(x, ws[k % n]), 50)
                    totals[form] = totals.get(form, 0.0) + t * COUNTS[name]
                    if rows == 1:
                        rate = f"{o * i * x.element_size() / t / 1e9:5.1f} GB/s"
                    else:
                        rate = f"{2 * rows * o * i / t / 1e9:5.0f} GFLOP/s"
                    cells.append(f"{form} {t * 1e6:8.1f} us ({rate})")
                print(f"  {name:8s} " + "  ".join(cells))
            print("  per decoding step (products only): " + ", ".join(
                f"{form} {t * 1e3:.1f} ms" for form, t in totals.items()
            ))  # fmt: skip


if __name__ == "__main__":
    main()
