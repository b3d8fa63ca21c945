"""Spending compute at decoding time: draw N samples, then choose, vote or check.

One sample is one guess. Drawing ``n`` seeded samples of the same prompt and keeping one by
a rule is the cheapest way to trade compute for accuracy:

* :func:`best_of_n` keeps the sample a *verifier* (``text -> bool | float``) rates best,
  or, without one, the sample the model itself scores highest (its mean or total
  log-prob, or any ``text -> float`` reward stand-in such as :func:`lm_reward`);
* :func:`self_consistency` maps every sample to an answer with ``extract`` and keeps the
  most frequent answer (Wang et al. 2023, "Self-Consistency Improves Chain of Thought
  Reasoning in Language Models");
* :func:`coverage_curve` measures, over a set of tasks with exact checkers, how often at
  least one of N samples is right (pass@N, estimated without bias from ``n >= N`` samples as
  in Chen et al. 2021, "Evaluating Large Language Models Trained on Code"), how often the
  majority answer of N samples is, and how often the best-scored of N samples is, each
  with a bootstrap interval over the tasks: the curves of Brown et al. 2024, "Large
  Language Monkeys".

The samples are drawn in batches (``batch_size`` rows per generation, batch ``b`` seeded
with ``seed + b``), so the same arguments give the same table, in this process or on an
executor (``executor=``: a :class:`concurrent.futures.Executor` or a Dask client's
``get_executor()``, as :func:`genlab.sweep` takes). Each sample's log-prob is read from the
raw logits of the generation itself (the model's distribution before temperature or
top-k), the number :func:`genlab.score` gives for it.

A prompt is computed once, not once per row: all but its last token in one row
(:func:`prompt_prefill`), whose keys and values every batch of its samples starts from, so
that each forward pass of a batch takes one token a row (1.5x less CPU time for 64 rows of
a 5-token prompt and 4 new tokens; benchmarks/README.md). What a sample's bits depend on:
the seed, its batch (``batch_size``: the rows of a batch draw from one generator, row after
row, and share each matrix product) and its place in the batch; not on the executor.

(Not run as a test: it samples for seconds; tests/test_compute.py checks it.)

>>> best = genlab.best_of_n(lm, "The capital of Ghana is", 16, max_new_tokens=4,
...                         verifier=lambda t: "Accra" in t)      # doctest: +SKIP
>>> best.text, best.samples[["text", "score", "verified", "chosen"]]  # doctest: +SKIP
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd
import torch

from .sweeps import spec_of

#: the scores a sample can be ranked by without a callable: the raw model's mean
#: log-prob per generated token, or the log-prob of the whole continuation
SCORES = ("mean_logprob", "sum_logprob")
#: rows per generation unless told: the most rows a run may have on a CPU
#: (:data:`genlab.config.limits.MAX_ROWS`), fixed so that the table never depends on the
#: memory free at the moment
BATCH_SIZE = 64
#: most samples of one prompt: the table keeps every one (1,024 batches of 64)
MAX_SAMPLES = 65_536
#: the answer label of samples whose ``extract`` gave None
NO_ANSWER = "(no answer)"
#: the rules a :class:`SampleSet` records a choice for
RULES = ("score", "vote", "verifier")
#: the curves of a :class:`Coverage`, in the order the plot draws them
CURVES = ("pass@N", "majority@N", "best-of-N")

SAMPLE_COLUMNS = (
    "sample", "text", "answer", "score", "mean_logprob", "sum_logprob", "length",
    "ended_with_eos", "verified", "error", "chosen",
)  # fmt: skip


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimate of pass@k from ``n`` samples of which ``c`` are correct:
    ``1 - C(n - c, k) / C(n, k)``, the chance that ``k`` of the ``n`` samples drawn without
    replacement hold at least one correct one (Chen et al. 2021, eq. 1).

    n: samples drawn; c: how many of them are correct; k: the budget (``1 <= k <= n``).

    >>> pass_at_k(4, 1, 2)   # 1 - C(3, 2) / C(4, 2) = 1 - 3/6
    0.5
    """
    for name, value in (("n", n), ("c", c), ("k", k)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
            raise ValueError(f"{name}={value!r}: give a non-negative integer")
    if not 1 <= k <= n:
        raise ValueError(f"k={k}: give 1 <= k <= n (n={n} samples drawn)")
    if c > n:
        raise ValueError(f"c={c}: at most n={n} samples can be correct")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def lm_reward(lm, template: str, *, chat: bool | None = None) -> Callable[[str], float]:
    """A reward stand-in: ``text -> float``, the mean log-prob ``lm`` gives the text's
    tokens after ``template`` (a context with ``{text}`` left out: the text follows it).
    A second model, or the same one under another prompt, rates the samples.

    lm: the scoring LM; template: the context the text is scored after; chat: encode the
    context with the chat template (as :func:`genlab.score`'s ``chat``).

    (Not run as a test: it samples for seconds; tests/test_compute.py checks it.)

    >>> judge = lm_reward(lm, "A correct answer: the capital of Ghana is")   # doctest: +SKIP
    >>> genlab.best_of_n(lm, "The capital of Ghana is", 8, score=judge)      # doctest: +SKIP
    """
    if not isinstance(template, str) or not template:
        raise ValueError("template: give the context text the samples are scored after")

    def reward(text: str) -> float:
        from .scoring import score

        if not text:
            return float("-inf")
        return score(lm, text, context=template, chat=chat, alternatives=0).mean_logprob

    return reward


@dataclass
class SampleSet:
    """What :func:`best_of_n` and :func:`self_consistency` return.

    samples: one row per sample (sample, text, answer, score, mean_logprob, sum_logprob,
    length, ended_with_eos, verified, error, chosen); rule: the rule that chose
    (``"score"``, ``"vote"`` or ``"verifier"``); choices: the sample each rule would choose
    (None where a rule has nothing to go on); prompt: the prompt as given; seconds: wall
    time; n: samples drawn.
    """

    samples: pd.DataFrame
    rule: str
    choices: dict[str, int | None]
    prompt: Any
    seconds: float
    n: int
    settings: dict = field(default_factory=dict, repr=False)

    @property
    def chosen(self) -> int | None:
        """The index of the sample the rule chose (None: no sample had an answer)."""
        return self.choices[self.rule]

    @property
    def text(self) -> str | None:
        """The chosen sample's text."""
        i = self.chosen
        return None if i is None else str(self.samples.text.iloc[i])

    @property
    def votes(self) -> pd.Series:
        """The share of the samples giving each answer, largest first; samples without
        one count as :data:`NO_ANSWER`."""
        answers = self.samples.answer.fillna(NO_ANSWER)
        return answers.value_counts(normalize=True, sort=True).rename("share")

    @property
    def answer(self) -> str | None:
        """The majority answer (the vote's choice); None when no sample had one."""
        i = self.choices["vote"]
        return None if i is None else str(self.samples.answer.iloc[i])

    def __repr__(self) -> str:
        return (
            f"SampleSet(n={self.n}, rule={self.rule!r}, chosen={self.chosen}, text={self.text!r})"
        )

    def _repr_html_(self) -> str:
        return (
            f"<b>{self.n} samples</b>, chosen by {self.rule}: sample {self.chosen} "
            f"(.samples, .votes; genlab.widgets.SampleView)"
            + self.samples.drop(columns=["mean_logprob", "sum_logprob"]).to_html(
                index=False, float_format="%.3f"
            )
        )


# -- drawing ----------------------------------------------------------------------------------


def _check_n(n, name: str = "n") -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"{name}={n!r}: give how many samples to draw, an integer >= 1")
    if n > MAX_SAMPLES:
        raise ValueError(
            f"{name}={n:,}: at most {MAX_SAMPLES:,} samples of one prompt (the table keeps "
            "every one); draw fewer"
        )
    return int(n)


