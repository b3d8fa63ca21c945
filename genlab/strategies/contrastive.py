"""Contrastive search (Su et al. 2022, "A Contrastive Framework for Neural Text Generation").

Active when ``penalty_alpha > 0`` and ``top_k > 1``. Reference: transformers 4.52.4 (4.56.2
fetches this strategy from the Hub). At each step:

1. take the ``top_k`` most probable tokens of softmax(processed scores): the candidates;
2. run the model once on all of them (the cache is repeated ``top_k`` times per row) and
   keep each candidate's last hidden state;
3. degeneration penalty of a candidate = the largest cosine similarity between its hidden
   state and the hidden states of every earlier position of its row (padding excluded);
4. score = (1 - penalty_alpha) * probability - penalty_alpha * penalty; the best one wins.

The winner's forward already produced the logits of the next step and its keys/values, so
the next step needs no forward pass of its own: :meth:`ContrastiveSearch.forward` hands the
engine those logits. With ``low_memory=True`` the candidates run one at a time and the
winner runs again (same tokens; less memory, slower).

(Not run as a test: it needs a model and prompt ids of your own (``model``, ``ids``); the tests run
these calls.)

>>> out = generate(model, input_ids=ids, penalty_alpha=0.6, top_k=4)   # doctest: +SKIP
>>> genlab.run.trace.contrastive_table(ctx.history)  # candidates, penalty, score  # doctest: +SKIP
"""

from __future__ import annotations

import torch

from ..models.base import ModelOutput
from .base import Selection
from .sampling import TokenByToken
from .stepdata import ContrastiveStep


def degeneration_penalty(
    context: torch.Tensor, candidates: torch.Tensor, context_mask: torch.Tensor
) -> torch.Tensor:
    """Max cosine similarity of each candidate to its row's context.

    context: (n, length, hidden) hidden states of the positions so far;
    candidates: (n, 1, hidden) the candidate's hidden state; context_mask: (n, length), 0 on
    padding (never counted). Returns (n,).

    >>> degeneration_penalty(torch.ones(1, 2, 3), torch.ones(1, 1, 3), torch.ones(1, 2))
    tensor([1.0000])
    """
    unit_context = context / context.norm(dim=2, keepdim=True)
    unit_candidates = candidates / candidates.norm(dim=2, keepdim=True)
    cosine = torch.matmul(unit_context, unit_candidates.transpose(1, 2)).squeeze(-1)  # (n, length)
    # padding never counts (a fill, not an addition: a pad's hidden state may be all zeros)
    cosine = cosine.masked_fill(context_mask == 0, torch.finfo(cosine.dtype).min)
    return cosine.max(dim=-1).values


def contrastive_scores(probs: torch.Tensor, penalty: torch.Tensor, alpha: float) -> torch.Tensor:
    """(1 - alpha) * model confidence - alpha * degeneration penalty, elementwise."""
    return (1.0 - alpha) * probs - alpha * penalty


def _last_hidden(out: ModelOutput) -> torch.Tensor:
    if not out.hidden_states:
        raise ValueError(
            "contrastive search needs the model's hidden states "
            "(forward(output_hidden_states=True) returned none)"
        )
    return out.hidden_states[-1]


