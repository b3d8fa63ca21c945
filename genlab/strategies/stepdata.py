"""What a strategy tells the trace about one step: one typed value per strategy family.

A strategy's :class:`~genlab.strategies.base.Selection` may carry one of these as
``info``; the engine puts it on the :class:`~genlab.run.engine.Step` record, and the trace,
its tables, plots and widgets read its fields (never keys of a free-form dict):

* :class:`BeamStep` -- beam search, beam sampling, group and constrained beam search:
  every candidate scored (:class:`BeamCandidates`, with a :class:`CandidateFate` and a
  :class:`CandidateSource` each), the pool of finished hypotheses and the early-stop rule;
* :class:`AssistedStep` -- assisted decoding and prompt lookup: the draft (and its
  :class:`DraftSource`), how much of it the model accepted, the tokens added;
* :class:`ContrastiveStep` -- contrastive search: the candidates, their confidence,
  degeneration penalty and score;
* :class:`DolaStep` -- DoLa: the premature layers, their divergence, the layer chosen.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import Enum

import torch


class CandidateFate(str, Enum):
    """What happened to a beam candidate (the ``fate`` column of the beam tree)."""

    KEPT = "kept"  # continues as a running beam
    FINISHED = "finished"  # ended (EOS) and entered the pool of hypotheses
    REJECTED = "rejected"  # ended, but the pool did not take it
    PRUNED = "pruned"  # ranked below the beams kept
    DIVERSITY = "diversity"  # in the group's top only without the diversity penalty
    CONSTRAINT = "constraint"  # dropped by constrained beam search


class CandidateSource(str, Enum):
    """Where a beam candidate came from."""

    SEARCH = "search"  # the search's own top-K
    CONSTRAINT = "constraint"  # a constraint's proposal
    UNPENALIZED = "unpenalized"  # the group's top-K without the diversity penalty


class DraftSource(str, Enum):
    """What drafted the tokens an assisted step verified."""

    ASSISTANT = "assistant"  # an assistant model, or the model's own first layers
    PROMPT_LOOKUP = "prompt_lookup"  # n-grams of the prompt


class TokenOrigin(str, Enum):
    """Where an accepted token of an assisted step came from."""

    DRAFT = "draft"  # drafted, then accepted by the model
    MODEL = "model"  # the model's own choice (after the accepted draft, or a correction)
    FORCED = "forced"  # queued with Run.force


#: candidate fates and sources in the order of the integer codes a step's tensors hold
FATES: tuple[CandidateFate, ...] = tuple(CandidateFate)
SOURCES: tuple[CandidateSource, ...] = tuple(CandidateSource)


@dataclass(frozen=True)
class BeamCandidates:
    """Every candidate one beam step scored, as flat CPU columns (one entry each).

    batch: input row; rank: among its input's candidates, best first; parent: the beam
    (within the input) it continues; parent_node, node: ids in the beam tree; token;
    token_logprob: processed log-prob of the token after its parent; score: accumulated;
    normalized: score / generated_length ** length_penalty; fate, source: codes into
    :data:`FATES` / :data:`SOURCES`; group: beam group (0 outside group beam search);
    beam: the running beam it became, -1 if none; slot: its pool slot, -1 if none.
    """

    batch: torch.Tensor
    rank: torch.Tensor
    parent: torch.Tensor
    parent_node: torch.Tensor
    node: torch.Tensor
    token: torch.Tensor
    token_logprob: torch.Tensor
    score: torch.Tensor
    normalized: torch.Tensor
    fate: torch.Tensor
    source: torch.Tensor
    group: torch.Tensor
    beam: torch.Tensor
    slot: torch.Tensor

    @classmethod
    def of(cls, **columns) -> BeamCandidates:
        """Candidates from columns of any shape (flattened, detached, copied to the CPU)."""
        return cls(
            **{
                name: torch.as_tensor(value).detach().reshape(-1).cpu().clone()
                for name, value in columns.items()
            }
        )

    def concat(self, other: BeamCandidates) -> BeamCandidates:
        """These candidates followed by ``other``'s (dtypes of ``self`` kept)."""
        return BeamCandidates(
            **{
                f.name: torch.cat(
                    [getattr(self, f.name), getattr(other, f.name).to(getattr(self, f.name).dtype)]
                )
                for f in fields(self)
            }
        )

    def fates(self) -> list[CandidateFate]:
        """The fate of every candidate."""
        return [FATES[i] for i in self.fate.tolist()]

    def sources(self) -> list[CandidateSource]:
        """The source of every candidate."""
        return [SOURCES[i] for i in self.source.tolist()]


