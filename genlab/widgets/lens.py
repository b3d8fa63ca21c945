"""LensView: what happens inside the model while it generates -- the logit lens with the
attention of each generated token.

:class:`LensView` generates from a prompt (or takes a finished run or result) and shows,
in one tab, each layer's top guess for every generated token (the logit lens), and in the
other, for the token picked with the slider, every head's attention and one head's weights
over the text. It is a :class:`~genlab.widgets.live.LiveView`: the generation runs on the
panels' one scheduler, token by token, so Stop ends it (the lens shows the tokens made so
far) and the panel shows that it is busy. The sampling sweep panel is
:class:`genlab.widgets.sweep.SweepView`.

(Not run as a test: it shows a widget panel, drawn by a Jupyter front end (tests/test_widgets.py
and make browser run the panels).)

>>> LensView(genlab.load("demo"), "What is the capital of France?", chat=True)  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets

from ..inside.lens import attention, logit_lens
from ..plots.inside import attention_heatmap, focused_head, lens_heatmap
from ..run.engine import Run
from .base import FOCUS_CSS, error_text, figure_image, scroll_box, title_html
from .branching import (
    BranchPicker,
    branch_html,
    continue_with,
    result_alternatives,
    result_text_html,
    stepwise_trace,
)
from .live import Cancelled, LiveView, initial_config, start_run
from .render import figure_png, frame_html, message, png_html, text_block, token_spans
from .worker import Job

#: figures are drawn at 100 dpi: a 10-inch figure is 1000 px wide, text >= 7 pt is >= 9 px
DPI = 100


def _png(fig) -> bytes:
    return figure_png(fig, dpi=DPI)


def _image(png: bytes, image: widgets.Image) -> None:
    """Show ``png`` in ``image`` at its native size, scaled down whole to the panel's
    width when that is narrower (as :func:`~genlab.widgets.render.show_figure`: the last
    token's column and the colour bar were cut at 768 px); hidden while there is none."""
    from .render import png_size

    image.value = png
    width, _ = png_size(png)
    image.layout.display = None if png else "none"
    image.layout.width, image.layout.height = (f"{width}px", "auto") if png else (None, None)
    image.layout.max_width = "100%"
    image.layout.object_fit = "contain"


def focused_heads(att, n: int = 12):
    """The ``n`` heads that put the largest weight on one token other than the first and
    the query itself (``focus``), most focused first: the criterion of
    :func:`~genlab.plots.inside.focused_head`, so that its choice is the first row."""
    w = att.weights
    rest = w[:, :, 1:-1] if w.shape[-1] > 2 else w
    focus = rest.amax(-1)
    summary = att.summary()
    summary.insert(2, "focus", [float(focus[r.layer - 1, r.head]) for r in summary.itertuples()])
    return summary.sort_values("focus", ascending=False, kind="stable").head(n)


class LensView(LiveView):
    """The logit lens and the attention of a generation (see the module docstring).

    source: an :class:`~genlab.lm.LM` (with ``prompt``, ``chat`` and generation settings,
    greedy and 12 new tokens unless given), or a finished Run / GenerationResult.

    seed: the seed of the generation; top_k: tokens listed per (layer, step); debounce:
    seconds of quiet before a scheduled generation (with auto-update ticked).

    For code and tests: ``lens`` (a :class:`~genlab.inside.lens.Lens`), ``attention`` (the
    :class:`~genlab.inside.lens.Attention` of the selected step), ``select(step, layer=None,
    head=None)``, ``generate(prompt)`` (generates and waits), ``error`` (the last failure,
    None after success), plus LiveView's ``update/stop/wait/version``.

    (Not run as a test: it shows a widget panel, drawn by a Jupyter front end
    (tests/test_widgets.py and make browser run the panels).)

    >>> LensView(lm, "What is the capital of France?", chat=True)   # doctest: +SKIP
    """

    def __init__(self, source: Any, prompt: Any = "What is the capital of France?", *,
                 chat: bool = False, seed: int | None = 0, top_k: int = 5,
                 debounce: float = 0.3, **config: Any) -> None:  # fmt: skip
        from ..lm import LM, GenerationResult

        self.lm = source if isinstance(source, LM) else None
        self.top_k = top_k
        config.setdefault("max_new_tokens", 12)
        self.config = config
        self.lens = None
        self.attention = None
        self.source = None
        super().__init__(debounce=debounce, auto_update=False,
                         prompt=str(prompt) if self.lm else "", chat=chat, seed=seed)  # fmt: skip
        self._given_prompt = prompt  # ids or messages, used while the box shows them
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
        for w in (self.step_slider, self.auto_head):
            w.observe(lambda _: self._on_controls(), names="value")
        for w in (self.layer_slider, self.head_slider):  # choosing a head: no longer "auto"
            w.observe(lambda _: self._chose_head(), names="value")
        self._quiet = False
        #: click to branch: an alternative of the chosen step continues the text from
        #: there, in a run of its own (this one stays); not for a given run (no LM)
        self.picker = BranchPicker(self, self.alternatives, self._branch, at=self.step_slider,
                                   what="step")  # fmt: skip
        self.branches = self.picker.branches
        lens_tab = widgets.VBox([scroll_box(self.lens_image), self.lens_table])
        att_tab = widgets.VBox([
            widgets.HBox([self.layer_slider, self.head_slider, self.auto_head],
                         layout=widgets.Layout(flex_flow="row wrap")),
            scroll_box(self.attention_image), self.attention_table,
        ])  # fmt: skip
        self.tabs = widgets.Tab(children=[lens_tab, att_tab])
        self.tabs.set_title(0, "Logit lens")
        self.tabs.set_title(1, "Attention")
        if self.lm is not None:
            top = [
                title_html("logit lens", self.lm),
                self.prompt_box,
                widgets.HBox([self.chat_box, self.seed_box],
                             layout=widgets.Layout(flex_flow="row wrap")),
                self.controls_row(),
            ]  # fmt: skip
        else:
            top = [title_html("logit lens", None), self.status]
        self.children = [
            widgets.HTML(FOCUS_CSS),
            *top,
            self.text_view,
            self.step_slider,
            self.picker.widget,
            self.tabs,
        ]
        self.add_class("genlab-lens-view")
        self.add_class("genlab-panel")
        if isinstance(source, (Run, GenerationResult)):
            try:
                self.render((source, logit_lens(source, top_k=top_k)))
            except Exception as exc:  # shown in the view
                self.show_error(exc)
        elif self.lm is not None:
            self.update(sync=True)
        else:
            raise TypeError(
                f"source must be an LM, a Run or a GenerationResult, got {type(source).__name__}"
            )

    # -- actions ---------------------------------------------------------------------------
    def _prompt(self):
        value = self.prompt_box.value
        return self._given_prompt if value == str(self._given_prompt) else value

    def generate(self, prompt: Any) -> None:
        """Generate from ``prompt`` with the view's settings, wait for it and show it
        (a failure is shown in the view; the last result stays)."""
        if self.lm is None:
            raise ValueError("this view shows a given run: there is no LM to generate with")
        self._given_prompt = prompt
        auto, self.auto_box.value = self.auto_box.value, False  # no second, scheduled run
        self.prompt_box.value = str(prompt)
        self.auto_box.value = auto
        self.update(sync=True)

    # -- LiveView --------------------------------------------------------------------------
    def compute(self, job: Job):
        """Generator: generate for ``job`` from the typed prompt, a token per step (Stop
        ends it: the lens reads the tokens made so far), then read the lens; returns
        (result, lens)."""
        config = initial_config(self.lm, None, **self.config)
        run = start_run(
            self.lm, self._prompt(), chat=self.chat_box.value, seed=self.seed, config=config
        )
        run = yield from self.drive(run, job)
        if run.step_index == 0:
            raise ValueError("stopped before the first token: nothing to read the lens of")
        result = run.result()
        yield  # a newer request may land before the lens pass
        if job.cancelled.is_set() and not job.stopped:
            raise Cancelled
        return result, logit_lens(result, top_k=self.top_k)

    def render(self, data) -> None:
        """Show ``data``, a ``(source, lens)`` pair: the coloured text, the step slider,
        the lens and the attention of the selected step."""
        source, lens = data
        self.source, self.lens, self.error = source, lens, None
        self.result = source
        n = len(lens.steps)
        self._quiet = True
        self.step_slider.max = max(0, n - 1)
        self.step_slider.value = min(self.step_slider.value, n - 1)
        self._quiet = False
        probs = lens.target_prob[-1].tolist()
        from ..text.tokens import running_pieces

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
        run = getattr(source, "run", source)
        stopped = run.finished_by == "interrupted"
        note = "stopped: the lens reads the tokens made so far; " if stopped else ""
        self.status.value = message(
            f"{note}{n} generated tokens, {lens.num_layers} layers: pick a step for its "
            "layers and its attention", "warn" if stopped else "info"
        )  # fmt: skip
        self._update_step()
        self.picker.reset(n)

    # -- click to branch ------------------------------------------------------------------
    def alternatives(self, step: int) -> list[tuple[int, str, float]]:
        """(token id, token, probability) of the tokens that could have come at generated
        ``step`` instead (the model's output: the last layer), best first; none for a
        given run (no LM to continue with)."""
        if self.lm is None:
            return []
        return result_alternatives(stepwise_trace(self.source), step)

    def branch(self, step: int, token):
        """Continue from generated ``step`` with ``token`` (an id or a text) instead,
        under the same settings and seed: a run of its own (this one stays). Returns its
        GenerationResult, appended to ``branches``."""
        if self.lm is None or self.source is None:
            raise ValueError("no generation to continue: this view shows a given run")
        run = getattr(self.source, "run", self.source)
        generated = run.sequences[0, run.prompt_length :].tolist()
        if not isinstance(step, int) or not 0 <= step < len(generated):
            raise ValueError(f"step must be a generated step 0-{len(generated) - 1}, got {step!r}")
        branch = continue_with(
            self.lm, self._prompt(), chat=self.chat_box.value, seed=self.seed,
            config=initial_config(self.lm, None, **self.config), kept=generated[:step],
            token=token,
        )  # fmt: skip
        self.branches.append(branch)
        self.picker.add(
            branch_html(len(self.branches), step, "step", result_text_html(branch, step, self.lm))
        )
        return branch

    def _branch(self, step: int, token: int) -> str:
        self.branch(step, token)
        return self.picker.view.value

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
            f"{self.text_view.value}{self.picker.view.value}"
            f"<div><b>Logit lens</b> (step {step})</div>"
            f"{png_html(self.lens_png, 'logit lens')}{self.lens_table.value}"
            f"<div><b>Attention</b> (step {step})</div>"
            f"{png_html(self.attention_png, 'attention')}{self.attention_table.value}</div>"
        )

    def _on_controls(self) -> None:
        if not self._quiet and self.lens is not None:
            self._update_step()

    def _chose_head(self) -> None:
        """A layer or head slider moved by the user: that head is shown, and "most focused
        head" is unticked (it snapped the slider back before)."""
        if self._quiet or self.lens is None:
            return
        if self.auto_head.value:
            self._quiet = True
            self.auto_head.value = False
            self._quiet = False
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
        self.attention_table.value = (
            "<b>the 12 most focused heads</b>: the largest weight on one token other than "
            "the first (the attention sink) and the query itself; the first row is the head "
            "'most focused head' shows" + frame_html(focused_heads(att))
        )
