"""What ``lm.generate`` and ``run.result()`` return: a :class:`GenerationResult`, the
reference-shaped output of a run with its texts, tokens, trace and tables."""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from typing import Any

import torch

from ..lazy import LazyModule
from ..text.tokens import shown
from .trace import TRANSITION_COLUMNS

pd = LazyModule("pandas")  # imported when a table is first made


@dataclass
class GenerationResult:
    """What ``lm.generate`` returns: the reference-shaped output plus text and a trace.

    Args (as ``lm.generate`` fills them):
        output: the reference-shaped output (``sequences``, ``scores``, ... as asked);
        sequences: (rows, prompt + new) token ids, the prompt included;
        prompt_length: the width of the (padded) prompt in ``sequences``;
        texts: the generated text of each row, without the prompt; ``text`` is the first;
        token_texts: each row's generated tokens as text, each id decoded on its own
            (``tokenizer.decode([id])``: spaces and newlines as they are;
            :func:`genlab.text.tokens.shown` makes them visible);
        run: the :class:`~genlab.run.engine.Run` that produced it (step on, rewind, fork);
        trace: the recorded :class:`~genlab.run.trace.Trace` when ``trace=True``, else None.

    >>> res = lm.generate("The capital of France is", max_new_tokens=5)   # lm: genlab.load("demo")
    >>> res.text, res.generated_ids.shape
    (' Paris.\\n\\nThe', torch.Size([1, 5]))
    """

    output: Any
    sequences: torch.LongTensor
    prompt_length: int
    texts: list[str]
    token_texts: list[list[str]]
    run: Any  # the genlab.run.engine.Run that produced it
    trace: Any = None

    @property
    def text(self) -> str:
        """The generated continuation of the first row (prompt excluded)."""
        return self.texts[0]

    @property
    def generated_ids(self) -> torch.LongTensor:
        """The new token ids only, (rows, new): ``sequences`` without the prompt."""
        return self.sequences[:, self.prompt_length :]

    def transition_scores(
        self, normalize_logits: bool = False, row: int | None = None
    ) -> pd.DataFrame:
        """One row per generated token: ``step``, ``row``, ``token_id``, ``token``,
        ``score``, ``logprob``, ``prob`` (the columns of
        :meth:`~genlab.run.trace.Trace.transition_scores`).

        ``score`` is what ``compute_transition_scores(..., normalize_logits=...)`` gives, as
        in the reference (default False: the processed score, with beams the beam's
        transition score); ``logprob`` and ``prob`` are the token's log-probability and
        probability in the processed distribution, whatever ``normalize_logits`` says.
        row: one returned sequence, or None for all of them. A row ends at its EOS.

        With beams the two columns hold almost the same number: beam search records
        log-probabilities already (log-softmax, then the processors), so ``score`` is the
        token's log-probability as the beam search used it (sum it, with the length penalty,
        for ``sequences_scores``), and ``logprob`` is its log-softmax once more, computed as
        ``compute_transition_scores(normalize_logits=True)`` computes it in the reference:
        over the vocabulary with the steps as the last axis, in float32. That arithmetic is
        off by about 1e-4 on the demo's 49,152 tokens (-0.257944 against -0.258075, where
        float64 gives -0.258084), so the two differ in the fourth decimal; ``score`` is the
        closer one.
        """
        from ..outputs import compute_transition_scores

        out = self.output
        if getattr(out, "scores", None) is None:
            raise ValueError(
                "no scores were recorded: generate with output_scores=True "
                "and return_dict_in_generate=True (lm.generate does unless told False)"
            )
        beam_indices = getattr(out, "beam_indices", None)
        args = (out.sequences, out.scores, beam_indices)
        scores = compute_transition_scores(*args, normalize_logits=normalize_logits)
        logprobs = scores if normalize_logits else None
        if logprobs is None:
            logprobs = compute_transition_scores(*args, normalize_logits=True)
        tok = self.run.views.tokenizer
        eos = set(self.run.views.eos_token_ids)
        rows = range(self.sequences.shape[0]) if row is None else [row]
        table = []
        for r in rows:
            ids = self.generated_ids[r].tolist()
            for i, (tid, score, lp) in enumerate(
                zip(ids, scores[r].tolist(), logprobs[r].tolist(), strict=True)
            ):
                if beam_indices is not None and int(beam_indices[r, i]) < 0:
                    break
                if i and ids[i - 1] in eos:
                    break  # the row had finished: the rest is padding
                table.append(
                    {
                        "step": i,
                        "row": r,
                        "token_id": tid,
                        "token": shown(tok, tid),
                        "score": score,
                        "logprob": lp,
                        "prob": math.exp(lp),
                    }
                )
        return pd.DataFrame(table, columns=TRANSITION_COLUMNS)

    def _repr_html_(self) -> str:
        body = "".join(
            f"<pre style='white-space:pre-wrap'>{html.escape(t)}</pre>" for t in self.texts
        )
        return f"<div><b>genlab result</b> ({self.run.mode}, {len(self.texts)} row(s)){body}</div>"

    def __repr__(self) -> str:
        return f"GenerationResult(mode={self.run.mode!r}, texts={self.texts!r})"


__all__ = ["GenerationResult"]
