"""Token healing (``token_healing=True``): repair a prompt whose last token was cut short.

A prompt ending in ``"http"`` makes the model continue *after* the token ``http``, although
the text most likely continues as ``https``. Healing, as transformers 4.56.2 does it:

1. decode each prompt, strip surrounding whitespace, and tokenize it again;
2. for the last token, collect every vocabulary token that *extends* it (``http`` ->
   ``https``, ``http``, ...), each with a sequence bias of +10 (+11 for the original);
3. drop the last token and let the model choose one token under that bias (greedy), so
   the prompt ends in whichever extension the model prefers.

(Not run as a test: it needs a model and prompt ids of your own (``model``, ``ids``); the tests run
these calls.)

>>> ids = heal_tokens(model, ids, tokenizer, genlab.generate)   # doctest: +SKIP
"""

from __future__ import annotations

import torch


def token_extensions(vocab: dict[str, int], prefix: str) -> list[str]:
    """Vocabulary strings that extend ``prefix``, spelled as the reference spells them.

    Like the reference's character trie: the walk follows ``prefix`` as far as the
    vocabulary allows; every token below that point is returned as ``prefix`` + the rest
    of the token after the matched part (so a partial match yields strings that may not be
    tokens themselves).

    >>> sorted(token_extensions({"app": 0, "apple": 1, "b": 2}, "app"))
    ['app', 'apple']
    """
    matched = ""
    for ch in prefix:
        if any(tok.startswith(matched + ch) for tok in vocab):
            matched += ch
        else:
            break
    return [prefix + tok[len(matched) :] for tok in vocab if tok.startswith(matched)]


def _tail_token_text(tokenizer, token_id: int) -> str:
    # as the reference: the first character of whatever " " converts back to (for
    # byte-level vocabularies without a " " token that is the unknown token's first char)
    space_id = tokenizer.convert_tokens_to_ids(" ")
    space = tokenizer.convert_ids_to_tokens(space_id) if space_id is not None else None
    space = space[0] if space else None
    text = tokenizer.decode(token_id)
    return text.replace(" ", space) if space else text


def heal_tokens(model, input_ids: torch.LongTensor, tokenizer, generate) -> torch.LongTensor:
    """Token-healed prompts (rows, length'); ``model`` is any model ``generate`` accepts
    (the engine passes its own ``generate``, which heals with a constrained generation)."""
    if tokenizer is None:
        raise ValueError(
            "token_healing=True needs the model's tokenizer: pass tokenizer= to "
            "generate (lm.generate passes its own)"
        )
    from ..config import GenerationConfig

    bos, pad = tokenizer.bos_token_id, tokenizer.pad_token_id
    vocab = tokenizer.get_vocab()
    prompts = [p.strip() for p in tokenizer.batch_decode(input_ids, skip_special_tokens=True)]
    ids = tokenizer(prompts, return_tensors="pt", padding=True).input_ids.to(input_ids.device)
    ids = torch.where(ids == bos, pad, ids)  # healing must not condition on BOS
    if ids.numel() == 0:
        return ids
    for row, tail_id in enumerate(ids[:, -1].tolist()):
        row_ids = ids[row]
        if bool(torch.all(row_ids == pad)):
            continue
        bias = {}
        for alt in token_extensions(vocab, _tail_token_text(tokenizer, tail_id)):
            alt_id = tokenizer.convert_tokens_to_ids(alt)
            if alt_id is not None:
                bias[(int(alt_id),)] = 10.0
        if len(bias) == 1:
            continue  # nothing to heal towards
        bias[(tail_id,)] = bias.get((tail_id,), 0.0) + 1.0  # keep a slight preference
        trimmed = row_ids[:-1].clone()
        if trimmed.numel() == 0:
            continue
        if int((row_ids != pad).sum()) == 1:
            trimmed[-1] = bos  # a one-token prompt regenerates from BOS
        config = GenerationConfig(max_new_tokens=1, pad_token_id=pad, sequence_bias=bias)
        ids[row] = generate(model, trimmed[None, :], generation_config=config)[0]
    return ids
