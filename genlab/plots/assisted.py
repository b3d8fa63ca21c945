"""Moved: the plots of assisted decoding and contrastive search are in
:mod:`genlab.plots.strategies` (and ``genlab.plots.acceptance_plot`` /
``genlab.plots.contrastive_plot``). Names read from here still work, with a
DeprecationWarning, until the next release."""

from __future__ import annotations


def __getattr__(name: str):
    import warnings

    from . import strategies

    if name.startswith("__") or not hasattr(strategies, name):
        raise AttributeError(f"module 'genlab.plots.assisted' has no attribute {name!r}")
    warnings.warn(
        f"genlab.plots.assisted.{name} moved to genlab.plots.{name}; the old path goes in "
        "the next release",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(strategies, name)
