"""Explorers for two mechanisms: the green-list watermark and beam search.

:class:`WatermarkExplorer` generates with a green-list watermark and shows the text with
green and red tokens, the running z-score (beside the same prompt and seed without the
watermark), and, at a chosen position, the green list: the most likely tokens before and
after the bias. :class:`BeamExplorer` shows the beam tree step by step, the pool of
finished hypotheses and the numbers behind the early stop.

(Not run as a test: it shows a widget panel, drawn by a Jupyter front end (tests/test_widgets.py
and make browser run the panels).)

>>> wm = WatermarkExplorer(genlab.load("demo"), "Write a short poem")    # doctest: +SKIP
>>> wm.detection                                                       # doctest: +SKIP
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as widgets
import pandas as pd
import torch

from ..config import GenerationConfig, SynthIDTextWatermarkingConfig, WatermarkingConfig
from ..run.trace import Tracer
from ..text.tokens import shown
from .base import FOCUS_CSS, figure_image, scroll_box, title_html
from .branching import BranchPicker, branch_html, continue_with, plain_text_html
from .config_panel import ConfigPanel
from .live import LiveView, initial_config, limits_of
from .render import END_MARK, frame_html, message, png_html, show_figure
from .worker import Job

WATERMARK_PROCESSOR = "watermark"  # the KGW processor's stage label
#: the detection threshold (as notebook 05 uses it): z above it reads "watermarked"
Z_THRESHOLD = 4.0


class ScoresBeforeWatermark(Tracer):
    """A Tracer that also keeps, per step, the full scores the watermark processor
    received (row 0, shape (vocab,)): what :func:`genlab.watermark.greenlist_table`
    needs to show the bias before and after."""

    def __init__(self, run, depth: int = 10, stages: bool = True) -> None:
        super().__init__(run, depth=depth, stages=stages)
        self.before: dict[int, torch.Tensor] = {}
        self._last: torch.Tensor | None = None

    def on_logits(self, step: int, logits: torch.Tensor) -> None:
        super().on_logits(step, logits)
        self._last = logits

    def on_stage(self, step: int, name: str, scores: torch.Tensor) -> None:
        if name == WATERMARK_PROCESSOR and self._last is not None:
            self.before[step] = self._last[0].detach().float().cpu().clone()
        super().on_stage(step, name, scores)
        self._last = scores


def generated_colours(sequence, prompt_length: int, config, tokenizer, vocab_size: int):
    """Green/red table (see :func:`genlab.watermark.token_colours`) of the generated tokens
    only: the prompt supplies the context of the first ones but is not scored.

    sequence: (len,) prompt + generated ids. Returns one row per generated token with
    ``position`` counted from the first generated token.
    """
    from ..watermark import scoring_window, token_colours

    context = scoring_window(config) - 1
    start = max(0, prompt_length - context)
    table = token_colours(sequence[start:], config, tokenizer, vocab_size=vocab_size)
    table = table[table.position >= prompt_length - start].copy()
    table["position"] = table.position - (prompt_length - start)
    # the end-of-text token (any special token) as the panels mark it, never <|im_end|>
    special = set(getattr(tokenizer, "all_special_ids", None) or ())
    if special:
        table.loc[table.id.isin(special), "token"] = END_MARK
    return table.reset_index(drop=True)


class Explorer(LiveView):
    """What the two explorers share: a settings panel, the prompt, chat and seed inputs,
    the controls row, the layout and the head of the static view."""

    KIND = "explorer"

    def __init__(self, lm, cfg: GenerationConfig, open_group: str, **live: Any) -> None:
        """``live``: LiveView's debounce, auto_update, prompt, chat and seed."""
        self.lm = lm
        super().__init__(**live)
        self.panel = ConfigPanel(
            cfg,
            tokenizer=lm.tokenizer,
            vocab_size=lm.info.vocab_size,
            limits=limits_of(lm),
            open_group=open_group,
        )
        self.panel.on_change(lambda p, names: self.on_input())

    def _explorer_layout(self, *body: widgets.Widget) -> list[widgets.Widget]:
        return [
            widgets.HTML(FOCUS_CSS),
            title_html(self.KIND, self.lm),
            self.prompt_box,
            widgets.HBox([self.chat_box, self.seed_box]),
            self.controls_row(),
            *body,
        ]

    @property
    def config(self) -> GenerationConfig:
        """The settings of the next run (from the Settings tab)."""
        return self.panel.config

    def _static_head(self) -> str:
        return (
            f"<b>genlab {html.escape(self.KIND)}</b> &middot; {html.escape(str(self.lm.name))}"
            f"<div><i>prompt</i>: {html.escape(str(self.prompt_box.value))}</div>"
            f"{self.status.value}"
        )


