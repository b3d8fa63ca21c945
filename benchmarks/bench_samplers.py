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

Steps (1, 2): the three runs (none on, none on without the binding, all on) stepped in
turn, one step each, the order going through every permutation, so that a load which comes
and goes on a shared machine falls on all three alike; the median of 5 x 24 steps each,
every forward pass computed (no forward cache). Single calls (3, and the processors of one
real step): the fastest of 20, which a busy machine disturbs least. Run from the repository
root: ``python benchmarks/bench_samplers.py``.
"""

from __future__ import annotations

import contextlib
import itertools
import statistics
import time

import torch

import genlab
import genlab.run.engine
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


def _run(lm, **fields):
    """A sampled run of PROMPT that computes every forward pass (``genlab.start`` keeps
    no forward cache: ``lm.start``'s would serve the repeats' identical steps)."""
    ids, mask = lm.encode(PROMPT)
    return genlab.start(
        lm.model,
        input_ids=ids,
        attention_mask=mask,
        tokenizer=lm.tokenizer,
        max_new_tokens=STEPS + 1,
        do_sample=True,
        seed=0,
        **fields,
    )


@contextlib.contextmanager
def without_binding():
    # the binding is made by the engine around process and select (every mode), and by
    # the token-by-token strategies' process
    modules = (strategy_base, genlab.run.engine)
    saved = [m.drawing_from for m in modules]
    for m in modules:
        m.drawing_from = lambda random: contextlib.nullcontext()
    try:
        yield
    finally:
        for m, fn in zip(modules, saved, strict=True):
            m.drawing_from = fn


def step_times(lm, variants: dict) -> dict[str, list[float]]:
    """ms per step of each variant (``name: (fields, context)``), the variants' runs
    stepped in turn, one step each, the turn's order going through every permutation (so
    that each variant follows each other one equally often: a step after the all-on one
    finds the processor caches cold): a load that comes and goes on a shared machine falls
    on all of them alike."""
    times: dict[str, list[float]] = {name: [] for name in variants}
    orders = list(itertools.permutations(variants))
    for _ in range(REPEATS):
        runs = {name: _run(lm, **fields) for name, (fields, _) in variants.items()}
        for name, run in runs.items():
            with variants[name][1]():
                run.step()  # the prompt's forward pass is not a decoding step
        for i in range(STEPS):
            for name in orders[i % len(orders)]:
                with variants[name][1]():
                    start = time.perf_counter()
                    runs[name].step()
                    times[name].append((time.perf_counter() - start) * 1e3)
    return times


def main() -> None:
    torch.set_num_threads(2)
    lm = genlab.load("demo")
    run = lm.start(PROMPT, do_sample=True)
    names = [type(p).__name__ for p in run.views.processors]
    print(f"default sampled config builds {names} (the reference's: top_k only)")
    step_times(lm, {"warm-up": ({}, contextlib.nullcontext)})
    times = step_times(
        lm,
        {
            "none on": ({}, contextlib.nullcontext),
            "unbound": ({}, without_binding),
            "all on": (ALL_ON, contextlib.nullcontext),
        },
    )
    p, u, a = (statistics.median(times[k]) for k in ("none on", "unbound", "all on"))
    n = len(times["none on"])
    print(f"median of {n} steps each, the three runs stepped in turn")
    print(f"none on: {p:.1f} ms/step; without the random-source binding {u:.1f}: ratio {p / u:.3f}")
    print(f"all on:  {a:.1f} ms/step: {a / p:.2f}x none on (+{a - p:.1f} ms)")
    # the binding alone, which a step's timing cannot resolve: two per step (process, select)
    source = _run(lm).random
    start = time.perf_counter()
    for _ in range(100_000):
        with S.drawing_from(source):
            pass
    each = (time.perf_counter() - start) / 100_000 * 1e6
    print(f"binding: {each:.2f} µs each, 2 per step: {2 * each / (p * 1e3):.5%} of a none-on step")

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
