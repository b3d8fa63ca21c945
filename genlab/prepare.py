"""Moved: the set-up's stages have one module each.

:func:`genlab.config.prepare_config` (the call's config), :func:`genlab.inputs.prepare_inputs`
(what the run was given), :mod:`genlab.plan` (:func:`~genlab.plan.make_plan`,
:func:`~genlab.plan.effective_config`, :func:`~genlab.plan.config_values`,
:func:`~genlab.plan.switch_strategy`) and :func:`genlab.state.initial_state`. The old
names answer here for one release, with a DeprecationWarning.
"""

from __future__ import annotations

from .moved import moved_to

_to_config = moved_to("genlab.prepare", "genlab.config", names={"prepare_config"})
_to_inputs = moved_to("genlab.prepare", "genlab.inputs", names={"infer_attention_mask"})
_to_plan = moved_to("genlab.prepare", "genlab.plan")


def __getattr__(name: str):
    if name == "prepare_config":
        return _to_config(name)
    if name == "infer_attention_mask":
        return _to_inputs(name)
    return _to_plan(name)
