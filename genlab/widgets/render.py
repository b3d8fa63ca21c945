"""HTML and image pieces the widgets show: coloured tokens, tables, figures, messages.

Pure functions (no ipywidgets here), so they are easy to test and reuse:

>>> token_spans(["Hel", "lo"], [0.9, 0.2])[:5]
'<span'
>>> prob_colour(1.0)
'#006837'
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

from ..config import GenerationMode
from ..text.tokens import NEWLINE, candidate_labels, piece_labels, running_pieces, show_token

#: Held while warnings are caught: ``catch_warnings`` swaps module-wide state, so two
#: threads (the kernel's and a widget's worker) must not do it at once.
WARNINGS_LOCK = threading.RLock()

#: colour map for probabilities: red (unlikely) -> yellow -> green (likely)
PROB_CMAP = "RdYlGn"


def prob_colour(p: float) -> str:
    """The background colour of a token with probability ``p`` (a hex string)."""
    p = min(max(float(p), 0.0), 1.0)
    return matplotlib.colors.to_hex(matplotlib.colormaps[PROB_CMAP](p))


def _luminance(hex_colour: str) -> float:
    r, g, b = (int(hex_colour[i : i + 2], 16) / 255 for i in (1, 3, 5))
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in (r, g, b)]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def contrast(fg: str, bg: str) -> float:
    """The WCAG contrast ratio of two ``#rrggbb`` colours (1 to 21; text needs 4.5)."""
    a, b = sorted((_luminance(fg), _luminance(bg)), reverse=True)
    return (a + 0.05) / (b + 0.05)


def ink(bg: str) -> str:
    """Black or white, whichever reads better on the background ``bg`` (one of them
    always reaches a contrast of 4.5:1)."""
    return "#000000" if contrast("#000000", bg) >= contrast("#ffffff", bg) else "#ffffff"


#: the small mark a newline leaves at the end of its line (the line still breaks)
NEWLINE_MARK = f'<span class="genlab-nl" style="font-size:70%;opacity:0.75">{NEWLINE}</span>'


#: what the text shows for the end-of-text token that ended a run (never ``<|im_end|>``)
END_MARK = "\u25a0 end"  # ■: a glyph DejaVu Sans and Liberation carry (U+23F9 drew a box)


def running_text(token: str) -> str:
    """A token inside running text, as HTML: its decoded text as it reads in the sentence
    (spaces stay spaces, so the text wraps; the coloured boxes mark where tokens start);
    a newline leaves a small ↵ mark and breaks the line."""
    return NEWLINE_MARK.join(html.escape(part) for part in token.split("\n")).replace(
        NEWLINE_MARK, NEWLINE_MARK + "\n"
    )


def token_spans(
    tokens: Sequence[str],
    probs: Sequence[float],
    titles: Sequence[str] | None = None,
    marks: Sequence[int] = (),
) -> str:
    """The tokens as HTML spans, each on a background coloured by its probability, in
    black or white text, whichever reads better on it.

    tokens: (n,) decoded texts as they read in the sentence (see :func:`running_text`;
    :func:`genlab.text.tokens.running_pieces` gives them, whole characters included);
    probs: (n,); titles: (n,) hover text (default: the probability);
    marks: indices drawn with a thick outline (e.g. the first diverging token).
    """
    out = []
    for i, (tok, p) in enumerate(zip(tokens, probs, strict=True)):
        title = titles[i] if titles is not None else f"p = {prob_text(p)}"
        outline = "outline:2px solid #1f3fbf;" if i in marks else ""
        bg = prob_colour(p)
        out.append(
            f'<span class="genlab-token" data-i="{i}" title="{html.escape(title)}" '
            f'style="background:{bg};color:{ink(bg)};border-radius:3px;padding:0 1px;'
            f'{outline}">{running_text(tok)}</span>'
        )
    return "".join(out)


def text_block(body: str, css_class: str = "genlab-text", prompt: str | None = None) -> str:
    """A monospace block holding ``body`` (already HTML), optionally after a grey prompt."""
    head = ""
    if prompt:
        head = f'<span style="color:#595959">{html.escape(prompt)}</span>'
    return (
        f'<div class="{css_class}" style="font-family:monospace;line-height:1.8;'
        "white-space:pre-wrap;overflow-wrap:anywhere;max-width:100%;box-sizing:border-box;"
        f'padding:4px">{head}{body}</div>'
    )


