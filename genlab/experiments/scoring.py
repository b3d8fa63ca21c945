"""Score a given text token by token under teacher forcing.

``lm.score(text)`` runs the model once over the text and reads, at every token, the
log-probability the model gave it, its probability and rank among all tokens, the entropy
of the distribution and the model's top alternatives; plus the text's mean log-prob and
perplexity (``exp(-mean log-prob)``). Texts, chat conversations, ids and batches are
accepted; ``context=`` is conditioned on but not scored (a question before its answer).

With generation settings (``lm.score(text, temperature=0.7, top_p=0.9, do_sample=True)``
or a ``GenerationConfig``) the logits also go through the logits processors those settings
build (:func:`genlab.processors.build_processors`), so the numbers are what a sampler with
these settings would have assigned; the raw model's log-prob stays in ``raw_logprob``.

(Not run as a test: it prints a wide table (the notebooks show it; the tests check its columns).)

>>> s = lm.score("The capital of France is Paris.")        # doctest: +SKIP
>>> s.table[["token", "logprob", "rank"]]; s.perplexity     # doctest: +SKIP
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import torch

from ..ids import is_id_list
from ..text.tokens import shown


@dataclass
class Scores:
    """Per-token scores of one or more texts.

    table: one row per scored token (row, position, token_id, token, logprob, prob, rank
    (0 = the model's top choice), entropy (nats), top: the model's top alternatives as
    text, and ``raw_logprob`` when processors were applied); summary: one row per text
    (tokens, sum and mean log-prob, perplexity). ``ids``: the token ids of each row;
    ``starts``: the first scored position of each row.
    """

    table: pd.DataFrame
    summary: pd.DataFrame
    ids: list[torch.LongTensor]
    starts: list[int]
    tokenizer: Any = None
    processed: bool = False
    logprobs: list[torch.Tensor] | None = field(default=None, repr=False)

    @property
    def mean_logprob(self) -> float:
        """Mean log-prob of the first text's scored tokens (``summary`` has every row's)."""
        return float(self.summary.mean_logprob.iloc[0])

    @property
    def perplexity(self) -> float:
        """``exp(-mean_logprob)`` of the first text."""
        return float(self.summary.perplexity.iloc[0])

    def __repr__(self) -> str:
        rows = len(self.summary)
        return (
            f"Scores({rows} text(s), {len(self.table)} tokens scored, mean log-prob "
            f"{self.mean_logprob:.3f}, perplexity {self.perplexity:.3f} (first text))"
        )

    def _repr_html_(self) -> str:
        return (
            "<b>scores</b> (.table, .summary, .plot())"
            + self.summary.to_html(index=False, float_format="%.3f")
            + self.table.head(40).to_html(index=False, float_format="%.3f")
        )


def _encode_texts(lm, text, context, chat, system) -> tuple[list[list[int]], list[int]]:
    """Token ids of each row and the first position to score."""
    if isinstance(text, torch.Tensor):
        rows = text[None] if text.dim() == 1 else text
        if rows.dim() != 2:
            raise ValueError(f"text: ids must be 1-D or 2-D, got shape {tuple(text.shape)}")
        seqs = [r.tolist() for r in rows]
        ctx = _context_ids(lm, context, chat, system, len(seqs))
        return [c + s for c, s in zip(ctx, seqs, strict=True)], [max(1, len(c)) for c in ctx]
    if isinstance(text, list) and text and all(isinstance(t, int) for t in text):
        return _encode_texts(lm, torch.tensor(text), context, chat, system)
    if isinstance(text, list) and text and all(is_id_list(t) for t in text):
        ctx = _context_ids(lm, context, chat, system, len(text))  # a ragged batch of ids
        seqs = [c + [int(x) for x in t] for c, t in zip(ctx, text, strict=True)]
        return seqs, [max(1, len(c)) for c in ctx]
    tok = lm.tokenizer
    if tok is None:
        raise ValueError("this model has no tokenizer: pass token ids instead of text")
    if isinstance(text, list) and text and isinstance(text[0], dict):
        text = [text]
    if isinstance(text, str):
        text = [text]
    if not isinstance(text, list) or not text:
        raise ValueError(
            "text: give a string, a list of strings (a batch), chat messages (dicts with role "
            f"and content), or token ids; got {type(text).__name__}"
        )
    ctx = _context_ids(lm, context, chat, system, len(text))
    out, starts = [], []
    for c, t in zip(ctx, text, strict=True):
        if isinstance(t, list):  # a conversation: the whole template, nothing appended
            if context is not None:
                raise ValueError("context: a conversation carries its own context; leave it out")
            body = tok.apply_chat_template(t, tokenize=False, add_generation_prompt=False)
            ids = _ids(tok(body, add_special_tokens=False))
        elif not isinstance(t, str):
            raise ValueError(f"text: every item of a batch must be a string, got {t!r}")
        elif c:
            ids = c + _ids(tok(t, add_special_tokens=False))
        elif chat:
            msgs = ([{"role": "system", "content": system}] if system else []) + [
                {"role": "user", "content": t}
            ]
            body = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=False)
            ids = _ids(tok(body, add_special_tokens=False))
        else:
            ids = _ids(tok(t))
        out.append(list(ids))
        starts.append(max(1, len(c)))
    return out, starts


def _ids(encoding) -> list[int]:
    """A tokenizer's input_ids for one text as a list of ints (whatever container)."""
    ids = encoding["input_ids"]
    if isinstance(ids, torch.Tensor):
        ids = ids.tolist()
    if ids and isinstance(ids[0], list):
        ids = ids[0]
    return [int(x) for x in ids]


