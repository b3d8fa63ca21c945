"""Read and change what the model computes inside its layers: activations, steering,
ablation and patching, on the hook points of :mod:`genlab.inside.taps`.

* :func:`activations` -- the values at chosen hook points for a prompt or a finished run's
  whole sequence (one teacher-forced pass), as TransformerLens' ``run_with_cache`` gives
  them: ``{name: (1, length, ...)}``.
* :func:`steering_vector` -- the difference of mean activations between contrast prompts
  (the last token of each, the residual stream leaving a layer).
* Interventions, each a hook for ``run.hooks({point: ...})``: :func:`steer` (add a vector
  with a strength), :func:`ablate_head` (zero or mean), :func:`patch` (copy activations of
  another sequence). They act on sequence positions, so they act the same with the KV cache
  (the positions a step computes) and without it (every position each step).
* Tables: :func:`steering_sweep` (how the text changes with the strength) and
  :func:`patching_table` (the classic patching heatmap, layers x positions).

(Not run as a test: each call runs the demo model; tests/test_steering.py runs them.)

>>> vec = genlab.steering_vector(lm, ["I love it"], ["I hate it"], layer=10)  # doctest: +SKIP
>>> run = lm.start("The movie was", max_new_tokens=12)                       # doctest: +SKIP
>>> with run.hooks({"blocks.10.hook_resid_post": genlab.steer(vec, 1.0)}):   # doctest: +SKIP
...     run.run()

**How strong?** ``steer`` adds ``strength * vector``, so what counts is that length
against the residual stream's own: on the demo this vector is about 32 long, the stream
leaving block 10 about 130 to 160. Adding a tenth of the stream's length changed nothing,
a fifth turned the text, two fifths and more broke it. What
``steering_sweep(lm, "The movie was", vec, layer=10, strengths=[0, 0.5, 1, 2, 4],
max_new_tokens=12)`` gave on the demo (float32, greedy):

| strength | text |
|---|---|
| 0 | " a film about a young woman named Aria who is a" |
| 0.5 | " a film about a young woman named Aria who is a" |
| 1 | " a huge success, with audiences praising the film's innovative use" |
| 2 | " a total of 100% of the funding from" |
| 4 | " a companion to the latest in a new design, a step" |

Start near ``0.2 * stream / vector`` (``lm.activations`` gives the stream) and sweep
around it; a vector from more contrast pairs is shorter and needs more strength.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd
import torch

from .hooks import HookRegistry
from .lens import as_sequence, teacher_forced
from .taps import Taps

RESID = "blocks.{layer}.hook_resid_post"


def _model_with_points(model, what: str):
    if not hasattr(model, "hook_points"):
        raise ValueError(
            f"{what} needs hook points inside the model's layers; {type(model).__name__} has "
            "none (genlab's built-in Llama, Qwen2 and GPT-2 decoders have them)"
        )
    return model


def run_tapped(model, ids: torch.Tensor, registry: HookRegistry, logits_to_keep: int = 0):
    """One teacher-forced pass over ``ids`` (length,) or (rows, length) with ``registry``'s
    hooks inside the model: a :class:`~genlab.models.base.ModelOutput`."""
    return teacher_forced(model, ids, logits_to_keep=logits_to_keep, taps=Taps(registry, 0, 0))


def activations(
    source: Any,
    prompt: Any = None,
    *,
    names: Iterable[str] | None = None,
    hooks: dict | None = None,
    row: int = 0,
    chat: bool | None = None,
) -> dict[str, torch.Tensor]:
    """The values at hook points ``names`` (default: every point) over one sequence.

    source: an LM with ``prompt`` (a text, messages or ids), a run or a result (its whole
    sequence, prompt and generated tokens); hooks: ``{point: fn}`` interventions in force
    during the pass; row: the row of a batch (or a beam) to read; chat: apply the chat
    template to a text prompt. Returns ``{name: tensor}``, each (1, length, ...) as in
    TransformerLens (``attn.hook_pattern``: (1, heads, length, length)).
    """
    seq = as_sequence(source, prompt, row=row, chat=chat)
    model = _model_with_points(seq.model, "activations")
    names = list(model.hook_points() if names is None else names)
    registry = HookRegistry()
    registry.bind(model)
    got: dict[str, torch.Tensor] = {}
    for name in names:  # a registry of this call's own: nothing to remove afterwards
        registry.observe(name, lambda p, v, s: got.__setitem__(p, v.detach().clone()))
    with registry.temporary(hooks):
        run_tapped(model, seq.ids, registry)
    return {name: got[name] for name in names}


def steering_vector(
    lm: Any,
    positive: Sequence[str] | str,
    negative: Sequence[str] | str,
    *,
    layer: int,
    position: int = -1,
    point: str | None = None,
    chat: bool | None = None,
) -> torch.Tensor:
    """The mean over pairs of (positive - negative) activations: the residual stream
    leaving block ``layer`` (``point``: another hook point) at token ``position`` (the
    last) of each prompt, as repeng and steering-vectors compute it. Returns (hidden,).

    lm: an LM on a built-in decoder; positive, negative: contrast prompts in pairs (or one
    text each); chat: apply the chat template to them."""
    positive = [positive] if isinstance(positive, str) else list(positive)
    negative = [negative] if isinstance(negative, str) else list(negative)
    if not positive or len(positive) != len(negative):
        raise ValueError(
            f"positive and negative must be prompts in pairs: got {len(positive)} positive "
            f"and {len(negative)} negative; give as many of each (at least one)"
        )
    model = _model_with_points(getattr(lm, "model", lm), "steering_vector")
    name = point or RESID.format(layer=layer)
    model.check_hook_point(name)
    if isinstance(position, bool) or not isinstance(position, int):
        raise ValueError(f"position={position!r}: give a token index (an int; -1: the last)")
    diffs = []
    for pos, neg in zip(positive, negative, strict=True):
        a = _at(activations(lm, pos, names=[name], chat=chat)[name], position, pos)
        b = _at(activations(lm, neg, names=[name], chat=chat)[name], position, neg)
        diffs.append(a.float() - b.float())
    return torch.stack(diffs).mean(0)


def _at(values: torch.Tensor, position: int, prompt: Any) -> torch.Tensor:
    """``values`` (1, length, ...) at token ``position`` of ``prompt``, or a ValueError
    naming the position and the prompt's length."""
    length = values.shape[1]
    if not -length <= position < length:
        raise ValueError(
            f"position={position} is outside the prompt {prompt!r}, which is {length} tokens "
            f"long: give a position in [{-length}, {length - 1}] (-1, the default, is the "
            "last token), or longer prompts"
        )
    return values[0, position]