def _as_lm(lm):
    from ..lm import LM, load

    if isinstance(lm, (str, os.PathLike)):
        return load(lm)
    return lm if isinstance(lm, LM) else LM(lm)


def _check_executor(executor):
    if executor is not None and not callable(getattr(executor, "submit", None)):
        raise ValueError(
            f"executor={executor!r}: give a concurrent.futures.Executor (an object with "
            "submit), e.g. ProcessPoolExecutor() or a Dask Client's get_executor()"
        )


def _settings(lm, prompt_ids: torch.Tensor, batch_size, max_new_tokens, config) -> dict:
    """The generation settings of every batch, checked against the model and machine."""
    from ..config.limits import model_limits

    if "num_return_sequences" in config:
        raise ValueError(
            "num_return_sequences: the samples are drawn n at a time in batches; pass n= "
            "(and batch_size= for the rows of one generation) instead"
        )
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(
            f"batch_size={batch_size!r}: give the rows of one generation, an integer >= 1 "
            f"(default {BATCH_SIZE})"
        )
    settings = {**config, "max_new_tokens": 20 if max_new_tokens is None else max_new_tokens}
    settings.setdefault("do_sample", True)
    limits = model_limits(lm.info)
    try:
        limits.check(SimpleNamespace(num_return_sequences=batch_size, **settings), len(prompt_ids))
    except ValueError as err:
        raise ValueError(
            f"batch_size={batch_size} (rows drawn at once): {err} Lower batch_size; n "
            "samples are then drawn in more batches."
        ) from None
    return settings


