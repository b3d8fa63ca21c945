"""SampleView: the N samples of one prompt, grouped by answer, with what each rule keeps.

:class:`SampleView` draws ``n`` seeded samples (:func:`genlab.best_of_n`'s batches) and
shows them grouped by their answer (``extract``), largest group first, with each group's
votes and each sample's score (the raw model's mean log-prob, or the given ``score``) and
the verifier's verdict. Three marks say which sample each rule keeps: the best score, the
majority vote, the verifier. Click to branch: pick a sample and a token of it, and the
buttons continue from there with another token, in a run of its own.

The number of samples is bounded by the rows the model and machine hold at once
(:mod:`genlab.config.limits`), as the panels bound ``num_return_sequences``.

(Not run as a test: it shows a widget panel, drawn by a Jupyter front end; tests/test_compute.py
drives it.)

>>> SampleView(genlab.load("demo"), "The capital of Ghana is", n=16, max_new_tokens=4,
...            extract=lambda t: t.split()[0] if t.split() else None)  # doctest: +SKIP
"""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

import ipywidgets as widgets
import torch

from ..experiments.compute import NO_ANSWER, SampleSet, best_of_n
from ..text.tokens import show_token
from .base import FOCUS_CSS, MAX_SEED, Panel, button, controls_row, parse_int, title_html
from .branching import ALTERNATIVES, BranchPicker, branch_html, continue_with
from .live import ended_text, initial_config, limits_of
from .render import message, prob_text, result_html, text_block, token_table

#: the mark of each rule's choice, and its words
MARKS = {"score": ("★", "best score"), "vote": ("◆", "majority vote"),
         "verifier": ("✔", "verifier")}  # fmt: skip


