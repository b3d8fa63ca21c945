"""Look inside the model: each layer's next-token guess (the logit lens) and the attention
weights behind one token.

Both read one sequence (a run's, a result's, or a prompt) through **one teacher-forced
forward pass** of the same model: the whole sequence at once, every layer's hidden states
and (for attention) weights returned. Under causal attention that pass computes, at each
position, what the generation step computed there (up to float rounding), so any recorded
step can be looked at, also after a rewind or in a fork.

* :func:`logit_lens` -- the residual stream after each layer, through the final norm and
  the LM head: which token each layer would predict. A :class:`Lens`, with
  :meth:`Lens.table` (step, layer, top tokens, the chosen token's probability and rank) and
  :func:`genlab.plots.inside.lens_heatmap` (layers x tokens).
* :func:`attention` -- for one generated token, every layer's and head's attention over the
  prompt and the tokens before it: an :class:`Attention`, with a long table, a layer x head
  summary (entropy, largest weight) and a heatmap.

(Not run as a test: it prints a wide table and draws a figure (notebook 10 shows both).)

>>> run = lm.start("What is the capital of France?", chat=True); run.run()  # doctest: +SKIP
>>> genlab.logit_lens(run).table()                                          # doctest: +SKIP
>>> genlab.attention(run, step=5).plot(layer=20, head=3)                     # doctest: +SKIP
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import torch

from ..text.tokens import shown

# ----------------------------------------------------------------------------------------
# the sequence to look at
# ----------------------------------------------------------------------------------------


@dataclass
class Sequence:
    """One row of token ids and what its positions mean.

    ids: (length,) the whole sequence, padding removed; prompt_length: the number of prompt
    tokens (position ``prompt_length - 1 + s`` predicts generated token ``s``); for a plain
    text, ``prompt_length`` is 1 and every position after the first is "generated".
    """

    model: Any
    tokenizer: Any
    ids: torch.LongTensor
    prompt_length: int
    generated: bool  # True for a run / result, False for a prompt or text

    @property
    def steps(self) -> int:
        """How many predictions can be compared with a known next token."""
        return len(self.ids) - self.prompt_length


def _row_ids(seq: torch.Tensor, mask: torch.Tensor | None, prompt_length: int, eos) -> tuple:
    """The row without left padding, cut after its first generated EOS."""
    ids = seq.detach().cpu()
    keep = torch.ones_like(ids, dtype=torch.bool) if mask is None else mask.cpu().bool()
    keep[prompt_length:] = True  # the engine only pads on the left of the prompt
    pad = int((~keep[:prompt_length]).sum())
    ids = ids[keep]
    start = prompt_length - pad
    gen = ids[start:].tolist()
    for i, t in enumerate(gen):
        if t in eos:
            ids = ids[: start + i + 1]
            break
    return ids, start


def as_sequence(
    source: Any,
    prompt: Any = None,
    *,
    row: int = 0,
    chat: bool | None = None,
    system: str | None = None,
) -> Sequence:
    """What :func:`logit_lens` and :func:`attention` read.

    source: a :class:`~genlab.run.engine.Run`, a :class:`~genlab.lm.GenerationResult`, or an
    :class:`~genlab.lm.LM` with ``prompt`` (a text, chat messages or ids; ``chat=True``
    applies the chat template). ``row`` picks a row of a batch (or a beam / sample).
    """
    if _is_result(source):
        run, seqs = source.run, source.sequences
        if prompt is not None:
            raise ValueError("prompt: give either a run/result or an LM with a prompt, not both")
        if not (isinstance(seqs, torch.Tensor) and seqs.shape == run.sequences.shape
                and torch.equal(seqs, run.sequences)):  # fmt: skip
            # e.g. beam search: the returned rows are the best finished hypotheses
            return _result_row(source, row)
        source = run
    if _is_run(source):
        if prompt is not None:
            raise ValueError("prompt: give either a run/result or an LM with a prompt, not both")
        if source.given.encdec is not None:
            raise ValueError(
                "the lens and attention views read decoder-only models; this run is encoder-decoder"
            )
        rows = source.sequences.shape[0]
        if not 0 <= row < rows:
            raise ValueError(f"row={row} is out of range: the run has {rows} row(s)")
        ids, start = _row_ids(
            source.sequences[row],
            source.views.attention_mask[row],
            source.prompt_length,
            set(source.views.eos_token_ids),
        )
        return Sequence(source.views.model, source.views.tokenizer, ids, start, True)
    if _is_lm(source):
        if prompt is None:
            raise ValueError("prompt: an LM needs a prompt to look at (text, messages or ids)")
        ids, mask = source.encode(prompt, chat=chat, system=system)
        if not 0 <= row < ids.shape[0]:
            raise ValueError(f"row={row} is out of range: the prompt has {ids.shape[0]} row(s)")
        keep = mask[row].bool()
        return Sequence(source.model, source.tokenizer, ids[row][keep].cpu(), 1, False)
    raise TypeError(
        f"source must be a Run, a GenerationResult or an LM (with a prompt), "
        f"got {type(source).__name__}"
    )


def _result_row(result, row: int) -> Sequence:
    """A row of a result whose sequences are not the run's rows (beam search): the
    prompt's left padding is the leading run of pad ids."""
    run, seqs = result.run, result.sequences
    if getattr(run, "encdec", None) is not None:
        raise ValueError(
            "the lens and attention views read decoder-only models; this run is encoder-decoder"
        )
    if not 0 <= row < seqs.shape[0]:
        raise ValueError(f"row={row} is out of range: the result has {seqs.shape[0]} row(s)")
    ids = seqs[row].detach().cpu()
    n = result.prompt_length
    mask = torch.ones_like(ids)
    pad = run.views.pad_token_id
    if pad is not None:
        for i in range(n):
            if int(ids[i]) != pad:
                break
            mask[i] = 0
    ids, start = _row_ids(ids, mask, n, set(run.views.eos_token_ids))
    return Sequence(run.views.model, run.views.tokenizer, ids, start, True)