@dataclass(frozen=True)
class PoolEntry:
    """A finished hypothesis in a beam search's pool after a step."""

    batch: int
    group: int
    slot: int
    score: float  # length-normalised
    tokens: tuple[int, ...]  # generated tokens
    node: int  # its last node in the beam tree


@dataclass(frozen=True)
class EarlyStop:
    """The stopping decision of a beam step, per input.

    rule: the config's ``early_stopping``; input_done: (inputs,) bools; done: the whole
    search is over. Beam search and beam sampling also give, per input, the best running
    score, the best score still reachable, the worst finished score, the number of
    finished hypotheses and whether a running beam can still improve on the pool; group
    beam search gives each group's flag (group_done).
    """

    rule: bool | str
    length_penalty: float
    generated_length: int
    input_done: torch.Tensor
    done: bool
    best_running: torch.Tensor | None = None
    best_possible: torch.Tensor | None = None
    worst_finished: torch.Tensor | None = None
    n_finished: torch.Tensor | None = None
    improvable: torch.Tensor | None = None
    group_done: torch.Tensor | None = None  # (inputs, groups): group beam search


@dataclass(frozen=True)
class BeamStep:
    """One step of a beam strategy: ``kind`` is its generation mode."""

    kind: str
    candidates: BeamCandidates
    pool: tuple[PoolEntry, ...]
    early_stop: EarlyStop


@dataclass(frozen=True)
class AssistedStep:
    """One iteration of assisted decoding (one engine step, several tokens).

    source: what drafted; num_assistant_tokens: the draft budget; drafted: the draft's
    tokens; accepted: how many of them the model accepted; rejected: the rest; added:
    the tokens appended (the accepted draft plus the model's own next token).
    """

    source: DraftSource
    num_assistant_tokens: float
    drafted: tuple[int, ...]
    accepted: int
    rejected: tuple[int, ...]
    added: tuple[int, ...]
    forced: bool = False

    def origin(self, position: int) -> TokenOrigin:
        """Where the ``position``-th added token came from."""
        if self.forced:
            return TokenOrigin.FORCED
        return TokenOrigin.DRAFT if position < self.accepted else TokenOrigin.MODEL


@dataclass(frozen=True)
class ContrastiveStep:
    """One contrastive-search step: per row, the top-k candidates (rows, k), their
    confidence (model probability), degeneration penalty, score, and the index chosen."""

    candidates: torch.Tensor
    confidence: torch.Tensor
    penalty: torch.Tensor
    score: torch.Tensor
    chosen: torch.Tensor


@dataclass(frozen=True)
class DolaStep:
    """One DoLa step: the candidate premature layers, their divergence from the final
    layer (rows, layers) and the layer contrasted with."""

    layers: tuple[int, ...]
    divergence: torch.Tensor | None
    chosen_layer: int | None


#: any of the above
StepData = BeamStep | AssistedStep | ContrastiveStep | DolaStep

__all__ = [
    "FATES",
    "SOURCES",
    "AssistedStep",
    "BeamCandidates",
    "BeamStep",
    "CandidateFate",
    "CandidateSource",
    "ContrastiveStep",
    "DolaStep",
    "DraftSource",
    "EarlyStop",
    "PoolEntry",
    "StepData",
    "TokenOrigin",
]
