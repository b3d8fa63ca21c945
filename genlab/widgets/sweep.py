"""SweepView: a sampling sweep typed into a form, run on the panels' one scheduler.

:class:`SweepView` samples ``n`` continuations under every combination of the values typed
for each setting and shows the metrics against the grid, the metrics table and the
samples. It is a :class:`~genlab.widgets.live.LiveView`: the sweep runs one setting per
step of the scheduler (on the kernel's loop in Jupyter), so Stop and a new Run are read
between two settings, the panel shows that it is busy, and Stop keeps the last finished
sweep on screen.

(Not run as a test: it shows a widget panel, drawn by a Jupyter front end (tests/test_widgets.py
and make browser run the panels).)

>>> SweepView(genlab.load("demo"), "Once upon a time", n=8)  # doctest: +SKIP
"""

from __future__ import annotations

import html
import itertools
import time
from typing import Any

import ipywidgets as widgets
import pandas as pd

from ..plots.inside import sweep_metrics
from .base import FOCUS_CSS, figure_image, parse_int, scroll_box, title_html
from .live import Cancelled, LiveView
from .render import frame_html, message, png_html, show_figure
from .worker import Job

_WIDE = {"description_width": "initial"}

#: figures are drawn at 100 dpi: a 10-inch figure is 1000 px wide, text >= 7 pt is >= 9 px
DPI = 100


class Stopped:
    """What a sweep stopped by Stop computes: how far it got (the view keeps the last
    finished sweep)."""

    def __init__(self, done: int, total: int) -> None:
        self.done, self.total = done, total


