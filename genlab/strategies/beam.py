"""Beam search and beam sampling, vectorised, with the bookkeeping of transformers 4.56.2.

One step for every input ``b`` of the batch and its ``num_beams`` running beams::

    scores            (b*beams, vocab) log-softmax of the logits, then the processors
    accumulated       (b, beams*vocab) scores + the running score of each beam
    candidates        K = max(2, 1 + n_eos) * num_beams: the top-K (beam search) or K
                      draws without replacement from softmax(accumulated) (beam sampling)
    stopping          the stopping criteria (EOS, max length, stop strings) on every
                      candidate sequence
    running beams     the best num_beams candidates that did not stop
    hypothesis pool   a stopped candidate among the first num_beams enters the pool of
                      finished hypotheses with score / generated_length ** length_penalty,
                      if it beats the worst one (num_beams are kept per input)
    early stop        see :func:`early_stop_check`

Everything is a tensor over (batch, beams) or (batch, K); there is no per-beam Python loop.
With ``trace=True`` (or a ``beam.candidates`` hook) every candidate is reported with its
fate (a :class:`~genlab.strategies.stepdata.BeamStep`); the hook observes (its return value is
ignored).

Steering: ``run.force(token)`` extends every running beam with the token at the next
step (the engine calls :meth:`BeamSearch.force`); ``length_penalty``, ``early_stopping``
and ``max_length`` may change between steps, ``num_beams`` and ``num_return_sequences``
may not. A ``select`` hook that replaces tokens changes the sequences only (the beam
scores stay those of the chosen candidates): use ``run.force`` to steer a beam search.

Example::

    (Not run as a test: it needs a model and prompt ids of your own (``model``, ``ids``); the tests
    run these calls.)

    >>> out = genlab.generate(model, ids, num_beams=4, max_new_tokens=8,   # doctest: +SKIP
    ...                       return_dict_in_generate=True, output_scores=True)
    >>> out.sequences_scores, out.beam_indices                            # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any, ClassVar, NamedTuple

import torch

from ..ids import eos_token_ids
from .base import Selection, Strategy
from .stepdata import FATES, BeamCandidates, BeamStep, EarlyStop, PoolEntry

#: a very negative score: "this beam must not continue / this slot is empty"
NEG = -1.0e9
#: the integer codes of the candidate fates (genlab.strategies.stepdata.CandidateFate, in FATES
#: order)
KEPT, FINISHED, REJECTED, PRUNED, DIVERSITY, CONSTRAINT = range(len(FATES))


# ----------------------------------------------------------------------------------------
# small shared helpers (also used by group and constrained beam search)
# ----------------------------------------------------------------------------------------
def candidates_per_input(config, beams: int | None = None) -> int:
    """K: how many candidates each input (or beam group of ``beams``) keeps per step,
    ``max(2, 1 + n_eos) * beams`` (``beams``: the config's num_beams by default)."""
    beams = int(config.num_beams) if beams is None else int(beams)
    return max(2, 1 + len(eos_token_ids(config))) * beams


def fill_token(config) -> int:
    """The id written after a hypothesis ends: pad, else the first EOS (-1 without EOS).

    The reference's expression treats a pad id of 0 as missing, so 0 falls back to EOS.
    """
    eos = eos_token_ids(config)
    if not eos:
        return -1
    return int(config.pad_token_id) if config.pad_token_id else eos[0]


def is_listening(ctx) -> bool:
    """True when a tracer or a ``beam.candidates`` hook wants the candidate payload."""
    return ctx.has("beam.candidates")


def publish(ctx, payload: BeamStep) -> BeamStep:
    """Fire the ``beam.candidates`` hook (observe only) and return the payload."""
    return ctx.fire("beam.candidates", payload)


def stop_flags(ctx, sequences: torch.LongTensor) -> torch.BoolTensor:
    """The stopping criteria on ``sequences`` (rows, len) as a (rows,) bool tensor."""
    return ctx.criteria_met(sequences)


def _gather_rows(x: torch.Tensor, index: torch.LongTensor) -> torch.Tensor:
    """x (B, N, ...) gathered along dim 1 with index (B, M) -> (B, M, ...)."""
    while index.dim() < x.dim():
        index = index.unsqueeze(-1)
    return torch.take_along_dim(x, index, dim=1)


# ----------------------------------------------------------------------------------------
# the early-stopping rule
# ----------------------------------------------------------------------------------------
def early_stop_check(
    still_open: torch.BoolTensor,
    best_running: torch.Tensor,
    pool_scores: torch.Tensor,
    pool_finished: torch.BoolTensor,
    generated_length: int,
    max_new: int,
    early_stopping: bool | str,
    length_penalty: float,
) -> tuple[torch.BoolTensor, torch.Tensor, torch.Tensor]:
    """Can an input's running beams still beat its finished hypotheses?

    still_open: (B, 1) the previous answer (once False it stays False);
    best_running: (B, 1) the best running beam's accumulated score;
    pool_scores / pool_finished: (B, beams) the hypothesis pool;
    generated_length: tokens generated so far; max_new: ``max_length - prompt_length``.

    The best score a running beam can reach is taken at the current length, or, for
    ``early_stopping="never"`` with a positive length penalty, at the maximum length.
    It is compared with the worst finished hypothesis (-1e9 while a slot is empty).

    Returns (still_open (B, 1), best_possible (B, 1), worst_finished (B, beams)).
    """
    if early_stopping == "never" and length_penalty > 0.0:
        length = max_new
    else:
        length = generated_length
    best_possible = best_running / (length**length_penalty)
    worst = torch.where(pool_finished, pool_scores.min(dim=1, keepdim=True)[0], NEG)
    still_open = still_open & (best_possible > worst).any(dim=-1, keepdim=True)
    return still_open, best_possible, worst


# ----------------------------------------------------------------------------------------
# the strategy
# ----------------------------------------------------------------------------------------


class _Moves(NamedTuple):
    """Where one beam step's candidates went, as :meth:`BeamSearch._advance` computed it (for
    the trace): rows (B, K) their running rows; normalized (B, K) their length-normalised
    scores; hits (B, K) stopped; just_finished (B, K) stopped among the first num_beams;
    keep (B, n) the candidates that run on; best (B, n) the pool's new entries (of pool +
    candidates); nodes (B, K) the candidates' node ids; parents (B, K) their parents'."""

    rows: torch.Tensor
    normalized: torch.Tensor
    hits: torch.Tensor
    just_finished: torch.Tensor
    keep: torch.Tensor
    best: torch.Tensor
    nodes: torch.Tensor
    parents: torch.Tensor


class BeamSearch(Strategy):
    """Beam search (``num_beams > 1``, ``do_sample=False``), exact to the reference.

    State (B inputs, n = num_beams, t = generated tokens):

    * running_scores (B, n) accumulated log-probs; running_indices (B, n, t) int32 global
      row of the parent at every step; running_nodes (B, n) trace node ids;
    * pool_sequences (B, n, prompt + t), pool_scores (B, n) length-normalised,
      pool_indices (B, n, t), pool_finished (B, n), pool_nodes (B, n);
    * still_open (B, 1) the early-stop heuristic; done.
    """

    mode = "beam_search"
    reorders_rows = True
    family = "beam"
    #: draw the candidates instead of taking the top-K (beam sampling)
    sample: ClassVar[bool] = False
    #: config fields that cannot change during a run (the row layout depends on them)
    FIXED: ClassVar[tuple[str, ...]] = ("num_beams", "num_return_sequences")
    #: the reference's beam search and beam sampling refuse ``low_memory=True`` (4.56.2);
    #: its group and constrained beam searches ignore it
    REFUSES_LOW_MEMORY: ClassVar[bool] = True

    # -- config: live changes are allowed except for the row layout ----------------------
    @property
    def config(self):
        """The effective GenerationConfig; setting one that changes the row layout
        (``num_beams``, ``num_return_sequences``...) is refused with a ValueError."""
        return self._config

    @config.setter
    def config(self, value) -> None:
        old = getattr(self, "_config", None)
        if old is not None:
            for name in self.FIXED:
                if getattr(old, name) != getattr(value, name):
                    raise ValueError(
                        f"{name} cannot change during a {self.mode} run (was "
                        f"{getattr(old, name)!r}, got {getattr(value, name)!r}): set it back, "
                        "or start a new run with the new value"
                    )
        if self.REFUSES_LOW_MEMORY and value.low_memory:
            raise ValueError(
                f"low_memory=True is not supported by {self.mode.replace('_', ' ')} (transformers "
                "4.56.2 refuses it too): leave low_memory unset; it only changes contrastive "
                "search, which then scores its candidates one at a time"
            )
        self._config = value

    @staticmethod
    def rows_per_input(config) -> int:
        return int(config.num_beams)

    def get_state(self) -> dict[str, Any]:
        state = super().get_state()
        state.pop("_config", None)
        return state

    # -- set-up ----------------------------------------------------------------------------
    def start(self, ctx) -> None:
        B, n = ctx.batch_size, int(self.config.num_beams)
        dev = ctx.device
        self.num_beams = n
        self.batch_size = B
        self.prompt_length = ctx.prompt_length
        self.running_scores = torch.zeros((B, n), dtype=torch.float, device=dev)
        self.running_scores[:, 1:] = NEG  # only beam 0 may start: the beams are copies
        self.running_indices = torch.empty((B, n, 0), dtype=torch.int32, device=dev)
        self.running_nodes = torch.full((B, n), -1, dtype=torch.long, device=dev)
        self.pool_sequences = ctx.sequences.view(B, n, -1).clone()
        self.pool_scores = torch.full((B, n), NEG, dtype=torch.float, device=dev)
        self.pool_indices = torch.empty((B, n, 0), dtype=torch.int32, device=dev)
        self.pool_finished = torch.zeros((B, n), dtype=torch.bool, device=dev)
        self.pool_nodes = torch.full((B, n), -1, dtype=torch.long, device=dev)
        self.still_open = torch.ones((B, 1), dtype=torch.bool, device=dev)
        self.done = False
        self.next_node = 0

    # -- one step ----------------------------------------------------------------------------
    def process(self, ctx, logits: torch.Tensor) -> torch.Tensor:
        """Log-softmax first, then the processors: they see log-probs in beam modes."""
        return ctx.process(ctx.sequences, torch.log_softmax(logits, dim=-1))

    def select(self, ctx, scores: torch.Tensor) -> Selection:
        B, n = self.batch_size, self.num_beams
        vocab = scores.shape[-1]
        k = candidates_per_input(self.config)
        # (B, n*vocab): every continuation of every beam, with its beam's running score
        accumulated = (scores.view(B, n, vocab) + self.running_scores[:, :, None]).view(B, -1)
        if self.sample:
            flat = ctx.random.multinomial(torch.softmax(accumulated, dim=-1), num_samples=k)
            values = torch.gather(accumulated, 1, flat)
        else:
            values, flat = torch.topk(accumulated, k=k)
        return self._advance(ctx, scores, values, flat // vocab, flat % vocab)

    def force(self, ctx, scores: torch.Tensor, token_id: int) -> Selection:
        """Every running beam continues with ``token_id`` (the beams are re-sorted by score).

        The beams' scores add that token's log-prob; if the token stops them (an EOS id,
        the last allowed position) they enter the hypothesis pool as any finished beam.
        """
        B, n = self.batch_size, self.num_beams
        tokens = torch.full((B, n), int(token_id), dtype=torch.long, device=scores.device)
        parents = torch.arange(n, device=scores.device).expand(B, n)
        values = scores.view(B, n, -1)[:, :, int(token_id)] + self.running_scores
        return self._advance(ctx, scores, values, parents, tokens)

    def _advance(self, ctx, scores, values, parents, tokens) -> Selection:
        """Apply one step given the candidates, best first within the first num_beams.

        values (B, K) accumulated scores; parents (B, K) beam within the input;
        tokens (B, K) next token ids.
        """
        B, n = self.batch_size, self.num_beams
        cfg = self.config
        k = values.shape[1]
        dev = values.device
        length = ctx.sequences.shape[1]
        generated = length + 1 - self.prompt_length
        penalty = cfg.length_penalty
        offset = torch.arange(B, device=dev)[:, None] * n
        rows = parents + offset  # (B, K) global running row of each candidate

        # candidate sequences (B*K, length+1) and whether they stop here
        cand_seqs = torch.cat([ctx.sequences[rows.reshape(-1)], tokens.reshape(-1, 1)], dim=1)
        hits = stop_flags(ctx, cand_seqs).view(B, k)
        # (B, K, t+1) parent rows at every step, this step's included
        cand_indices = torch.cat(
            [_gather_rows(self.running_indices, parents), rows[..., None].to(torch.int32)], dim=2
        )
        nodes = self.next_node + torch.arange(B * k, device=dev).view(B, k)
        self.next_node += B * k
        parent_nodes = self.running_nodes.gather(1, parents)

        # next running beams: the best num_beams candidates that did not stop
        running = values + hits.to(torch.float32) * NEG
        keep = torch.topk(running, k=n)[1]  # (B, n)
        new_scores = _gather_rows(running, keep)
        new_parents = parents.gather(1, keep)
        new_tokens = tokens.gather(1, keep)

        # hypothesis pool: stopped candidates among the first num_beams may enter
        top = torch.arange(k, device=dev) < n
        just_finished = hits & top[None, :]
        normalized = values / (generated**penalty)
        entering = normalized.clone()
        pool_full = torch.all(self.pool_finished, dim=-1, keepdim=True) & (
            cfg.early_stopping is True
        )
        entering += pool_full.to(torch.float32) * NEG
        entering += (~self.still_open).to(torch.float32) * NEG
        entering += (~just_finished) * NEG
        fill = fill_token(cfg)
        pool_seqs = torch.cat(
            [self.pool_sequences, self.pool_sequences.new_full((B, n, 1), fill)], dim=2
        )
        pool_idx = torch.cat([self.pool_indices, self.pool_indices.new_full((B, n, 1), -1)], dim=2)
        merged_scores = torch.cat((self.pool_scores, entering), dim=1)
        best = torch.topk(merged_scores, k=n)[1]  # (B, n) of the pool and the candidates
        self.pool_sequences = _gather_rows(
            torch.cat((pool_seqs, cand_seqs.view(B, k, -1)), 1), best
        )
        self.pool_scores = _gather_rows(merged_scores, best)
        self.pool_indices = _gather_rows(torch.cat((pool_idx, cand_indices), dim=1), best)
        self.pool_finished = _gather_rows(torch.cat((self.pool_finished, just_finished), 1), best)
        self.pool_nodes = _gather_rows(torch.cat((self.pool_nodes, nodes), dim=1), best)

        # the running state moves on
        self.running_scores = new_scores
        self.running_indices = _gather_rows(cand_indices, keep)
        self.running_nodes = nodes.gather(1, keep)

        # early stop: can the running beams still improve on the pool?
        max_new = cfg.max_length - self.prompt_length
        self.still_open, best_possible, worst = early_stop_check(
            self.still_open,
            new_scores[:, :1],
            self.pool_scores,
            self.pool_finished,
            generated,
            max_new,
            cfg.early_stopping,
            penalty,
        )
        improvable = torch.any(self.still_open)
        open_slots = ~(torch.all(self.pool_finished) & (cfg.early_stopping is True))
        can_continue = ~torch.all(hits)
        self.done = not bool(improvable & open_slots & can_continue)

        info = None
        if is_listening(ctx):
            moves = _Moves(rows, normalized, hits, just_finished, keep, best, nodes, parent_nodes)
            bounds = (best_possible, worst, generated)
            info = publish(ctx, self._trace_info(scores, values, parents, tokens, moves, bounds))
        return Selection(new_tokens.reshape(-1), (new_parents + offset).reshape(-1), info)

    def is_done(self, ctx) -> bool:
        return self.done

    # -- trace -------------------------------------------------------------------------------
    def _trace_info(self, scores, values, parents, tokens, moves: _Moves, bounds) -> BeamStep:
        """The step as the trace reads it: scores (rows, vocab) the step chose from; values,
        parents, tokens (B, K) the candidates :meth:`_advance` was given; moves where they
        went; bounds (best possible score, worst pooled score, generated length)."""
        B, n = self.batch_size, self.num_beams
        k = values.shape[1]
        dev = values.device
        ks = torch.arange(k, device=dev)
        rows, normalized, hits, just_finished, keep, best, nodes, parent_nodes = moves
        best_possible, worst, generated = bounds
        # beam index each kept candidate got; pool slot each entering candidate got
        beam = torch.full((B, k), -1, dtype=torch.long, device=dev)
        beam.scatter_(1, keep, torch.arange(n, device=dev).expand(B, n))
        kept = (beam >= 0) & ~hits
        from_candidates = best >= n
        slot = torch.full((B, k + 1), -1, dtype=torch.long, device=dev)
        target = torch.where(from_candidates, best - n, torch.full_like(best, k))
        slot.scatter_(1, target, torch.arange(n, device=dev).expand(B, n))
        # an unfinished candidate may fill an empty slot as a -1e9 placeholder: not a slot
        slot = torch.where(just_finished, slot[:, :k], -1)
        fate = torch.full((B, k), PRUNED, dtype=torch.long, device=dev)
        fate[kept] = KEPT
        fate[just_finished & (slot < 0)] = REJECTED
        fate[slot >= 0] = FINISHED
        beam[~kept] = -1
        token_logprob = scores[rows.reshape(-1), tokens.reshape(-1)].view(B, k)
        return BeamStep(
            kind=self.mode,
            candidates=BeamCandidates.of(
                batch=torch.arange(B, device=dev)[:, None].expand(B, k),
                rank=ks.expand(B, k),
                parent=parents,
                parent_node=parent_nodes,
                node=nodes,
                token=tokens,
                token_logprob=token_logprob,
                score=values,
                normalized=normalized,
                fate=fate,
                source=torch.zeros_like(fate),
                group=torch.zeros_like(fate),
                beam=beam,
                slot=slot,
            ),
            pool=self._pool_view(),
            early_stop=EarlyStop(
                rule=self.config.early_stopping,
                length_penalty=float(self.config.length_penalty),
                generated_length=generated,
                input_done=~self.still_open[:, 0].cpu().clone(),
                done=self.done,
                best_running=self.running_scores[:, 0].detach().cpu().clone(),
                best_possible=best_possible[:, 0].detach().cpu().clone(),
                worst_finished=worst.min(dim=1)[0].detach().cpu().clone(),
                n_finished=self.pool_finished.sum(dim=1).cpu(),
                improvable=self.still_open[:, 0].cpu().clone(),
            ),
        )

    def _pool_view(self) -> tuple[PoolEntry, ...]:
        """The finished hypotheses in the pool, input by input."""
        scores, finished = self.pool_scores.cpu(), self.pool_finished.cpu()
        lengths = (self.pool_indices >= 0).sum(dim=-1).cpu()
        nodes, tokens = self.pool_nodes.cpu(), self.pool_sequences[:, :, self.prompt_length :]
        out = []
        for b, slot in finished.nonzero().tolist():
            n = int(lengths[b, slot])
            out.append(
                PoolEntry(
                    batch=b,
                    group=0,
                    slot=slot,
                    score=float(scores[b, slot]),
                    tokens=tuple(tokens[b, slot, :n].tolist()),
                    node=int(nodes[b, slot]),
                )
            )
        return tuple(out)

    # -- the end -------------------------------------------------------------------------------
    def _final_pool(self, ctx):
        """The pool, with the running beams offered to it when the run stopped early
        (interrupted or read before the end), so the tokens produced so far are kept."""
        if self.done or self.running_indices.shape[2] == 0:
            return self.pool_sequences, self.pool_scores, self.pool_indices, self.pool_nodes
        B, n = self.batch_size, self.num_beams
        generated = self.running_indices.shape[2]
        offered = self.running_scores / (generated**self.config.length_penalty)
        merged = torch.cat((self.pool_scores, offered), dim=1)
        best = torch.topk(merged, k=n)[1]
        seqs = torch.cat((self.pool_sequences, ctx.sequences.view(B, n, -1)), dim=1)
        idx = torch.cat((self.pool_indices, self.running_indices), dim=1)
        nodes = torch.cat((self.pool_nodes, self.running_nodes), dim=1)
        return (
            _gather_rows(seqs, best),
            _gather_rows(merged, best),
            _gather_rows(idx, best),
            _gather_rows(nodes, best),
        )

    def finalize(self, ctx) -> dict[str, Any]:
        """The best ``num_return_sequences`` hypotheses of every input, as the reference
        returns them: sequences cropped to the longest, scores, beam_indices (-1 after the
        end, offset by input * num_beams)."""
        r = int(self.config.num_return_sequences or 1)
        seqs, scores, indices, nodes = self._final_pool(ctx)
        seqs = seqs[:, :r].reshape(-1, seqs.shape[-1])
        scores = scores[:, :r].reshape(-1)
        indices = indices[:, :r].reshape(-1, indices.shape[-1])
        generated = int((indices + 1).bool().sum(dim=1).max()) if indices.numel() else 0
        cfg = ctx.gen_config
        return {
            "sequences": seqs[:, : self.prompt_length + generated],
            "sequences_scores": scores if cfg.output_scores else None,
            "beam_indices": indices[:, :generated],
            "returned_nodes": nodes[:, :r].reshape(-1).cpu(),  # the winners' beam-tree nodes
        }

    # -- for streamers and widgets ---------------------------------------------------------
    def beams(self, ctx, batch: int = 0) -> list[tuple[list[int], float, bool]]:
        """The running beams and finished hypotheses of one input, best first:
        ``[(generated_token_ids, normalised_score, finished), ...]``."""
        n = self.num_beams
        p = self.prompt_length
        generated = max(ctx.sequences.shape[1] - p, 1)
        penalty = self.config.length_penalty
        out = []
        rows = ctx.sequences.view(self.batch_size, n, -1)[batch]
        for i in range(n):
            score = float(self.running_scores[batch, i])
            if score > NEG / 2:
                out.append((rows[i, p:].tolist(), score / generated**penalty, False))
        for i in range(n):
            if bool(self.pool_finished[batch, i]):
                length = int((self.pool_indices[batch, i] >= 0).sum())
                toks = self.pool_sequences[batch, i, p : p + length].tolist()
                out.append((toks, float(self.pool_scores[batch, i]), True))
        out.sort(key=lambda x: -x[1])
        return out


class BeamSample(BeamSearch):
    """Beam sampling (``num_beams > 1``, ``do_sample=True``): the K candidates are drawn
    without replacement from softmax(accumulated scores); the rest is beam search."""

    mode = "beam_sample"
    sample = True
