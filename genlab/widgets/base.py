"""What every panel shares: the static HTML view, the focus style, the controls row, the
error guard and the parsing of typed numbers.

:class:`Panel` is the base of every panel (a ``VBox``): its ``_repr_mimebundle_`` adds
the panel's :meth:`Panel.static_html` (what a notebook shows without a kernel), and
:meth:`Panel.guard` shows a failure in the panel's status line, once, in words (never
the file and function it came from). :class:`~genlab.widgets.live.LiveView` adds the
scheduler on top of it.

>>> parse_int("12", "seed")
12
>>> parse_int("2.5", "seed")
Traceback (most recent call last):
...
ValueError: seed: '2.5' is not a whole number; type one such as 0, 1 or 42
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable
from typing import Any

import ipywidgets as widgets

from .render import message

#: keyboard focus made visible on every control of the panels (an HTML widget's <style>);
#: the text of a panel wraps at its width, and a panel never gets wider than its output
FOCUS_CSS = """<style>
.genlab-panel :focus-visible, .genlab-panel .genlab-section-header:focus {
  outline: 2px solid #1a73e8 !important; outline-offset: 1px; }
.genlab-panel .genlab-section-header { text-align: left; font-weight: bold; }
.genlab-panel { max-width: 100%; box-sizing: border-box; }
.genlab-panel .widget-html { max-width: 100%; min-width: 0; }
.genlab-panel .widget-html-content { white-space: normal; overflow-wrap: break-word;
  min-width: 0; max-width: 100%; flex-shrink: 1; }
.genlab-panel.genlab-busy .genlab-busy-note { display: inline; }
</style>"""

#: the largest seed torch takes (a seed is an unsigned 64-bit number there)
MAX_SEED = 2**63 - 1


def error_text(err: BaseException) -> str:
    """A failure as a person reads it: the message of a ValueError / TypeError as it is
    (they name the field and what to do), other errors with their type first."""
    text = str(err).strip() or type(err).__name__
    if isinstance(err, (ValueError, TypeError)):
        return text
    return f"{type(err).__name__}: {text}"


def parse_int(text: Any, name: str, low: int | None = None, high: int | None = None) -> int:
    """A whole number typed in a box, taken as typed or refused with the reason:
    ``"1e5"`` and ``"2.5"`` are refused (not rounded), as is a number outside
    ``[low, high]``."""
    if isinstance(text, bool):
        raise ValueError(f"{name}: {text!r} is not a whole number")
    if isinstance(text, int):
        value = text
    else:
        typed = str(text).strip()
        try:
            value = int(typed)
        except ValueError:
            raise ValueError(
                f"{name}: {typed!r} is not a whole number; type one such as 0, 1 or 42"
            ) from None
    if low is not None and value < low or high is not None and value > high:
        span = f"from {low} to {high:,}" if high is not None else f"of at least {low}"
        raise ValueError(f"{name}: {value} is out of range; type a whole number {span}")
    return value


def parse_float(text: Any, name: str) -> float:
    """A finite number typed in a box (``"1e-3"``, ``"0.7"``), or ValueError with the
    reason (``"nan"``, ``"inf"`` and text are refused)."""
    try:
        value = float(str(text).strip())
    except ValueError:
        raise ValueError(f"{name}: {str(text).strip()!r} is not a number") from None
    if not math.isfinite(value):
        raise ValueError(f"{name}: {text!r} is not a finite number")
    return value


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
    """Base of every panel: a VBox with a ``status`` line, ``error`` (the last failure, in
    words; None after a success), :meth:`guard` and a static HTML view."""

    status: widgets.HTML
    error: str | None = None

    def static_html(self) -> str:  # pragma: no cover - every panel has its own
        """The panel's last state as plain HTML (what a notebook shows without a kernel)."""
        raise NotImplementedError

    def _repr_mimebundle_(self, **kwargs):
        return with_static_html(self, super()._repr_mimebundle_(**kwargs))

    def show_error(self, err: BaseException | str, kept: bool = False) -> None:
        """Show ``err`` in the status line (once, replacing what was there)."""
        self.error = err if isinstance(err, str) else error_text(err)
        tail = " The last good result is still shown." if kept else ""
        self.status.value = message(self.error + tail, "error")

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
