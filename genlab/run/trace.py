"""Recording what happened at every step, and tidy pandas views of it.

``lm.generate(..., trace=True)`` or ``genlab.generate(..., trace=True)`` attaches a
:class:`Tracer` to the run. Per step and row it keeps the top-k tokens after every stage
(raw logits, each logits processor, the final scores) plus the chosen token at every stage,
so the tables below are cheap views:

* :meth:`Trace.table` -- the tidy table: one row per
  (step, row, stage, candidate) with score (the stage's value: the logit at ``raw``),
  logprob, prob, rank, chosen, ...
* :meth:`Trace.steps` -- one row per generated token: log-prob, prob, rank, entropy,
  top alternatives;
* :meth:`Trace.transition_scores` -- ``compute_transition_scores``'s values, in the
  columns of a result's table (:data:`TRANSITION_COLUMNS`);
* :meth:`Trace.stage_summary` -- per step, the probability mass each processor removed.

Strategies hand over their own step data as typed values (:mod:`genlab.strategies.stepdata`): beam
strategies every candidate (:class:`~genlab.strategies.stepdata.BeamStep`), assisted decoding its
draft (:class:`~genlab.strategies.stepdata.AssistedStep`: the trace keeps one record per accepted
token, with the draft it came from), contrastive search and DoLa theirs. Their tables are
here too, read from a trace or from a Run's ``history``: :func:`assisted_table` (and
:func:`acceptance_rate`), :func:`contrastive_table` and :func:`dola_table`.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import torch

from ..lazy import LazyModule
from ..strategies.stepdata import (
    FATES,
    SOURCES,
    AssistedStep,
    BeamStep,
    CandidateFate,
    ContrastiveStep,
    DolaStep,
    StepData,
)
from ..text.tokens import shown

pd = LazyModule("pandas")  # imported when a table is first made

#: the columns of a transition-score table (:meth:`Trace.transition_scores`,
#: ``GenerationResult.transition_scores``): ``score`` is ``compute_transition_scores``'s value
TRANSITION_COLUMNS = ["step", "row", "token_id", "token", "score", "logprob", "prob"]


@dataclass
class StageRecord:
    """Top-k of one stage for every row: ids/values (rows, k); chosen-token values (rows,)."""

    name: str
    top_ids: torch.LongTensor
    top_values: torch.Tensor
    top_logprobs: torch.Tensor
    chosen_values: torch.Tensor
    chosen_logprobs: torch.Tensor
    chosen_ranks: torch.LongTensor
    entropy: torch.Tensor
    kept: torch.LongTensor  # (rows,) number of tokens with a finite score
    kept_mass: torch.Tensor | None = None  # (rows,) raw probability mass still possible
    # (rows,) probability, under the stage before, of the tokens this stage excluded
    removed_mass: torch.Tensor | None = None


@dataclass
class StepRecord:
    """One generated token per row: the stages it went through and what was chosen.

    step: the engine step; position: the token's place among the tokens that step added
    (assisted decoding adds several; 0 otherwise); chosen_for_row: the token chosen from
    each row before the step (-1: none; for a beam row, its best child that goes on, else
    its best child that entered the pool of finished hypotheses); info: the strategy's
    typed step data (:mod:`genlab.strategies.stepdata`), or None.
    """

    step: int
    tokens: torch.LongTensor  # (rows,) chosen, in the order of the rows *after* the step
    parents: torch.LongTensor | None
    chosen_for_row: torch.LongTensor  # (rows_before,) token chosen from each row (or -1)
    stages: list[StageRecord]
    forced: bool
    finished: bool
    info: StepData | None = None
    position: int = 0


def _beam_chosen(chosen: torch.LongTensor, cands) -> torch.LongTensor:
    """A beam step's token chosen from each row (rows,): the best child that goes on as a
    running beam, else the best child that entered the pool of finished hypotheses, else
    -1. The rows the strategy hands on are only the running beams: at the last step every
    candidate ends, and those rows (ranked at -1e9 each) are not what the search took."""
    fates = cands.fates()
    inputs = int(cands.batch.max()) + 1 if cands.batch.numel() else 1
    per_input = chosen.shape[0] // inputs
    row_of = (cands.batch * per_input + cands.parent).tolist()
    kept = {row for row, fate in zip(row_of, fates, strict=True) if fate is CandidateFate.KEPT}
    out = chosen.clone()
    best: dict[int, tuple[float, int]] = {}
    for i, (row, fate) in enumerate(zip(row_of, fates, strict=True)):
        if row in kept:
            continue
        out[row] = -1
        if fate is CandidateFate.FINISHED and (row not in best or cands.score[i] > best[row][0]):
            best[row] = (float(cands.score[i]), int(cands.token[i]))
    for row, (_, token) in best.items():
        out[row] = token
    return out


class Tracer:
    """Records every step of a run and builds a :class:`Trace`.

    It observes the run's hook points like any hook (``run.attach_tracer(tracer)``, or
    ``trace=True`` at the start): raw logits, the scores after each processor, the final
    scores, and the finished step record. Subclasses may extend :meth:`on_logits`,
    :meth:`on_stage` and :meth:`on_step_end`.
    """

    def __init__(self, run, depth: int = 10, stages: bool = True):
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise ValueError(f"trace depth must be an int >= 1, got {depth!r}")
        self.run = run
        #: how many of the best tokens each stage keeps (the trace's recording depth)
        self.depth = int(depth)
        self.record_stages = stages
        # the stages seen so far in this step, one list per token position
        self._current: list[list[tuple[str, torch.Tensor]]] = []
        self._current_step: int | None = None
        self.steps: list[StepRecord] = []

    # -- observing the hook points -------------------------------------------------------
    def attach(self, registry) -> list:
        """Observe ``registry``'s points; returns the functions that stop observing."""
        prefix = len("processor.")
        return [
            registry.observe("logits", lambda point, value, step: self.on_logits(step, value)),
            registry.observe(
                "processor.*",
                lambda point, value, step: self.on_stage(step, point[prefix:], value),
            ),
            registry.observe(
                "scores", lambda point, value, step: self.on_stage(step, "final", value)
            ),
            # beam strategies build their candidate tables only for listeners
            registry.observe("beam.candidates", lambda point, value, step: None),
            registry.observe(
                "step_end", lambda point, record, step: self.on_step_end(step, record)
            ),
        ]

    def on_logits(self, step: int, logits: torch.Tensor) -> None:
        """A token position begins: its raw logits (rows, vocab) are the first stage. The
        first of a step starts the step; assisted decoding shows one per drafted token."""
        if self._current_step != step:
            self._current, self._current_step = [], step
        self._current.append([("raw", logits)])

    def on_stage(self, step: int, name: str, scores: torch.Tensor) -> None:
        """The scores after the stage ``name`` (a processor, DoLa, or "final")."""
        if self._current and (self.record_stages or name == "final"):
            self._current[-1].append((name, scores))

    def on_step_end(self, step: int, record) -> None:
        """Summarise the stages seen since :meth:`on_logits` with the step's record: one
        :class:`StepRecord` per token the step added."""
        groups, self._current, self._current_step = self._current, [], None
        tokens = record.tokens if record.tokens.dim() == 2 else record.tokens[:, None]
        for position in range(tokens.shape[1]):
            stages = groups[min(position, len(groups) - 1)]
            if stages[-1][0] != "final":  # positions the engine did not score itself
                stages = [*stages, ("final", stages[-1][1])]
            last = position == tokens.shape[1] - 1
            self._record(step, position, tokens[:, position], stages, record, last)

    def _record(self, step, position, tokens, current, record, last: bool) -> None:
        rows = current[0][1].shape[0]
        parents = record.parents
        chosen = torch.full((rows,), -1, dtype=torch.long)
        if parents is None:
            chosen = tokens.detach().cpu().clone()
        else:
            # each parent row records the token of its best child (the first: new rows
            # are in score order)
            for r in reversed(range(len(parents))):
                chosen[int(parents[r])] = int(tokens[r])
            if isinstance(record.info, BeamStep):
                chosen = _beam_chosen(chosen, record.info.candidates)
        stages, raw_probs, prev, last = [], None, None, None
        for name, s in current:
            if last is not None and s is last:  # the same scores ("final" after the last
                # processor, or after the raw logits): nothing changed, nothing removed
                stage = dataclasses.replace(
                    stages[-1], name=name, removed_mass=torch.zeros_like(stages[-1].kept_mass)
                )
            else:
                stage, probs = self._summarise(name, s, chosen, raw_probs, prev)
                raw_probs = probs if raw_probs is None else raw_probs
                prev = (probs, torch.isfinite(s))
            stages.append(stage)
            last = s
        self.steps.append(
            StepRecord(
                step=step,
                tokens=tokens.detach().cpu().clone(),
                parents=None if parents is None else parents.detach().cpu().clone(),
                chosen_for_row=chosen,
                stages=stages,
                forced=record.forced,
                finished=record.finished and last,
                info=record.info,
                position=position,
            )
        )

    def _summarise(self, name, scores, chosen, raw_probs=None, prev=None):
        """The StageRecord of one stage, and its probabilities (for the stages after it).

        raw_probs: the raw distribution (None for the raw stage itself); prev: the stage
        before's (probabilities, finite mask), or None.
        """
        s = scores.detach().float()
        probs = torch.softmax(s, dim=-1)
        lse = torch.logsumexp(s, dim=-1, keepdim=True)  # one pass instead of a log_softmax
        k = min(self.depth, s.shape[-1])
        top_values, top_ids = s.topk(k, dim=-1)
        idx = chosen.clamp(min=0)[:, None].to(s.device)
        chosen_values = s.gather(1, idx)
        finite = torch.isfinite(s)
        # probability mass of the *raw* distribution still possible after this stage
        kept_mass = ((probs if raw_probs is None else raw_probs) * finite).sum(-1)
        removed = torch.zeros_like(kept_mass)
        if prev is not None:  # what the stage before gave the tokens this one excluded
            prev_probs, prev_finite = prev
            removed = (prev_probs * (prev_finite & ~finite)).sum(-1)
        record = StageRecord(
            name=name,
            top_ids=top_ids.cpu(),
            top_values=top_values.cpu(),
            top_logprobs=(top_values - lse).cpu(),
            chosen_values=chosen_values[:, 0].cpu(),
            chosen_logprobs=(chosen_values - lse)[:, 0].cpu(),
            chosen_ranks=(s > chosen_values).sum(-1).cpu(),
            entropy=torch.special.entr(probs).sum(-1).cpu(),
            kept=finite.sum(-1).cpu(),
            kept_mass=kept_mass.cpu(),
            removed_mass=removed.cpu(),
        )
        return record, probs

    def truncate(self, step: int) -> None:
        """Forget the steps from ``step`` on (the run was rewound)."""
        self.steps = [s for s in self.steps if s.step < step]

    def fork(self, run) -> Tracer:
        """A copy recording for ``run`` (a fork), with the steps so far."""
        other = copy.copy(self)
        other.run = run
        other.steps = list(self.steps)
        other._current, other._current_step = [], None
        return other

    @property
    def trace(self) -> Trace:
        """The recorded steps as a :class:`Trace` (tables and plots)."""
        return Trace(
            self.steps,
            tokenizer=self.run.views.tokenizer,
            prompt_length=self.run.prompt_length,
            run=self.run,
        )


