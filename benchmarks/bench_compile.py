"""Benchmark: compiled decoding steps (``cache_implementation="static"`` + ``torch.compile``)
against eager decoding, genlab's built-in decoder and transformers, on the demo model.

Run from the repository root::

    .venv/bin/python benchmarks/bench_compile.py [--new-tokens 48] [--repeats 3]

For batch-1 greedy decoding of the embedded demo model (SmolLM2-135M-Instruct, float32) it
prints, in one process:

* the one-time cost of compiling (the first compiled generation minus a steady one);
* seconds and tokens/s of ``transformers`` (its own ``generate``, dynamic cache, eager),
  ``genlab`` (the built-in decoder, dynamic cache, eager), ``genlab static`` (static
  cache, eager) and ``genlab compiled`` (static cache, decoding steps compiled by inductor),
  the median of ``--repeats`` interleaved runs after the compile;
* the ratios against transformers and against genlab eager,

after checking that all four give the same tokens. Compiling needs a C++ compiler (inductor
builds its kernels with it); on CPU the reference only compiles when
``compile_config._compile_all_devices`` is True, which this benchmark sets.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_generate import demo_model, timed  # noqa: E402

import genlab  # noqa: E402
from genlab.config import CompileConfig  # noqa: E402
from genlab.models.architectures import build_decoder  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--mode", default="default", help="torch.compile mode")
    args = parser.parse_args(argv)
    torch.set_num_threads(os.cpu_count() or 1)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")

    hf, ids, name = demo_model()
    lm = build_decoder(hf.config.to_dict(), hf.state_dict(), name="smollm2")
    compile_config = CompileConfig(fullgraph=True, dynamic=False, mode=args.mode)
    compile_config._compile_all_devices = True
    common = dict(
        input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
        max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens,
    )  # fmt: skip
    systems = {
        "transformers": lambda: hf.generate(**common),
        "genlab": lambda: genlab.generate(lm, **common),
        "genlab static": lambda: genlab.generate(lm, cache_implementation="static", **common),
        "genlab compiled": lambda: genlab.generate(
            lm, cache_implementation="static", compile_config=compile_config, **common
        ),
    }
    print(f"model: {name}; prompt {ids.shape[1]} tokens, {args.new_tokens} new tokens, greedy")

    start = time.perf_counter()
    first = systems["genlab compiled"]()
    first_seconds = time.perf_counter() - start
    outputs = {system: fn() for system, fn in systems.items()}
    for system, out in outputs.items():
        assert torch.equal(out, first), f"{system} gave other tokens than the compiled run"
    print("tokens identical across the four systems")

    seconds = {system: [] for system in systems}
    for _ in range(args.repeats):
        for system, fn in systems.items():
            seconds[system].append(timed(fn, seed=0))
    median = {system: statistics.median(values) for system, values in seconds.items()}
    print(
        f"compiling (first compiled generation minus a steady one): "
        f"{first_seconds - median['genlab compiled']:.1f} s"
    )
    for system, value in median.items():
        print(
            f"  {system:16s} {value:6.2f} s  {args.new_tokens / value:6.1f} tok/s  "
            f"x{median['transformers'] / value:.2f} vs transformers  "
            f"x{median['genlab'] / value:.2f} vs genlab eager"
        )


if __name__ == "__main__":
    main()
