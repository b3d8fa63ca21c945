"""Recording what happened at every step, and tidy pandas views of it.

``lm.generate(..., trace=True)`` or ``genlab.generate(..., trace=True)`` attaches a
:class:`Tracer` to the run. Per step and row it keeps the top-k tokens after every stage
(raw logits, each logits processor, the final scores) plus the chosen token at every stage,
so the tables below are cheap views:

* :meth:`Trace.table` -- the tidy table of DESIGN.md: one row per
  (step, row, stage, candidate) with logit, logprob, prob, rank, chosen, ...
* :meth:`Trace.steps` -- one row per generated token: log-prob, prob, rank, entropy,
  top alternatives;
* :meth:`Trace.transition_scores` -- equal to ``compute_transition_scores``;
* :meth:`Trace.stage_summary` -- per step, the probability mass each processor removed.

Beam strategies add their candidates through ``Selection.info["candidates"]``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import torch


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


@dataclass
class StepRecord:
    step: int
    tokens: torch.LongTensor  # (rows,) chosen, in the order of the rows *after* the step
    parents: torch.LongTensor | None
    chosen_for_row: torch.LongTensor  # (rows_before,) token chosen from each row (or -1)
    stages: list[StageRecord]
    forced: bool
    finished: bool
    info: dict[str, Any] = field(default_factory=dict)


def _entropy(logprobs: torch.Tensor) -> torch.Tensor:
    p = logprobs.exp()
    return -(torch.where(p > 0, p * logprobs, torch.zeros_like(p))).sum(-1)


class Tracer:
    """Attached to a Run by the engine; records stages and builds a :class:`Trace`."""

    def __init__(self, run, top_k: int = 10, stages: bool = True) -> None:
        if top_k < 1:
            raise ValueError(f"trace top_k must be >= 1, got {top_k}")
        self.run = run
        self.top_k = int(top_k)
        self.record_stages = stages
        self._current: list[tuple[str, torch.Tensor]] = []
        self.steps: list[StepRecord] = []

    # -- called by the engine ------------------------------------------------------------
    def on_logits(self, step: int, logits: torch.Tensor) -> None:
        self._current = [("raw", logits)]

    def on_stage(self, step: int, name: str, scores: torch.Tensor) -> None:
        if self.record_stages or name == "final":
            self._current.append((name, scores))

    def on_step_end(self, step: int, record, selection) -> None:
        rows = self._current[0][1].shape[0]
        parents = selection.parents
        chosen = torch.full((rows,), -1, dtype=torch.long)
        if parents is None:
            chosen = selection.tokens.detach().cpu().clone()
        else:
            # each surviving row records the token it got from its parent
            chosen[parents.cpu()] = selection.tokens.cpu()
        stages = [self._summarise(name, s, chosen) for name, s in self._current]
        self.steps.append(StepRecord(
            step=step,
            tokens=selection.tokens.detach().cpu().clone(),
            parents=None if parents is None else parents.detach().cpu().clone(),
            chosen_for_row=chosen,
            stages=stages,
            forced=record.forced,
            finished=record.finished,
            info=dict(selection.info or {}),
        ))
        self._current = []

    def _summarise(self, name: str, scores: torch.Tensor, chosen: torch.LongTensor):
        s = scores.detach().float().cpu()
        logprobs = torch.log_softmax(s, dim=-1)
        k = min(self.top_k, s.shape[-1])
        top_values, top_ids = s.topk(k, dim=-1)
        idx = chosen.clamp(min=0)[:, None]
        chosen_values = s.gather(1, idx)[:, 0]
        ranks = (s > chosen_values[:, None]).sum(-1)
        return StageRecord(
            name=name,
            top_ids=top_ids,
            top_values=top_values,
            top_logprobs=logprobs.gather(1, top_ids),
            chosen_values=chosen_values,
            chosen_logprobs=logprobs.gather(1, idx)[:, 0],
            chosen_ranks=ranks,
            entropy=_entropy(logprobs),
            kept=torch.isfinite(s).sum(-1),
        )

    def truncate(self, step: int) -> None:
        self.steps = [s for s in self.steps if s.step < step]

    def fork(self, run) -> Tracer:
        other = copy.copy(self)
        other.run = run
        other.steps = list(self.steps)
        other._current = []
        return other

    @property
    def trace(self) -> Trace:
        return Trace(self.steps, tokenizer=self.run.tokenizer, prompt_length=self.run.prompt_length,
                     run=self.run)


class Trace:
    """Tables (pandas) over the recorded steps. Plots live in :mod:`genlab.plots`."""

    def __init__(self, steps: list[StepRecord], tokenizer=None, prompt_length: int = 0, run=None):
        self.records = steps
        self.tokenizer = tokenizer
        self.prompt_length = prompt_length
        self.run = run

    def __len__(self) -> int:
        return len(self.records)

    def token_text(self, token_id: int) -> str:
        if self.tokenizer is None or token_id < 0:
            return str(token_id)
        return self.tokenizer.decode([int(token_id)])

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
                    for rank, (tid, v, lp) in enumerate(zip(ids, vals, lps)):
                        out.append(self._row(rec, r, st.name, tid, v, lp, rank, tid == chosen))
                    if chosen >= 0 and chosen not in ids:
                        out.append(self._row(rec, r, st.name, chosen, float(st.chosen_values[r]),
                                             float(st.chosen_logprobs[r]),
                                             int(st.chosen_ranks[r]), True))
        return pd.DataFrame(out, columns=["step", "row", "stage", "token_id", "token", "logit",
                                          "logprob", "prob", "rank", "chosen", "finished"])

    def _row(self, rec, r, stage, tid, value, lp, rank, chosen):
        return {
            "step": rec.step, "row": r, "stage": stage, "token_id": tid,
            "token": self.token_text(tid), "logit": value, "logprob": lp,
            "prob": float(torch.tensor(lp).exp()), "rank": rank, "chosen": chosen,
            "finished": rec.finished,
        }

    def steps(self, row: int = 0, alternatives: int = 3) -> pd.DataFrame:
        """One row per generated token of ``row``: the chosen token under the final scores,
        its log-prob, prob, rank, the entropy, and the top alternatives."""
        out = []
        for rec in self.records:
            final, raw = rec.stages[-1], rec.stages[0]
            if row >= final.top_ids.shape[0]:
                continue
            tid = int(rec.chosen_for_row[row])
            if tid < 0:
                continue
            alts = [
                f"{self.token_text(i)!r} {p:.3f}"
                for i, p in zip(final.top_ids[row, :alternatives].tolist(),
                                final.top_logprobs[row, :alternatives].exp().tolist())
            ]
            lp = float(final.chosen_logprobs[row])
            out.append({
                "step": rec.step, "token_id": tid, "token": self.token_text(tid),
                "logprob": lp, "prob": float(torch.tensor(lp).exp()),
                "rank": int(final.chosen_ranks[row]), "entropy": float(final.entropy[row]),
                "raw_logprob": float(raw.chosen_logprobs[row]),
                "raw_entropy": float(raw.entropy[row]), "forced": rec.forced,
                "top": ", ".join(alts),
            })
        return pd.DataFrame(out)

    def transition_scores(self, normalize_logits: bool = False) -> pd.DataFrame:
        """The scores of the chosen tokens, as ``compute_transition_scores`` gives them for
        greedy and sampling (the processed score, or its log-softmax when normalising)."""
        out = []
        for rec in self.records:
            final = rec.stages[-1]
            vals = final.chosen_logprobs if normalize_logits else final.chosen_values
            for r, tid in enumerate(rec.chosen_for_row.tolist()):
                if tid < 0:
                    continue
                out.append({"step": rec.step, "row": r, "token_id": tid,
                            "token": self.token_text(tid), "score": float(vals[r]),
                            "prob": float(final.chosen_logprobs[r].exp())})
        return pd.DataFrame(out)

    def stage_summary(self, step: int, row: int = 0) -> pd.DataFrame:
        """For one step: after each stage, the chosen token's prob and rank, how many tokens
        are still possible, and the probability mass (of the raw distribution) removed."""
        rec = next(r for r in self.records if r.step == step)
        out = []
        prev_kept = None
        for st in rec.stages:
            kept = int(st.kept[row])
            out.append({
                "stage": st.name, "tokens_kept": kept,
                "removed_tokens": 0 if prev_kept is None else prev_kept - kept,
                "chosen_prob": float(st.chosen_logprobs[row].exp()),
                "chosen_rank": int(st.chosen_ranks[row]),
                "top_token": self.token_text(int(st.top_ids[row, 0])),
                "top_prob": float(st.top_logprobs[row, 0].exp()),
                "entropy": float(st.entropy[row]),
            })
            prev_kept = kept
        return pd.DataFrame(out)

    def topk(self, step: int, row: int = 0, stage: str = "final") -> pd.DataFrame:
        """The top-k table of one stage at one step."""
        t = self.table(stage=stage)
        return t[(t.step == step) & (t.row == row)].reset_index(drop=True)

    def __repr__(self) -> str:
        return f"Trace({len(self.records)} steps, stages={self.stages()})"
