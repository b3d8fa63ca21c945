"""What a decoding strategy is: the part of a step that *chooses* tokens.

The engine (genlab/run/engine.py) owns the loop: output recording, cache updates, hooks,
streaming, transactions. A strategy never sees the Run: every method receives a
:class:`~genlab.run.context.StepContext` ``ctx`` (read-only facts, ``ctx.forward``,
``ctx.process``, ``ctx.criteria_met``, ``ctx.fire``). It plugs in at these places:

* ``forward(ctx)``: the model output whose last position gives this step's logits
  (default ``ctx.forward()``);
* ``process(ctx, logits)``: turn raw logits into the scores it chooses from (default: the
  logits processors; beam search first takes a log-softmax);
* ``select(ctx, scores) -> Selection`` / ``force(ctx, scores, id)``: the next token of
  every row, and for beam-like strategies the parent row each new row continues;
* ``update(ctx, selection)``: bookkeeping after the tokens were appended (finished rows,
  stopping criteria), ``is_done(ctx)``, and ``finalize(ctx)`` for its output fields.

Strategies keep their state in plain attributes; ``get_state``/``set_state`` give the
engine its undo points (a failed step restores them) and the snapshots of ``rewind`` and
``fork``. ``family`` says which strategies can take over each other's state when the
generation mode changes between steps; ``leave(ctx)`` hands the cache back in the shape
every other strategy expects.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from .stepdata import StepData


@dataclass
class Selection:
    """The outcome of one ``select``.

    tokens: (rows,) next token per row (after the strategy's reordering), or (rows, n)
        when a step appends several tokens (an accepted draft in assisted decoding)
    parents: (rows,) row each new row continues, or None when rows keep their order
    info: the strategy's step data for traces (:data:`genlab.strategies.stepdata.StepData`: a
        ``BeamStep``, ``AssistedStep``, ...), or None
    scores, logits: with (rows, n) tokens, the n processed scores and raw logits
        (each (rows, vocab)) the engine records in place of the step's single one
    """

    tokens: torch.LongTensor
    parents: torch.LongTensor | None = None
    info: StepData | None = None
    scores: tuple[torch.Tensor, ...] | None = None
    logits: tuple[torch.Tensor, ...] | None = None


class Strategy:
    """Base class; subclasses set ``mode`` and implement ``select``."""

    mode: ClassVar[str] = ""
    #: rows of the running batch reorder between steps (beam search)
    reorders_rows: ClassVar[bool] = False
    #: strategies of one family can take over each other's state mid-run
    family: ClassVar[str] = ""

    def __init__(self, config) -> None:
        self.config = config

    # -- set-up -------------------------------------------------------------------------
    @staticmethod
    def rows_per_input(config) -> int:
        """How many running rows each input row becomes."""
        return int(config.num_return_sequences or 1)

    def start(self, ctx) -> None:
        """Called once before the first step, after inputs are expanded."""

    # -- one step ------------------------------------------------------------------------
    def forward(self, ctx):
        """The model output whose last position gives this step's logits.

        Default: one forward over the tokens the cache has not seen. Strategies that run the
        model themselves during ``select`` (contrastive search, assisted decoding) return
        logits they already computed, or draft tokens first.
        """
        return ctx.forward()

    def process(self, ctx, logits: torch.Tensor) -> torch.Tensor:
        """The scores to choose from: raw ``logits`` (rows, vocab) through the logits
        processors (``ctx.process``; the engine has bound the run's generator for their
        draws: :func:`~genlab.processors.samplers.drawing_from`)."""
        return ctx.process(ctx.sequences, logits)

    def select(self, ctx, scores: torch.Tensor) -> Selection:
        """Choose the next token of every row from ``scores`` (rows, vocab)."""
        raise NotImplementedError

    def update(self, ctx, selection: Selection) -> None:
        """Bookkeeping after the new tokens were appended to ``ctx.sequences``."""

    def is_done(self, ctx) -> bool:
        """True when the generation is over (after :meth:`update`)."""
        raise NotImplementedError

    def force(self, ctx, scores: torch.Tensor, token_id: int) -> Selection:
        """Select ``token_id`` for every running row (what ``Run.force`` queued)."""
        tokens = torch.full((scores.shape[0],), token_id, dtype=torch.long, device=scores.device)
        return Selection(tokens)

    def leave(self, ctx) -> None:
        """Called when the run switches to another strategy: leave the cache holding every
        token but the last (what a plain forward expects)."""

    def finalize(self, ctx) -> dict[str, Any]:
        """Output fields the strategy owns (``sequences`` at least)."""
        return {"sequences": ctx.sequences}

    # -- snapshots -----------------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        """Copies of everything the strategy keeps between steps (not its config)."""
        return {k: _clone(v) for k, v in vars(self).items() if k != "config"}

    def set_state(self, state: dict[str, Any]) -> None:
        """Back to a :meth:`get_state` result (copied again: the snapshot stays intact)."""
        for k, v in state.items():
            setattr(self, k, _clone(v))


def _clone(v):
    if isinstance(v, torch.Tensor):
        return v.clone()
    return copy.deepcopy(v)
