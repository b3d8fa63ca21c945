"""matplotlib figures from traces, results and watermark detections.

Every function returns a matplotlib ``Figure`` and never calls ``plt.show()``; nothing
here imports widgets. Grouped by subject:

* :mod:`genlab.plots.tokens`: probabilities and entropy along a text, top-k bars, the
  processor waterfall of one step;
* :mod:`genlab.plots.beam`: the beam tree;
* :mod:`genlab.plots.watermark`: green/red tokens, running z-score, green lists, SynthID;
* :mod:`genlab.plots.inside`: the logit lens, attention, per-token scores, sweep metrics;
* :mod:`genlab.plots.strategies`: assisted decoding's acceptance, contrastive search's
  candidates;
* :mod:`genlab.plots.samplers`: what DRY, XTC and mirostat did in a run (repeats
  matched, fires, μ against the surprise);
* :mod:`genlab.plots.steering`: input attribution, activation patching, steering sweeps;
* :mod:`genlab.plots.compute`: coverage, majority vote and best-of-N against N samples;
* :mod:`genlab.plots.grammar`: what a grammar (``json_schema=``...) allowed and removed
  along an answer, and the probability the model put on what it allowed.
"""

from __future__ import annotations

from genlab.lazy import lazy_exports

_LAZY = {
    "token_probs": "tokens",
    "topk_bars": "tokens",
    "waterfall": "tokens",
    "compare_logprobs": "tokens",
    "beam_tree": "beam",
    "green_red_tokens": "watermark",
    "running_z": "watermark",
    "greenlist_bars": "watermark",
    "synthid_gvalues_heatmap": "watermark",
    "lens_heatmap": "inside",
    "attention_heatmap": "inside",
    "score_bars": "inside",
    "sweep_metrics": "inside",
    "acceptance_plot": "strategies",
    "contrastive_plot": "strategies",
    "attribution_heatmap": "steering",
    "patching_heatmap": "steering",
    "steering_plot": "steering",
    "dry_table": "samplers",
    "xtc_table": "samplers",
    "mirostat_table": "samplers",
    "mirostat_plot": "samplers",
    "coverage_plot": "compute",
    "grammar_table": "grammar",
    "allowed_mass": "grammar",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
__all__ = sorted(_LAZY)
