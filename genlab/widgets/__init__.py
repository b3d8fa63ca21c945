"""Jupyter widgets over the engine (the only genlab package that imports ipywidgets).

* :class:`ConfigPanel` -- every GenerationConfig field as a control, from the field specs;
* :class:`Playground` -- prompt, settings, seed; the result follows every change;
* :class:`StepDebugger` -- Step / Run / Rewind / Fork, the waterfall of each step, forcing;
* :class:`CompareView` -- one prompt and seed under several configs, side by side;
* :class:`WatermarkExplorer` -- green/red tokens, running z-score, the green list;
* :class:`BeamExplorer` -- the beam tree by step, the hypothesis pool, the early stop;
* :class:`LensView` -- the logit lens and the attention of each generated token;
* :class:`InsideView` -- a steering vector at a layer with a strength slider, and the
  attribution heatmap of the generated text;
* :class:`SweepView` -- a sampling sweep over a grid of settings, its metrics and samples;
* :class:`SampleView` -- the N samples of one prompt grouped by answer, with what
  best-of-N, the majority vote and a verifier each keep;
* :class:`BranchTree` -- every run explored (forks, forced tokens, alternatives clicked)
  as one tree of tokens, to continue from any node (a tab of the StepDebugger).

(Not run as a test: it shows a widget panel, drawn by a Jupyter front end (tests/test_widgets.py
and make browser run the panels).)

>>> from genlab.widgets import Playground                       # doctest: +SKIP
>>> Playground(genlab.load("demo"), "The capital of France is")  # doctest: +SKIP
"""

from __future__ import annotations

from genlab.lazy import lazy_exports

_LAZY = {
    "ConfigPanel": "config_panel",
    "PRESETS": "config_panel",
    "Playground": "playground",
    "StepDebugger": "debugger",
    "CompareView": "compare",
    "WatermarkExplorer": "explorers",
    "BeamExplorer": "explorers",
    "LensView": "lens",
    "SweepView": "sweep",
    "SampleView": "samples",
    "InsideView": "inside",
    "BranchTree": "tree",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
__all__ = sorted(_LAZY)
