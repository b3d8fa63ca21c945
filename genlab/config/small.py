"""The small configs, with their JSON I/O: the two watermarking configs and CompileConfig.

Their fields, defaults and ranges come from the field table (:data:`WATERMARK_FIELDS`,
:data:`SYNTHID_FIELDS`), which is also what the watermark processors check against.

>>> WatermarkingConfig(bias=3.0).to_dict()["bias"]
3.0
>>> SynthIDTextWatermarkingConfig(ngram_len=1, keys=[3]).validate()  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: watermarking_config: `ngram_len` must be an int >= 2, got 1. Length of the ...
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from dataclasses import dataclass
from typing import Any

from .fields import SYNTHID_FIELDS, WATERMARK_FIELDS, _bad, check_fields, int_list

_WM = WATERMARK_FIELDS
_SID = SYNTHID_FIELDS


class _SmallConfig:
    """JSON helpers shared by the small dataclass configs."""

    @classmethod
    def from_dict(cls, config_dict: dict[str, Any], **kwargs):
        """Build from a dict; ``kwargs`` override matching keys (unknown keys raise)."""
        names = {f.name for f in dataclasses.fields(cls)}
        merged = {**config_dict, **kwargs}
        unknown = sorted(set(merged) - names)
        if unknown:
            raise ValueError(
                f"{cls.__name__} has no field(s) {unknown}; its fields are {sorted(names)}."
            )
        return cls(**merged)

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (a deep copy)."""
        return copy.deepcopy(dataclasses.asdict(self))

    def to_json_string(self) -> str:
        """The fields as JSON text (2-space indent)."""
        return json.dumps(self.to_dict(), indent=2) + "\n"

    def to_json_file(self, json_file_path: str | os.PathLike) -> None:
        """Write the fields as JSON (sorted keys) to ``json_file_path``."""
        with open(json_file_path, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")

    def update(self, **kwargs) -> dict[str, Any]:
        """Set the given fields; return the kwargs that are not fields."""
        names = {f.name for f in dataclasses.fields(self)}
        for key, value in kwargs.items():
            if key in names:
                setattr(self, key, value)
        return {k: v for k, v in kwargs.items() if k not in names}


@dataclass
class WatermarkingConfig(_SmallConfig):
    """Green-list watermarking (Kirchenbauer et al.), with the reference's defaults.

    Example::

        >>> WatermarkingConfig(bias=3.0).to_dict()["bias"]
        3.0

    Args:
        greenlist_ratio: the share of the vocabulary that is green at each step;
        bias: what is added to the logits of green tokens;
        hashing_key: the key hashed with the context to seed the green list;
        seeding_scheme: ``"lefthash"`` (context only) or ``"selfhash"`` (context and token);
        context_width: how many previous tokens seed the green list.

    Defaults and allowed values: :data:`WATERMARK_FIELDS`.
    """

    greenlist_ratio: float = _WM["greenlist_ratio"].default
    bias: float = _WM["bias"].default
    hashing_key: int = _WM["hashing_key"].default
    seeding_scheme: str = _WM["seeding_scheme"].default
    context_width: int = _WM["context_width"].default

    def validate(self) -> None:
        """Raise ValueError naming the watermark field that is out of its domain."""
        check_fields(WATERMARK_FIELDS, self, "watermarking_config")


@dataclass
class SynthIDTextWatermarkingConfig(_SmallConfig):
    """SynthID-Text tournament watermarking, with the reference's defaults.

    Example::

        >>> SynthIDTextWatermarkingConfig(ngram_len=5, keys=[654, 400]).sampling_table_size
        65536

    Args:
        ngram_len: the context length plus one that seeds the g-values;
        keys: one watermarking key per tournament layer (any sequence of ints: a list, a
            tuple, a numpy array or a tensor; validation stores it as a list);
        context_history_size: how many contexts are remembered to skip repeated ones;
        sampling_table_seed: the seed of the sampling table;
        sampling_table_size: the size of the sampling table;
        skip_first_ngram_calls: do not watermark the first ngram_len - 1 tokens;
        debug_mode: apply the watermark to a flat distribution (as the reference's debug mode).

    Defaults and allowed values: :data:`SYNTHID_FIELDS`.
    """

    ngram_len: int
    keys: list[int]
    context_history_size: int = _SID["context_history_size"].default
    sampling_table_seed: int = _SID["sampling_table_seed"].default
    sampling_table_size: int = _SID["sampling_table_size"].default
    skip_first_ngram_calls: bool = _SID["skip_first_ngram_calls"].default
    debug_mode: bool = _SID["debug_mode"].default

    def validate(self) -> None:
        """Raise ValueError naming the watermark field that is out of its domain."""
        check_fields(SYNTHID_FIELDS, self, "watermarking_config")
        self.keys = int_list(self.keys)  # numpy arrays and tensors, as the reference takes


@dataclass
class CompileConfig(_SmallConfig):
    """torch.compile settings (the reference's CompileConfig fields and defaults).

    Used when a greedy or sampling run has ``cache_implementation="static"``: its one-token
    decoding steps are compiled (genlab/runtime/kv_cache.py,
    :func:`~genlab.runtime.kv_cache.compiled_forward`).
    As in the reference, that happens on CUDA devices only, unless ``all_devices`` is set
    to True (the reference's ``_compile_all_devices``; an attribute, not a field: it is
    never serialised), e.g. to compile on the CPU:

    >>> cc = CompileConfig(fullgraph=True)
    >>> cc.all_devices = True

    Args:
        fullgraph: compile the whole step as one graph (no graph breaks allowed);
        dynamic: let shapes vary between calls (None: torch decides);
        backend: the ``torch.compile`` backend (``"inductor"``);
        mode: the ``torch.compile`` mode (``"reduce-overhead"``);
        options: extra backend options (a dict), passed through.
    """

    fullgraph: bool = False
    dynamic: bool | None = None
    backend: Any = "inductor"
    mode: str = "reduce-overhead"
    options: dict | None = None
    # compile on every device type, not only CUDA (the reference's _compile_all_devices)
    all_devices = None


_WATERMARK_CLASSES = (WatermarkingConfig, SynthIDTextWatermarkingConfig)


def is_synthid_fields(value: Any) -> bool:
    """True when a dict of watermark fields describes SynthID (it has ``ngram_len`` or
    ``keys``) rather than the green-list watermark."""
    return "ngram_len" in value or "keys" in value


def coerce_watermarking(value: Any) -> Any:
    """dicts and transformers' watermark configs -> genlab's classes (others unchanged)."""
    if value is None or isinstance(value, _WATERMARK_CLASSES):
        return value
    if isinstance(value, dict):
        cls = SynthIDTextWatermarkingConfig if is_synthid_fields(value) else WatermarkingConfig
        return cls.from_dict(value)
    cls_name = type(value).__name__
    for cls in _WATERMARK_CLASSES:
        if cls_name == cls.__name__ and hasattr(value, "to_dict"):
            return cls.from_dict(value.to_dict())
    return value


def coerce_compile(value: Any) -> Any:
    """dicts and transformers' CompileConfig -> genlab's CompileConfig (others unchanged)."""
    if value is None or isinstance(value, CompileConfig):
        return value
    if isinstance(value, dict):
        return CompileConfig.from_dict(value)
    if type(value).__name__ == "CompileConfig" and hasattr(value, "to_dict"):
        ours = CompileConfig.from_dict(value.to_dict())
        ours.all_devices = getattr(value, "_compile_all_devices", None)
        return ours
    return value


def check_watermarking(value: Any) -> None:
    """The ``watermarking_config`` field's check: one of the two classes, valid."""
    if not isinstance(value, _WATERMARK_CLASSES):
        raise _bad(
            "watermarking_config",
            value,
            "a WatermarkingConfig, a SynthIDTextWatermarkingConfig, a dict, or None",
        )
    value.validate()


def check_compile_config(value: Any) -> None:
    """The ``compile_config`` field's check: a CompileConfig."""
    if not isinstance(value, CompileConfig):
        raise _bad("compile_config", value, "a CompileConfig (or a dict of its fields), or None")