def prob_legend() -> str:
    """A one-line legend of the probability colours."""
    stops = "".join(
        f'<span style="background:{prob_colour(p)};color:{ink(prob_colour(p))};'
        f'padding:0 6px">{p:g}</span>'
        for p in (0.0, 0.25, 0.5, 0.75, 1.0)
    )
    return (
        f'<div class="genlab-legend" style="font-size:smaller;color:#444">probability: {stops}'
        "</div>"
    )


_SUPERSCRIPT = str.maketrans(
    "-0123456789", "\u207b\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079"
)


def scientific(value: float, digits: int = 1) -> str:
    """A small (or huge) number for people: ``3.1×10⁻⁷`` (never ``3e-07``)."""
    mantissa, exponent = f"{value:.{digits}e}".split("e")
    return f"{mantissa}\u00d710{str(int(exponent)).translate(_SUPERSCRIPT)}"


#: values the reference uses for "nothing yet" (a beam score of -1e9), shown as text
NOTHING_YET = -1e8


def format_number(value, digits: int = 3) -> str:
    """A number as a table cell: ``digits`` decimals; a value too small for them in
    scientific notation (``3.1×10⁻⁷``, never ``0.000``); ``-inf`` / ``inf`` spelled out;
    the reference's ``-1e9`` ("no hypothesis yet") as "none yet"; booleans as yes / no;
    a missing value as an empty cell."""
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, numbers.Real):
        value = int(value) if isinstance(value, numbers.Integral) else float(value)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, str) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if math.isinf(value):
        return "-inf" if value < 0 else "inf"
    if value <= NOTHING_YET:
        return "none yet"
    if abs(value) >= 1e6:
        return scientific(value)
    if value != 0 and abs(value) < 0.5 * 10**-digits:
        return scientific(value)
    return f"{value:.{digits}f}"


#: spacing of the panels' tables (an HTML widget gets none of JupyterLab's table styles:
#: without it the headers of adjacent columns run together); a header sits above its
#: cells (numbers on the right, text on the left) and breaks after an underscore, a row
#: stays on one line except in its text columns (see :func:`frame_html`), so that a
#: table fits 768 px; a table wider than its panel still scrolls sideways in its box
TABLE_CSS = (
    "<style>.genlab-table { border-collapse: collapse; }"
    ".genlab-table th, .genlab-table td { padding: 2px 5px; white-space: nowrap;"
    " text-align: left; vertical-align: top; }"
    ".genlab-table th { white-space: normal; vertical-align: bottom; }"
    ".genlab-table .genlab-num { text-align: right; }"
    ".genlab-table td.genlab-wrap { white-space: normal; min-width: 8em; max-width: 28em;"
    " overflow-wrap: anywhere; }</style>"
)

#: columns of free text, which wrap inside their cell
WRAP_COLUMNS = ("top", "text", "sample", "prompt")


def is_prob_column(name) -> bool:
    """A column of probabilities (``prob``, ``prob_before``, ``p_value`` ...): printed by
    :func:`prob_text`."""
    name = str(name)
    return (name.startswith("prob") or name.endswith("_prob") or name == "p_value") and (
        "logprob" not in name
    )