def _where(positions: torch.Tensor, chosen) -> torch.Tensor | None:
    """The indices in ``positions`` (the sequence indices of a value) that are ``chosen``
    (None: all)."""
    if chosen is None:
        return None
    want = torch.as_tensor(chosen, device=positions.device).reshape(-1)
    return torch.isin(positions, want).nonzero().reshape(-1)


class Intervention:
    """A hook inside the model that acts on sequence positions (``takes_positions``)."""

    takes_positions = True

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._describe()})"

    def _describe(self) -> str:
        return ""


class Steer(Intervention):
    """Adds ``strength * vector`` to the value at ``positions`` (None: every position)."""

    def __init__(self, vector, strength: float = 1.0, positions=None) -> None:
        vector = torch.as_tensor(vector)
        if vector.dim() != 1:
            raise ValueError(f"vector: one dimension (hidden,), got shape {tuple(vector.shape)}")
        self.vector, self.strength, self.positions = vector, float(strength), positions

    def _describe(self) -> str:
        return f"size={self.vector.shape[0]}, strength={self.strength:g}"

    def __call__(self, value, *, step, positions):
        if value.shape[-1] != self.vector.shape[0]:
            raise ValueError(
                f"steering vector of size {self.vector.shape[0]} at a point of width "
                f"{value.shape[-1]}: use a vector from this model's residual stream "
                "(genlab.steering_vector(lm, ..., layer=...))"
            )
        add = (self.vector * self.strength).to(dtype=value.dtype, device=value.device)
        at = _where(positions, self.positions)
        if at is None:
            return value + add
        out = value.clone()
        out[:, at] += add
        return out


def steer(vector, strength: float = 1.0, positions=None) -> Steer:
    """A hook adding ``strength * vector`` (hidden,) to a residual-stream point at sequence
    ``positions`` (None: all): ``run.hooks({"blocks.10.hook_resid_post": steer(v, 1)})``.
    The scale is the vector's length against the stream's: see "How strong?" in
    :mod:`genlab.inside.steering` (on the demo, 1 steers a one-pair vector, 2 breaks the text)."""
    return Steer(vector, strength, positions)


