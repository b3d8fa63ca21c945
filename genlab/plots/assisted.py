"""Moved: the plots of assisted decoding and contrastive search are in
:mod:`genlab.plots.strategies` (and ``genlab.plots.acceptance_plot`` /
``genlab.plots.contrastive_plot``). Names read from here still work, with a
DeprecationWarning, until the next release."""

from ..moved import moved_to

__getattr__ = moved_to("genlab.plots.assisted", "genlab.plots.strategies", "genlab.plots")
