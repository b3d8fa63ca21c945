"""Views of what happens inside the model: the logit lens with the attention of each
generated token (:class:`LensView`), and a sampling sweep (:class:`SweepView`).

:class:`LensView` generates from a prompt (or takes a finished run or result) and shows,
in one tab, each layer's top guess for every generated token (the logit lens), and in the
other, for the token picked with the slider, every head's attention and one head's weights
over the text. :class:`SweepView` samples ``n`` continuations under every combination of
the values typed for each setting and shows the metrics against the grid, the metrics
table and the samples.

(Not run as a test: it shows a widget panel, drawn by a Jupyter front end (tests/test_widgets.py
and make browser run the panels).)

>>> LensView(genlab.load("demo"), "What is the capital of France?", chat=True)  # doctest: +SKIP
>>> SweepView(genlab.load("demo"), "Once upon a time", n=8)                     # doctest: +SKIP
"""

from __future__ import annotations

import html
import itertools
from typing import Any

import ipywidgets as widgets
import pandas as pd

from ..engine import Run
from ..inside import attention, logit_lens
from ..plots.inside import attention_heatmap, focused_head, lens_heatmap, sweep_metrics
from .base import FOCUS_CSS, Panel, button, error_text, figure_image, parse_int, scroll_box
from .render import figure_png, frame_html, message, png_html, text_block, token_spans

_WIDE = {"description_width": "initial"}

#: figures are drawn at 100 dpi: a 10-inch figure is 1000 px wide, text >= 7 pt is >= 9 px
DPI = 100


def _png(fig) -> bytes:
    return figure_png(fig, dpi=DPI)


def _image(png: bytes, image: widgets.Image) -> None:
    """Show ``png`` in ``image`` at its native size (hidden while there is none)."""
    from .render import png_size

    image.value = png
    width, height = png_size(png)
    image.layout.display = None if png else "none"
    image.layout.width, image.layout.height = (f"{width}px", f"{height}px") if png else (None, None)
    image.layout.max_width = "none"