def _prompt_ids(lm, prompt, chat, system) -> torch.Tensor:
    ids, mask = lm.encode(prompt, chat=chat, system=system)
    if ids.shape[0] != 1:
        raise ValueError("prompt: give one prompt (a text, messages or ids), not a batch")
    return ids[0][mask[0].bool()]


def prompt_prefill(lm, prompt_ids: torch.Tensor):
    """The keys and values of all but the last token of ``prompt_ids`` (1-D), computed once
    in one row: what every batch of samples of this prompt starts from (:func:`_batch`).
    None where a batch cannot start from it: a prompt of one token, or a model whose cache
    is not genlab's :class:`~genlab.models.base.KVCache` or whose forward pass hooks can
    change (:func:`genlab.runtime.forward_cache.model_is_plain`)."""
    from ..models.base import KVCache
    from ..runtime.forward_cache import model_is_plain

    model = lm.model
    if len(prompt_ids) < 2 or not model_is_plain(model):
        return None
    cache = model.new_cache(1)
    if type(cache) is not KVCache:
        return None
    with torch.no_grad():
        model.forward(prompt_ids[None, :-1], cache=cache)
    return cache


def _start_from(run, prefix, rows: int) -> bool:
    """Put ``prefix`` (:func:`prompt_prefill`) into every row of a run that has not
    stepped yet, so that its first forward pass computes only the prompt's last token; False
    (the run untouched) where the run is not plain sampling or greedy search on ``rows``
    rows of one prompt in a :class:`~genlab.models.base.KVCache`."""
    from ..models.base import KVCache

    state = run.state
    cache = state.kv_cache
    if (
        prefix is None
        or state.plan.mode not in ("sample", "greedy_search")
        or state.plan.compiled is not None
        or type(cache) is not KVCache
        or cache.length()
        or state.sequences.shape[0] != rows
        or state.sequences.shape[1] != prefix.length() + 1
        or not bool(state.attention_mask.all())
    ):
        return False
    n = prefix.length()  # a finished pass: every layer holds the same positions
    for layer, (k, v) in enumerate(zip(prefix.keys, prefix.values, strict=True)):
        cache.append(
            layer, k[:, :, :n].expand(rows, -1, -1, -1), v[:, :, :n].expand(rows, -1, -1, -1)
        )
    return True


def _batch(lm, prompt_ids: torch.Tensor, rows: int, seed: int, settings: dict,
           prefix=None) -> list[dict]:  # fmt: skip
    """``rows`` seeded samples of one generation: text, tokens and raw log-probs. With
    several rows, the prompt but its last token is not computed per row: every row starts
    from ``prefix`` (:func:`prompt_prefill`, computed here when None), so a batch's first
    forward pass is one token a row, as each later step is."""
    run = lm.start(
        prompt_ids[None], seed=seed, num_return_sequences=rows, output_logits=True,
        output_scores=False, return_dict_in_generate=True, keep_history=False, **settings,
    )  # fmt: skip
    if rows > 1 and run.state.sequences.shape[0] == rows:
        _start_from(run, prompt_prefill(lm, prompt_ids) if prefix is None else prefix, rows)
    run.run(keep_on_interrupt=False)
    res = run.result()
    generated = res.generated_ids
    steps = list(res.output.logits)
    if generated.shape[0] != rows:  # greedy: the reference returns one row per prompt
        generated = generated.expand(rows, -1)
        steps = [x.expand(rows, -1) for x in steps]
    eos = set(run.views.eos_token_ids)
    tok = lm.tokenizer
    # each step's log-softmax alone: a (rows, vocab) tensor at a time, not one for every step
    chosen = torch.empty(generated.shape, dtype=torch.float32)
    for i in range(len(steps)):
        x = steps[i]
        steps[i] = None
        chosen[:, i] = x.float().log_softmax(-1).gather(-1, generated[:, i, None])[:, 0]
    chosen = chosen.tolist()
    out = []
    for ids, lps in zip(generated.tolist(), chosen, strict=True):
        end = next((i + 1 for i, t in enumerate(ids) if t in eos), None)
        toks = ids if end is None else ids[:end]
        kept = lps[: len(toks)]
        total = float(sum(kept))
        text = tok.decode(toks, skip_special_tokens=True) if tok is not None else str(toks)
        out.append({
            "text": text,
            "token_ids": toks,
            "length": len(toks),
            "ended_with_eos": end is not None,
            "mean_logprob": total / len(toks) if toks else float("nan"),
            "sum_logprob": total,
        })  # fmt: skip
    return out


#: the process that imported this module: a worker whose pid differs was forked from it
_IMPORTED_IN = os.getpid()


