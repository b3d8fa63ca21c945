"""CompareView: one prompt and seed under two or more configs, side by side.

Each column has its own settings (a ConfigPanel, folded) and shows its text with tokens
coloured by probability; below, one plot draws the log-prob of every generated token for
all columns, with the first position where their tokens differ marked (also outlined in
each text).

(Not run as a test: it shows a widget panel, drawn by a Jupyter front end (tests/test_widgets.py
and make browser run the panels).)

>>> view = CompareView(genlab.load("demo"), "Once upon a time",          # doctest: +SKIP
...                    {"greedy": {}, "t=1.2": {"do_sample": True, "temperature": 1.2}})
>>> view.divergence, view.texts()                                      # doctest: +SKIP
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

import ipywidgets as widgets
import pandas as pd

from ..config import GenerationConfig
from .base import FOCUS_CSS, figure_image, scroll_box, title_html
from .branching import (
    BranchPicker,
    branch_html,
    continue_with,
    result_alternatives,
    result_text_html,
    stepwise_trace,
)
from .config_panel import ConfigPanel
from .live import LiveView, initial_config, limits_of
from .render import (
    frame_html,
    png_html,
    prob_legend,
    result_html,
    show_figure,
    text_block,
    token_table,
)
from .worker import Job


def _named_configs(configs) -> dict[str, dict | GenerationConfig]:
    if isinstance(configs, Mapping):
        named = dict(configs)
    elif isinstance(configs, Sequence) and not isinstance(configs, str):
        named = {f"config {i}": c for i, c in enumerate(configs)}
    else:
        raise ValueError(
            f"configs must be a dict label -> settings or a list of settings, "
            f"got {type(configs).__name__}"
        )
    if len(named) < 2:
        raise ValueError(f"configs must hold at least 2 settings to compare, got {len(named)}")
    return named


class CompareView(LiveView):
    """Side-by-side generations of one prompt and seed (see the module docstring).

    configs: {label: dict of settings or GenerationConfig}, or a list (labelled
    "config 0", ...). Each starts from the model's defaults with 20 new tokens.

    For code and tests: ``results`` (label -> GenerationResult), ``tables`` (label ->
    per-token DataFrame), ``divergence`` (first differing position or None), ``texts()``,
    ``panels`` (label -> ConfigPanel), plus LiveView's ``update/wait/error/version``.

    lm: a :class:`~genlab.lm.LM`; chat: apply the chat template; auto_update: generate again
    after every change; debounce: seconds to wait for more changes first; run: generate at
    once (False: wait for the Generate button).

    (Not run as a test: it shows a widget panel, drawn by a Jupyter front end
    (tests/test_widgets.py and make browser run the panels).)

    >>> from genlab.widgets import CompareView
    >>> CompareView(genlab.load("demo"), "Once upon a time",
    ...             {"greedy": {}, "top-p": {"do_sample": True, "top_p": 0.9}})  # doctest: +SKIP
    """

    def __init__(
        self,
        lm,
        prompt: str,
        configs,
        *,
        chat: bool = False,
        seed: int | None = 0,
        auto_update: bool = True,
        debounce: float = 0.3,
        run: bool = True,
    ) -> None:
        self.lm = lm
        self.results: dict[str, Any] = {}
        self.tables: dict[str, Any] = {}
        self.divergence: int | None = None
        super().__init__(
            debounce=debounce, auto_update=auto_update, prompt=prompt, chat=chat, seed=seed
        )
        self.panels: dict[str, ConfigPanel] = {}
        self.text_views: dict[str, widgets.HTML] = {}
        columns = []
        for label, cfg in _named_configs(configs).items():
            base = cfg if isinstance(cfg, GenerationConfig) else None
            kwargs = {} if base is not None else dict(cfg)
            panel = ConfigPanel(
                initial_config(lm, base, **kwargs),
                tokenizer=lm.tokenizer,
                vocab_size=lm.info.vocab_size,
                limits=limits_of(lm),
                open_group=None,
                title=label,
            )
            panel.on_change(lambda p, names: self.on_input())
            view = widgets.HTML(text_block("<i>no result yet</i>"))
            view.add_class("genlab-result")
            settings = widgets.Accordion(children=[panel], titles=["settings"])
            settings.selected_index = None
            columns.append(
                widgets.VBox(
                    [widgets.HTML(f"<b>{html.escape(label)}</b>"), view, settings],
                    # side by side while each gets 300 px, else below each other
                    layout=widgets.Layout(flex="1 1 300px", min_width="0", margin="0 6px"),
                )
            )
            self.panels[label], self.text_views[label] = panel, view
        self.plot_image = figure_image()
        self.plot_png = b""
        self.summary_view = widgets.HTML()
        #: click to branch: an alternative of a token of the chosen column continues that
        #: column's text from there, in a run of its own (the columns stay)
        self.branch_column = widgets.Dropdown(
            options=list(self.panels), description="column", layout=widgets.Layout(width="220px")
        )
        self.picker = BranchPicker(self, self.alternatives, self._branch,
                                   before=[self.branch_column])  # fmt: skip
        self.branch_column.observe(lambda _: self.guard(self._reset_picker), names="value")
        self.branches = self.picker.branches
        title = title_html("compare", lm)
        self.children = [
            widgets.HTML(FOCUS_CSS),
            title,
            self.prompt_box,
            widgets.HBox([self.chat_box, self.seed_box]),
            self.controls_row(),
            widgets.HTML(prob_legend()),
            widgets.HBox(columns, layout=widgets.Layout(flex_flow="row wrap")),
            self.picker.widget,
            self.summary_view,
            scroll_box(self.plot_image),
        ]
        self.add_class("genlab-compare")
        self.add_class("genlab-panel")
        if run:
            self.update(sync=True)

    # -- click to branch ------------------------------------------------------------------
    def _reset_picker(self) -> None:
        table = self.tables.get(self.branch_column.value)
        self.picker.reset(0 if table is None else len(table))

    def alternatives(self, position: int) -> list[tuple[int, str, float]]:
        """(token id, token, probability) of the tokens that could have come at
        ``position`` of the chosen column's text instead, best first."""
        result = self.results.get(self.branch_column.value)
        return result_alternatives(stepwise_trace(result), position)

    def branch(self, label: str, position: int, token):
        """Continue column ``label``'s text from token ``position`` with ``token`` (an id
        or a text) instead, under its settings and the seed: a run of its own (the
        columns stay). Returns its GenerationResult, appended to ``branches``."""
        if label not in self.tables:
            raise ValueError(f"column must be one of {list(self.tables)}, got {label!r}")
        table = self.tables[label]
        if not isinstance(position, int) or not 0 <= position < len(table):
            raise ValueError(
                f"position must be a token of the text, 0-{len(table) - 1}, got {position!r}"
            )
        branch = continue_with(
            self.lm, self.prompt_box.value, chat=self.chat_box.value, seed=self.seed,
            config=self.panels[label].config, kept=table.token_id[:position], token=token,
        )  # fmt: skip
        self.branches.append(branch)
        self.picker.add(branch_html(
            len(self.branches), position, f"{label}, token",
            result_text_html(branch, position, self.lm),
        ))  # fmt: skip
        return branch

    def _branch(self, position: int, token: int) -> str:
        self.branch(self.branch_column.value, position, token)
        return self.picker.view.value

    def texts(self) -> dict[str, str]:
        """The generated text of each column."""
        return {label: res.text for label, res in self.results.items()}

    def __repr__(self) -> str:
        return f"CompareView(lm={self.lm.name!r}, configs={list(self.panels)})"

    def static_html(self) -> str:
        """The panel's last state as plain HTML (what a notebook shows without a kernel)."""
        columns = "".join(
            f'<div style="flex:1 1 300px;min-width:0;margin:0 6px"><b>{html.escape(label)}</b>'
            f"{view.value}</div>"
            for label, view in self.text_views.items()
        )
        return (
            '<div class="genlab-static">'
            f"<b>genlab compare</b> &middot; {html.escape(str(self.lm.name))}"
            f"<div><i>prompt</i>: {html.escape(str(self.prompt_box.value))}</div>"
            f'{prob_legend()}<div style="display:flex;flex-wrap:wrap">{columns}</div>'
            f"{self.picker.view.value}{self.summary_view.value}"
            f"{png_html(self.plot_png, 'log-probs')}</div>"
        )

    # -- LiveView ------------------------------------------------------------------------
    def compute(self, job: Job) -> dict[str, Any]:
        """Generate every config for job, a token per step; returns label -> result."""
        out = {}
        for label, panel in self.panels.items():
            out[label] = yield from self.generate(job, panel.config)
        return out

    def render(self, results: dict[str, Any]) -> None:
        """Show results (label -> GenerationResult) side by side."""
        from ..plots.tokens import compare_logprobs, first_divergence

        tables = {label: token_table(res) for label, res in results.items()}
        diverge = first_divergence([t.token_id.tolist() for t in tables.values()])
        prompt = None if self.chat_box.value else self.prompt_box.value
        for label, table in tables.items():
            marks = [diverge] if diverge is not None else []
            self.text_views[label].value = result_html(
                table, prompt=prompt, marks=marks, tokenizer=self.lm.tokenizer
            )
        self.results, self.tables, self.divergence = results, tables, diverge
        self.result = results
        self._reset_picker()
        rows = [
            {
                "config": label,
                "tokens": len(t),
                "sum_logprob": float(t.logprob.sum()),
                "mean_logprob": float(t.logprob.mean()) if len(t) else None,
                "mode": str(results[label].run.mode),
            }
            for label, t in tables.items()
        ]
        where = (
            "the texts are identical"
            if diverge is None
            else f"first different token at position {diverge} (outlined)"
        )
        self.summary_view.value = f"<div>{where}</div>" + frame_html(pd.DataFrame(rows))
        fig = compare_logprobs(list(results.values()), labels=list(results))
        self.plot_png = show_figure(self.plot_image, fig)
        self.status.value = ""
