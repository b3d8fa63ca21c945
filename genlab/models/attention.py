"""Attention with its probabilities materialised, for ``output_attentions=True``.

The built-in decoders run ``F.scaled_dot_product_attention`` (fused, no probabilities) unless
the attentions are asked for; then both run :func:`explicit_attention`, written once here.
The two reference eager paths differ in two details, which are its keyword arguments:
GPT-2 applies the causal part first with the dtype's lowest value and takes the softmax in
the scores' dtype; Llama's mask already holds the causal part and its softmax runs in
float32.
"""

from __future__ import annotations

import torch

__all__ = ["explicit_attention"]


def explicit_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor,
    scale: float,
    *,
    causal_past: int | None = None,
    float32_softmax: bool = True,
    edit=None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention output and probabilities.

    q (rows, nh, new, d); k, v (rows, nkv, total, d), with nkv dividing nh (grouped-query
    attention repeats each key/value head); mask: additive, (rows, 1, new, total); scale:
    the factor on q·k. causal_past: None when ``mask`` already holds the causal part, else
    the number of cached positions: keys after a query's own position get the dtype's lowest
    value before the mask is added (a query whose keys are all padding then spreads its
    weight over the causal keys, as the reference's eager GPT-2). float32_softmax: take the
    softmax in float32 and round to q's dtype (Llama), else in the scores' dtype (GPT-2).
    edit: None, or a function given the probabilities that returns the ones to use (the
    ``attn.hook_pattern`` hook point). Returns output (rows, nh, new, d) and probabilities
    (rows, nh, new, total).
    """
    groups = q.shape[1] // k.shape[1]
    if groups > 1:
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale
    if causal_past is not None:
        new_len, total = q.shape[2], k.shape[2]
        causal = torch.ones(new_len, total, dtype=torch.bool, device=q.device).tril(causal_past)
        lowest = torch.tensor(torch.finfo(scores.dtype).min, dtype=scores.dtype, device=q.device)
        scores = torch.where(causal, scores, lowest)
    scores = scores + mask
    if float32_softmax:
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    else:
        probs = torch.softmax(scores, dim=-1)
    if edit is not None:
        probs = edit(probs)
    return torch.matmul(probs, v), probs