def _remote_batch(spec, prompt_ids, rows, seed, settings):
    """One batch in a worker process (see ``executor`` in :func:`best_of_n`)."""
    from .sweeps import worker_model

    if os.getpid() != _IMPORTED_IN:
        # a forked worker: torch's thread pool did not survive the fork (genlab.experiments.sweeps)
        torch.set_num_threads(1)
    return _batch(worker_model(spec), prompt_ids, rows, seed, settings)


def _jobs(n: int, batch_size: int, seed: int) -> list[tuple[int, int]]:
    """(rows, seed) of each batch: ``n`` samples in batches of ``batch_size``."""
    return [(min(batch_size, n - start), seed + b)
            for b, start in enumerate(range(0, n, batch_size))]  # fmt: skip


def _progress_bar(progress, total: int, desc: str):
    if not progress:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="batch", desc=desc)


def _run_jobs(lm, executor, spec, work: list[tuple], progress, desc: str) -> list[list[dict]]:
    """Run every (prompt_ids, rows, seed, settings) batch, in order; a tqdm bar with
    ``progress``."""
    bar = _progress_bar(progress, len(work), desc)
    try:
        if executor is None:
            out, last, prefix = [], None, None  # a prompt's batches follow one another
            for prompt_ids, rows, seed, settings in work:
                key = tuple(prompt_ids.tolist())
                if rows > 1 and key != last:  # the prompt's prefill, once for its batches
                    last, prefix = key, prompt_prefill(lm, prompt_ids)
                out.append(
                    _batch(lm, prompt_ids, rows, seed, settings, prefix if key == last else None)
                )
                if bar is not None:
                    bar.update(1)
            from ..runtime.quant import release_freed_memory

            release_freed_memory()  # the batches' per-step tensors, kept by glibc's heap
            return out
        futures = [executor.submit(_remote_batch, spec, *job) for job in work]
        if bar is not None:
            from concurrent.futures import as_completed

            for _ in as_completed(futures):
                bar.update(1)
        return [f.result() for f in futures]
    finally:
        if bar is not None:
            bar.close()


# -- judging ----------------------------------------------------------------------------------


def _call(fn, text: str, what: str):
    """``fn(text)``, or (None, the error in words) when it raises."""
    try:
        return fn(text), ""
    except Exception as err:  # reported per sample, not raised
        return None, f"{what} raised {type(err).__name__}: {err}"


def _judge(rows: list[dict], *, score, verifier, extract) -> pd.DataFrame:
    """The sample table: every sample's answer, score and verdict (errors per sample)."""
    for i, row in enumerate(rows):
        errors = []
        row["sample"] = i
        answer = None
        if extract is not None:
            answer, err = _call(extract, row["text"], "extract")
            if err:
                errors.append(err)
            elif answer is not None and not isinstance(answer, str):
                errors.append(f"extract returned {answer!r}, not a string or None")
                answer = None
        row["answer"] = answer
        if callable(score):
            value, err = _call(score, row["text"], "score")
            if err or not _is_number(value):
                errors.append(err or f"score returned {value!r}, not a number")
                value = float("nan")
            row["score"] = float(value)
        else:
            row["score"] = row[score]
        verdict = None
        if verifier is not None:
            verdict, err = _call(verifier, row["text"], "verifier")
            if err:
                errors.append(err)
            elif not _is_number(verdict):
                errors.append(f"verifier returned {verdict!r}, not a bool or a number")
                verdict = None
        row["verified"] = verdict
        row["error"] = "; ".join(errors)
    table = pd.DataFrame(rows)
    for column in ("answer", "verified"):  # None stays None (pandas would make it NaN)
        table[column] = table[column].astype(object).where(table[column].notna(), None)
    table["chosen"] = False
    return table[[*SAMPLE_COLUMNS, "token_ids"]]


def _is_number(value) -> bool:
    return isinstance(value, (bool, int, float, np.integer, np.floating)) and not (
        isinstance(value, float) and math.isnan(value)
    )


def _best(keys: list[tuple]) -> int | None:
    """The index of the largest key (the first of equals); None when there is none."""
    if not keys:
        return None
    return max(range(len(keys)), key=lambda i: (keys[i], -i))


def _score_key(value) -> float:
    return -math.inf if value is None or math.isnan(value) else float(value)


