"""Diverse (group) beam search, with the bookkeeping of transformers 4.56.2.

The ``num_beams`` beams of every input are split into ``num_beam_groups`` groups of
``S = num_beams // num_beam_groups``. Within one step the groups choose one after the
other; group ``g`` sees, through the Hamming diversity processor, the tokens the earlier
groups just chose for the same input and is penalised for repeating them::

    for each group g:
        scores_g     log-softmax, then the processors (with current_tokens, beam_group_idx)
        candidates   top K_g = max(2, 1 + n_eos) * S of (scores_g + running score)
        EOS          an EOS candidate ranked < S becomes a finished hypothesis of (input, g)
        beams        the first S candidates that are not EOS continue
    stop when every (input, group) is done or the stopping criteria hold for every row

The selection has to happen inside :meth:`GroupBeamSearch.process` (the penalty of a group
depends on the choices of the earlier ones); :meth:`GroupBeamSearch.select` commits it. A
``scores`` hook therefore observes the recorded scores but cannot change this step's choice, and
``processor.<label>`` hooks fire once per group with that group's rows (B * S, vocab).

Kept as the reference does it (they change outputs):

* a finished hypothesis is stored without its EOS token; the output appends the *first*
  EOS id after it when there is room;
* ``beam_indices`` (only with ``output_scores=True``) count rows within a group, and a
  hypothesis of a later group takes group 0's history;
* once an (input, group) is done, its rows continue a copy of row 0 of the group with the
  pad token, score 0. Those padded rows are not candidates (the reference computes their
  top-k but never looks at it), so the trace records no candidates for a done
  (input, group): its branch of the beam tree ends at the step that closed it.

Example::

    (Not run as a test: it needs a model and prompt ids of your own (``model``, ``ids``); the tests
    run these calls.)

    >>> genlab.generate(model, ids, num_beams=4, num_beam_groups=2,      # doctest: +SKIP
    ...                 diversity_penalty=1.0, max_new_tokens=8)
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from ..ids import eos_token_ids
from ..processors.base import call_processor, stage_name_of
from .base import Selection
from .beam import (
    DIVERSITY,
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
from .pool import Hypotheses, pool_entries, pooled_beams, pooled_output, write_hypotheses
from .stepdata import BeamCandidates, BeamStep, EarlyStop, PoolEntry

# Hypotheses and write_hypotheses live in .pool (shared with constrained beam search); they
# are still importable from here
__all__ = ["GroupBeamSearch", "Hypotheses", "write_hypotheses"]


class GroupBeamSearch(BeamSearch):
    """Diverse beam search (``num_beam_groups > 1``), see the module docstring.

    State: beam_scores (B*n,), pools[b][g] :class:`Hypotheses`, done (B, G) bools,
    history[g] (B*S, t) the in-group row of every step (only with output_scores).
    """

    REFUSES_LOW_MEMORY = False  # the reference ignores low_memory here

    mode = "group_beam_search"
    family = "group_beam"
    FIXED = ("num_beams", "num_return_sequences", "num_beam_groups")

    def start(self, ctx) -> None:
        cfg = self.config
        B, n, G = ctx.batch_size, int(cfg.num_beams), int(cfg.num_beam_groups)
        S = n // G
        dev = ctx.device
        self.num_beams, self.groups, self.group_size = n, G, S
        self.batch_size = B
        self.prompt_length = ctx.prompt_length
        scores = torch.full((B, n), NEG, dtype=torch.float, device=dev)
        scores[:, ::S] = 0.0  # the first beam of every group starts
        self.beam_scores = scores.view(-1)
        self.pools = [[Hypotheses(S) for _ in range(G)] for _ in range(B)]
        self.done_groups = [[False] * G for _ in range(B)]
        self.track = bool(cfg.return_dict_in_generate and cfg.output_scores)
        self.history = (
            [torch.empty((B * S, 0), dtype=torch.long, device=dev) for _ in range(G)]
            if self.track
            else None
        )
        self.running_nodes = torch.full((B * n,), -1, dtype=torch.long, device=dev)
        self.next_node = 0
        self.done = False
        self._pending = None
        # (G, B*S): the global rows of every group
        beams = torch.arange(B, device=dev)[:, None] * n
        self._rows = [(beams + g * S + torch.arange(S, device=dev)).reshape(-1) for g in range(G)]

    def get_state(self) -> dict[str, Any]:
        state = super().get_state()
        state["_pending"] = None
        return state

    # -- one step: processing and choosing go together -----------------------------------
    def process(self, ctx, logits: torch.Tensor) -> torch.Tensor:
        """Process and choose group by group; returns the recorded scores (B*n, vocab)."""
        cfg = self.config
        B, n, G, S = self.batch_size, self.num_beams, self.groups, self.group_size
        vocab = logits.shape[-1]
        k = candidates_per_input(cfg, S)
        listening = is_listening(ctx)
        staged = ctx.has("processor.*")
        stages: list[tuple[str, torch.Tensor]] = []
        current = torch.zeros(B * n, dtype=ctx.sequences.dtype, device=logits.device)
        processed_all = torch.zeros_like(logits)
        groups = []
        for g in range(G):
            rows = self._rows[g]
            ids = ctx.sequences[rows]
            log_probs = torch.log_softmax(logits[rows], dim=-1)
            if staged:
                processed = self._staged(ctx, ids, log_probs, current, g, rows, stages, logits)
            else:
                processed = ctx.processors(ids, log_probs, current_tokens=current, beam_group_idx=g)
            accumulated = (processed + self.beam_scores[rows][:, None]).view(B, S * vocab)
            processed_all[rows] = processed
            values, flat = torch.topk(accumulated, k, dim=1, largest=True, sorted=True)
            parents = torch.div(flat, vocab, rounding_mode="floor")
            tokens = flat % vocab
            choice = self._choose(ctx, values, tokens, parents, g)
            current[rows] = choice["tokens"]
            if listening:
                choice["trace"] = (processed, accumulated, values, tokens, parents, current.clone())
            groups.append(choice)
        for name, full in stages:  # observers (the trace) see whole stages
            ctx.notify(f"processor.{name}", full)
        self._pending = {"groups": groups, "tokens": current, "length": ctx.sequences.shape[1]}
        return processed_all

    def _staged(self, ctx, ids, log_probs, current, g, rows, stages, logits):
        """The processors one by one, for tracers and ``processor.<label>`` hooks; every
        stage is collected into a (B*n, vocab) tensor filled group by group."""
        scores = log_probs
        for i, proc in enumerate(ctx.processors):
            scores = call_processor(proc, ids, scores, current_tokens=current, beam_group_idx=g)
            name = stage_name_of(proc)
            # hooks see each group's rows; observers the whole stage, once complete
            scores = ctx.fire(f"processor.{name}", scores, notify=False)
            if len(stages) <= i:
                stages.append((name, torch.zeros_like(logits)))
            stages[i][1][rows] = scores
        return scores

    def _choose(self, ctx, values, tokens, parents, g) -> dict[str, Any]:
        """The next S beams of group g for every input (pure: nothing is committed).

        values/tokens/parents: (B, K) best first. Returns tokens (B*S,), scores (B*S,),
        beam (B*S,) in-group row each new beam continues, and the EOS events (b, rank).
        """
        B, S = self.batch_size, self.group_size
        dev = values.device
        k = values.shape[1]
        eos = eos_token_ids(self.config)
        is_eos = (
            torch.isin(tokens, torch.tensor(eos, device=dev))
            if eos
            else torch.zeros_like(tokens, dtype=torch.bool)
        )
        not_eos = ~is_eos
        take = not_eos & (not_eos.cumsum(dim=1) <= S)
        done = torch.tensor([self.done_groups[b][g] for b in range(B)], device=dev)
        short = (take.sum(dim=1) < S) & ~done
        if bool(short.any()):
            b = int(short.nonzero()[0, 0])
            raise ValueError(
                f"at most {S} of the candidates {tokens[b].tolist()} can be EOS "
                f"(eos_token_id={eos}): the scores let too many EOS candidates through"
            )
        order = torch.sort((~take).to(torch.uint8), dim=1, stable=True)[1][:, :S]
        in_group = parents + torch.arange(B, device=dev)[:, None] * S  # (B, K)
        new_scores = values.gather(1, order)
        new_tokens = tokens.gather(1, order)
        new_beam = in_group.gather(1, order)
        if bool(done.any()):
            pad = ctx.gen_config.pad_token_id
            if pad is None or not eos:
                raise ValueError("a finished group needs eos_token_id and pad_token_id")
            new_scores = torch.where(done[:, None], 0.0, new_scores)
            new_tokens = torch.where(done[:, None], int(pad), new_tokens)
            new_beam = torch.where(done[:, None], 0, new_beam)
        events = (is_eos & (torch.arange(k, device=dev) < S) & ~done[:, None]).nonzero().tolist()
        return {
            "tokens": new_tokens.reshape(-1),
            "scores": new_scores.reshape(-1),
            "beam": new_beam.reshape(-1),
            "values": values,
            "in_group": in_group,
            "take": order,
            "events": events,
            "done": done,
        }

    def select(self, ctx, scores: torch.Tensor) -> Selection:
        pending = self._pending
        self._pending = None
        B, n, S = self.batch_size, self.num_beams, self.group_size
        length = pending["length"]
        parents = torch.zeros(B * n, dtype=torch.long, device=scores.device)
        nodes_all = torch.full((B * n,), -1, dtype=torch.long, device=scores.device)
        new_nodes = []
        for g, choice in enumerate(pending["groups"]):
            rows = self._rows[g]
            k = choice["values"].shape[1]
            nodes = self.next_node + torch.arange(B * k, device=scores.device).view(B, k)
            self.next_node += B * k
            new_nodes.append(nodes)
            kept = self._commit_group(ctx, g, choice, length, nodes)
            self.beam_scores[rows] = choice["scores"]
            beam = choice["beam"]
            if self.track:
                self.history[g] = torch.cat([self.history[g][beam], beam[:, None]], dim=1)
            parents[rows] = n * torch.div(beam, S, rounding_mode="floor") + g * S + beam % S
            nodes_all[rows] = torch.where(kept >= 0, nodes.reshape(-1)[kept.clamp(min=0)], -1)
        parent_nodes = self.running_nodes
        self.running_nodes = nodes_all
        info = None
        if is_listening(ctx):
            info = publish(
                ctx, self._trace_info_groups(ctx, pending, new_nodes, parent_nodes, length, scores)
            )
        return Selection(pending["tokens"], parents, info)

    def _commit_group(self, ctx, g, choice, length, nodes) -> torch.LongTensor:
        """Add group g's finished hypotheses and update its done flags; returns, per new
        beam, the flat index (b*K + rank) of the candidate it came from (-1 when padded)."""
        cfg = self.config
        B = self.batch_size
        values = choice["values"]
        k = values.shape[1]
        history0 = self.history[0] if self.track else None
        choice["accepted"] = []
        for b, rank in choice["events"]:
            beam = int(choice["in_group"][b, rank])
            row = int(self._rows[g][beam])
            indices = None
            if history0 is not None:
                indices = tuple(history0[beam].tolist()) + (beam,)
            ok = self.pools[b][g].add(
                ctx.sequences[row].clone(),
                float(values[b, rank]),
                length + 1 - self.prompt_length,
                cfg.length_penalty,
                indices,
                int(nodes[b, rank]),
            )
            choice["accepted"].append(ok)
        best = values[:, 0].tolist()
        for b in range(B):
            if self.done_groups[b][g]:
                continue
            self.done_groups[b][g] = self.pools[b][g].is_done(
                best[b],
                length + 1,
                self.prompt_length,
                cfg.early_stopping,
                cfg.length_penalty,
                cfg.max_length,
            )
        offset = torch.arange(B, device=values.device)[:, None] * k
        flat = torch.where(choice["done"][:, None], -1, choice["take"] + offset)
        return flat.reshape(-1)

    def force(self, ctx, scores: torch.Tensor, token_id: int) -> Selection:
        """Every running beam continues with ``token_id``; the group-by-group choice made
        in :meth:`process` is dropped. If the token is an EOS id, every beam of a group
        that is not done becomes a finished hypothesis and stops (score -1e9)."""
        self._pending = None
        cfg = self.config
        B, n, G = self.batch_size, self.num_beams, self.groups
        token_id = int(token_id)
        rows = torch.arange(B * n, device=scores.device)
        added = scores[:, token_id]
        if token_id in eos_token_ids(cfg):
            length = ctx.sequences.shape[1]
            for b in range(B):
                for g in range(G):
                    if self.done_groups[b][g]:
                        continue
                    for row in self._rows[g].view(B, -1)[b].tolist():
                        self.pools[b][g].add(
                            ctx.sequences[row].clone(),
                            float(self.beam_scores[row] + added[row]),
                            length + 1 - self.prompt_length,
                            cfg.length_penalty,
                            None,
                            -1,
                        )
                    self.done_groups[b][g] = len(self.pools[b][g]) >= self.group_size
            self.beam_scores = torch.full_like(self.beam_scores, NEG)
        else:
            self.beam_scores = self.beam_scores + added
        if self.track:
            for g in range(G):
                beam = torch.arange(B * self.group_size, device=scores.device)
                self.history[g] = torch.cat([self.history[g], beam[:, None]], dim=1)
        tokens = torch.full((B * n,), token_id, dtype=torch.long, device=scores.device)
        return Selection(tokens, rows, None)

    def update(self, ctx, selection: Selection) -> None:
        all_done = all(all(flags) for flags in self.done_groups)
        self.done = all_done or bool(stop_flags(ctx, ctx.sequences).all())

    # -- trace -------------------------------------------------------------------------------
    def _trace_info_groups(self, ctx, pending, new_nodes, parent_nodes, length, scores):
        cfg = self.config
        B, n, S = self.batch_size, self.num_beams, self.group_size
        generated = length + 1 - self.prompt_length
        penalty = cfg.length_penalty
        cols: dict[str, list[torch.Tensor]] = {}

        def put(live=None, **kw):
            for key, value in kw.items():
                value = torch.as_tensor(value)
                if live is not None:  # (B, K): drop the rows of inputs whose group is done
                    value = value[live.expand_as(value)]
                cols.setdefault(key, []).append(value.reshape(-1).cpu())

        for g, choice in enumerate(pending["groups"]):
            processed, accumulated, values, tokens, parents, current = choice["trace"]
            k = values.shape[1]
            dev = values.device
            rows_g = self._rows[g].view(B, S)
            fate = torch.full((B, k), PRUNED, dtype=torch.long, device=dev)
            beam = torch.full((B, k), -1, dtype=torch.long, device=dev)
            done = choice["done"]  # (B,) done *before* this step: its rows only carry padding
            taken = choice["take"]  # (B, S) rank of each new beam
            new_pos = (g * S + torch.arange(S, device=dev)).expand(B, S)
            beam.scatter_(1, taken, new_pos)
            fate.scatter_(1, taken, torch.full_like(taken, KEPT))
            for (b, rank), ok in zip(choice["events"], choice["accepted"], strict=True):
                fate[b, rank] = FINISHED if ok else REJECTED
            parent_rows = rows_g.gather(1, parents)  # (B, K) global rows
            in_group = choice["in_group"].reshape(-1)
            token_lp = processed[in_group, tokens.reshape(-1)].view(B, k)
            put(
                live=~done[:, None],
                batch=torch.arange(B, device=dev)[:, None].expand(B, k),
                rank=torch.arange(k, device=dev).expand(B, k),
                parent=parent_rows - torch.arange(B, device=dev)[:, None] * n,
                parent_node=parent_nodes[parent_rows.reshape(-1)].view(B, k),
                node=new_nodes[g],
                token=tokens,
                token_logprob=token_lp,
                score=values,
                normalized=values / generated**penalty,
                fate=fate,
                source=torch.zeros_like(fate),
                group=torch.full_like(fate, g),
                beam=beam,
                slot=torch.full_like(fate, -1),
            )
            self._diversity_candidates(
                put,
                cfg,
                g,
                accumulated,
                values,
                tokens,
                parents,
                current,
                rows_g,
                parent_nodes,
                processed,
                generated,
                done,
            )
        candidates = BeamCandidates.of(**{k: torch.cat(v) for k, v in cols.items()})
        return BeamStep(
            kind=self.mode,
            candidates=candidates,
            pool=self._pool_view(),
            early_stop=EarlyStop(
                rule=cfg.early_stopping,
                length_penalty=float(penalty),
                generated_length=generated,
                input_done=torch.tensor([all(f) for f in self.done_groups]),
                done=all(all(f) for f in self.done_groups),
                group_done=torch.tensor(self.done_groups),
            ),
        )

    def _diversity_candidates(
        self,
        put,
        cfg,
        g,
        accumulated,
        values,
        tokens,
        parents,
        current,
        rows_g,
        parent_nodes,
        processed,
        generated,
        done,
    ):
        """Candidates the group would have kept without the diversity penalty (the penalty
        added back to the processed scores) but lost because of it; none for the inputs
        whose group was already done (done: (B,) bools)."""
        penalty = float(cfg.diversity_penalty or 0.0)
        if g == 0 or penalty <= 0.0:
            return
        B, n, S = self.batch_size, self.num_beams, self.group_size
        vocab = processed.shape[-1]
        k = values.shape[1]
        dev = values.device
        earlier = current.view(B, n)[:, : g * S]
        counts = torch.zeros((B, vocab), dtype=processed.dtype, device=dev)
        counts.scatter_add_(1, earlier, torch.ones_like(earlier, dtype=processed.dtype))
        plain = (accumulated.view(B, S, vocab) + penalty * counts[:, None, :]).view(B, -1)
        p_values, p_flat = torch.topk(plain, k, dim=1)
        p_parents = torch.div(p_flat, vocab, rounding_mode="floor")
        p_tokens = p_flat % vocab
        chosen = parents * vocab + tokens
        lost = ~(p_flat[:, :, None] == chosen[:, None, :]).any(-1) & ~done[:, None]  # (B, K)
        if not bool(lost.any()):
            return
        b_idx, r_idx = lost.nonzero(as_tuple=True)
        par = p_parents[b_idx, r_idx]
        rows = rows_g[b_idx, par]
        tok = p_tokens[b_idx, r_idx]
        in_group = b_idx * S + par
        put(
            batch=b_idx,
            rank=r_idx,
            parent=rows - b_idx * n,
            parent_node=parent_nodes[rows],
            node=torch.full_like(b_idx, -1),
            token=tok,
            token_logprob=processed[in_group, tok] + penalty * counts[b_idx, tok],
            score=p_values[b_idx, r_idx],
            normalized=p_values[b_idx, r_idx] / generated**cfg.length_penalty,
            fate=torch.full_like(b_idx, DIVERSITY),
            source=torch.full_like(b_idx, 2),
            group=torch.full_like(b_idx, g),
            beam=torch.full_like(b_idx, -1),
            slot=torch.full_like(b_idx, -1),
        )

    def _pool_view(self) -> tuple[PoolEntry, ...]:
        """The finished hypotheses of every (input, group) pool."""
        return pool_entries(self.pools, self.prompt_length)

    # -- the end -------------------------------------------------------------------------------
    def finalize(self, ctx) -> dict[str, Any]:
        cfg = self.config
        B, G, S = self.batch_size, self.groups, self.group_size
        pools = copy.deepcopy(self.pools)
        length = ctx.sequences.shape[1]
        flat_history = torch.cat(self.history, dim=0) if self.track else None
        for b in range(B):
            for g in range(G):
                if self.done_groups[b][g]:
                    continue
                for s in range(S):
                    row = (b * G + g) * S + s
                    indices = tuple(flat_history[row].tolist()) if self.track else None
                    pools[b][g].add(
                        ctx.sequences[row],
                        float(self.beam_scores[row]),
                        length - self.prompt_length,
                        cfg.length_penalty,
                        indices,
                        int(self.running_nodes[row]),
                    )
        return pooled_output(self, ctx, pools, int(cfg.num_return_sequences or 1))

    def beams(self, ctx, batch: int = 0) -> list[tuple[list[int], float, bool]]:
        return pooled_beams(self, ctx, batch)
