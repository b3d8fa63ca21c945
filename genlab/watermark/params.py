"""The watermarks' shared parameters: settings read from any config, checked once.

:class:`GreenlistParams` and :class:`SynthIDParams` are frozen, checked copies of the
fields of ``WatermarkingConfig`` and ``SynthIDTextWatermarkingConfig``. Their fields,
defaults and allowed values are the field table's (:data:`genlab.config.WATERMARK_FIELDS`,
:data:`genlab.config.SYNTHID_FIELDS`), checked by the same function ``validate()`` uses,
so a config that validates builds a processor and one that does not is refused by both.

>>> greenlist_params({"bias": 1.5}).bias
1.5
>>> synthid_params({"ngram_len": 3, "keys": [1, 2]}).keys
(1, 2)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import torch

from ..checks import check_int
from ..config.fields import SYNTHID_FIELDS, WATERMARK_FIELDS, check_fields, int_list
from ..config.small import is_synthid_fields
from ..ids import as_ids

DEFAULT_HASHING_KEY = WATERMARK_FIELDS["hashing_key"].default  # the millionth prime
SELFHASH_TABLE_SIZE = 1_000_003  # size of the fixed permutation selfhash seeds look up
SELFHASH_CANDIDATES = 40  # top candidates selfhash tests for membership of their own list
SYNTHID_LCG_MULTIPLIER = 6364136223846793005  # newlib/musl linear congruential constants
SYNTHID_LCG_INCREMENT = 1
SYNTHID_MAX_TABLE_SIZE = SYNTHID_FIELDS["sampling_table_size"].max

_WM = WATERMARK_FIELDS
_SID = SYNTHID_FIELDS
_OWNER = "watermarking_config"


@dataclass(frozen=True)
class GreenlistParams:
    """Checked settings of the green-list watermark (the ``WatermarkingConfig`` fields).

    Defaults and allowed values: :data:`genlab.config.WATERMARK_FIELDS`.

    >>> GreenlistParams(seeding_scheme="selfhash", context_width=2).greenlist_ratio
    0.25
    """

    greenlist_ratio: float = _WM["greenlist_ratio"].default
    bias: float = _WM["bias"].default
    hashing_key: int = _WM["hashing_key"].default
    seeding_scheme: str = _WM["seeding_scheme"].default
    context_width: int = _WM["context_width"].default

    def __post_init__(self):
        check_fields(WATERMARK_FIELDS, self, _OWNER)


@dataclass(frozen=True)
class SynthIDParams:
    """Checked settings of SynthID text (the ``SynthIDTextWatermarkingConfig`` fields).

    ``keys`` may be any sequence of ints (list, tuple, numpy array, tensor); it is kept as
    a tuple of Python ints. Defaults and allowed values: :data:`genlab.config.SYNTHID_FIELDS`.

    >>> SynthIDParams(ngram_len=3, keys=(7, 11)).depth
    2
    """

    ngram_len: int
    keys: tuple[int, ...]
    context_history_size: int = _SID["context_history_size"].default
    sampling_table_seed: int = _SID["sampling_table_seed"].default
    sampling_table_size: int = _SID["sampling_table_size"].default
    skip_first_ngram_calls: bool = _SID["skip_first_ngram_calls"].default
    debug_mode: bool = _SID["debug_mode"].default

    def __post_init__(self):
        check_fields(SYNTHID_FIELDS, self, _OWNER)
        object.__setattr__(self, "keys", tuple(int_list(self.keys)))

    @property
    def depth(self) -> int:
        """Number of tournament layers (one per key)."""
        return len(self.keys)


def _config_fields(config, names: tuple[str, ...], kind: str) -> dict[str, Any]:
    """The fields ``names`` that ``config`` (object or mapping) sets."""
    if isinstance(config, Mapping):
        unknown = sorted(set(config) - set(names))
        if unknown:
            raise ValueError(f"unknown {kind} field(s) {unknown}; allowed fields are {list(names)}")
        return dict(config)
    return {name: getattr(config, name) for name in names if hasattr(config, name)}


def is_synthid_config(config) -> bool:
    """True when ``config`` describes SynthID text rather than the green-list watermark."""
    if isinstance(config, SynthIDParams):
        return True
    if isinstance(config, Mapping):
        return is_synthid_fields(config)
    return hasattr(config, "ngram_len") or type(config).__name__.startswith("SynthID")


def greenlist_params(config) -> GreenlistParams:
    """Read a green-list watermark config into :class:`GreenlistParams` (checked).

    ``config`` may be a genlab or transformers ``WatermarkingConfig``, a plain dict with the
    same field names, a :class:`WatermarkLogitsProcessor` or :class:`WatermarkDetector`, or
    ``GreenlistParams`` itself.

    >>> greenlist_params({"bias": 1.5}).bias
    1.5
    """
    if isinstance(config, GreenlistParams):
        return config
    if isinstance(getattr(config, "params", None), GreenlistParams):  # processor, detector
        return config.params
    if config is None or is_synthid_config(config):
        raise ValueError(
            "watermarking_config must be a green-list WatermarkingConfig (or a dict of its "
            f"fields: {', '.join(WATERMARK_FIELDS)}), got {config!r}"
        )
    names = tuple(f.name for f in fields(GreenlistParams))
    return GreenlistParams(**_config_fields(config, names, "WatermarkingConfig"))


def synthid_params(config) -> SynthIDParams:
    """Read a SynthID text config (genlab, transformers, dict, processor) into params.

    >>> synthid_params({"ngram_len": 3, "keys": [1, 2]}).keys
    (1, 2)
    """
    if isinstance(config, SynthIDParams):
        return config
    if isinstance(getattr(config, "params", None), SynthIDParams):  # the processor
        return config.params
    names = tuple(f.name for f in fields(SynthIDParams))
    values = _config_fields(config, names, "SynthIDTextWatermarkingConfig")
    missing = [n for n in ("ngram_len", "keys") if n not in values]
    if missing:
        raise ValueError(f"a SynthIDTextWatermarkingConfig needs {missing}; got {config!r}")
    return SynthIDParams(**values)


def check_vocab_size(vocab_size) -> int:
    """``vocab_size`` checked to be an int >= 1 (the model's logits width)."""
    return check_int("vocab_size", vocab_size, minimum=1)


def device_key(device) -> str:
    """A device as a hashable cache key (``"cpu"``, ``"cuda:0"``)."""
    return str(torch.device(device))


def as_token_ids(ids, name: str, ndim: int) -> torch.LongTensor:
    """A LongTensor of token ids with ``ndim`` dims (lists and 1-D rows are accepted);
    float or bool ids are refused."""
    if not isinstance(ids, torch.Tensor):
        ids = torch.as_tensor(ids, dtype=torch.long)
    if ids.dtype.is_floating_point or ids.dtype == torch.bool:
        raise ValueError(f"{name} must hold integer token ids, got dtype {ids.dtype}")
    return as_ids(ids, name, ndim=ndim).long()


def check_ids_in_vocab(ids: torch.Tensor, vocab_size: int, name: str) -> None:
    """Raise a ValueError naming ``name`` when ``ids`` hold an id outside the vocabulary."""
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
        bad = int(ids.max()) if int(ids.max()) >= vocab_size else int(ids.min())
        raise ValueError(
            f"{name} holds token id {bad}, outside the vocabulary [0, {vocab_size}): the "
            f"vocab_size must be the one of the model that produced the text"
        )
