"""What a decoding strategy is: the part of a step that *chooses* tokens.

The engine (genlab/engine.py) owns the loop: model forward, logits processors, output
recording, cache updates, hooks, streaming. A strategy plugs in at three places:

* ``process(run, logits)``: turn raw logits into the scores it chooses from (default: the
  logits processors; beam search first takes a log-softmax);
* ``select(run, scores) -> Selection``: the next token of every row, and for beam-like
  strategies the parent row each new row continues (the engine reorders the cache);
* ``update(run, selection)``: bookkeeping after the tokens were appended (finished rows,
  stopping criteria), and ``finalize(run)`` for the output fields it owns.

Strategies keep their state in plain attributes; ``get_state``/``set_state`` give the
engine snapshots for ``rewind`` and ``fork``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, ClassVar

import torch


@dataclass
class Selection:
    """The outcome of one ``select``.

    tokens: (rows,) next token per row (after the strategy's reordering), or (rows, n)
        when a step appends several tokens (an accepted draft in assisted decoding)
    parents: (rows,) row each new row continues, or None when rows keep their order
    info: strategy-specific details for traces (beam candidates, ...)
    scores, logits: with (rows, n) tokens, the n processed scores and raw logits
        (each (rows, vocab)) the engine records in place of the step's single one
    """

    tokens: torch.LongTensor
    parents: torch.LongTensor | None = None
    info: dict[str, Any] | None = None
    scores: tuple[torch.Tensor, ...] | None = None
    logits: tuple[torch.Tensor, ...] | None = None


class Strategy:
    """Base class; subclasses set ``mode`` and implement ``select``."""

    mode: ClassVar[str] = ""
    #: rows of the running batch reorder between steps (beam search)
    reorders_rows: ClassVar[bool] = False

    def __init__(self, config) -> None:
        self.config = config

    # -- set-up -------------------------------------------------------------------------
    @staticmethod
    def rows_per_input(config) -> int:
        """How many running rows each input row becomes."""
        return int(config.num_return_sequences or 1)

    def start(self, run) -> None:
        """Called once before the first step, after inputs are expanded."""

    # -- one step ------------------------------------------------------------------------
    def forward(self, run):
        """The model output whose last position gives this step's logits.

        Default: one forward over the tokens the cache has not seen. Strategies that run the
        model themselves during ``select`` (contrastive search, assisted decoding) return
        logits they already computed, or draft tokens first.
        """
        return run._forward()

    def process(self, run, logits: torch.Tensor) -> torch.Tensor:
        return run.apply_processors(run.sequences, logits)

    def select(self, run, scores: torch.Tensor) -> Selection:
        raise NotImplementedError

    def update(self, run, selection: Selection) -> None:
        """Bookkeeping after the new tokens were appended to ``run.sequences``."""

    def is_done(self, run) -> bool:
        raise NotImplementedError

    def force(self, run, scores: torch.Tensor, token_id: int) -> Selection:
        """Select ``token_id`` for every running row (``run.force``)."""
        tokens = torch.full((scores.shape[0],), token_id, dtype=torch.long, device=scores.device)
        return Selection(tokens)

    def finalize(self, run) -> dict[str, Any]:
        """Output fields the strategy owns (``sequences`` at least)."""
        return {"sequences": run.sequences}

    # -- snapshots -----------------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        return {k: _clone(v) for k, v in vars(self).items() if k != "config"}

    def set_state(self, state: dict[str, Any]) -> None:
        for k, v in state.items():
            setattr(self, k, _clone(v))


def _clone(v):
    if isinstance(v, torch.Tensor):
        return v.clone()
    return copy.deepcopy(v)