class WatermarkExplorer(Explorer):
    """The green-list watermark of one generation (see the module docstring).

    watermarking_config: a :class:`WatermarkingConfig` (default: the reference's
    defaults) or a dict of its fields; other settings as config kwargs (sampling on,
    20 new tokens, unless given). Edit everything in the Settings tab.

    For code and tests: ``result`` / ``baseline`` (GenerationResults with and without the
    watermark), ``colours`` (per generated token: green, running z), ``detection``
    (detector numbers for both), ``greenlist`` (the table at ``position``),
    ``update/wait/error/version``.

    Args:
        lm: a :class:`~genlab.lm.LM` (``genlab.load(...)``); prompt: the text to continue;
        chat: apply the chat template; seed: the sampling seed;
        auto_update: generate again after every change; debounce: seconds to wait for more
        changes first; run: generate at once (False: wait for the Generate button).

    (Not run as a test: it shows a widget panel, drawn by a Jupyter front end
    (tests/test_widgets.py and make browser run the panels).)

    >>> from genlab.widgets import WatermarkExplorer
    >>> WatermarkExplorer(genlab.load("demo"), watermarking_config={"bias": 4.0})  # doctest: +SKIP
    """

    def __init__(
        self,
        lm,
        prompt: str = "Write a short story about a robot.",
        watermarking_config: WatermarkingConfig | dict | None = None,
        *,
        chat: bool = False,
        seed: int | None = 0,
        auto_update: bool = True,
        debounce: float = 0.3,
        run: bool = True,
        **config_kwargs: Any,
    ) -> None:
        self.KIND = "watermark explorer"
        self.baseline = None
        self.colours: pd.DataFrame | None = None
        self.detection: pd.DataFrame | None = None
        self.greenlist: pd.DataFrame | None = None
        self.z_png = b""
        config_kwargs.setdefault("do_sample", True)
        config_kwargs["watermarking_config"] = watermarking_config or WatermarkingConfig()
        cfg = initial_config(lm, **config_kwargs)
        super().__init__(lm, cfg, "watermark", debounce=debounce, auto_update=auto_update,
                         prompt=prompt, chat=chat, seed=seed)  # fmt: skip
        self.text_view = widgets.HTML()
        self.text_view.add_class("genlab-result")
        self.detection_view = widgets.HTML()
        self.z_image = figure_image()
        self.position = widgets.IntSlider(
            value=0, min=0, max=0, description="position", continuous_update=False
        )
        self.position.observe(lambda _: self._guarded_greenlist(), names="value")
        self.greenlist_image = figure_image()
        self.greenlist_view = widgets.HTML()
        #: click to branch: a token of the green list continues the text from the
        #: position, watermarked as before, in a run of its own (this result stays)
        self.picker = BranchPicker(self, self.alternatives, self._branch, at=self.position)
        self.branches = self.picker.branches
        tabs = widgets.Tab(
            children=[
                widgets.VBox([self.text_view, self.detection_view]),
                scroll_box(self.z_image),
                widgets.VBox(
                    [
                        self.position,
                        self.picker.widget,
                        scroll_box(self.greenlist_image),
                        self.greenlist_view,
                    ]
                ),
                self.panel,
            ],
            titles=["Green / red", "Running z", "Green list", "Settings"],
        )
        self.children = self._explorer_layout(tabs)
        self.add_class("genlab-watermark-explorer")
        self.add_class("genlab-panel")
        if run:
            self.update(sync=True)

    def __repr__(self) -> str:
        return f"WatermarkExplorer(lm={self.lm.name!r})"

    def static_html(self) -> str:
        """The panel's last state as plain HTML (what a notebook shows without a kernel)."""
        return (
            f'<div class="genlab-static">{self._static_head()}'
            f"{self.text_view.value}{self.detection_view.value}"
            f"{png_html(self.z_png, 'running z')}{self.picker.view.value}</div>"
        )

    # -- LiveView ------------------------------------------------------------------------
    def compute(self, job: Job):
        """Generate with the watermark and detect it, for job (a token per step)."""
        wm = self.panel.config.watermarking_config
        if not isinstance(wm, WatermarkingConfig):
            kind = "SynthID" if isinstance(wm, SynthIDTextWatermarkingConfig) else "no"
            raise ValueError(
                f"watermarking_config is {kind} watermark: the explorer shows the "
                "green-list watermark; choose 'green list' in Settings > "
                "Watermarking"
            )
        result = yield from self.generate(
            job, self.panel.config, tracer_class=ScoresBeforeWatermark
        )
        plain = self.panel.config.copy()
        plain.watermarking_config = None
        baseline = yield from self.generate(job, plain)
        return result, baseline

    def render(self, data) -> None:
        """Show data (the generation and its detection tables) in the widget."""
        from ..plots.watermark import running_z
        from ..watermark import WatermarkDetector
        from .watermark_html import watermark_html

        result, baseline = data
        wm = result.run.config.watermarking_config
        info, tok = self.lm.info, self.lm.tokenizer
        n = result.prompt_length
        colours = generated_colours(result.sequences[0], n, wm, tok, info.vocab_size)
        base_colours = generated_colours(baseline.sequences[0], n, wm, tok, info.vocab_size)
        detector = WatermarkDetector(info, "cpu", wm)
        frames = []
        for label, res in (("watermarked", result), ("not watermarked", baseline)):
            # one z-score everywhere: the generated tokens only (the prompt, chat template
            # included, is context but not scored), the same numbers as the colours
            found = detector(
                res.sequences[:1], z_threshold=Z_THRESHOLD, return_dict=True, score_from=n
            ).to_frame()
            found.insert(0, "text", label)
            frames.append(found)
        self.result, self.baseline, self.colours = result, baseline, colours
        self.detection = pd.concat(frames, ignore_index=True)
        z = self.detection.z_score
        verdict = ["watermarked" if p else "not watermarked" for p in self.detection.prediction]
        self.text_view.value = (
            f"<b>with the watermark</b>: z = {z[0]:.2f} → {verdict[0]}"
            + watermark_html(colours).html
            + f"<b>same prompt and seed, no watermark</b>: z = {z[1]:.2f} → {verdict[1]}"
            + watermark_html(base_colours).html
        )
        detected = self.detection[
            ["text", "num_tokens_scored", "num_green_tokens", "green_fraction", "z_score",
             "p_value"]
        ].copy()  # fmt: skip
        detected["verdict"] = verdict
        self.detection_view.value = (
            f"<b>detector</b> (generated tokens only; watermarked when z &gt; {Z_THRESHOLD:g}; "
            "p_value: the chance of this many green tokens in text without the watermark)"
            + frame_html(detected)
        )
        fig = running_z(
            colours,
            z_threshold=Z_THRESHOLD,
            title="running z-score over the generated tokens (watermarked)",
        )
        self.z_png = show_figure(self.z_image, fig)
        self.position.max = max(0, len(colours) - 1)
        self.position.value = min(self.position.value, self.position.max)
        self.show_greenlist()
        self.picker.reset(len(colours))
        self.status.value = message(
            f"z = {z[0]:.2f} with the watermark ({verdict[0]}), {z[1]:.2f} without "
            f"({verdict[1]}); threshold {Z_THRESHOLD:g}, generated tokens only",
            "ok",
        )

    # -- the green list at one position ---------------------------------------------------
    def show_greenlist(self, position: int | None = None, top: int = 20) -> pd.DataFrame:
        """The green list at generated position ``position`` (default: the slider's):
        the ``top`` most likely tokens with their probability before and after the bias."""
        from ..plots.watermark import greenlist_bars
        from ..watermark import greenlist_table

        if position is not None:
            self.position.value = position
        pos = self.position.value
        run = self.result.run
        before = run.tracer.before.get(pos)
        if before is None:
            raise ValueError(
                f"position must be a generated position 0..{len(run.tracer.before) - 1}, got {pos}"
            )
        n = self.result.prompt_length
        context = self.result.sequences[0, : n + pos]
        table = greenlist_table(context, before, run.config.watermarking_config, top=top)
        table["token"] = [shown(self.lm.tokenizer, int(i)) for i in table.id]
        chosen = int(self.result.sequences[0, n + pos])
        table["chosen"] = table.id == chosen
        self.greenlist = table
        show_figure(
            self.greenlist_image,
            greenlist_bars(
                table, title=f"position {pos}: next-token probabilities before | after the bias"
            ),
        )
        self.greenlist_view.value = frame_html(
            table[["token", "id", "green", "chosen", "prob_before", "prob_after"]].replace(
                {"green": {True: "green", False: "red"}, "chosen": {True: "chosen", False: ""}}
            )
        )
        return table

    def _guarded_greenlist(self) -> None:
        if self.result is None:
            return
        try:
            self.show_greenlist()
        except Exception as err:  # shown in the widget
            self._fail(err)

    # -- click to branch ------------------------------------------------------------------
    def alternatives(self, position: int) -> list[tuple[int, str, float]]:
        """(token id, token, probability after the bias) of the green list's tokens at
        generated ``position`` other than the one taken, most likely first."""
        table = self.greenlist
        if table is None or self.result is None or position != self.position.value:
            return []
        rows = table[~table.chosen & (table.prob_after > 0)].sort_values(
            "prob_after", ascending=False, kind="stable"
        )
        pairs = zip(rows.id, rows.token, rows.prob_after, strict=True)
        return [(int(i), str(t), float(p)) for i, t, p in pairs][:5]

    def branch(self, position: int, token):
        """Continue the watermarked text from generated ``position`` with ``token`` (an
        id or a text) instead, under the same settings and seed: a run of its own (this
        result stays). Returns its GenerationResult, appended to ``branches``."""
        from .watermark_html import watermark_html

        if self.result is None:
            raise ValueError("no result yet: generate first, then click an alternative")
        n = self.result.prompt_length
        generated = self.result.sequences[0, n:].tolist()
        if not isinstance(position, int) or not 0 <= position < len(generated):
            raise ValueError(
                f"position must be a generated position 0-{len(generated) - 1}, got {position!r}"
            )
        branch = continue_with(
            self.lm, self.prompt_box.value, chat=self.chat_box.value, seed=self.seed,
            config=self.panel.config, kept=generated[:position], token=token,
        )  # fmt: skip
        self.branches.append(branch)
        wm = branch.run.config.watermarking_config
        info, tok = self.lm.info, self.lm.tokenizer
        colours = generated_colours(branch.sequences[0], n, wm, tok, info.vocab_size)
        self.picker.add(
            branch_html(len(self.branches), position, "position", watermark_html(colours).html)
        )
        return branch

    def _branch(self, position: int, token: int) -> str:
        self.branch(position, token)
        return self.picker.view.value