class SampleView(Panel):
    """The samples of one prompt grouped by answer (see the module docstring).

    lm: the LM to sample from; prompt: a text (or messages, ids); n: samples to draw (at
    most the rows the model and machine hold at once); extract: ``text -> answer`` (None:
    the first word); verifier: ``text -> bool | float``; score: as in
    :func:`genlab.best_of_n`; seed, max_new_tokens, chat: as there; config: other
    generation settings; run: draw at once.

    For code and tests: ``draw()`` (draws with the values in the boxes), ``result`` (the
    :class:`~genlab.experiments.compute.SampleSet` shown), ``sample_pick`` (the sample to branch
    from), ``branch(position, token)``, ``branches``, ``save_html(path)``.

    (Not run as a test: it samples for seconds; tests/test_compute.py checks it.)

    >>> SampleView(lm, "The capital of Ghana is", n=16, max_new_tokens=4)  # doctest: +SKIP
    """

    def __init__(self, lm, prompt: Any = "The capital of Ghana is", *, n: int = 16,
                 extract: Callable[[str], str | None] | None = None,
                 verifier: Callable[[str], bool | float] | None = None,
                 score: Any = "mean_logprob", seed: int = 0, max_new_tokens: int = 8,
                 chat: bool = False, run: bool = True, **config: Any) -> None:  # fmt: skip
        self.lm, self.config = lm, config
        self.extract = extract or first_word
        self.verifier, self.score = verifier, score
        self.result: SampleSet | None = None
        self._given_prompt = prompt
        self._logprobs: dict[int, torch.Tensor] = {}
        self.prompt_box = widgets.Textarea(value=str(prompt), rows=2,
                                           layout=widgets.Layout(width="auto"))  # fmt: skip
        small = widgets.Layout(width="180px")
        self.n_box = widgets.Text(value=str(n), description="n", layout=small)
        self.seed_box = widgets.Text(value=str(seed), description="seed", layout=small)
        self.length_box = widgets.Text(value=str(max_new_tokens), description="new tokens",
                                       style={"description_width": "initial"},
                                       layout=small)  # fmt: skip
        self.chat_box = widgets.Checkbox(value=chat, description="chat", indent=False)
        self.draw_button = button("Draw samples", button_style="primary")
        self.draw_button.on_click(lambda _: self.guard(self.draw))
        self.status = widgets.HTML()
        self.rules_view = widgets.HTML()
        self.groups_view = widgets.HTML()
        self.sample_pick = widgets.Dropdown(description="sample", options=[])
        self.picker = BranchPicker(self, self.alternatives, self._branch_view, ALTERNATIVES)
        self.branches = self.picker.branches
        self.sample_pick.observe(lambda _: self.guard(self._reset_picker), names="value")
        super().__init__([
            widgets.HTML(FOCUS_CSS),
            title_html("samples", lm),
            self.prompt_box,
            controls_row(self.n_box, self.seed_box, self.length_box, self.chat_box,
                         self.draw_button),
            self.status,
            self.rules_view,
            self.groups_view,
            widgets.HTML("<b>click to branch</b>: a sample, a token of it, another token"),
            controls_row(self.sample_pick),
            self.picker.widget,
        ])  # fmt: skip
        self.add_class("genlab-sample-view")
        self.add_class("genlab-panel")
        if run:
            self.draw()

    def __repr__(self) -> str:
        n = None if self.result is None else self.result.n
        return f"SampleView(lm={self.lm.name!r}, n={n})"

    def max_samples(self, max_new_tokens: int) -> int:
        """Most samples the panel draws: the rows this model and machine hold at once with
        ``max_new_tokens`` tokens each (:meth:`genlab.config.limits.Limits.row_bound`)."""
        return limits_of(self.lm).row_bound(max_new_tokens)

    def _prompt(self):
        prompt = self.prompt_box.value
        return self._given_prompt if prompt == str(self._given_prompt) else prompt

    def draw(self) -> SampleSet:
        """Draw the samples with the values in the boxes and show them; returns the
        :class:`~genlab.experiments.compute.SampleSet`. A bad value is refused with its reason (the
        last good samples stay)."""
        length = parse_int(self.length_box.value, "new tokens", 1, limits_of(self.lm).context)
        bound = self.max_samples(length)
        n = parse_int(self.n_box.value, "n", 1, bound)
        seed = parse_int(self.seed_box.value, "seed", 0, MAX_SEED)
        result = best_of_n(
            self.lm, self._prompt(), n, verifier=self.verifier, score=self.score,
            extract=self.extract, seed=seed, batch_size=n, max_new_tokens=length,
            chat=self.chat_box.value, **self.config,
        )  # fmt: skip
        self.result = result
        self._logprobs = {}
        self.status.value = message(f"{n} samples in {result.seconds:.1f} s", "ok")
        self.rules_view.value = self.rules_html()
        self.groups_view.value = self.groups_html()
        self.sample_pick.options = [
            (f"{i}: {_short(t)}", i) for i, t in enumerate(result.samples.text)
        ]
        self.sample_pick.value = result.chosen if result.chosen is not None else 0
        self._reset_picker()
        return result

    # -- views ------------------------------------------------------------------------------
    def rules_html(self) -> str:
        """One line per rule: its mark, the sample it keeps and that sample's text."""
        res = self.result
        lines = []
        for rule, (mark, words) in MARKS.items():
            i = res.choices.get(rule)
            if i is None:
                what = "no verifier given" if rule == "verifier" else "nothing to choose"
                lines.append(f"<div>{mark} {words}: {what}</div>")
                continue
            text = html.escape(repr(str(res.samples.text.iloc[i])))
            lines.append(f"<div>{mark} {words}: sample {i}, <code>{text}</code></div>")
        return '<div class="genlab-rules">' + "".join(lines) + "</div>"

    def groups_html(self) -> str:
        """The samples grouped by answer, largest group first: votes, then each sample's
        score, verdict and the marks of the rules that keep it."""
        res = self.result
        s = res.samples
        marks = {}
        for rule, (mark, words) in MARKS.items():
            i = res.choices.get(rule)
            if i is not None:
                marks.setdefault(i, []).append((mark, words))
        answers = s.answer.fillna(NO_ANSWER)
        order = answers.value_counts(sort=True)
        rows = []
        for answer, count in order.items():
            rows.append(
                f'<tr class="genlab-group"><td colspan="4"><b>{html.escape(str(answer))}</b>'
                f" &middot; {count} of {res.n} votes ({count / res.n:.0%})</td></tr>"
            )
            for i in s.index[answers == answer]:
                row = s.loc[i]
                mark = "".join(
                    f'<span title="{html.escape(w)} keeps this sample">{m}</span>'
                    for m, w in marks.get(i, [])
                )
                rows.append(
                    f"<tr><td>{mark} {i}</td><td>{text_block(html.escape(row.text))}</td>"
                    f"<td>{row.score:.3f}</td><td>{_verdict(row.verified, row.error)}</td></tr>"
                )
        head = "<tr><th>sample</th><th>text</th><th>score</th><th>verifier</th></tr>"
        return (
            '<div class="genlab-frame" style="max-height:420px;overflow:auto">'
            f'<table class="genlab-samples">{head}{"".join(rows)}</table></div>'
        )

    def static_html(self) -> str:
        """The view's last state as plain HTML (what a notebook shows without a kernel)."""
        body = ""
        if self.result is not None:
            body = self.rules_html() + self.groups_html()
        return (
            f'<div class="genlab-static"><b>genlab samples</b>'
            f"<div><i>prompt</i>: {html.escape(str(self.prompt_box.value))} &middot; n "
            f"{html.escape(self.n_box.value)} &middot; seed {html.escape(self.seed_box.value)}"
            f"</div>{self.status.value}{body}{self.picker.view.value}</div>"
        )

    # -- click to branch -------------------------------------------------------------------
    def _tokens(self, sample: int) -> list[int]:
        return list(self.result.samples.token_ids.iloc[sample])

    def _reset_picker(self) -> None:
        if self.result is None or self.sample_pick.value is None:
            return
        self.picker.reset(len(self._tokens(int(self.sample_pick.value))))

    def alternatives(self, position: int) -> list[tuple[int, str, float]]:
        """(token id, token, probability under the raw model) of the tokens that could
        have come at ``position`` of the picked sample instead of its own, best first."""
        if self.result is None or self.sample_pick.value is None:
            return []
        sample = int(self.sample_pick.value)
        tokens = self._tokens(sample)
        if not 0 <= position < len(tokens):
            return []
        if sample not in self._logprobs:
            from ..experiments.scoring import score

            context = self.lm.encode(self._prompt(), chat=self.chat_box.value)[0][0]
            self._logprobs[sample] = score(
                self.lm, tokens, context=context, alternatives=0, keep_logprobs=True
            ).logprobs[0]
        probs = self._logprobs[sample][position].exp()
        top = torch.topk(probs, ALTERNATIVES + 1)
        return [
            (int(i), show_token(self.lm.tokenizer.decode([int(i)])), float(p))
            for p, i in zip(top.values, top.indices, strict=True)
            if int(i) != tokens[position] and float(p) > 0
        ][:ALTERNATIVES]

    def branch(self, position: int, token):
        """Continue the picked sample from its token ``position`` with ``token`` (an id or
        a text) instead, to the end, under the same settings and seed: a run of its own.
        Returns its GenerationResult, appended to ``branches``."""
        if self.result is None:
            raise ValueError("no samples yet: draw first, then click an alternative")
        tokens = self._tokens(int(self.sample_pick.value))
        if not isinstance(position, int) or not 0 <= position < len(tokens):
            raise ValueError(
                f"position must be a token of the sample, 0-{len(tokens) - 1}, got {position!r}"
            )
        settings = initial_config(self.lm, **self.result.settings)
        branch = continue_with(
            self.lm, self._prompt(), chat=self.chat_box.value,
            seed=parse_int(self.seed_box.value, "seed", 0, MAX_SEED), config=settings,
            kept=tokens[:position], token=token,
        )  # fmt: skip
        self.branches.append(branch)
        self.picker.add(branch_html(
            len(self.branches), position, f"sample {self.sample_pick.value}, token",
            result_html(token_table(branch), marks=[position], tokenizer=self.lm.tokenizer,
                        ended=branch.run.finished_by == "eos"),
            ended_text(branch.run),
        ))  # fmt: skip
        return branch

    def _branch_view(self, position: int, token: int) -> str:
        self.branch(position, token)
        return self.picker.view.value


def first_word(text: str) -> str | None:
    """The default answer of a sample: its first word (None when it has none)."""
    words = text.split()
    return words[0] if words else None


def _short(text: str, n: int = 40) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _verdict(value, error: str) -> str:
    if error:
        return f'<span title="{html.escape(error)}" style="color:#cf222e">error</span>'
    if value is None:
        return ""
    if isinstance(value, bool):
        return "✓ pass" if value else "✗ fail"
    return html.escape(prob_text(float(value)) if 0 <= float(value) <= 1 else f"{value:.3f}")
