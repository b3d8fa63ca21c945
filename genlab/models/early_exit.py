"""A model cut after its first layers: the draft model of ``assistant_early_exit``.

:class:`EarlyExitModel` runs the first ``layers`` decoder layers of a model, then its final
norm and head, so the model drafts for itself (assisted decoding's early exit, and the
"what does layer k predict" views of the lessons).
"""

from __future__ import annotations

import copy
import dataclasses

from genlab.models.base import ModelOutput

__all__ = ["EarlyExitModel"]


class EarlyExitModel:
    """The first ``layers`` layers of a model, through its final norm and head, as a
    genlab model (the draft model of ``assistant_early_exit``).

    Works on the built-in decoders (a view that shares the weights) and on transformers
    models (their layer count is lowered during each forward, as the reference does).
    """

    def __init__(self, model, layers: int):
        total = int(model.info.num_hidden_layers or 0)
        if not 1 <= layers <= max(total, 1):
            raise ValueError(
                f"assistant_early_exit={layers} must be in [1, {total}] "
                f"(the model has {total} layers)"
            )
        self.base = model
        self.exit_layer = int(layers)
        self.info = model.info
        self.hf = getattr(model, "hf", None)
        if self.hf is None:
            if not hasattr(model, "layers") or not hasattr(model, "settings"):
                raise ValueError(
                    f"assistant_early_exit needs a built-in decoder or a transformers model, "
                    f"not {type(model).__name__}"
                )
            view = copy.copy(model)
            view.layers = model.layers[: self.exit_layer]
            view.settings = dataclasses.replace(model.settings, num_layers=self.exit_layer)
            self._view = view

    @property
    def device(self):
        """The device of the full model."""
        return self.base.device

    def new_cache(self, batch_size: int):
        """A cache for the first layers only."""
        if self.hf is not None:
            return self.base.new_cache(batch_size)
        return self._view.new_cache(batch_size)

    def forward(self, input_ids, **kwargs) -> ModelOutput:
        """The model's forward through its first ``layers`` layers (same arguments)."""
        if self.hf is None:
            return self._view.forward(input_ids, **kwargs)
        inner = getattr(self.hf, self.hf.base_model_prefix)
        full = inner.config.num_hidden_layers
        inner.config.num_hidden_layers = self.exit_layer
        try:
            return self.base.forward(input_ids, **kwargs)
        finally:
            inner.config.num_hidden_layers = full
