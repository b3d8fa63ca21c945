"""Playground: a prompt, every generation setting, and results that follow each change.

Change the prompt, the seed or any setting and, after a short pause (``debounce``), the
text is generated again in a background thread: the running generation stops at its next
step, and a new one starts only when it has ended. The result shows

* the text with each token coloured by its probability (hover for details),
* the per-token table (token, log-prob, prob, rank, entropy, top alternatives),
* plots: probability and entropy along the text, the top-k bars at a chosen position.

A long generation shows its progress and can be stopped (what was generated is kept);
an error is shown in the widget and the last good result stays.

>>> pg = Playground(genlab.load("demo"), "The capital of France is", max_new_tokens=12)
>>> pg                                                       # doctest: +SKIP
>>> pg.panel.set("do_sample", True); pg.wait(); pg.result.text   # doctest: +SKIP
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as widgets
import pandas as pd

from ..config import GenerationConfig
from .config_panel import ConfigPanel
from .live import LiveView, initial_config, start_run
from .render import figure_png, frame_html, message, prob_legend, text_block, token_spans
from .worker import Job

TABLE_COLUMNS = ["step", "token", "token_id", "logprob", "prob", "rank", "entropy", "top"]


def token_table(result) -> pd.DataFrame:
    """One row per generated token of the first sequence (see :data:`TABLE_COLUMNS`).

    From the trace for token-by-token strategies; beam results (whose trace rows are beams,
    not the returned sequence) use the transition scores and leave rank/entropy empty.
    """
    trace = result.trace
    if trace is not None and "beam" not in str(result.run.mode):
        table = trace.steps(row=0)
        if not table.empty:
            return table[TABLE_COLUMNS].reset_index(drop=True)
    table = result.transition_scores()
    for col in ("rank", "entropy", "top"):
        table[col] = None
    return table[TABLE_COLUMNS]


def result_html(table: pd.DataFrame, prompt: str | None = None, marks=()) -> str:
    """The tokens of ``table`` (from :func:`token_table`) coloured by probability."""
    tokens = list(table.token)
    titles = [
        f"{tok!r}  p={p:.3f}  logp={lp:.3f}"
        + (f"  rank {int(r)}" if r is not None and r == r else "")
        + (f"\ntop: {top}" if top else "")
        for tok, p, lp, r, top in zip(tokens, table.prob, table.logprob, table["rank"], table.top)
    ]
    return text_block(token_spans(tokens, list(table.prob), titles, marks), prompt=prompt)


class Playground(LiveView):
    """Prompt box, ConfigPanel, seed, and a live result (see the module docstring).

    lm: a :class:`genlab.LM`; prompt: the starting prompt; chat: wrap it as a user message
    with the chat template; seed: the seed of every generation; config / config kwargs:
    the starting settings (the model's defaults, 20 new tokens, unless given);
    auto_update: regenerate after every change; debounce: seconds of quiet before that;
    trace_top_k: alternatives kept per step; run: generate once right away (synchronously).

    For code and tests: ``update(sync=True)`` generates now and returns the result;
    ``wait()`` waits for a scheduled update; ``result`` (a GenerationResult), ``table``
    (DataFrame), ``error`` (text of the last failure, None after a success), ``version``
    (+1 per shown result), ``timings`` (seconds of the last update).

    >>> from genlab.widgets import Playground
    >>> pg = Playground(genlab.load("demo"), "The capital of France is", max_new_tokens=12)
    >>> pg                                                       # doctest: +SKIP
    >>> pg.panel.set("do_sample", True); pg.wait(); pg.result.text   # doctest: +SKIP
    """

    def __init__(
        self,
        lm,
        prompt: str = "Once upon a time",
        *,
        chat: bool = False,
        seed: int | None = 0,
        config: GenerationConfig | None = None,
        auto_update: bool = True,
        debounce: float = 0.3,
        trace_top_k: int = 10,
        run: bool = True,
        **config_kwargs: Any,
    ) -> None:
        self.lm = lm
        self.trace_top_k = trace_top_k
        self.table: pd.DataFrame | None = None
        self._plots_shown = False
        self._init_live(debounce, auto_update)

        cfg = initial_config(lm, config, **config_kwargs)
        self.panel = ConfigPanel(cfg, tokenizer=lm.tokenizer, vocab_size=lm.info.vocab_size)
        self._init_prompt_inputs(prompt, chat, seed)
        self.text_view = widgets.HTML(text_block("<i>no result yet</i>"))
        self.text_view.add_class("genlab-result")
        self.table_view = widgets.HTML()
        self.probs_image = widgets.Image(format="png")
        self.position = widgets.IntSlider(
            value=0, min=0, max=0, description="position", continuous_update=False
        )
        self.topk_image = widgets.Image(format="png")

        self.panel.on_change(lambda panel, names: self.on_input())
        self.position.observe(lambda _: self._show_topk(), names="value")

        super().__init__(self._layout(lm))
        self.add_class("genlab-playground")
        if run:
            self.update(sync=True)

    def _layout(self, lm) -> list[widgets.Widget]:
        title = widgets.HTML(f"<b>genlab playground</b> &middot; {html.escape(str(lm.name))}")
        options = widgets.HBox([self.chat_box, self.seed_box])
        plots = widgets.VBox([self.probs_image, self.position, self.topk_image])
        self.tabs = widgets.Tab(children=[self.table_view, plots], titles=["Tokens", "Plots"])
        self.tabs.observe(lambda _: self._show_plots(), names="selected_index")
        results = widgets.VBox(
            [self.text_view, widgets.HTML(prob_legend()), self.tabs],
            layout=widgets.Layout(flex="1 1 420px", min_width="380px"),
        )
        self.panel.layout = widgets.Layout(flex="0 1 720px", min_width="420px")
        body = widgets.HBox([results, self.panel], layout=widgets.Layout(flex_flow="row wrap"))
        return [title, self.prompt_box, options, self.controls_row(), body]

    @property
    def config(self) -> GenerationConfig:
        """The settings the next generation uses (edited by the panel)."""
        return self.panel.config

    def __repr__(self) -> str:
        return f"Playground(lm={self.lm.name!r}, mode={self.panel.mode!r})"

    # -- LiveView ------------------------------------------------------------------------
    def compute(self, job: Job):
        """Generate for job (in the background worker); returns the result."""
        run = start_run(
            self.lm,
            self.prompt_box.value,
            chat=self.chat_box.value,
            seed=self.seed_box.value,
            config=self.panel.config,
            trace_top_k=self.trace_top_k,
        )
        self.drive(run, job)
        return self.lm.result(run)

    def render(self, result) -> None:
        """Show result (a GenerationResult): coloured text, table and plots."""
        run = result.run
        table = token_table(result)
        prompt = None if self.chat_box.value else self.prompt_box.value
        self.text_view.value = result_html(table, prompt=prompt)
        self.table_view.value = frame_html(table)
        self.result, self.table = result, table
        self._plots_shown = False
        self.position.max = max(0, len(table) - 1)
        self.position.value = min(self.position.value, self.position.max)
        if self.tabs.selected_index == 1:
            self._show_plots()
        notes = [f"{len(table)} tokens", f"mode {run.mode}", f"seed {self.seed_box.value}"]
        stopped = run.interrupted
        if stopped:
            notes.insert(0, "stopped")
        warn = list(run.warnings)
        text = " · ".join(notes) + ("\n" + "\n".join(warn) if warn else "")
        self.status.value = message(text, "warn" if stopped or warn else "ok")

    # -- plots ---------------------------------------------------------------------------
    def _plottable(self):
        trace = self.result.trace if self.result is not None else None
        if trace is None or "beam" in str(self.result.run.mode) or not len(trace):
            return None
        return trace

    def show_plots(self) -> None:
        """Draw the plots of the current result now (they are drawn only while the Plots
        tab is open, so that a change updates the text without waiting for figures)."""
        self.tabs.selected_index = 1
        self._show_plots()

    def _show_plots(self) -> None:
        from ..plots.tokens import token_probs

        if self.tabs.selected_index != 1 or self._plots_shown:
            return
        trace = self._plottable()
        self.probs_image.value = figure_png(token_probs(trace)) if trace is not None else b""
        self._plots_shown = True
        self._show_topk()

    def _show_topk(self) -> None:
        from ..plots.tokens import topk_bars

        trace = self._plottable()
        if trace is None or not self._plots_shown:
            self.topk_image.value = b""
            return
        step = min(self.position.value, len(trace) - 1)
        self.topk_image.value = figure_png(topk_bars(trace, step))
