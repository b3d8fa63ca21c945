"""Generation settings: every field of transformers 4.56.2's ``GenerationConfig``.

``GenerationConfig`` holds the knobs of one ``generate`` call (length, strategy, logits
processing, outputs, special tokens, ...) with the reference's names and defaults, and
reads and writes ``generation_config.json`` files that transformers reads and writes too.

Each field is also described by a :class:`FieldSpec` in :data:`FIELDS` (group, kind,
default, range, choices, one line of help). The widget panel is generated from these
specs, and :meth:`GenerationConfig.validate` checks values against the very same specs,
so the range a slider offers is the range validation enforces. The watermarking configs'
fields are specs too (:data:`WATERMARK_FIELDS`, :data:`SYNTHID_FIELDS`), and the
watermark processors check their arguments against them.

The package's modules, lowest first:

* :mod:`genlab.config.fields` -- the field table and the checks it drives;
* :mod:`genlab.config.small` -- the watermarking configs and CompileConfig, with JSON I/O;
* :mod:`genlab.config.files` -- reading config files from folders and the Hub;
* :mod:`genlab.config.generation` -- GenerationConfig;
* :mod:`genlab.config.resolve` -- the config of one ``generate`` call (:func:`prepare_config`).

Example::

    >>> cfg = GenerationConfig(do_sample=True, top_p=0.9, max_new_tokens=16)
    >>> cfg.get_generation_mode().value
    'sample'
    >>> cfg
    GenerationConfig(max_new_tokens=16, do_sample=True, top_p=0.9)
    >>> FIELDS["top_p"].range_text()
    '[0, 1]'
"""

from __future__ import annotations

from .fields import (
    ALL_CACHE_IMPLEMENTATIONS,
    DEPRECATED_STATIC_CACHE_IMPLEMENTATIONS,
    DYNAMIC_CACHE_IMPLEMENTATIONS,
    FIELDS,
    GROUPS,
    KINDS,
    STATIC_CACHE_IMPLEMENTATIONS,
    STORAGE_RANGES,
    SYNTHID_FIELDS,
    WATERMARK_FIELDS,
    FieldSpec,
    check_fields,
    check_spec_value,
    int_list,
    normalize_sequence_bias,
    spec_defaults,
)
from .files import GENERATION_CONFIG_NAME
from .generation import (
    EXTRA_OUTPUT_FLAGS,
    GENERATE_ONLY_ARGUMENTS,
    METADATA_FIELDS,
    REFERENCE_TRANSFORMERS_VERSION,
    GenerationConfig,
    GenerationMode,
)
from .resolve import prepare_config
from .small import CompileConfig, SynthIDTextWatermarkingConfig, WatermarkingConfig

__all__ = [
    "ALL_CACHE_IMPLEMENTATIONS",
    "DEPRECATED_STATIC_CACHE_IMPLEMENTATIONS",
    "DYNAMIC_CACHE_IMPLEMENTATIONS",
    "EXTRA_OUTPUT_FLAGS",
    "FIELDS",
    "GENERATE_ONLY_ARGUMENTS",
    "GENERATION_CONFIG_NAME",
    "GROUPS",
    "KINDS",
    "METADATA_FIELDS",
    "REFERENCE_TRANSFORMERS_VERSION",
    "STATIC_CACHE_IMPLEMENTATIONS",
    "STORAGE_RANGES",
    "SYNTHID_FIELDS",
    "WATERMARK_FIELDS",
    "CompileConfig",
    "FieldSpec",
    "GenerationConfig",
    "GenerationMode",
    "SynthIDTextWatermarkingConfig",
    "WatermarkingConfig",
    "check_fields",
    "check_spec_value",
    "int_list",
    "normalize_sequence_bias",
    "prepare_config",
    "spec_defaults",
]
