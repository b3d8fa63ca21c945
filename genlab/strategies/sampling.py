"""Token-by-token strategies: greedy search and multinomial sampling.

Every row continues itself; a row that has finished keeps receiving ``pad_token_id``.
"""

from __future__ import annotations

import torch

from .base import Selection, Strategy


class TokenByToken(Strategy):
    """Shared bookkeeping: finished rows are padded, stopping criteria end rows."""

    def start(self, run) -> None:
        # (rows,) 1 while a row is still generating, as the reference keeps it
        self.unfinished = torch.ones(run.sequences.shape[0], dtype=torch.long, device=run.device)

    def choose(self, scores: torch.Tensor) -> torch.LongTensor:
        raise NotImplementedError

    def select(self, run, scores: torch.Tensor) -> Selection:
        return Selection(self._pad_finished(run, self.choose(scores)))

    def force(self, run, scores: torch.Tensor, token_id: int) -> Selection:
        return Selection(self._pad_finished(run, super().force(run, scores, token_id).tokens))

    def _pad_finished(self, run, tokens: torch.LongTensor) -> torch.LongTensor:
        if run.has_eos_stopping and run.pad_token_id is not None:
            keep = self.unfinished
            tokens = tokens * keep + run.pad_token_id * (1 - keep)
        return tokens

    def update(self, run, selection: Selection) -> None:
        done = run.stopping_criteria(run.sequences, run.recorded_scores())
        self.unfinished = self.unfinished & ~done

    def is_done(self, run) -> bool:
        return bool(self.unfinished.max() == 0)


class GreedySearch(TokenByToken):
    """The most probable token at every step."""

    mode = "greedy_search"

    def choose(self, scores: torch.Tensor) -> torch.LongTensor:
        return torch.argmax(scores, dim=-1)


class MultinomialSampling(TokenByToken):
    """One draw from softmax(scores); consumes random numbers exactly as the reference."""

    mode = "sample"

    def choose(self, scores: torch.Tensor) -> torch.LongTensor:
        probs = torch.softmax(scores, dim=-1)
        return torch.multinomial(probs, num_samples=1).squeeze(1)
