"""StepDebugger: step a generation by hand, see each step's waterfall, force tokens.

Buttons drive the engine's :class:`~genlab.run.engine.Run`: **Step** (one token), **Run**
(to the end), **Rewind** (undo n steps, exactly), **Fork** (an independent copy to try
something else; a dropdown switches between the runs). For the current step (the one just
taken) the *waterfall* shows the top tokens after each logits processor, in order, and
how much probability each stage removed. Pick any candidate, or type a token, to take it
at this step instead. The settings panel edits the run's config between steps. The
history table lists every step so far.

(Not run as a test: it shows a widget panel, drawn by a Jupyter front end (tests/test_widgets.py
and make browser run the panels).)

>>> dbg = StepDebugger(genlab.load("demo"), "The capital of France is", max_new_tokens=8)
...  # doctest: +SKIP
>>> dbg.step(); dbg.step(); dbg.waterfall_table()                 # doctest: +SKIP
>>> dbg.take(" Lyon"); dbg.text()                                # doctest: +SKIP
"""

from __future__ import annotations

import ast
import html
import threading
import time
from typing import Any

import ipywidgets as widgets
import pandas as pd

from ..config import GenerationConfig
from ..plots.tokens import candidates
from ..run.engine import Run
from ..text.grammar import GRAMMAR_ARGUMENTS
from ..text.tokens import piece_labels, running_pieces, show_token
from .base import (
    FOCUS_CSS,
    button,
    controls_row,
    error_text,
    figure_image,
    parse_int,
    scroll_box,
    title_html,
)
from .branching import AlternativeButtons
from .config_panel import ConfigPanel
from .live import (
    LiveView,
    ended_text,
    initial_config,
    limits_of,
    run_total,
    start_run,
)
from .render import (
    END_MARK,
    TABLE_CSS,
    frame_html,
    message,
    png_html,
    prob_legend,
    prob_text,
    show_figure,
    steps_table,
    text_block,
    token_spans,
)
from .tree import BranchTree
from .worker import Debounce, Job

#: seconds of quiet after a click before its view is drawn (quick clicks draw once)
DEFER = 0.02

#: how many alternatives of the current step get a click-to-branch button
ALTERNATIVE_BUTTONS = 6

#: the settings that decide where a run ends by length
LENGTH_FIELDS = ("max_new_tokens", "max_length")


def waterfall_frame(trace, step: int, row: int = 0, k: int = 5) -> pd.DataFrame:
    """One row per stage of ``step``: tokens kept and removed, the probability mass removed
    (see :meth:`~genlab.run.trace.Trace.stage_summary`), and the top ``k`` tokens after the
    stage."""
    summary = trace.stage_summary(step, row=row)
    out = []
    for stage in summary.itertuples(index=False):
        top = candidates(trace, step, row=row, stage=stage.stage, k=k)  # p > 0, + chosen
        out.append(
            {
                "stage": stage.stage,
                "tokens_kept": stage.tokens_kept,
                "removed_tokens": stage.removed_tokens,
                "removed_mass": stage.removed_mass,
                "raw_mass_kept": stage.raw_mass_kept,
                "top": ", ".join(
                    f"{show_token(t)} {prob_text(p)}"
                    for t, p in zip(top.token, top.prob, strict=True)
                ),
            }
        )
    return pd.DataFrame(out)


#: what a candidate's tooltip says when the grammar stage removed it
MASKED_TIP = (
    "masked by the grammar stage: the run's json_schema / regex / grammar does not allow "
    "this token here, so it cannot be chosen or forced"
)


def grammar_masked(trace, step: int, row: int = 0, k: int = 6) -> pd.DataFrame:
    """The top ``k`` candidates of the stage just before ``grammar`` that the grammar
    stage removed at ``step`` (token_id, token, prob before the mask, tip); empty for a
    run without a grammar. Exact: a mask removes tokens and never reorders the others, so
    an allowed token of the stage before keeps its rank or better in the grammar's top-k."""
    names = list(trace.stage_summary(step, row=row).stage)
    if "grammar" not in names or names.index("grammar") == 0:
        return pd.DataFrame(columns=["token_id", "token", "prob", "tip"])
    before = names[names.index("grammar") - 1]
    allowed = trace.topk(step, row=row, stage="grammar")
    allowed = set(allowed.token_id[allowed.prob > 0].astype(int))
    top = candidates(trace, step, row=row, stage=before, k=k)
    top = top[top.prob > 0]
    return top[~top.token_id.astype(int).isin(allowed)].reset_index(drop=True)