def teacher_forced(
    model,
    ids: torch.LongTensor,
    *,
    hidden_states: bool = False,
    attentions: bool = False,
    logits_to_keep: int = 0,
    taps=None,
):
    """One forward pass over ``ids`` (length,) or (rows, length) from an empty cache, logits
    at every position (or the last ``logits_to_keep``): a
    :class:`~genlab.models.base.ModelOutput`. taps: hooks inside the layers
    (:class:`~genlab.inside.taps.Taps`, built-in decoders only)."""
    if ids.dim() == 1:
        ids = ids[None]
    device = getattr(model, "device", None) or torch.device("cpu")
    ids = ids.to(device)
    rows, n = ids.shape
    mask = torch.ones_like(ids)
    positions = torch.arange(n, device=device).expand(rows, n)
    eager = getattr(model, "eager_attention", None)
    import contextlib

    ctx = eager() if attentions and eager is not None else contextlib.nullcontext()
    with torch.no_grad(), ctx:
        out = model.forward(
            ids,
            attention_mask=mask,
            position_ids=positions,
            cache=model.new_cache(rows),
            logits_to_keep=logits_to_keep,
            output_attentions=attentions,
            output_hidden_states=hidden_states,
            **({} if taps is None else {"taps": taps}),
        )
    if hidden_states and not out.hidden_states:
        raise ValueError(f"{type(model).__name__} returned no hidden states")
    if attentions and (not out.attentions or any(a is None for a in out.attentions)):
        raise ValueError(
            f"{type(model).__name__} returned no attention weights (it needs eager attention)"
        )
    return out


# ----------------------------------------------------------------------------------------
# the logit lens
# ----------------------------------------------------------------------------------------


