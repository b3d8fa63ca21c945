"""HTML and image pieces the widgets show: coloured tokens, tables, figures, messages.

Pure functions (no ipywidgets here), so they are easy to test and reuse:

>>> token_spans(["Hel", "lo"], [0.9, 0.2])[:5]
'<span'
>>> prob_colour(1.0)
'#1a9850'
"""

from __future__ import annotations

import base64
import html
import io
import math
import numbers
import threading
import warnings
from collections.abc import Sequence

import matplotlib
import numpy as np
import pandas as pd

from ..tokens import NEWLINE, show_token

#: Held while warnings are caught: ``catch_warnings`` swaps module-wide state, so two
#: threads (the kernel's and a widget's worker) must not do it at once.
WARNINGS_LOCK = threading.RLock()

#: colour map for probabilities: red (unlikely) -> yellow -> green (likely)
PROB_CMAP = "RdYlGn"


def prob_colour(p: float) -> str:
    """The background colour of a token with probability ``p`` (a hex string)."""
    p = min(max(float(p), 0.0), 1.0)
    return matplotlib.colors.to_hex(matplotlib.colormaps[PROB_CMAP](p))


def running_text(token: str) -> str:
    """A token inside running text: its decoded text as it reads in the sentence (spaces
    stay spaces, the coloured backgrounds already mark where tokens start), with the
    characters a reader cannot see drawn by :func:`genlab.tokens.show_token` (a newline
    is drawn as ↵ and still breaks the line)."""
    if "\n" in token:
        return show_token(token).replace(NEWLINE, NEWLINE + "\n")
    if not token.strip(" ") or "\t" in token:
        return show_token(token)
    return token


def token_spans(
    tokens: Sequence[str],
    probs: Sequence[float],
    titles: Sequence[str] | None = None,
    marks: Sequence[int] = (),
) -> str:
    """The tokens as HTML spans, each on a background coloured by its probability.

    tokens, probs: (n,); titles: (n,) hover text (default: the probability);
    marks: indices drawn with a thick outline (e.g. the first diverging token).
    """
    out = []
    for i, (tok, p) in enumerate(zip(tokens, probs)):
        title = titles[i] if titles is not None else f"p = {p:.3f}"
        outline = "outline:2px solid #1f3fbf;" if i in marks else ""
        out.append(
            f'<span class="genlab-token" data-i="{i}" title="{html.escape(title)}" '
            f'style="background:{prob_colour(p)};border-radius:3px;padding:0 1px;{outline}">'
            f"{html.escape(running_text(tok))}</span>"
        )
    return "".join(out)


def text_block(body: str, css_class: str = "genlab-text", prompt: str | None = None) -> str:
    """A monospace block holding ``body`` (already HTML), optionally after a grey prompt."""
    head = ""
    if prompt:
        head = f'<span style="color:#888">{html.escape(prompt)}</span>'
    return (
        f'<div class="{css_class}" style="font-family:monospace;line-height:1.8;'
        f'white-space:pre-wrap;padding:4px">{head}{body}</div>'
    )


def prob_legend() -> str:
    """A one-line legend of the probability colours."""
    stops = "".join(
        f'<span style="background:{prob_colour(p)};padding:0 6px">{p:g}</span>'
        for p in (0.0, 0.25, 0.5, 0.75, 1.0)
    )
    return f'<div style="font-size:smaller;color:#555">probability: {stops}</div>'


def format_number(value, digits: int = 3) -> str:
    """A number as a table cell: ``digits`` decimals, ``-inf`` / ``inf`` spelled out, and
    huge magnitudes (the reference's ``-1e9`` "no hypothesis yet") in short form."""
    if isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)):
        value = int(value) if isinstance(value, numbers.Integral) else float(value)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, (bool, str)) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if math.isinf(value):
        return "-inf" if value < 0 else "inf"
    if abs(value) >= 1e6:
        return f"{value:.3g}"
    return f"{value:.{digits}f}"


#: spacing of the panels' tables (an HTML widget gets none of JupyterLab's table styles:
#: without it the headers of adjacent columns run together); a row stays on one line, and
#: a table wider than its panel scrolls sideways in its box (see :func:`frame_html`)
TABLE_CSS = (
    "<style>.genlab-table th, .genlab-table td { padding: 2px 8px; white-space: nowrap; }</style>"
)