class Trace:
    """Tables (pandas) over the recorded steps. Plots live in :mod:`genlab.plots`.

    steps: the :class:`Tracer`'s step records; tokenizer: to show tokens as text;
    prompt_length: tokens before the first generated one; run: the run they came from
    (beam views read its returned sequences).

    (Not run as a test: it prints a wide table (the notebooks show it; the tests check its
    columns).)

    >>> res = lm.generate("Once upon a time", do_sample=True, seed=0, trace=True)  # doctest: +SKIP
    >>> res.trace.steps()                   # one row per generated token  # doctest: +SKIP
    >>> res.trace.stage_summary(0)          # what each processor did      # doctest: +SKIP
    """

    def __init__(self, steps: list[StepRecord], tokenizer=None, prompt_length: int = 0, run=None):
        self.records = steps
        self.tokenizer = tokenizer
        self.prompt_length = prompt_length
        self.run = run

    def __len__(self) -> int:
        return len(self.records)

    def token_text(self, token_id: int) -> str:
        """Token ``token_id`` as a person reads it: its decoded text with edge spaces shown
        as ␣ (:func:`genlab.text.tokens.shown`); its id as text without a tokenizer."""
        return shown(self.tokenizer, token_id)

    def stages(self) -> list[str]:
        """Stage names in order (raw, each processor, final)."""
        return [st.name for st in self.records[0].stages] if self.records else []

    # -- views -----------------------------------------------------------------------------
    def table(self, stage: str | None = None) -> pd.DataFrame:
        """The tidy table: one row per (step, row, stage, candidate).

        Candidates are the top-k of that stage plus the chosen token if it fell outside.
        """
        out: list[dict[str, Any]] = []
        for rec in self.records:
            for st in rec.stages:
                if stage is not None and st.name != stage:
                    continue
                for r in range(st.top_ids.shape[0]):
                    chosen = int(rec.chosen_for_row[r])
                    ids = st.top_ids[r].tolist()
                    vals = st.top_values[r].tolist()
                    lps = st.top_logprobs[r].tolist()
                    for rank, (tid, v, lp) in enumerate(zip(ids, vals, lps, strict=True)):
                        out.append(self._row(rec, r, st.name, tid, v, lp, rank, tid == chosen))
                    if chosen >= 0 and chosen not in ids:
                        out.append(
                            self._row(
                                rec,
                                r,
                                st.name,
                                chosen,
                                float(st.chosen_values[r]),
                                float(st.chosen_logprobs[r]),
                                int(st.chosen_ranks[r]),
                                True,
                            )
                        )
        return pd.DataFrame(
            out,
            columns=[
                "step",
                "row",
                "stage",
                "token_id",
                "token",
                "score",
                "logprob",
                "prob",
                "rank",
                "chosen",
                "finished",
            ],
        )

    def _row(self, rec, r, stage, tid, value, lp, rank, chosen):
        return {
            "step": rec.step,
            "row": r,
            "stage": stage,
            "token_id": tid,
            "token": self.token_text(tid),
            "score": value,
            "logprob": lp,
            "prob": math.exp(lp),
            "rank": rank,
            "chosen": chosen,
            "finished": rec.finished,
        }

    def steps(self, row: int = 0, alternatives: int = 3) -> pd.DataFrame:
        """One row per generated token of ``row``: the chosen token under the final scores,
        its log-prob, prob, rank, the entropy, and the top alternatives; in a run under
        ``json_schema=``, ``regex=`` or ``grammar=``, also ``allowed`` (the tokens the
        grammar allowed) and ``grammar_forced`` (it allowed one).

        In a finished beam search, ``row`` is a returned sequence (an output row): each
        step shows the token that sequence took, from the beam it came from."""
        if self.records and isinstance(self.records[0].info, BeamStep) and self.returned_nodes():
            return self._returned_steps(row, alternatives)
        out = []
        for rec in self.records:
            final, raw = rec.stages[-1], rec.stages[0]
            if row >= final.top_ids.shape[0]:
                continue
            tid = int(rec.chosen_for_row[row])
            if tid < 0:
                continue
            alts = [
                f"{self.token_text(i)} {p:.3f}"
                for i, p in zip(
                    final.top_ids[row, :alternatives].tolist(),
                    final.top_logprobs[row, :alternatives].exp().tolist(),
                    strict=True,
                )
            ]
            lp = float(final.chosen_logprobs[row])
            out.append(
                {
                    "step": rec.step,
                    "token_id": tid,
                    "token": self.token_text(tid),
                    "logprob": lp,
                    "prob": math.exp(lp),
                    "rank": int(final.chosen_ranks[row]),
                    "entropy": float(final.entropy[row]),
                    "raw_logprob": float(raw.chosen_logprobs[row]),
                    "raw_entropy": float(raw.entropy[row]),
                    "forced": rec.forced,
                    **_grammar_columns(rec, row),
                    "top": ", ".join(alts),
                }
            )
        return pd.DataFrame(out)

    def _returned_steps(self, row: int, alternatives: int) -> pd.DataFrame:
        """:meth:`steps` of a beam search: the path of returned sequence ``row``."""
        path = self.returned_path(row)
        by_step = {rec.step: rec for rec in self.records}
        num_beams = int(self.run.views.gen_config.num_beams)
        out = []
        for node in path.itertuples():
            rec = by_step[int(node.step)]
            final, raw = rec.stages[-1], rec.stages[0]
            parent = int(node.batch) * num_beams + int(node.parent_beam)  # the row it extends
            tid = int(node.token_id)
            top = final.top_ids[parent].tolist()
            alts = [
                f"{self.token_text(i)} {p:.3f}"
                for i, p in zip(
                    top[:alternatives],
                    final.top_logprobs[parent, :alternatives].exp().tolist(),
                    strict=True,
                )
            ]
            lp = float(node.token_logprob)
            out.append(
                {
                    "step": int(node.step),
                    "token_id": tid,
                    "token": self.token_text(tid),
                    "logprob": lp,
                    "prob": math.exp(lp),
                    "rank": top.index(tid) if tid in top else None,
                    "entropy": float(final.entropy[parent]),
                    "parent_beam": int(node.parent_beam),
                    "score": float(node.score),
                    "raw_entropy": float(raw.entropy[parent]),
                    "forced": rec.forced,
                    **_grammar_columns(rec, parent),
                    "top": ", ".join(alts),
                }
            )
        return pd.DataFrame(out)

    def transition_scores(
        self, normalize_logits: bool = False, row: int | None = None
    ) -> pd.DataFrame:
        """The chosen tokens' scores, one row per token (greedy and sampling runs), in
        the columns of :data:`TRANSITION_COLUMNS`, as ``GenerationResult.transition_scores``.

        ``score`` is what ``compute_transition_scores(..., normalize_logits=...)`` gives:
        the processed score (the default, as in the reference) or its log-softmax;
        ``logprob`` and ``prob`` are always the token's log-probability and probability in
        the processed distribution. row: one sequence, or None for all of them.
        """
        out = []
        for rec in self.records:
            final = rec.stages[-1]
            vals = final.chosen_logprobs if normalize_logits else final.chosen_values
            for r, tid in enumerate(rec.chosen_for_row.tolist()):
                if tid < 0 or (row is not None and r != row):
                    continue
                out.append(
                    {
                        "step": rec.step,
                        "row": r,
                        "token_id": tid,
                        "token": self.token_text(tid),
                        "score": float(vals[r]),
                        "logprob": float(final.chosen_logprobs[r]),
                        "prob": float(final.chosen_logprobs[r].exp()),
                    }
                )
        return pd.DataFrame(out, columns=TRANSITION_COLUMNS)

    def stage_summary(self, step: int, row: int = 0) -> pd.DataFrame:
        """For one step, one row per stage (raw, each processor, final): how many tokens are
        still possible and how many the stage removed; ``removed_mass``, the probability the
        stage before gave the tokens this stage removed; ``raw_mass_kept`` and
        ``raw_mass_removed``, the same in the raw distribution's terms (what is left of it,
        and what this stage took); the chosen token's prob and rank, the top token and the
        entropy after the stage."""
        rec = next((r for r in self.records if r.step == step), None)
        if rec is None:
            taken = sorted({r.step for r in self.records})
            raise ValueError(f"step must be one of the steps recorded, {taken}; got {step}")
        out = []
        prev_kept, prev_mass = None, 1.0
        for st in rec.stages:
            kept = int(st.kept[row])
            mass = float(st.kept_mass[row]) if st.kept_mass is not None else float("nan")
            removed = float(st.removed_mass[row]) if st.removed_mass is not None else math.nan
            out.append(
                {
                    "stage": st.name,
                    "tokens_kept": kept,
                    "removed_tokens": 0 if prev_kept is None else prev_kept - kept,
                    "removed_mass": removed,
                    "raw_mass_kept": mass,
                    "raw_mass_removed": max(0.0, prev_mass - mass),  # not -0.000 from rounding
                    "chosen_prob": float(st.chosen_logprobs[row].exp()),
                    "chosen_rank": int(st.chosen_ranks[row]),
                    "top_token": self.token_text(int(st.top_ids[row, 0])),
                    "top_prob": float(st.top_logprobs[row, 0].exp()),
                    "entropy": float(st.entropy[row]),
                }
            )
            prev_kept, prev_mass = kept, mass
        return pd.DataFrame(out)

    def topk(self, step: int, row: int = 0, stage: str = "final") -> pd.DataFrame:
        """The top-k table of one ``stage`` at one ``step``, for sequence ``row``."""
        t = self.table(stage=stage)
        return t[(t.step == step) & (t.row == row)].reset_index(drop=True)

    # -- beam search views ---------------------------------------------------------------
    def _beam_records(self) -> list[StepRecord]:
        recs = [r for r in self.records if isinstance(r.info, BeamStep)]
        if not recs:
            raise ValueError(
                "this trace has no beam candidates: trace a beam search (num_beams > 1) "
                "with trace=True"
            )
        return recs

    def returned_nodes(self) -> list[int]:
        """Node ids of the returned sequences, in output row order ([] while running)."""
        return [] if self.run is None else self.run.returned_nodes

    def beam_tree(self, batch: int | None = None) -> pd.DataFrame:
        """Every candidate the beam search scored, one row per node of the beam tree.

        Columns: step, batch, node, parent_node (-1: the prompt), parent_beam, rank (among
        the step's candidates, best first), token_id, token, token_logprob (the processed
        log-prob of the token after its parent), score (accumulated), normalized_score
        (score / generated_length ** length_penalty), fate (kept / finished / rejected /
        pruned / diversity / constraint), source (search / constraint / unpenalized),
        group (beam group; 0 outside group beam search), beam (index of the running beam
        it became, else -1), slot (hypothesis-pool slot, else -1), returned_rows (the
        output rows whose sequence goes through this node), returned (that is not empty).
        :meth:`returned_path` gives one returned sequence's nodes in order.

        ``rejected``: it finished but the hypothesis pool did not take it; ``diversity``:
        in the group's top candidates only without the diversity penalty; ``constraint``:
        dropped by constrained beam search (EOS before the constraints were met, or ranked
        out by the constraint banks). Group beam search records no candidates for an
        (input, group) once it is done: like the reference, its rows then only carry
        padding, so its branch ends at the step that closed it.

        (Not run as a test: it prints a wide table (the notebooks show it; the tests check its
        columns).)

        >>> tree = out.trace.beam_tree()                   # doctest: +SKIP
        >>> tree[tree.fate == "finished"].nlargest(3, "normalized_score")  # doctest: +SKIP
        """
        frames = []
        for rec in self._beam_records():
            c = rec.info.candidates
            frame = pd.DataFrame(
                {
                    "step": rec.step,
                    "batch": c.batch.numpy(),
                    "node": c.node.numpy(),
                    "parent_node": c.parent_node.numpy(),
                    "parent_beam": c.parent.numpy(),
                    "rank": c.rank.numpy(),
                    "token_id": c.token.numpy(),
                    "token_logprob": c.token_logprob.float().numpy(),
                    "score": c.score.float().numpy(),
                    "normalized_score": c.normalized.float().numpy(),
                    "fate": [FATES[i].value for i in c.fate.tolist()],
                    "source": [SOURCES[i].value for i in c.source.tolist()],
                    "group": c.group.numpy(),
                    "beam": c.beam.numpy(),
                    "slot": c.slot.numpy(),
                }
            )
            frames.append(frame)
        tree = pd.concat(frames, ignore_index=True)
        tree.insert(7, "token", [self.token_text(t) for t in tree.token_id.tolist()])
        rows_of: dict[int, list[int]] = {}
        for row, path in enumerate(self._returned_paths(tree)):
            for node in path:
                rows_of.setdefault(node, []).append(row)
        tree["returned_rows"] = [tuple(rows_of.get(n, ())) if n >= 0 else () for n in tree.node]
        tree["returned"] = tree.returned_rows.map(bool)
        if batch is not None:
            tree = tree[tree.batch == batch].reset_index(drop=True)
        return tree

    def _returned_paths(self, tree: pd.DataFrame) -> list[list[int]]:
        """For every returned sequence, its node ids from the first step to the last."""
        parent_of = dict(zip(tree.node.tolist(), tree.parent_node.tolist(), strict=True))
        paths = []
        for node in self.returned_nodes():
            path = []
            while node >= 0 and node in parent_of:
                path.append(node)
                node = parent_of[node]
            paths.append(path[::-1])
        return paths

    def returned_path(self, row: int = 0) -> pd.DataFrame:
        """The beam-tree nodes of returned sequence ``row`` (an output row), step by step:
        its tokens, their log-probs and the running scores; empty while the run goes on."""
        tree = self.beam_tree()
        paths = self._returned_paths(tree)
        if not 0 <= row < max(len(paths), 1):
            raise ValueError(
                f"row must be in [0, {len(paths)}) (the returned sequences), got {row}"
            )
        if not paths:
            return tree.iloc[:0]
        index = tree.reset_index().set_index("node").loc[paths[row], "index"]
        return tree.loc[index.to_numpy()].reset_index(drop=True)

    def hypotheses(self, batch: int | None = None) -> pd.DataFrame:
        """The pool of finished hypotheses after every step: step, batch, group, slot,
        score (length-normalised), length (generated tokens), text, node."""
        out = []
        for rec in self._beam_records():
            for e in rec.info.pool:
                out.append(
                    {
                        "step": rec.step,
                        "batch": e.batch,
                        "group": e.group,
                        "slot": e.slot,
                        "score": e.score,
                        "length": len(e.tokens),
                        "text": self._join(list(e.tokens)),
                        "node": e.node,
                    }
                )
        cols = ["step", "batch", "group", "slot", "score", "length", "text", "node"]
        table = pd.DataFrame(out, columns=cols)
        if batch is not None:
            table = table[table.batch == batch].reset_index(drop=True)
        return table

    def early_stop(self) -> pd.DataFrame:
        """The stopping decision after every step and input: the rule (early_stopping), the
        generated length, and for beam search the best running score, the best score it
        could still reach, the worst finished hypothesis and whether search goes on."""
        out = []
        for rec in self._beam_records():
            es = rec.info.early_stop
            for b in range(len(es.input_done)):
                row = {
                    "step": rec.step,
                    "batch": b,
                    "rule": es.rule,
                    "generated_length": es.generated_length,
                }
                if es.best_possible is not None:
                    row.update(
                        best_running=float(es.best_running[b]),
                        best_possible=float(es.best_possible[b]),
                        worst_finished=float(es.worst_finished[b]),
                        n_finished=int(es.n_finished[b]),
                        improvable=bool(es.improvable[b]),
                    )
                else:
                    row["input_done"] = bool(es.input_done[b])
                row["done"] = es.done
                out.append(row)
        return pd.DataFrame(out)

    def _join(self, token_ids: list[int]) -> str:
        if self.tokenizer is None:
            return " ".join(str(t) for t in token_ids)
        return self.tokenizer.decode([int(t) for t in token_ids])

    def __repr__(self) -> str:
        return f"Trace({len(self.records)} steps, stages={self.stages()})"


