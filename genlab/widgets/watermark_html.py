"""A watermarked text as HTML: each token on a green or red background.

The rendering of :func:`genlab.watermark.token_colours`' table, shown by the
WatermarkExplorer and in notebooks (``genlab.watermark.watermark_html`` is the same
function).

>>> "<span" in watermark_html([5, 6, 7], {}, vocab_size=20).html
True
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field

import pandas as pd

from ..watermark.tables import token_colours

_HTML_COLOURS = {"green": "#b7e4c7", "red": "#f4b6b6", "unscored": "#e5e5e5"}


@dataclass
class WatermarkHTML:
    """HTML of a text with green / red tokens; shows itself in a notebook."""

    html: str
    table: pd.DataFrame = field(repr=False)

    def _repr_html_(self) -> str:
        return self.html

    def __str__(self) -> str:
        return self.html


def watermark_html(
    input_ids,
    config=None,
    tokenizer=None,
    *,
    vocab_size: int | None = None,
    bos_token_id: int | None = None,
    device="cpu",
) -> WatermarkHTML:
    """The text with each token on a green or red background (grey: not scored).

    ``input_ids`` may be token ids (then as :func:`token_colours`) or the DataFrame
    :func:`token_colours` returned. Hovering a token shows its position, id and running z.

    >>> "<span" in watermark_html([5, 6, 7], {}, vocab_size=20).html
    True
    """
    if isinstance(input_ids, pd.DataFrame):
        table = input_ids
    else:
        table = token_colours(
            input_ids,
            config,
            tokenizer,
            vocab_size=vocab_size,
            bos_token_id=bos_token_id,
            device=device,
        )
    spans = [_token_span(row) for row in table.itertuples(index=False)]
    scored = int(table.scored.sum())
    summary = "no token scored"
    if scored:
        last = table.running_z[table.scored].iloc[-1]
        green = int(table.num_green.iloc[-1])
        summary = f"{green} of {scored} scored tokens green, z = {last:.2f}"
    body = "".join(spans)
    text = (
        '<div class="genlab-watermark" style="font-family:monospace;line-height:1.9;'
        f'white-space:pre-wrap">{body}</div>'
        f'<div style="font-size:smaller;color:#555">{html.escape(summary)}</div>'
    )
    return WatermarkHTML(text, table)


def _token_span(row) -> str:
    kind = "unscored" if not row.scored else ("green" if row.green else "red")
    z = "" if not row.scored else f", z={row.running_z:.2f}"
    title = f"position {row.position}, id {row.id}, {kind}{z}"
    return (
        f'<span class="wm-{kind}" title="{html.escape(title)}" style="background:'
        f'{_HTML_COLOURS[kind]};border-radius:3px;padding:0 1px">{html.escape(str(row.token))}'
        "</span>"
    )