def _context_ids(lm, context, chat, system, rows: int) -> list[list[int]]:
    if context is None:
        return [[] for _ in range(rows)]
    if isinstance(context, torch.Tensor):
        ids = context.reshape(-1).tolist()
    else:
        enc, mask = lm.encode(context, chat=chat, system=system)
        if enc.shape[0] != 1:
            raise ValueError("context: give one context (a text, messages or ids) for all rows")
        ids = enc[0][mask[0].bool()].tolist()
    return [list(ids) for _ in range(rows)]


def score(
    lm,
    text: Any,
    *,
    context: Any = None,
    chat: bool | None = None,
    system: str | None = None,
    alternatives: int = 3,
    generation_config: Any = None,
    keep_logprobs: bool = False,
    batch_size: int = 16,
    **config: Any,
) -> Scores:
    """Per-token scores of ``text`` under teacher forcing (see the module docstring).

    text: a string, a list of strings (a batch), chat messages (one conversation; a list of
    them is a batch) or token ids (1-D, 2-D, or a list of ints). context: a text, messages
    or ids the text follows, conditioned on but not scored (with ``chat=True`` a string
    context is a user message under the chat template, the text the assistant's answer);
    without one, every token but the first is scored. ``chat=True`` alone formats a string
    as one user message. ``alternatives``: how many of the model's top tokens are listed
    per token (``top_k`` is the generation setting, as everywhere in genlab). Generation settings
    (``generation_config`` and/or keyword fields) score under the logits processors they
    build. ``keep_logprobs=True`` keeps each row's (scored tokens, vocab) log-probs.
    """
    if not (hasattr(lm, "encode") and hasattr(lm, "model")):
        raise TypeError(
            f"score takes an LM, got {type(lm).__name__}: use genlab.score(model, text), "
            "which loads it, or lm = genlab.load(model); lm.score(text)"
        )
    if not isinstance(alternatives, int) or alternatives < 0:
        raise ValueError(f"alternatives={alternatives!r} must be a non-negative integer")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(
            f"batch_size={batch_size!r}: give how many texts to score per forward pass, an "
            "integer >= 1 (default 16)"
        )
    seqs, starts = _encode_texts(lm, text, context, chat, system)
    for i, (s, st) in enumerate(zip(seqs, starts, strict=True)):
        if len(s) <= st:
            if context is None:
                raise ValueError(
                    f"text: row {i} has {len(s)} token(s): nothing to score (the first token "
                    "of a text has no prediction): give a longer text, or a context= it follows"
                )
            raise ValueError(
                f"text: row {i} has no tokens after its context ({st} token(s)): nothing to "
                "score: give a non-empty text"
            )
    processors = None
    if generation_config is not None or config:
        processors = _processors(lm, generation_config, config, seqs, starts)
    from ..inside.lens import teacher_forced

    model, tok = lm.model, lm.tokenizer
    rows, summary, kept = [], [], []
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
    results: dict[int, tuple] = {}
    for b in range(0, len(order), batch_size):
        chunk = order[b : b + batch_size]
        width = max(len(seqs[i]) for i in chunk)
        # right padding: under causal attention a token never sees what follows it
        ids = torch.zeros(len(chunk), width, dtype=torch.long)
        for r, i in enumerate(chunk):
            ids[r, : len(seqs[i])] = torch.tensor(seqs[i])
        # the head only for the positions that predict a scored token (not the context)
        offset = min(starts[i] for i in chunk) - 1
        logits = teacher_forced(model, ids, logits_to_keep=width - offset).logits
        logits = logits.float().cpu()
        for r, i in enumerate(chunk):
            st = starts[i] - offset
            results[i] = logits[r, st - 1 : len(seqs[i]) - 1 - offset].clone()
    for i, (s, st) in enumerate(zip(seqs, starts, strict=True)):
        raw = torch.log_softmax(results[i], dim=-1)  # (scored, vocab): predicts s[st:]
        lp = raw
        if processors is not None:
            lp = _apply(processors[i], torch.tensor(s), results[i], st)
        target = torch.tensor(s[st:])
        chosen = lp.gather(-1, target[:, None])[:, 0]
        rank = (lp > chosen[:, None]).sum(-1)
        p = lp.exp()
        entropy = (-(p * lp.clamp(min=-1e30)).nan_to_num(0.0).sum(-1)).clamp(min=0.0)
        k = min(alternatives, lp.shape[-1])
        top_v, top_i = lp.topk(k, dim=-1) if k else (None, None)
        raw_chosen = raw.gather(-1, target[:, None])[:, 0]
        for pos in range(st, len(s)):
            j = pos - st
            row = {
                "row": i,
                "position": pos,
                "token_id": s[pos],
                "token": shown(tok, s[pos]),
                "logprob": float(chosen[j]),
                "prob": float(chosen[j].exp()),
                "rank": int(rank[j]),
                "entropy": float(entropy[j]),
            }
            if k:
                row["top"] = ", ".join(
                    f"{shown(tok, t)} {math.exp(v):.2f}"
                    for t, v in zip(top_i[j].tolist(), top_v[j].tolist(), strict=True)
                    if v > float("-inf")
                )
            if processors is not None:
                row["raw_logprob"] = float(raw_chosen[j])
            rows.append(row)
        scored = chosen
        mean = float(scored.mean())
        summary.append(
            {
                "row": i,
                "tokens": len(scored),
                "sum_logprob": float(scored.sum()),
                "mean_logprob": mean,
                "perplexity": math.exp(-mean) if math.isfinite(mean) else float("inf"),
            }
        )
        if keep_logprobs:
            kept.append(lp)
    return Scores(
        table=pd.DataFrame(rows),
        summary=pd.DataFrame(summary),
        ids=[torch.tensor(s) for s in seqs],
        starts=starts,
        tokenizer=tok,
        processed=processors is not None,
        logprobs=kept if keep_logprobs else None,
    )