def frame_html(
    frame: pd.DataFrame, digits: int = 3, max_rows: int = 200, titles: dict | None = None
) -> str:
    """A DataFrame as a plain HTML table (numbers by :func:`format_number`, probabilities
    by :func:`prob_text`, empty cells for missing values, never "None", "nan" or
    "True"), inside a box that scrolls rather than cuts; text columns wrap. ``titles``:
    column -> one tooltip per row ("" for none; default ``frame.attrs["titles"]``)."""
    if frame is None or frame.empty:
        return '<div class="genlab-empty" style="margin:4px 0"><i>no rows</i></div>'
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
        if is_prob_column(c) and pd.api.types.is_numeric_dtype(col):
            formatters[c] = lambda v: "" if v != v else prob_text(v)
        elif counts:
            formatters[c] = lambda v: format_number(int(v)) if v == v else ""
        else:
            formatters[c] = lambda v, d=digits: format_number(v, d)
    table = shown.to_html(
        index=False,
        classes="genlab-table",
        border=0,
        escape=True,
        formatters=formatters,
        na_rep="",
    )
    columns = list(shown.columns)
    wrap = [i for i, c in enumerate(columns) if str(c) in WRAP_COLUMNS]
    numeric = {
        i
        for i, c in enumerate(columns)
        if pd.api.types.is_numeric_dtype(shown[c]) and not pd.api.types.is_bool_dtype(shown[c])
    }
    titles = titles if titles is not None else frame.attrs.get("titles") or {}
    tips = {columns.index(c): t for c, t in titles.items() if c in columns}
    head, body = table.split("</thead>", 1)
    head = head.replace('<tr style="text-align: right;">', "<tr>")
    heads = head.split("<th>")  # a header: aligned as its cells, broken after "_"
    for i in range(len(heads) - 1):
        name, rest = heads[i + 1].split("</th>", 1)
        cls = ' class="genlab-num"' if i in numeric else ""
        heads[i + 1] = f"<th{cls}>" + name.replace("_", "_<wbr>") + "</th>" + rest
    head = "".join(heads)
    rows = body.split("<tr>")  # mark the cells (pandas gives cells no classes)
    n = -1
    for r, row in enumerate(rows):
        if "<td>" not in row:
            continue
        n += 1
        cells = row.split("<td>")
        for i in range(len(cells) - 1):
            classes = [c for c, on in (("genlab-wrap", i in wrap), ("genlab-num", i in numeric))
                       if on]  # fmt: skip
            attrs = f' class="{" ".join(classes)}"' if classes else ""
            tip = tips[i][n] if i in tips and n < len(tips[i]) else ""
            if tip:
                attrs += f' title="{html.escape(tip)}"'
            cells[i + 1] = f"<td{attrs}>" + cells[i + 1]
        rows[r] = cells[0] + "".join(cells[1:])
    table = head + "</thead>" + "<tr>".join(rows)
    return (
        f'<div class="genlab-frame" style="max-height:360px;max-width:100%;overflow:auto">'
        f"{TABLE_CSS}{table}</div>"
    )


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
    """Draw ``fig`` into the ``widgets.Image`` ``image`` at its native size (one figure
    pixel per screen pixel, never stretched), scaled down with its aspect ratio kept
    when the panel is narrower (``max-width: 100%``: no figure cut at the panel's right
    edge, as the colour bar or the last column of a grid was at 768 px). ``fig`` None
    clears the image. Returns the PNG bytes."""
    if fig is None:  # hidden: an empty image shows a broken-image icon
        image.value = b""
        image.layout.width = image.layout.height = None
        image.layout.display = "none"
        return b""
    png = figure_png(fig, dpi=dpi)
    width, _ = png_size(png)
    image.value = png
    image.layout.display = None
    image.layout.width, image.layout.height = f"{width}px", "auto"
    image.layout.max_width = "100%"
    image.layout.object_fit = "contain"
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
    """A probability for a label: 3 decimals, or in scientific notation when it is below
    0.001 (``3.1×10⁻⁷``: a possible token is never shown as "0.000")."""
    p = float(p)
    if p != p:
        return ""
    if p == 0:
        return "0"
    if p >= 0.001:
        return f"{p:.3f}"
    return scientific(p)


def alternatives(trace, row: int = 0, n: int = 3) -> list[str]:
    """Per recorded step, the ``n`` most likely tokens still possible (probability > 0)
    under the final scores, as ``"␣the 0.412, ␣a 0.100"``: tokens of probability 0
    (removed by top-k, top-p, ...) are never listed. Each is labelled as it would read
    after the tokens before it (a piece of a character as ◌, the character on the token
    that completes it: :func:`genlab.text.tokens.candidate_labels`)."""
    tokenizer = getattr(trace, "tokenizer", None)
    out, before = [], []
    for rec in trace.records:
        final = rec.stages[-1]
        if row >= final.top_ids.shape[0] or int(rec.chosen_for_row[row]) < 0:
            continue
        ids, probs = [], []
        for tid, lp in zip(
            final.top_ids[row].tolist(), final.top_logprobs[row].tolist(), strict=True
        ):
            if len(ids) == n or not math.isfinite(lp) or math.exp(lp) == 0:
                break
            ids.append(tid)
            probs.append(math.exp(lp))
        if tokenizer is not None:
            labels = [text for text, _ in candidate_labels(tokenizer, before, ids)]
        else:
            labels = [show_token(trace.token_text(tid)) for tid in ids]
        out.append(", ".join(f"{t} {prob_text(p)}" for t, p in zip(labels, probs, strict=True)))
        before = [*before, int(rec.chosen_for_row[row])][-3:]
    return out