def _grammar_columns(rec: StepRecord, row: int) -> dict:
    """A constrained run's columns of :meth:`Trace.steps`: ``allowed``, how many tokens the
    ``grammar`` stage left, and ``grammar_forced``, whether that was one (the step had no
    choice: the token could have been written without the model, "jump-forward")."""
    stage = next((st for st in rec.stages if st.name == "grammar"), None)
    if stage is None:
        return {}
    allowed = int(stage.kept[row])
    return {"allowed": allowed, "grammar_forced": allowed == 1}


def trace_of(source: Any, needed_by: str) -> Trace:
    """The :class:`Trace` in ``source``: a Trace, what ``lm.generate(..., trace=True)``
    returns (its ``.trace``), or a run started with ``trace=True`` (its tracer's trace).

    needed_by: the caller's name, for the error. A result or run recorded without a trace,
    or any other object, is a ValueError that says to pass ``trace=True``.
    """
    if isinstance(source, Trace):
        return source
    trace = getattr(source, "trace", None)  # a GenerationResult
    if trace is None:  # a Run: its tracer, when one is attached
        trace = getattr(getattr(source, "tracer", None), "trace", None)
    if isinstance(trace, Trace):
        return trace
    recorded = hasattr(source, "trace") or hasattr(source, "tracer")
    raise ValueError(
        f"{needed_by} draws a recorded trace, "
        + (
            f"and this {type(source).__name__} was generated without one"
            if recorded
            else f"got {type(source).__name__}"
        )
        + ": pass res = lm.generate(..., trace=True) (or its res.trace)"
    )