def _processors(lm, generation_config, config, seqs, starts) -> list:
    """One processor list per row, built as a run with these settings would build it (the
    prompt being the row's context)."""
    from ..processors import build_processors
    from ..run.engine import prepare_config
    from ..run.plan import resolve_lengths

    cfg, unused = prepare_config(lm.model, generation_config, **config)
    if unused:
        raise ValueError(
            f"{sorted(unused)}: not GenerationConfig fields; generation settings for "
            "score() must be fields of GenerationConfig"
        )
    out = []
    for s, st in zip(seqs, starts, strict=True):
        # the lengths a run from this context would have; a max_length left at its
        # default is stretched to the scored text
        one = _copy_config(cfg)
        stretch = "max_length" not in config and one.max_new_tokens is None
        resolve_lengths(
            one,
            st,
            has_default_max_length="max_length" not in config,
            max_position_embeddings=lm.info.max_position_embeddings,
        )
        if stretch:
            one.max_length = max(len(s), int(one.max_length or 0))
        out.append(
            build_processors(
                one,
                input_ids_seq_length=st,
                encoder_input_ids=torch.tensor([s[:st]]),
                model=lm.model,
                vocab_size=lm.info.vocab_size,
            )
        )
    return out


def _copy_config(cfg):
    import copy

    return copy.deepcopy(cfg)


def _apply(processors, ids: torch.LongTensor, logits: torch.Tensor, start: int) -> torch.Tensor:
    """Log-softmax of the processed logits of the scored tokens: ``logits`` (scored, vocab)
    are those of positions ``start - 1`` onwards; the processors see the ids up to each."""
    out = torch.empty_like(logits)
    for k in range(logits.shape[0]):
        j = start - 1 + k
        scores = processors(ids[None, : j + 1], logits[k : k + 1].clone())
        out[k] = torch.log_softmax(scores.float(), dim=-1)[0]
    return out
