"""Moved: the set-up's stages have one module each.

:func:`genlab.config.prepare_config` (the call's config), :func:`genlab.inputs.prepare_inputs`
(what the run was given), :mod:`genlab.plan` (:func:`~genlab.plan.make_plan`,
:func:`~genlab.plan.effective_config`, :func:`~genlab.plan.config_values`,
:func:`~genlab.plan.switch_strategy`) and :func:`genlab.state.initial_state`. The old
names answer here for one release, with a DeprecationWarning.
"""

from __future__ import annotations

from .moved import moved_apart

__getattr__ = moved_apart(
    "genlab.prepare",
    {"prepare_config": "genlab.config", "infer_attention_mask": "genlab.inputs"},
    rest="genlab.plan",
)
