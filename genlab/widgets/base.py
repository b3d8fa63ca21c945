"""What every panel shares: the static HTML view, the focus style, the controls row, the
error guard and the parsing of typed numbers.

:class:`Panel` is the base of every panel (a ``VBox``): its ``_repr_mimebundle_`` adds
the panel's :meth:`Panel.static_html` (what a notebook shows without a kernel), and
:meth:`Panel.guard` shows a failure in the panel's status line, once, in words (never
the file and function it came from). :class:`~genlab.widgets.live.LiveView` adds the
scheduler on top of it.

>>> parse_int(" 1e3 ", "seed")
1000
>>> parse_int("2.5", "seed")
Traceback (most recent call last):
...
ValueError: seed: '2.5' is not a whole number; type one such as 24, 1_000 or 1e3.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import ipywidgets as widgets

from .render import message

#: keyboard focus made visible on every control of the panels (an HTML widget's <style>);
#: the text of a panel wraps at its width, and a panel never gets wider than its output;
#: messages at 12 px (a projector); genlab's tables aligned as their cells even when a
#: pandas DataFrame on the page brings ``.dataframe thead th {text-align: right}``;
#: figures no wider than the panel; a disabled button greyed and dashed, not only dimmed;
#: a tab bar wraps its whole titles onto a second row in a narrow notebook (321 px, the
#: file browser open at 768 px) instead of cutting them ("Waterfa"); a candidate the
#: grammar forbids greyed and struck through
FOCUS_CSS = """<style>
.genlab-panel :focus-visible, .genlab-panel .genlab-section-header:focus {
  outline: 2px solid #1a73e8 !important; outline-offset: 1px; }
.genlab-panel .genlab-section-header { text-align: left; font-weight: bold; }
.genlab-panel { max-width: 100%; box-sizing: border-box; }
.genlab-panel .widget-html { max-width: 100%; min-width: 0; }
.genlab-panel .widget-html-content { white-space: normal; overflow-wrap: break-word;
  min-width: 0; max-width: 100%; flex-shrink: 1; }
.genlab-panel.genlab-busy .genlab-busy-note { display: inline; }
.genlab-panel .genlab-info, .genlab-panel .genlab-ok, .genlab-panel .genlab-warn,
.genlab-panel .genlab-error { font-size: 0.93em !important; line-height: 1.4; }
.genlab-panel .genlab-nl { font-size: 85% !important; }
.genlab-panel table.genlab-table thead th { text-align: left; }
.genlab-panel table.genlab-table thead th.genlab-num { text-align: right; }
.genlab-panel .widget-image { max-width: 100%; height: auto; margin: 0; }
.genlab-panel .widget-button:disabled { opacity: 0.45; background: #f3f3f3;
  color: #6b6b6b; border: 1px dashed #9a9a9a; box-shadow: none; }
.genlab-panel .jupyter-widgets.jupyter-widget-tab > .lm-TabBar > .lm-TabBar-content {
  flex-wrap: wrap; }
.genlab-panel .jupyter-widgets.jupyter-widget-tab > .lm-TabBar .lm-TabBar-tab {
  flex: 0 0 auto; min-width: fit-content; }
.genlab-panel .jupyter-widgets.jupyter-widget-tab > .lm-TabBar .lm-TabBar-tabLabel {
  overflow: visible; }
.genlab-panel .genlab-masked { color: #8a8a8a; background: #eeeeee;
  text-decoration: line-through; }
</style>"""

#: the largest seed torch takes (a seed is an unsigned 64-bit number there)
MAX_SEED = 2**63 - 1


def error_text(err: BaseException) -> str:
    """A failure as a person reads it: the message of a ValueError / TypeError as it is
    (they name the field and what to do); running out of memory, and any other error of
    torch (a RuntimeError), in words, never the allocator's or the kernel's own text;
    other errors with their type first."""
    text = str(err).strip() or type(err).__name__
    if isinstance(err, (ValueError, TypeError)):
        return text
    if isinstance(err, MemoryError) or "allocate" in text or "out of memory" in text.lower():
        return (
            "the machine ran out of memory for this run: lower num_beams, "
            "num_return_sequences or max_new_tokens."
        )
    if isinstance(err, RuntimeError):
        first = text.splitlines()[0]
        if first.startswith("[enforce fail"):
            first = first.split("]", 1)[-1].strip()
        return f"the model could not run these settings ({first[:200]}); change them and retry."
    return f"{type(err).__name__}: {text}"


def sentence(text: str) -> str:
    """``text`` ending as a sentence (a full stop added when it has none, and after a
    closing parenthesis that holds none), so that the next sentence does not run into it.

    >>> sentence("n: type 1 (or 2)"), sentence("done (twice.)"), sentence("why?")
    ('n: type 1 (or 2).', 'done (twice.)', 'why?')
    """
    text = text.rstrip()
    return (
        text if not text or text[-1] in ".!?:" or text.endswith((".)", "!)", "?)")) else text + "."
    )


#: the largest magnitude a typed number may have: past it, ``int("1e999999999")`` alone
#: would take the kernel minutes and gigabytes
MAX_DIGITS = 400


def parse_number(
    text: Any,
    name: str,
    *,
    whole: bool = False,
    low: float | None = None,
    high: float | None = None,
) -> int | float:
    """The one parser of every number box: ``" 24 "``, ``"1_000"`` and ``"1e9"`` read the
    same everywhere (a whole number may be written ``1e3``; ``2.5`` is not whole and is
    refused, never rounded); ``nan``, ``inf`` and text are refused; ``low``/``high``
    (inclusive) bound it. ValueError names ``name`` and says what to type.

    >>> parse_number(" 1_000 ", "n", whole=True), parse_number("1e3", "n", whole=True)
    (1000, 1000)
    >>> parse_number("2.5", "n", whole=True)
    Traceback (most recent call last):
    ...
    ValueError: n: '2.5' is not a whole number; type one such as 24, 1_000 or 1e3.
    """
    kind = "a whole number" if whole else "a number"
    if isinstance(text, bool):
        raise ValueError(f"{name}: {text!r} is not {kind}.")
    if isinstance(text, (int, float)):
        value: int | float = text
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{name}: {value!r} is not a finite number.")
        if whole and isinstance(value, float):
            if not value.is_integer():
                raise ValueError(f"{name}: {value!r} is not {kind}.")
            value = int(value)
    else:
        typed = str(text).strip()
        example = "24, 1_000 or 1e3" if whole else "0.7, 1_000 or 1e-3"
        if low is not None and high is not None and high - low <= 10**6:
            example = f"{low} or {high}"  # an example inside the range
        try:
            number = Decimal(typed)
        except InvalidOperation:
            raise ValueError(
                f"{name}: {typed!r} is not {kind}; type one such as {example}."
            ) from None
        if not number.is_finite():
            raise ValueError(f"{name}: {typed!r} is not a finite number.")
        if number and number.adjusted() > MAX_DIGITS:
            raise ValueError(f"{name}: {typed!r} is far too large.")
        if whole:
            if number != number.to_integral_value():
                raise ValueError(f"{name}: {typed!r} is not {kind}; type one such as {example}.")
            value = int(number)
        else:
            value = float(number)
    if (low is not None and value < low) or (high is not None and value > high):
        if low is not None and high is not None:
            span = f"from {low} to {high:,}"
        else:
            span = f"of at least {low}" if low is not None else f"of at most {high:,}"
        raise ValueError(f"{name}: {value} is out of range; type {kind} {span}.")
    return value


def parse_int(text: Any, name: str, low: int | None = None, high: int | None = None) -> int:
    """A whole number typed in a box (:func:`parse_number`), inside ``[low, high]``."""
    return int(parse_number(text, name, whole=True, low=low, high=high))


def with_static_html(widget, bundle):
    """Add ``widget.static_html()`` to a widget's mime bundle as ``text/html``: JupyterLab
    with a kernel shows the live widget, GitHub / nbconvert / a notebook opened without
    its kernel show the panel's last state."""
    data, meta = bundle if isinstance(bundle, tuple) else (bundle, {})
    data = dict(data or {})
    try:
        data["text/html"] = widget.static_html()
    except Exception as err:  # never let the fallback break the display
        data["text/html"] = f"<pre>{html.escape(error_text(err))}</pre>"
    return (data, meta) if meta else data


#: the page around a saved view: readable at 768 px, tables scroll inside their box
PAGE_CSS = """<style>
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 16px;
  max-width: 100%; }
.genlab-static { max-width: 100%; overflow-wrap: break-word; }
.genlab-static table { max-width: none; }
.genlab-static [title] { cursor: help; }
.genlab-static .genlab-tree, .genlab-static .genlab-frame { max-height: none !important; }
</style>"""


#: elements that run code, load another document, or send the reader somewhere
_ACTIVE_TAGS = frozenset(
    "script iframe frame frameset object embed applet link base meta form".split()
)
#: attributes whose value is a URL that a browser loads or follows
_URL_ATTRIBUTES = frozenset(
    "src href action formaction srcset poster background data xlink:href".split()
)


class _ActiveContent(HTMLParser):
    """What in an HTML text would run or load something: elements, event handlers and URL
    attributes (``data:`` and ``#`` links are part of the page), and CSS that loads. Text
    and attribute values such as ``title`` are words, whatever they say."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in _ACTIVE_TAGS:
            self.found.append(f"a <{tag}> element")
        self._in_style = tag == "style"
        for name, value in attrs:
            value = (value or "").strip()
            if name.startswith("on"):
                self.found.append(f"an event handler {name}=")
            elif name in _URL_ATTRIBUTES and not value.lower().startswith(("data:", "#")):
                self.found.append(f"{name}={value[:60]!r}")
            elif name == "style":
                self._css(value)

    def handle_endtag(self, tag: str) -> None:
        if tag == "style":
            self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self._css(data)

    def _css(self, css: str) -> None:
        lowered = css.lower()
        if "@import" in lowered:
            self.found.append("a CSS @import")
        for piece in lowered.split("url(")[1:]:
            if not piece.strip().lstrip("'\"").startswith(("data:", "#")):
                self.found.append(f"a CSS url({piece[:60]}")


def active_content(body: str) -> list[str]:
    """What in the HTML text ``body`` would run code or load from another machine
    (empty when it is a self-contained page).

    >>> active_content('<p title="see https://example.com">https://example.com</p>')
    []
    >>> active_content('<img src="https://example.com/x.png"><b onclick="f()">b</b>')
    ["src='https://example.com/x.png'", 'an event handler onclick=']
    """
    parser = _ActiveContent()
    parser.feed(body)
    parser.close()
    return parser.found


def save_html(widget, path, title: str | None = None) -> Path:
    """Write ``widget.static_html()`` (its view now) as one self-contained HTML page at
    ``path``: figures inline as PNG data, hover details as ``title`` attributes; no
    script, no style sheet or font from another machine, no kernel. Returns the path.
    A view holding active content (:func:`active_content`) is refused; a URL in the text
    is text."""
    body = widget.static_html()
    found = active_content(body)
    if found:
        raise ValueError(
            f"this view holds active content ({', '.join(found[:3])}), so the page would "
            "run code or load from another machine; it cannot be saved as a self-contained "
            "page. Show the view in the notebook instead."
        )
    name = title or type(widget).__name__
    page = (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>genlab · {html.escape(name)}</title>{PAGE_CSS}</head>"
        f"<body>{body}</body></html>\n"
    )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")
    return path


def controls_row(*children: widgets.Widget) -> widgets.HBox:
    """A row of buttons and boxes that wraps onto a second line when the panel is narrow
    (nothing is squeezed or cut)."""
    return widgets.HBox(
        list(children), layout=widgets.Layout(flex_flow="row wrap", align_items="center")
    )


def button(label: str, **kwargs) -> widgets.Button:
    """A button as wide as its label (at least 80 px: never cut to "Gener...")."""
    return widgets.Button(
        description=label, layout=widgets.Layout(width="auto", min_width="80px"), **kwargs
    )


def figure_image() -> widgets.Image:
    """An empty PNG image, hidden until a figure is drawn into it (an empty image shows a
    broken-image icon)."""
    image = widgets.Image(format="png")
    image.layout.display = "none"
    return image


def scroll_box(image: widgets.Widget) -> widgets.Box:
    """A box showing a figure at its native size, scrolling when it is wider."""
    return widgets.Box([image], layout=widgets.Layout(overflow="auto", max_width="100%"))


def title_html(kind: str, lm) -> widgets.HTML:
    """The heading of a panel: ``genlab <kind> · <model name>``."""
    name = getattr(lm, "name", None)
    extra = f" &middot; {html.escape(str(name))}" if name is not None else ""
    return widgets.HTML(f"<b>genlab {html.escape(kind)}</b>{extra}")


class Panel(widgets.VBox):
    """Base of every panel: a VBox with a static HTML view (shown without a kernel,
    :meth:`save_html`); a panel with a ``status`` line also has ``error`` (the last
    failure, in words; None after a success) and :meth:`guard`."""

    status: widgets.HTML
    error: str | None = None

    def static_html(self) -> str:  # pragma: no cover - every panel has its own
        """The panel's last state as plain HTML (what a notebook shows without a kernel)."""
        raise NotImplementedError

    def _repr_mimebundle_(self, **kwargs):
        return with_static_html(self, super()._repr_mimebundle_(**kwargs))

    def save_html(self, path) -> Path:
        """Write the panel's current view as one self-contained HTML file (no kernel, no
        other machine asked for anything; hover details kept); returns its path."""
        return save_html(self, path)

    def show_error(self, err: BaseException | str, kept: bool = False) -> None:
        """Show ``err`` in the status line (once, replacing what was there)."""
        self.error = sentence(err if isinstance(err, str) else error_text(err))
        tail = " The last good result is still shown." if kept else ""
        self.status.value = message(self.error.replace("`", "") + tail, "error")

    def guard(self, fn: Callable, *args) -> bool:
        """Call ``fn(*args)``; a failure is shown in the panel, never raised out of a
        widget callback. Returns True when it succeeded."""
        try:
            fn(*args)
        except Exception as err:  # shown in the widget
            self.show_error(err)
            return False
        self.error = None
        return True