def _choices(table: pd.DataFrame, verifier) -> dict[str, int | None]:
    scores = [_score_key(v) for v in table.score]
    choices: dict[str, int | None] = {"score": _best([(s,) for s in scores])}
    answers = [a if isinstance(a, str) else None for a in table.answer]
    counts: dict[str, int] = {}
    best_score: dict[str, float] = {}
    for a, s in zip(answers, scores, strict=True):
        if a is not None:
            counts[a] = counts.get(a, 0) + 1
            best_score[a] = max(best_score.get(a, -math.inf), s)
    if counts:  # the most votes; among equals the answer with the best-scored sample
        top = max(counts, key=lambda a: (counts[a], best_score[a]))
        members = [i for i, a in enumerate(answers) if a == top]
        choices["vote"] = max(members, key=lambda i: (scores[i], -i))
    else:
        choices["vote"] = None
    if verifier is None:
        choices["verifier"] = None
    else:
        verdicts = [-math.inf if v is None else float(v) for v in table.verified]
        choices["verifier"] = _best(list(zip(verdicts, scores, strict=True)))
    return choices


def _draw_set(lm, prompt, n, *, rule, verifier, score, extract, seed, batch_size,
              max_new_tokens, chat, system, executor, progress, config) -> SampleSet:  # fmt: skip
    t0 = time.perf_counter()
    n = _check_n(n)
    _check_score(score)
    for name, fn in (("verifier", verifier), ("extract", extract)):
        if fn is not None and not callable(fn):
            raise ValueError(f"{name}={fn!r}: give a function of the sample's text")
    _check_executor(executor)
    lm = _as_lm(lm)
    spec = spec_of(lm) if executor is not None else None
    prompt_ids = _prompt_ids(lm, prompt, chat, system)
    settings = _settings(lm, prompt_ids, batch_size, max_new_tokens, config)
    work = [(prompt_ids, rows, s, settings) for rows, s in _jobs(n, batch_size, seed)]
    batches = _run_jobs(lm, executor, spec, work, progress, f"genlab {rule}")
    rows = [row for batch in batches for row in batch]
    table = _judge(rows, score=score, verifier=verifier, extract=extract)
    choices = _choices(table, verifier)
    set_ = SampleSet(table, rule, choices, prompt, 0.0, n, settings)
    if set_.chosen is not None:
        table.loc[set_.chosen, "chosen"] = True
    set_.seconds = time.perf_counter() - t0
    return set_


def _check_score(score) -> None:
    if callable(score) or score in SCORES:
        return
    raise ValueError(
        f"score={score!r}: give one of {', '.join(map(repr, SCORES))} (the raw model's "
        "log-prob of the sample, per token or in all) or a function text -> float, e.g. "
        "genlab.experiments.compute.lm_reward(other_lm, template)"
    )


def best_of_n(
    lm,
    prompt: Any,
    n: int,
    *,
    verifier: Callable[[str], bool | float] | None = None,
    score: str | Callable[[str], float] = "mean_logprob",
    extract: Callable[[str], str | None] | None = None,
    seed: int = 0,
    batch_size: int = BATCH_SIZE,
    max_new_tokens: int | None = None,
    chat: bool | None = None,
    system: str | None = None,
    executor: Any = None,
    progress: bool = False,
    **config: Any,
) -> SampleSet:
    """Draw ``n`` samples of ``prompt`` and keep the best: the one ``verifier`` rates
    highest (True above False; among equals the better score), or without a verifier the
    one with the highest ``score``. Returns a :class:`SampleSet`.

    lm: an LM (or a name :func:`genlab.load` takes); prompt: a text, messages or ids;
    n: samples to draw (at most :data:`MAX_SAMPLES`); verifier: ``text -> bool | float``
    (one that raises is reported in the sample's ``error``, its verdict None); score:
    ``"mean_logprob"`` (default), ``"sum_logprob"``, or ``text -> float``
    (:func:`lm_reward`: a second model as a reward stand-in); extract: ``text -> answer``
    for the vote shares (None: no answer); seed: batch ``b`` is seeded ``seed + b``;
    batch_size: rows of one generation (checked against what the model and machine hold,
    :mod:`genlab.config.limits`); max_new_tokens: each sample's length (20 unless given);
    chat, system: how the prompt is encoded; executor: run the batches on a
    :class:`concurrent.futures.Executor` or a Dask client's executor (the model must come
    from ``genlab.load(name_or_folder)``; the table equals the in-process one); progress:
    a tqdm bar of the batches; config: other generation settings (sampling is on unless
    ``do_sample=False``).

    (Not run as a test: it samples for seconds; tests/test_compute.py checks it.)

    >>> best = genlab.best_of_n(lm, "The capital of Ghana is", 16, max_new_tokens=4,
    ...                         verifier=lambda t: "Accra" in t)        # doctest: +SKIP
    >>> best.text                                                      # doctest: +SKIP
    ' Accra, often'
    """
    return _draw_set(
        lm, prompt, n, rule="score" if verifier is None else "verifier", verifier=verifier,
        score=score, extract=extract, seed=seed, batch_size=batch_size,
        max_new_tokens=max_new_tokens, chat=chat, system=system, executor=executor,
        progress=progress, config=config,
    )  # fmt: skip


