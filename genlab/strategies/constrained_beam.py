"""Constrained beam search (``force_words_ids`` / ``constraints``), as transformers 4.56.2.

Beam search whose beams are also sorted into *banks* by how far they got through the
constraints (see :class:`genlab.strategies.constraints.ConstraintListState`). One step::

    scores        log-softmax, processors, + running beam score (recorded like this: the
                  reference's ``scores`` hold accumulated scores in this mode)
    candidates    top K = max(2, 1 + n_eos) * num_beams of every input
    EOS           an EOS candidate ranked < num_beams is a finished hypothesis only if the
                  sequence (prompt included) completes every constraint
    beams         the first num_beams non-EOS candidates, plus, for every beam, the tokens
                  that advance its constraints; sorted by bank * 100 + score and taken
                  round-robin over the banks (best of every bank, then the second, ...)

Per-beam work is inherently Python here (constraint states are small state machines), as
in the reference. ``beam_indices`` are returned only with ``output_scores=True``.

Example::

    (Not run as a test: it needs a model and prompt ids of your own (``model``, ``ids``); the tests
    run these calls.)

    >>> genlab.generate(model, ids, num_beams=4, max_new_tokens=8,        # doctest: +SKIP
    ...                 force_words_ids=[[17, 18], [[5], [6, 7]]])
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from ..ids import eos_token_ids
from .base import Selection
from .beam import (
    CONSTRAINT,
    FINISHED,
    KEPT,
    NEG,
    PRUNED,
    REJECTED,
    BeamSearch,
    candidates_per_input,
    is_listening,
    publish,
    stop_flags,
)
from .constraints import ConstraintListState, constraints_from_force_words
from .pool import Hypotheses, pool_entries, pooled_beams, pooled_output
from .stepdata import BeamCandidates, BeamStep, EarlyStop, PoolEntry

__all__ = ["ConstrainedBeamSearch", "constraints_of"]


def constraints_of(config) -> list:
    """The constraints a config asks for: ``constraints`` then one per ``force_words_ids``
    entry (a phrase, or a list of alternatives)."""
    out = list(config.constraints or [])
    if config.force_words_ids is not None:
        out += constraints_from_force_words(config.force_words_ids)
    if not out:
        raise ValueError("constrained beam search needs constraints or force_words_ids")
    return out


class ConstrainedBeamSearch(BeamSearch):
    """Constrained beam search; see the module docstring.

    State: beam_scores (B*n,), pools[b] :class:`Hypotheses` (n each), done[b],
    history (B*n, t) global parent rows (only with output_scores).
    """

    REFUSES_LOW_MEMORY = False  # the reference ignores low_memory here

    mode = "constrained_beam_search"
    family = "constrained_beam"

    def start(self, ctx) -> None:
        cfg = self.config
        B, n = ctx.batch_size, int(cfg.num_beams)
        if n < 2:
            raise ValueError(
                f"num_beams must be >= 2 for constrained beam search (force_words_ids / "
                f"constraints), got {n}: set num_beams=2 or more"
            )
        dev = ctx.device
        self.num_beams, self.batch_size = n, B
        self.prompt_length = ctx.prompt_length
        self.constraints = constraints_of(cfg)
        scores = torch.zeros((B, n), dtype=torch.float, device=dev)
        scores[:, 1:] = NEG
        self.beam_scores = scores.view(-1)
        self.pools = [[Hypotheses(n)] for _ in range(B)]
        self.done_inputs = [False] * B
        self.track = bool(cfg.return_dict_in_generate and cfg.output_scores)
        self.history = torch.empty((B * n, 0), dtype=torch.long, device=dev) if self.track else None
        self.running_nodes = torch.full((B * n,), -1, dtype=torch.long, device=dev)
        self.next_node = 0
        self.done = False
        self._processed = None

    # -- constraint helpers --------------------------------------------------------------------
    def _states(self, count: int) -> list[ConstraintListState]:
        return [ConstraintListState([c.copy() for c in self.constraints]) for _ in range(count)]

    def _completes(self, token_ids: list[int]) -> bool:
        state = self._states(1)[0]
        state.reset(token_ids)
        return state.completed

    # -- one step ------------------------------------------------------------------------------
    def process(self, ctx, logits: torch.Tensor) -> torch.Tensor:
        """Processed log-probs plus the running beam scores (what the reference records)."""
        processed = ctx.process(ctx.sequences, torch.log_softmax(logits, dim=-1))
        self._processed = processed if is_listening(ctx) else None
        return processed + self.beam_scores[:, None].expand_as(processed)

    def select(self, ctx, scores: torch.Tensor) -> Selection:
        cfg = self.config
        B, n = self.batch_size, self.num_beams
        vocab = scores.shape[-1]
        k = candidates_per_input(cfg)
        values, flat = torch.topk(scores.view(B, n * vocab), k, dim=1, largest=True, sorted=True)
        parents = (flat / vocab).long()  # the reference's float division, kept
        tokens = flat % vocab
        length = ctx.sequences.shape[1]
        eos = eos_token_ids(cfg)
        eos_set = set(eos)
        new_scores = torch.zeros((B, n), dtype=values.dtype, device=values.device)
        new_tokens = torch.zeros((B, n), dtype=tokens.dtype, device=values.device)
        new_rows = torch.zeros((B, n), dtype=parents.dtype, device=values.device)
        listening = is_listening(ctx)
        nodes = self.next_node + torch.arange(B * k).view(B, k)
        self.next_node += B * k
        traced = []
        values_l, tokens_l, parents_l = values.tolist(), tokens.tolist(), parents.tolist()
        sequences = ctx.sequences
        for b in range(B):
            record = {"events": [], "extra": [], "sorted": None}
            traced.append(record)
            if self.done_inputs[b]:
                pad = ctx.gen_config.pad_token_id
                if not eos or pad is None:
                    raise ValueError("a finished input needs eos_token_id and pad_token_id")
                new_tokens[b] = int(pad)
                record["done"] = True
                continue
            taken = []
            for rank in range(k):
                token, row = tokens_l[b][rank], b * n + parents_l[b][rank]
                if token in eos_set:
                    if rank >= n:
                        continue
                    ok = False
                    if self._completes(sequences[row].tolist()):
                        indices = None
                        if self.track:
                            indices = tuple(self.history[row].tolist()) + (row,)
                        ok = self.pools[b][0].add(
                            sequences[row].clone(),
                            values_l[b][rank],
                            length + 1 - self.prompt_length,
                            cfg.length_penalty,
                            indices,
                            int(nodes[b, rank]),
                        )
                        record["events"].append((rank, FINISHED if ok else REJECTED))
                    else:
                        record["events"].append((rank, CONSTRAINT))
                else:
                    taken.append(rank)
                if len(taken) == n:
                    break
            ranks = torch.tensor(taken, dtype=torch.long)
            beam_scores = values[b, ranks] if taken else values.new_zeros(0)
            beam_tokens = tokens[b, ranks] if taken else tokens.new_zeros(0)
            beam_rows = parents[b, ranks] + b * n if taken else parents.new_zeros(0)
            if len(taken) < n:
                # pad as the reference's zero-initialised buffers would be, then fail below
                pad = n - len(taken)
                beam_scores = torch.cat([beam_scores, values.new_zeros(pad)])
                beam_tokens = torch.cat([beam_tokens, tokens.new_zeros(pad)])
                beam_rows = torch.cat([beam_rows, parents.new_zeros(pad)])
            s, t, r, order, extra = self._bank_sort(
                b, sequences, scores, beam_scores, beam_tokens, beam_rows
            )
            new_scores[b], new_tokens[b], new_rows[b] = s, t, r
            record.update(taken=taken, order=order, extra=extra)
            if len(taken) < n:
                raise ValueError(
                    f"at most {n} of the candidates {tokens[b].tolist()} can be EOS "
                    f"(eos_token_id={eos}): the scores let too many EOS candidates through"
                )
            self.done_inputs[b] = self.done_inputs[b] or self.pools[b][0].is_done(
                values_l[b][0],
                length + 1,
                self.prompt_length,
                cfg.early_stopping,
                cfg.length_penalty,
                cfg.max_length,
            )
        for rec in traced:  # the constraints' proposals get trace node ids too
            extra = rec.get("extra", [])
            rec["extra_nodes"] = list(range(self.next_node, self.next_node + len(extra)))
            self.next_node += len(extra)
        rows = new_rows.reshape(-1)
        self.beam_scores = new_scores.reshape(-1)
        if self.track:
            self.history = torch.cat([self.history[rows], rows[:, None]], dim=1)
        info = None
        if listening:
            info = publish(
                ctx, self._trace(ctx, traced, values, tokens, parents, nodes, length, new_rows)
            )
        self.running_nodes = self._new_nodes(traced, nodes)
        return Selection(new_tokens.reshape(-1), rows, info)

    def _bank_sort(self, b, sequences, vocab_scores, beam_scores, beam_tokens, beam_rows):
        """Add the tokens that advance every beam's constraints and re-rank all candidates
        by bank, round-robin. Returns the n kept (scores, tokens, rows), the order of the
        kept among [search candidates + extra], and the extra candidates."""
        n = self.num_beams
        dev = beam_scores.device
        start = b * n
        full = torch.cat((sequences[beam_rows], beam_tokens.unsqueeze(-1)), dim=-1)
        seen = full.tolist()
        top_states = self._states(n)
        advance_states = self._states(n)
        extra: list[dict[str, Any]] = []
        for i in range(n):
            top_states[i].reset(seen[i])
            state = advance_states[i]
            prefix = sequences[start + i]
            state.reset(prefix.tolist())
            if state.completed:
                continue
            for token in torch.tensor(state.advance(), dtype=torch.long, device=dev):
                new_state = state.copy(stateful=True)
                new_state.add(token.tolist())
                candidate = torch.cat((prefix, token.unsqueeze(0)), -1).tolist()
                if candidate in seen:
                    continue
                seen.append(candidate)
                extra.append(
                    {
                        "row": start + i,
                        "token": token,
                        "state": new_state,
                        "score": vocab_scores[start + i].take(token),
                    }
                )
        if not extra:
            return beam_scores, beam_tokens, beam_rows, torch.arange(n), extra
        all_scores = torch.cat((beam_scores, torch.stack([e["score"] for e in extra]).to(dev)))
        all_tokens = torch.cat((beam_tokens, torch.stack([e["token"] for e in extra]).to(dev)))
        all_rows = torch.cat((beam_rows, torch.tensor([e["row"] for e in extra], device=dev)))
        banks = torch.tensor(
            [s.get_bank() for s in top_states] + [e["state"].get_bank() for e in extra], device=dev
        )
        order = (banks * 100 + all_scores).sort(descending=True).indices
        order = order[_round_robin(banks[order].tolist())][:n]
        return all_scores[order], all_tokens[order], all_rows[order], order, extra

    def _new_nodes(self, traced, nodes) -> torch.LongTensor:
        n = self.num_beams
        out = torch.full((self.batch_size * n,), -1, dtype=torch.long)
        for b, rec in enumerate(traced):
            if rec.get("done"):
                continue
            for j, pos in enumerate(rec["order"].tolist()):
                if pos < len(rec["taken"]):
                    out[b * n + j] = int(nodes[b, rec["taken"][pos]])
                else:
                    out[b * n + j] = rec["extra_nodes"][pos - len(rec["taken"])]
        return out

    def force(self, ctx, scores: torch.Tensor, token_id: int) -> Selection:
        """Every running beam continues with ``token_id`` (``scores`` already hold the
        accumulated scores here). A forced EOS ends every beam whose sequence completes
        the constraints (it becomes a finished hypothesis); the others end unfinished."""
        cfg = self.config
        B, n = self.batch_size, self.num_beams
        token_id = int(token_id)
        rows = torch.arange(B * n, device=scores.device)
        new_scores = scores[:, token_id].clone()
        if token_id in eos_token_ids(cfg):
            length = ctx.sequences.shape[1]
            for b in range(B):
                if self.done_inputs[b]:
                    continue
                for row in range(b * n, (b + 1) * n):
                    if self._completes(ctx.sequences[row].tolist()):
                        self.pools[b][0].add(
                            ctx.sequences[row].clone(),
                            float(new_scores[row]),
                            length + 1 - self.prompt_length,
                            cfg.length_penalty,
                            None,
                            -1,
                        )
                self.done_inputs[b] = len(self.pools[b][0]) >= n
            new_scores.fill_(NEG)
        self.beam_scores = new_scores
        if self.track:
            self.history = torch.cat([self.history, rows[:, None]], dim=1)
        tokens = torch.full((B * n,), token_id, dtype=torch.long, device=scores.device)
        return Selection(tokens, rows, None)

    def update(self, ctx, selection: Selection) -> None:
        self.done = all(self.done_inputs) or bool(stop_flags(ctx, ctx.sequences).all())

    # -- trace -------------------------------------------------------------------------------
    def _trace(self, ctx, traced, values, tokens, parents, nodes, length, new_rows):
        cfg = self.config
        B, n = self.batch_size, self.num_beams
        k = values.shape[1]
        generated = length + 1 - self.prompt_length
        penalty = cfg.length_penalty
        processed = self._processed
        fate = torch.full((B, k), PRUNED, dtype=torch.long)
        beam = torch.full((B, k), -1, dtype=torch.long)
        cols: dict[str, list] = {
            key: []
            for key in (
                "batch",
                "rank",
                "parent",
                "parent_node",
                "node",
                "token",
                "token_logprob",
                "score",
                "normalized",
                "fate",
                "source",
                "group",
                "beam",
                "slot",
            )
        }
        rows_all = (parents + torch.arange(B)[:, None] * n).cpu()
        for b, rec in enumerate(traced):
            if rec.get("done"):
                continue
            for rank, code in rec["events"]:
                fate[b, rank] = code
            taken = rec["taken"]
            for rank in taken:
                fate[b, rank] = CONSTRAINT  # dropped by the bank ranking unless kept below
            for j, pos in enumerate(rec["order"].tolist()):
                if pos < len(taken):
                    fate[b, taken[pos]] = KEPT
                    beam[b, taken[pos]] = j
            for e_i, e in enumerate(rec["extra"]):
                pos = len(taken) + e_i
                kept = (rec["order"] == pos).nonzero()
                row = int(e["row"])
                score = float(e["score"])
                cols["batch"].append(b)
                cols["rank"].append(k + e_i)
                cols["parent"].append(row - b * n)
                cols["parent_node"].append(int(self.running_nodes[row]))
                cols["node"].append(rec["extra_nodes"][e_i])
                cols["token"].append(int(e["token"]))
                cols["token_logprob"].append(float(processed[row, int(e["token"])]))
                cols["score"].append(score)
                cols["normalized"].append(score / generated**penalty)
                cols["fate"].append(KEPT if kept.numel() else PRUNED)
                cols["source"].append(1)
                cols["group"].append(0)
                cols["beam"].append(int(kept[0, 0]) if kept.numel() else -1)
                cols["slot"].append(-1)
        token_lp = processed[rows_all.reshape(-1), tokens.reshape(-1)].view(B, k).cpu()
        search = BeamCandidates.of(
            batch=torch.arange(B)[:, None].expand(B, k),
            rank=torch.arange(k).expand(B, k),
            parent=parents,
            parent_node=self.running_nodes[rows_all.reshape(-1)].view(B, k),
            node=nodes,
            token=tokens,
            token_logprob=token_lp,
            score=values,
            normalized=values / generated**penalty,
            fate=fate,
            source=torch.zeros_like(fate),
            group=torch.zeros_like(fate),
            beam=beam,
            slot=torch.full_like(fate, -1),
        )
        if cols["batch"]:
            search = search.concat(
                BeamCandidates.of(**{key: torch.tensor(v) for key, v in cols.items()})
            )
        return BeamStep(
            kind=self.mode,
            candidates=search,
            pool=self._pool_view(),
            early_stop=EarlyStop(
                rule=cfg.early_stopping,
                length_penalty=float(penalty),
                generated_length=generated,
                input_done=torch.tensor(self.done_inputs),
                done=all(self.done_inputs),
            ),
        )

    def _pool_view(self) -> tuple[PoolEntry, ...]:
        return pool_entries(self.pools, self.prompt_length)

    # -- the end -------------------------------------------------------------------------------
    def finalize(self, ctx) -> dict[str, Any]:
        cfg = self.config
        B, n = self.batch_size, self.num_beams
        keep = int(cfg.num_return_sequences or 1)
        pools = copy.deepcopy(self.pools)
        length = ctx.sequences.shape[1]
        for b in range(B):
            if self.done_inputs[b]:
                continue
            collected = []
            for j in range(n):
                row = b * n + j
                if self._completes(ctx.sequences[row].tolist()):
                    indices = tuple(self.history[row].tolist()) if self.track else None
                    pools[b][0].add(
                        ctx.sequences[row],
                        float(self.beam_scores[row]),
                        length - self.prompt_length,
                        cfg.length_penalty,
                        indices,
                        int(self.running_nodes[row]),
                    )
                    collected.append(j)
            if len(collected) < keep:
                # nothing satisfies the constraints well enough: the best beams as they are
                for j in range(n):
                    if j not in collected:
                        row = b * n + j
                        pools[b][0].add(
                            ctx.sequences[row],
                            float(self.beam_scores[row]),
                            length - self.prompt_length,
                            cfg.length_penalty,
                            None,
                            int(self.running_nodes[row]),
                        )
        return pooled_output(self, ctx, pools, keep)

    def beams(self, ctx, batch: int = 0) -> list[tuple[list[int], float, bool]]:
        return pooled_beams(self, ctx, batch)


def _round_robin(banks: list[int]) -> torch.LongTensor:
    """Positions that take, from a list sorted by bank (runs of equal banks), the first of
    every ctx, then the second of every ctx, and so on (stable)."""
    counters = []
    count, current = -1, banks[0]
    for bank in banks:
        if bank == current:
            count += 1
        else:
            count, current = 0, bank
        counters.append(count)
    return torch.argsort(torch.tensor(counters), stable=True)
