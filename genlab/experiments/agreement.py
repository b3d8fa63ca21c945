"""How far another model's next-token distributions are from a reference model's:
:func:`compare` (``lm.compare(other, prompts)``).

For each prompt the reference LM writes a greedy continuation; both models then read the
same tokens (prompt and continuation, teacher-forced, one forward pass each) and, at every
continuation position, the table gives:

* ``top1_agree``: the two models' most likely next tokens are the same;
* ``kl``: the KL divergence KL(p_ref || p_other) in nats, summed over the vocabulary;
* the two top tokens and their probabilities.

This is what a user choosing a quantization should see: ``genlab.load("demo",
quantization="int4")`` against the float32 demo. The summary (:func:`summary`) is the mean
agreement and mean KL per token over all prompts.

>>> lm = genlab.load("demo")
>>> table = lm.compare(lm, ["Hello"], max_new_tokens=3)
>>> float(table["top1_agree"].mean()), float(table["kl"].abs().max()) < 1e-6
(1.0, True)
"""

from __future__ import annotations

import pandas as pd
import torch

from ..inside.lens import teacher_forced
from ..text.tokens import shown

#: prompts for the comparison when none are given (chat questions to the demo)
DEFAULT_PROMPTS = (
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain in one sentence why the sky is blue.",
    "List three fruits.",
)


#: the columns of :func:`compare`'s table (also when it has no rows: max_new_tokens=0)
COLUMNS = ["prompt", "step", "top1_agree", "kl", "top", "p_top", "other_top", "other_p_top"]


def _all_logits(lm, ids: torch.LongTensor) -> torch.Tensor:
    """float32 log-probabilities (length, vocab) of every next token of ``ids`` (1, length)."""
    return teacher_forced(lm.model, ids).logits[0].float().log_softmax(-1)


def compare(lm, other, prompts=None, *, max_new_tokens: int = 32, chat: bool = True):
    """One row per continuation position of each prompt: agreement and KL of ``other``'s
    next-token distribution against ``lm``'s (module doc). Both must share the tokenizer's
    vocabulary."""
    if other.info.vocab_size != lm.info.vocab_size:
        raise ValueError(
            f"other has a vocabulary of {other.info.vocab_size} tokens, this LM "
            f"{lm.info.vocab_size}: compare models that share a tokenizer"
        )
    if isinstance(prompts, str):
        prompts = [prompts]
    prompts = list(DEFAULT_PROMPTS if prompts is None else prompts)
    if not prompts:
        raise ValueError(
            "prompts is empty: give at least one prompt to compare on, or leave prompts out "
            f"(None) for the {len(DEFAULT_PROMPTS)} default chat questions"
        )
    rows = []
    for p_index, prompt in enumerate(prompts):
        res = lm.generate(prompt, chat=chat, max_new_tokens=max_new_tokens)
        ids = res.sequences[:1]
        start = res.run.prompt_length
        ref, oth = _all_logits(lm, ids), _all_logits(other, ids)
        kl = (ref.exp() * (ref - oth)).sum(-1)
        for pos in range(start - 1, ids.shape[1] - 1):
            a, b = int(ref[pos].argmax()), int(oth[pos].argmax())
            rows.append(
                {
                    "prompt": p_index,
                    "step": pos - start + 1,
                    "top1_agree": a == b,
                    "kl": float(kl[pos]),
                    "top": shown(lm.tokenizer, a),
                    "p_top": float(ref[pos, a].exp()),
                    "other_top": shown(lm.tokenizer, b),
                    "other_p_top": float(oth[pos, b].exp()),
                }
            )
    from ..runtime.quant import release_freed_memory

    release_freed_memory()  # the passes' (length, vocab) log-probs, kept by glibc's heap
    return pd.DataFrame(rows, columns=COLUMNS)


def summary(table: pd.DataFrame) -> dict:
    """Mean top-1 agreement and mean KL per token of a :func:`compare` table."""
    return {
        "tokens": len(table),
        "top1_agreement": float(table["top1_agree"].mean()),
        "mean_kl": float(table["kl"].mean()),
    }