class AblateHead(Intervention):
    """Replaces one head's output (``attn.hook_z``) by zeros or by ``mean`` (head_dim,)."""

    def __init__(self, head: int, mean=None, positions=None) -> None:
        self.head, self.positions = int(head), positions
        self.mean = None if mean is None else torch.as_tensor(mean)

    def _describe(self) -> str:
        return f"head={self.head}, {'zero' if self.mean is None else 'mean'}"

    def __call__(self, value, *, step, positions):
        if value.dim() != 4:
            raise ValueError(
                "ablate_head acts on a blocks.{i}.attn.hook_z point (rows, positions, heads, "
                f"head_dim); this value has shape {tuple(value.shape)}"
            )
        if not 0 <= self.head < value.shape[2]:
            raise ValueError(f"head={self.head}: the layer has heads 0 to {value.shape[2] - 1}")
        out = value.clone()
        at = _where(positions, self.positions)
        fill = 0.0 if self.mean is None else self.mean.to(value)
        if at is None:
            out[:, :, self.head] = fill
        else:
            out[:, at, self.head] = fill
        return out


def ablate_head(head: int, mean=None, positions=None) -> AblateHead:
    """A hook for ``blocks.{i}.attn.hook_z`` that zeroes head ``head`` (or sets it to
    ``mean``, its mean output: :func:`head_means`) at ``positions`` (None: all)."""
    return AblateHead(head, mean, positions)


def head_means(lm: Any, texts: Sequence[str] | str, layer: int) -> torch.Tensor:
    """Each head's mean output (``attn.hook_z``) of block ``layer`` over every position of
    ``texts`` under ``lm``: (heads, head_dim), for mean ablation."""
    texts = [texts] if isinstance(texts, str) else list(texts)
    name = f"blocks.{layer}.attn.hook_z"
    zs = [activations(lm, t, names=[name])[name][0] for t in texts]
    return torch.cat(zs).mean(0)


class Patch(Intervention):
    """Replaces the value at sequence positions by ``source``'s there (1, length, ...)
    (one head's slice only when ``head`` is given)."""

    def __init__(self, source, positions=None, head: int | None = None) -> None:
        self.source = torch.as_tensor(source)
        if self.source.dim() < 3:
            raise ValueError(
                "patch: source must be an activation (1, length, ...) from genlab.activations, "
                f"got shape {tuple(self.source.shape)}"
            )
        self.positions, self.head = positions, head

    def _describe(self) -> str:
        return f"positions={self.positions}, head={self.head}"

    def __call__(self, value, *, step, positions):
        src = self.source
        if src.shape[2:] != value.shape[2:]:
            raise ValueError(
                f"patch: source activations of shape {tuple(src.shape)} do not fit this point's "
                f"{tuple(value.shape)}; take them at the same hook point of the same model"
            )
        chosen = positions[positions < src.shape[1]]
        at = _where(positions, chosen if self.positions is None else self.positions)
        at = at[positions[at] < src.shape[1]]
        if at.numel() == 0:
            return None
        out = value.clone()
        from_src = src[0, positions[at]].to(value)
        if self.head is None:
            out[:, at] = from_src
        else:
            out[:, at, self.head] = from_src[:, self.head]
        return out


def patch(source, positions=None, head: int | None = None) -> Patch:
    """A hook that copies ``source`` (activations (1, length, ...) of another sequence at
    the same point, from :func:`activations`) into the value at sequence ``positions``
    (None: all that ``source`` has), for one ``head`` of an ``attn.hook_z`` point or all."""
    return Patch(source, positions, head)


# ---- tables -------------------------------------------------------------------------------


def steering_sweep(
    lm: Any,
    prompt: Any,
    vector: torch.Tensor,
    *,
    layer: int,
    strengths: Sequence[float] = (0.0, 0.5, 1.0, 2.0),
    max_new_tokens: int = 20,
    point: str | None = None,
    **config,
) -> pd.DataFrame:
    """Generate from ``prompt`` with ``lm``, once per value of ``strengths``, with
    ``vector`` added at block ``layer``'s output (``point``: another hook point), for
    ``max_new_tokens`` tokens (greedy unless ``config``, more generation fields, says
    otherwise). Columns: strength, text, changed (how many
    of the tokens differ from the unsteered text at the same step), first_change (the first
    step that differs, -1 if none), mean_logprob (of the chosen tokens)."""
    name = point or RESID.format(layer=layer)

    def generate(strength: float):
        run = lm.start(prompt, max_new_tokens=max_new_tokens, **config)
        with run.hooks({name: steer(vector, strength)}):
            run.run()
        lp = [s.logprobs[0] for s in run.history]
        return run.result(), lp

    done = {0.0: generate(0.0)}  # the unsteered text, what the others are compared with
    base = done[0.0][0].generated_ids[0].tolist()
    rows = []
    for strength in strengths:
        strength = float(strength)
        if strength not in done:
            done[strength] = generate(strength)
        res, lp = done[strength]
        ids = res.generated_ids[0].tolist()
        diff = {i for i, (a, b) in enumerate(zip(ids, base, strict=False)) if a != b}
        diff |= set(range(min(len(ids), len(base)), max(len(ids), len(base))))
        rows.append(
            dict(
                strength=strength,
                text=res.text,
                changed=len(diff),
                first_change=min(diff) if diff else -1,
                mean_logprob=round(float(sum(lp) / len(lp)), 4) if lp else float("nan"),
            )
        )
    return pd.DataFrame(rows)