def steps_table(trace, row: int = 0, n: int = 3) -> pd.DataFrame:
    """``trace.steps(row)`` for people: tokens shown by :func:`genlab.text.tokens.show_token`
    (a token holding part of a character as ◌, the character on the token that completes
    it, the bytes in the cell's tooltip: ``table.attrs["titles"]``, which
    :func:`frame_html` reads) and ``top`` listing only tokens still possible (see
    :func:`alternatives`)."""
    table = trace.steps(row=row)
    if table.empty:
        return table
    table = table.copy()
    tokenizer = getattr(trace, "tokenizer", None)
    if tokenizer is not None:
        run = getattr(trace, "run", None)
        done = run is None or bool(getattr(run, "finished", True))
        labels = piece_labels(tokenizer, table.token_id.tolist(), complete=done)
        table["token"] = [text for text, _ in labels]
        table.attrs["titles"] = {"token": [tip for _, tip in labels]}
    else:
        table["token"] = [show_token(t) for t in table.token]
    table["top"] = alternatives(trace, row=row, n=n)
    return table


#: the columns of :func:`token_table` (one row per generated token)
TABLE_COLUMNS = ["step", "token", "token_id", "logprob", "prob", "rank", "entropy", "top"]


def token_table(result) -> pd.DataFrame:
    """One row per generated token of the first sequence (see :data:`TABLE_COLUMNS`), with
    ``text`` (the decoded text, for the coloured text) besides ``token`` (as shown).

    From the trace for token-by-token strategies; beam results (whose trace rows are beams,
    not the returned sequence) use the transition scores and have no rank, entropy or top
    columns (a beam's token has no single distribution to rank it in): never "None" cells.
    """
    trace = result.trace
    if trace is not None and not GenerationMode(result.run.mode).is_beam:
        raw = trace.steps(row=0)
        if not raw.empty:
            table = steps_table(trace, row=0)
            table["text"] = list(raw.token)
            return table[[*TABLE_COLUMNS, "text"]].reset_index(drop=True)
    table = result.transition_scores(row=0)
    table["text"] = list(table.token)
    table["token"] = [show_token(t) for t in table.token]
    return table[[c for c in TABLE_COLUMNS if c in table.columns] + ["text"]]


def shown_columns(table: pd.DataFrame) -> pd.DataFrame:
    """The table as a person reads it (without the raw ``text`` column)."""
    return table.drop(columns=[c for c in ("text",) if c in table.columns])


def result_html(
    table: pd.DataFrame, prompt: str | None = None, marks=(), tokenizer=None, ended=False
) -> str:
    """The tokens of ``table`` (from :func:`token_table`) coloured by probability, as
    running text that wraps (a character split over tokens shown whole where it is
    complete, its bytes in the tooltip: :func:`genlab.text.tokens.running_pieces`); ``ended``:
    the last token is the end-of-text token that ended the run, shown as :data:`END_MARK`
    (never as ``<|im_end|>``)."""
    texts = list(table.text) if "text" in table.columns else list(table.token)
    tips = [""] * len(texts)
    if tokenizer is not None and "token_id" in table.columns:
        pieces = running_pieces(tokenizer, table.token_id.tolist())
        texts, tips = [t for t, _ in pieces], [t for _, t in pieces]
    if ended and texts:
        texts[-1] = END_MARK
        tips[-1] = "the model ended the text here (end-of-text token)"
    ranks = table["rank"] if "rank" in table.columns else [None] * len(table)
    tops = table["top"] if "top" in table.columns else [""] * len(table)
    titles = [
        f"{tok}  p={prob_text(p)}  logp={lp:.3f}"
        + (f"  rank {int(r)}" if r is not None and r == r else "")
        + (f"\n{tip}" if tip else "")
        + (f"\ntop: {top}" if top else "")
        for tok, p, lp, r, top, tip in zip(
            table.token, table.prob, table.logprob, ranks, tops, tips, strict=True
        )
    ]
    return text_block(token_spans(texts, list(table.prob), titles, marks), prompt=prompt)