def frame_html(frame: pd.DataFrame, digits: int = 3, max_rows: int = 200) -> str:
    """A DataFrame as a plain HTML table (numbers by :func:`format_number`, empty cells
    for missing values, never "None"), inside a box that scrolls rather than cuts."""
    if frame is None or frame.empty:
        return "<i>no rows</i>"
    shown = frame.head(max_rows)
    formatters = {}
    for c in shown.columns:
        col = shown[c]
        counts = (
            pd.api.types.is_float_dtype(col)
            and col.notna().any()
            and bool(((col.dropna() % 1) == 0).all())
            and bool((col.dropna().abs() < 1e6).all())
        )  # a float column of whole numbers (counts): printed as whole numbers
        formatters[c] = (
            (lambda v: format_number(int(v)) if v == v else "")
            if counts
            else (lambda v, d=digits: format_number(v, d))
        )
    table = shown.to_html(
        index=False,
        classes="genlab-table",
        border=0,
        escape=True,
        formatters=formatters,
        na_rep="",
    )
    return f'<div style="max-height:360px;max-width:100%;overflow:auto">{TABLE_CSS}{table}</div>'


def message(text: str, kind: str = "info") -> str:
    """A coloured one-line message: kind is info, ok, warn or error."""
    colour = {"info": "#555", "ok": "#1a7f37", "warn": "#9a6700", "error": "#cf222e"}[kind]
    cls = f"genlab-{kind}"
    return (
        f'<div class="{cls}" style="color:{colour};white-space:pre-wrap;font-size:smaller">'
        f"{html.escape(text)}</div>"
    )


#: resolution of the figures the widgets show (as the notebooks' inline figures)
FIGURE_DPI = 100


def figure_png(fig, dpi: int = FIGURE_DPI) -> bytes:
    """PNG bytes of a matplotlib Figure (the figure is not shown anywhere)."""
    buf = io.BytesIO()
    with WARNINGS_LOCK, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # layout notes on very small figures
        fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def png_size(png: bytes) -> tuple[int, int]:
    """(width, height) in pixels of PNG bytes (from the IHDR chunk)."""
    if len(png) < 24:
        return 0, 0
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")


def show_figure(image, fig, dpi: int = FIGURE_DPI) -> bytes:
    """Draw ``fig`` into the ``widgets.Image`` ``image`` at its native size: one figure
    pixel per screen pixel (never stretched or squeezed; a wide figure scrolls in its
    box). ``fig`` None clears the image. Returns the PNG bytes."""
    if fig is None:
        image.value = b""
        image.layout.width = image.layout.height = None
        return b""
    png = figure_png(fig, dpi=dpi)
    width, height = png_size(png)
    image.value = png
    image.layout.width, image.layout.height = f"{width}px", f"{height}px"
    image.layout.max_width = "none"
    image.layout.object_fit = "none"
    return png


def png_html(png: bytes, alt: str = "figure") -> str:
    """An ``<img>`` of PNG bytes at native size (for the static HTML of a panel)."""
    if not png:
        return ""
    width, _ = png_size(png)
    data = base64.b64encode(bytes(png)).decode("ascii")
    return (
        f'<div style="overflow-x:auto"><img alt="{html.escape(alt)}" width="{width}" '
        f'style="max-width:none" src="data:image/png;base64,{data}"></div>'
    )


def prob_text(p: float) -> str:
    """A probability for a label: 3 decimals, or the power of ten when it is below 0.001
    (a possible token is never shown as "0.000")."""
    p = float(p)
    if p >= 0.001 or p == 0:
        return f"{p:.3f}"
    return f"{p:.0e}"


def alternatives(trace, row: int = 0, n: int = 3) -> list[str]:
    """Per recorded step, the ``n`` most likely tokens still possible (probability > 0)
    under the final scores, as ``"␣the 0.412, ␣a 0.100"``: tokens of probability 0
    (removed by top-k, top-p, ...) are never listed."""
    out = []
    for rec in trace.records:
        final = rec.stages[-1]
        if row >= final.top_ids.shape[0] or int(rec.chosen_for_row[row]) < 0:
            continue
        parts = []
        for tid, lp in zip(final.top_ids[row].tolist(), final.top_logprobs[row].tolist()):
            if len(parts) == n or not math.isfinite(lp) or math.exp(lp) == 0:
                break
            parts.append(f"{show_token(trace.token_text(tid))} {prob_text(math.exp(lp))}")
        out.append(", ".join(parts))
    return out


def steps_table(trace, row: int = 0, n: int = 3) -> pd.DataFrame:
    """``trace.steps(row)`` for people: tokens shown by :func:`genlab.tokens.show_token`
    and ``top`` listing only tokens still possible (see :func:`alternatives`)."""
    table = trace.steps(row=row)
    if table.empty:
        return table
    table = table.copy()
    table["token"] = [show_token(t) for t in table.token]
    table["top"] = alternatives(trace, row=row, n=n)
    return table