class LensView(Panel):
    """The logit lens and the attention of a generation (see the module docstring).

    source: an :class:`~genlab.lm.LM` (with ``prompt``, ``chat`` and generation settings,
    greedy and 12 new tokens unless given), or a finished Run / GenerationResult.

    seed: the seed of the generation; top_k: tokens listed per (layer, step).

    For code and tests: ``lens`` (a :class:`~genlab.inside.Lens`), ``attention`` (the
    :class:`~genlab.inside.Attention` of the selected step), ``select(step, layer=None,
    head=None)``, ``generate(prompt)``, ``error`` (the last failure, None after success).

    (Not run as a test: it shows a widget panel, drawn by a Jupyter front end
    (tests/test_widgets.py and make browser run the panels).)

    >>> LensView(lm, "What is the capital of France?", chat=True)   # doctest: +SKIP
    """

    def __init__(self, source: Any, prompt: Any = "What is the capital of France?", *,
                 chat: bool = False, seed: int | None = 0, top_k: int = 5,
                 **config: Any) -> None:  # fmt: skip
        from ..lm import LM, GenerationResult

        self.lm = source if isinstance(source, LM) else None
        self.chat, self.seed, self.top_k = chat, seed, top_k
        config.setdefault("max_new_tokens", 12)
        self.config = config
        self.error: str | None = None
        self.lens = None
        self.attention = None
        self.source = None
        self.prompt_box = widgets.Text(value=str(prompt) if self.lm else "", description="prompt",
                                       layout=widgets.Layout(width="60%"))  # fmt: skip
        self.go = button("Generate", button_style="primary")
        self._given_prompt = prompt  # ids or messages, used while the box shows them
        self.go.on_click(lambda _: self.generate(self._prompt()))
        self.status = widgets.HTML()
        self.text_view = widgets.HTML()
        self.text_view.add_class("genlab-result")
        self.lens_image = figure_image()
        self.lens_png = self.attention_png = b""
        self.lens_table = widgets.HTML()
        self.step_slider = widgets.IntSlider(description="step", min=0, max=0,
                                             continuous_update=False)  # fmt: skip
        self.layer_slider = widgets.IntSlider(description="layer", min=1, max=1,
                                              continuous_update=False)  # fmt: skip
        self.head_slider = widgets.IntSlider(description="head", min=0, max=0,
                                             continuous_update=False)  # fmt: skip
        self.auto_head = widgets.Checkbox(value=True, description="most focused head",
                                          indent=False)  # fmt: skip
        self.attention_image = figure_image()
        self.attention_table = widgets.HTML()
        for w in (self.step_slider, self.layer_slider, self.head_slider, self.auto_head):
            w.observe(lambda _: self._on_controls(), names="value")
        self._quiet = False
        lens_tab = widgets.VBox([scroll_box(self.lens_image), self.lens_table])
        att_tab = widgets.VBox([
            widgets.HBox([self.layer_slider, self.head_slider, self.auto_head]),
            scroll_box(self.attention_image), self.attention_table,
        ])  # fmt: skip
        self.tabs = widgets.Tab(children=[lens_tab, att_tab])
        self.tabs.set_title(0, "Logit lens")
        self.tabs.set_title(1, "Attention")
        top = [widgets.HBox([self.prompt_box, self.go])] if self.lm is not None else []
        super().__init__(
            [widgets.HTML(FOCUS_CSS), *top, self.status, self.text_view, self.step_slider,
             self.tabs]
        )  # fmt: skip
        self.add_class("genlab-lens-view")
        self.add_class("genlab-panel")
        if isinstance(source, (Run, GenerationResult)):
            self._show(source)
        elif self.lm is not None:
            self.generate(prompt)
        else:
            raise TypeError(
                f"source must be an LM, a Run or a GenerationResult, got {type(source).__name__}"
            )

    # -- actions ---------------------------------------------------------------------------
    def _prompt(self):
        value = self.prompt_box.value
        return self._given_prompt if value == str(self._given_prompt) else value

    def generate(self, prompt: Any) -> None:
        """Generate from ``prompt`` with the view's settings and show it."""
        if self.lm is None:
            raise ValueError("this view shows a given run: there is no LM to generate with")
        if isinstance(prompt, str) and not prompt.strip() and not self.chat:
            self.show_error(ValueError("prompt is empty: type some text to continue"))
            return
        self.status.value = message("generating…")
        try:
            res = self.lm.generate(prompt, chat=self.chat, seed=self.seed, **self.config)
        except Exception as exc:  # shown in the view; the last result stays
            self.show_error(exc)
            return
        self._show(res)

    def _show(self, source) -> None:
        try:
            lens = logit_lens(source, top_k=self.top_k)
        except Exception as exc:
            self.show_error(exc)
            return
        self.source, self.lens, self.error = source, lens, None
        n = len(lens.steps)
        self._quiet = True
        self.step_slider.max = max(0, n - 1)
        self.step_slider.value = min(self.step_slider.value, n - 1)
        self._quiet = False
        probs = lens.target_prob[-1].tolist()
        from ..tokens import running_pieces

        known = [t for t in lens.targets if t is not None]
        pieces = running_pieces(lens.tokenizer, known) if lens.tokenizer is not None else []
        texts = [t for t, _ in pieces] or lens.target_tokens
        tips = [
            f"{tok}  p={p:.3f} at the last layer" + (f"\n{tip}" if tip else "")
            for tok, p, (_, tip) in zip(
                lens.target_tokens, probs, pieces or [("", "")] * len(probs), strict=False
            )
        ]
        self.text_view.value = text_block(token_spans(texts, probs[: len(texts)], tips))
        self.status.value = message(
            f"{n} generated tokens, {lens.num_layers} layers: pick a step for its layers and "
            "its attention", "info"
        )  # fmt: skip
        self._update_step()

    def select(self, step: int, layer: int | None = None, head: int | None = None) -> None:
        """Show generated step ``step`` (and, for the attention, ``layer``/``head``; None:
        the head most focused on one token)."""
        self._quiet = True
        self.step_slider.value = step
        self.auto_head.value = layer is None or head is None
        if layer is not None and head is not None:
            self.layer_slider.value, self.head_slider.value = layer, head
        self._quiet = False
        self._update_step()

    def __repr__(self) -> str:
        steps = len(self.lens.steps) if self.lens is not None else 0
        name = self.lm.name if self.lm is not None else None
        return f"LensView(lm={name!r}, steps={steps})"

    def static_html(self) -> str:
        """The view's last state as plain HTML (what a notebook shows without a kernel)."""
        step = self.step_slider.value
        return (
            f'<div class="genlab-static"><b>genlab logit lens</b>{self.status.value}'
            f"{self.text_view.value}<div><b>Logit lens</b> (step {step})</div>"
            f"{png_html(self.lens_png, 'logit lens')}{self.lens_table.value}"
            f"<div><b>Attention</b> (step {step})</div>"
            f"{png_html(self.attention_png, 'attention')}{self.attention_table.value}</div>"
        )

    def _on_controls(self) -> None:
        if not self._quiet and self.lens is not None:
            self._update_step()

    def _update_step(self) -> None:
        step = self.step_slider.value
        self.lens_png = _png(lens_heatmap(self.lens, highlight=self.lens.steps[step]))
        _image(self.lens_png, self.lens_image)
        table = self.lens.table(top_k=3)
        rows = table[table.step == self.lens.steps[step]].sort_values("layer", ascending=False)
        self.lens_table.value = (
            f"<b>step {step}</b>: each layer's top 3 (the last layer is the model's output)"
            + frame_html(rows.drop(columns=["step", "position"]))
        )
        try:
            att = attention(self.source, step=step)
        except Exception as exc:  # e.g. a model that cannot return attention weights
            self.attention, self.error = None, error_text(exc)
            self.attention_table.value = message(self.error, "error")
            return
        self.attention = att
        layers, heads, _ = att.weights.shape
        self._quiet = True
        self.layer_slider.max, self.head_slider.max = layers, heads - 1
        self._quiet = False
        if self.auto_head.value:  # the sliders follow the head shown
            layer, head = focused_head(att)
            self._quiet = True
            self.layer_slider.value, self.head_slider.value = layer, head
            self._quiet = False
        else:
            layer, head = self.layer_slider.value, self.head_slider.value
        fig = attention_heatmap(att, layer=layer, head=head)
        self.attention_png = _png(fig)
        _image(self.attention_png, self.attention_image)
        summary = att.summary()
        summary = summary[summary.max_position != 0]  # the attention sink aside
        summary = summary.sort_values("max_weight", ascending=False).head(12)
        self.attention_table.value = (
            "<b>the 12 most focused heads</b> (largest single weight), leaving out those that "
            "rest on the first token (the attention sink)" + frame_html(summary)
        )


