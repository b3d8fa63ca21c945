"""Sampling sweeps: many samples under every combination of a few settings, and numbers
that tell quality from diversity.

``genlab.sweep(lm, prompt, grid={"temperature": [0.5, 1.0, 1.5], "top_p": [0.8, 1.0]},
n=16, seed=0)`` generates ``n`` samples for each combination of the grid (one batched
generation per setting, ``num_return_sequences=n``, the same seed for every setting), and
measures per setting:

* ``mean_logprob``: the samples' mean per-token log-prob under the *raw* model (no
  temperature, no top-p: :func:`genlab.scoring.score`), a stand-in for fluency;
* ``distinct_1`` / ``distinct_2``: distinct tokens / token pairs over all tokens / pairs of
  the setting's samples (higher: more diverse);
* ``repetition``: the share of a sample's token pairs that already appeared earlier in the
  same sample (higher: loops), averaged;
* ``length``: generated tokens per sample (EOS included); ``eos_rate``: the share of
  samples that ended with EOS (the others hit ``max_new_tokens``).
"""

from __future__ import annotations

import itertools
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
    from .config import GenerationConfig

    if not isinstance(grid, dict) or not grid:
        raise ValueError(
            "grid: give a dict of GenerationConfig fields to lists of values, e.g. "
            '{"temperature": [0.7, 1.0], "top_p": [0.9, 1.0]}'
        )
    plain = GenerationConfig()
    out = {}
    for key, values in grid.items():
        if not hasattr(plain, key):
            raise ValueError(f"grid: {key!r} is not a GenerationConfig field")
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
    max_new_tokens: int = 20,
    chat: bool | None = None,
    system: str | None = None,
    progress: Any = None,
    **config: Any,
) -> SweepResult:
    """Sample ``n`` continuations of ``prompt`` for every combination of ``grid`` (see the
    module docstring). Other generation settings go in ``config`` (sampling is on unless
    the grid or config says ``do_sample=False``). ``progress``: an optional callable
    ``(done, total)`` called after each setting. Reproducible: the same arguments give the
    same samples.

    lm: an :class:`~genlab.lm.LM` (or any model :func:`genlab.load` takes); seed: the seed
    of every setting's batch; max_new_tokens: the length of each sample; chat, system: how
    the prompt is encoded (chat template, system message).

    (Not run as a test: it samples a grid of settings for seconds and prints a wide table (notebook
    11).)

    >>> sw = genlab.sweep(lm, "Describe the sea.", {"temperature": [0.5, 1]})  # doctest: +SKIP
    >>> sw.metrics                                                 # doctest: +SKIP
    """
    from .lm import LM

    if not isinstance(lm, LM):
        lm = LM(lm)
    grid = _check_grid(grid)
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n={n!r} must be a positive integer (samples per setting)")
    clash = sorted(set(grid) & set(config))
    if clash:
        raise ValueError(f"{clash}: given both in grid and as a setting; keep one")
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
    for done, values in enumerate(settings):
        setting = dict(zip(keys, values, strict=True))
        res = lm.generate(
            prompt_ids[None],
            seed=seed,
            num_return_sequences=n,
            max_new_tokens=max_new_tokens,
            **config,
            **setting,
        )
        eos = set(res.run.eos_token_ids)
        pad = res.run.pad_token_id
        generated = []
        ended = []
        for row in res.generated_ids.tolist():
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
            sample_rows.append(
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
        metric_rows.append(
            {
                **setting,
                "mean_logprob": float(pd.Series(lps).mean()),
                "distinct_1": distinct(generated, 1),
                "distinct_2": distinct(generated, 2),
                "repetition": float(pd.Series([repetition(g) for g in generated]).mean()),
                "length": sum(lengths) / n,
                "eos_rate": sum(ended) / n,
            }
        )
        if progress is not None:
            progress(done + 1, len(settings))
    return SweepResult(
        samples=pd.DataFrame(sample_rows),
        metrics=pd.DataFrame(metric_rows),
        grid=grid,
        seconds=time.perf_counter() - t0,
        n=n,
    )


def _score_samples(lm, prompt: torch.Tensor, samples: list[list[int]]) -> list[float]:
    """Mean log-prob of each sample's tokens under the raw model, the prompt as context."""
    from .scoring import score

    sc = score(lm, samples, context=prompt, alternatives=0)
    return sc.summary.sort_values("row").mean_logprob.tolist()
