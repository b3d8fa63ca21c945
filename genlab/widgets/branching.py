"""Click to branch: the one place where a panel offers the alternatives of a token as
buttons and continues from the one clicked, in a run of its own (the original stays).

* :class:`AlternativeButtons` -- a "continue with:" row of buttons, one per alternative
  (mouse, or Tab + Enter: they are buttons); the StepDebugger forks its active run with it.
* :class:`BranchPicker` -- the same row after a token slider, and a view of the branches:
  the panels that show a finished result (Playground, CompareView, WatermarkExplorer,
  LensView, BeamExplorer) continue from the chosen token with :func:`continue_with`.
* :func:`result_alternatives` -- the tokens that could have come at a position instead.

(Not run as a test: it shows widgets; tests/test_widgets_tree.py and make browser drive it.)
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence

import ipywidgets as widgets

from ..config import GenerationMode
from ..text.tokens import show_token
from .base import button, controls_row
from .render import message, prob_text, text_block

#: how many alternatives of a token get a button
ALTERNATIVES = 5

#: (key, label, probability): key is what a click passes on (a token id; a beam
#: candidate's node for the BeamExplorer)
Alternative = tuple[int, str, float]


def result_alternatives(trace, position: int, n: int = ALTERNATIVES) -> list[Alternative]:
    """(token id, token as shown, probability) of the tokens still possible at step
    ``position`` of ``trace`` other than the one taken, best first; [] without a trace
    (beam search: its tokens have no single distribution each)."""
    from ..plots.tokens import candidates

    if trace is None or not len(trace) or not 0 <= position < len(trace):
        return []
    final = candidates(trace, position, stage="final", k=n + 1)
    return [
        (int(i), show_token(t), float(p))
        for t, p, i, c in zip(final.token, final.prob, final.token_id, final.chosen, strict=True)
        if not c and p > 0
    ][:n]


def stepwise_trace(result):
    """The trace of a result whose every token had one distribution (not beam search,
    whose tokens have none each); None otherwise."""
    trace = getattr(result, "trace", None) if result is not None else None
    if trace is None or GenerationMode(result.run.mode).is_beam or not len(trace):
        return None
    return trace


def result_text_html(result, position: int, lm) -> str:
    """A branch's generated text, coloured by probability, the token it took at
    ``position`` outlined (the Playground's view of a result), with why it stopped."""
    from .live import ended_text
    from .render import result_html, token_table

    run = result.run
    coloured = result_html(token_table(result), marks=[position], tokenizer=lm.tokenizer,
                           ended=run.finished_by == "eos")  # fmt: skip
    return coloured + message(ended_text(run))


def continue_with(lm, prompt, *, chat: bool, seed, config, kept: Sequence[int], token,
                  trace_depth: int = 10, tracer_class=None,
                  constraint: dict | None = None):  # fmt: skip
    """Generate from ``prompt`` taking the ids ``kept`` and then ``token`` (an id, a
    text: all of its tokens, or None: nothing more) before going on to the end under
    ``config`` and ``seed`` (and ``constraint``: json_schema= / regex= / grammar=, as the
    result it continues had): a run of its own (what it continues from is left as it is).
    Returns its GenerationResult."""
    from .live import start_run

    run = start_run(lm, prompt, chat=chat, seed=seed, config=config, trace_depth=trace_depth,
                    tracer_class=tracer_class, constraint=constraint)  # fmt: skip
    kept = [int(i) for i in kept]
    ids = [*kept, token] if isinstance(token, int) else kept
    if ids:
        run.force(ids)
    if token is not None and not isinstance(token, int):
        run.force(token)
    while not run.finished:
        run.step()
    return run.result()


#: how many branches of one result a panel shows at once, newest first
BRANCHES_SHOWN = 6


class AlternativeButtons:
    """A "continue with:" row: one button per alternative; a click (mouse, or Tab + Enter)
    calls ``on_pick(key)``. ``before``: widgets shown between the label and the buttons
    (a token slider). ``row`` is the widget to show."""

    def __init__(
        self,
        on_pick: Callable[[int], object],
        n: int = ALTERNATIVES,
        before: Sequence[widgets.Widget] = (),
        label: str = "continue with:",
    ) -> None:
        self.label = widgets.HTML(label)
        self.buttons = [button(" ") for _ in range(n)]
        for b in self.buttons:
            b.add_class("genlab-alternative")
            b.token_id = None
            b.on_click(lambda btn: None if btn.token_id is None else on_pick(int(btn.token_id)))
        self.row = controls_row(self.label, *before, *self.buttons)

    def show(self, alternatives: Sequence[Alternative], tip: Callable[[str, float], str]) -> None:
        """Label the buttons with ``alternatives`` ((key, label, p), best first; the
        surplus buttons are hidden); ``tip(label, p)`` is each button's tooltip. No
        alternative: the row's label is hidden too."""
        padded = [*alternatives, *[None] * len(self.buttons)][: len(self.buttons)]
        for b, alt in zip(self.buttons, padded, strict=True):
            if alt is None:
                b.layout.display = "none"
                b.token_id = None
                continue
            key, text, p = alt
            b.token_id = int(key)
            b.description = f"{text} {prob_text(p)}"
            b.tooltip = tip(text, p)
            b.layout.display = None
        self.label.layout.display = None if alternatives else "none"


class BranchPicker:
    """Click to branch on a finished result: a token slider (``at``; a panel may pass its
    own), the alternatives of that token as buttons, and ``view``, where the branches
    are shown. ``alternatives(position)`` lists them; ``branch(position, key)`` makes
    the branch and returns its HTML (a failure is shown by ``panel.guard``). Branch
    results are appended to ``branches`` by the panel. ``widget`` is what to show."""

    def __init__(self, panel, alternatives: Callable[[int], list[Alternative]],
                 branch: Callable[[int, int], str], n: int = ALTERNATIVES,
                 at: widgets.IntSlider | None = None, before: Sequence[widgets.Widget] = (),
                 what: str = "token") -> None:  # fmt: skip
        self.panel, self.what = panel, what
        self._alternatives, self._branch = alternatives, branch
        self.branches: list = []
        self.own_slider = at is None
        self.at = at or widgets.IntSlider(
            value=0, min=0, max=0, description=what, continuous_update=False,
            layout=widgets.Layout(width="260px"),
        )  # fmt: skip
        self.at.observe(lambda _: panel.guard(self.refresh), names="value")
        shown = [*before, self.at] if self.own_slider else list(before)
        self.buttons_row = AlternativeButtons(
            lambda key: panel.guard(self.pick, key), n, before=shown
        )
        self.buttons, self.label = self.buttons_row.buttons, self.buttons_row.label
        self.view = widgets.HTML()
        self._shown: list[str] = []
        self.widget = widgets.VBox([self.buttons_row.row, self.view])

    def add(self, view: str) -> None:
        """Show a new branch (its HTML) above the earlier ones of this result (the last
        :data:`BRANCHES_SHOWN`): a second branch no longer replaces the first."""
        self._shown = [view, *self._shown][:BRANCHES_SHOWN]
        self.view.value = "".join(self._shown)

    def reset(self, count: int) -> None:
        """A new result of ``count`` tokens: the branches of the last one are no longer
        shown, the slider spans the new one."""
        self._shown = []
        self.view.value = ""
        if self.own_slider:
            self.at.max = max(0, count - 1)
            self.at.value = min(self.at.value, self.at.max)
        self.refresh()

    def refresh(self) -> None:
        """Label the buttons with the alternatives of the token at the slider."""
        at = int(self.at.value)
        alts = self._alternatives(at)
        self.buttons_row.show(
            alts,
            lambda text, p: (
                f"continue from {self.what} {at} with {text} (p={prob_text(p)}): "
                "a run of its own, this result stays"
            ),
        )
        if self.own_slider:
            self.at.layout.display = None if alts else "none"

    def pick(self, key: int) -> None:
        """The button of ``key`` was clicked: continue from the slider's token with it."""
        self.view.value = self._branch(int(self.at.value), int(key))


def branch_html(number: int, position: int, what: str, body: str, note: str = "") -> str:
    """The view of branch ``number`` (from ``what`` ``position``): a heading, ``body``
    (already HTML) and a note (plain text: why it stopped)."""
    return (
        f'<div class="genlab-branch">branch {number}: from {html.escape(what)} {position} '
        "(the original stays above)</div>" + body + (message(note) if note else "")
    )


def plain_text_html(text: str) -> str:
    """A branch's text when the panel has no coloured view for it."""
    return text_block(html.escape(text))
