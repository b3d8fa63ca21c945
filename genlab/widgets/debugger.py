"""StepDebugger: step a generation by hand, see each step's waterfall, force tokens.

Buttons drive the engine's :class:`~genlab.engine.Run`: **Step** (one token), **Run**
(to the end), **Rewind** (undo n steps, exactly), **Fork** (an independent copy to try
something else; a dropdown switches between the runs). For the current step (the one just
taken) the *waterfall* shows the top tokens after each logits processor, in order, and
how much probability each stage removed. Pick any candidate, or type a token, to take it
at this step instead. The settings panel edits the run's config between steps. The
history table lists every step so far.

>>> dbg = StepDebugger(genlab.load("demo"), "The capital of France is", max_new_tokens=8)
>>> dbg.step(); dbg.step(); dbg.waterfall_table()                 # doctest: +SKIP
>>> dbg.force(" Lyon"); dbg.text()                                # doctest: +SKIP
"""

from __future__ import annotations

import ast
import asyncio
import html
import threading
import time
import warnings
from typing import Any

import ipywidgets as widgets
import pandas as pd

from ..config import GenerationConfig
from ..engine import Run
from ..plots.tokens import candidates, stage_name
from ..tokens import show_token
from ..trace import Tracer
from .config_panel import FOCUS_CSS, WARNINGS_LOCK, ConfigPanel
from .live import initial_config
from .playground import with_static_html
from .render import (
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
from .worker import running_loop

#: seconds of quiet after a click before its view is drawn (quick clicks draw once)
DEFER = 0.02


def waterfall_frame(trace, step: int, row: int = 0, k: int = 5) -> pd.DataFrame:
    """One row per stage of ``step``: tokens kept and removed, the probability mass removed
    (see :meth:`Trace.stage_summary`), and the top ``k`` tokens after the stage."""
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
                "top": ", ".join(f"{show_token(t)} {p:.3f}" for t, p in zip(top.token, top.prob)),
            }
        )
    return pd.DataFrame(out)


