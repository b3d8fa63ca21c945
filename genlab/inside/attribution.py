"""Which earlier tokens made the model write each token: input attribution.

:func:`attribute` scores, for every generated token of a run (or every token of a text),
each earlier token, prompt and generated, by the gradient of the token's log-prob with
respect to the input embeddings:

* ``"gradient_x_input"`` -- gradient times embedding, summed over the embedding's width;
* ``"integrated_gradients"`` -- the gradient averaged along the straight path from a zero
  embedding to the real one (Gauss-Legendre points, as captum's default), times the
  embedding: the scores add up to the log-prob's change along that path. The ``n_steps``
  points of one token run as one batch: about ``n_steps`` gradient passes per token;
* ``contrast=`` -- the target is the log-prob difference between the token written and
  an alternative ("why X rather than Y").

It reads one teacher-forced pass over the whole sequence, on genlab's decoders (through
their ``hook_embed`` point) or through the transformers adapter (``inputs_embeds``). The
result is an :class:`Attribution`: a tidy table; :func:`genlab.plots.attribution_heatmap`
draws it.

(Not run as a test: it runs the demo model; tests/test_attribution.py compares with captum.)

>>> run = lm.start("The capital of France is", max_new_tokens=4); run.run()  # doctest: +SKIP
>>> genlab.attribute(run, method="integrated_gradients", n_steps=16).table   # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch

from ..text.tokens import shown
from .hooks import HookRegistry
from .lens import as_sequence

METHODS = ("gradient_x_input", "integrated_gradients")


@dataclass(repr=False)
class Attribution:
    """Scores of earlier tokens for each generated token.

    table: one row per (step, source position): step (the generated token's index),
    target (its text), position, token (the source token's text), score, method.
    tokens: the sequence's tokens as text; prompt_length: the first generated position.
    """

    table: pd.DataFrame
    tokens: list[str]
    prompt_length: int
    method: str

    def matrix(self) -> pd.DataFrame:
        """Steps x source positions (NaN where a source comes after the step's token)."""
        return self.table.pivot(index="step", columns="position", values="score")

    def _repr_html_(self) -> str:
        return self.table._repr_html_()

    def __repr__(self) -> str:
        """A summary, as pandas shows a large frame's shape: the method, the steps and the
        source positions, and each step's strongest source (``.table`` has every row)."""
        t = self.table
        steps = sorted(t["step"].unique()) if len(t) else []
        lines = [
            f"Attribution({self.method}: {len(steps)} generated tokens x "
            f"{t['position'].nunique() if len(t) else 0} source positions, {len(t)} rows; "
            ".table, .matrix())"
        ]
        for step in steps[:5]:
            rows = t[t["step"] == step]
            top = rows.loc[rows["score"].abs().idxmax()]
            lines.append(
                f"  step {step} {top['target']!r}: strongest source {top['token']!r} "
                f"(position {top['position']}, score {top['score']:.3g})"
            )
        if len(steps) > 5:
            lines.append(f"  ... {len(steps) - 5} more steps")
        return "\n".join(lines)


def _embeddings(model):
    """(embed ids -> (rows, n, hidden), logits of given embeddings) for ``model``."""
    hf = getattr(model, "hf", None)
    if hf is not None:  # the transformers adapter
        layer = hf.get_input_embeddings()

        def logits_of(emb):
            return hf(inputs_embeds=emb, use_cache=False).logits

        return layer, logits_of
    if not hasattr(model, "hook_points"):
        raise ValueError(
            f"attribution needs the model's input embeddings; {type(model).__name__} gives no "
            "access to them (use a built-in decoder or a transformers model)"
        )

    def embed(ids):
        return model.embed_tokens(ids)

    def logits_of(emb):
        rows, n = emb.shape[:2]
        registry = HookRegistry()
        registry.bind(model)
        off = registry.add("hook_embed", lambda x, step: emb)
        try:
            from .taps import Taps

            ids = torch.zeros(rows, n, dtype=torch.long, device=emb.device)
            out = model.forward(
                ids,
                attention_mask=torch.ones_like(ids),
                position_ids=torch.arange(n, device=emb.device).expand(rows, n),
                cache=model.new_cache(rows),
                logits_to_keep=0,
                taps=Taps(registry, 0, 0),
            )
        finally:
            off()
        return out.logits

    return embed, logits_of


def _gauss_legendre(n: int) -> tuple[list[float], list[float]]:
    """Points in (0, 1) and their weights (the rule captum uses by default)."""
    x, w = np.polynomial.legendre.leggauss(n)
    return [float(a) for a in 0.5 * (1 + x)], [float(b) for b in 0.5 * w]


def _token_id(tokenizer, token) -> int:
    if isinstance(token, int):
        return token
    ids = tokenizer.encode(token, add_special_tokens=False)
    ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
    if len(ids) != 1:
        raise ValueError(f"contrast={token!r} is {len(ids)} tokens; give one token or its id")
    return int(ids[0])


def attribute(
    source: Any,
    prompt: Any = None,
    *,
    method: str = "gradient_x_input",
    n_steps: int = 20,
    contrast: int | str | None = None,
    steps: list[int] | None = None,
    row: int = 0,
    chat: bool | None = None,
    batch: int = 64,
) -> Attribution:
    """Attribution of each generated token to the tokens before it (see the module).

    source: a run or a result (the generated tokens are the targets), or an LM with
    ``prompt`` (every token after the first is a target); method: ``"gradient_x_input"``
    or ``"integrated_gradients"`` (``n_steps`` path points); contrast: an alternative
    token (text or id): the target becomes log p(token) - log p(contrast); steps: which
    generated tokens (default all); row: the row of a batch (or a beam) to read; chat:
    apply the chat template to a text prompt; batch: rows per gradient pass.
    """
    if method not in METHODS:
        raise ValueError(f"method={method!r}; use one of {', '.join(METHODS)}")
    if method == "integrated_gradients" and (not isinstance(n_steps, int) or n_steps < 1):
        raise ValueError(f"n_steps={n_steps!r} must be a positive integer")
    seq = as_sequence(source, prompt, row=row, chat=chat)
    model, ids = seq.model, seq.ids.to(getattr(seq.model, "device", "cpu"))
    embed, logits_of = _embeddings(model)
    with torch.no_grad():
        x = embed(ids[None]).detach()  # (1, n, hidden)
    if not x.is_floating_point():
        raise ValueError(
            f"attribution needs floating-point embeddings to take gradients; this model's are "
            f"{x.dtype} (a quantized model): load it in float32 or bfloat16"
        )
    alt = None if contrast is None else _token_id(seq.tokenizer, contrast)
    all_steps = list(range(seq.steps))
    chosen = all_steps if steps is None else list(steps)
    for s in chosen:
        if s not in all_steps:
            raise ValueError(f"steps: {s} is not a generated token (0 to {seq.steps - 1})")
    if method == "integrated_gradients":
        alphas, weights = _gauss_legendre(n_steps)
    else:
        alphas, weights = [1.0], [1.0]
    # every (step, alpha) pair is a row; rows run in batches, each with its own target
    jobs = [(s, a, w) for s in chosen for a, w in zip(alphas, weights, strict=True)]
    grads = {s: torch.zeros_like(x[0], dtype=torch.float32) for s in chosen}
    with torch.enable_grad():
        for first in range(0, len(jobs), batch):
            part = jobs[first : first + batch]
            scale = torch.tensor([a for _, a, _ in part], dtype=x.dtype, device=x.device)
            emb = (x.expand(len(part), -1, -1) * scale.view(-1, 1, 1)).requires_grad_(True)
            try:
                logits = logits_of(emb)
            except RuntimeError as err:
                raise ValueError(
                    f"attribution: the model's forward pass failed with gradients on ({err})"
                ) from err
            total = 0
            for r, (s, _, _) in enumerate(part):
                t = seq.prompt_length + s  # the target token's position; predicted at t - 1
                lp = torch.log_softmax(logits[r, t - 1].float(), -1)
                value = lp[ids[t]] - (lp[alt] if alt is not None else 0)
                total = total + value
            if not getattr(total, "requires_grad", False):
                raise ValueError(
                    "attribution: the model's output does not depend on its embeddings through "
                    "gradients (a quantized or detached model); use a float model"
                )
            try:
                (g,) = torch.autograd.grad(total, emb)
            except RuntimeError as err:  # e.g. int8 / int4 products have no derivative
                raise ValueError(
                    "attribution needs gradients through the model, and this one gives none "
                    f"({str(err).splitlines()[0]}): a quantized model? load it without "
                    "quantization= (float32 or bfloat16) to attribute"
                ) from err
            for r, (s, _, w) in enumerate(part):
                grads[s] += g[r].float() * w
    tokens = [shown(seq.tokenizer, int(t)) for t in ids.tolist()]
    rows = []
    for s in chosen:
        t = seq.prompt_length + s
        scores = (grads[s] * x[0].float()).sum(-1)
        for j in range(t):
            rows.append(
                dict(
                    step=s,
                    target=tokens[t],
                    position=j,
                    token=tokens[j],
                    score=float(scores[j]),
                    method=method if alt is None else f"{method} vs {tokens_of(seq, alt)}",
                )
            )
    table = pd.DataFrame(rows, columns=["step", "target", "position", "token", "score", "method"])
    return Attribution(table, tokens, seq.prompt_length, method)


def tokens_of(seq, token_id: int) -> str:
    return shown(seq.tokenizer, int(token_id))


__all__ = ["Attribution", "attribute"]
