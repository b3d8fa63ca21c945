"""Per-token figures: probability and entropy along the text, top-k bars, the waterfall of
one step through the logits processors, and log-probs of several runs side by side.

Tokens are labelled as a person reads them (:func:`genlab.text.tokens.show_token`: decoded
text, ␣ for a space at its edge, ↵ for a newline), never as tokenizer pieces; a token
holding part of a character is ◌, the character is on the token that completes it (a
character the figure's font lacks is written as its code point, U+1F642). Candidates
of probability 0 (removed by top-k, top-p, ...) are never drawn as candidates; the chosen
(or forced) token always is, in orange.

Every figure is at most :data:`MAX_WIDTH` inches wide and writes no text smaller than
7 points, so that at the notebooks' 100 dpi every letter is at least 9 px
tall in a 1000 px wide output.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from ..run.trace import trace_of
from ..text.tokens import candidate_labels, show_token

#: widest figure, in inches (1000 px at 100 dpi: shown unscaled in a 1000 px output)
MAX_WIDTH = 7.2  # inches: 720 px at 100 dpi, inside 768 px of notebook output
#: font size of tick labels and annotations
SMALL = 9.0
CHOSEN = "tab:orange"
OTHER = "tab:gray"


def label(token, n: int = 12) -> str:
    """A token's text for a figure: :func:`~genlab.text.tokens.show_token`, cut to ``n``
    characters with "…", with ``$`` escaped (matplotlib would read it as maths) and a
    character the font lacks (an emoji) written as its code point (``U+1F642``)."""
    text = show_token(str(token))
    if len(text) > n:
        text = text[: n - 1] + "…"
    text = "".join(ch if _drawable(ch) else f"U+{ord(ch):04X}" for ch in text)
    return text.replace("$", r"\$")


@functools.lru_cache(maxsize=4096)
def _drawable(ch: str) -> bool:
    """Whether the figures' font has a glyph for ``ch`` (else matplotlib draws a box)."""
    if ord(ch) < 0x2000:
        return True
    font = _font()
    return font is None or font.get_char_index(ord(ch)) != 0


@functools.lru_cache(maxsize=1)
def _font():
    try:
        from matplotlib.font_manager import FontProperties, findfont
        from matplotlib.ft2font import FT2Font

        return FT2Font(findfont(FontProperties()))
    except Exception:  # no font to ask: draw as it comes
        return None


def candidates(trace, step: int, row: int = 0, stage: str = "final", k: int = 10):
    """The top ``k`` tokens of one stage still possible (probability > 0), best first, and
    the chosen token even when it is not among them (it is then the last row). ``token``
    is what each would add after the tokens generated before ``step`` (a piece of a
    character as ◌, the character on the token that completes it), ``tip`` its bytes
    when it holds part of a character (see :func:`genlab.text.tokens.candidate_labels`)."""
    t = trace.topk(step, row=row, stage=stage).sort_values("rank", kind="stable")
    possible = t[t.prob > 0]
    top = possible.head(k)
    chosen = t[t.chosen]
    if len(chosen) and not top.chosen.any():
        top = pd.concat([top.head(max(0, k - 1)), chosen.head(1)])
    top = top.reset_index(drop=True)
    tokenizer = getattr(trace, "tokenizer", None)
    if tokenizer is not None and len(top):
        labels = candidate_labels(tokenizer, tokens_before(trace, step, row), top.token_id)
        top["token"] = [text for text, _ in labels]
        top["tip"] = [tip for _, tip in labels]
    else:
        top["tip"] = ""
    return top


def tokens_before(trace, step: int, row: int = 0, n: int = 3) -> list[int]:
    """The last ``n`` tokens row ``row`` generated before ``step`` (a character spans 4
    tokens at most: 3 before are enough to finish it)."""
    ids = [
        int(rec.chosen_for_row[row])
        for rec in trace.records
        if rec.step < step and row < rec.chosen_for_row.shape[0]
    ]
    return [i for i in ids if i >= 0][-n:]


