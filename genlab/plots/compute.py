"""Figures of compute spent at decoding time (from genlab/experiments/compute.py): coverage,
majority
vote and best-of-N against the number of samples N.

Sizes follow :mod:`genlab.plots.inside`: at most 7.2 inches wide, no text under 8 pt.
"""

from __future__ import annotations

from matplotlib.figure import Figure

from .inside import MAX_WIDTH, SMALL

#: each curve's colour and marker, and what the legend says it is
STYLE = {
    "pass@N": ("#1f77b4", "o", "coverage: some sample right (pass@N)"),
    "majority@N": ("#2ca02c", "s", "majority vote of N (self-consistency)"),
    "best-of-N": ("#d62728", "^", "best of N by the model's score"),
}


def coverage_plot(coverage, *, width: float | None = None) -> Figure:
    """Coverage (pass@N), majority-vote and best-of-N accuracy against N on a log axis,
    each with its bootstrap interval as a band; the gap between coverage and the others
    is what a perfect verifier would add.

    coverage: a :class:`~genlab.experiments.compute.Coverage` (:func:`genlab.coverage_curve`);
    width: inches (default 6.4).

    (Not run as a test: it draws a figure; tests/test_compute.py draws one.)

    >>> genlab.plots.coverage_plot(genlab.coverage_curve(lm, tasks))   # doctest: +SKIP
    """
    table = coverage.table
    fig = Figure(figsize=(min(MAX_WIDTH, width or 6.4), 3.8), layout="constrained")
    ax = fig.subplots()
    for curve, (colour, marker, label) in STYLE.items():
        rows = table[table.curve == curve].sort_values("N")
        if rows.empty:
            continue
        ax.fill_between(rows.N, rows.low, rows.high, color=colour, alpha=0.15, linewidth=0)
        ax.plot(rows.N, rows.value, color=colour, marker=marker, markersize=4, label=label)
    ns = sorted(set(table.N))
    ax.set_xscale("log", base=2)
    ax.set_xticks(ns, [str(n) for n in ns], fontsize=SMALL)
    ax.minorticks_off()
    ax.set_ylim(0, 1.02)
    ax.tick_params(axis="y", labelsize=SMALL)
    ax.set_xlabel("samples per task N (log scale)", fontsize=9)
    ax.set_ylabel("share of tasks solved", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=SMALL, loc="lower right")
    ax.set_title(
        f"{len(coverage.tasks)} tasks, {coverage.n} samples each "
        f"({coverage.level:.0%} bootstrap bands over tasks)",
        fontsize=10,
    )
    return fig