#: the early_stopping rules, as the Early stop tab names them
RULES = {
    True: "True: stop once num_beams are finished",
    False: "False: stop when no beam can beat them",
    "never": "never: only when no beam could ever beat them",
}


#: the Early stop table's columns, the decision first (it reads in a 533 px box; the
#: step is in the tab's heading, the rule in words above the table)
EARLY_COLUMNS = (
    "done", "improvable", "best_possible", "worst_finished", "n_finished", "best_running",
    "input_done", "generated_length",
)  # fmt: skip


def early_for_people(early: pd.DataFrame) -> pd.DataFrame:
    """``trace.early_stop()`` rows as the Early stop tab shows them: the decision and the
    scores it compares first (:data:`EARLY_COLUMNS`), the rule in words last (never
    "rule False"); -1e9 ("no finished hypothesis yet") reads "none yet"."""
    shown = early.drop(columns=[c for c in ("batch",) if c in early.columns]).copy()
    if "rule" in shown.columns:
        shown["rule"] = [RULES.get(r, str(r)) if not isinstance(r, float) else str(r)
                         for r in shown.rule]  # fmt: skip
    first = [c for c in EARLY_COLUMNS if c in shown.columns]
    return shown[first + [c for c in shown.columns if c not in first]]


def node_paths(tree: pd.DataFrame) -> dict[int, list[int]]:
    """Token ids from the prompt to each node of ``trace.beam_tree()`` (node -> ids)."""
    parent = dict(zip(tree.node.tolist(), tree.parent_node.tolist(), strict=True))
    token = dict(zip(tree.node.tolist(), tree.token_id.tolist(), strict=True))
    paths: dict[int, list[int]] = {}

    def path(node: int) -> list[int]:
        if node < 0 or node not in token:
            return []
        if node not in paths:
            paths[node] = path(parent[node]) + [token[node]]
        return paths[node]

    for node in token:
        path(node)
    return paths