def token_probs(trace, row: int = 0, *, width: float | None = None) -> Figure:
    """Probability of each chosen token (bars) and the entropy of its distribution (line).

    Args:
        trace: a :class:`~genlab.run.trace.Trace`, or what ``lm.generate(..., trace=True)``
            returns (its ``.trace`` is drawn);
        row: which sequence of the batch; width: the figure width in inches (default: by length).

    (The lines marked +SKIP are not run as a test: it draws a matplotlib figure
    (tests/test_plots_legibility.py and the notebooks draw them).)

    >>> res = lm.generate("Once upon a time", max_new_tokens=20, trace=True)
    >>> genlab.plots.token_probs(res.trace)                     # doctest: +SKIP
    """
    steps = trace_of(trace, "token_probs").steps(row=row)
    n = len(steps)
    fig_w = min(width or max(6.0, 0.25 * n + 2), MAX_WIDTH)
    fig = Figure(figsize=(fig_w, 3.8), layout="constrained")
    ax = fig.add_subplot()
    x = np.arange(n)
    colours = matplotlib.colormaps["RdYlGn"](steps.prob.to_numpy() if n else [])
    ax.bar(x, steps.prob if n else [], color=colours, edgecolor="0.3", linewidth=0.4)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("p(chosen token)")
    every = max(1, -(-n // int((fig_w - 1.5) / 0.16))) if n else 1  # ~0.16 in per label
    ticks = x[::every]
    ax.set_xticks(ticks, [label(t, 10) for t in steps.token.iloc[::every]] if n else [])
    ax.tick_params(axis="x", rotation=70, labelsize=SMALL)
    ax2 = ax.twinx()
    if n:
        ax2.plot(x, steps.entropy, color="tab:blue", marker=".", lw=1.2, label="entropy")
    ax2.set_ylabel("entropy (nats)", color="tab:blue")
    ax2.set_ylim(bottom=0)
    ax.set_title("Chosen-token probability (bars) and entropy (line) along the text")
    return fig


def _bars(ax, t: pd.DataFrame, xmax: float | None = None, rows: int | None = None) -> None:
    """Horizontal probability bars of ``t`` (from :func:`candidates`), best at the top,
    the chosen one orange with its label bold; each bar's probability printed."""
    y = np.arange(len(t))[::-1]
    probs = t.prob.to_numpy()
    ax.barh(y, probs, color=[CHOSEN if c else OTHER for c in t.chosen])
    ax.set_yticks(y, [label(s, 12) for s in t.token])
    ax.tick_params(axis="y", labelsize=SMALL, length=0)
    for tick, chosen in zip(ax.get_yticklabels(), t.chosen, strict=True):
        if chosen:
            tick.set_color("#b35900")
            tick.set_fontweight("bold")
    top = float(probs.max()) if len(probs) else 1.0
    xmax = xmax if xmax is not None else max(top * 1.45, 1e-3)
    ax.set_xlim(0, xmax)
    for yi, p, chosen in zip(y, probs, t.chosen, strict=True):
        ax.text(
            p + 0.01 * xmax,
            yi,
            f"{p:.3f}" + (" ◀" if chosen else ""),
            va="center",
            fontsize=SMALL,
            color="#b35900" if chosen else "0.2",
        )
    rows = max(rows or len(t), len(t), 1)  # a panel of 2 tokens keeps bars of normal height
    ax.set_ylim(len(t) - rows - 0.5, len(t) - 0.5)


def topk_bars(trace, step: int, row: int = 0, stage: str = "final", k: int = 10) -> Figure:
    """The top-k candidates still possible at one step; the chosen one in orange (shown
    even when it is outside the top k or was forced with probability 0).

    Args:
        trace: a recorded :class:`~genlab.run.trace.Trace` (or the result of
            ``lm.generate(..., trace=True)``); step: which generation step;
        row: which sequence; stage: ``"final"``, ``"raw"`` or a processor's stage name;
        k: how many bars.

    (Not run as a test: it draws a matplotlib figure (tests/test_plots_legibility.py and the
    notebooks draw them).)

    >>> genlab.plots.topk_bars(res.trace, step=0, k=10)          # doctest: +SKIP
    """
    t = candidates(trace_of(trace, "topk_bars"), step, row=row, stage=stage, k=k)
    fig = Figure(figsize=(6.5, 0.34 * len(t) + 1.3), layout="constrained")
    ax = fig.add_subplot()
    _bars(ax, t)
    ax.set_xlabel("probability")
    ax.set_title(f"Step {step}, {stage}: top {len(t)} (orange = chosen)")
    return fig


def waterfall(trace, step: int, row: int = 0, k: int = 8, columns: int = 2) -> Figure:
    """One panel per stage (raw, each processor, final): the tokens still possible after
    it, with their probabilities printed; each panel has its own scale, the chosen token
    is orange. Panels wrap into rows of ``columns`` so that 7 stages stay readable.

    Args:
        trace: a recorded :class:`~genlab.run.trace.Trace` (or the result of
            ``lm.generate(..., trace=True)``); step: which generation step;
        row: which sequence; k: tokens per panel; columns: panels per row.

    (The lines marked +SKIP are not run as a test: it draws a matplotlib figure
    (tests/test_plots_legibility.py and the notebooks draw them).)

    >>> res = lm.generate("Once upon a time", do_sample=True, top_k=20, temperature=0.7,
    ...                   max_new_tokens=5, trace=True, seed=0)
    >>> genlab.plots.waterfall(res.trace, step=0)                # doctest: +SKIP
    """
    trace = trace_of(trace, "waterfall")
    stages = trace.stages()
    summary = trace.stage_summary(step, row=row).set_index("stage")
    n = max(1, len(stages))
    ncols = max(1, min(columns, n))
    nrows = -(-n // ncols)
    panel_h = 0.3 * (k + 1) + 0.8
    fig = Figure(figsize=(min(MAX_WIDTH, 3.5 * ncols + 0.2), panel_h * nrows + 0.7),
                 layout="constrained")  # fmt: skip
    axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False)).ravel()
    for i, (ax, stage) in enumerate(zip(axes, stages, strict=False)):
        t = candidates(trace, step, row=row, stage=stage, k=k)
        _bars(ax, t, rows=k)
        kept = int(summary.loc[stage, "tokens_kept"]) if stage in summary.index else None
        left = f"{kept:,} tokens possible" if kept is not None else ""
        if stage == "grammar" and i > 0:  # what a grammar removed that the model liked most
            left += _grammar_removed(trace, step, row)
        ax.set_title(f"{i}. {stage}\n{left}", fontsize=10, loc="left")
        ax.tick_params(axis="x", labelsize=SMALL)
        ax.spines[["top", "right"]].set_visible(False)
    for ax in axes[len(stages) :]:
        ax.set_axis_off()
    fig.suptitle(
        f"Step {step}: the distribution after each stage\n(own scale per panel; orange ◀ = chosen)",
        fontsize=11,
    )
    return fig


def top_removed(before, after, row: int) -> tuple[int | None, float]:
    """The most probable token among the stage before's top ones that the grammar
    removed: the grammar only masks, so a token ranked above its last kept top token (or
    any, when it kept fewer than the trace's depth) and missing from its top is removed."""
    kept_values = after.top_values[row]
    finite = kept_values.isfinite()
    kept_ids = set(after.top_ids[row][finite].tolist())
    depth = int(after.top_ids.shape[1])
    floor = float(kept_values[finite].min()) if bool(finite.any()) else -math.inf
    for tid, value, lp in zip(
        before.top_ids[row].tolist(),
        before.top_values[row].tolist(),
        before.top_logprobs[row].tolist(),
        strict=True,
    ):
        if not math.isfinite(value) or tid in kept_ids:
            continue
        if len(kept_ids) < depth or value > floor:
            return tid, math.exp(lp)
    return None, 0.0


def _grammar_removed(trace, step: int, row: int) -> str:
    """``"; removed x p=0.47"``: the most probable token the ``grammar`` stage removed at
    ``step`` (see :func:`genlab.plots.grammar.grammar_table`), or ``""``."""
    rec = next(r for r in trace.records if r.step == step)
    names = [st.name for st in rec.stages]
    gi = names.index("grammar")
    tid, prob = top_removed(rec.stages[gi - 1], rec.stages[gi], row)
    if tid is None:
        return ""
    return f"; removed {trace.token_text(tid)} p={prob:.2g}"


def compare_logprobs(results: Sequence, labels: Sequence[str] | None = None) -> Figure:
    """Log-prob of each generated token for several results of the same prompt, with the
    first position where their tokens diverge marked.

    Args:
        results: :class:`~genlab.lm.GenerationResult` objects of the same prompt;
        labels: one label per result (default: "0", "1", ...).

    (The lines marked +SKIP are not run as a test: it draws a matplotlib figure
    (tests/test_plots_legibility.py and the notebooks draw them).)

    >>> a = lm.generate("Once upon a time", max_new_tokens=15)
    >>> b = lm.generate("Once upon a time", max_new_tokens=15, do_sample=True, seed=1)
    >>> genlab.plots.compare_logprobs([a, b], ["greedy", "sampled"])   # doctest: +SKIP
    """
    labels = list(labels or [f"run {i}" for i in range(len(results))])
    fig = Figure(figsize=(MAX_WIDTH, 3.6), layout="constrained")
    ax = fig.add_subplot()
    seqs = []
    for res, name in zip(results, labels, strict=True):
        table = res.transition_scores(row=0)
        ax.plot(table.step, table.logprob, marker=".", lw=1.2, label=name)
        seqs.append(table.token_id.tolist())
    diverge = first_divergence(seqs)
    if diverge is not None:
        ax.axvline(diverge, color="red", ls="--", lw=1, label=f"first difference @ {diverge}")
    ax.set_xlabel("generated token")
    ax.set_ylabel("log-prob")
    # below the axes, so that it never covers a curve and never widens the figure
    handles, names = ax.get_legend_handles_labels()
    fig.legend(handles, names, loc="outside lower center", ncols=min(len(names), 3),
               fontsize=SMALL, frameon=False)  # fmt: skip
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