@dataclass
class Lens:
    """Each layer's next-token prediction at a series of positions.

    Layer 0 is the embeddings, layer L the output of block L; the last layer is the model's
    own prediction. For every (layer, position): ``top_ids``/``top_probs`` (layers + 1, n,
    k), the probability, log-probability and rank (0 = top) of the *target* token (the
    token the run chose next; for a text, the next token of the text) in ``target_prob``,
    ``target_logprob``, ``target_rank`` (layers + 1, n), and the entropy. ``logits``
    (layers + 1, n, vocab) is kept when asked (``keep_logits=True``).
    """

    positions: list[int]
    steps: list[int]
    targets: list[int | None]
    inputs: list[int]
    top_ids: torch.LongTensor
    top_probs: torch.Tensor
    target_prob: torch.Tensor
    target_logprob: torch.Tensor
    target_rank: torch.Tensor
    entropy: torch.Tensor
    tokenizer: Any = None
    generated: bool = True
    logits: torch.Tensor | None = field(default=None, repr=False)

    @property
    def num_layers(self) -> int:
        """Number of blocks (rows of the lens: 0 the embeddings, then 1 .. num_layers)."""
        return self.top_ids.shape[0] - 1

    def token(self, token_id) -> str:
        """A token as shown to a person (genlab.text.tokens)."""
        return "" if token_id is None else shown(self.tokenizer, int(token_id))

    @property
    def target_tokens(self) -> list[str]:
        return [self.token(t) for t in self.targets]

    def table(self, top_k: int = 3) -> pd.DataFrame:
        """One row per (step, layer): the top ``top_k`` tokens and probabilities, and the
        chosen token's probability and rank at that layer."""
        k = min(top_k, self.top_ids.shape[-1])
        rows = []
        for j, (pos, step, target) in enumerate(
            zip(self.positions, self.steps, self.targets, strict=True)
        ):
            for layer in range(self.num_layers + 1):
                row = {"step": step, "position": pos, "layer": layer}
                for i in range(k):
                    row[f"top{i + 1}"] = self.token(self.top_ids[layer, j, i])
                    row[f"p{i + 1}"] = float(self.top_probs[layer, j, i])
                row["chosen"] = self.token(target)
                row["chosen_prob"] = float(self.target_prob[layer, j])
                row["chosen_rank"] = int(self.target_rank[layer, j])
                row["entropy"] = float(self.entropy[layer, j])
                rows.append(row)
        return pd.DataFrame(rows)

    def first_layer(self, threshold: float = 0.5) -> pd.DataFrame:
        """Per step, the first layer whose top token is the chosen one (and stays so from
        there on), and the first layer where it gets at least ``threshold`` probability."""
        rows = []
        top1 = self.top_ids[:, :, 0]
        for j, (step, target) in enumerate(zip(self.steps, self.targets, strict=True)):
            if target is None:
                continue
            hit = (top1[:, j] == target).tolist()
            settled = None
            for layer in range(len(hit) - 1, -1, -1):
                if not hit[layer]:
                    break
                settled = layer
            over = (self.target_prob[:, j] >= threshold).nonzero()
            rows.append(
                {
                    "step": step,
                    "chosen": self.token(target),
                    "top_from_layer": settled,
                    f"p>={threshold:g}_from_layer": int(over[0]) if len(over) else None,
                    "final_prob": float(self.target_prob[-1, j]),
                }
            )
        return pd.DataFrame(rows)

    def __repr__(self) -> str:
        what = "steps" if self.generated else "positions"
        return f"Lens({self.num_layers} layers x {len(self.positions)} {what})"

    def _repr_html_(self) -> str:
        what = "generated tokens" if self.generated else "positions"
        head = (
            f"<b>logit lens</b>: {self.num_layers} layers x {len(self.positions)} {what} "
            f"(.table(), .first_layer(), .plot())"
        )
        return head + self.first_layer().to_html(index=False, float_format="%.3f")


def _lens_logits(model, hidden: torch.Tensor, is_last: bool) -> torch.Tensor:
    """One layer's logits from its hidden states (n, hidden). The last entry of a model's
    hidden states is already normed (the reference's convention), so only the head."""
    if not is_last:
        hidden = model.final_norm(hidden)
    return model.head_logits(hidden).float()


