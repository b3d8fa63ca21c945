"""DoLa: decoding by contrasting layers (Chuang et al. 2024, "DoLa: Decoding by Contrasting
Layers Improves Factuality in Large Language Models").

Active when ``dola_layers`` is set on a greedy or sampling config. Reference: transformers
4.52.4 (4.56.2 fetches this strategy from the Hub). At each step:

1. the model runs once and returns every layer's hidden state;
2. the output head alone (no final norm) turns the last position's hidden state of each
   candidate *premature* layer into next-token logits (:func:`candidate_layers` says which
   layers ``"low"``, ``"high"`` or a list of indices mean; layer 0 is the embeddings);
3. with several candidates, the premature layer whose distribution is furthest from the
   final layer's (Jensen-Shannon divergence, averaged over the batch) is chosen;
4. the scores are log p_final - log p_premature over the tokens whose final log-prob is
   within log(0.1) of the best one; every other token gets -inf (:func:`contrast_logits`);
5. the usual logits processors, then argmax (greedy) or a draw (``do_sample=True``).

The recorded ``logits`` (``output_logits``) are the final layer's, as in the reference;
``scores`` are the processed contrast. Each step's :class:`~genlab.run.engine.Step` carries
``info`` (a :class:`~genlab.strategies.stepdata.DolaStep`): the candidate layers, their divergences
and the layer chosen (:func:`genlab.run.trace.dola_table`).

(Not run as a test: it needs a model and prompt ids of your own (``model``, ``ids``); the tests run
these calls.)

>>> out = generate(model, input_ids=ids, dola_layers="high")  # doctest: +SKIP
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..models.base import ModelOutput
from .base import Selection
from .sampling import GreedySearch, MultinomialSampling, TokenByToken
from .stepdata import DolaStep

RELATIVE_TOP = 0.1  # tokens below this fraction of the best final probability are dropped
BASE_FILTER_VALUE = -1e-3  # what the premature layer's log-prob becomes for dropped tokens


def candidate_layers(dola_layers, num_layers: int, tied_embeddings: bool) -> list[int]:
    """The premature layers DoLa may contrast with, as the reference picks them.

    ``"low"`` / ``"high"``: every second layer of the lower / upper half (for more than 40
    layers, of the first / last 20), skipping the embeddings (layer 0), and layer 1 of a
    deeper model, when the head is the embedding matrix (an exit there is the identity). A
    list: its indices below ``num_layers``.

    >>> candidate_layers("high", 30, True), candidate_layers("low", 6, False)
    ([15, 17, 19, 21, 23, 25, 27, 29], [0, 2])
    """
    if not tied_embeddings:
        start = 0
    elif num_layers > 2:
        start = 2
    elif num_layers == 2:
        start = 1
    else:
        start = 0
    if dola_layers == "low":
        if start == num_layers // 2:
            return [start]
        return list(range(start, num_layers // 2 if num_layers <= 40 else 20, 2))
    if dola_layers == "high":
        first = num_layers // 2 if num_layers <= 40 else num_layers - 20
        return list(range(first, num_layers, 2))
    if isinstance(dola_layers, (list, tuple)):
        layers = [int(i) for i in dola_layers if int(i) < num_layers]
        if not layers:
            raise ValueError(
                f"dola_layers={list(dola_layers)!r} names no layer below the model's "
                f"{num_layers}: give indices in [0, {num_layers - 1}] (0 is the embeddings)"
            )
        return layers
    raise ValueError(
        f"dola_layers must be 'low', 'high' or a list of layer indices, got {dola_layers!r}"
    )


def relative_top_filter(
    final: torch.Tensor, premature: torch.Tensor, relative_top: float = RELATIVE_TOP
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-softmax of both; tokens whose final log-prob is below log(relative_top) plus the
    best one become -inf in the final and ``BASE_FILTER_VALUE`` in the premature one (the
    best token always stays). Returns new tensors."""
    final = final.log_softmax(dim=-1)
    premature = premature.log_softmax(dim=-1)
    best = final.max(dim=-1).values
    threshold = torch.minimum(best, best + math.log(relative_top)).unsqueeze(-1)
    dropped = final < threshold
    return final.masked_fill(dropped, -math.inf), premature.masked_fill(dropped, BASE_FILTER_VALUE)


def contrast_logits(
    final: torch.Tensor, premature: dict[int, torch.Tensor]
) -> tuple[torch.Tensor, int, torch.Tensor | None]:
    """The DoLa scores of one step.

    final (rows, vocab) the final layer's logits; premature {layer: (rows, vocab) logits}.
    Returns (scores (rows, vocab), the layer contrasted with, the Jensen-Shannon divergence
    of each candidate layer (layers,), or None when there was only one).
    """
    layers = list(premature)
    js = None
    if len(layers) == 1:
        chosen = layers[0]
    else:
        stacked = torch.stack([premature[i] for i in layers])  # (layers, rows, vocab)
        # the mixture of the two distributions, then KL of each to it (the reference's order
        # of operations: the chosen layer is an argmax, so rounding matters)
        middle = 0.5 * (F.softmax(final, dim=-1)[None] + F.softmax(stacked, dim=-1))
        kl_final = F.kl_div(F.log_softmax(final, dim=-1)[None], middle, reduction="none")
        kl_premature = F.kl_div(F.log_softmax(stacked, dim=-1), middle, reduction="none")
        kl_final, kl_premature = kl_final.mean(-1), kl_premature.mean(-1)  # (layers, rows)
        js = (0.5 * (kl_final + kl_premature)).mean(-1)  # over the rows: (layers,)
        chosen = layers[int(js.argmax())]
    final_logp, premature_logp = relative_top_filter(final, premature[chosen])
    return final_logp - premature_logp, chosen, js


class DolaDecoding(TokenByToken):
    """DoLa on top of greedy search or sampling (``do_sample``)."""

    mode = "dola_generation"

    def start(self, ctx) -> None:
        super().start(ctx)
        info = ctx.info
        if info.is_encoder_decoder:
            raise ValueError("DoLa decoding works on decoder-only models only")
        if not hasattr(ctx.model, "head_logits"):
            raise ValueError(
                f"DoLa needs a model whose output head can read earlier layers (genlab's "
                f"built-in decoders or a transformers model), not {type(ctx.model).__name__}"
            )
        self.layers = candidate_layers(
            self.config.dola_layers, int(info.num_hidden_layers), bool(info.tie_word_embeddings)
        )
        self.premature: dict[int, torch.Tensor] = {}

    def forward(self, ctx) -> ModelOutput:
        out = ctx.forward(hidden_states=True)
        if not out.hidden_states:
            raise ValueError("DoLa needs every layer's hidden states; the model returned none")
        self.premature = {
            i: ctx.model.head_logits(out.hidden_states[i][:, -1, :]) for i in self.layers
        }
        return out

    def process(self, ctx, logits: torch.Tensor) -> torch.Tensor:
        scores, self.chosen_layer, self.divergence = contrast_logits(logits, self.premature)
        scores = ctx.fire("processor.dola", scores)
        return ctx.process(ctx.sequences, scores)

    def rule(self, ctx, scores: torch.Tensor) -> torch.LongTensor:
        base = MultinomialSampling if self.config.do_sample else GreedySearch
        return base.rule(self, ctx, scores)

    def select(self, ctx, scores: torch.Tensor) -> Selection:
        info = DolaStep(
            layers=tuple(self.layers),
            divergence=None if self.divergence is None else self.divergence.cpu(),
            chosen_layer=self.chosen_layer,
        )
        return Selection(self._pad_finished(ctx, self.rule(ctx, scores)), info=info)
