"""Figures of what happens inside the model: the logit lens, attention weights, per-token
scores of a text, and sampling-sweep metrics.

Sizes keep every text at least 9 px tall in a 1000 px wide notebook output: figures are
at most 10 inches wide (1000 px at the default 100 dpi) and no text is under 7 pt.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib
import numpy as np
from matplotlib.figure import Figure

#: smallest font used (points): 8.5 pt at 100 dpi is 11.8 px
SMALL = 8.5
#: widest figure (inches)
MAX_WIDTH = 7.2  # inches: 720 px at 100 dpi, inside 768 px of notebook output


def _expect(value, attribute: str, plot: str, what: str, make: str) -> None:
    """ValueError naming what ``plot`` draws and the call that makes it, when ``value`` is
    something else (a generation result, say)."""
    if not hasattr(value, attribute):
        raise ValueError(f"{plot} draws {what}, got {type(value).__name__}: pass {make}")


def _short(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _ink(rgba) -> str:
    """Black or white text, whichever reads better on ``rgba``."""
    r, g, b = rgba[:3]
    return "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "white"


def lens_heatmap(
    lens,
    *,
    steps: Sequence[int] | None = None,
    layers: Sequence[int] | None = None,
    width: float | None = None,
    highlight: int | None = None,
) -> Figure:
    """Layers (rows, the output at the top) x generated tokens (columns): each cell
    coloured by the probability that layer gives the token finally chosen, with the
    layer's own top token written in it.

    lens: a :class:`~genlab.inside.lens.Lens`; steps, layers: subsets to show (``lens.steps``
    values / layer numbers 0 .. num_layers; default all); highlight: a step whose column
    gets a blue frame; width: the figure's width in inches (default: fit, at most 7.2).

    (Not run as a test: it draws a matplotlib figure (tests/test_plots_legibility.py and the
    notebooks draw them).)

    >>> genlab.plots.lens_heatmap(genlab.logit_lens(res))            # doctest: +SKIP
    """
    _expect(lens, "target_prob", "lens_heatmap", "a Lens", "genlab.logit_lens(res)")
    cols = list(range(len(lens.steps))) if steps is None else [lens.steps.index(s) for s in steps]
    rows = list(range(lens.num_layers + 1)) if layers is None else list(layers)
    probs = lens.target_prob[rows][:, cols].numpy()
    top = lens.top_ids[rows][:, cols, 0]
    nr, nc = len(rows), len(cols)
    w = width or min(MAX_WIDTH, 1.6 + 0.95 * nc)
    cell_chars = max(3, int((w - 1.6) / max(nc, 1) * 72 / 8 / 0.62))
    fig = Figure(figsize=(w, 0.24 * nr + 1.7), layout="constrained")
    ax = fig.add_subplot()
    cmap = matplotlib.colormaps["RdYlGn"]
    image = ax.imshow(
        np.nan_to_num(probs, nan=0.0),
        cmap=cmap,
        vmin=0,
        vmax=1,
        aspect="auto",
        origin="lower",
        interpolation="nearest",
    )
    for i in range(nr):
        for j in range(nc):
            p = probs[i, j]
            label = _short(lens.token(int(top[i, j])), cell_chars)
            colour = _ink(cmap(0.0 if np.isnan(p) else float(p)))
            ax.text(j, i, label, ha="center", va="center", fontsize=SMALL, color=colour)
    if highlight is not None and highlight in [lens.steps[c] for c in cols]:
        j = [lens.steps[c] for c in cols].index(highlight)
        frame = matplotlib.patches.Rectangle(
            (j - 0.5, -0.5), 1, nr, fill=False, edgecolor="#1f3fbf", linewidth=2.5
        )
        ax.add_patch(frame)
    ax.set_yticks(range(nr), ["emb" if r == 0 else str(r) for r in rows], fontsize=SMALL)
    labels = [_short(lens.target_tokens[c] or "?", cell_chars + 2) for c in cols]
    ax.set_xticks(
        range(nc),
        labels,
        fontsize=8,
        rotation=40 if nc > 8 else 0,
        ha="right" if nc > 8 else "center",
    )
    ax.set_ylabel("layer (emb = embeddings)", fontsize=9)
    ax.set_xlabel("chosen token" if lens.generated else "next token of the text", fontsize=9)
    cbar = fig.colorbar(image, ax=ax, shrink=0.6, pad=0.01)
    cbar.set_label("p(chosen token) at this layer", fontsize=9)
    cbar.ax.tick_params(labelsize=8)
    ax.set_title(
        "Logit lens: each layer's top guess (text) and its belief in the chosen token (colour)",
        fontsize=10,
    )
    return fig


def focused_head(att) -> tuple[int, int]:
    """(layer, head) of the head that puts the largest weight on one token other than the
    first (the attention sink) and the query itself; layers count from 1."""
    w = att.weights
    nk = w.shape[-1]
    rest = w[:, :, 1:-1] if nk > 2 else w
    flat = int(rest.amax(-1).argmax())
    return flat // w.shape[1] + 1, flat % w.shape[1]


def attention_heatmap(
    att,
    *,
    layer: int | None = None,
    head: int | None = None,
    metric: str = "entropy",
    width: float | None = None,
) -> Figure:
    """Top: a layer x head summary (``metric``: "entropy" of the weights, or "max_weight");
    bottom: one head's weights over the prompt and the tokens before (default: the head
    that puts the most weight on one token other than the first and the query itself).

    att: an :class:`~genlab.inside.lens.Attention`; layer, head: the head to show in full;
    width: the figure's width in inches (default: fit, at most 10).

    (Not run as a test: it draws a matplotlib figure (tests/test_plots_legibility.py and the
    notebooks draw them).)

    >>> genlab.plots.attention_heatmap(genlab.attention(res, step=5))  # doctest: +SKIP
    """
    _expect(att, "weights", "attention_heatmap", "an Attention", "genlab.attention(res, step=0)")
    if metric not in ("entropy", "max_weight"):
        raise ValueError(f"metric={metric!r}: choose 'entropy' or 'max_weight'")
    w = att.weights.numpy()  # (layers, heads, keys)
    nl, nh, nk = w.shape
    if layer is None or head is None:
        layer, head = focused_head(att)
    if not 1 <= layer <= nl or not 0 <= head < nh:
        raise ValueError(f"layer={layer}, head={head}: layers are 1 .. {nl}, heads 0 .. {nh - 1}")
    if metric == "entropy":
        grid = -(w * np.log(np.clip(w, 1e-30, None))).sum(-1)
        label, cmap = "entropy of the weights (nats)", "viridis"
    else:
        grid = w.max(-1)
        label, cmap = "largest weight", "magma"
    fig = Figure(figsize=(width or MAX_WIDTH, 7.0), layout="constrained")
    top, bottom = fig.subplots(2, 1, height_ratios=[1, 1.15])
    image = top.imshow(grid.T, aspect="auto", cmap=cmap, origin="lower", interpolation="nearest")
    top.set_xticks(
        range(0, nl, max(1, nl // 15)),
        [str(i + 1) for i in range(0, nl, max(1, nl // 15))],
        fontsize=8,
    )
    top.set_yticks(range(nh), [str(h) for h in range(nh)], fontsize=8)
    top.set_xlabel("layer", fontsize=9)
    top.set_ylabel("head", fontsize=9)
    top.add_patch(
        matplotlib.patches.Rectangle(
            (layer - 1.5, head - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=2
        )
    )
    cbar = fig.colorbar(image, ax=top, pad=0.01)
    cbar.set_label(label, fontsize=9)
    cbar.ax.tick_params(labelsize=8)
    top.set_title(
        f"Attention of every head when predicting step {att.step} (query "
        f"{_short(att.query_token, 12)} -> next {_short(att.target_token, 12)}); "
        "red: the head below",
        fontsize=10,
    )
    weights = w[layer - 1, head]
    x = np.arange(nk)
    colours = ["tab:gray" if k < att.prompt_length else "tab:orange" for k in range(nk)]
    bottom.bar(x, weights, color=colours)
    step = max(1, int(np.ceil(nk / 60)))
    bottom.set_xticks(
        x[::step], [_short(t, 10) for t in att.tokens][::step], rotation=90, fontsize=SMALL
    )
    bottom.set_ylabel("weight", fontsize=9)
    bottom.set_ylim(0, max(1e-3, float(weights.max())) * 1.1)
    bottom.tick_params(axis="y", labelsize=8)
    bottom.set_title(
        f"Layer {layer}, head {head}: weight on each token (grey: prompt, orange: generated)",
        fontsize=10,
    )
    return fig


def score_bars(scores, row: int = 0, *, width: float | None = None) -> Figure:
    """Probability the model gave each token of a text (bars, coloured by it) and the
    entropy of its distribution there (line).

    scores: what ``lm.score`` returns; row: which text of a batch; width: the figure's
    width in inches (default: fit, at most 10).

    (Not run as a test: it draws a matplotlib figure (tests/test_plots_legibility.py and the
    notebooks draw them).)

    >>> genlab.plots.score_bars(lm.score("The capital of France is Paris."))  # doctest: +SKIP
    """
    _expect(scores, "table", "score_bars", "a text's scores", "lm.score(text)")
    t = scores.table[scores.table.row == row]
    n = len(t)
    fig = Figure(
        figsize=(width or min(MAX_WIDTH, max(5.0, 0.4 * n + 2)), 3.8), layout="constrained"
    )
    ax = fig.add_subplot()
    x = np.arange(n)
    ax.bar(
        x,
        t.prob,
        color=matplotlib.colormaps["RdYlGn"](t.prob.to_numpy()),
        edgecolor="0.3",
        linewidth=0.4,
    )
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("p(token)", fontsize=9)
    every = max(1, int(np.ceil(n / 60)))
    ax.set_xticks(x[::every], [_short(s, 12) for s in t.token][::every], rotation=70, fontsize=8)
    ax.tick_params(axis="y", labelsize=8)
    ax2 = ax.twinx()
    ax2.plot(x, t.entropy, color="tab:blue", marker=".", lw=1.2)
    ax2.set_ylabel("entropy (nats)", color="tab:blue", fontsize=9)
    ax2.set_ylim(bottom=0)
    ax2.tick_params(axis="y", labelsize=8)
    s = scores.summary[scores.summary.row == row].iloc[0]
    ax.set_title(
        f"Scored under teacher forcing: mean log-prob {s.mean_logprob:.2f}, "
        f"perplexity {s.perplexity:.2f}",
        fontsize=10,
    )
    return fig


_LABELS = {
    "mean_logprob": "mean log-prob (raw model)",
    "distinct_1": "distinct-1",
    "distinct_2": "distinct-2",
    "repetition": "repetition (bigrams)",
    "length": "length (tokens)",
    "eos_rate": "share ending with EOS",
}


def sweep_metrics(
    sw, *, metrics: Sequence[str] | None = None, width: float | None = None
) -> Figure:
    """One panel per metric: the first grid field on the x axis, one line per value of the
    other fields.

    sw: a :class:`~genlab.experiments.sweeps.SweepResult`; metrics: which metrics (default all);
    width: the figure's width in inches (default: fit, at most 10).

    (Not run as a test: it draws a matplotlib figure (tests/test_plots_legibility.py and the
    notebooks draw them).)

    >>> sw = genlab.sweep(lm, "Hi", {"temperature": [0.5, 1]})    # doctest: +SKIP
    >>> genlab.plots.sweep_metrics(sw)                            # doctest: +SKIP
    """
    from ..experiments.sweeps import METRICS

    _expect(sw, "metrics", "sweep_metrics", "a sweep", "genlab.sweep(lm, prompt, grid)")
    metrics = list(metrics or METRICS)
    unknown = [m for m in metrics if m not in sw.metrics.columns]
    if unknown:
        raise ValueError(f"metrics: {unknown} are not sweep metrics ({list(METRICS)})")
    keys = list(sw.grid)
    xkey, others = keys[0], keys[1:]
    cols = min(3, len(metrics))
    nrows = int(np.ceil(len(metrics) / cols))
    fig = Figure(figsize=(width or MAX_WIDTH, 2.9 * nrows + 0.6), layout="constrained")
    axes = np.atleast_1d(fig.subplots(nrows, cols, squeeze=False)).ravel()
    frame = sw.metrics
    groups = [((), frame)] if not others else list(frame.groupby(others, sort=False))
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in sw.grid[xkey])
    for ax, metric in zip(axes, metrics, strict=False):
        for values, part in groups:
            values = values if isinstance(values, tuple) else (values,)
            label = ", ".join(f"{k}={v}" for k, v in zip(others, values, strict=True)) or None
            xs = part[xkey].to_numpy() if numeric else np.arange(len(part))
            ax.plot(xs, part[metric].to_numpy(), marker="o", lw=1.4, label=label)
        if not numeric:
            ax.set_xticks(range(len(sw.grid[xkey])), [str(v) for v in sw.grid[xkey]])
        ax.set_title(_LABELS.get(metric, metric), fontsize=10)
        ax.set_xlabel(xkey, fontsize=9)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
    for ax in axes[len(metrics) :]:
        ax.set_visible(False)
    if others:
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(
            handles, labels, loc="outside lower center", ncols=min(len(labels), 4), fontsize=9
        )
    fig.suptitle(f"Sampling sweep: {sw.n} samples per setting", fontsize=11)
    return fig