class ContrastiveSearch(TokenByToken):
    """Contrastive search; state between steps: the context hidden states of every row and
    the logits (plus optional attentions / hidden states) of the next step."""

    mode = "contrastive_search"

    def start(self, ctx) -> None:
        super().start(ctx)
        self.context: torch.Tensor | None = None  # (rows, length, hidden)
        self.next_output: ModelOutput | None = None  # logits (rows, 1, vocab) for next step

    # -- forward: the prompt once; afterwards the winner's logits from the last select ---
    def forward(self, ctx) -> ModelOutput:
        if getattr(self, "next_output", None) is not None:
            return self.next_output
        # first step (or a switch to contrastive mid-ctx): hidden states of every position
        ctx.kv_cache.crop(0)
        out = self._forward_rows(ctx, ctx.sequences, ctx.attention_mask, ctx.kv_cache)
        self.context = _last_hidden(out)  # (rows, length, hidden)
        return out

    @staticmethod
    def _forward_rows(ctx, new, mask, cache, logits_to_keep=1, hidden=True) -> ModelOutput:
        return ctx.forward(
            new, mask=mask, cache=cache, logits_to_keep=logits_to_keep, hidden_states=hidden
        )

    def leave(self, ctx) -> None:
        # the winner's forward already put the last token in the cache: take it out again
        if self.next_output is not None:
            ctx.kv_cache.crop(ctx.sequences.shape[1] - 1)

    # -- select --------------------------------------------------------------------------
    def select(self, ctx, scores: torch.Tensor) -> Selection:
        k, alpha = int(self.config.top_k), float(self.config.penalty_alpha)
        rows = scores.shape[0]
        probs = torch.softmax(scores, dim=-1)
        top_probs, top_ids = torch.topk(probs, dim=-1, k=k)  # (rows, k)
        mask = torch.cat([ctx.attention_mask, ctx.attention_mask.new_ones((rows, 1))], dim=-1)
        if self.config.low_memory:
            out = self._candidates_one_by_one(ctx, top_ids, mask)
        else:
            ctx.kv_cache.reorder(torch.arange(rows, device=top_ids.device).repeat_interleave(k))
            out = self._forward_rows(
                ctx, top_ids.reshape(-1, 1), mask.repeat_interleave(k, 0), ctx.kv_cache
            )
        cand_hidden = _last_hidden(out)  # (rows * k, 1, hidden)
        penalty = degeneration_penalty(
            self.context.repeat_interleave(k, dim=0),
            cand_hidden,
            ctx.attention_mask.repeat_interleave(k, dim=0),
        )  # (rows * k,)
        score = contrastive_scores(top_probs.reshape(-1), penalty, alpha).view(rows, k)
        best = score.max(dim=-1).indices  # (rows,)
        winners = best + torch.arange(rows, device=best.device) * k  # rows of the k-fold batch
        tokens = top_ids[torch.arange(rows), best]
        if self.config.low_memory:  # the winner runs again to extend the (rows) cache
            self._forward_rows(ctx, tokens[:, None], mask, ctx.kv_cache, hidden=False)
        else:
            ctx.kv_cache.reorder(winners)
        self.context = torch.cat([self.context, cand_hidden[winners]], dim=1)
        self.next_output = self._winner_output(out, winners, ctx)
        info = ContrastiveStep(
            candidates=top_ids.detach().cpu(),
            confidence=top_probs.detach().cpu(),
            penalty=penalty.view(rows, k).detach().cpu(),
            score=score.detach().cpu(),
            chosen=best.detach().cpu(),
        )
        return Selection(self._pad_finished(ctx, tokens), info=info)

    def _candidates_one_by_one(self, ctx, top_ids, mask) -> ModelOutput:
        outs = []
        for i in range(top_ids.shape[1]):
            outs.append(self._forward_rows(ctx, top_ids[:, i : i + 1], mask, ctx.kv_cache))
            ctx.kv_cache.crop(-1)
        # interleave to the (rows * k) order of the batched path
        logits = torch.stack([o.logits for o in outs], dim=1).flatten(0, 1)
        hidden = tuple(
            torch.stack(layer, dim=1).flatten(0, 1)
            for layer in zip(*(o.hidden_states for o in outs), strict=True)
        )
        attn = None
        if outs[0].attentions is not None:
            attn = tuple(
                torch.stack(layer, dim=1).flatten(0, 1)
                for layer in zip(*(o.attentions for o in outs), strict=True)
            )
        return ModelOutput(logits=logits, hidden_states=hidden, attentions=attn)

    @staticmethod
    def _winner_output(out: ModelOutput, winners, ctx) -> ModelOutput:
        cfg = ctx.gen_config

        def pick(layers):
            return None if layers is None else tuple(layer[winners] for layer in layers)

        return ModelOutput(
            logits=out.logits[winners][:, -1:, :],
            hidden_states=pick(out.hidden_states) if cfg.output_hidden_states else None,
            attentions=pick(out.attentions) if cfg.output_attentions else None,
        )

    def force(self, ctx, scores: torch.Tensor, token_id: int) -> Selection:
        sel = super().force(ctx, scores, token_id)
        rows = scores.shape[0]
        mask = torch.cat([ctx.attention_mask, ctx.attention_mask.new_ones((rows, 1))], dim=-1)
        out = self._forward_rows(ctx, sel.tokens[:, None], mask, ctx.kv_cache)
        self.context = torch.cat([self.context, _last_hidden(out)], dim=1)
        self.next_output = ModelOutput(
            logits=out.logits[:, -1:, :], hidden_states=out.hidden_states, attentions=out.attentions
        )
        return sel