def masked_html(trace, step: int, row: int = 0, k: int = 6) -> str:
    """The candidates the grammar stage removed at ``step`` as greyed, struck-through
    marks (their probability before the mask; the tooltip says why), "" when it removed
    none of the top ``k`` or the run has no grammar."""
    gone = grammar_masked(trace, step, row=row, k=k)
    if gone.empty:
        return ""
    marks = "".join(
        f'<span class="genlab-masked" title="{html.escape(show_token(t))} '
        f'p={prob_text(p)} before the mask{html.escape(chr(10) + MASKED_TIP)}" '
        'style="color:#767676;background:#eeeeee;text-decoration:line-through;'
        f'padding:1px 5px;margin:2px;border-radius:2px;display:inline-block">'
        f"{html.escape(show_token(t))} {prob_text(p)}</span>"
        for t, p in zip(gone.token, gone.prob, strict=True)
    )
    return (
        '<div class="genlab-masked-row" style="overflow-wrap:anywhere">'
        f"masked by the grammar stage: {marks}</div>"
    )


def waterfall_html(trace, step: int, row: int = 0, k: int = 6) -> str:
    """The waterfall of one step as an HTML table, its key columns first so that it reads
    in a 321 px notebook (JupyterLab at 768 px with the file browser open; the rest
    scrolls inside its box): one row per stage, its full name (broken after "_" or ".")
    over the tokens still possible and the probability mass it removed, then the top
    ``k`` tokens still possible after it, each over its probability and a bar of it (a
    long token wraps in its cell); the chosen token in orange (shown even outside the top
    k). In a constrained run, the tokens of the stages before ``grammar`` that the grammar
    removes are greyed and struck through, their tooltip says why (:data:`MASKED_TIP`)."""
    summary = trace.stage_summary(step, row=row)
    masked = set(grammar_masked(trace, step, row=row, k=k).token_id.astype(int))
    names = list(summary.stage)
    masking = names.index("grammar") if "grammar" in names else -1
    rows = []
    for i, st in enumerate(summary.itertuples(index=False)):
        top = candidates(trace, step, row=row, stage=st.stage, k=k)
        cells = []
        for tid, tok, p, chosen, tip in zip(
            top.token_id, top.token, top.prob, top.chosen, top.tip, strict=True
        ):
            gone = i < masking and int(tid) in masked
            colour = "#f28e2b" if chosen else "#c8c8c8" if gone else "#9aa5b1"
            weight = "font-weight:bold;color:#8a4500;" if chosen else ""
            if gone:
                weight += "color:#767676;text-decoration:line-through;"
            note = "chosen: " if chosen else ""
            shown = html.escape(show_token(tok))
            extra = html.escape(chr(10) + tip) if tip else ""
            if gone:
                extra += html.escape(chr(10) + MASKED_TIP)
            cls = ' class="genlab-masked"' if gone else ""
            cells.append(
                f'<td{cls} style="white-space:normal;overflow-wrap:break-word;max-width:8em;'
                f'{weight}" title="{note}{shown} p={prob_text(p)}{extra}">'
                f"{shown}<br>{prob_text(p)}"
                f'<div style="background:{colour};height:5px;width:{max(1, round(50 * p))}px">'
                "</div></td>"
            )
        removed = "" if i == 0 else f"<br>{prob_text(st.removed_mass)} removed"
        stage = html.escape(st.stage).replace("_", "_<wbr>").replace(".", ".<wbr>")
        rows.append(
            f"<tr><td><b>{stage}</b><div style='color:#555;font-size:85%'>"
            f"{st.tokens_kept:,} left{removed}</div></td>{''.join(cells)}</tr>"
        )
    head = (
        "<thead><tr><th>stage: tokens left, mass removed</th>"
        f"<th colspan='{k}'>most likely tokens after the stage (orange: the chosen token"
        + ("; grey, struck through: masked by the grammar" if masked else "")
        + ")</th></tr></thead>"
    )
    return (
        f'<div class="genlab-waterfall genlab-frame" style="overflow-x:auto;max-width:100%">'
        f'{TABLE_CSS}<table class="genlab-table">{head}<tbody>{"".join(rows)}</tbody>'
        "</table></div>"
    )


