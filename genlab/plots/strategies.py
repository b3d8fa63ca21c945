"""Figures of strategies' step data. Assisted decoding: per iteration, drafted against
accepted tokens and the draft budget; contrastive search: each candidate's confidence,
degeneration penalty and score.

Each function takes a table from :mod:`genlab.strategies.assisted` /
:mod:`genlab.strategies.contrastive` and returns a matplotlib ``Figure`` (pyplot is not
used). Pass ``ax=`` to draw into an existing axes; its figure is returned.

>>> import pandas as pd
>>> table = pd.DataFrame({"step": [0, 1], "n_drafted": [4, 4], "n_accepted": [4, 1],
...                       "n_added": [5, 2], "num_assistant_tokens": [4, 6]})
>>> acceptance_plot(table).axes[0].get_xlabel()
'iteration'
"""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from ..run.trace import assisted_table, contrastive_table, trace_of
from .tokens import label

ACCEPTED = "#2d9d5a"
REJECTED = "#d1495b"
BONUS = "#5b8bd1"


def _axes(ax, figsize):
    if ax is not None:
        return ax.figure, ax
    fig = Figure(figsize=figsize, layout="constrained")
    return fig, fig.add_subplot()


def _require(table, columns: list[str], made_by: str) -> None:
    if not isinstance(table, pd.DataFrame):
        raise ValueError(f"expected the DataFrame from {made_by}, got {type(table).__name__}")
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise ValueError(f"the table lacks columns {missing}: build it with {made_by}")


def _table(source, build, plot: str):
    """``source`` when it is a DataFrame, else the table ``build`` makes from its trace (a
    result of ``lm.generate(..., trace=True)``, a traced run, or a Trace)."""
    if isinstance(source, pd.DataFrame):
        return source
    return build(trace_of(source, plot))


def acceptance_plot(table: pd.DataFrame, ax=None, figsize=(7, 3)) -> Figure:
    """Stacked bars per iteration: accepted draft tokens, rejected ones, and the model's own
    token; a step line shows the draft budget (``num_assistant_tokens``).

    table: ``assisted_table(...)`` (columns step, n_drafted, n_accepted, n_added,
    num_assistant_tokens), or the traced result it is built from; ax: draw into this axes
    instead of a new figure; figsize: the new figure's size in inches.

    >>> import pandas as pd
    >>> t = pd.DataFrame({"step": [0, 1], "n_drafted": [4, 4], "n_accepted": [4, 1],
    ...                   "n_added": [5, 2], "num_assistant_tokens": [4, 6]})
    >>> acceptance_plot(t).axes[0].get_xlabel()
    'iteration'
    """
    table = _table(table, assisted_table, "acceptance_plot")
    _require(table, ["step", "n_drafted", "n_accepted", "num_assistant_tokens"], "assisted_table")
    fig, ax = _axes(ax, figsize)
    x = range(len(table))
    accepted = table["n_accepted"].to_numpy()
    rejected = table["n_drafted"].to_numpy() - accepted
    ax.bar(x, accepted, color=ACCEPTED, label="accepted")
    ax.bar(x, rejected, bottom=accepted, color=REJECTED, label="rejected")
    ax.bar(x, 1, bottom=accepted + rejected, color=BONUS, alpha=0.6, label="model's token")
    ax.step(x, table["num_assistant_tokens"].to_numpy(), where="mid", color="black",
            linewidth=1, label="draft budget")  # fmt: skip
    drafted = int(table["n_drafted"].sum())
    rate = float(accepted.sum()) / drafted if drafted else 0.0
    ax.set_title(f"{len(table)} iterations, acceptance rate {rate:.0%}")
    ax.set_xlabel("iteration")
    ax.set_ylabel("tokens")
    # outside the axes, so that it never covers a bar
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", frameon=False)
    return fig


def contrastive_plot(table: pd.DataFrame, step: int = 0, row: int = 0, ax=None,
                     figsize=(6, 3)) -> Figure:  # fmt: skip
    """For one step and row of ``contrastive_table``: each candidate's confidence,
    degeneration penalty and combined score; the chosen one is outlined.

    table: ``contrastive_table(...)``, or the traced result it is built from; step, row:
    which step and row to draw; ax: draw into this axes instead of a new figure; figsize:
    the new figure's size in inches.

    >>> import pandas as pd
    >>> c = pd.DataFrame({"step": [0, 0], "row": [0, 0], "candidate": [0, 1],
    ...                   "token_id": [5, 9], "confidence": [0.6, 0.3], "penalty": [0.2, 0.9],
    ...                   "score": [0.4, 0.0], "chosen": [True, False]})
    >>> contrastive_plot(c).axes[0].get_title()
    'contrastive search, step 0'
    """
    table = _table(table, contrastive_table, "contrastive_plot")
    _require(table, ["step", "row", "token_id", "confidence", "penalty", "score", "chosen"],
             "contrastive_table")  # fmt: skip
    part = table[(table["step"] == step) & (table["row"] == row)]
    if part.empty:
        raise ValueError(f"no candidates for step={step}, row={row} in the table")
    fig, ax = _axes(ax, figsize)
    x = range(len(part))
    width = 0.27
    ax.bar([i - width for i in x], part["confidence"], width, label="confidence", color=BONUS)
    ax.bar(x, part["penalty"], width, label="penalty (max cosine)", color=REJECTED)
    bars = ax.bar([i + width for i in x], part["score"], width, label="score", color=ACCEPTED)
    for bar, chosen in zip(bars, part["chosen"], strict=True):
        if chosen:
            bar.set_edgecolor("black")
            bar.set_linewidth(2)
    labels = part["token"] if "token" in part.columns else part["token_id"]
    ax.set_xticks(list(x), [label(t) if "token" in part.columns else str(t) for t in labels])
    ax.axhline(0, color="grey", linewidth=0.5)
    ax.set_title(f"contrastive search, step {step}")
    ax.set_xlabel("candidate")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return fig