class BeamExplorer(Explorer):
    """Beam search step by step: the tree, the hypothesis pool, the early-stop numbers.

    num_beams and other settings as config kwargs (20 new tokens unless given); the step
    slider picks the step shown. Works for beam search, beam sampling, group and
    constrained beam search (what ``trace.beam_tree()`` records).

    For code and tests: ``result``, ``tree`` (every candidate), ``show_step(step)``, and
    for the shown step ``candidates``, ``pool`` (finished hypotheses so far) and ``early``
    (the stopping numbers); ``update/wait/error/version``.

    Args:
        lm: a :class:`~genlab.lm.LM` (``genlab.load(...)``); prompt: the text to continue;
        chat: apply the chat template; seed: the seed of each run (for beam sampling);
        auto_update: generate again after every change; debounce: seconds to wait for more
        changes first; window: how many steps the tree shows around the chosen one;
        run: generate at once (False: wait for the Generate button).

    (Not run as a test: it shows a widget panel, drawn by a Jupyter front end
    (tests/test_widgets.py and make browser run the panels).)

    >>> from genlab.widgets import BeamExplorer
    >>> BeamExplorer(genlab.load("demo"), "The capital of France is", num_beams=3)  # doctest: +SKIP
    """

    def __init__(
        self,
        lm,
        prompt: str = "Once upon a time",
        *,
        num_beams: int = 4,
        chat: bool = False,
        seed: int | None = 0,
        auto_update: bool = True,
        debounce: float = 0.3,
        window: int = 8,
        run: bool = True,
        **config_kwargs: Any,
    ) -> None:
        self.KIND = "beam explorer"
        self.window = window
        self.tree: pd.DataFrame | None = None
        self.candidates: pd.DataFrame | None = None
        self.pool: pd.DataFrame | None = None
        self.early: pd.DataFrame | None = None
        self._paths: dict[int, list[int]] = {}
        self.tree_png = b""
        cfg = initial_config(lm, num_beams=num_beams, **config_kwargs)
        super().__init__(lm, cfg, "strategy", debounce=debounce, auto_update=auto_update,
                         prompt=prompt, chat=chat, seed=seed)  # fmt: skip
        self.step_slider = widgets.IntSlider(
            value=0, min=0, max=0, description="step", continuous_update=False
        )
        self.step_slider.observe(lambda _: self._guarded_step(), names="value")
        self.outcome_view = widgets.HTML()
        self.outcome_view.add_class("genlab-result")
        self.tree_image = figure_image()
        self.candidates_view = widgets.HTML()
        self.pool_view = widgets.HTML()
        self.early_view = widgets.HTML()
        #: click to branch: a candidate of the shown step continues the beam search from
        #: its text (prompt + that beam's tokens + it), a run of its own (this one stays)
        self.picker = BranchPicker(self, self.alternatives, self._branch, at=self.step_slider,
                                   what="step")  # fmt: skip
        self.branches = self.picker.branches
        tabs = widgets.Tab(
            children=[
                widgets.VBox(
                    [scroll_box(self.tree_image), self.picker.widget, self.candidates_view]
                ),
                self.pool_view,
                self.early_view,
                self.panel,
            ],
            titles=["Beam tree", "Hypothesis pool", "Early stop", "Settings"],
        )
        self.children = self._explorer_layout(self.outcome_view, self.step_slider, tabs)
        self.add_class("genlab-beam-explorer")
        self.add_class("genlab-panel")
        if run:
            self.update(sync=True)

    def __repr__(self) -> str:
        return f"BeamExplorer(lm={self.lm.name!r}, num_beams={self.panel.config.num_beams})"

    def static_html(self) -> str:
        """The panel's last state as plain HTML (what a notebook shows without a kernel)."""
        return (
            f'<div class="genlab-static">{self._static_head()}'
            f"{self.outcome_view.value}{png_html(self.tree_png, 'beam tree')}"
            f"{self.candidates_view.value}{self.picker.view.value}{self.early_view.value}</div>"
        )

    # -- LiveView ------------------------------------------------------------------------
    def compute(self, job: Job):
        """Run the traced beam search for job (a step per yield); returns the result."""
        if self.panel.config.num_beams < 2:
            raise ValueError(
                f"num_beams is {self.panel.config.num_beams}: a beam tree needs 2 or more "
                "(Settings > Generation strategy, or the beam preset)"
            )
        return (yield from self.generate(job, self.panel.config))

    def render(self, result) -> None:
        """Show result (a traced GenerationResult) in the widget."""
        tree = result.trace.beam_tree(batch=0)
        self.result, self.tree, self._paths = result, tree, node_paths(tree)
        scores = getattr(result.output, "sequences_scores", None)
        rows = []
        for i, text in enumerate(result.texts):
            score = "" if scores is None else f" (score {float(scores[i]):.3f})"
            rows.append(f"<div><b>{i}</b>{html.escape(score)}: {html.escape(text)}</div>")
        self.outcome_view.value = (
            f'<div class="genlab-text" style="font-family:monospace">{"".join(rows)}</div>'
        )
        last = int(tree.step.max())
        self.step_slider.max = last
        if self.step_slider.value == last:
            self.show_step(last)
        else:
            self.step_slider.value = last  # the observer shows it
        self.picker.reset(last + 1)
        self.status.value = message(f"{last + 1} steps · mode {result.run.mode}", "ok")

    # -- one step ---------------------------------------------------------------------------
    def show_step(self, step: int | None = None) -> pd.DataFrame:
        """Show (and return) the candidates of ``step`` (default: the slider's)."""
        from ..plots.beam import beam_tree

        if step is not None:
            self.step_slider.value = step
        step = self.step_slider.value
        trace, tree = self.result.trace, self.tree
        if not 0 <= step <= int(tree.step.max()):
            raise ValueError(f"step must be in [0, {int(tree.step.max())}], got {step}")
        at = tree[tree.step == step].sort_values("rank").copy()
        at.insert(0, "text", [self._text(n, t) for n, t in zip(at.node, at.token_id, strict=True)])
        at["token"] = [shown(self.lm.tokenizer, int(t)) for t in at.token_id]
        cols = [
            "rank",
            "text",
            "token",
            "token_logprob",
            "score",
            "normalized_score",
            "fate",
            "beam",
            "slot",
        ]
        self.candidates = at[cols].reset_index(drop=True)
        hyps = trace.hypotheses(batch=0)
        self.pool = hyps[hyps.step == step].reset_index(drop=True)
        early = trace.early_stop()
        self.early = early[(early.step == step) & (early.batch == 0)].reset_index(drop=True)
        # for people: no beam / slot -1 (a candidate that was not kept), no -1e9
        readable = self.candidates.copy()
        for col in ("beam", "slot"):
            readable[col] = readable[col].astype("float").where(readable[col] >= 0)
        first = max(0, step - self.window + 1)
        fig = beam_tree(
            trace,
            steps=(first, step),
            steps_per_row=5,  # bands of 5 steps: 760 px, no wider than the panel
            title=f"Beam tree up to step {step}",
        )
        self.tree_png = show_figure(self.tree_image, fig)
        self.candidates_view.value = (
            f"<b>candidates at step {step}</b> (beam / slot empty: not kept)" + frame_html(readable)
        )
        self.pool_view.value = (
            f"<b>finished hypotheses after step {step}</b> (score = sum of log-probs / "
            "generated_length ** length_penalty)" + frame_html(self.pool)
        )
        early = early_for_people(self.early)
        rule = f" (early_stopping={early.rule.iloc[0]})" if len(early) and "rule" in early else ""
        self.early_view.value = (
            f"<b>stopping decision after step {step}</b>{html.escape(rule)}: search goes on "
            "while the best reachable score can still beat the worst kept hypothesis"
            + frame_html(early.drop(columns=[c for c in ("step", "rule") if c in early]))
        )
        return self.candidates

    # -- click to branch ------------------------------------------------------------------
    def _candidates_at(self, step: int) -> pd.DataFrame:
        if self.tree is None or step != self.step_slider.value:
            return self.tree.iloc[:0] if self.tree is not None else pd.DataFrame()
        return self.tree[self.tree.step == step].sort_values("rank", kind="stable").head(5)

    def alternatives(self, step: int) -> list[tuple[int, str, float]]:
        """(row of ``tree``, token, probability given its beam) of the 5 best-ranked
        candidates of ``step``: each can be continued from."""
        import math

        at = self._candidates_at(step)
        return [
            (int(i), shown(self.lm.tokenizer, int(t)), math.exp(float(lp)))
            for i, t, lp in zip(at.index, at.token_id, at.token_logprob, strict=True)
        ]

    def branch(self, step: int, candidate: int):
        """Continue the beam search from candidate ``candidate`` (a row of ``tree``) of
        ``step``: its beam's tokens and its own become part of the input, under the same
        settings and seed; a run of its own (this result stays). Returns its
        GenerationResult, appended to ``branches``."""
        import torch as _torch

        if self.result is None or self.tree is None:
            raise ValueError("no result yet: generate first, then click a candidate")
        if candidate not in self.tree.index or int(self.tree.step[candidate]) != step:
            raise ValueError(f"candidate {candidate!r} is not a candidate of step {step}")
        row = self.tree.loc[candidate]
        path = [*self._paths.get(int(row.parent_node), []), int(row.token_id)]
        n = self.result.prompt_length
        ids = [*self.result.sequences[0, :n].tolist(), *path]
        branch = continue_with(
            self.lm, _torch.tensor([ids]), chat=False, seed=self.seed,
            config=self.panel.config, kept=[], token=None,
        )  # fmt: skip
        self.branches.append(branch)
        tok = self.lm.tokenizer
        body = plain_text_html(tok.decode(path) + branch.texts[0])
        self.picker.add(branch_html(len(self.branches), step, "step", body))
        return branch

    def _branch(self, step: int, candidate: int) -> str:
        self.branch(step, candidate)
        return self.picker.view.value

    def _text(self, node: int, token_id: int) -> str:
        ids = self._paths.get(int(node)) if node >= 0 else None
        return self.lm.tokenizer.decode(ids if ids else [int(token_id)])

    def _guarded_step(self) -> None:
        if self.result is None:
            return
        try:
            self.show_step()
        except Exception as err:  # shown in the widget
            self._fail(err)
