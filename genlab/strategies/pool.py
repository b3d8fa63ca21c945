"""Finished hypotheses kept in pools: the bookkeeping shared by group and constrained beam search.

Plain beam search keeps its finished hypotheses in tensors (:mod:`genlab.strategies.beam`).
Group beam search keeps one pool per (input, group) and constrained beam search one per
input; both use the pieces here:

* :class:`Hypotheses` -- the ``size`` best finished hypotheses of one pool;
* :func:`write_hypotheses` -- the best ``keep`` of every input, padded, as finalize writes them;
* :func:`pool_entries` -- the pools as :class:`~genlab.strategies.stepdata.PoolEntry` values
  (the trace);
* :func:`pooled_output` / :func:`pooled_beams` -- a pooled search's output fields and its
  running and finished beams of one input.
"""

from __future__ import annotations

from typing import Any

import torch

from ..ids import eos_token_ids
from .beam import NEG
from .stepdata import PoolEntry

__all__ = ["Hypotheses", "pool_entries", "pooled_beams", "pooled_output", "write_hypotheses"]


class Hypotheses:
    """The ``size`` best finished hypotheses of one input (or one input's group).

    Each entry is ``(score, sequence, beam_indices, node)`` with
    ``score = sum_logprobs / generated_length ** length_penalty``. A new hypothesis enters
    while there is room or when it beats the worst one, which then leaves.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.entries: list[tuple[float, torch.LongTensor, Any, int]] = []
        self.worst = 1.0e9

    def __len__(self) -> int:
        return len(self.entries)

    def add(
        self,
        sequence,
        sum_logprobs: float,
        generated: int,
        length_penalty: float,
        beam_indices=None,
        node: int = -1,
    ) -> bool:
        """Offer a hypothesis; returns True when it was kept."""
        score = sum_logprobs / (generated**length_penalty)
        if len(self) >= self.size and not score > self.worst:
            return False
        self.entries.append((score, sequence, beam_indices, node))
        if len(self) > self.size:
            ranked = sorted((s, i) for i, (s, *_rest) in enumerate(self.entries))
            del self.entries[ranked[0][1]]
            self.worst = ranked[1][0]
        else:
            self.worst = min(score, self.worst)
        return True

    def is_done(
        self,
        best_sum_logprobs: float,
        length: int,
        prompt_length: int,
        early_stopping,
        length_penalty: float,
        max_length: int,
    ) -> bool:
        """Full, and (by the early_stopping rule) no running beam can beat the worst one.

        length: the sequence length the candidates were scored at (prompt included)."""
        if len(self) < self.size:
            return False
        if early_stopping is True:
            return True
        if early_stopping is False or length_penalty <= 0.0:
            bound = length - prompt_length
        else:  # "never" with a positive length penalty: the longest possible hypothesis
            if max_length <= prompt_length:
                raise ValueError(
                    f"max_length ({max_length}) must be larger than the prompt length "
                    f"({prompt_length}) for early_stopping='never'"
                )
            bound = max_length - prompt_length
        return self.worst >= best_sum_logprobs / bound**length_penalty


def write_hypotheses(
    pools: list[list[Hypotheses]],
    keep: int,
    max_length: int | None,
    pad_token_id,
    eos: list[int],
    like: torch.LongTensor,
):
    """The best ``keep`` hypotheses of every input (pools[b] are that input's pools) as the
    reference's finalize writes them: (sequences, scores, beam_indices or None, nodes).

    Shorter sequences are padded with ``pad_token_id`` and get the first EOS id right after
    their end when it fits; beam_indices are -1 after their end.
    """
    best = []
    for pools_b in pools:
        entries = sorted((e for pool in pools_b for e in pool.entries), key=lambda e: e[0])
        for _ in range(keep):
            best.append(entries.pop())
    lengths = [len(e[1]) for e in best]
    width = max(lengths) + 1
    if max_length is not None:
        width = min(width, max_length)
    seqs = like.new_empty((len(best), width))
    if min(lengths) != max(lengths):
        if pad_token_id is None:
            raise ValueError("pad_token_id must be set to pad hypotheses of different lengths")
        seqs.fill_(int(pad_token_id))
    indices = None
    if best and best[0][2] is not None:
        indices = torch.full((len(best), width), -1, dtype=like.dtype, device=like.device)
    scores = torch.zeros(len(best), dtype=torch.float32, device=like.device)
    for i, (score, seq, idx, _node) in enumerate(best):
        seqs[i, : lengths[i]] = seq
        if indices is not None and idx is not None:
            indices[i, : len(idx)] = torch.as_tensor(idx, dtype=like.dtype)
        if lengths[i] < width:
            seqs[i, lengths[i]] = eos[0]
        scores[i] = score
    nodes = torch.tensor([e[3] for e in best], dtype=torch.long)
    return seqs, scores, indices, nodes


def pool_entries(pools, prompt_length: int) -> tuple[PoolEntry, ...]:
    """The finished hypotheses of ``pools`` (per input, per group: Hypotheses) as
    :class:`~genlab.strategies.stepdata.PoolEntry` values, slot by slot."""
    out = []
    for b, pools_b in enumerate(pools):
        for g, pool in enumerate(pools_b):
            for slot, (score, seq, _idx, node) in enumerate(pool.entries):
                out.append(
                    PoolEntry(
                        batch=b,
                        group=g,
                        slot=slot,
                        score=float(score),
                        tokens=tuple(seq[prompt_length:].tolist()),
                        node=int(node),
                    )
                )
    return tuple(out)


def pooled_output(strategy, ctx, pools, keep: int) -> dict[str, Any]:
    """The output fields of a search that keeps its finished hypotheses in ``pools``
    (group and constrained beam search): the best ``keep`` per input, padded."""
    cfg = ctx.gen_config
    max_length = getattr(ctx.stopping_criteria, "max_length", None)
    if not strategy.done:  # stopped or interrupted early: no EOS column after the last step
        max_length = ctx.sequences.shape[1]
    seqs, scores, indices, nodes = write_hypotheses(
        pools,
        keep,
        max_length,
        cfg.pad_token_id,
        eos_token_ids(cfg) or [cfg.pad_token_id],
        ctx.sequences,
    )
    return {
        "sequences": seqs,
        "sequences_scores": scores if cfg.output_scores else None,
        "beam_indices": indices if strategy.track else None,
        "returned_nodes": nodes,  # the winners' beam-tree nodes
    }


def pooled_beams(strategy, ctx, batch: int = 0) -> list[tuple[list[int], float, bool]]:
    """Running beams and finished hypotheses of one input, best first:
    (generated ids, length-normalised score, finished)."""
    n, p = strategy.num_beams, strategy.prompt_length
    generated = max(ctx.sequences.shape[1] - p, 1)
    penalty = strategy.config.length_penalty
    out = []
    for i in range(n):
        row = batch * n + i
        score = float(strategy.beam_scores[row])
        if score > NEG / 2:
            out.append((ctx.sequences[row, p:].tolist(), score / generated**penalty, False))
    for pool in strategy.pools[batch]:
        for score, seq, _idx, _node in pool.entries:
            out.append((seq[p:].tolist(), float(score), True))
    out.sort(key=lambda x: -x[1])
    return out
