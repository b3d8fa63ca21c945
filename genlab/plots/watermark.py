"""Watermark figures: green/red text, running z-score, green-list bars, SynthID g-values.

Each function takes a table from :mod:`genlab.watermark` and returns a matplotlib
``Figure`` (never shown; pyplot is not used, so any backend works, Agg included). Pass
``ax=`` to draw into an existing axes; the figure of that axes is returned.

>>> import torch
>>> from genlab.watermark import token_colours
>>> from genlab.plots.watermark import running_z
>>> fig = running_z(token_colours(torch.arange(30), {}, vocab_size=100))
>>> fig.axes[0].get_ylabel()
'z-score'
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from .tokens import MAX_WIDTH, label

GREEN = "#2d9d5a"
RED = "#d1495b"
GREY = "#b0b0b0"
LIGHT = {"green": "#b7e4c7", "red": "#f4b6b6", "unscored": "#e5e5e5"}


def _axes(ax, figsize):
    """(figure, axes): a new Figure with one axes, or the figure of ``ax``."""
    if ax is not None:
        return ax.figure, ax
    fig = Figure(figsize=figsize, layout="constrained")
    return fig, fig.add_subplot()


def _require(table: pd.DataFrame, columns: list[str], made_by: str):
    if not isinstance(table, pd.DataFrame):
        raise ValueError(f"expected the DataFrame from {made_by}, got {type(table).__name__}")
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise ValueError(f"table lacks columns {missing}: pass the DataFrame from {made_by}")


def _visible(token: str) -> str:
    """Token text as :func:`genlab.text.tokens.show_token` shows it, ``$`` escaped."""
    return label(token, 40)


def _kind(scored: bool, green: bool) -> str:
    return "unscored" if not scored else ("green" if green else "red")


def _layout(tokens: list[str], width: int) -> list[tuple[int, int]]:
    """(line, column) of each token when wrapped at ``width`` characters."""
    line, col, places = 0, 0, []
    for token in tokens:
        if col and col + len(token) > width:
            line, col = line + 1, 0
        places.append((line, col))
        col += len(token) + 1
    return places


def green_red_tokens(
    table: pd.DataFrame,
    *,
    width: int = 60,
    fontsize: float = 11,
    title: str | None = None,
    ax=None,
) -> Figure:
    """The text with each token on a green or red background (grey: not scored).

    table: :func:`genlab.watermark.token_colours` output. ``width``: characters per line.

    fontsize: text size in points; title: the figure title; ax: draw into this axes
    (default: a new figure).

    (Not run as a test: it draws a matplotlib figure (tests/test_plots_legibility.py and the
    notebooks draw them).)

    >>> table = genlab.watermark.token_colours(detector, ids, tokenizer)   # doctest: +SKIP
    >>> genlab.plots.green_red_tokens(table)                     # doctest: +SKIP
    """
    _require(table, ["token", "scored", "green", "running_z"], "token_colours()")
    tokens = [_visible(t) for t in table.token]
    places = _layout(tokens, width)
    lines = (places[-1][0] + 1) if places else 1
    char_in = 0.602 * fontsize / 72  # DejaVu Sans Mono advance, in inches
    line_in = 2.0 * fontsize / 72
    if ax is None:
        # size the figure so that one x unit is exactly one character wide
        top, bottom, left = 0.45, 0.45, 0.1
        fig_w, fig_h = (width + 1) * char_in + 2 * left, lines * line_in + top + bottom
        fig = Figure(figsize=(fig_w, fig_h))
        ax = fig.add_axes((0, bottom / fig_h, 1, lines * line_in / fig_h))
        ax.set_xlim(-left / char_in - 0.5, (fig_w - left) / char_in - 0.5)
    else:
        fig = ax.figure
        ax.set_xlim(-0.5, width + 0.5)
    for token, (line, col), row in zip(tokens, places, table.itertuples(index=False), strict=True):
        colour = LIGHT[_kind(row.scored, row.green)]
        ax.text(
            col,
            line + 0.5,
            token,
            family="monospace",
            fontsize=fontsize,
            va="center",
            ha="left",
            bbox={"boxstyle": "round,pad=0.15", "fc": colour, "ec": "none"},
        )
    ax.set_ylim(lines, 0)
    ax.set_axis_off()
    ax.set_title(title if title is not None else _summary(table), fontsize=fontsize)
    handles = [Patch(color=LIGHT[k], label=k) for k in ("green", "red", "unscored")]
    ax.legend(
        handles=handles,
        loc="upper center",
        bbox_to_anchor=(0.5, 0.0),
        ncols=3,
        frameon=False,
        fontsize="small",
    )
    return fig


def _summary(table: pd.DataFrame) -> str:
    scored = int(table.scored.sum())
    if not scored:
        return "no token scored"
    z = table.running_z[table.scored].iloc[-1]
    green = int((table.green & table.scored).sum())
    return f"{green} of {scored} scored tokens green, z = {z:.2f}"


def running_z(
    table: pd.DataFrame,
    *,
    z_threshold: float = 3.0,
    title: str | None = None,
    ax=None,
) -> Figure:
    """The z-score of the text up to each token, with the detection threshold.

    table: :func:`genlab.watermark.token_colours` output. Points are coloured by whether
    that token is green or red.

    z_threshold: the detection threshold drawn as a line; title: the figure title;
    ax: draw into this axes (default: a new figure).

    (Not run as a test: it draws a matplotlib figure (tests/test_plots_legibility.py and the
    notebooks draw them).)

    >>> genlab.plots.running_z(table, z_threshold=4.0)           # doctest: +SKIP
    """
    _require(table, ["position", "scored", "green", "running_z"], "token_colours()")
    fig, ax = _axes(ax, (7.0, 3.2))
    scored = table[table.scored]
    x, z = scored.position.to_numpy(), scored.running_z.to_numpy()
    ax.plot(x, z, color="#444444", linewidth=1.2, zorder=1)
    colours = np.where(scored.green.to_numpy(), GREEN, RED)
    ax.scatter(x, z, c=colours, s=18, zorder=2)
    ax.axhline(z_threshold, color=RED, linestyle="--", linewidth=1, label=f"z = {z_threshold:g}")
    ax.axhline(0.0, color=GREY, linewidth=0.8)
    ax.set_xlabel("token position")
    ax.set_ylabel("z-score")
    ax.set_title(title if title is not None else "running z-score of the watermark")
    handles = [
        Patch(color=GREEN, label="green token"),
        Patch(color=RED, label="red token"),
        ax.get_legend_handles_labels()[0][0],
    ]
    # outside the axes, so that it never covers a point
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False,
              fontsize="small")  # fmt: skip
    return fig


def greenlist_bars(
    table: pd.DataFrame,
    *,
    top: int = 20,
    title: str | None = None,
    ax=None,
) -> Figure:
    """Probabilities of the most likely tokens before and after the green-list bias.

    table: :func:`genlab.watermark.greenlist_table` output. Pale bars: before; solid
    bars: after; green or red by the token's list.

    top: how many tokens; title: the figure title; ax: draw into this axes
    (default: a new figure).

    (Not run as a test: it draws a matplotlib figure (tests/test_plots_legibility.py and the
    notebooks draw them).)

    >>> genlab.plots.greenlist_bars(genlab.watermark.greenlist_table(...))   # doctest: +SKIP
    """
    _require(table, ["token", "green", "prob_before", "prob_after"], "greenlist_table()")
    if not isinstance(top, int) or top < 1:
        raise ValueError(f"top must be a positive integer, got {top!r}")
    rows = table.sort_values("prob_before", ascending=False, kind="stable").head(top)
    fig, ax = _axes(ax, (min(7.2, max(5.0, 0.3 * len(rows) + 1.2)), 4.0))
    x = np.arange(len(rows))
    solid = np.where(rows.green.to_numpy(), GREEN, RED)
    pale = np.where(rows.green.to_numpy(), LIGHT["green"], LIGHT["red"])
    ax.bar(x - 0.2, rows.prob_before, width=0.4, color=pale, edgecolor=solid, linewidth=0.8)
    ax.bar(x + 0.2, rows.prob_after, width=0.4, color=solid)
    ax.set_xticks(x, [_visible(t) for t in rows.token], rotation=60, ha="right", fontsize=8)
    ax.set_ylabel("probability")
    ax.set_title(title if title is not None else "next-token probabilities: before | after bias")
    handles = [
        Patch(facecolor=LIGHT["green"], edgecolor=GREEN, label="green, before"),
        Patch(color=GREEN, label="green, after"),
        Patch(facecolor=LIGHT["red"], edgecolor=RED, label="red, before"),
        Patch(color=RED, label="red, after"),
    ]
    # below the axes: the figure stays within 720 px (a notebook's output at 768 px)
    ax.figure.legend(handles=handles, frameon=False, fontsize="small", ncols=4,
                     loc="outside lower center")  # fmt: skip
    return fig


def synthid_gvalues_heatmap(
    table: pd.DataFrame,
    *,
    row: int = 0,
    title: str | None = None,
    ax=None,
) -> Figure:
    """SynthID g-values of one text: tournament layer (depth) by token position.

    table: :func:`genlab.watermark.synthid_gvalues_table` output. Columns that are not
    scored (repeated context, after EOS) are drawn faded.

    row: which text of the table; title: the figure title; ax: draw into this axes
    (default: a new figure).

    (Not run as a test: it draws a matplotlib figure (tests/test_plots_legibility.py and the
    notebooks draw them).)

    >>> table = genlab.watermark.synthid_gvalues_table(...)     # doctest: +SKIP
    >>> genlab.plots.synthid_gvalues_heatmap(table)             # doctest: +SKIP
    """
    cols = ["row", "position", "token", "depth", "g_value", "scored"]
    _require(table, cols, "synthid_gvalues_table()")
    part = table[table.row == row]
    if part.empty:
        raise ValueError(f"row must be one of {sorted(set(table.row))}, got {row!r}")
    grid = part.pivot(index="depth", columns="position", values="g_value")  # (depth, pos)
    scored = part.groupby("position").scored.first().reindex(grid.columns).to_numpy()
    labels = part.groupby("position").token.first().reindex(grid.columns)
    fig, ax = _axes(
        ax, (min(MAX_WIDTH, max(5.0, 0.32 * grid.shape[1] + 2.0)), 1.6 + 0.3 * grid.shape[0])
    )
    cmap = ListedColormap(["#f0f0f0", "#5b3fa8"])
    ax.imshow(grid.to_numpy(), cmap=cmap, vmin=0, vmax=1, aspect="auto", interpolation="none")
    for i in np.flatnonzero(~scored.astype(bool)):
        ax.axvspan(i - 0.5, i + 0.5, color="white", alpha=0.65, linewidth=0)
    positions = list(grid.columns)
    step = max(1, -(-len(positions) // 40))
    ticks = range(0, len(positions), step)
    ax.set_xticks(
        list(ticks), [_visible(labels.iloc[i]) for i in ticks], rotation=60, ha="right", fontsize=8
    )
    ax.set_yticks(range(grid.shape[0]), [str(d) for d in grid.index])
    ax.set_xlabel("token")
    ax.set_ylabel("depth (key)")
    mean = part[part.scored].g_value.mean() if part.scored.any() else float("nan")
    ax.set_title(title if title is not None else f"SynthID g-values (mean over scored {mean:.3f})")
    handles = [
        Patch(color="#5b3fa8", label="g = 1"),
        Patch(color="#f0f0f0", label="g = 0"),
        Patch(color="#c5bde0", label="not scored"),
    ]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    return fig


__all__ = ["green_red_tokens", "greenlist_bars", "running_z", "synthid_gvalues_heatmap"]
