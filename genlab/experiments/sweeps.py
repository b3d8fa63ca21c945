"""Sampling sweeps: many samples under every combination of a few settings, and numbers
that tell quality from diversity.

``genlab.sweep(lm, prompt, grid={"temperature": [0.5, 1.0, 1.5], "top_p": [0.8, 1.0]},
n=16, seed=0)`` generates ``n`` samples for each combination of the grid (one batched
generation per setting, ``num_return_sequences=n``, the same seed for every setting), and
measures per setting:

* ``mean_logprob``: the samples' mean per-token log-prob under the *raw* model (no
  temperature, no top-p: :func:`genlab.experiments.scoring.score`), a stand-in for fluency;
* ``distinct_1`` / ``distinct_2``: distinct tokens / token pairs over all tokens / pairs of
  the setting's samples (higher: more diverse);
* ``repetition``: the share of a sample's token pairs that already appeared earlier in the
  same sample (higher: loops), averaged;
* ``length``: generated tokens per sample (EOS included); ``eos_rate``: the share of
  samples that ended with EOS (the others hit ``max_new_tokens``).
"""

from __future__ import annotations

import itertools
import os
import time
from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch

#: the per-setting metrics, in the order the plots show them
METRICS = ("mean_logprob", "distinct_1", "distinct_2", "repetition", "length", "eos_rate")


@dataclass
class SweepResult:
    """What :func:`sweep` returns.

    samples: one row per sample (the grid's settings, sample, text, tokens, length,
    ended_with_eos, mean_logprob, repetition); metrics: one row per setting (the grid's
    settings and :data:`METRICS`); grid: the grid as given; seconds: the wall time.
    """

    samples: pd.DataFrame
    metrics: pd.DataFrame
    grid: dict[str, list]
    seconds: float
    n: int

    def __repr__(self) -> str:
        return f"SweepResult({len(self.metrics)} settings x {self.n} samples, grid={self.grid})"

    def _repr_html_(self) -> str:
        return (
            f"<b>sweep</b>: {len(self.metrics)} settings x {self.n} samples in "
            f"{self.seconds:.1f} s (.samples, .metrics; genlab.plots.sweep_metrics)"
            + self.metrics.to_html(index=False, float_format="%.3f")
        )


