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

import html
import warnings
from typing import Any

import ipywidgets as widgets
import pandas as pd

from ..config import GenerationConfig
from ..engine import Run
from ..trace import Tracer
from .config_panel import WARNINGS_LOCK, ConfigPanel
from .live import initial_config
from .render import figure_png, frame_html, message, prob_legend, text_block, token_spans


def waterfall_frame(trace, step: int, row: int = 0, k: int = 5) -> pd.DataFrame:
    """One row per stage of ``step``: tokens kept and removed, the probability mass removed
    (see :meth:`Trace.stage_summary`), and the top ``k`` tokens after the stage."""
    summary = trace.stage_summary(step, row=row)
    out = []
    for stage in summary.itertuples(index=False):
        top = trace.topk(step, row=row, stage=stage.stage).sort_values("rank")
        top = top[top.prob > 0].head(k)  # tokens this stage removed are not "top"
        out.append(
            {
                "stage": stage.stage,
                "tokens_kept": stage.tokens_kept,
                "removed_tokens": stage.removed_tokens,
                "removed_mass": stage.removed_mass,
                "raw_mass_kept": stage.raw_mass_kept,
                "top": ", ".join(f"{t!r} {p:.3f}" for t, p in zip(top.token, top.prob)),
            }
        )
    return pd.DataFrame(out)


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
            open_group="logits",
            title="Settings (take effect at the next step)",
        )
        self.step_button = widgets.Button(description="Step", button_style="primary")
        self.run_button = widgets.Button(description="Run")
        self.rewind_button = widgets.Button(description="Rewind")
        self.rewind_count = widgets.BoundedIntText(
            value=1, min=1, max=10_000, layout=widgets.Layout(width="70px")
        )
        self.fork_button = widgets.Button(description="Fork")
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
        self.history_view = widgets.HTML()

        self.step_button.on_click(lambda _: self._guard(self.step))
        self.run_button.on_click(lambda _: self._guard(self.run_to_end))
        self.rewind_button.on_click(lambda _: self._guard(self.rewind, self.rewind_count.value))
        self.fork_button.on_click(lambda _: self._guard(self.fork))
        self.force_button.on_click(lambda _: self._guard(self.force, self._chosen_candidate()))
        self.run_picker.observe(lambda c: self._guard(self.select_run, c["new"]), names="value")

        buttons = widgets.HBox(
            [
                self.step_button,
                self.run_button,
                self.rewind_button,
                self.rewind_count,
                self.fork_button,
                self.run_picker,
            ]
        )
        forcing = widgets.HBox([self.candidates, self.token_box, self.force_button])
        tabs = widgets.Tab(
            children=[
                widgets.VBox([self.waterfall_view, self.waterfall_image, forcing]),
                self.history_view,
                self.panel,
            ],
            titles=["Current step", "History", "Settings"],
        )
        title = widgets.HTML(f"<b>genlab step debugger</b> &middot; {html.escape(str(lm.name))}")
        super().__init__(
            [title, buttons, self.status, self.text_view, widgets.HTML(prob_legend()), tabs]
        )
        self.add_class("genlab-debugger")
        self._render()

    # -- actions -------------------------------------------------------------------------
    def step(self, n: int = 1) -> None:
        """Take ``n`` steps (fewer if the generation ends)."""
        for _ in range(n):
            if self.run.finished:
                break
            self.run.step()
        self._render()

    def run_to_end(self) -> None:
        """Step until a stopping criterion ends the generation."""
        while not self.run.finished:
            self.run.step()
        self._render()

    def rewind(self, n: int = 1) -> None:
        """Undo the last ``n`` steps (the config goes back to what those steps used)."""
        self.run.rewind(n)
        self.panel.bind(self.run.config)
        self._render()

    def fork(self) -> Run:
        """Copy the active run and switch to the copy; returns it."""
        other = self.run.fork()
        self.runs.append(other)
        self.run_picker.options = [(f"run {i}", i) for i in range(len(self.runs))]
        self.run_picker.value = len(self.runs) - 1
        self.select_run(len(self.runs) - 1)
        return other

    def select_run(self, index: int) -> None:
        """Make ``runs[index]`` the active run."""
        if not 0 <= index < len(self.runs):
            raise ValueError(f"run index must be in [0, {len(self.runs) - 1}], got {index}")
        self.run = self.runs[index]
        self.panel.bind(self.run.config)
        self._render()

    def force(self, token) -> None:
        """Take ``token`` (an id, a token string or text) at the current step instead of
        the token chosen there; before the first step, take it as the first token."""
        if token is None or token == "":
            raise ValueError("choose a candidate or type a token to force")
        if self.run.step_index > 0:
            self.run.rewind(1)
            self.panel.bind(self.run.config)
        self.run.force(token)
        self.run.step()
        self._render()

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
    def _guard(self, fn, *args) -> None:
        try:
            fn(*args)
        except Exception as err:  # shown in the widget
            self.error = f"{type(err).__name__}: {err}"
            self.status.value = message(self.error, "error")
        else:
            self.error = None

    def _chosen_candidate(self):
        typed = self.token_box.value
        return typed if typed else self.candidates.value

    def _render(self) -> None:
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
                f"step {s}: p={p:.3f} rank {r}" + (" (forced)" if f else "")
                for s, p, r, f in zip(steps.step, steps.prob, steps["rank"], steps.forced)
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
        self.status.value = message(
            f"step {run.step_index} · {run.mode} · {state}"
            + (f" · {len(self.runs)} runs" if len(self.runs) > 1 else ""),
            "info",
        )
        self.history_view.value = frame_html(steps)
        self._render_current(trace)

    def _render_current(self, trace) -> None:
        from ..plots.tokens import waterfall

        step = self.current_step
        if step is None:
            self.waterfall_view.value = message("Press Step to take the first step.")
            self.waterfall_image.value = b""
            self.candidates.options = []
            return
        self.waterfall_view.value = (
            f"<b>step {step}</b>: the distribution after each stage"
            + frame_html(self.waterfall_table(step))
        )
        self.waterfall_image.value = figure_png(waterfall(trace, step))
        final = trace.topk(step, stage="final").sort_values("rank")
        final = final[final.prob > 0]  # tokens a processor removed cannot be chosen
        self.candidates.options = [
            (f"{t!r}  p={p:.3f}", int(i))
            for t, p, i in zip(final.token, final.prob, final.token_id)
        ]
