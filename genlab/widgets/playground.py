"""Playground: a prompt, every generation setting, and results that follow each change.

Change the prompt, the seed or any setting and, after a short pause (``debounce``), the
text is generated again in a background thread: the running generation stops at its next
step, and a new one starts only when it has ended. The result shows

* the text with each token coloured by its probability (hover for details),
* the per-token table (token, log-prob, prob, rank, entropy, top alternatives),
* plots: probability and entropy along the text, the top-k bars at a chosen position.

A long generation shows its progress and can be stopped (what was generated is kept);
an error is shown in the widget and the last good result stays.

(Not run as a test: it shows a widget panel, drawn by a Jupyter front end (tests/test_widgets.py
and make browser run the panels).)

>>> pg = Playground(genlab.load("demo"), "The capital of France is", max_new_tokens=12)
...  # doctest: +SKIP
>>> pg                                                       # doctest: +SKIP
>>> pg.panel.set("do_sample", True); pg.wait(); pg.result.text   # doctest: +SKIP
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as widgets
import pandas as pd

from ..config import GenerationConfig, GenerationMode
from .base import FOCUS_CSS, figure_image, scroll_box, title_html
from .branching import BranchPicker, branch_html, continue_with, result_alternatives
from .config_panel import ConfigPanel
from .live import LiveView, ended_text, initial_config, limits_of
from .render import (
    frame_html,
    message,
    png_html,
    prob_legend,
    result_html,
    show_figure,
    shown_columns,
    text_block,
    token_table,
)
from .tree import BranchTree
from .worker import Job

#: how many alternatives of a token get a click-to-branch button
BRANCH_BUTTONS = 5

#: the schema the Playground's JSON-schema box starts with: a small record
DEFAULT_SCHEMA = """{
  "type": "object",
  "properties": {
    "city": {"type": "string"},
    "population": {"type": "integer"}
  },
  "required": ["city", "population"]
}"""


class Playground(LiveView):
    """Prompt box, ConfigPanel, seed, and a live result (see the module docstring).

    lm: a :class:`genlab.LM`; prompt: the starting prompt; chat: wrap it as a user message
    with the chat template; seed: the seed of every generation; config / config kwargs:
    the starting settings (the model's defaults, 20 new tokens, unless given);
    auto_update: regenerate after every change; debounce: seconds of quiet before that;
    trace_depth: alternatives the trace keeps per step; run: generate once right away
    (synchronously); json_schema: a schema (a dict or JSON text) to constrain the answer
    with from the start (the "constrain to this JSON schema" box is then ticked; unticked,
    the box holds a small record's schema, :data:`DEFAULT_SCHEMA`). A schema that does not
    compile (not JSON, an invalid schema, a pattern that is not a regular expression) is
    refused under the box, with the engine's reason, and the last good result stays.

    For code and tests: ``update(sync=True)`` generates now and returns the result;
    ``wait()`` waits for a scheduled update; ``result`` (a GenerationResult), ``table``
    (DataFrame), ``error`` (text of the last failure, None after a success), ``version``
    (+1 per shown result), ``timings`` (seconds of the last update).

    (Not run as a test: it shows a widget panel, drawn by a Jupyter front end
    (tests/test_widgets.py and make browser run the panels).)

    >>> from genlab.widgets import Playground
    >>> pg = Playground(genlab.load("demo"), "The capital of France is", max_new_tokens=12)
    ...  # doctest: +SKIP
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
        trace_depth: int = 10,
        run: bool = True,
        json_schema: Any = None,
        **config_kwargs: Any,
    ) -> None:
        self.lm = lm
        self.trace_depth = trace_depth
        self.table: pd.DataFrame | None = None
        self._plots_shown = False
        super().__init__(
            debounce=debounce, auto_update=auto_update, prompt=prompt, chat=chat, seed=seed
        )

        cfg = initial_config(lm, config, **config_kwargs)
        self.panel = ConfigPanel(
            cfg, tokenizer=lm.tokenizer, vocab_size=lm.info.vocab_size, limits=limits_of(lm)
        )
        self._init_schema_box(json_schema)
        self.text_view = widgets.HTML(text_block("<i>no result yet</i>"))
        self.text_view.add_class("genlab-result")
        self.table_view = widgets.HTML()
        self.probs_image = figure_image()
        self.probs_png = self.topk_png = b""
        self.position = widgets.IntSlider(
            value=0, min=0, max=0, description="position", continuous_update=False
        )
        self.topk_image = figure_image()
        #: click to branch (genlab.widgets.branching): the alternatives of the token at
        #: ``branch_at`` as buttons; a click continues from there in a run of its own
        self.picker = BranchPicker(self, self.alternatives, self._branch_view, BRANCH_BUTTONS)
        self.branches, self.branch_at = self.picker.branches, self.picker.at
        self.alt_buttons, self.alt_label = self.picker.buttons, self.picker.label
        self.branch_view = self.picker.view
        #: the Branches tab: the tree of the result and its branches (read-only: a branch
        #: is made by clicking an alternative), drawn while the tab is open
        self._first_branch = 0  # the first of ``branches`` made from the current result
        self.tree = BranchTree(self._tree_runs, lm.tokenizer)

        self.panel.on_change(lambda panel, names: self.on_input())
        self.position.observe(lambda _: self._show_topk(), names="value")

        self.children = self._layout(lm)
        self.add_class("genlab-playground")
        self.add_class("genlab-panel")
        if run:
            self.update(sync=True)

    #: the index of the Branches tab
    TREE_TAB = 2

    def _layout(self, lm) -> list[widgets.Widget]:
        title = title_html("playground", lm)
        options = widgets.HBox(  # wraps: the schema box's switch whole at 321 px
            [self.chat_box, self.seed_box, self.constrain_box],
            layout=widgets.Layout(flex_flow="row wrap"),
        )
        self.options_row = options
        self.plots_note = widgets.HTML()
        plots = widgets.VBox(
            [
                self.plots_note,
                scroll_box(self.probs_image),
                self.position,
                scroll_box(self.topk_image),
            ]
        )
        branching = self.picker.widget
        self.tabs = widgets.Tab(
            children=[widgets.VBox([branching, self.table_view]), plots, self.tree],
            titles=["Tokens", "Plots", "Branches"],
        )
        self.tabs.observe(lambda _: self._show_plots(), names="selected_index")
        self.tabs.observe(lambda _: self._show_tree(), names="selected_index")
        results = widgets.VBox(
            [self.text_view, widgets.HTML(prob_legend()), self.tabs],
            # 600 px at least beside the settings (else above them): the Tokens table fits
            layout=widgets.Layout(flex="1 1 600px", min_width="0", max_width="100%"),
        )
        self.panel.layout = widgets.Layout(flex="0 1 720px", min_width="0", max_width="100%")
        body = widgets.HBox([results, self.panel], layout=widgets.Layout(flex_flow="row wrap"))
        return [
            widgets.HTML(FOCUS_CSS),
            title,
            self.prompt_box,
            options,
            self.schema_box,
            self.schema_note,
            self.controls_row(),
            body,
        ]

    @property
    def config(self) -> GenerationConfig:
        """The settings the next generation uses (edited by the panel)."""
        return self.panel.config

    def __repr__(self) -> str:
        return f"Playground(lm={self.lm.name!r}, mode={self.panel.mode!r})"

    def static_html(self) -> str:
        """The panel's last state as plain HTML (what a notebook shows without a kernel)."""
        parts = [
            f"<b>genlab playground</b> &middot; {html.escape(str(self.lm.name))}",
            f"<div><i>prompt</i>: {html.escape(str(self.prompt_box.value))} &middot; "
            f"seed {html.escape(str(self.seed_box.value))} &middot; mode "
            f"{html.escape(self.panel.mode)}</div>",
            self.status.value,
            self.text_view.value,
            prob_legend(),
            self.branch_view.value,
        ]
        if self.table is not None:
            parts.append(frame_html(shown_columns(self.table)))
        parts += [png_html(self.probs_png, "probabilities"), png_html(self.topk_png, "top-k")]
        return f'<div class="genlab-static">{"".join(parts)}</div>'

    # -- the JSON-schema box --------------------------------------------------------------
    def _init_schema_box(self, json_schema: Any) -> None:
        import json

        text = json_schema if isinstance(json_schema, str) else (
            DEFAULT_SCHEMA if json_schema is None else json.dumps(json_schema, indent=2)
        )  # fmt: skip
        self.constrain_box = widgets.Checkbox(
            value=json_schema is not None, description="constrain to this JSON schema",
            indent=False, layout=widgets.Layout(width="auto"),
        )  # fmt: skip
        self.schema_box = widgets.Textarea(
            value=text, rows=7, continuous_update=False,
            layout=widgets.Layout(width="auto", max_width="100%"),
        )  # fmt: skip
        self.schema_box.add_class("genlab-schema")
        self.schema_note = widgets.HTML()
        #: why the schema in the box was refused (None: it compiles, or the box is off)
        self.schema_error: str | None = None
        self._check_schema()
        self.constrain_box.observe(self._schema_changed, names="value")
        self.schema_box.observe(self._schema_changed, names="value")

    def _check_schema(self) -> bool:
        """Compile the box's schema (when ticked): True when it compiles; else its error is
        shown under the box and kept in :attr:`schema_error`."""
        self.schema_box.layout.display = None if self.constrain_box.value else "none"
        self.schema_error = None
        if self.constrain_box.value:
            from ..text.grammar import compile_grammar

            try:
                compile_grammar(self.lm.tokenizer, json_schema=self.schema_box.value)
            except (ValueError, TypeError, ImportError) as err:
                self.schema_error = str(err).strip()
        self.schema_note.value = (
            message(
                f"{self.schema_error.rstrip('.')}. Fix the schema (or untick the box) to "
                "generate again. The last good result is still shown.",
                "error",
            )
            if self.schema_error
            else ""
        )
        return self.schema_error is None

    def _schema_changed(self, change=None) -> None:
        if self._check_schema():
            self.on_input(change)

    @property
    def constraint(self) -> dict:
        """What the next run is constrained by: ``{"json_schema": text}`` when the box is
        ticked, else nothing (ValueError, the box's refusal, while its schema fails)."""
        if not self.constrain_box.value:
            return {}
        if self.schema_error:
            raise ValueError(self.schema_error)
        return {"json_schema": self.schema_box.value}

    # -- LiveView ------------------------------------------------------------------------
    def compute(self, job: Job):
        """Generate for job, a token per step (see LiveView.drive); returns the result."""
        constraint = self.constraint
        self._constraint_used = constraint
        return (
            yield from self.generate(
                job, self.panel.config, trace_depth=self.trace_depth, constraint=constraint
            )
        )

    def stream(self, run, job: Job) -> None:
        """Show the tokens ``run`` generated so far (called by the worker during ``job``)."""
        n = run.prompt_length
        text = self.lm.tokenizer.decode(run.sequences[0, n:].tolist(), skip_special_tokens=True)
        prompt = None if self.chat_box.value else self.prompt_box.value
        self.text_view.value = text_block(
            f'<span class="genlab-streaming">{html.escape(text)}</span>', prompt=prompt
        )

    def render(self, result) -> None:
        """Show result (a GenerationResult): coloured text, table and plots."""
        run = result.run
        table = token_table(result)
        prompt = None if self.chat_box.value else self.prompt_box.value
        self.text_view.value = result_html(
            table,
            prompt=prompt,
            tokenizer=self.lm.tokenizer,
            ended=run.finished_by == "eos" and not GenerationMode(run.mode).is_beam,
        )
        self.table_view.value = frame_html(shown_columns(table))
        self.result, self.table = result, table
        self._plots_shown = False
        self.position.max = max(0, len(table) - 1)
        self.position.value = min(self.position.value, self.position.max)
        self.picker.reset(len(table))  # a branch of the last result: not of this one
        self._first_branch = len(self.branches)
        self._show_tree()
        if self.tabs.selected_index == 1:
            self._show_plots()
        notes = [f"{len(table)} tokens", f"mode {run.mode}", f"seed {self.seed_box.value}"]
        stopped = run.finished_by == "interrupted"
        why = ended_text(run)
        if why:
            notes.insert(0, why)
        warn = list(dict.fromkeys(str(w) for w in run.views.warnings))  # each message once
        text = " · ".join(notes) + ("\n" + "\n".join(warn) if warn else "")
        self.status.value = message(text, "warn" if stopped or warn else "ok")

    # -- click to branch -----------------------------------------------------------------
    def alternatives(self, position: int) -> list[tuple[int, str, float]]:
        """(token id, token, probability) of the tokens that could have come at
        ``position`` of the result instead of the one taken, best first (none for beam
        search: its tokens have no single distribution each)."""
        return result_alternatives(self._plottable(), position, BRANCH_BUTTONS)

    def branch(self, position: int, token):
        """Continue from token ``position`` of the result with ``token`` (an id or a
        text) instead, to the end, under the same settings and seed: a run of its own
        (the result stays). Returns its GenerationResult, appended to ``branches`` and
        shown below the buttons."""
        result = self.result
        if result is None:
            raise ValueError("no result yet: generate first, then click an alternative")
        n = len(self.table)
        if not isinstance(position, int) or not 0 <= position < n:
            raise ValueError(f"position must be a token of the result, 0-{n - 1}, got {position!r}")
        branch = continue_with(
            self.lm, self.prompt_box.value, chat=self.chat_box.value, seed=self.seed,
            config=self.panel.config, kept=self.table.token_id[:position], token=token,
            trace_depth=self.trace_depth, constraint=getattr(self, "_constraint_used", None),
        )  # fmt: skip
        self.branches.append(branch)
        run = branch.run
        self.picker.add(branch_html(
            len(self.branches), position, "token",
            result_html(token_table(branch), marks=[position], tokenizer=self.lm.tokenizer,
                        ended=run.finished_by == "eos"),
            ended_text(run),
        ))  # fmt: skip
        return branch

    def _branch_view(self, position: int, token: int) -> str:
        self.branch(position, token)
        self._show_tree()
        return self.branch_view.value

    def _tree_runs(self) -> list:
        """The runs the Branches tab draws: the result's, then its branches'."""
        if self.result is None:
            return []
        return [self.result.run, *(b.run for b in self.branches[self._first_branch :])]

    def _show_tree(self) -> None:
        """Draw the Branches tab while it is open (beam search: it has no branches)."""
        if self.tabs.selected_index != self.TREE_TAB or self.result is None:
            return
        if GenerationMode(self.result.run.mode).is_beam:
            self.tree.status.value = message(
                "no branches for beam search: its tokens have no single distribution each"
            )
            return
        self.tree.guard(self.tree.refresh)

    # -- plots ---------------------------------------------------------------------------
    def _plottable(self):
        trace = self.result.trace if self.result is not None else None
        if trace is None or GenerationMode(self.result.run.mode).is_beam or not len(trace):
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
        fig = token_probs(trace) if trace is not None else None
        self.plots_note.value = (
            message(
                "no plots for beam search: its tokens have no single distribution each "
                "(see the Tokens tab)"
                if self.result is not None and GenerationMode(self.result.run.mode).is_beam
                else "no result yet"
            )
            if fig is None
            else ""
        )
        self.probs_png = show_figure(self.probs_image, fig)
        self._plots_shown = True
        self._show_topk()

    def _show_topk(self) -> None:
        from ..plots.tokens import topk_bars

        trace = self._plottable()
        if trace is None or not self._plots_shown:
            self.topk_png = show_figure(self.topk_image, None)
            return
        step = min(self.position.value, len(trace) - 1)
        self.topk_png = show_figure(self.topk_image, topk_bars(trace, step))