def self_consistency(
    lm,
    prompt: Any,
    n: int,
    *,
    extract: Callable[[str], str | None],
    verifier: Callable[[str], bool | float] | None = None,
    score: str | Callable[[str], float] = "mean_logprob",
    seed: int = 0,
    batch_size: int = BATCH_SIZE,
    max_new_tokens: int | None = None,
    chat: bool | None = None,
    system: str | None = None,
    executor: Any = None,
    progress: bool = False,
    **config: Any,
) -> SampleSet:
    """Draw ``n`` samples of ``prompt``, map each to an answer with ``extract`` and keep
    the most frequent answer (Wang et al. 2023); the chosen sample is its best-scored
    one. Answers tied on votes are ordered by their best sample's score. Samples whose
    ``extract`` gives None count as "no answer" and do not vote. Returns a
    :class:`SampleSet` (``.answer``, ``.votes``).

    lm, prompt, n, seed, batch_size, max_new_tokens, chat, system, executor, progress,
    config: as in :func:`best_of_n`; extract: ``text -> str | None``; verifier: an
    optional ``text -> bool | float``, recorded per sample (``choices["verifier"]`` is
    what it would choose); score: what orders samples within an answer (as in
    :func:`best_of_n`).

    (Not run as a test: it samples for seconds; tests/test_compute.py checks it.)

    >>> sc = genlab.self_consistency(lm, "The capital of Ghana is", 16, max_new_tokens=4,
    ...                              extract=lambda t: t.split()[0] if t.split() else None)
    ... # doctest: +SKIP
    >>> sc.answer, sc.votes.head(3)                                   # doctest: +SKIP
    """
    if not callable(extract):
        raise ValueError(
            f"extract={extract!r}: give a function text -> answer string (or None: no answer)"
        )
    return _draw_set(
        lm, prompt, n, rule="vote", verifier=verifier, score=score, extract=extract,
        seed=seed, batch_size=batch_size, max_new_tokens=max_new_tokens, chat=chat,
        system=system, executor=executor, progress=progress, config=config,
    )  # fmt: skip


# -- coverage ---------------------------------------------------------------------------------


@dataclass
class Coverage:
    """What :func:`coverage_curve` returns.

    table: one row per (N, curve): ``N``, ``curve`` (:data:`CURVES`), ``value`` (the mean
    over tasks), ``low`` / ``high`` (the bootstrap interval over tasks); tasks: one row per
    task (task, prompt, correct: samples that pass, share, greedy_text, greedy_correct
    when greedy was run); samples: one row per sample (task, sample, text, answer, score,
    correct, error); n: samples per task; seconds: wall time; level: the interval's level;
    per_task: one row per (task, N, curve) with the task's own ``value`` (``table``'s
    values are their means).
    """

    table: pd.DataFrame
    tasks: pd.DataFrame
    samples: pd.DataFrame
    n: int
    seconds: float
    level: float = 0.95
    per_task: pd.DataFrame | None = None

    def value(self, curve: str, n: int) -> float:
        """The mean over tasks of ``curve`` (one of :data:`CURVES`) at N = ``n``."""
        rows = self.table[(self.table.curve == curve) & (self.table.N == n)]
        if rows.empty:
            raise ValueError(f"curve={curve!r}, n={n}: not in the table (curves {CURVES}, "
                             f"N in {sorted(set(self.table.N))})")  # fmt: skip
        return float(rows.value.iloc[0])

    def __repr__(self) -> str:
        return (
            f"Coverage({len(self.tasks)} tasks x {self.n} samples, N up to "
            f"{int(self.table.N.max())})"
        )

    def _repr_html_(self) -> str:
        wide = self.table.pivot(index="N", columns="curve", values="value")[list(CURVES)]
        return (
            f"<b>coverage</b>: {len(self.tasks)} tasks x {self.n} samples (.table with "
            "intervals, .tasks, .samples; genlab.plots.coverage_plot)"
            + wide.to_html(float_format="%.3f")
        )


def _task_parts(task, i: int, extract):
    """(prompt, checker, extract) of one task: a (prompt, checker) pair, or an object with
    ``prompt`` and ``check`` (and optionally ``extract``), such as genlab.experiments.tasks.Task."""
    if hasattr(task, "prompt") and callable(getattr(task, "check", None)):
        own = getattr(task, "extract", None)
        return task.prompt, task.check, extract or (own if callable(own) else None)
    if isinstance(task, (tuple, list)) and len(task) == 2 and callable(task[1]):
        return task[0], task[1], extract
    raise ValueError(
        f"tasks[{i}]={task!r}: give (prompt, checker) pairs, checker a function text -> "
        "bool, or genlab.experiments.tasks.Task objects"
    )


