"""The beam tree: every candidate a beam search scored, step by step.

Columns are steps, rows the candidates of a step ranked by accumulated score (best at the
top). Each candidate is linked to the beam it extends. Kept beams are blue boxes, finished
hypotheses green boxes (dashed when the pool refused them), pruned candidates grey text,
candidates lost to the diversity penalty purple and to the constraints red; the returned
sequences are drawn as thick orange paths; tokens a constraint proposed are in italics.
The legend lists only what is drawn and wraps to the figure's width.
Each box shows the token and, below it, the length-normalised score (``score=`` picks
another column of the node table); the figure says which. A long search wraps into
bands of steps, so that the figure stays 10 inches wide and its text readable.

Built from ``trace.beam_tree()``; works for beam search, beam sampling, group and
constrained beam search. Returns a ``Figure`` and never calls ``plt.show()``.

Example::

    (Not run as a test: it draws a matplotlib figure (tests/test_plots_legibility.py and the
    notebooks draw them).)

    >>> out = lm.generate("Once", num_beams=4, max_new_tokens=12, trace=True)  # doctest: +SKIP
    >>> fig = genlab.plots.beam_tree(out.trace)                                # doctest: +SKIP
    >>> fig.savefig("tree.png")                                                # doctest: +SKIP
"""

from __future__ import annotations

import textwrap

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle

from ..ids import eos_token_ids
from ..run.trace import trace_of
from .tokens import label

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


#: light backgrounds of the beam groups of a diverse (group) beam search
GROUP_SHADES = ["#fff3bf", "#d3f9d8", "#e5dbff", "#ffe3e3", "#c5f6fa", "#ffd8a8", "#eebefa",
                "#dee2e6"]  # fmt: skip
#: the label of an end-of-sequence token
EOS_LABEL = "\u27e8eos\u27e9"
#: font size of the boxes' text (points; 11 px at 100 dpi)
NODE_FONT = 8.0
#: widest figure, inches (1000 px at 100 dpi)
MAX_WIDTH = 7.2  # inches: 720 px at 100 dpi, inside 768 px of notebook output

SCORE_NOTES = {
    "normalized_score": "number in each box = the beam's score: sum of its tokens' log-probs "
    "/ (generated length ** length_penalty){lp}; higher is better",
    "score": "number in each box = sum of the log-probs of the beam's tokens so far",
    "token_logprob": "number in each box = log-prob of that token given its beam",
}


def _eos_ids(trace) -> set[int]:
    run = getattr(trace, "run", None)
    config = run.views.gen_config if run is not None else None
    return set(eos_token_ids(getattr(config, "eos_token_id", None)))


def _node_label(token, token_id: int, eos: set[int], max_chars: int) -> str:
    if int(token_id) in eos:
        return EOS_LABEL
    return label(token, max_chars)


