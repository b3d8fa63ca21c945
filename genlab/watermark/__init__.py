"""Text watermarks: green lists, the two watermarking logits processors, detectors, tables.

Two schemes, both as transformers 4.56.2 applies them (after the sampling warpers):

* **Green-list watermark** (Kirchenbauer et al. 2023, ``WatermarkingConfig``). Before each
  step a pseudo-random permutation of the vocabulary is drawn from a seed hashed from the
  context; its first ``int(vocab_size * greenlist_ratio)`` entries are *green* and get
  ``bias`` added to their logits. A detector recomputes the green lists and counts green
  tokens: ``z = (G - gamma * T) / sqrt(T * gamma * (1 - gamma))``.
* **SynthID text** (Dathathri et al. 2024, ``SynthIDTextWatermarkingConfig``). Every
  (n-1)-gram context and candidate token get one pseudo-random bit (a *g-value*) per key;
  the distribution is reshaped by a tournament over the keys so that tokens with g = 1 win
  more often. Detection averages the g-values of a text (mean / weighted mean score).

Everything that needs "which tokens are green here" goes through :func:`greenlist`, a pure
function: the processor, the detector, the tables and the plots share it. Every setting is
declared once, in the field table (:data:`genlab.config.WATERMARK_FIELDS`,
:data:`genlab.config.SYNTHID_FIELDS`): ``validate()`` and the processors check the same
ranges.

The package's modules, lowest first:

* :mod:`~genlab.watermark.params` -- the shared parameters, read from any config, checked;
* :mod:`~genlab.watermark.kgw` -- the green list and its processor (Kirchenbauer et al.: KGW);
* :mod:`~genlab.watermark.synthid` -- SynthID's g-values, processor and scores;
* :mod:`~genlab.watermark.build` -- the processor a config asks for;
* :mod:`~genlab.watermark.detection` -- z-scores, p-values, the detector;
* :mod:`~genlab.watermark.tables` -- pandas tables for notebooks and plots.

The HTML rendering of a text's colours is a widget: :mod:`genlab.widgets.watermark_html`
(``watermark_html`` and ``WatermarkHTML`` are still importable from here).

>>> import torch
>>> from genlab.watermark import greenlist, WatermarkLogitsProcessor
>>> cfg = {"greenlist_ratio": 0.25, "seeding_scheme": "lefthash"}
>>> greenlist(torch.tensor([5, 17]), 100, cfg).shape
torch.Size([25])
>>> proc = WatermarkLogitsProcessor(vocab_size=100, device="cpu")
>>> out = proc(torch.tensor([[5, 17]]), torch.zeros(1, 100))
>>> int((out == 2.0).sum())
25
"""

from __future__ import annotations

from ..lazy import lazy_exports
from .build import watermark_processor
from .detection import (
    WatermarkDetection,
    WatermarkDetector,
    detector_model_fields,
    p_value_approx,
    p_value_exact,
    running_z_scores,
    z_score,
)
from .kgw import (
    WatermarkLogitsProcessor,
    biased_token_ids,
    green_token_mask,
    greenlist,
    greenlist_mask,
    greenlist_seed,
    greenlist_size,
    scoring_window,
    selfhash_green_candidates,
    token_is_green,
)
from .params import (
    DEFAULT_HASHING_KEY,
    SELFHASH_CANDIDATES,
    SELFHASH_TABLE_SIZE,
    SYNTHID_LCG_INCREMENT,
    SYNTHID_LCG_MULTIPLIER,
    SYNTHID_MAX_TABLE_SIZE,
    GreenlistParams,
    SynthIDParams,
    greenlist_params,
    is_synthid_config,
    synthid_params,
)
from .synthid import (
    SynthIDState,
    SynthIDTextWatermarkLogitsProcessor,
    expected_mean_g_value,
    synthid_context_repetition_mask,
    synthid_eos_mask,
    synthid_gvalues,
    synthid_hash,
    synthid_sampling_table,
    synthid_scores,
    synthid_tournament,
)
from .tables import greenlist_table, synthid_gvalues_table, token_colours

# rendered by the widgets layer; kept importable from here (resolved on first use; dir()
# stays the default)
__getattr__, _ = lazy_exports(
    __name__, dict.fromkeys(("WatermarkHTML", "watermark_html"), "genlab.widgets.watermark_html")
)


__all__ = [
    "DEFAULT_HASHING_KEY",
    "SELFHASH_CANDIDATES",
    "SELFHASH_TABLE_SIZE",
    "SYNTHID_LCG_INCREMENT",
    "SYNTHID_LCG_MULTIPLIER",
    "SYNTHID_MAX_TABLE_SIZE",
    "GreenlistParams",
    "SynthIDParams",
    "SynthIDState",
    "SynthIDTextWatermarkLogitsProcessor",
    "WatermarkDetection",
    "WatermarkDetector",
    "WatermarkHTML",
    "WatermarkLogitsProcessor",
    "biased_token_ids",
    "detector_model_fields",
    "expected_mean_g_value",
    "green_token_mask",
    "greenlist",
    "greenlist_mask",
    "greenlist_params",
    "greenlist_seed",
    "greenlist_size",
    "greenlist_table",
    "is_synthid_config",
    "p_value_approx",
    "p_value_exact",
    "running_z_scores",
    "scoring_window",
    "selfhash_green_candidates",
    "synthid_context_repetition_mask",
    "synthid_eos_mask",
    "synthid_gvalues",
    "synthid_gvalues_table",
    "synthid_hash",
    "synthid_params",
    "synthid_sampling_table",
    "synthid_scores",
    "synthid_tournament",
    "token_colours",
    "token_is_green",
    "watermark_html",
    "watermark_processor",
    "z_score",
]