# ----------------------------------------------------------------------------------------
# the step data of assisted decoding, contrastive search and DoLa as tables
# ----------------------------------------------------------------------------------------


def assisted_table(steps: Any) -> pd.DataFrame:
    """One row per iteration: drafted, accepted, rejected, added tokens, the draft budget.

    ``steps``: a :class:`~genlab.run.trace.Trace` (``out.trace``), its ``records`` or a Run's
    ``history``. Columns: step, drafter, num_assistant_tokens, n_drafted, n_accepted,
    n_added, drafted, rejected, added. Returns a pandas DataFrame.
    """
    rows = []
    seen = set()
    for rec in getattr(steps, "records", steps):
        info = getattr(rec, "info", None)
        if not isinstance(info, AssistedStep):
            continue
        step = getattr(rec, "step", getattr(rec, "index", None))
        if step in seen:  # a trace keeps one record per accepted token
            continue
        seen.add(step)
        rows.append(
            {
                "step": step,
                "drafter": info.source.value,
                "num_assistant_tokens": info.num_assistant_tokens,
                "n_drafted": len(info.drafted),
                "n_accepted": info.accepted,
                "n_added": len(info.added),
                "drafted": list(info.drafted),
                "rejected": list(info.rejected),
                "added": list(info.added),
            }
        )
    return pd.DataFrame(
        rows,
        columns=[
            "step",
            "drafter",
            "num_assistant_tokens",
            "n_drafted",
            "n_accepted",
            "n_added",
            "drafted",
            "rejected",
            "added",
        ],
    )