def beam_tree(
    trace,
    batch: int = 0,
    *,
    steps: tuple[int, int] | None = None,
    pruned: bool = True,
    score: str = "normalized_score",
    max_chars: int = 9,
    decimals: int = 2,
    step_width: float = 1.1,
    row_height: float = 0.36,
    steps_per_row: int | None = None,
    title: str | None = None,
) -> Figure:
    """Draw the beam tree of one input of a traced beam search.

    trace: a :class:`~genlab.run.trace.Trace` of a beam search run with ``trace=True``, or the
        result of ``lm.generate(..., num_beams=..., trace=True)`` itself;
    batch: which input of the batch;
    steps: ``(first, last)`` steps to draw (inclusive), default all;
    pruned: also draw the pruned candidates (grey);
    score: node-table column printed under each token (``normalized_score``, ``score``
        or ``token_logprob``); the figure says what it is;
    max_chars: tokens longer than this are cut with "…";
    decimals: digits of the printed scores;
    step_width / row_height: inches per step column / per candidate row;
    steps_per_row: steps drawn side by side before the tree wraps onto the next band
        (default: as many as fit in 10 inches, balanced between the bands).

    Long searches wrap into bands of steps, top to bottom: each band starts with the
    beams it continues (grey), so every edge is drawn. The figure is at most 10 inches
    wide and its text at least 8 points (11 px at 100 dpi); checked at 30 steps x 8
    beams. End-of-sequence tokens read ⟨eos⟩; in a group (diverse) beam search each
    candidate sits on its group's shade.

    title: the figure title (default: the input and the step range).

    (The lines marked +SKIP are not run as a test: it draws a matplotlib figure
    (tests/test_plots_legibility.py and the notebooks draw them).)

    >>> res = lm.generate("The capital of France is", num_beams=3, max_new_tokens=6, trace=True)
    >>> genlab.plots.beam_tree(res.trace)                        # doctest: +SKIP
    """
    trace = trace_of(trace, "beam_tree")
    tree = trace.beam_tree(batch=batch)
    if tree.empty:
        raise ValueError(f"batch={batch}: no beam candidates recorded for this input")
    if score not in tree.columns:
        raise ValueError(f"score must be a column of trace.beam_tree(), got {score!r}")
    first, last = steps if steps is not None else (int(tree.step.min()), int(tree.step.max()))
    if first > last:
        raise ValueError(f"steps must be (first, last) with first <= last, got {steps!r}")
    shown = tree[(tree.step >= first - 1) & (tree.step <= last)]
    if not pruned:
        shown = shown[shown.fate != "pruned"]
    shown = _with_rows(shown)
    n_steps = last - first + 1
    fit = max(1, int((MAX_WIDTH - 1.4) // step_width))
    per_row = steps_per_row or fit
    bands = -(-n_steps // per_row)
    per_row = -(-n_steps // bands)  # balance: 12 steps -> 6 + 6, not 8 + 4
    eos = _eos_ids(trace)
    groups = sorted(set(shown.group)) if "group" in shown else [0]
    handles = _legend(shown[shown.step >= first], grouped=len(groups) > 1, groups=groups)
    width = min(MAX_WIDTH, step_width * (per_row + 1) + 1.0)
    ncol = _legend_columns(handles, width)
    legend_rows = -(-len(handles) // ncol)
    band_rows = []
    for b in range(bands):
        a, z = first + b * per_row, min(last, first + (b + 1) * per_row - 1)
        col = shown[(shown.step >= a) & (shown.step <= z)]
        band_rows.append(int(col.y.max()) + 1 if len(col) else 1)
    heights = [row_height * n + 0.75 for n in band_rows]
    extra = 0.95 + 0.22 * legend_rows
    fig = Figure(figsize=(width, sum(heights) + extra), layout="constrained")
    axes = fig.subplots(bands, 1, squeeze=False, gridspec_kw={"height_ratios": heights})[:, 0]
    lp = getattr(getattr(getattr(trace, "run", None), "gen_config", None), "length_penalty", None)
    for b, ax in enumerate(axes):
        a, z = first + b * per_row, min(last, first + (b + 1) * per_row - 1)
        _draw_band(ax, shown, a, z, first, band_rows[b], score, max_chars, decimals, eos,
                   groups, per_row)  # fmt: skip
    axes[0].legend(
        handles=handles,
        loc="lower left",
        bbox_to_anchor=(0.0, 1.0),
        ncol=ncol,
        fontsize=NODE_FONT + 0.5,
        frameon=False,
    )
    note = SCORE_NOTES.get(score, f"number in each box = {score.replace('_', ' ')}")
    note = note.format(lp=f", length_penalty = {lp:g}" if isinstance(lp, (int, float)) else "")
    # every line of the caption wrapped to the figure's width: at steps 0-1 the figure is
    # narrow, and a centred line wider than it was cut on both sides
    chars = int(width * 12)
    head = "step (generated token); candidates of a step ranked top to bottom, beams first"
    axes[-1].set_xlabel(
        textwrap.fill(head, chars) + "\n" + textwrap.fill(note, chars),
        fontsize=NODE_FONT + 1,
    )
    fig.suptitle(
        title or f"Beam tree, input {batch}" + (f" (steps {first}-{last})" if bands > 1 else ""),
        fontsize=11,
        x=0.01,
        ha="left",
    )
    return fig


def _draw_band(ax, shown, a, z, first, n_rows, score, max_chars, decimals, eos, groups,
               per_row) -> None:  # fmt: skip
    """Steps ``a..z`` in one band of the figure; step ``a - 1`` is drawn as grey context
    (or the prompt box when ``a`` is the first step)."""
    band = shown[(shown.step >= a) & (shown.step <= z)]
    where = {int(r.node): (int(r.step), float(r.y)) for r in band.itertuples() if r.node >= 0}
    root_y = _root_y(band, a)
    context = shown[(shown.step == a - 1) & shown.fate.isin(["kept"])] if a > first else None
    if a == first:
        box = {"boxstyle": "round,pad=0.3", "fc": "#f2f2f2", "ec": "#888888"}
        ax.text(a - 1, root_y, "prompt", ha="center", va="center", fontsize=NODE_FONT,
                zorder=4, bbox=box)  # fmt: skip
    elif context is not None:
        for r in context.itertuples():
            where[int(r.node)] = (a - 1, float(r.y))
            ax.text(a - 1, r.y, _node_label(r.token, r.token_id, eos, max_chars), ha="center",
                    va="center", fontsize=NODE_FONT, color="#777777", zorder=4,
                    bbox={"boxstyle": "round,pad=0.22", "fc": "#f4f4f4", "ec": "#bbbbbb",
                          "ls": ":"})  # fmt: skip
    _draw_edges(ax, band, where, a, root_y)
    _draw_nodes(ax, band, score, max_chars, decimals, eos, groups)
    ax.set_xlim(a - 1.6, a + per_row - 0.4)
    ax.set_ylim(n_rows - 0.4, -0.7)
    ax.set_xticks(range(a, z + 1))
    ax.tick_params(axis="x", labelsize=NODE_FONT + 1)
    ax.set_yticks([])
    for side in ("left", "right", "top"):
        ax.spines[side].set_visible(False)


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
    """Centre to centre, under the boxes (which are opaque): each edge ends where its
    boxes begin, whatever their width."""
    order = {"pruned": 0, "diversity": 0, "constraint": 0, "rejected": 1, "kept": 2, "finished": 2}
    for r in sorted(shown.itertuples(), key=lambda r: (order[r.fate], r.returned)):
        parent = where.get(int(r.parent_node))
        if parent is None:
            if int(r.step) != first or int(r.parent_node) >= 0:
                continue  # its parent is outside the drawn steps or was not drawn
            parent = (first - 1, root_y)
        x0, y0 = parent
        style = STYLE[r.fate]
        colour, width, z = style["line"], 0.7, 1
        if r.fate in ("kept", "finished"):
            width, z = 1.1, 2
        if r.returned:
            colour, width, z = RETURNED, 2.6, 3
        ax.plot([x0, r.step], [y0, r.y], color=colour, lw=width, zorder=z,
                solid_capstyle="butt")  # fmt: skip


def _draw_nodes(ax, shown, score, max_chars, decimals, eos, groups) -> None:
    shade = {g: GROUP_SHADES[i % len(GROUP_SHADES)] for i, g in enumerate(groups)}
    for r in shown.itertuples():
        style = STYLE[r.fate]
        text = _node_label(r.token, r.token_id, eos, max_chars)
        boxed = r.fate != "pruned"
        value = getattr(r, score)
        label_text = f"{text}\n{value:.{decimals}f}" if boxed or r.returned else text
        if boxed or r.returned:
            bbox = {
                "boxstyle": "round,pad=0.22",
                "fc": style["face"] if style["face"] != "none" else "white",
                "ec": RETURNED if r.returned else style["edge"],
                "lw": 2.0 if r.returned else 0.9,
                "ls": "--" if r.fate in ("rejected", "diversity", "constraint") else "-",
            }
        else:  # no frame, but opaque: the edge stops at the text
            bbox = {"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none"}
        if len(groups) > 1:
            ax.add_patch(Rectangle((r.step - 0.48, r.y - 0.48), 0.96, 0.96, lw=0, zorder=0,
                                   fc=shade[r.group]))  # fmt: skip
        weight = "bold" if r.returned or r.fate == "finished" else "normal"
        ax.text(
            r.step,
            r.y,
            label_text,
            ha="center",
            va="center",
            zorder=4,
            fontsize=NODE_FONT,
            color=style["text"],
            fontweight=weight,
            linespacing=0.95,
            bbox=bbox,
            fontfamily="DejaVu Sans",
            fontstyle="italic" if r.source == "constraint" else "normal",
        )


#: inches one legend entry takes (marker, gap and a label of up to ~22 characters at 8 pt)
LEGEND_ENTRY_WIDTH = 1.9


def _legend_columns(handles: list, width: float) -> int:
    """As many legend columns as fit in ``width`` inches (the legend spans the axes)."""
    fit = int((width - 0.9) // LEGEND_ENTRY_WIDTH)
    return max(1, min(len(handles), fit))


def _legend(shown: pd.DataFrame, grouped: bool = False, groups=()) -> list:
    """Legend entries for the fates drawn (kept beams and the returned path always), and
    the group shades of a group beam search."""
    drawn = set(shown.fate) | {"kept"}
    if shown.returned.any():
        drawn.add("returned sequence")
    if (shown.source == "constraint").any():
        drawn.add("proposed by a constraint")
    handles = _all_legend()
    out = [h for h in handles if _LABEL_FATE.get(h.get_label(), h.get_label()) in drawn]
    if grouped:
        out += [
            Patch(facecolor=GROUP_SHADES[i % len(GROUP_SHADES)], label=f"group {g}")
            for i, g in enumerate(groups)
        ]
    return out


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
