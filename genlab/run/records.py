"""What a run hands back: the :class:`Step` record of each step, and the output at the end.

* :class:`Step` -- what one step did (tokens, parents, log-probabilities, text); a run's
  ``history`` is the list of them;
* :func:`step_record` -- the Step of a strategy's :class:`~genlab.strategies.Selection`;
* :func:`build_output` -- the reference-shaped output of a finished run: the sequences, or
  with ``return_dict_in_generate`` an output object with the reference's field names.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..strategies.stepdata import StepData
from ..text.tokens import show_token


@dataclass
class Step:
    """What one step did.

    index: the step's number (0 = first generated token); tokens: (rows,) chosen ids, or
    (rows, n) when a step appends several (assisted decoding); parents: (rows,) the row
    each new row continues, for beam-like strategies, else None; logprobs: log-softmax of
    the final scores at the chosen tokens; finished: the run ended with this step;
    forced: the token came from :meth:`~genlab.run.engine.Run.force`; text: the chosen
    tokens as decoded text, one string per token (when a tokenizer is known); info: the
    strategy's step data (:data:`genlab.strategies.stepdata.StepData`), or None.
    """

    index: int
    tokens: torch.LongTensor
    parents: torch.LongTensor | None
    logprobs: torch.Tensor
    finished: bool
    forced: bool = False
    text: list[str] | None = None
    info: StepData | None = None

    def __repr__(self) -> str:
        # the tokens as text where a tokenizer decoded them, else their ids: "tokens" are ids
        if self.text is not None:
            chosen = f"text={[show_token(t) for t in self.text]}"
        else:
            chosen = f"tokens={self.tokens.tolist()}"
        lp = [round(v, 3) for v in self.logprobs.reshape(-1).tolist()]
        extra = ", forced" if self.forced else ""
        return f"Step({self.index}, {chosen}, logprobs={lp}, finished={self.finished}{extra})"


def step_record(idx: int, sel, scores, forced: bool, done: bool, tokenizer=None) -> Step:
    """The :class:`Step` record of step ``idx``.

    idx: the step index; sel: the strategy's Selection (tokens, parents, info and, for
    several tokens a step, their scores); scores: (rows, vocab) the final scores the
    tokens were chosen from; forced: the token came from ``Run.force``; done: the run
    ended with this step; tokenizer: decodes the tokens into ``text`` (None: no text).
    """
    if sel.parents is not None:
        scores = scores[sel.parents]
    if sel.tokens.dim() == 2:  # (rows, n) tokens, one score tensor each
        each = sel.scores if sel.scores is not None else (scores,) * sel.tokens.shape[1]
        logprobs = torch.stack(
            [
                torch.log_softmax(s.float(), dim=-1).gather(1, t[:, None])[:, 0]
                for s, t in zip(each, sel.tokens.unbind(1), strict=True)
            ],
            dim=1,
        )
    else:
        logprobs = torch.log_softmax(scores.float(), dim=-1).gather(1, sel.tokens[:, None])
        logprobs = logprobs[:, 0]
    text = None
    if tokenizer is not None and hasattr(tokenizer, "decode"):
        text = [tokenizer.decode([t]) for t in sel.tokens.reshape(-1).tolist()]
    return Step(idx, sel.tokens, sel.parents, logprobs, done, forced, text, sel.info)


def build_output(state, ctx, encdec=None):
    """``(output, returned_nodes)`` of a finished run.

    state: the run's RunState (its strategy finalizes through ``ctx``, the run's step
    context); encdec: the run's EncoderDecoderInputs, or None for a decoder-only model.
    The output is a LongTensor (rows, length), or with ``return_dict_in_generate`` an
    output object; returned_nodes: beam search's winners (None for other strategies).
    """
    fields = dict(state.strategy.finalize(ctx))
    returned_nodes = fields.pop("returned_nodes", None)
    cfg = state.plan.config
    if not cfg.return_dict_in_generate:
        return fields["sequences"], returned_nodes
    from .. import outputs

    rec = state.recorded
    past = getattr(state.kv_cache, "inner", state.kv_cache) if cfg.use_cache else None
    common = dict(
        scores=tuple(rec["scores"]) if cfg.output_scores else None,
        logits=tuple(rec["logits"]) if cfg.output_logits else None,
        attentions=tuple(rec["attentions"]) if cfg.output_attentions else None,
        hidden_states=tuple(rec["hidden"]) if cfg.output_hidden_states else None,
        past_key_values=past,
    )
    common.update(fields)
    if encdec is not None:  # decoder_* / cross / encoder_* field names
        cross = tuple(rec["cross"]) if cfg.output_attentions else None
        return encdec.build_output(cfg, common, cross), returned_nodes
    cls = (
        outputs.GenerateBeamDecoderOnlyOutput
        if "beam_indices" in fields
        else outputs.GenerateDecoderOnlyOutput
    )
    return cls(**common), returned_nodes


__all__ = ["Step", "build_output", "step_record"]
