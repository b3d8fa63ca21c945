"""Per-token figures: probability and entropy along the text, top-k bars, the waterfall of
one step through the logits processors, and log-probs of several runs side by side."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib
import numpy as np
from matplotlib.figure import Figure


def _short(tok: str, n: int = 10) -> str:
    tok = tok.replace("\n", "\\n")
    return tok if len(tok) <= n else tok[: n - 1] + "…"


def token_probs(trace, row: int = 0, *, width: float | None = None) -> Figure:
    """Probability of each chosen token (bars) and the entropy of its distribution (line).

    Args:
        trace: a :class:`~genlab.trace.Trace` (``lm.generate(..., trace=True).trace``);
        row: which sequence of the batch; width: the figure width in inches (default: by length).

    >>> res = lm.generate("Once upon a time", max_new_tokens=20, trace=True)
    >>> genlab.plots.token_probs(res.trace)                     # doctest: +SKIP
    """
    steps = trace.steps(row=row)
    n = len(steps)
    fig = Figure(figsize=(width or max(6.0, min(0.35 * n + 2, 24)), 3.6), layout="constrained")
    ax = fig.add_subplot()
    x = np.arange(n)
    colours = matplotlib.colormaps["RdYlGn"](steps.prob.to_numpy() if n else [])
    ax.bar(x, steps.prob if n else [], color=colours, edgecolor="0.3", linewidth=0.4)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("p(chosen token)")
    ax.set_xticks(x, [_short(t) for t in steps.token] if n else [], rotation=70, fontsize=8)
    ax2 = ax.twinx()
    if n:
        ax2.plot(x, steps.entropy, color="tab:blue", marker=".", lw=1.2, label="entropy")
    ax2.set_ylabel("entropy (nats)", color="tab:blue")
    ax2.set_ylim(bottom=0)
    ax.set_title("Chosen-token probability and entropy along the text")
    return fig


def topk_bars(trace, step: int, row: int = 0, stage: str = "final", k: int = 10) -> Figure:
    """The top-k candidates at one step (chosen one highlighted).

    Args:
        trace: a recorded :class:`~genlab.trace.Trace`; step: which generation step;
        row: which sequence; stage: ``"final"``, ``"raw"`` or a processor's stage name;
        k: how many bars.

    >>> genlab.plots.topk_bars(res.trace, step=0, k=10)          # doctest: +SKIP
    """
    t = trace.topk(step, row=row, stage=stage).sort_values("rank").head(k)
    fig = Figure(figsize=(6, 0.32 * len(t) + 1.2), layout="constrained")
    ax = fig.add_subplot()
    y = np.arange(len(t))[::-1]
    colours = ["tab:orange" if c else "tab:gray" for c in t.chosen]
    ax.barh(y, t.prob, color=colours)
    ax.set_yticks(y, [repr(_short(s, 16)) for s in t.token], fontsize=8)
    ax.set_xlabel("probability")
    for yi, p in zip(y, t.prob):
        ax.text(p, yi, f" {p:.3f}", va="center", fontsize=7)
    ax.set_title(f"step {step}, {stage}: top {len(t)} (orange = chosen)")
    return fig


def waterfall(trace, step: int, row: int = 0, k: int = 8) -> Figure:
    """One panel per stage (raw, each processor, final): top-k probabilities after it.

    Args:
        trace: a recorded :class:`~genlab.trace.Trace`; step: which generation step;
        row: which sequence; k: tokens per panel.

    >>> res = lm.generate("Once upon a time", do_sample=True, top_k=20, temperature=0.7,
    ...                   max_new_tokens=5, trace=True, seed=0)
    >>> genlab.plots.waterfall(res.trace, step=0)                # doctest: +SKIP
    """
    stages = trace.stages()
    fig = Figure(figsize=(2.4 * len(stages) + 0.6, 0.3 * k + 1.6), layout="constrained")
    axes = fig.subplots(1, len(stages), sharex=True)
    axes = np.atleast_1d(axes)
    summary = trace.stage_summary(step, row=row).set_index("stage")
    for ax, stage in zip(axes, stages):
        t = trace.topk(step, row=row, stage=stage).sort_values("rank").head(k)
        y = np.arange(len(t))[::-1]
        ax.barh(y, t.prob, color=["tab:orange" if c else "tab:gray" for c in t.chosen])
        ax.set_yticks(y, [repr(_short(s, 10)) for s in t.token], fontsize=7)
        kept = summary.loc[stage, "tokens_kept"] if stage in summary.index else "?"
        ax.set_title(
            f"{_short(stage.replace('LogitsWarper', '').replace('LogitsProcessor', ''), 14)}"
            f"\n{kept} tokens left",
            fontsize=8,
        )
        ax.set_xlim(0, 1)
    fig.suptitle(f"Step {step}: the distribution after each stage", fontsize=10)
    return fig


def compare_logprobs(results: Sequence, labels: Sequence[str] | None = None) -> Figure:
    """Log-prob of each generated token for several results of the same prompt, with the
    first position where their tokens diverge marked.

    Args:
        results: :class:`~genlab.lm.GenerationResult` objects of the same prompt;
        labels: one label per result (default: "0", "1", ...).

    >>> a = lm.generate("Once upon a time", max_new_tokens=15)
    >>> b = lm.generate("Once upon a time", max_new_tokens=15, do_sample=True, seed=1)
    >>> genlab.plots.compare_logprobs([a, b], ["greedy", "sampled"])   # doctest: +SKIP
    """
    labels = list(labels or [f"run {i}" for i in range(len(results))])
    fig = Figure(figsize=(8, 3.4), layout="constrained")
    ax = fig.add_subplot()
    seqs = []
    for res, label in zip(results, labels):
        table = res.transition_scores()
        ax.plot(table.step, table.logprob, marker=".", lw=1.2, label=label)
        seqs.append(table.token_id.tolist())
    diverge = first_divergence(seqs)
    if diverge is not None:
        ax.axvline(diverge, color="red", ls="--", lw=1)
        ax.text(
            diverge, ax.get_ylim()[0], f" diverge @ {diverge}", color="red", fontsize=8, va="bottom"
        )
    ax.set_xlabel("generated token")
    ax.set_ylabel("log-prob")
    ax.legend(fontsize=8)
    return fig


def first_divergence(seqs: Sequence[Sequence[int]]) -> int | None:
    """First index where the token lists differ (None if one is a prefix of all others)."""
    if len(seqs) < 2:
        return None
    for i in range(min(len(s) for s in seqs)):
        if len({s[i] for s in seqs}) > 1:
            return i
    lengths = {len(s) for s in seqs}
    return min(lengths) if len(lengths) > 1 else None
