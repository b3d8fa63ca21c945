"""InsideView: steer the model from inside a layer and see which tokens each generated
token came from.

:class:`InsideView` generates from a prompt with a steering vector added at a hook point
inside the model (a layer and a point picked in the panel; the vector is the difference of
mean activations between the positive and negative prompts, :func:`genlab.steering_vector`),
at the strength of a slider, and shows the generated text, its attribution heatmap
(:func:`genlab.attribute`: which earlier tokens raised or lowered each token) and the
sources that mattered most. It is a :class:`~genlab.widgets.live.LiveView`: the generation
runs token by token on the panels' scheduler, so Stop ends it (the view shows the tokens
made so far), and every control is a plain widget reached with the keyboard (Tab, the
arrow keys on the sliders).

(Not run as a test: it shows a widget panel, drawn by a Jupyter front end
(tests/test_inside_view.py runs it).)

>>> InsideView(genlab.load("demo"), "My weekend was", layer=12, strength=0.3)  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets

from ..config import FieldSpec
from ..inside.attribution import METHODS, attribute
from ..inside.steering import steer, steering_vector
from ..plots.steering import attribution_heatmap
from .base import FOCUS_CSS, figure_image, parse_number, scroll_box, title_html
from .fields import make_control
from .lens import _image, _png
from .live import Cancelled, LiveView, initial_config, start_run
from .render import frame_html, message, png_html, text_block
from .worker import Job

#: the residual-stream points a steering vector can be added at
POINTS = ("hook_resid_pre", "hook_resid_mid", "hook_resid_post")

#: what the panel's words mean, in its tooltips and under its table (issue 50: a class
#: met hook_resid_post, "vector length", gradient_x_input and "score" unexplained)
POINT_HELP = (
    "where in the layer the vector is added to the residual stream: hook_resid_pre before "
    "the layer, hook_resid_mid between its attention and its MLP, hook_resid_post after it"
)
METHOD_HELP = (
    "gradient_x_input: the gradient of the token's log-probability times each earlier "
    "token's embedding (one backward pass); integrated_gradients: the gradient averaged "
    "from a zero embedding to the real one (8 passes per token, slower, more faithful)"
)
READING_HELP = (
    "Reading it: vector length is the size of the steering vector (the mean difference of "
    "the positive and negative prompts' last-token activations at the point); strength 1 "
    "adds all of it. A source's score is how much that earlier token raised (positive) or lowered "
    "(negative) the generated token's log-probability; the strongest source is the one of "
    "largest size either way (|score|)."
)

#: the strength of the steering, as the panels' other number fields are edited
STRENGTH = FieldSpec(
    name="strength",
    group="logits",
    kind="float",
    default=0.0,
    min=-1.0,
    max=1.0,
    step=0.05,
    help="how much of the steering vector is added at the hook point: 0 none, 1 the whole "
    "vector, negative the opposite way",
)


def _prompts(text: str) -> list[str]:
    """Prompts typed in one box, separated by ``|``."""
    return [p.strip() for p in text.split("|") if p.strip()]


class InsideView(LiveView):
    """Steering and attribution of a generation (see the module docstring).

    lm: an :class:`~genlab.lm.LM` on a built-in decoder; prompt: the text to continue;
    layer, point: where the vector is added (``blocks.{layer}.{point}``, default the
    middle layer's ``hook_resid_post``); positive, negative: the contrast prompts (several
    separated by ``|``); strength: the slider's start; method: the attribution method
    (``"gradient_x_input"`` or ``"integrated_gradients"``); chat, seed: as in the other
    panels; debounce: seconds of quiet before a scheduled generation; config: generation
    settings (greedy and 12 new tokens unless given).

    For code and tests: ``vector`` (the steering vector in use), ``attribution`` (the
    :class:`~genlab.inside.attribution.Attribution` shown), ``text`` (the generated text),
    ``generate(prompt)``, plus LiveView's ``update/stop/wait/error/version``.

    (Not run as a test: it shows a widget panel (tests/test_inside_view.py runs it).)

    >>> InsideView(lm, "Today was", positive="I love it", negative="I hate it")  # doctest: +SKIP
    """

    def __init__(self, lm: Any, prompt: str = "My weekend was", *, layer: int | None = None,
                 point: str = "hook_resid_post",
                 positive: str = "I love this, it is wonderful | What a happy day",
                 negative: str = "I hate this, it is awful | What a sad day",
                 strength: float = 0.0, method: str = "gradient_x_input", chat: bool = False,
                 seed: int | None = 0, debounce: float = 0.3, **config: Any) -> None:  # fmt: skip
        model = getattr(lm, "model", None)
        if model is None or not hasattr(model, "hook_points"):
            raise ValueError(
                "InsideView needs an LM on one of genlab's built-in decoders (Llama, Qwen2, "
                "GPT-2): they have the hook points inside the layers"
            )
        if point not in POINTS:
            raise ValueError(f"point={point!r}; use one of {', '.join(POINTS)}")
        if method not in METHODS:
            raise ValueError(f"method={method!r}; use one of {', '.join(METHODS)}")
        layers = model.settings.num_layers
        layer = layers // 2 if layer is None else layer
        model.check_hook_point(f"blocks.{layer}.{point}")
        self.lm = lm
        config.setdefault("max_new_tokens", 12)
        self.config = config
        self.vector = None
        self.attribution = None
        self.text = ""
        self.heatmap_png = b""
        self._vectors: dict = {}
        super().__init__(debounce=debounce, auto_update=True, prompt=prompt, chat=chat, seed=seed)
        self.layer_slider = widgets.IntSlider(
            value=layer, min=0, max=layers - 1, description="layer", continuous_update=False
        )
        self.point_box = widgets.Dropdown(
            options=list(POINTS), value=point, description="point", tooltip=POINT_HELP
        )
        # the panels' checked number box (a typed 1e9 or "abc" is refused in words beside
        # it, never clamped or reverted in silence) after the slider
        self.strength_box = make_control(STRENGTH, float(strength))
        parse_number(strength, "strength", low=STRENGTH.min, high=STRENGTH.max)
        self.strength_slider = self.strength_box.slider
        self._strength = float(strength)
        self.positive_box = widgets.Text(value=positive, description="positive",
                                         continuous_update=False,
                                         layout=widgets.Layout(width="auto"))  # fmt: skip
        self.negative_box = widgets.Text(value=negative, description="negative",
                                         continuous_update=False,
                                         layout=widgets.Layout(width="auto"))  # fmt: skip
        self.method_box = widgets.Dropdown(options=list(METHODS), value=method,
                                           description="attribution",
                                           tooltip=METHOD_HELP)  # fmt: skip
        for w in (self.layer_slider, self.point_box, self.positive_box, self.negative_box,
                  self.method_box):  # fmt: skip
            w.observe(self.on_input, names="value")
        for w in self.strength_box.watched():
            w.observe(self._strength_typed, names="value")
        self.text_view = widgets.HTML()
        self.text_view.add_class("genlab-result")
        self.heatmap = figure_image()
        self.sources = widgets.HTML()
        wrap = widgets.Layout(flex_flow="row wrap")
        self.children = [
            widgets.HTML(FOCUS_CSS),
            title_html("inside: steering and attribution", lm),
            self.prompt_box,
            widgets.HBox([self.chat_box, self.seed_box], layout=wrap),
            widgets.HBox([self.layer_slider, self.point_box], layout=wrap),
            self.strength_box.box,
            self.positive_box,
            self.negative_box,
            widgets.HBox([self.method_box], layout=wrap),
            self.controls_row(),
            self.text_view,
            scroll_box(self.heatmap),
            self.sources,
            widgets.HTML(message(READING_HELP)),
        ]  # fmt: skip
        self.add_class("genlab-inside-view")
        self.add_class("genlab-panel")
        self.update(sync=True)

    # -- actions ---------------------------------------------------------------------------
    @property
    def point_name(self) -> str:
        """The hook point the vector is added at, ``blocks.{layer}.{point}``."""
        return f"blocks.{self.layer_slider.value}.{self.point_box.value}"

    def generate(self, prompt: str) -> None:
        """Generate from ``prompt`` with the view's settings, wait for it and show it."""
        auto, self.auto_box.value = self.auto_box.value, False  # no second, scheduled run
        self.prompt_box.value = str(prompt)
        self.auto_box.value = auto
        self.update(sync=True)

    def _strength_typed(self, change=None) -> None:
        """The strength box changed: a number in range is taken (and a run scheduled); a
        refused one is said beside the box, and the last good strength stays."""
        try:
            value = float(
                parse_number(self.strength_box.read(), "strength", low=STRENGTH.min,
                             high=STRENGTH.max)
            )  # fmt: skip
        except ValueError as err:
            self.strength_box.set_status(str(err), "error")
            return
        self.strength_box.set_status()
        self.strength_box.accepted(value)
        self._strength = value
        self.on_input(change)

    def _vector(self):
        pos, neg = _prompts(self.positive_box.value), _prompts(self.negative_box.value)
        key = (tuple(pos), tuple(neg), self.point_name)
        if key not in self._vectors:
            self._vectors[key] = steering_vector(
                self.lm, pos, neg, layer=self.layer_slider.value, point=self.point_name
            )
        return self._vectors[key]

    # -- LiveView --------------------------------------------------------------------------
    def compute(self, job: Job):
        """Generator for ``job``: the steering vector, the steered generation a token per
        step (Stop ends it), then the attribution of what was generated; returns (result,
        vector, attribution, strength, point, stopped)."""
        vector = self._vector()
        strength, point = self._strength, self.point_name
        config = initial_config(self.lm, None, **self.config)
        run = start_run(
            self.lm, self.prompt_box.value, chat=self.chat_box.value, seed=self.seed,
            config=config,
        )  # fmt: skip
        off = run.add_hook(point, steer(vector, strength))
        try:
            run = yield from self.drive(run, job)
        finally:
            off()
        if run.step_index == 0:
            raise ValueError("stopped before the first token: nothing to attribute")
        result = run.result()
        yield  # a newer request may land before the gradient passes
        if job.cancelled.is_set() and not job.stopped:
            raise Cancelled
        attribution = attribute(result, method=self.method_box.value, n_steps=8)
        return result, vector, attribution, strength, point, run.finished_by == "interrupted"

    def render(self, data) -> None:
        """Show ``data`` (what :meth:`compute` returns): the text, the heatmap, the sources."""
        result, vector, attribution, strength, point, stopped = data
        self.result, self.vector, self.attribution, self.error = result, vector, attribution, None
        self.text = result.text
        self.text_view.value = text_block(_escape(result.text), prompt=self.prompt_box.value)
        self.heatmap_png = _png(attribution_heatmap(attribution))
        _image(self.heatmap_png, self.heatmap)
        table = attribution.table
        # the strongest source pushes either way: the largest |score| (the largest signed
        # score could be a source of 0.006 beside one of -0.9)
        strongest = table.score.abs().groupby(table.step).idxmax()
        top = table.loc[strongest][["step", "target", "token", "score"]]
        top = top.rename(columns={"token": "top source"}).round({"score": 3})
        self.sources.value = (
            "<b>each generated token's strongest source</b> (largest |score|)"
            + frame_html(top.head(20))
        )
        note = "stopped: the tokens made so far; " if stopped else ""
        self.status.value = message(
            f"{note}steering at {point} with strength {strength:g} (vector length "
            f"{float(vector.norm()):.1f}); attribution: {attribution.method.replace('_', ' ')}",
            "warn" if stopped else "info",
        )

    def static_html(self) -> str:
        """The view's last state as plain HTML (what a notebook shows without a kernel)."""
        return (
            f'<div class="genlab-static"><b>genlab inside: steering and attribution</b>'
            f"{self.status.value}{self.text_view.value}"
            f"{png_html(self.heatmap_png, 'attribution heatmap')}{self.sources.value}</div>"
        )

    def __repr__(self) -> str:
        return (
            f"InsideView(lm={self.lm.name!r}, point={self.point_name!r}, "
            f"strength={self._strength:g})"
        )


def _escape(text: str) -> str:
    import html

    return html.escape(text)


__all__ = ["InsideView"]