def _first_word(text: str) -> str | None:
    """The default answer of a sample: its first word, without case or punctuation."""
    words = text.split()
    if not words:
        return None
    return words[0].strip(".,;:!?\"'").casefold() or None


def _vote_correct(answers: list, correct: list[bool], scores: list[float], size: int,
                  draws: int, rng: np.random.Generator) -> float:  # fmt: skip
    """The share of ``draws`` random ``size``-subsets of the samples whose majority answer
    (ties: the better best score) is right; the answer is judged by its best sample."""
    n = len(answers)
    if size == n:
        subsets = [np.arange(n)]
    else:
        subsets = [rng.choice(n, size=size, replace=False) for _ in range(draws)]
    hits = 0
    for sub in subsets:
        counts: dict = {}
        best: dict = {}
        for i in sub:
            a = answers[i]
            if a is None:
                continue
            counts[a] = counts.get(a, 0) + 1
            if a not in best or (scores[i], -i) > (scores[best[a]], -best[a]):
                best[a] = i
        if counts:
            top = max(counts, key=lambda a: (counts[a], scores[best[a]]))
            hits += bool(correct[best[top]])
    return hits / len(subsets)


def _best_of_correct(correct: list[bool], scores: list[float], size: int) -> float:
    """The exact chance that the best-scored of a random ``size``-subset is right (ties:
    the lower sample index wins)."""
    n = len(correct)
    order = sorted(range(n), key=lambda i: (scores[i], -i))  # worst first
    total = math.comb(n, size)
    hit = sum(math.comb(rank, size - 1) for rank, i in enumerate(order) if correct[i])
    return hit / total


def _bootstrap(values: np.ndarray, draws: int, level: float, rng) -> tuple:
    """(low, high) percentile interval of the mean of ``values`` (tasks x Ns) per column."""
    idx = rng.integers(0, values.shape[0], size=(draws, values.shape[0]))
    means = values[idx].mean(axis=1)
    tail = (1 - level) / 2 * 100
    return np.percentile(means, tail, axis=0), np.percentile(means, 100 - tail, axis=0)