def logit_lens(
    source: Any,
    prompt: Any = None,
    *,
    row: int = 0,
    steps: Any = None,
    top_k: int = 5,
    keep_logits: bool = False,
    chat: bool | None = None,
    system: str | None = None,
) -> Lens:
    """Each layer's next-token prediction for the steps of a run (see the module docstring).

    source: a Run, a GenerationResult, or an LM with ``prompt``. ``steps``: which generated
    steps (ints, a range; default all; for a prompt: positions, default all). ``top_k``
    tokens are kept per (layer, step); ``keep_logits=True`` also keeps every layer's full
    logits (layers + 1, n, vocab) in ``Lens.logits``. ``row``: which row of a batch (or
    beam / sample); ``chat``, ``system``: how a text prompt is encoded (chat template,
    system message).

    (Not run as a test: it prints a wide table (the notebooks show it; the tests check its
    columns).)

    >>> lens = genlab.logit_lens(res)     # res = lm.generate(..., chat=True)  # doctest: +SKIP
    >>> lens.first_layer()                # where each token is first on top   # doctest: +SKIP
    """
    seq = as_sequence(source, prompt, row=row, chat=chat, system=system)
    model = seq.model
    for need in ("head_logits", "final_norm"):
        if not hasattr(model, need):
            raise ValueError(
                f"{type(model).__name__} has no {need}(): the logit lens needs the final norm "
                "and the LM head separately (genlab's decoders and transformers models have them)"
            )
    if not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"top_k={top_k!r} must be a positive integer")
    ids = seq.ids
    if seq.generated:
        available = list(range(seq.steps))
        pos_of = [seq.prompt_length - 1 + s for s in available]
    else:
        available = list(range(len(ids)))
        pos_of = available
    chosen = _pick_steps(steps, available, "steps")
    positions = [pos_of[s] for s in chosen]
    if not positions:
        raise ValueError("steps: nothing to look at (the run has generated no token yet)")
    out = teacher_forced(model, ids, hidden_states=True)
    hs = out.hidden_states
    last = len(hs) - 1
    index = torch.tensor(positions, device=hs[0].device)
    targets = [int(ids[p + 1]) if p + 1 < len(ids) else None for p in positions]
    tgt = torch.tensor([t if t is not None else 0 for t in targets], device=hs[0].device)
    k = min(top_k, model.info.vocab_size)
    tops_i, tops_p, t_prob, t_lp, t_rank, ent, kept = [], [], [], [], [], [], []
    with torch.no_grad():
        for layer in range(last + 1):
            logits = _lens_logits(model, hs[layer][0, index], layer == last)
            lp = torch.log_softmax(logits, dim=-1)
            p = lp.exp()
            vals, idx = p.topk(k, dim=-1)
            tops_i.append(idx.cpu())
            tops_p.append(vals.cpu())
            tl = lp.gather(-1, tgt[:, None])[:, 0]
            t_lp.append(tl.cpu())
            t_prob.append(tl.exp().cpu())
            t_rank.append((lp > tl[:, None]).sum(-1).cpu())
            ent.append(-(p * lp.clamp(min=-1e30)).nan_to_num(0.0).sum(-1).cpu())
            if keep_logits:
                kept.append(logits.cpu())
    missing = torch.tensor([t is None for t in targets])

    def stack(parts, fill):
        x = torch.stack(parts)
        if missing.any():
            x = x.clone()
            x[:, missing] = fill
        return x

    return Lens(
        positions=positions,
        steps=chosen,
        targets=targets,
        inputs=[int(ids[p]) for p in positions],
        top_ids=torch.stack(tops_i),
        top_probs=torch.stack(tops_p),
        target_prob=stack(t_prob, float("nan")),
        target_logprob=stack(t_lp, float("nan")),
        target_rank=stack(t_rank, -1),
        entropy=torch.stack(ent),
        tokenizer=seq.tokenizer,
        generated=seq.generated,
        logits=torch.stack(kept) if keep_logits else None,
    )


def _pick_steps(steps, available: list[int], name: str) -> list[int]:
    if steps is None:
        return list(available)
    if isinstance(steps, int):
        steps = [steps]
    picked = []
    n = len(available)
    for s in steps:
        if not isinstance(s, int) or not -n <= s < n:
            raise ValueError(f"{name}: {s!r} is out of range (0 .. {n - 1} here)")
        picked.append(available[s])
    return picked


# ----------------------------------------------------------------------------------------
# attention
# ----------------------------------------------------------------------------------------