def distinct(samples: list[list[int]], n: int) -> float:
    """Distinct n-grams over all n-grams of the samples pooled (0 when there is none)."""
    grams = [tuple(s[i : i + n]) for s in samples for i in range(len(s) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 0.0


def repetition(tokens: list[int], n: int = 2) -> float:
    """The share of a sample's n-grams that already occurred earlier in it."""
    seen, repeats, total = set(), 0, 0
    for i in range(len(tokens) - n + 1):
        g = tuple(tokens[i : i + n])
        repeats += g in seen
        total += 1
        seen.add(g)
    return repeats / total if total else 0.0


def _check_grid(grid) -> dict[str, list]:
    from ..config import GenerationConfig
    from ..config.sampler_fields import SAMPLER_FIELDS

    if not isinstance(grid, dict) or not grid:
        raise ValueError(
            "grid: give a dict of GenerationConfig fields to lists of values, e.g. "
            '{"temperature": [0.7, 1.0], "top_p": [0.9, 1.0]}'
        )
    plain = GenerationConfig()
    out = {}
    for key, values in grid.items():
        if not hasattr(plain, key) and key not in SAMPLER_FIELDS:
            raise ValueError(
                f"grid: {key!r} is not a GenerationConfig field (nor a setting of genlab's "
                "samplers, genlab.config.sampler_fields.SAMPLER_FIELDS)"
            )
        if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
            values = [values]
        values = list(values)
        if not values:
            raise ValueError(f"grid[{key!r}]: give at least one value")
        out[key] = values
    return out


def sweep(
    lm,
    prompt: Any,
    grid: dict[str, list],
    *,
    n: int = 16,
    seed: int = 0,
    max_new_tokens: int | None = None,
    chat: bool | None = None,
    system: str | None = None,
    progress: Any = None,
    executor: Any = None,
    **config: Any,
) -> SweepResult:
    """Sample ``n`` continuations of ``prompt`` for every combination of ``grid`` (see the
    module docstring). Other generation settings go in ``config`` (sampling is on unless
    the grid or config says ``do_sample=False``). ``progress``: an optional callable
    ``(done, total)`` called after each setting. Reproducible: the same arguments give the
    same samples.

    lm: an :class:`~genlab.lm.LM` (or any model :func:`genlab.load` takes); seed: the seed
    of every setting's batch; max_new_tokens: the length of each sample (20 unless given,
    here or in the grid); chat, system: how the prompt is encoded (chat template, system
    message). A setting without sampling or beams (``do_sample=False``) gives one sample,
    repeated ``n`` times (the reference returns one sequence there).

    executor: a :class:`concurrent.futures.Executor` to run the settings on (one task per
    setting), e.g. a ``ProcessPoolExecutor`` or a Dask cluster's
    ``distributed.Client(...).get_executor()``. Tasks carry the model's name or folder (the
    ``lm`` must come from ``genlab.load(name_or_folder)``, or be that name), and every
    worker process loads the model once and keeps it for later tasks. The table is the one
    the same call gives in one process. A pool that forks (``ProcessPoolExecutor()`` on
    Linux) works too: a forked worker computes on one thread, since torch's thread pool
    does not survive a fork (a spawn pool keeps torch's threads).

    (Not run as a test: it samples a grid of settings for seconds and prints a wide table (notebook
    11).)

    >>> sw = genlab.sweep(lm, "Describe the sea.", {"temperature": [0.5, 1]})  # doctest: +SKIP
    >>> sw.metrics                                                 # doctest: +SKIP
    """
    from ..lm import LM, load

    spec = None
    if isinstance(lm, (str, os.PathLike)):
        spec = ModelSpec(str(lm))
        lm = load(lm)
    elif not isinstance(lm, LM):
        lm = LM(lm)
    if executor is not None:
        spec = spec or spec_of(lm)
        if not callable(getattr(executor, "submit", None)):
            raise ValueError(
                f"executor={executor!r}: give a concurrent.futures.Executor (an object with "
                "submit), e.g. ProcessPoolExecutor() or a Dask Client's get_executor()"
            )
    grid = _check_grid(grid)
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n={n!r} must be a positive integer (samples per setting)")
    given = {**config, **({} if max_new_tokens is None else {"max_new_tokens": max_new_tokens})}
    clash = sorted(set(grid) & set(given))
    if clash:
        raise ValueError(f"{clash}: given both in grid and as a setting; keep one")
    if "num_return_sequences" in grid or "num_return_sequences" in config:
        raise ValueError(
            "num_return_sequences: a sweep draws n samples per setting (n=...); pass n "
            "instead of num_return_sequences"
        )
    config = given
    if "max_new_tokens" not in grid:
        config.setdefault("max_new_tokens", 20)
    if "do_sample" not in grid:
        config.setdefault("do_sample", True)
    ids, mask = lm.encode(prompt, chat=chat, system=system)
    if ids.shape[0] != 1:
        raise ValueError("prompt: a sweep takes one prompt (a text, messages or ids)")
    prompt_ids = ids[0][mask[0].bool()]
    keys = list(grid)
    settings = list(itertools.product(*(grid[k] for k in keys)))
    t0 = time.perf_counter()
    sample_rows: list[dict] = []
    metric_rows: list[dict] = []
    jobs = [dict(zip(keys, values, strict=True)) for values in settings]
    _check_beams(jobs, n, config)
    args = (prompt_ids, n, seed, config)
    if executor is None:
        outcomes = []
        for done, setting in enumerate(jobs):
            outcomes.append(_sweep_setting(lm, setting, *args))
            if progress is not None:
                progress(done + 1, len(settings))
    else:
        futures = [executor.submit(_remote_setting, spec, setting, *args) for setting in jobs]
        if progress is not None:
            from concurrent.futures import as_completed

            for done, _ in enumerate(as_completed(futures)):
                progress(done + 1, len(settings))
        outcomes = [f.result() for f in futures]
    for rows, metrics in outcomes:
        sample_rows.extend(rows)
        metric_rows.append(metrics)
    return SweepResult(
        samples=pd.DataFrame(sample_rows),
        metrics=pd.DataFrame(metric_rows),
        grid=grid,
        seconds=time.perf_counter() - t0,
        n=n,
    )


def _check_beams(jobs: list[dict], n: int, config: dict) -> None:
    """Refuse, before any generation, a beam setting that cannot give ``n`` samples: beam
    search returns at most ``num_beams`` sequences."""
    for setting in jobs:
        beams = int({**config, **setting}.get("num_beams") or 1)
        if 1 < beams < n:
            raise ValueError(
                f"the setting {setting} runs beam search with num_beams={beams}, which returns "
                f"at most {beams} sequences, but the sweep asks for n={n} samples per setting: "
                f"lower n to {beams}, or give num_beams values >= {n}"
            )


@dataclass(frozen=True)
class ModelSpec:
    """What a worker process needs to load a sweep's model: the arguments of
    :func:`genlab.load` (a name or folder; picklable, unlike the model)."""

    source: str
    revision: str | None = None
    dtype: str | None = None  # a torch dtype's name: "bfloat16"
    quantization: str | None = None  # "int4" or "int8"


def spec_of(lm) -> ModelSpec:
    """What a worker needs to load ``lm`` again (``lm.load_args``, which
    :func:`genlab.load` sets): the model spec :func:`worker_model` takes; a ValueError for a
    model object."""
    args = getattr(lm, "load_args", None)
    if not args:
        raise ValueError(
            "executor=: the model must be loaded by name or folder (genlab.load('demo') or "
            "genlab.load('path/to/folder')), or given as that name, so that each worker can "
            "load it; a model object cannot be sent to other processes"
        )
    dtype = args.get("dtype")
    return ModelSpec(
        str(args["source"]),
        args.get("revision"),
        None if dtype is None else str(dtype).removeprefix("torch."),
        args.get("quantization"),
    )


_WORKER_MODELS: dict[ModelSpec, Any] = {}  # per process: a worker loads each model once
WORKER_LOADS: list[ModelSpec] = []  # the models this process loaded for sweep tasks, in order


def worker_model(spec: ModelSpec):
    """The model of ``spec`` in this process, loaded on first use and kept (the worker's
    later tasks reuse it; :data:`WORKER_LOADS` records each load)."""
    if spec not in _WORKER_MODELS:
        from ..lm import load

        _WORKER_MODELS[spec] = load(
            spec.source, revision=spec.revision, dtype=spec.dtype, quantization=spec.quantization
        )
        WORKER_LOADS.append(spec)
    return _WORKER_MODELS[spec]


#: the process that imported this module: a worker whose pid differs was forked from it
_IMPORTED_IN = os.getpid()


def _remote_setting(spec: ModelSpec, setting: dict, *args):
    """One setting of a sweep in a worker process (see :func:`sweep`'s ``executor``)."""
    if os.getpid() != _IMPORTED_IN:
        # a forked worker: torch's thread pool (OpenMP's team) was copied without its
        # threads, and its first parallel region would wait for them forever; on one
        # thread torch never enters one
        torch.set_num_threads(1)
    return _sweep_setting(worker_model(spec), setting, *args)


def _sweep_setting(lm, setting, prompt_ids, n, seed, config):
    """The samples and the metrics of one setting: (sample rows, metric row)."""
    rows: list[dict] = []
    settings = {**config, **setting}
    # one row per call where the reference returns one (no sampling, no beams): the
    # setting's n samples are that one, repeated
    one = not settings.get("do_sample") and int(settings.get("num_beams") or 1) == 1
    rows_per_call = 1 if one else n
    res = lm.generate(prompt_ids[None], seed=seed, num_return_sequences=rows_per_call, **settings)
    generated_ids = res.generated_ids.tolist() * (n // rows_per_call)
    eos = set(res.run.views.eos_token_ids)
    pad = res.run.views.pad_token_id
    generated = []
    ended = []
    for row in generated_ids:
        toks, hit = [], False
        for t in row:
            toks.append(t)
            if t in eos:
                hit = True
                break
        if not hit and pad is not None and pad not in eos:
            while toks and toks[-1] == pad and len(toks) < len(row):
                toks.pop()
        generated.append(toks)
        ended.append(hit)
    nonempty = [i for i, g in enumerate(generated) if g]
    lps = [float("nan")] * n
    if nonempty:
        sc = _score_samples(lm, prompt_ids, [generated[i] for i in nonempty])
        for i, v in zip(nonempty, sc, strict=True):
            lps[i] = v
    tok = lm.tokenizer
    for i, (toks, hit) in enumerate(zip(generated, ended, strict=True)):
        text = tok.decode(toks, skip_special_tokens=True) if tok is not None else str(toks)
        rows.append(
            {
                **setting,
                "sample": i,
                "text": text,
                "length": len(toks),
                "ended_with_eos": hit,
                "mean_logprob": lps[i],
                "repetition": repetition(toks),
                "token_ids": toks,
            }
        )
    lengths = [len(g) for g in generated]
    metrics = {
        **setting,
        "mean_logprob": float(pd.Series(lps).mean()),
        "distinct_1": distinct(generated, 1),
        "distinct_2": distinct(generated, 2),
        "repetition": float(pd.Series([repetition(g) for g in generated]).mean()),
        "length": sum(lengths) / n,
        "eos_rate": sum(ended) / n,
    }
    return rows, metrics


def _score_samples(lm, prompt: torch.Tensor, samples: list[list[int]]) -> list[float]:
    """Mean log-prob of each sample's tokens under the raw model, the prompt as context."""
    from .scoring import score

    sc = score(lm, samples, context=prompt, alternatives=0)
    return sc.summary.sort_values("row").mean_logprob.tolist()
