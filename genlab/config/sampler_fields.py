"""The settings of the samplers beyond the reference (:mod:`genlab.processors.samplers`).

transformers' ``GenerationConfig`` has no such fields, and genlab's config equals the
reference's attribute for attribute, so these are kept the way the reference keeps any extra
key: an attribute exists only once it is set (``GenerationConfig(dry_multiplier=0.8)``,
``run.config.xtc_probability = 0.5``), and is written to JSON then. Everything else reads
them through :func:`sampler_setting`, which gives the default when one is not set. Every
sampler is off by default.

>>> SAMPLER_FIELDS["xtc_probability"].range_text()
'[0, 1]'
"""

from __future__ import annotations

import math
from typing import Any

from .fields import FieldSpec, _bad, check_spec_value

#: the names ``sampler_order`` accepts: the reference's warpers and the samplers, by the
#: processors' stage names, in the default order ("mirostat" is either version)
SAMPLER_NAMES = (
    "dry",
    "top_n_sigma",
    "temperature",
    "dynatemp",
    "smoothing",
    "top_k",
    "top_p",
    "min_p",
    "typical_p",
    "epsilon_cutoff",
    "eta_cutoff",
    "xtc",
    "mirostat",
)


def _check_sampler_order(value: Any) -> None:
    if not isinstance(value, (list, tuple)) or not value:
        raise _bad(
            "sampler_order",
            value,
            f"a non-empty list of sampler names from {list(SAMPLER_NAMES)}, or None",
        )
    for name in value:
        if name not in SAMPLER_NAMES:
            raise _bad(
                "sampler_order",
                value,
                f"a list of sampler names from {list(SAMPLER_NAMES)}",
                f"{name!r} is not one of them.",
            )
    twice = sorted({n for n in value if list(value).count(n) > 1})
    if twice:
        raise _bad("sampler_order", value, "a list naming each sampler once", f"Twice: {twice}.")


def _f(name, kind, default, help, **kw) -> FieldSpec:
    return FieldSpec(name=name, group="logits", kind=kind, default=default, help=help, **kw)


# fmt: off
_SPECS = [
    _f("dry_multiplier", "float", 0.0, min=0, step=0.05,
       help="DRY: strength of the penalty on tokens that extend a repeat; 0 turns it off."),
    _f("dry_base", "float", 1.75, min=1, step=0.05,
       help="DRY: the penalty grows by this factor per token of repeat beyond the allowed."),
    _f("dry_allowed_length", "int", 2, min=1, step=1,
       help="DRY: repeats up to this many tokens are not penalised."),
    _f("dry_sequence_breakers", "str_list", ["\n", ":", '"', "*"], nullable=True,
       help="DRY: text that ends a repeat (tokenized by the model's tokenizer); None: none."),
    _f("dry_penalty_last_n", "int", -1, min=-1, step=1,
       help="DRY: how many last tokens are searched for repeats; -1: all."),
    _f("xtc_probability", "float", 0.0, min=0, max=1, step=0.05,
       help="XTC: chance per step of removing the top choices; 0 turns it off."),
    _f("xtc_threshold", "float", 0.1, min=0, max=0.5, step=0.01,
       help="XTC: tokens at least this likely are removed, all but the least likely."),
    _f("mirostat_mode", "choice", 0, choices=(0, 1, 2),
       help="Mirostat: 0 off, 1 or 2 the version; it samples, so it runs last."),
    _f("mirostat_tau", "float", 5.0, min=0, min_exclusive=True, step=0.5,
       help="Mirostat: target surprise in bits (tau)."),
    _f("mirostat_eta", "float", 0.1, min=0, max=1, min_exclusive=True, step=0.05,
       help="Mirostat: learning rate of mu (eta)."),
    _f("dynatemp_low", "float", None, min=0, step=0.05, nullable=True,
       help="Dynamic temperature: the temperature of a certain step; None turns it off."),
    _f("dynatemp_high", "float", 1.5, min=0, step=0.05,
       help="Dynamic temperature: the temperature of the most uncertain step."),
    _f("dynatemp_exponent", "float", 1.0, min=0, min_exclusive=True, step=0.1,
       help="Dynamic temperature: exponent of the normalised entropy."),
    _f("smoothing_factor", "float", 0.0, min=0, step=0.05,
       help="Quadratic smoothing: strength; 0 turns it off."),
    _f("smoothing_curve", "float", 1.0, min=1, step=0.1,
       help="Quadratic smoothing: 1 is quadratic; more also lifts the tail."),
    _f("top_n_sigma", "float", None, min=0, min_exclusive=True, step=0.1, nullable=True,
       help="Top-n-sigma: keep logits within n standard deviations of the top; None: off."),
    _f("sampler_order", "json", None, nullable=True,
       help="The samplers and warpers, by name, in the order they run; None: the default."),
]
# fmt: on

#: the samplers' settings, by name
SAMPLER_FIELDS: dict[str, FieldSpec] = {spec.name: spec for spec in _SPECS}

#: the settings that turn on a sampler that only runs when sampling, with their "off"
#: value: set while ``do_sample=False`` they change nothing, so ``validate()`` warns, as the
#: reference does for ``temperature`` or ``top_k`` (DRY is a penalty and runs either way)
SAMPLING_ONLY_SAMPLER_FIELDS: dict[str, Any] = {
    name: SAMPLER_FIELDS[name].default
    for name in (
        "top_n_sigma",
        "dynatemp_low",
        "smoothing_factor",
        "xtc_probability",
        "mirostat_mode",
        "sampler_order",
    )
}

_CHECKS = {"sampler_order": _check_sampler_order}


def sampler_setting(config: Any, name: str) -> Any:
    """A sampler setting of ``config`` (any object), or its default when it is not set.

    >>> from types import SimpleNamespace as Config
    >>> sampler_setting(Config(), "dry_base"), sampler_setting(Config(dry_base=2), "dry_base")
    (1.75, 2)
    """
    spec = SAMPLER_FIELDS[name]
    return getattr(config, name, spec.default)


def check_sampler_fields(config: Any) -> None:
    """Check the sampler settings ``config`` holds (a ValueError names the field)."""
    values = vars(config) if not isinstance(config, dict) else config
    for name, spec in SAMPLER_FIELDS.items():
        if name in values:
            value = values[name]
            check_spec_value(spec, value, checks=_CHECKS)
            if spec.kind == "float" and value is not None and not math.isfinite(value):
                raise _bad(
                    name,
                    value,
                    "a finite " + spec.describe().removeprefix("a "),
                    f"Infinity is no setting of this sampler: give a finite value ({spec.help})",
                )
    low = values.get("dynatemp_low")
    high = values.get("dynatemp_high", SAMPLER_FIELDS["dynatemp_high"].default)
    if low is not None and high < low:
        raise _bad(
            "dynatemp_high",
            high,
            f"a number >= dynatemp_low ({low})",
            "The temperature of the most uncertain step cannot be below the most certain's.",
        )


__all__ = [
    "SAMPLER_FIELDS",
    "SAMPLER_NAMES",
    "SAMPLING_ONLY_SAMPLER_FIELDS",
    "check_sampler_fields",
    "sampler_setting",
]
