"""The processor a watermarking config asks for (what ``generate`` appends last).

>>> watermark_processor({"bias": 1.0}, vocab_size=32).bias
1.0
"""

from __future__ import annotations

from .kgw import WatermarkLogitsProcessor
from .params import greenlist_params, is_synthid_config, synthid_params
from .synthid import SynthIDTextWatermarkLogitsProcessor


def watermark_processor(watermarking_config, *, vocab_size: int, device="cpu"):
    """The processor a watermarking config asks for (what ``generate`` appends last).

    ``watermarking_config``: genlab or transformers ``WatermarkingConfig`` /
    ``SynthIDTextWatermarkingConfig``, or a dict of either's fields (a dict with
    ``ngram_len`` / ``keys`` is SynthID). ``vocab_size`` is the model's (logits width).

    >>> watermark_processor({"bias": 1.0}, vocab_size=32).bias
    1.0
    """
    if is_synthid_config(watermarking_config):
        p = synthid_params(watermarking_config)
        return SynthIDTextWatermarkLogitsProcessor(
            ngram_len=p.ngram_len,
            keys=list(p.keys),
            sampling_table_size=p.sampling_table_size,
            sampling_table_seed=p.sampling_table_seed,
            context_history_size=p.context_history_size,
            device=device,
            skip_first_ngram_calls=p.skip_first_ngram_calls,
            debug_mode=p.debug_mode,
        )
    p = greenlist_params(watermarking_config)
    return WatermarkLogitsProcessor(
        vocab_size=vocab_size,
        device=device,
        greenlist_ratio=p.greenlist_ratio,
        bias=p.bias,
        hashing_key=p.hashing_key,
        seeding_scheme=p.seeding_scheme,
        context_width=p.context_width,
    )