def waterfall_html(trace, step: int, row: int = 0, k: int = 6) -> str:
    """The waterfall of one step as an HTML table (fast to draw, readable at any width):
    one row per stage with its full name, the tokens still possible, the probability
    mass it removed, and the top ``k`` tokens still possible after it, each with a bar of
    its probability; the chosen token in orange (shown even outside the top k)."""
    summary = trace.stage_summary(step, row=row)
    rows = []
    for i, st in enumerate(summary.itertuples(index=False)):
        top = candidates(trace, step, row=row, stage=st.stage, k=k)
        cells = []
        for tok, p, chosen in zip(top.token, top.prob, top.chosen):
            colour = "#f28e2b" if chosen else "#9aa5b1"
            weight = "font-weight:bold;color:#8a4500;" if chosen else ""
            note = "chosen: " if chosen else ""
            cells.append(
                f'<td style="padding:1px 6px;white-space:nowrap;{weight}" title="{note}'
                f'{html.escape(show_token(tok))} p={p:.4f}">'
                f"{html.escape(show_token(tok))} {prob_text(p)}"
                f'<div style="background:{colour};height:5px;width:{max(1, round(70 * p))}px">'
                "</div></td>"
            )
        removed = "" if i == 0 else f"{st.removed_mass:.3f}"
        rows.append(
            f"<tr><td style='padding:1px 6px'><b>{html.escape(stage_name(st.stage))}</b></td>"
            f"<td style='text-align:right;padding:1px 6px'>{st.tokens_kept:,}</td>"
            f"<td style='text-align:right;padding:1px 6px'>{removed}</td>{''.join(cells)}</tr>"
        )
    cell = "padding:1px 6px;white-space:normal"  # the headers may wrap in this table
    head = (
        f"<tr><th style='{cell}'>stage</th><th style='{cell}'>tokens possible</th>"
        f"<th style='{cell}'>mass removed</th><th colspan='{k}' style='{cell};text-align:left'>"
        "most likely tokens after the stage (orange: the chosen token)</th></tr>"
    )
    return (
        f'<div class="genlab-waterfall" style="overflow-x:auto;max-width:100%">{TABLE_CSS}'
        f'<table class="genlab-table" style="border-collapse:collapse">{head}{"".join(rows)}'
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


class StepDebugger(widgets.VBox):
    """Step / Run / Rewind / Fork over a :class:`Run`, with the waterfall of each step.

    lm: a :class:`genlab.LM`; prompt, chat, seed as in ``lm.start``; trace_top_k:
    candidates kept per stage; config / config kwargs: the settings (model defaults, 20 new tokens
    unless given).

    For code and tests: ``step()``, ``run_to_end()``, ``rewind(n)``, ``fork()``,
    ``select_run(i)``, ``force(token)``, ``text()``, ``history()`` and
    ``waterfall_table()`` (DataFrames); ``run`` is the active Run, ``runs`` all of them,
    ``error`` the last failure (None after a success).

    >>> from genlab.widgets import StepDebugger
    >>> dbg = StepDebugger(genlab.load("demo"), "Once upon a time", do_sample=True, top_k=20)
    >>> dbg                                                      # doctest: +SKIP
    """

    def __init__(
        self,
        lm,
        prompt: Any = "Once upon a time",
        *,
        chat: bool = False,
        seed: int | None = 0,
        trace_top_k: int = 10,
        config: GenerationConfig | None = None,
        **config_kwargs: Any,
    ) -> None:
        self.lm = lm
        self.trace_top_k = trace_top_k
        self.prompt = prompt
        self.chat = chat
        self.error: str | None = None
        cfg = initial_config(lm, config, **config_kwargs)
        with WARNINGS_LOCK, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run = lm.start(prompt, chat=chat, seed=seed, generation_config=cfg)
        run.attach_tracer(Tracer(run, top_k=trace_top_k))
        self.runs: list[Run] = [run]
        self.run = run

        self.panel = ConfigPanel(
            run.config,
            tokenizer=lm.tokenizer,
            vocab_size=lm.info.vocab_size,
            open_group=None,  # "logits" opens with the Settings tab (built only then)
            title="Settings (take effect at the next step)",
        )

        def button(label: str, **kwargs) -> widgets.Button:  # as wide as its label, >= 80px
            return widgets.Button(
                description=label, layout=widgets.Layout(width="auto", min_width="80px"), **kwargs
            )

        self.step_button = button("Step", button_style="primary")
        self.run_button = button("Run")
        self.rewind_button = button("Rewind")
        self.rewind_count = widgets.BoundedIntText(
            value=1, min=1, max=10_000, layout=widgets.Layout(width="70px")
        )
        self.fork_button = button("Fork")
        self.run_picker = widgets.Dropdown(
            options=[("run 0", 0)], value=0, description="run", layout=widgets.Layout(width="160px")
        )
        self.status = widgets.HTML()
        self.text_view = widgets.HTML()
        self.text_view.add_class("genlab-result")
        self.candidates = widgets.Dropdown(
            options=[], description="candidate", layout=widgets.Layout(width="320px")
        )
        self.token_box = widgets.Text(
            placeholder="or type a token", layout=widgets.Layout(width="180px")
        )
        self.force_button = widgets.Button(
            description="Take this token", tooltip="redo the current step with this token"
        )
        self.waterfall_view = widgets.HTML()
        self.waterfall_image = widgets.Image(format="png")
        self.waterfall_png = b""
        self.history_view = widgets.HTML()
        self.progress = widgets.IntProgress(
            value=0, min=0, max=1, layout=widgets.Layout(width="160px")
        )
        self.notice: str | None = None
        self.version = 0  # +1 per drawn view
        self.timings: dict[str, float] = {}
        self._lock = threading.RLock()
        self._pending = 0  # actions whose view is not drawn yet
        self._timer: threading.Timer | asyncio.TimerHandle | None = None
        self.defer_render = False  # buttons set it: quick clicks are drawn once

        self.step_button.on_click(lambda _: self._click(self.step))
        self.run_button.on_click(lambda _: self._click(self.run_to_end))
        self.rewind_button.on_click(lambda _: self._click(self.rewind, self.rewind_count.value))
        self.fork_button.on_click(lambda _: self._click(self.fork))
        self.force_button.on_click(lambda _: self._click(self._force_chosen))
        self.run_picker.observe(self._picked, names="value")

        buttons = widgets.HBox(
            [
                self.step_button,
                self.run_button,
                self.rewind_button,
                self.rewind_count,
                self.fork_button,
                self.run_picker,
                self.progress,
            ]
        )
        forcing = widgets.HBox([self.candidates, self.token_box, self.force_button])
        self.figure_box = widgets.Box(
            [self.waterfall_image], layout=widgets.Layout(overflow="auto", max_width="100%")
        )
        self.tabs = widgets.Tab(
            children=[
                widgets.VBox([self.waterfall_view, forcing]),
                self.figure_box,
                self.history_view,
                self.panel,
            ],
            titles=["Current step", "Waterfall figure", "History", "Settings"],
        )
        self.tabs.observe(lambda _: self._guard(self._show_figure), names="selected_index")
        self.tabs.observe(self._settings_shown, names="selected_index")
        title = widgets.HTML(f"<b>genlab step debugger</b> &middot; {html.escape(str(lm.name))}")
        super().__init__(
            [
                widgets.HTML(FOCUS_CSS),
                title,
                buttons,
                self.status,
                self.text_view,
                widgets.HTML(prob_legend()),
                self.tabs,
            ]
        )
        self.add_class("genlab-debugger")
        self.add_class("genlab-panel")
        self._render()

    # -- actions -------------------------------------------------------------------------
    def step(self, n: int = 1) -> None:
        """Take ``n`` steps (fewer if the generation ends); on a finished run, say so."""
        with self._lock:
            if self.run.finished:
                self.notice = (
                    f"the run has finished ({self.run.step_index} tokens): Rewind to go back, "
                    "Fork to try another way, or raise max_new_tokens in Settings"
                )
                self.status.value = message(self.notice, "warn")
                return
            for _ in range(n):
                if self.run.finished:
                    break
                self.run.step()
        self._changed()

    def run_to_end(self) -> None:
        """Step until a stopping criterion ends the generation, showing the text and the
        progress (tokens so far, tokens/s) as it goes."""
        with self._lock:
            run = self.run
            total = max(1, int(run.gen_config.max_length) - int(run.prompt_length))
            self.progress.max, self.progress.value = total, run.step_index
            t0 = last = time.perf_counter()
            start = run.step_index
            while not run.finished:
                run.step()
                now = time.perf_counter()
                if now - last >= 0.1:
                    last = now
                    rate = (run.step_index - start) / (now - t0)
                    self.progress.value = min(run.step_index, total)
                    self.status.value = message(
                        f"running… {run.step_index} of {total} tokens · {rate:.1f} tokens/s"
                    )
                    self.text_view.value = text_block(html.escape(self.text()))
            self.progress.value = min(run.step_index, total)
        self._changed()

    def rewind(self, n: int = 1) -> None:
        """Undo the last ``n`` steps (the config goes back to what those steps used)."""
        with self._lock:
            self.run.rewind(n)
            self.panel.bind(self.run.config)
        self._changed()

    def fork(self) -> Run:
        """Copy the active run and switch to the copy; returns it."""
        with self._lock:
            other = self.run.fork()
            self.runs.append(other)
            self.run = other
            self.panel.bind(other.config)
            self._picking = True
            try:
                self.run_picker.options = [(f"run {i}", i) for i in range(len(self.runs))]
                self.run_picker.value = len(self.runs) - 1
            finally:
                self._picking = False
        self._changed()
        return other

    def select_run(self, index: int) -> None:
        """Make ``runs[index]`` the active run."""
        if not isinstance(index, int) or not 0 <= index < len(self.runs):
            raise ValueError(f"run index must be in [0, {len(self.runs) - 1}], got {index!r}")
        with self._lock:
            self.run = self.runs[index]
            self.panel.bind(self.run.config)
        self._changed()

    def force(self, token) -> None:
        """Take ``token`` (an id, a token string or a text) at the current step instead
        of the token chosen there (before the first step: as the first token). A text of
        several tokens is taken whole: every token of it, one step each."""
        if token is None or (isinstance(token, str) and token == ""):
            raise ValueError("choose a candidate or type a token to force")
        with self._lock:
            run = self.run
            rewound = False
            if run.step_index > 0:
                run.rewind(1)
                rewound = True
            dropped = run.clear_forced()  # rewinding put the step's own forced token back
            try:
                run.force(token)
            except Exception:
                if dropped:
                    run.force(list(dropped))
                if rewound:
                    run.step()  # back where it was: a refused token changes nothing
                raise
            while run.pending_forced and not run.finished:
                run.step()
            self.panel.bind(run.config)
        self._changed()

    # -- views ---------------------------------------------------------------------------
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

    # -- internals -----------------------------------------------------------------------
    def static_html(self) -> str:
        """The panel's last state as plain HTML (what a notebook shows without a kernel)."""
        return (
            '<div class="genlab-static">'
            f"<b>genlab step debugger</b> &middot; {html.escape(str(self.lm.name))}"
            f"{self.status.value}{self.text_view.value}{prob_legend()}"
            f"{self.waterfall_view.value}{png_html(self.waterfall_png, 'waterfall')}</div>"
        )

    def _repr_mimebundle_(self, **kwargs):
        return with_static_html(self, super()._repr_mimebundle_(**kwargs))

    # -- internals -----------------------------------------------------------------------
    def _guard(self, fn, *args) -> None:
        try:
            fn(*args)
        except Exception as err:  # shown in the widget, never raised out of a callback
            self.error = f"{type(err).__name__}: {err}"
            self.status.value = message(self.error, "error")
        else:
            self.error = None

    def _click(self, fn, *args) -> None:
        """A button's action: done now, its view drawn once the clicks pause (20 quick
        Step clicks take 20 steps and draw the view once or twice, not 20 times)."""
        self.defer_render = True
        try:
            self._guard(fn, *args)
        finally:
            self.defer_render = False

    SETTINGS_TAB = 3  # of self.tabs: Current step, Waterfall figure, History, Settings

    def _settings_shown(self, change) -> None:
        """The Settings tab shown for the first time: open its logits group there (its
        controls are built now, not while the tab is hidden)."""
        if change["new"] == self.SETTINGS_TAB and not self.panel.controls.built:
            self.panel.open_group("logits")

    def _picked(self, change) -> None:
        if not getattr(self, "_picking", False):
            self._guard(self.select_run, change["new"])

    def _force_chosen(self) -> None:
        typed = self.token_box.value
        token = parse_typed_token(typed) if typed.strip() else self.candidates.value
        self.force(token)
        self.token_box.value = ""

    def _changed(self) -> None:
        """The run changed: draw now, or (after a click) once the clicks pause."""
        self.notice = None
        if not self.defer_render:
            self._render()
            return
        with self._lock:
            self._pending += 1
            if self._timer is not None:
                self._timer.cancel()
            loop = running_loop()
            if loop is not None:  # a kernel: drawn on its thread, between its messages
                self._timer = loop.call_later(DEFER, self._deferred_render)
            else:
                self._timer = threading.Timer(DEFER, self._deferred_render)
                self._timer.daemon = True
                self._timer.start()

    def _deferred_render(self) -> None:
        with self._lock:
            if not self._pending:
                return
            try:
                self._render()
            except Exception as err:  # shown, never raised in a timer thread
                self.error = f"{type(err).__name__}: {err}"
                self.status.value = message(self.error, "error")
            finally:
                self._pending = 0

    def wait(self, timeout: float = 10.0) -> None:
        """Wait until the view of the last action is drawn (after button clicks), at most
        ``timeout`` seconds."""
        if self._pending and isinstance(self._timer, asyncio.TimerHandle):
            self._deferred_render()  # a cell waits: the loop cannot fire the timer now
        end = time.perf_counter() + timeout
        while self._pending and time.perf_counter() < end:
            time.sleep(0.005)

    def _render(self) -> None:
        t0 = time.perf_counter()
        with self._lock:
            self._draw()
        self.version += 1
        self.timings = {"render": time.perf_counter() - t0}

    def _draw(self) -> None:
        run, trace = self.run, self.run.tracer.trace
        steps = trace.steps()
        prompt = (
            None
            if self.chat
            else self.lm.tokenizer.decode(
                run.sequences[0, : run.prompt_length].tolist(), skip_special_tokens=True
            )
        )
        if len(steps):
            tips = [
                f"step {s}: {show_token(t)} p={p:.3f} rank {r}" + (" (forced)" if f else "")
                for s, t, p, r, f in zip(
                    steps.step, steps.token, steps.prob, steps["rank"], steps.forced
                )
            ]
            body = token_spans(
                list(steps.token),
                list(steps.prob),
                tips,
                marks=[i for i, f in enumerate(steps.forced) if f],
            )
        else:
            body = ""
        self.text_view.value = text_block(body, prompt=prompt)
        state = "finished" if run.finished else "running"
        self.progress.value = 0
        self.status.value = message(
            f"step {run.step_index} · {run.mode} · {state}"
            + (f" · {len(self.runs)} runs" if len(self.runs) > 1 else "")
            + (" · outlined tokens were forced" if len(steps) and steps.forced.any() else ""),
            "info",
        )
        self.history_view.value = frame_html(steps_table(trace)) if len(steps) else ""
        self._render_current(trace)

    def _render_current(self, trace) -> None:
        step = self.current_step
        if step is None:
            self.waterfall_view.value = message("Press Step to take the first step.")
            show_figure(self.waterfall_image, None)
            self.waterfall_png = b""
            self.candidates.options = []
            return
        self.waterfall_view.value = (
            f"<b>step {step}</b>: the distribution after each stage" + waterfall_html(trace, step)
        )
        final = candidates(trace, step, stage="final", k=trace_k(trace))
        options = [
            (f"{show_token(t)}  p={prob_text(p)}" + ("  (taken)" if c else ""), int(i))
            for t, p, i, c in zip(final.token, final.prob, final.token_id, final.chosen)
        ]
        self.candidates.options = options
        taken = [int(i) for i, c in zip(final.token_id, final.chosen) if c]
        if taken:
            self.candidates.value = taken[0]  # never blank: the token taken at this step
        self.waterfall_png = b""
        if self.tabs.selected_index == 1:
            self._show_figure()

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