def patching_table(
    lm: Any,
    clean: Any,
    corrupt: Any,
    *,
    point: str = "hook_resid_pre",
    layers: Iterable[int] | None = None,
    target: int | str | None = None,
) -> pd.DataFrame:
    """Activation patching with ``lm``: run ``corrupt`` with ``clean``'s activation at one
    layer and one position, for every layer (of ``layers``, default all) and position, and
    read the log-prob of ``target`` (default: the clean prompt's top next token; a
    one-token text or an id) at the last position.

    point: the per-layer point (``hook_resid_pre``, ``hook_attn_out``, ``hook_mlp_out``...);
    the two prompts must have the same number of tokens. One batched pass per layer (a row
    per position). Columns: layer, position, token (the corrupt prompt's), logprob, effect
    (logprob minus the unpatched corrupt run's), and ``table.attrs``: clean_logprob,
    corrupt_logprob, target. Pivot with ``table.pivot(index="layer", columns="position",
    values="effect")``, or draw with :func:`genlab.plots.patching_heatmap`.
    """
    model = _model_with_points(lm.model, "patching_table")
    a = as_sequence(lm, clean).ids
    b = as_sequence(lm, corrupt).ids
    if a.shape[0] != b.shape[0]:
        raise ValueError(
            f"clean and corrupt prompts must have the same number of tokens to patch position "
            f"by position: {a.shape[0]} and {b.shape[0]}; reword one of them"
        )
    n = b.shape[0]
    layers = list(range(model.settings.num_layers) if layers is None else layers)
    names = [f"blocks.{i}.{point}" for i in layers]
    for name in names:
        model.check_hook_point(name)
    clean_acts = activations(lm, clean, names=names)
    with torch.no_grad():
        clean_lp = torch.log_softmax(teacher_forced(model, a).logits[0, -1].float(), -1)
        corrupt_lp = torch.log_softmax(teacher_forced(model, b).logits[0, -1].float(), -1)
    if target is None:
        tid = int(clean_lp.argmax())
    elif isinstance(target, str):
        ids = lm.encode(target)[0][0].tolist()
        if len(ids) != 1:
            raise ValueError(f"target={target!r} is {len(ids)} tokens; give one token or its id")
        tid = ids[0]
    else:
        tid = int(target)
    tokens = [lm.tokenizer.decode([t]) for t in b.tolist()]
    rows = []
    for layer, name in zip(layers, names, strict=True):
        src = clean_acts[name][0]

        def per_row(value, *, step, positions, src=src):
            out = value.clone()
            idx = torch.arange(value.shape[0])
            out[idx, idx] = src[idx].to(value)  # row r: position r patched
            return out

        per_row.takes_positions = True
        registry = HookRegistry()
        registry.bind(model)
        off = registry.add(name, per_row)
        try:
            with torch.no_grad():
                out = run_tapped(model, b.expand(n, n), registry, logits_to_keep=1)
        finally:
            off()
        lps = torch.log_softmax(out.logits[:, -1].float(), -1)[:, tid]
        for pos in range(n):
            lp = float(lps[pos])
            rows.append(
                dict(
                    layer=layer,
                    position=pos,
                    token=tokens[pos],
                    logprob=lp,
                    effect=lp - float(corrupt_lp[tid]),
                )
            )
    table = pd.DataFrame(rows)
    table.attrs.update(
        clean_logprob=float(clean_lp[tid]),
        corrupt_logprob=float(corrupt_lp[tid]),
        target=lm.tokenizer.decode([tid]),
    )
    return table


__all__ = [
    "AblateHead",
    "Intervention",
    "Patch",
    "Steer",
    "ablate_head",
    "activations",
    "head_means",
    "patch",
    "patching_table",
    "steer",
    "steering_sweep",
    "steering_vector",
]
