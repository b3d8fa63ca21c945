"""Moved: the tokenizer is :mod:`genlab.tokenizer` (it turns text into ids and back; it
produces no logits). Names read from here still work, with a DeprecationWarning, until the
next release."""

from __future__ import annotations


def __getattr__(name: str):
    import warnings

    from .. import tokenizer

    if name.startswith("__") or not hasattr(tokenizer, name):
        raise AttributeError(f"module 'genlab.models.tokenizer' has no attribute {name!r}")
    warnings.warn(
        f"genlab.models.tokenizer.{name} moved to genlab.tokenizer.{name}; the old path goes "
        "in the next release",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(tokenizer, name)
