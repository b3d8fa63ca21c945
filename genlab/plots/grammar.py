"""What a grammar (``json_schema=``, ``regex=``, ``grammar=``) did to a run, step by step:
a table and a figure read from the run's trace (``trace=True``).

The waterfall shows the ``grammar`` stage like any processor; these follow it along the
whole answer: how many tokens it allowed, how much of the model's probability was on
them before the mask (where the model "wanted" to leave the format), the most probable
token it removed, and the steps it forced (one token allowed).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from genlab.run.trace import trace_of

from .tokens import MAX_WIDTH, SMALL, top_removed


def grammar_table(trace, row: int = 0) -> pd.DataFrame:
    """One row per generated token of ``row``: ``token``; ``allowed``, the tokens the
    grammar allowed; ``allowed_mass``, the probability the distribution before the
    grammar stage gave them; ``top_removed`` and ``top_removed_prob``, the most probable
    token it removed (empty when none of the trace's top tokens was removed: the trace
    keeps the top ``depth``); ``grammar_forced``, whether it allowed one token.

    Args:
        trace: the trace of a run under a grammar (or its result, ``trace=True``);
        row: which sequence.

    >>> res = lm.generate("Yes or no?", chat=True, regex="yes|no", trace=True)
    >>> genlab.plots.grammar_table(res.trace)[["token", "allowed", "grammar_forced"]]
            token  allowed  grammar_forced
    0          no        5           False
    1  <|im_end|>        1            True
    """
    trace = trace_of(trace, "grammar_table")
    if "grammar" not in trace.stages():
        raise ValueError(
            "this trace has no 'grammar' stage: generate with json_schema=, regex= or "
            "grammar= and trace=True"
        )
    out = []
    for rec in trace.records:
        names = [st.name for st in rec.stages]
        gi = names.index("grammar")
        before, after = rec.stages[gi - 1], rec.stages[gi]
        if row >= after.top_ids.shape[0]:
            continue
        tid = int(rec.chosen_for_row[row])
        if tid < 0:
            continue
        removed_mass = float(after.removed_mass[row]) if after.removed_mass is not None else 0.0
        removed_id, top_prob = top_removed(before, after, row)
        allowed = int(after.kept[row])
        out.append(
            {
                "step": rec.step,
                "token": trace.token_text(tid),
                "allowed": allowed,
                "allowed_mass": max(0.0, 1.0 - removed_mass),
                "top_removed": "" if removed_id is None else trace.token_text(removed_id),
                "top_removed_prob": top_prob,
                "grammar_forced": allowed == 1,
            }
        )
    return pd.DataFrame(out)


def allowed_mass(trace, row: int = 0, ax=None) -> Figure:
    """Across an answer, the probability the model put on the tokens the grammar allowed,
    before the mask: a bar per generated token, low where the model "wanted" to leave the
    format; the steps the grammar forced (one token allowed) hatched.

    Args:
        trace: the trace of a run under a grammar (or its result, ``trace=True``);
        row: which sequence; ax: a matplotlib axes to draw into (default: a new figure).

    (The line marked +SKIP is not run as a test: it draws a matplotlib figure.)

    >>> res = lm.generate("Yes or no?", chat=True, regex="yes|no", trace=True)
    >>> genlab.plots.allowed_mass(res.trace)                 # doctest: +SKIP
    """
    table = grammar_table(trace, row=row)
    if ax is None:
        fig = Figure(figsize=(MAX_WIDTH, 3.4), layout="constrained")
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    x = np.arange(len(table))
    forced = table.grammar_forced.to_numpy(dtype=bool)
    ax.bar(x[~forced], table.allowed_mass[~forced], color="tab:blue", label="chosen freely")
    ax.bar(x[forced], table.allowed_mass[forced], color="tab:gray", hatch="//",
           label="forced (one token allowed)")  # fmt: skip
    ax.set_xticks(x, table.token.tolist(), rotation=90, fontsize=SMALL)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("probability on allowed tokens")
    ax.set_title("Before the mask: how much the model put on what the grammar allows")
    ax.legend(loc="lower right", fontsize=SMALL)
    ax.spines[["top", "right"]].set_visible(False)
    return fig


__all__ = ["allowed_mass", "grammar_table"]
