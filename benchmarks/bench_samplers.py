"""What the samplers beyond the reference cost (issue 36): per step on the demo model, and
per sampler on its own.

1. None on: a sampled step with the default config, ``sampler_fields`` untouched, against
   the same run with the one thing that is new on that path (binding the run's random
   source around the processors) taken away. The built processors are the same list as
   before the samplers existed (checked here).
2. All on (DRY, XTC, mirostat v2, dynamic temperature, smoothing, top-nσ): ms per step
   against none on, same prompt, seed and length; the ratio is the figure.
3. Each sampler alone on one step's logits (vocabulary 49,152) after a 256-token history:
   µs per call.

Steps: alternating repeats, the median of each; single calls (2, 3): the fastest of 20,
which a busy machine disturbs least. Run from the repository root:
``python benchmarks/bench_samplers.py``.
"""

from __future__ import annotations

import contextlib
import statistics
import time

import torch

import genlab
from genlab.processors import samplers as S
from genlab.strategies import base as strategy_base

PROMPT = "The old lighthouse keeper climbed the stairs and"
STEPS = 24
REPEATS = 5
ALL_ON = dict(
    dry_multiplier=0.8,
    xtc_probability=0.5,
    xtc_threshold=0.1,
    mirostat_mode=2,
    dynatemp_low=0.5,
    dynatemp_high=1.5,
    smoothing_factor=0.3,
    top_n_sigma=2.0,
    top_k=0,
)


def ms_per_step(lm, **fields) -> float:
    run = lm.start(PROMPT, max_new_tokens=STEPS + 1, do_sample=True, seed=0, **fields)
    run.step()  # the prompt's forward pass is not a decoding step
    start = time.perf_counter()
    for _ in range(STEPS):
        run.step()
    return (time.perf_counter() - start) / STEPS * 1e3


@contextlib.contextmanager
def without_binding():
    saved = strategy_base.drawing_from
    strategy_base.drawing_from = lambda random: contextlib.nullcontext()
    try:
        yield
    finally:
        strategy_base.drawing_from = saved


def _unbound(lm) -> float:
    with without_binding():
        return ms_per_step(lm)


def main() -> None:
    torch.set_num_threads(2)
    lm = genlab.load("demo")
    run = lm.start(PROMPT, do_sample=True)
    names = [type(p).__name__ for p in run.views.processors]
    print(f"default sampled config builds {names} (the reference's: top_k only)")
    ms_per_step(lm)  # warm-up

    plain, unbound, every = [], [], []
    for i in range(REPEATS):  # alternating, and the order reversed every other time
        jobs = [
            (plain, lambda: ms_per_step(lm)),
            (unbound, lambda: _unbound(lm)),
            (every, lambda: ms_per_step(lm, **ALL_ON)),
        ]
        for sink, job in jobs if i % 2 == 0 else jobs[::-1]:
            sink.append(job())
    p, u, a = (statistics.median(x) for x in (plain, unbound, every))
    print(f"none on: {p:.1f} ms/step; without the random-source binding {u:.1f}: ratio {p / u:.3f}")
    print(f"all on:  {a:.1f} ms/step: {a / p:.2f}x none on (+{a - p:.1f} ms)")

    # the processors alone, on the logits of a real step, 32 tokens into the run
    for label, fields in (("none on", {}), ("all on", ALL_ON)):
        run = lm.start(PROMPT, max_new_tokens=40, do_sample=True, seed=0, **fields)
        for _ in range(32):
            run.step()
        ids = run.sequences
        with torch.no_grad():
            logits = lm.model.forward(ids).logits[:, -1].float()
        times = []
        for _ in range(20):
            start = time.perf_counter()
            run.views.processors(ids, logits)
            times.append(time.perf_counter() - start)
        stages = [type(x).__name__ for x in run.views.processors]
        print(f"processors, {label}: {min(times) * 1e3:.2f} ms per step (fastest of 20) {stages}")

    vocab = lm.model.info.vocab_size
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(1, vocab, generator=gen) * 3
    history = torch.randint(0, 2000, (1, 256), generator=gen)
    history[0, 128:] = history[0, :128]  # a long repeat for DRY to find
    breakers = S.dry_breakers(lm.tokenizer, ["\n", ":", '"', "*"])
    samplers = {
        "dry": S.DRYLogitsProcessor(0.8, sequence_breakers=breakers),
        "xtc": S.XTCLogitsWarper(0.1, 1.0),
        "mirostat_v2": S.MirostatV2LogitsWarper(5.0, 0.1),
        "mirostat": S.MirostatLogitsWarper(5.0, 0.1),
        "dynatemp": S.DynamicTemperatureLogitsWarper(0.5, 1.5),
        "smoothing": S.QuadraticSmoothingLogitsWarper(0.3),
        "top_n_sigma": S.TopNSigmaLogitsWarper(1.0),
    }
    from genlab.processors import TopKLogitsWarper

    samplers["top_k (reference)"] = TopKLogitsWarper(50)
    for name, proc in samplers.items():
        times = []
        for _ in range(20):
            start = time.perf_counter()
            proc(history, logits)
            times.append(time.perf_counter() - start)
        print(f"{name:>18}: {min(times) * 1e6:8.0f} µs per call (fastest of 20)")


if __name__ == "__main__":
    main()
