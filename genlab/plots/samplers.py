"""What the samplers beyond the reference did in a run, as tables and figures.

The waterfall and the trace show each sampler as a stage like any processor (``dry``,
``xtc``, ``mirostat_v2``...). These add what a stage cannot show: the repeat each DRY
penalty matched, whether XTC fired and what it removed, and mirostat's μ against the
surprise of the tokens chosen.

Each table function takes a :class:`~genlab.run.engine.Run` (started with the sampler on) and a
row; figures return a matplotlib ``Figure`` (pyplot is not used; pass ``ax=`` to draw into
an existing axes).
"""

from __future__ import annotations

from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from genlab.processors.samplers import (
    DRYLogitsProcessor,
    MirostatLogitsWarper,
    MirostatV2LogitsWarper,
    XTCLogitsWarper,
)


def _find(run: Any, kinds: tuple[type, ...], name: str) -> Any:
    for processor in run.views.processors:
        if isinstance(processor, kinds):
            return processor
    raise ValueError(f"this run has no {name} sampler: start it with the {name} fields set")


def _text(run: Any, ids) -> str:
    tok = run.given.tokenizer
    return tok.decode(list(ids)) if tok is not None else " ".join(map(str, ids))


def dry_table(run: Any, row: int = 0) -> pd.DataFrame:
    """One line per token DRY penalised at each step: ``step, token, repeat_length,
    penalty, sequence`` (the repeat that token would have extended).

    run: a run started with ``dry_multiplier`` > 0; row: which of its rows.

    >>> run = lm.start("red blue green. red blue green. red blue", max_new_tokens=2,
    ...                dry_multiplier=0.8)
    >>> _ = run.run()
    >>> dry_table(run).columns.tolist()
    ['step', 'token', 'repeat_length', 'penalty', 'sequence']
    """
    dry = _find(run, (DRYLogitsProcessor,), "DRY (dry_multiplier)")
    start = run.given.prompt_length
    lines = []
    for length, rows in sorted(dry.reports.items()):
        for p in rows[row] if row < len(rows) else ():
            lines.append(
                {
                    "step": length - start,
                    "token": _text(run, [p.token_id]),
                    "repeat_length": p.repeat_length,
                    "penalty": p.penalty,
                    "sequence": _text(run, p.sequence),
                }
            )
    columns = ["step", "token", "repeat_length", "penalty", "sequence"]
    return pd.DataFrame(lines, columns=columns)


def xtc_table(run: Any, row: int = 0) -> pd.DataFrame:
    """One line per step: ``step, drawn, fired, removed`` (the tokens XTC took away).

    run: a run started with ``xtc_probability`` > 0 (and sampling); row: which of its rows.

    >>> run = lm.start("Once upon a time", max_new_tokens=3, do_sample=True, seed=0,
    ...                xtc_probability=0.5)
    >>> _ = run.run()
    >>> len(xtc_table(run))
    3
    """
    xtc = _find(run, (XTCLogitsWarper,), "XTC (xtc_probability)")
    start = run.given.prompt_length
    lines = []
    for length, rows in sorted(xtc.reports.items()):
        r = rows[row]
        removed = [_text(run, [t]) for t in r.removed]
        lines.append(
            {"step": length - start, "drawn": r.drawn, "fired": r.fired, "removed": removed}
        )
    return pd.DataFrame(lines, columns=["step", "drawn", "fired", "removed"])


def mirostat_table(run: Any, row: int = 0) -> pd.DataFrame:
    """One line per step: ``step, mu, kept, surprise`` (bits; NaN for a step whose token
    is not chosen yet), and ``tau`` the target.

    run: a run started with ``mirostat_mode`` 1 or 2 (and sampling); row: which of its rows.

    >>> run = lm.start("Once upon a time", max_new_tokens=3, do_sample=True, seed=0,
    ...                top_k=0, mirostat_mode=2)
    >>> _ = run.run()
    >>> float(mirostat_table(run)["mu"].iloc[0])   # 2 tau, tau = 5 bits by default
    10.0
    """
    miro = _find(run, (MirostatLogitsWarper, MirostatV2LogitsWarper), "mirostat (mirostat_mode)")
    steps = miro.history(run.sequences[row], start=run.given.prompt_length)
    return pd.DataFrame(
        {
            "step": range(len(steps)),
            "mu": [s.mu for s in steps],
            "kept": [s.kept for s in steps],
            "surprise": [float("nan") if s.surprise is None else s.surprise for s in steps],
            "tau": miro.tau,
        }
    )


def mirostat_plot(run_or_table: Any, row: int = 0, ax=None) -> Figure:
    """μ and the chosen tokens' surprise over the steps, with the target τ.

    run_or_table: a run started with mirostat on, or :func:`mirostat_table`'s table;
    row: which row of the run; ax: a matplotlib axes to draw into (else a new figure).

    >>> import pandas as pd
    >>> t = pd.DataFrame({"step": [0, 1], "mu": [6.0, 5.8], "kept": [9, 4],
    ...                   "surprise": [4.0, 2.5], "tau": 3.0})
    >>> mirostat_plot(t).axes[0].get_ylabel()
    'bits'
    """
    table = (
        run_or_table
        if isinstance(run_or_table, pd.DataFrame)
        else mirostat_table(run_or_table, row)
    )
    if ax is None:
        fig = Figure(figsize=(6.4, 3.2), layout="constrained")
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    ax.plot(table["step"], table["mu"], marker="o", label="μ (truncation)")
    ax.plot(table["step"], table["surprise"], marker="x", linestyle=":", label="surprise of choice")
    if len(table):
        ax.axhline(float(table["tau"].iloc[0]), color="grey", linestyle="--", label="τ (target)")
    ax.set_xlabel("step")
    ax.set_ylabel("bits")
    ax.set_title("mirostat")
    ax.legend(loc="best", fontsize="small")
    return fig


__all__ = ["dry_table", "mirostat_plot", "mirostat_table", "xtc_table"]