class SweepView(LiveView):
    """A sampling sweep over a grid typed as comma-separated values per setting (see the
    module docstring).

    lm: the LM to sample from; prompt: the prompt (text, messages or ids); grid: the
    settings and their values (default temperature x top_p); n: samples per setting;
    seed, max_new_tokens: as in :func:`genlab.sweep`; chat: apply the chat template;
    run: start the sweep at once; debounce: seconds of quiet before a scheduled sweep.

    For code and tests: ``grid_boxes`` (setting -> Text), ``run_sweep()`` (runs it and
    waits), ``update()`` / ``stop()`` / ``wait()`` (the scheduler's), ``result`` (the
    :class:`~genlab.experiments.sweeps.SweepResult`), ``error``.

    (Not run as a test: it shows a widget panel, drawn by a Jupyter front end
    (tests/test_widgets.py and make browser run the panels).)

    >>> SweepView(lm, "Describe the sea.", {"temperature": [0.5, 1.0]}, n=8)  # doctest: +SKIP
    """

    def __init__(self, lm, prompt: Any = "Once upon a time", grid: dict | None = None, *,
                 n: int = 8, seed: int = 0, max_new_tokens: int = 20, chat: bool = False,
                 run: bool = True, debounce: float = 0.3, **config: Any) -> None:  # fmt: skip
        self.lm, self.config = lm, config
        self._given_prompt = prompt  # ids or messages, used while the box shows them
        grid = grid or {"temperature": [0.5, 1.0, 1.5], "top_p": [0.8, 1.0]}
        super().__init__(debounce=debounce, auto_update=False, prompt=str(prompt), chat=chat,
                         seed=seed)  # fmt: skip
        self.generate_button.description = "Run sweep"
        self.stop_button.tooltip = "stop the sweep after the setting it is sampling"
        self.progress.description = "settings"
        self.grid_boxes = {
            key: widgets.Text(
                value=", ".join(str(v) for v in values),
                description=key,
                style=_WIDE,
                continuous_update=False,
            )  # fmt: skip
            for key, values in grid.items()
        }
        small = widgets.Layout(width="180px")
        self.n_box = widgets.Text(value=str(n), description="n", layout=small,
                                  continuous_update=False)  # fmt: skip
        self.length_box = widgets.Text(value=str(max_new_tokens), description="new tokens",
                                       style=_WIDE, layout=small,
                                       continuous_update=False)  # fmt: skip
        for box in (*self.grid_boxes.values(), self.n_box, self.length_box):
            box.observe(self.on_input, names="value")
        self.plot_image = figure_image()
        self.plot_png = b""
        self.metrics_view = widgets.HTML()
        self.setting_pick = widgets.Dropdown(description="setting", options=[])
        self.setting_pick.observe(lambda _: self._show_samples(), names="value")
        self.samples_view = widgets.HTML()
        tabs = widgets.Tab(children=[
            widgets.VBox([scroll_box(self.plot_image), self.metrics_view]),
            widgets.VBox([self.setting_pick, self.samples_view]),
        ])  # fmt: skip
        tabs.set_title(0, "Metrics")
        tabs.set_title(1, "Samples")
        wrap = widgets.Layout(flex_flow="row wrap")
        self.children = [
            widgets.HTML(FOCUS_CSS),
            title_html("sampling sweep", lm),
            self.prompt_box,
            widgets.HBox(list(self.grid_boxes.values()), layout=wrap),
            widgets.HBox([self.n_box, self.seed_box, self.length_box, self.chat_box],
                         layout=wrap),
            self.controls_row(),
            tabs,
        ]  # fmt: skip
        self.add_class("genlab-sweep-view")
        self.add_class("genlab-panel")
        if run:
            self.update(sync=True)

    def __repr__(self) -> str:
        return f"SweepView(lm={self.lm.name!r}, grid={list(self.grid_boxes)})"

    def static_html(self) -> str:
        """The view's last state as plain HTML (what a notebook shows without a kernel)."""
        grid = "; ".join(
            f"{html.escape(k)}: {html.escape(b.value)}" for k, b in self.grid_boxes.items()
        )
        return (
            f'<div class="genlab-static"><b>genlab sampling sweep</b>'
            f"<div><i>prompt</i>: {html.escape(str(self.prompt_box.value))} &middot; {grid}"
            f" &middot; n {html.escape(self.n_box.value)}</div>{self.status.value}"
            f"{png_html(self.plot_png, 'sweep metrics')}{self.metrics_view.value}</div>"
        )

    def run_sweep(self):
        """Run the sweep with the values in the controls, wait for it and show it; returns
        the :class:`~genlab.experiments.sweeps.SweepResult` shown."""
        return self.update(sync=True)

    def parsed_grid(self) -> dict[str, list]:
        """The grid typed in the boxes: numbers where they parse, else text."""
        grid = {}
        for key, box in self.grid_boxes.items():
            values = [v.strip() for v in box.value.split(",") if v.strip()]
            if not values:
                raise ValueError(f"{key}: type at least one value (comma-separated)")
            grid[key] = [_number(v) for v in values]
        return grid

    # -- LiveView --------------------------------------------------------------------------
    def compute(self, job: Job):
        """Generator: sample the typed grid for ``job``, one setting per step (Stop and a newer
        request are read between two settings); returns the SweepResult, or
        :class:`Stopped` when Stop ended it."""
        from ..experiments.sweeps import SweepResult, sweep

        grid = self.parsed_grid()
        n = parse_int(self.n_box.value, "n", 1, 256)
        seed = self.seed
        length = parse_int(self.length_box.value, "new tokens", 1, 512)
        prompt = self.prompt_box.value
        if prompt == str(self._given_prompt):
            prompt = self._given_prompt
        keys = list(grid)
        settings = list(itertools.product(*grid.values()))
        self.progress.max, self.progress.value = len(settings), 0
        t0 = time.perf_counter()
        samples, metrics = [], []
        for done, values in enumerate(settings):
            self.status.value = message(
                f"sampling setting {done + 1} of {len(settings)} (x {n} samples)… "
                "Stop keeps the last finished sweep", "info"
            )  # fmt: skip
            yield  # Stop or a newer request lands here, between two settings
            if job.cancelled.is_set():
                if not job.stopped:
                    raise Cancelled
                return Stopped(done, len(settings))
            one = sweep(
                self.lm, prompt, {k: [v] for k, v in zip(keys, values, strict=True)}, n=n,
                seed=seed, max_new_tokens=length, chat=self.chat_box.value, **self.config,
            )  # fmt: skip
            samples.append(one.samples)
            metrics.append(one.metrics)
            self.progress.value = done + 1
        if job.cancelled.is_set() and not job.stopped:
            raise Cancelled
        return SweepResult(
            samples=pd.concat(samples, ignore_index=True),
            metrics=pd.concat(metrics, ignore_index=True),
            grid=grid, seconds=time.perf_counter() - t0, n=n,
        )  # fmt: skip

    def render(self, result) -> None:
        """Show ``result``, a finished sweep (or, after Stop, say how far it got and keep
        the last)."""
        if isinstance(result, Stopped):
            kept = "the last finished sweep is still shown" if self.result is not None else (
                "nothing finished yet"
            )  # fmt: skip
            self.status.value = message(
                f"stopped after {result.done} of {result.total} settings; {kept}", "warn"
            )
            return
        self.result = result
        self.status.value = message(
            f"{len(result.metrics)} settings x {result.n} samples in {result.seconds:.1f} s", "ok"
        )
        self.plot_png = show_figure(self.plot_image, sweep_metrics(result), dpi=DPI)
        self.metrics_view.value = frame_html(result.metrics)
        keys = list(result.grid)
        labels = [
            ", ".join(f"{k}={v}" for k, v in zip(keys, row, strict=True))
            for row in itertools.product(*result.grid.values())
        ]
        self.setting_pick.options = labels
        self.setting_pick.value = labels[0]
        self._show_samples()

    def _show_samples(self) -> None:
        if self.result is None or self.setting_pick.value is None:
            return
        i = list(self.setting_pick.options).index(self.setting_pick.value)
        keys = list(self.result.grid)
        setting = self.result.metrics.iloc[i][keys]
        s = self.result.samples
        mask = pd.Series(True, index=s.index)
        for k in keys:
            mask &= s[k] == setting[k]
        shown = s[mask][["sample", "text", "length", "ended_with_eos", "mean_logprob",
                         "repetition"]]  # fmt: skip
        self.samples_view.value = frame_html(shown).replace(
            "<table", f'<table title="{html.escape(self.setting_pick.value)}"', 1
        )


def _number(text: str):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    if text in ("True", "False"):
        return text == "True"
    return text