def acceptance_rate(table: pd.DataFrame) -> float:
    """Accepted draft tokens / drafted tokens over a run; ``table``: :func:`assisted_table`'s
    result."""
    drafted = int(table["n_drafted"].sum())
    return float(table["n_accepted"].sum()) / drafted if drafted else 0.0


def contrastive_table(steps: Any) -> pd.DataFrame:
    """One row per (step, row, candidate): token_id, confidence, penalty, score, chosen.

    ``steps``: a :class:`~genlab.run.trace.Trace` (``out.trace``), its ``records``, or a Run's
    ``history`` (``lm.start(...)`` keeps one). Returns a pandas DataFrame.
    """
    records = getattr(steps, "records", steps)
    rows = []
    for rec in records:
        info = getattr(rec, "info", None)
        if not isinstance(info, ContrastiveStep):
            continue
        step = getattr(rec, "step", getattr(rec, "index", None))
        for r in range(info.candidates.shape[0]):
            for j in range(info.candidates.shape[1]):
                rows.append(
                    {
                        "step": step,
                        "row": r,
                        "candidate": j,
                        "token_id": int(info.candidates[r, j]),
                        "confidence": float(info.confidence[r, j]),
                        "penalty": float(info.penalty[r, j]),
                        "score": float(info.score[r, j]),
                        "chosen": bool(int(info.chosen[r]) == j),
                    }
                )
    return pd.DataFrame(
        rows,
        columns=[
            "step",
            "row",
            "candidate",
            "token_id",
            "confidence",
            "penalty",
            "score",
            "chosen",
        ],
    )


def dola_table(steps: Any) -> pd.DataFrame:
    """One row per (step, candidate layer): its Jensen-Shannon divergence from the final
    layer and whether DoLa contrasted with it.

    ``steps``: a :class:`~genlab.run.trace.Trace` (``out.trace``), its ``records``, or a Run's
    ``history``. Returns a pandas DataFrame.
    """
    rows = []
    for rec in getattr(steps, "records", steps):
        info = getattr(rec, "info", None)
        if not isinstance(info, DolaStep):
            continue
        step = getattr(rec, "step", getattr(rec, "index", None))
        js = info.divergence
        for j, layer in enumerate(info.layers):
            rows.append(
                {
                    "step": step,
                    "layer": layer,
                    "js_divergence": float("nan") if js is None else float(js[j]),
                    "chosen": layer == info.chosen_layer,
                }
            )
    return pd.DataFrame(rows, columns=["step", "layer", "js_divergence", "chosen"])