def parse_typed_token(text: str):
    """What a person typed in the token box: quoted text (``' Marseille'``, to type a
    leading space) or plain text as it stands. ValueError for an unclosed quote."""
    stripped = text.strip()
    if stripped[:1] in ("'", '"'):
        try:
            value = ast.literal_eval(stripped)
        except (SyntaxError, ValueError):
            raise ValueError(
                f"token: {stripped} is not closed; write quoted text as ' Marseille' or "
                "type the text without quotes"
            ) from None
        if not isinstance(value, str) or not value:
            raise ValueError(f"token: {stripped} must be non-empty text")
        return value
    return text


class StepDebugger(LiveView):
    """Step / Run / Stop / Rewind / Fork over a :class:`Run`, with the waterfall of each
    step. A LiveView: Run goes through the panel's scheduler (on the kernel's loop, one
    token per callback), so Stop and every click are read between two tokens; a click
    made while a Run is going on is refused with a message (never applied later).

    lm: a :class:`genlab.LM`; prompt, chat, seed as in ``lm.start``; trace_depth:
    candidates the trace keeps per stage; config / config kwargs: the settings (model
    defaults, 20 new tokens unless given).

    For code and tests: ``step()``, ``run_to_end()``, ``rewind(n)``, ``fork()``,
    ``select_run(i)``, ``take(token)``, ``clear_forced()``, ``text()``, ``history()`` and
    ``waterfall_table()`` (DataFrames); ``run`` is the active Run, ``runs`` all of them,
    ``error`` the last failure (None after a success), ``busy`` while a Run goes on.

    (Not run as a test: it shows a widget panel, drawn by a Jupyter front end
    (tests/test_widgets.py and make browser run the panels).)

    >>> from genlab.widgets import StepDebugger
    >>> dbg = StepDebugger(genlab.load("demo"), "Once upon a time", do_sample=True, top_k=20)
    ...  # doctest: +SKIP
    >>> dbg                                                      # doctest: +SKIP
    """

    def __init__(
        self,
        lm,
        prompt: Any = "Once upon a time",
        *,
        chat: bool = False,
        seed: int | None = 0,
        trace_depth: int = 10,
        config: GenerationConfig | None = None,
        **config_kwargs: Any,
    ) -> None:
        self.lm = lm
        self.trace_depth = trace_depth
        self.prompt = prompt
        self.chat = chat
        super().__init__(debounce=0.0, auto_update=False)
        #: json_schema= / regex= / grammar= of lm.start (a ``grammar`` stage, whose
        #: masked candidates the Current step tab greys)
        self.constraint = {
            name: config_kwargs.pop(name) for name in GRAMMAR_ARGUMENTS if name in config_kwargs
        }
        cfg = initial_config(lm, config, **config_kwargs)
        run = start_run(
            lm, prompt, chat=chat, seed=seed, config=cfg, trace_depth=self.trace_depth,
            keep_history=True, constraint=self.constraint,
        )  # fmt: skip
        self.runs: list[Run] = [run]
        self.run = run
        #: per run, the steps each forced text took (start, end): forcing again replaces
        #: the whole text, not its last piece
        self._forced_spans: dict[int, list[tuple[int, int]]] = {}

        self.panel = ConfigPanel(
            run.config,
            tokenizer=lm.tokenizer,
            vocab_size=lm.info.vocab_size,
            limits=limits_of(lm),
            open_group=None,  # "logits" opens with the Settings tab (built only then)
            title="Settings (take effect at the next step)",
        )
        self._good_lengths = {n: getattr(run.config, n, None) for n in LENGTH_FIELDS}
        self.panel.on_change(self._settings_changed)
        self.step_button = button("Step", button_style="primary")
        self.run_button = button("Run")
        self.rewind_button = button("Rewind")
        self.rewind_count = widgets.Text(value="1", layout=widgets.Layout(width="70px"))
        self.rewind_count.tooltip = "how many steps Rewind undoes"
        self.fork_button = button("Fork")
        self.run_picker = widgets.Dropdown(
            options=[("run 0", 0)], value=0, description="run", layout=widgets.Layout(width="160px")
        )
        self.text_view = widgets.HTML()
        self.text_view.add_class("genlab-result")
        self.candidates = widgets.Dropdown(
            options=[], description="candidate", layout=widgets.Layout(width="320px")
        )
        self.token_box = widgets.Text(
            placeholder="or type a token", layout=widgets.Layout(width="180px")
        )
        self.take_button = button("Take this token", tooltip="redo the current step with it")
        self.forced_view = widgets.HTML()
        #: click to branch: one button per alternative of the current step (a fork takes
        #: it; mouse or Tab + Enter), a fixed set whose labels follow the step
        self.alternative_row = AlternativeButtons(
            lambda token_id: self._click(self.branch, token_id), ALTERNATIVE_BUTTONS
        )
        self.alt_buttons, self.alt_label = self.alternative_row.buttons, self.alternative_row.label
        self.tree = BranchTree(
            lambda: self.runs,
            lm.tokenizer,
            on_continue=lambda i, keep: self._click(self.continue_from, i, keep),
            active=lambda: self.run,
        )
        self.clear_button = button("Clear queue", tooltip="drop the tokens queued to be forced")
        self.clear_button.layout.display = "none"
        self.waterfall_view = widgets.HTML()
        self.waterfall_image = figure_image()
        self.waterfall_png = b""
        self.history_view = widgets.HTML()
        self.notice: str | None = None
        self._refused: str | None = None  # a click refused during a Run, shown till its end
        self._lock = threading.RLock()
        #: the view of the last actions, drawn once the clicks pause
        self._redraw = Debounce(self._deferred_render, self._lock)
        self.defer_render = False  # buttons set it: quick clicks are drawn once

        self.step_button.on_click(lambda _: self._click(self.step))
        self.run_button.on_click(lambda _: self._click(self._start_run))
        self.rewind_button.on_click(lambda _: self._click(self._rewind_typed))
        self.fork_button.on_click(lambda _: self._click(self.fork))
        self.take_button.on_click(lambda _: self._click(self._take_chosen))
        self.clear_button.on_click(lambda _: self._click(self.clear_forced))
        self.run_picker.observe(self._picked, names="value")

        buttons = controls_row(
            self.step_button,
            self.run_button,
            self.stop_button,
            self.rewind_button,
            self.rewind_count,
            self.fork_button,
            self.run_picker,
            self.progress,
        )
        forcing = controls_row(self.candidates, self.token_box, self.take_button)
        #: a constrained run: the candidates the grammar stage removed, greyed (kept in
        #: sight, not clickable) with a tooltip saying why
        self.masked_view = widgets.HTML()
        branching = widgets.VBox([self.alternative_row.row, self.masked_view])
        self.figure_box = scroll_box(self.waterfall_image)
        self.figure_note = widgets.HTML()
        self.tabs = widgets.Tab(
            children=[
                widgets.VBox([self.waterfall_view, forcing, branching]),
                widgets.VBox([self.figure_note, self.figure_box]),
                self.history_view,
                self.panel,
                self.tree,
            ],
            titles=["Current step", "Waterfall figure", "History", "Settings", "Branches"],
        )
        self.tabs.observe(lambda _: self.guard(self._show_figure), names="selected_index")
        self.tabs.observe(self._settings_shown, names="selected_index")
        self.tabs.observe(lambda _: self.guard(self._show_tree), names="selected_index")
        self.children = [
            widgets.HTML(FOCUS_CSS),
            title_html("step debugger", lm),
            buttons,
            self.status,
            controls_row(self.forced_view, self.clear_button),
            self.text_view,
            widgets.HTML(prob_legend()),
            self.tabs,
        ]
        self.add_class("genlab-debugger")
        self.add_class("genlab-panel")
        self._render()

    # -- actions -------------------------------------------------------------------------
    def finished_message(self) -> str:
        """What the panel says when the active run has finished, and what works then."""
        run, n = self.run, self.run.step_index
        by = getattr(run, "finished_by", None)
        back = "Rewind to go back, or Fork to try another way"
        why = ended_text(run) or f"the run has finished ({n} tokens)"
        if by == "length":
            return f"{why}: raise it in Settings and Step to go on, {back}"
        if by == "interrupted":
            return f"{why}: Rewind (even 0 steps) to go on, or Fork"
        return f"{why}: {back}"

    def _settings_changed(self, panel, names) -> None:
        """A length changed in Settings: handed to the run (``run.set``), which goes on
        when it had ended by length under a lower limit; a length below what the run holds
        is refused next to its field, with the reason, and the last good value stays."""
        changed = [n for n in names if n in LENGTH_FIELDS]
        if not changed or not hasattr(self.run, "set"):
            return
        run = self.run
        try:
            with self._lock:
                run.set(**{n: getattr(run.config, n) for n in changed})
        except (ValueError, RuntimeError) as err:
            for n in changed:  # (a refused set may leave the run another config object)
                setattr(run.config, n, self._good_lengths.get(n))
            panel.bind(run.config)
            for n in changed:
                panel.reject(n, error_text(err))
            self.show_error(err)
            return
        if panel.config is not run.config:
            panel.bind(run.config)
        self._good_lengths = {n: getattr(run.config, n, None) for n in LENGTH_FIELDS}
        self.error = None  # a refused length before this one: its cause is gone
        self._changed()

    def step(self, n: int = 1) -> None:
        """Take ``n`` steps (fewer if the generation ends); on a finished run, say so."""
        with self._lock:
            if self.run.finished:
                self.notice = self.finished_message()
                self.status.value = message(self.notice, "warn")
                return
            for _ in range(n):
                if self.run.finished:
                    break
                self.run.step()
        self._changed()

    def run_to_end(self) -> None:
        """Step until a stopping criterion ends the generation (here, to its end; the Run
        button does it through the scheduler, showing the text and the progress, and Stop
        ends it)."""
        self.update(sync=True)
        self.wait()

    def _start_run(self) -> None:
        if self.run.finished:
            self.step()  # says why nothing happens
            return
        self._refused = None
        self.update()

    def compute(self, job: Job):
        """Generator: step the active run until it finishes or Stop is pressed (``job``:
        the scheduler's job, whose ``cancelled`` event is Stop), showing the text and the
        progress (tokens so far of the run's total now) as it goes (LiveView's
        :meth:`drive`; Stop leaves the run steppable)."""
        run = self.run
        self.notice = None  # (a refused click stays shown: _refused is reset at the Run)
        yield from self.drive(run, job, end_on_stop=False)
        if job.stopped and not run.finished:  # the steps so far stay; Step or Run go on
            self.notice = f"stopped after {run.step_index} tokens: Step or Run go on from here"
        return run

    def progress_text(self, run: Run, total: int, rate: float, label: str = "") -> str:
        """The status line of a Run in progress (``run``, its ``total`` tokens, ``rate``
        in tokens/s; ``label`` unused), with a click refused during it."""
        return message(
            f"running… {run.step_index} of {total} tokens · {rate:.1f} tokens/s "
            "(Stop ends it here)" + (f"\n{self._refused}" if self._refused else ""),
            "warn" if self._refused else "info",
        )

    def stream(self, run: Run, job: Job) -> None:
        """The text of ``run`` so far, while a Run steps (``job``: the scheduler's)."""
        self.text_view.value = self._text_html()

    def render(self, data) -> None:
        """Draw the panel after a Run (LiveView; ``data``, what :meth:`compute` returned,
        is not needed: the panel reads its run)."""
        self._render()

    def rewind(self, n: int = 1) -> None:
        """Undo the last ``n`` steps (the config goes back to what those steps used)."""
        with self._lock:
            self.run.rewind(n)
            self._good_lengths = {k: getattr(self.run.config, k, None) for k in LENGTH_FIELDS}
            spans = self._forced_spans.get(id(self.run), [])
            self._forced_spans[id(self.run)] = [s for s in spans if s[1] <= self.run.step_index]
            self.panel.bind(self.run.config)
        self._changed()

    def _rewind_typed(self) -> None:
        self.rewind(parse_int(self.rewind_count.value, "rewind count", 0, self.run.step_index))

    def fork(self, source: Run | None = None, keep: int | None = None) -> Run:
        """Copy the active run (or ``source``) and switch to the copy; returns it.
        ``keep``: the copy is rewound to its first ``keep`` tokens (nothing queued to be
        forced), to go on from there; the original stays as it is."""
        with self._lock:
            source = self.run if source is None else source
            other = source.fork()
            spans = list(self._forced_spans.get(id(source), []))
            if keep is not None and keep < other.step_index:
                other.rewind(other.step_index - keep)
                other.clear_forced()
                spans = [s for s in spans if s[1] <= keep]
            self._forced_spans[id(other)] = spans
            self.runs.append(other)
            self.run = other
            self.panel.bind(other.config)
            self._list_runs(len(self.runs) - 1)
        self._changed()
        return other

    def _list_runs(self, shown: int) -> None:
        """The run picker lists every run, ``shown`` selected (no select_run call)."""
        self._picking = True
        try:
            self.run_picker.options = [(f"run {i}", i) for i in range(len(self.runs))]
            self.run_picker.value = shown
        finally:
            self._picking = False

    def branch(self, token) -> Run:
        """Click to branch: a fork of the active run that takes ``token`` (an id: an
        alternative of the current step; or a text) at the current step instead, as
        :meth:`take` does; the original run stays. Returns the fork, now active."""
        with self._lock:
            source = self.run
            other = self.fork()
            try:
                self.take(token)
            except Exception:  # a refused token leaves no fork behind
                self.runs.remove(other)
                self._forced_spans.pop(id(other), None)
                self._list_runs(self.runs.index(source))
                self.select_run(self.runs.index(source))
                raise
        return other

    def continue_from(self, index: int, keep: int) -> Run:
        """A fork of ``runs[index]`` keeping its first ``keep`` tokens, made the active
        run (the BranchTree's Continue from here); returns it."""
        if not isinstance(index, int) or not 0 <= index < len(self.runs):
            raise ValueError(f"run index must be in [0, {len(self.runs) - 1}], got {index!r}")
        return self.fork(self.runs[index], keep=keep)

    def select_run(self, index: int) -> None:
        """Make ``runs[index]`` the active run."""
        if not isinstance(index, int) or not 0 <= index < len(self.runs):
            raise ValueError(f"run index must be in [0, {len(self.runs) - 1}], got {index!r}")
        with self._lock:
            self.run = self.runs[index]
            self.panel.bind(self.run.config)
        self._changed()

    def take(self, token) -> None:
        """Take ``token`` at the current step instead of what was taken there (before the
        first step: as the first token), keeping every step before it.

        token: an id (a candidate of the current step: it replaces that one step), or a
        text / list of ids (taken whole, one step each; a text forced right after another
        forced text replaces that whole text, not its last piece). Equivalent to
        ``run.rewind(k)`` (k: 1, or the steps of the text forced just before),
        ``run.clear_forced()``, ``run.force(token)`` and a step per forced token."""
        if token is None or (isinstance(token, str) and token == ""):
            raise ValueError("choose a candidate or type a token to force")
        with self._lock:
            run = self.run
            spans = self._forced_spans.setdefault(id(run), [])
            back = 0
            if run.step_index > 0:
                last = spans[-1] if spans and spans[-1][1] == run.step_index else None
                whole = last is not None and not isinstance(token, int)
                back = last[1] - last[0] if whole else 1
            run.rewind(back)
            dropped = run.clear_forced()  # rewinding put those steps' forced tokens back
            try:
                run.force(token)
            except Exception:
                if dropped:
                    run.force(list(dropped))
                for _ in range(back):
                    run.step()  # back where it was: a refused token changes nothing
                raise
            start = run.step_index
            while run.pending_forced and not run.finished:
                run.step()
            spans[:] = [s for s in spans if s[1] <= start] + [(start, run.step_index)]
            self.panel.bind(run.config)
        self._changed()

    def clear_forced(self) -> tuple[int, ...]:
        """Drop the tokens queued to be forced at the next steps (e.g. put back by a
        Rewind); returns their ids."""
        with self._lock:
            dropped = self.run.clear_forced()
        self._changed()
        return dropped

    # -- views ---------------------------------------------------------------------------
    @property
    def current_step(self) -> int | None:
        """Index of the step just taken (None before the first)."""
        return self.run.step_index - 1 if self.run.step_index else None

    def text(self) -> str:
        """The generated text of the active run (first row)."""
        n = self.run.prompt_length
        return self.lm.tokenizer.decode(
            self.run.sequences[0, n:].tolist(), skip_special_tokens=True
        )

    def history(self) -> pd.DataFrame:
        """One row per step taken: token, log-prob, prob, rank, entropy, forced, top."""
        return self.run.tracer.trace.steps()

    def waterfall_table(self, step: int | None = None, k: int = 5) -> pd.DataFrame:
        """Stages of ``step`` (default: the current one) with the mass each removed.

        k: how many top tokens each stage lists.
        """
        step = self.current_step if step is None else step
        if step is None:
            return pd.DataFrame()
        return waterfall_frame(self.run.tracer.trace, step, k=k)

    def __repr__(self) -> str:
        return f"StepDebugger(lm={self.lm.name!r}, step={self.run.step_index})"

    def static_html(self) -> str:
        """The panel's last state as plain HTML (what a notebook shows without a kernel):
        before the first Step, the prompt and the settings."""
        parts = [
            f"<b>genlab step debugger</b> &middot; {html.escape(str(self.lm.name))}",
            self.status.value,
            self.forced_view.value,
            self.text_view.value,
            prob_legend(),
        ]
        if self.current_step is None:
            parts.append(self.panel.static_html())
        else:
            parts += [self.waterfall_view.value, png_html(self.waterfall_png, "waterfall")]
        if len(self.runs) > 1:  # the runs explored, as a tree
            self.tree.refresh()
            parts += ["<b>branches</b>", self.tree.view.value]
        return f'<div class="genlab-static">{"".join(parts)}</div>'

    # -- internals -----------------------------------------------------------------------
    def _click(self, fn, *args) -> None:
        """A button's action. While a Run goes on it is refused, with a message (never
        queued to happen later); else it is done now, the panel shows it is working at
        once, and its full view is drawn once the clicks pause (20 quick Step clicks take
        20 steps and draw the waterfall once or twice, not 20 times)."""
        if self.worker.busy:
            self._refused = (
                f"busy: a Run is going on ({self.run.step_index} of {run_total(self.run)} "
                "tokens); that click was not applied. Press Stop first."
            )
            self.status.value = message(self._refused, "warn")
            return
        self.add_class("genlab-busy")
        self.status.value = message(f"working… (step {self.run.step_index})")
        self.defer_render = True
        try:
            self.guard(fn, *args)
        finally:
            self.defer_render = False
            if not self._redraw.pending and not self.worker.busy:
                self.remove_class("genlab-busy")

    def guard(self, fn, *args) -> bool:
        """Call ``fn(*args)`` as the panel base does (a failure shown, not raised), and
        forget queued clicks when it failed; True when it succeeded."""
        ok = super().guard(fn, *args)
        if not ok:
            self._redraw.cancel()
        return ok

    SETTINGS_TAB = 3  # of self.tabs: Current step, Waterfall figure, History, Settings
    TREE_TAB = 4  # ... Branches

    def _settings_shown(self, change) -> None:
        """The Settings tab shown for the first time: open its logits group there (its
        controls are built now, not while the tab is hidden)."""
        if change["new"] == self.SETTINGS_TAB and not self.panel.controls.built:
            self.panel.open_group("logits")

    def _picked(self, change) -> None:
        if not getattr(self, "_picking", False):
            self.guard(self.select_run, change["new"])

    def _take_chosen(self) -> None:
        typed = self.token_box.value  # spaces are text too (" " is a token)
        token = parse_typed_token(typed) if typed else self.candidates.value
        self.take(token)
        self.token_box.value = ""

    def _changed(self) -> None:
        """The run changed: draw now, or (after a click) once the clicks pause."""
        self.notice = None
        if not self.defer_render:
            self._render()
            return
        self._redraw.start(DEFER)  # a kernel: drawn on its thread, between its messages

    def _deferred_render(self) -> None:
        with self._lock:
            try:
                self._render()
            except Exception as err:  # shown, never raised in a timer thread
                self.show_error(err)
            finally:
                self.remove_class("genlab-busy")

    def wait(self, timeout: float = 10.0) -> None:
        """Wait until a Run and the view of the last action are drawn, at most
        ``timeout`` seconds."""
        self.worker.wait(timeout)
        self._redraw.flush(timeout)  # a cell waits: drawn here (its loop cannot fire it)

    def _render(self) -> None:
        t0 = time.perf_counter()
        with self._lock:
            self._draw()
        self.version += 1
        self.timings = {"render": time.perf_counter() - t0}

    def _text_html(self) -> str:
        run = self.run
        steps = run.tracer.trace.steps()
        prompt = (
            None
            if self.chat
            else self.lm.tokenizer.decode(
                run.sequences[0, : run.prompt_length].tolist(), skip_special_tokens=True
            )
        )
        if not len(steps):
            return text_block("", prompt=prompt)
        ids = steps.token_id.tolist()
        # a character the run has not finished yet is not shown as bytes: it may come
        pieces = running_pieces(self.lm.tokenizer, ids, complete=run.finished)
        labels = [label for label, _ in piece_labels(self.lm.tokenizer, ids, complete=run.finished)]
        tips = [
            f"step {s}: {t} p={prob_text(p)} rank {r}"
            + (" (forced)" if f else "")
            + (f"\n{tip}" if tip else "")
            for s, t, p, r, f, (_, tip) in zip(
                steps.step,
                labels,
                steps.prob,
                steps["rank"],
                steps.forced,
                pieces,
                strict=True,
            )
        ]
        texts = [t for t, _ in pieces]
        if run.finished_by == "eos" and texts:  # the end-of-text token: a mark, not its name
            texts[-1] = END_MARK
        body = token_spans(
            texts,
            list(steps.prob),
            tips,
            marks=[i for i, f in enumerate(steps.forced) if f],
        )
        return text_block(body, prompt=prompt)

    def _draw(self) -> None:
        run, trace = self.run, self.run.tracer.trace
        steps = trace.steps()
        self.text_view.value = self._text_html()
        self.progress.max, self.progress.value = run_total(run), run.step_index
        if run.finished:
            state, kind = self.finished_message(), "warn"
        else:
            state, kind = f"{run_total(run) - run.step_index} tokens to go at most", "info"
        if self.notice and not run.finished:
            state, kind = self.notice, "warn"
        self._refused = None  # a click refused during a Run: its cause ended with the Run
        taken = (  # as the waterfall counts: the step just taken, and the tokens so far
            f"step {self.current_step} ({run.step_index} tokens)"
            if self.current_step is not None
            else "no step yet"
        )
        line = (
            f"{taken} · {run.mode} · {state}"
            + (f" · {len(self.runs)} runs" if len(self.runs) > 1 else "")
            + (" · outlined tokens were forced" if len(steps) and steps.forced.any() else "")
        )
        if self.error:  # a deferred draw never hides the error of a later refused click
            line, kind = f"{self.error}\n{line}", "error"
        self.status.value = message(line, kind)
        queued = run.pending_forced
        if queued:
            words = self.lm.tokenizer.decode(list(queued))
            self.forced_view.value = message(
                f"queued to be forced at the next {len(queued)} step(s): {words!r}", "warn"
            )
            self.clear_button.layout.display = None
        else:
            self.forced_view.value = ""
            self.clear_button.layout.display = "none"
        self.history_view.value = (
            frame_html(steps_table(trace))
            if len(steps)
            else message("No steps yet: press Step; each step taken is listed here.")
        )
        self._render_current(trace)

    def _render_current(self, trace) -> None:
        step = self.current_step
        if step is None:
            self.waterfall_view.value = message(
                "Press Step to take the first step: its waterfall is shown here."
            )
            self.figure_note.value = message("The figure is drawn after the first Step.")
            show_figure(self.waterfall_image, None)
            self.waterfall_png = b""
            self.candidates.options = []
            self._show_alternatives([])
            self.masked_view.value = ""
            return
        self.figure_note.value = ""
        self._show_tree()
        self.waterfall_view.value = (
            f"<b>step {step}</b>: the distribution after each stage" + waterfall_html(trace, step)
        )
        final = candidates(trace, step, stage="final", k=trace_k(trace))
        options = [
            (f"{show_token(t)}  p={prob_text(p)}" + ("  (taken)" if c else ""), int(i))
            for t, p, i, c in zip(
                final.token, final.prob, final.token_id, final.chosen, strict=True
            )
        ]
        self.candidates.options = options
        taken = [int(i) for i, c in zip(final.token_id, final.chosen, strict=True) if c]
        if taken:
            self.candidates.value = taken[0]  # never blank: the token taken at this step
        self._show_alternatives(
            [(int(i), t, p) for t, p, i, c in zip(final.token, final.prob, final.token_id,
                                                  final.chosen, strict=True) if not c]
        )  # fmt: skip
        self.masked_view.value = masked_html(trace, step, k=ALTERNATIVE_BUTTONS)
        self.waterfall_png = b""
        if self.tabs.selected_index == 1:
            self._show_figure()

    def _show_alternatives(self, alternatives: list[tuple[int, str, float]]) -> None:
        """Label the click-to-branch buttons with the current step's alternatives."""
        step = self.current_step
        self.alternative_row.show(
            [(tid, show_token(tok), p) for tid, tok, p in alternatives],
            lambda tok, p: (
                f"continue with {tok} (p={prob_text(p)}) at step {step}: a fork, this run stays"
            ),
        )

    def _show_tree(self) -> None:
        """The Branches tab, drawn while it is shown."""
        if self.tabs.selected_index == self.TREE_TAB:
            self.tree.refresh()

    def _show_figure(self) -> None:
        """The matplotlib waterfall, drawn only while its tab is open (it takes longer
        than the table)."""
        from ..plots.tokens import waterfall

        step = self.current_step
        if self.tabs.selected_index != 1 or step is None or self.waterfall_png:
            return
        self.waterfall_png = show_figure(
            self.waterfall_image, waterfall(self.run.tracer.trace, step)
        )


def trace_k(trace) -> int:
    """How many candidates a trace keeps per stage."""
    rec = trace.records[0] if len(trace) else None
    return int(rec.stages[-1].top_ids.shape[1]) if rec is not None else 10
