"""The beam tree: every candidate a beam search scored, step by step.

Columns are steps, rows the candidates of a step ranked by accumulated score (best at the
top). Each candidate is linked to the beam it extends. Kept beams are blue boxes, finished
hypotheses green boxes (dashed when the pool refused them), pruned candidates grey text,
candidates lost to the diversity penalty purple and to the constraints red; the returned
sequences are drawn as thick orange paths; tokens a constraint proposed are in italics.
The legend lists only what is drawn and wraps to the figure's width.
Each box shows the token and, below it, the
length-normalised score (``score=`` picks another column of the node table).

Built from ``trace.beam_tree()``; works for beam search, beam sampling, group and
constrained beam search. Returns a ``Figure`` and never calls ``plt.show()``.

Example::

    >>> out = lm.generate("Once", num_beams=4, max_new_tokens=12, trace=True)  # doctest: +SKIP
    >>> fig = genlab.plots.beam_tree(out.trace)                                # doctest: +SKIP
    >>> fig.savefig("tree.png")                                                # doctest: +SKIP
"""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

__all__ = ["beam_tree", "STYLE"]

#: colours and box styles by fate
STYLE = {
    "kept": {"face": "#dbe9f6", "edge": "#2b6cb0", "text": "#16324f", "line": "#7fa7d1"},
    "finished": {"face": "#d9f2d9", "edge": "#2f855a", "text": "#1c4532", "line": "#68b684"},
    "rejected": {"face": "#f3faf3", "edge": "#68b684", "text": "#4a6b57", "line": "#b8dcc4"},
    "pruned": {"face": "none", "edge": "none", "text": "#9a9a9a", "line": "#dddddd"},
    "diversity": {"face": "none", "edge": "#805ad5", "text": "#805ad5", "line": "#d6c9f0"},
    "constraint": {"face": "none", "edge": "#c53030", "text": "#c53030", "line": "#f0c4c4"},
}
RETURNED = "#dd6b20"


def _short(tok: str, n: int) -> str:
    tok = tok.replace("\n", "\\n").replace("$", r"\$")
    return tok if len(tok) <= n else tok[: n - 1] + "…"