def coverage_curve(
    lm,
    tasks: Sequence,
    ns: Sequence[int] = (1, 2, 4, 8, 16, 32, 64, 128, 256),
    *,
    n: int | None = None,
    extract: Callable[[str], str | None] | None = None,
    score: str | Callable[[str], float] = "mean_logprob",
    seed: int = 0,
    batch_size: int = BATCH_SIZE,
    max_new_tokens: int | None = None,
    chat: bool | None = None,
    system: str | None = None,
    greedy: bool = True,
    bootstrap: int = 1000,
    votes: int = 200,
    level: float = 0.95,
    executor: Any = None,
    progress: bool = False,
    **config: Any,
) -> Coverage:
    """Coverage, majority vote and best-of-N against the number of samples N, over
    ``tasks`` (see the module docstring). Every task gets ``n`` samples (default
    ``max(ns)``), task ``t``'s batches seeded from ``seed + 1000 * t``. For each N:

    * ``pass@N``: the unbiased estimate from the ``n`` samples (:func:`pass_at_k`);
    * ``majority@N``: the chance that the majority answer of N random samples is right
      (``votes`` random subsets per task; exact at N = n);
    * ``best-of-N``: the chance that the best-scored of N random samples is right (exact).

    Each is averaged over the tasks, with a percentile bootstrap interval over the tasks
    (``bootstrap`` resamples, at ``level``). Returns a :class:`Coverage`.

    lm: an LM or a name; tasks: (prompt, checker) pairs (checker: ``text -> bool``) or
    :class:`genlab.experiments.tasks.Task` objects; ns: the N values (each at most n); n: samples
    per
    task; extract: ``text -> answer`` for the vote (default: the task's own, else the
    first word); score: as in :func:`best_of_n`; seed, batch_size, max_new_tokens, chat,
    system, executor, progress, config: as in :func:`best_of_n`; greedy: also run each
    task once greedily (``tasks.greedy_correct``); bootstrap, votes: resamples for the
    intervals and the vote; level: the interval's coverage probability.

    (Not run as a test: it samples for seconds; tests/test_compute.py checks it.)

    >>> cov = genlab.coverage_curve(lm, genlab.experiments.tasks.capitals(), ns=(1, 4, 16),
    ...                             max_new_tokens=4)                      # doctest: +SKIP
    >>> genlab.plots.coverage_plot(cov)                                    # doctest: +SKIP
    """
    t0 = time.perf_counter()
    if isinstance(tasks, (str, bytes)) or not isinstance(tasks, Sequence) or not tasks:
        raise ValueError("tasks: give a non-empty list of (prompt, checker) pairs")
    parts = [_task_parts(t, i, extract) for i, t in enumerate(tasks)]
    ns = _check_ns(ns)
    n = _check_n(max(ns) if n is None else n)
    if max(ns) > n:
        raise ValueError(f"ns: N={max(ns)} is more than the n={n} samples drawn per task; "
                         "draw more (n=) or drop the larger N")  # fmt: skip
    for name, value in (("bootstrap", bootstrap), ("votes", votes)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r}: give a number of resamples, an integer >= 1")
    if not 0 < level < 1:
        raise ValueError(f"level={level!r}: give the interval's level, between 0 and 1")
    _check_score(score)
    _check_executor(executor)
    lm = _as_lm(lm)
    spec = spec_of(lm) if executor is not None else None
    work, owner, prompts = [], [], []
    settings = None
    for t, (prompt, _, _) in enumerate(parts):
        ids = _prompt_ids(lm, prompt, chat, system)
        prompts.append(ids)
        settings = _settings(lm, ids, batch_size, max_new_tokens, config)
        for rows, s in _jobs(n, batch_size, seed + 1000 * t):
            work.append((ids, rows, s, settings))
            owner.append(t)
    batches = _run_jobs(lm, executor, spec, work, progress, "genlab coverage")
    per_task: list[list[dict]] = [[] for _ in parts]
    for t, batch in zip(owner, batches, strict=True):
        per_task[t].extend(batch)
    rng = np.random.default_rng(seed)
    sample_frames, task_rows = [], []
    values = {c: np.zeros((len(parts), len(ns))) for c in CURVES}
    for t, ((prompt, check, ext), rows) in enumerate(zip(parts, per_task, strict=True)):
        table = _judge(rows, score=score, verifier=check, extract=ext or _first_word)
        correct = [v is not None and bool(v) for v in table.verified]
        scores = [_score_key(v) for v in table.score]
        answers = [a if isinstance(a, str) else None for a in table.answer]
        c = sum(correct)
        for j, size in enumerate(ns):
            values["pass@N"][t, j] = pass_at_k(n, c, size)
            values["majority@N"][t, j] = _vote_correct(answers, correct, scores, size, votes,
                                                       rng)  # fmt: skip
            values["best-of-N"][t, j] = _best_of_correct(correct, scores, size)
        frame = table[["sample", "text", "answer", "score", "error"]].copy()
        frame.insert(0, "task", t)
        frame["correct"] = correct
        sample_frames.append(frame)
        row = {"task": t, "prompt": prompt if isinstance(prompt, str) else str(prompt),
               "correct": c, "share": c / n}  # fmt: skip
        if greedy:
            greedy_settings = {**settings, "do_sample": False}
            text = _batch(lm, prompts[t], 1, seed, greedy_settings)[0]["text"]
            verdict, _ = _call(check, text, "checker")
            row.update(greedy_text=text, greedy_correct=bool(verdict))
        task_rows.append(row)
    per = [{"task": t, "N": size, "curve": curve, "value": float(values[curve][t, j])}
           for curve in CURVES for t in range(len(parts)) for j, size in enumerate(ns)]  # fmt: skip
    out = []
    for curve in CURVES:
        low, high = _bootstrap(values[curve], bootstrap, level, rng)
        for j, size in enumerate(ns):
            out.append({"N": size, "curve": curve, "value": float(values[curve][:, j].mean()),
                        "low": float(low[j]), "high": float(high[j])})  # fmt: skip
    return Coverage(
        table=pd.DataFrame(out),
        tasks=pd.DataFrame(task_rows),
        samples=pd.concat(sample_frames, ignore_index=True),
        n=n,
        seconds=time.perf_counter() - t0,
        level=level,
        per_task=pd.DataFrame(per),
    )


def _check_ns(ns) -> list[int]:
    if isinstance(ns, (int, np.integer)):
        ns = [ns]
    try:
        ns = list(ns)
    except TypeError:
        raise ValueError(f"ns={ns!r}: give the numbers of samples N, e.g. (1, 2, 4, 8)") from None
    if not ns or any(isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1
                     for k in ns):  # fmt: skip
        raise ValueError(f"ns={ns!r}: give positive integers N, e.g. (1, 2, 4, 8)")
    return sorted({int(k) for k in ns})


__all__ = [
    "best_of_n", "self_consistency", "coverage_curve", "pass_at_k", "lm_reward",
    "SampleSet", "Coverage",
]  # fmt: skip
