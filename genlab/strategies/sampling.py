"""Token-by-token strategies: greedy search and multinomial sampling.

Every row continues itself; a row that has finished keeps receiving ``pad_token_id``.
"""

from __future__ import annotations

import torch

from .base import Selection, Strategy


class TokenByToken(Strategy):
    """Shared bookkeeping: finished rows are padded, stopping criteria end rows."""

    family = "token"

    def start(self, ctx) -> None:
        """Every row starts unfinished."""
        # (rows,) 1 while a row is still generating, as the reference keeps it
        self.unfinished = torch.ones(ctx.sequences.shape[0], dtype=torch.long, device=ctx.device)

    def rule(self, ctx, scores: torch.Tensor) -> torch.LongTensor:
        """One token per row from ``scores`` (rows, vocab), by the strategy's rule (random
        draws come from ``ctx.random``, the run's own generator); :meth:`select` wraps it
        in a :class:`Selection`, finished rows padded."""
        raise NotImplementedError

    def select(self, ctx, scores: torch.Tensor) -> Selection:
        return Selection(self._pad_finished(ctx, self.rule(ctx, scores)))

    def force(self, ctx, scores: torch.Tensor, token_id: int) -> Selection:
        return Selection(self._pad_finished(ctx, super().force(ctx, scores, token_id).tokens))

    def _pad_finished(self, ctx, tokens: torch.LongTensor) -> torch.LongTensor:
        if ctx.has_eos_stopping and ctx.pad_token_id is not None:
            keep = self.unfinished
            tokens = tokens * keep + ctx.pad_token_id * (1 - keep)
        return tokens

    def update(self, ctx, selection: Selection) -> None:
        done = ctx.criteria_met(ctx.sequences)
        self.unfinished = self.unfinished & ~done

    def is_done(self, ctx) -> bool:
        return bool(self.unfinished.max() == 0)


class GreedySearch(TokenByToken):
    """The most probable token at every step."""

    mode = "greedy_search"

    def rule(self, ctx, scores: torch.Tensor) -> torch.LongTensor:
        return torch.argmax(scores, dim=-1)


class MultinomialSampling(TokenByToken):
    """One draw from softmax(scores); consumes random numbers exactly as the reference."""

    mode = "sample"

    def rule(self, ctx, scores: torch.Tensor) -> torch.LongTensor:
        probs = torch.softmax(scores, dim=-1)
        return ctx.random.multinomial(probs, num_samples=1).squeeze(1)
