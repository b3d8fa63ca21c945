"""Figures of interventions inside the model: input attribution, activation patching and a
steering sweep (from genlab/inside/attribution.py and genlab/inside/steering.py).

Sizes follow :mod:`genlab.plots.inside`: at most 7.2 inches wide, no text under 8 pt.
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from .inside import MAX_WIDTH, SMALL, _short


def _diverging_limit(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(np.abs(finite).max()) if finite.size and np.abs(finite).max() > 0 else 1.0


def attribution_heatmap(attribution, *, width: float | None = None) -> Figure:
    """Generated tokens (rows) x source tokens (columns), each cell the source's score for
    that token (red: raised its log-prob, blue: lowered it; blank: after the token).

    attribution: an :class:`~genlab.inside.attribution.Attribution`; width: inches (default fit).

    (Not run as a test: it draws a figure; tests/test_steering.py draws one.)

    >>> genlab.plots.attribution_heatmap(genlab.attribute(run))   # doctest: +SKIP
    """
    grid = attribution.matrix()
    values = grid.to_numpy(dtype=float)
    tokens = attribution.tokens
    nr, nc = values.shape
    w = width or min(MAX_WIDTH, 2.0 + 0.32 * nc)
    fig = Figure(figsize=(w, 1.6 + 0.26 * nr), layout="constrained")
    ax = fig.subplots()
    lim = _diverging_limit(values)
    image = ax.imshow(
        np.ma.masked_invalid(values), cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto",
        interpolation="nearest",
    )  # fmt: skip
    cols = [int(c) for c in grid.columns]
    ax.set_xticks(range(nc), [_short(tokens[c], 10) for c in cols], rotation=90, fontsize=SMALL)
    rows = [attribution.prompt_length + int(s) for s in grid.index]
    ax.set_yticks(range(nr), [_short(tokens[r], 12) for r in rows], fontsize=SMALL)
    ax.set_xlabel("source token", fontsize=9)
    ax.set_ylabel("generated token", fontsize=9)
    cbar = fig.colorbar(image, ax=ax, pad=0.01)
    cbar.set_label("score", fontsize=9)
    cbar.ax.tick_params(labelsize=8)
    ax.set_title(f"Attribution ({attribution.method.replace('_', ' ')})", fontsize=10)
    return fig


def patching_heatmap(table, *, width: float | None = None) -> Figure:
    """Layers (rows) x positions (columns) of ``table``, a :func:`genlab.patching_table`:
    how much the target's log-prob rises when the clean activation is patched in there;
    width: inches (default fit).

    (Not run as a test: it draws a figure; tests/test_steering.py draws one.)

    >>> genlab.plots.patching_heatmap(genlab.patching_table(lm, a, b))  # doctest: +SKIP
    """
    grid = table.pivot(index="layer", columns="position", values="effect")
    tokens = table.drop_duplicates("position").set_index("position").token
    values = grid.to_numpy(dtype=float)
    nr, nc = values.shape
    w = width or min(MAX_WIDTH, 2.2 + 0.55 * nc)
    fig = Figure(figsize=(w, min(7.0, 1.6 + 0.16 * nr)), layout="constrained")
    ax = fig.subplots()
    lim = _diverging_limit(values)
    image = ax.imshow(
        values, cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto", origin="lower",
        interpolation="nearest",
    )  # fmt: skip
    ax.set_xticks(range(nc), [_short(str(tokens[c]), 10) for c in grid.columns], fontsize=SMALL)
    step = max(1, nr // 15)
    ax.set_yticks(range(0, nr, step), [str(i) for i in grid.index[::step]], fontsize=SMALL)
    ax.set_xlabel("position (corrupt prompt's token)", fontsize=9)
    ax.set_ylabel("layer", fontsize=9)
    cbar = fig.colorbar(image, ax=ax, pad=0.01)
    cbar.set_label("change in log-prob", fontsize=9)
    cbar.ax.tick_params(labelsize=8)
    target = table.attrs.get("target", "")
    ax.set_title(f"Patching the clean run in: log-prob of {target!r}", fontsize=10)
    return fig


def steering_plot(table, *, width: float | None = None) -> Figure:
    """``table``, a :func:`genlab.steering_sweep` table: how many tokens changed (bars) and
    the mean log-prob of the chosen tokens (line) at each strength; width: inches.

    (Not run as a test: it draws a figure; notebook 15 draws one.)

    >>> genlab.plots.steering_plot(genlab.steering_sweep(lm, p, v, layer=10))  # doctest: +SKIP
    """
    fig = Figure(figsize=(width or 6.0, 3.0), layout="constrained")
    ax = fig.subplots()
    x = np.arange(len(table))
    ax.bar(x, table["changed"], color="tab:orange", label="tokens changed")
    ax.set_xticks(x, [f"{s:g}" for s in table["strength"]], fontsize=SMALL)
    ax.set_xlabel("strength", fontsize=9)
    ax.set_ylabel("tokens changed", fontsize=9)
    ax.tick_params(axis="y", labelsize=8)
    other = ax.twinx()
    other.plot(x, table["mean_logprob"], color="tab:blue", marker="o")
    other.set_ylabel("mean log-prob", fontsize=9, color="tab:blue")
    other.tick_params(axis="y", labelsize=8)
    ax.set_title("Steering: the text against the strength", fontsize=10)
    return fig


__all__ = ["attribution_heatmap", "patching_heatmap", "steering_plot"]
