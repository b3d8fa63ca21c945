"""Any supported model object as a genlab-protocol model (``info``, ``new_cache``,
``forward``): genlab's own models as they are, an ``LM``'s model, a transformers model
through the adapter (one adapter per model object, kept without touching the model)."""

from __future__ import annotations

import weakref

#: adapters by id(model); an adapter holds its model, so while an entry lives its id is
#: that model's, and the entry goes when nobody holds the adapter (no leak, no stale id)
_ADAPTERS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def as_model(model, callables: bool = False):
    """A genlab-protocol model from a genlab model, an ``LM`` or a transformers model.

    callables: accept any other callable too and return None for it (the caller then
    calls it the way the reference calls a model: classifier-free guidance's ``model``)."""
    inner = getattr(model, "model", None)
    if inner is not None and hasattr(inner, "info") and hasattr(inner, "forward"):
        return inner  # an LM wrapper
    if hasattr(model, "info") and hasattr(model, "new_cache"):
        return model
    from .hf import HFModel, is_transformers_model

    if is_transformers_model(model):
        wrapped = _ADAPTERS.get(id(model))
        if wrapped is None:
            wrapped = HFModel(model)
            _ADAPTERS[id(model)] = wrapped
        return wrapped
    if callables and callable(model):
        return None
    raise TypeError(
        f"model must be a genlab model, a genlab LM or a transformers PreTrainedModel, "
        f"got {type(model).__name__}"
    )