def beam_tree(
    trace,
    batch: int = 0,
    *,
    steps: tuple[int, int] | None = None,
    pruned: bool = True,
    score: str = "normalized_score",
    max_chars: int = 8,
    decimals: int = 2,
    step_width: float = 1.05,
    row_height: float = 0.42,
    title: str | None = None,
) -> Figure:
    """Draw the beam tree of one input of a traced beam search.

    trace: a :class:`~genlab.trace.Trace` of a beam search run with ``trace=True``;
    batch: which input of the batch;
    steps: ``(first, last)`` steps to draw (inclusive), default all;
    pruned: also draw the pruned candidates (grey);
    score: node-table column printed under each token (``normalized_score``, ``score``
        or ``token_logprob``);
    max_chars: tokens longer than this are cut with "…";
    decimals: digits of the printed scores;
    step_width / row_height: inches per step column / per candidate row.

    Size checked legible: 8 beams x 30 steps (16 candidates a step), about 33 x 8 inches.

    title: the figure title (default: the input and the step range).

    >>> res = lm.generate("The capital of France is", num_beams=3, max_new_tokens=6, trace=True)
    >>> genlab.plots.beam_tree(res.trace)                        # doctest: +SKIP
    """
    tree = trace.beam_tree(batch=batch)
    if tree.empty:
        raise ValueError(f"batch={batch}: no beam candidates recorded for this input")
    if score not in tree.columns:
        raise ValueError(f"score must be a column of trace.beam_tree(), got {score!r}")
    first, last = steps if steps is not None else (int(tree.step.min()), int(tree.step.max()))
    if first > last:
        raise ValueError(f"steps must be (first, last) with first <= last, got {steps!r}")
    shown = tree[(tree.step >= first) & (tree.step <= last)]
    if not pruned:
        shown = shown[shown.fate != "pruned"]
    shown = _with_rows(shown)
    n_rows = int(shown.y.max()) + 1 if len(shown) else 1
    n_steps = last - first + 1
    handles = _legend(shown)
    width = max(6.5, step_width * (n_steps + 1) + 0.8)
    ncol = _legend_columns(handles, width)
    legend_rows = -(-len(handles) // ncol)
    height = max(3.0 + 0.2 * legend_rows, row_height * n_rows + 1.4 + 0.2 * legend_rows)
    fig = Figure(figsize=(width, height), layout="constrained")
    ax = fig.add_subplot()
    where = {int(r.node): (int(r.step), float(r.y)) for r in shown.itertuples() if r.node >= 0}
    root_y = _root_y(shown, first)
    _draw_edges(ax, shown, where, first, root_y)
    _draw_nodes(ax, shown, score, max_chars, decimals)
    ax.text(
        first - 1,
        root_y,
        "prompt",
        ha="center",
        va="center",
        fontsize=8,
        bbox={"boxstyle": "round,pad=0.3", "fc": "#f2f2f2", "ec": "#888888"},
    )
    ax.set_xlim(first - 1.6, last + 0.6)
    ax.set_ylim(n_rows - 0.4, -0.9)
    ax.set_xticks(range(first, last + 1))
    ax.set_xlabel("step (generated token)")
    ax.set_yticks([])
    ax.set_ylabel("candidates, best score at the top")
    for side in ("left", "right", "top"):
        ax.spines[side].set_visible(False)
    ax.legend(
        handles=handles,
        loc="lower left",
        bbox_to_anchor=(0.0, 1.0),
        ncol=ncol,
        fontsize=8,
        frameon=False,
    )
    fig.suptitle(
        title or f"Beam tree, input {batch} ({score.replace('_', ' ')} under each token)",
        fontsize=10,
        x=0.01,
        ha="left",
    )
    return fig


def _with_rows(shown: pd.DataFrame) -> pd.DataFrame:
    """Add ``y``: the candidate's row in its step column. Beams and finished hypotheses
    come first, then the others; by group, then best score first."""
    shown = shown.assign(_minor=~shown.fate.isin(["kept", "finished", "rejected"]))
    shown = shown.sort_values(
        ["step", "_minor", "group", "score"], ascending=[True, True, True, False], kind="stable"
    )
    shown["y"] = shown.groupby("step").cumcount()
    return shown


def _root_y(shown: pd.DataFrame, first: int) -> float:
    """The prompt box sits at the height of the first column's best candidates."""
    col = shown[shown.step == first]
    kept = col[col.fate.isin(["kept", "finished"])]
    return float((kept if len(kept) else col).y.mean()) if len(col) else 0.0


def _draw_edges(ax, shown, where, first, root_y) -> None:
    order = {"pruned": 0, "diversity": 0, "constraint": 0, "rejected": 1, "kept": 2, "finished": 2}
    for r in sorted(shown.itertuples(), key=lambda r: (order[r.fate], r.returned)):
        parent = where.get(int(r.parent_node))
        if parent is None:
            if int(r.step) != first:
                continue  # its parent is outside the drawn steps or was not drawn
            parent = (first - 1, root_y)
        x0, y0 = parent
        style = STYLE[r.fate]
        colour, width, z = style["line"], 0.6, 1
        if r.fate in ("kept", "finished"):
            width, z = 1.0, 2
        if r.returned:
            colour, width, z = RETURNED, 2.6, 3
        ax.plot(
            [x0 + 0.32, r.step - 0.34],
            [y0, r.y],
            color=colour,
            lw=width,
            zorder=z,
            solid_capstyle="round",
        )


def _draw_nodes(ax, shown, score, max_chars, decimals) -> None:
    for r in shown.itertuples():
        style = STYLE[r.fate]
        text = _short(str(r.token), max_chars)
        boxed = r.fate not in ("pruned",)
        value = getattr(r, score)
        label = f"{text}\n{value:.{decimals}f}" if boxed or r.returned else text
        bbox = None
        if boxed or r.returned:
            bbox = {
                "boxstyle": "round,pad=0.22",
                "fc": style["face"],
                "ec": RETURNED if r.returned else style["edge"],
                "lw": 2.0 if r.returned else 0.9,
                "ls": "--" if r.fate in ("rejected", "diversity", "constraint") else "-",
            }
        weight = "bold" if r.returned or r.fate == "finished" else "normal"
        ax.text(
            r.step,
            r.y,
            label,
            ha="center",
            va="center",
            zorder=4,
            fontsize=7 if boxed or r.returned else 6.5,
            color=style["text"],
            fontweight=weight,
            linespacing=0.95,
            bbox=bbox,
            fontfamily="DejaVu Sans",
            fontstyle="italic" if r.source == "constraint" else "normal",
        )


#: inches one legend entry takes (marker, gap and a label of up to ~22 characters at 8 pt)
LEGEND_ENTRY_WIDTH = 1.75


def _legend_columns(handles: list, width: float) -> int:
    """As many legend columns as fit in ``width`` inches (the legend spans the axes)."""
    fit = int((width - 0.9) // LEGEND_ENTRY_WIDTH)
    return max(1, min(len(handles), fit))


def _legend(shown: pd.DataFrame) -> list:
    """Legend entries for the fates drawn (kept beams and the returned path always)."""
    drawn = set(shown.fate) | {"kept"}
    if shown.returned.any():
        drawn.add("returned sequence")
    if (shown.source == "constraint").any():
        drawn.add("proposed by a constraint")
    handles = _all_legend()
    return [h for h in handles if _LABEL_FATE.get(h.get_label(), h.get_label()) in drawn]


_LABEL_FATE = {
    "kept beam": "kept",
    "finished (in pool)": "finished",
    "finished, refused": "rejected",
    "pruned": "pruned",
    "lost to diversity": "diversity",
    "dropped by constraint": "constraint",
}


def _all_legend() -> list:
    def box(fate, label):
        st = STYLE[fate]
        return Patch(
            facecolor=st["face"] if st["face"] != "none" else "white",
            edgecolor=st["edge"] if st["edge"] != "none" else st["text"],
            label=label,
            linestyle="--" if fate in ("rejected", "diversity", "constraint") else "-",
        )

    return [
        box("kept", "kept beam"),
        box("finished", "finished (in pool)"),
        box("rejected", "finished, refused"),
        Line2D([], [], color=STYLE["pruned"]["text"], marker="$a$", ls="", label="pruned"),
        box("diversity", "lost to diversity"),
        box("constraint", "dropped by constraint"),
        Line2D([], [], color=RETURNED, lw=2.6, label="returned sequence"),
        Line2D(
            [], [], color="#444444", marker="$\\mathit{a}$", ls="", label="proposed by a constraint"
        ),
    ]
