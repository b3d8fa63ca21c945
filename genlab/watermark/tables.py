"""Tables of the watermarks: a position's green list, a text's colours, SynthID g-values.

Each returns a pandas DataFrame, one row per token (or per token and key), for notebooks
and for the plots of :mod:`genlab.plots.watermark`.

>>> token_colours([5, 6, 7], {}, vocab_size=20).scored.tolist()
[False, True, True]
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from ..checks import check_int
from ..text.tokens import token_text
from .build import watermark_processor
from .detection import WatermarkDetector, z_score
from .kgw import WatermarkLogitsProcessor, green_token_mask
from .params import as_token_ids, check_ids_in_vocab, greenlist_params, synthid_params
from .synthid import _default_synthid_mask, synthid_gvalues


def synthid_gvalues_table(
    input_ids,
    config,
    *,
    tokenizer=None,
    eos_token_id: int | None = None,
    device="cpu",
) -> pd.DataFrame:
    """The g-values of a text, one row per (row, position, depth).

    Columns: row, position (of the scored token in ``input_ids``), token_id, token, depth,
    g_value (0/1), scored (False for repeated contexts / after EOS).

    >>> t = synthid_gvalues_table([1, 2, 3], {"ngram_len": 2, "keys": [4, 5]})
    >>> list(t.columns), len(t)
    (['row', 'position', 'token_id', 'token', 'depth', 'g_value', 'scored'], 4)
    """
    p = synthid_params(config)
    ids = as_token_ids(input_ids, "input_ids", 2)
    g = synthid_gvalues(ids, p, device=device).cpu()  # (batch, num, depth)
    scored = _default_synthid_mask(ids, p, eos_token_id, device).cpu()  # (batch, num)
    batch, num, depth = g.shape
    row, index, layer = np.meshgrid(
        np.arange(batch), np.arange(num), np.arange(depth), indexing="ij"
    )  # each (batch, num, depth), flattened below in that order
    row, index, layer = row.ravel(), index.ravel(), layer.ravel()
    position = index + p.ngram_len - 1
    token_ids = ids.cpu().numpy()[row, position]
    texts = {int(t): token_text(tokenizer, int(t)) for t in np.unique(token_ids)}
    return pd.DataFrame(
        {
            "row": row,
            "position": position,
            "token_id": token_ids,
            "token": [texts[int(t)] for t in token_ids],
            "depth": layer,
            "g_value": g.numpy().ravel(),
            "scored": scored.numpy()[row, index],
        }
    )


def greenlist_table(
    context_ids,
    scores_before,
    config,
    *,
    tokenizer=None,
    top: int | None = None,
    device="cpu",
) -> pd.DataFrame:
    """The watermark at one position: every token's logit and probability before/after.

    context_ids: (len,) the text so far; scores_before: (vocab,) the scores the watermark
    processor receives (after the warpers). Columns: token, id, green (got the bias),
    logit_before, logit_after, prob_before, prob_after; sorted by logit_before, highest
    first; ``top`` keeps the first rows.

    >>> t = greenlist_table([3, 4], torch.zeros(8), {"greenlist_ratio": 0.5})
    >>> int(t.green.sum()), list(t.columns)[:3]
    (4, ['token', 'id', 'green'])
    """
    params = greenlist_params(config)
    scores = torch.as_tensor(scores_before)
    if scores.dim() == 2 and scores.shape[0] == 1:
        scores = scores[0]
    if scores.dim() != 1 or not scores.dtype.is_floating_point:
        raise ValueError(f"scores_before must be a (vocab,) float tensor, got {scores!r}")
    if top is not None:
        check_int("top", top, minimum=1)
    vocab_size = scores.shape[0]
    ids = as_token_ids(context_ids, "context_ids", 1)
    check_ids_in_vocab(ids, vocab_size, "context_ids")
    processor = watermark_processor(params, vocab_size=vocab_size, device=device)
    after = processor(ids[None], scores[None])[0]  # (vocab,)
    green = torch.zeros(vocab_size, dtype=torch.bool)
    green[processor.green_ids(ids, scores).cpu()] = True
    frame = pd.DataFrame(
        {
            "token": [token_text(tokenizer, i) for i in range(vocab_size)],
            "id": np.arange(vocab_size),
            "green": green.numpy(),
            "logit_before": scores.detach().cpu().double().numpy(),
            "logit_after": after.detach().cpu().double().numpy(),
            "prob_before": torch.softmax(scores.double(), -1).cpu().numpy(),
            "prob_after": torch.softmax(after.double(), -1).cpu().numpy(),
        }
    )
    frame = frame.sort_values("logit_before", ascending=False, kind="stable")
    frame = frame.reset_index(drop=True)
    return frame if top is None else frame.head(top)


def _resolve_vocab_size(config, tokenizer, vocab_size):
    if vocab_size is not None:
        return vocab_size
    if isinstance(config, (WatermarkLogitsProcessor, WatermarkDetector)):
        return config.vocab_size
    if tokenizer is not None and hasattr(tokenizer, "__len__"):
        return len(tokenizer)
    raise ValueError(
        "vocab_size is needed to draw green lists: pass vocab_size=model.info.vocab_size "
        "(or a tokenizer with len(), or a WatermarkDetector as config)"
    )


def token_colours(
    input_ids,
    config,
    tokenizer=None,
    *,
    vocab_size: int | None = None,
    bos_token_id: int | None = None,
    device="cpu",
) -> pd.DataFrame:
    """Each token of one text marked green or red, with the running z-score.

    input_ids: (len,) or (1, len). ``config`` may also be a :class:`WatermarkDetector`
    (its vocab_size and BOS are used). Columns: position, id, token, scored, green,
    num_scored, num_green, running_z (z of the scored tokens up to here; NaN before the
    first). A leading ``bos_token_id`` is not scored, as in the detector.

    >>> t = token_colours([5, 6, 7], {}, vocab_size=20)
    >>> t.scored.tolist()
    [False, True, True]
    """
    if isinstance(config, WatermarkDetector):
        bos_token_id = config.bos_token_id if bos_token_id is None else bos_token_id
    vocab_size = _resolve_vocab_size(config, tokenizer, vocab_size)
    params = greenlist_params(config)
    ids = as_token_ids(input_ids, "input_ids", 1)
    check_ids_in_vocab(ids, vocab_size, "input_ids")
    start = 1 if ids.numel() and bos_token_id is not None and int(ids[0]) == bos_token_id else 0
    green = np.zeros(len(ids), dtype=bool)
    scored = np.zeros(len(ids), dtype=bool)
    g, s = green_token_mask(ids[start:], vocab_size, params, device=device)
    green[start:], scored[start:] = g.numpy(), s.numpy()
    num_scored = np.cumsum(scored)
    num_green = np.cumsum(green & scored)
    with np.errstate(divide="ignore", invalid="ignore"):
        running = z_score(num_green, num_scored, params.greenlist_ratio)
    running[num_scored == 0] = np.nan
    return pd.DataFrame(
        {
            "position": np.arange(len(ids)),
            "id": ids.cpu().numpy(),
            "token": [token_text(tokenizer, int(i)) for i in ids],
            "scored": scored,
            "green": green,
            "num_scored": num_scored,
            "num_green": num_green,
            "running_z": running,
        }
    )
