"""HTML and image pieces the widgets show: coloured tokens, tables, figures, messages.

Pure functions (no ipywidgets here), so they are easy to test and reuse:

>>> token_spans(["Hel", "lo"], [0.9, 0.2])[:5]
'<span'
>>> prob_colour(1.0)
'#1a9850'
"""

from __future__ import annotations

import html
import io
import threading
import warnings
from collections.abc import Sequence

import matplotlib
import pandas as pd

#: Held while warnings are caught: ``catch_warnings`` swaps module-wide state, so two
#: threads (the kernel's and a widget's worker) must not do it at once.
WARNINGS_LOCK = threading.RLock()

#: colour map for probabilities: red (unlikely) -> yellow -> green (likely)
PROB_CMAP = "RdYlGn"


def prob_colour(p: float) -> str:
    """The background colour of a token with probability ``p`` (a hex string)."""
    p = min(max(float(p), 0.0), 1.0)
    return matplotlib.colors.to_hex(matplotlib.colormaps[PROB_CMAP](p))


def visible(token: str) -> str:
    """A token's text with newlines and tabs made visible (for HTML and labels)."""
    return token.replace("\n", "\u21b5\n").replace("\t", "\u2192")


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
            f"{html.escape(visible(tok))}</span>"
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


def frame_html(frame: pd.DataFrame, digits: int = 3, max_rows: int = 200) -> str:
    """A DataFrame as a plain HTML table (floats rounded), inside a scrolling box."""
    if frame is None or frame.empty:
        return "<i>no rows</i>"
    shown = frame.head(max_rows).round(digits)
    table = shown.to_html(index=False, classes="genlab-table", border=0, escape=True)
    return f'<div style="max-height:360px;overflow:auto">{table}</div>'


def message(text: str, kind: str = "info") -> str:
    """A coloured one-line message: kind is info, ok, warn or error."""
    colour = {"info": "#555", "ok": "#1a7f37", "warn": "#9a6700", "error": "#cf222e"}[kind]
    cls = f"genlab-{kind}"
    return (
        f'<div class="{cls}" style="color:{colour};white-space:pre-wrap;font-size:smaller">'
        f"{html.escape(text)}</div>"
    )


def figure_png(fig, dpi: int = 80) -> bytes:
    """PNG bytes of a matplotlib Figure (the figure is not shown anywhere)."""
    buf = io.BytesIO()
    with WARNINGS_LOCK, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # layout notes on very small figures
        fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()