class SweepView(Panel):
    """A sampling sweep over a grid typed as comma-separated values per setting (see the
    module docstring).

    lm: the LM to sample from; prompt: the prompt (text, messages or ids); grid: the
    settings and their values (default temperature x top_p); n: samples per setting;
    seed, max_new_tokens: as in :func:`genlab.sweep`; chat: apply the chat template;
    run: start the sweep at once.

    For code and tests: ``grid_boxes`` (setting -> Text), ``run_sweep()``, ``result`` (the
    :class:`~genlab.sweeps.SweepResult`), ``error``.

    (Not run as a test: it shows a widget panel, drawn by a Jupyter front end
    (tests/test_widgets.py and make browser run the panels).)

    >>> SweepView(lm, "Describe the sea.", {"temperature": [0.5, 1.0]}, n=8)  # doctest: +SKIP
    """

    def __init__(self, lm, prompt: Any = "Once upon a time", grid: dict | None = None, *,
                 n: int = 8, seed: int = 0, max_new_tokens: int = 20, chat: bool = False,
                 run: bool = True, **config: Any) -> None:  # fmt: skip
        self.lm, self.chat, self.config = lm, chat, config
        self._given_prompt = prompt  # ids or messages, used while the box shows them
        grid = grid or {"temperature": [0.5, 1.0, 1.5], "top_p": [0.8, 1.0]}
        self.result = None
        self.error: str | None = None
        self.prompt_box = widgets.Text(value=str(prompt), description="prompt",
                                       layout=widgets.Layout(width="60%"))  # fmt: skip
        self.grid_boxes = {
            key: widgets.Text(value=", ".join(str(v) for v in values), description=key, style=_WIDE)
            for key, values in grid.items()
        }
        small = widgets.Layout(width="180px")
        self.n_box = widgets.Text(value=str(n), description="n", layout=small)
        self.seed_box = widgets.Text(value=str(seed), description="seed", layout=small)
        self.length_box = widgets.Text(value=str(max_new_tokens), description="new tokens",
                                       style=_WIDE, layout=small)  # fmt: skip
        self.go = button("Run sweep", button_style="primary")
        self.go.on_click(lambda _: self.run_sweep())
        self.stop_button = button("Stop", button_style="warning", disabled=True)
        self.stop_button.on_click(lambda _: self.stop())
        self._stop = False
        self.progress = widgets.IntProgress(value=0, min=0, max=1, description="settings")
        self.status = widgets.HTML()
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
        controls = widgets.VBox([
            self.prompt_box,
            widgets.HBox(list(self.grid_boxes.values()),
                         layout=widgets.Layout(flex_flow="row wrap")),
            widgets.HBox([self.n_box, self.seed_box, self.length_box],
                         layout=widgets.Layout(flex_flow="row wrap")),
            widgets.HBox([self.go, self.stop_button, self.progress]),
        ])  # fmt: skip
        super().__init__([widgets.HTML(FOCUS_CSS), controls, self.status, tabs])
        self.add_class("genlab-sweep-view")
        self.add_class("genlab-panel")
        if run:
            self.run_sweep()

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

    def stop(self) -> None:
        """Stop a running sweep after the setting it is sampling (the view keeps the
        last finished sweep)."""
        self._stop = True

    def parsed_grid(self) -> dict[str, list]:
        """The grid typed in the boxes: numbers where they parse, else text."""
        grid = {}
        for key, box in self.grid_boxes.items():
            values = [v.strip() for v in box.value.split(",") if v.strip()]
            if not values:
                raise ValueError(f"{key}: type at least one value (comma-separated)")
            grid[key] = [_number(v) for v in values]
        return grid

    def run_sweep(self) -> None:
        """Run the sweep with the values in the controls and show it."""
        from ..sweeps import sweep

        def progress(done, _):
            self.progress.value = done
            if self._stop:
                raise _Stopped

        try:
            grid = self.parsed_grid()
            n = parse_int(self.n_box.value, "n", 1, 256)
            seed = parse_int(self.seed_box.value, "seed", 0, 2**63 - 1)
            length = parse_int(self.length_box.value, "new tokens", 1, 512)
            total = 1
            for values in grid.values():
                total *= len(values)
            self.progress.max, self.progress.value = total, 0
            self.status.value = message(f"sampling {total} settings x {n}…")
            prompt = self.prompt_box.value
            if prompt == str(self._given_prompt):
                prompt = self._given_prompt
            self._stop = False
            self.stop_button.disabled = False
            result = sweep(
                self.lm, prompt, grid, n=n, seed=seed, max_new_tokens=length, chat=self.chat,
                progress=progress, **self.config,
            )  # fmt: skip
        except _Stopped:
            self.status.value = message(
                f"stopped after {self.progress.value} of {self.progress.max} settings; "
                "the last finished sweep is still shown", "warn"
            )  # fmt: skip
            return
        except Exception as exc:  # shown in the view; the last result stays
            self.show_error(exc)
            return
        finally:
            self.stop_button.disabled = True
        self.result, self.error = result, None
        self.status.value = message(
            f"{len(result.metrics)} settings x {result.n} samples in {result.seconds:.1f} s", "ok"
        )
        self.plot_png = _png(sweep_metrics(result))
        _image(self.plot_png, self.plot_image)
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


class _Stopped(Exception):
    """Raised from the sweep's progress callback when Stop was pressed."""


def _number(text: str):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    if text in ("True", "False"):
        return text == "True"
    return text