@dataclass
class Attention:
    """Every layer's and head's attention weights for one query position.

    weights: (layers, heads, position + 1) float32 -- over the prompt and the tokens
    before; ``tokens``: the key tokens as shown; ``step`` / ``position`` / ``target``: the
    generated step whose prediction this position made, its position, the chosen token.
    """

    weights: torch.Tensor
    step: int
    position: int
    key_ids: list[int]
    target: int | None
    tokenizer: Any = None
    prompt_length: int = 0

    @property
    def tokens(self) -> list[str]:
        return [shown(self.tokenizer, t) for t in self.key_ids]

    @property
    def query_token(self) -> str:
        return shown(self.tokenizer, self.key_ids[-1])

    @property
    def target_token(self) -> str:
        return "" if self.target is None else shown(self.tokenizer, self.target)

    def table(self) -> pd.DataFrame:
        """Long table: one row per (layer, head, key position) with the weight."""
        layers, heads, n = self.weights.shape
        toks = self.tokens
        w = self.weights.reshape(-1).tolist()
        rows = [
            {
                "layer": layer + 1,
                "head": head,
                "key_position": k,
                "key_token": toks[k],
                "in_prompt": k < self.prompt_length,
                "weight": w[(layer * heads + head) * n + k],
            }
            for layer in range(layers)
            for head in range(heads)
            for k in range(n)
        ]
        return pd.DataFrame(rows)

    def summary(self) -> pd.DataFrame:
        """One row per (layer, head): entropy of the weights (nats), the largest weight and
        the token it falls on, the weight on the first token and on the query itself."""
        w = self.weights
        ent = -(w * w.clamp(min=1e-30).log()).sum(-1)
        top, arg = w.max(-1)
        toks = self.tokens
        rows = []
        for layer in range(w.shape[0]):
            for head in range(w.shape[1]):
                rows.append(
                    {
                        "layer": layer + 1,
                        "head": head,
                        "entropy": float(ent[layer, head]),
                        "max_weight": float(top[layer, head]),
                        "max_position": int(arg[layer, head]),
                        "max_token": toks[int(arg[layer, head])],
                        "first_token_weight": float(w[layer, head, 0]),
                        "self_weight": float(w[layer, head, -1]),
                    }
                )
        return pd.DataFrame(rows)

    def __repr__(self) -> str:
        layers, heads, n = self.weights.shape
        return (
            f"Attention(step={self.step}, query={self.query_token!r}, next={self.target_token!r}, "
            f"{layers} layers x {heads} heads over {n} tokens)"
        )

    def _repr_html_(self) -> str:
        layers, heads, n = self.weights.shape
        s = self.summary().sort_values("max_weight", ascending=False).head(8)
        return (
            f"<b>attention</b> at step {self.step} (query {html.escape(self.query_token)!s}, "
            f"next {html.escape(self.target_token)}): {layers} layers x {heads} heads over "
            f"{n} tokens (.table(), .summary(); genlab.plots.attention_heatmap)"
            + s.to_html(index=False, float_format="%.3f")
        )


def attention(
    source: Any,
    prompt: Any = None,
    *,
    step: int = -1,
    row: int = 0,
    chat: bool | None = None,
    system: str | None = None,
) -> Attention:
    """The attention weights of every layer and head when the model produced generated
    token ``step`` (default the last): the query is the token before it, the keys the
    prompt and every token up to it. For an LM with a prompt, ``step`` is a position of the
    prompt (default the last, whose prediction would be the first generated token).

    source: a Run, a GenerationResult, or an LM with ``prompt``; row: which row of a batch;
    chat, system: how a text prompt is encoded (chat template, system message).

    (Not run as a test: it prints a wide table (the notebooks show it; the tests check its
    columns).)

    >>> att = genlab.attention(res, step=5)      # doctest: +SKIP
    >>> att.summary().head()                     # doctest: +SKIP
    """
    seq = as_sequence(source, prompt, row=row, chat=chat, system=system)
    if seq.generated:
        available = [seq.prompt_length - 1 + s for s in range(seq.steps)]
        labels = list(range(seq.steps))
    else:
        available = list(range(len(seq.ids)))
        labels = available
    if not available:
        raise ValueError("step: the run has generated no token yet")
    if not isinstance(step, int) or not -len(available) <= step < len(available):
        raise ValueError(f"step={step!r} is out of range (0 .. {len(available) - 1} here)")
    position = available[step]
    ids = seq.ids[: position + 1]
    out = teacher_forced(seq.model, ids, attentions=True)
    weights = torch.stack([a[0, :, -1, :].float().cpu() for a in out.attentions])
    target = int(seq.ids[position + 1]) if position + 1 < len(seq.ids) else None
    return Attention(
        weights=weights,
        step=labels[step],
        position=position,
        key_ids=ids.tolist(),
        target=target,
        tokenizer=seq.tokenizer,
        prompt_length=seq.prompt_length if seq.generated else len(seq.ids),
    )


# duck types (this module sits below genlab.lm and genlab.run.engine's users: no imports up)
def _is_run(obj) -> bool:
    return hasattr(obj, "given") and hasattr(obj, "state") and hasattr(obj, "step")


def _is_result(obj) -> bool:
    run = getattr(obj, "run", None)  # a GenerationResult holds its Run (a Run's .run is a method)
    return run is not None and not callable(run) and hasattr(obj, "sequences")


def _is_lm(obj) -> bool:
    return hasattr(obj, "encode") and hasattr(obj, "model") and hasattr(obj, "tokenizer")
