"""GenerationConfig: every field of transformers 4.56.2's ``GenerationConfig``.

``GenerationConfig`` holds the knobs of one ``generate`` call (length, strategy, logits
processing, outputs, special tokens, ...) with the reference's names and defaults, and
reads and writes ``generation_config.json`` files that transformers reads and writes too.
Its fields and their checks come from the field table (:mod:`genlab.config.fields`).

>>> cfg = GenerationConfig(do_sample=True, top_p=0.9, max_new_tokens=16)
>>> cfg.get_generation_mode().value
'sample'
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import json
import os
import warnings
from pathlib import Path
from typing import Any

import torch

from .fields import (
    _SPECS,
    _WARN_ONLY_RANGES,
    FIELDS,
    JSON_CHECKS,
    FieldSpec,
    _bad,
    _flat_ids,
    _is_int,
    _is_real,
    check_spec_value,
    normalize_sequence_bias,
)
from .files import GENERATION_CONFIG_NAME, read_json_dict, resolve_config_file
from .sampler_fields import SAMPLER_FIELDS, SAMPLING_ONLY_SAMPLER_FIELDS, check_sampler_fields
from .small import check_compile_config, check_watermarking, coerce_compile, coerce_watermarking

# The transformers release whose GenerationConfig this module mirrors; written into
# ``transformers_version`` of the JSON files genlab saves.
REFERENCE_TRANSFORMERS_VERSION = "4.56.2"

# Attributes that describe where a config came from rather than how to generate.
METADATA_FIELDS = (
    "_from_model_config",
    "_commit_hash",
    "_original_object_hash",
    "transformers_version",
)
# Arguments of generate() that people sometimes put into the config by mistake.
GENERATE_ONLY_ARGUMENTS = (
    "logits_processor",
    "stopping_criteria",
    "prefix_allowed_tokens_fn",
    "synced_gpus",
    "assistant_model",
    "streamer",
    "negative_prompt_ids",
    "negative_prompt_attention_mask",
    "use_model_defaults",
)
#: how validate()'s warning about inconsistent settings begins (a filter can match it)
INCONSISTENT = "These generation settings are inconsistent"
# Flags that only matter when return_dict_in_generate=True.
EXTRA_OUTPUT_FLAGS = ("output_attentions", "output_hidden_states", "output_scores", "output_logits")


class GenerationMode(str, enum.Enum):
    """The decoding strategy a config selects (the reference's mode names)."""

    CONTRASTIVE_SEARCH = "contrastive_search"
    GREEDY_SEARCH = "greedy_search"
    SAMPLE = "sample"
    ASSISTED_GENERATION = "assisted_generation"
    DOLA_GENERATION = "dola_generation"
    BEAM_SEARCH = "beam_search"
    BEAM_SAMPLE = "beam_sample"
    CONSTRAINED_BEAM_SEARCH = "constrained_beam_search"
    GROUP_BEAM_SEARCH = "group_beam_search"

    def __str__(self) -> str:
        return self.value

    @property
    def is_beam(self) -> bool:
        """Whether the rows of a run in this mode are beams (a returned sequence's tokens
        come from several rows), as in the four beam searches.

        >>> GenerationMode("beam_sample").is_beam, GenerationMode("sample").is_beam
        (True, False)
        """
        return self in (
            GenerationMode.BEAM_SEARCH,
            GenerationMode.BEAM_SAMPLE,
            GenerationMode.CONSTRAINED_BEAM_SEARCH,
            GenerationMode.GROUP_BEAM_SEARCH,
        )


#: the checks of the "json" kind fields: the plain-data ones and the two small configs
_CHECKS = {
    **JSON_CHECKS,
    "watermarking_config": check_watermarking,
    "compile_config": check_compile_config,
}

# --------------------------------------------------------------------------------------
# JSON conversion
# --------------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """Tensors -> lists, dtypes -> names, small configs -> dicts (recursively)."""
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, torch.dtype):
        return str(value).split(".")[-1]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _plain(value.to_dict() if hasattr(value, "to_dict") else dataclasses.asdict(value))
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    return value


def _string_keys(value: Any) -> Any:
    """JSON only has string keys: tuple keys become "(1, 2)", as the reference writes them."""
    if isinstance(value, dict):
        return {str(k): _string_keys(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_string_keys(v) for v in value]
    return value


def _model_config_dict(model_config: Any) -> dict[str, Any]:
    if isinstance(model_config, dict):
        return copy.deepcopy(model_config)
    if hasattr(model_config, "to_dict"):
        return model_config.to_dict()
    if dataclasses.is_dataclass(model_config):
        return dataclasses.asdict(model_config)
    raise ValueError(
        "`model_config` must be a dict, an object with to_dict() (e.g. a transformers "
        f"PretrainedConfig) or a dataclass, got {type(model_config).__name__}."
    )


def _decoder_sub_config(full: dict[str, Any]) -> dict[str, Any] | None:
    """The decoder's part of a composite model config, as the reference finds it."""
    found = [k for k in ("decoder", "generator", "text_config") if full.get(k) is not None]
    if len(found) > 1:
        raise ValueError(
            f"model config has several text configs {found}; pass the one to use directly."
        )
    if found:
        sub = full[found[0]]
        return _model_config_dict(sub) if not isinstance(sub, dict) else sub
    if full.get("is_encoder_decoder"):
        return {k: v for k, v in full.items() if not k.startswith("encoder")}
    return None


# --------------------------------------------------------------------------------------
# GenerationConfig
# --------------------------------------------------------------------------------------


class GenerationConfig:
    """Settings of one generation, field for field those of transformers 4.56.2.

    Unknown keyword arguments are kept as attributes (as the reference does), so model
    specific keys in a ``generation_config.json`` survive a read/write round trip.
    Construction validates the values (see :meth:`validate`).

    Example::

        >>> cfg = GenerationConfig(num_beams=4, num_return_sequences=2, max_new_tokens=8)
        >>> cfg.get_generation_mode()
        <GenerationMode.BEAM_SEARCH: 'beam_search'>
        >>> cfg.update(length_penalty=0.8, foo_bar=1)  # returns what it did not use
        {'foo_bar': 1}
    """

    extra_output_flags = EXTRA_OUTPUT_FLAGS
    #: the hash of a config as read from a file or a model config (set by the readers,
    #: as the reference keeps it; never serialised)
    _original_object_hash = None

    def __init__(self, **kwargs):
        from_model_config = kwargs.pop("_from_model_config", False)
        for name, spec in FIELDS.items():
            if name == "is_assistant":
                # like the reference: only set through the "extra attributes" below
                value = False
            else:
                value = kwargs.pop(name, copy.deepcopy(spec.default))
            setattr(self, name, value)
        self.watermarking_config = coerce_watermarking(self.watermarking_config)
        self.compile_config = coerce_compile(self.compile_config)
        self._from_model_config = from_model_config
        self._commit_hash = kwargs.pop("_commit_hash", None)
        self.transformers_version = kwargs.pop(
            "transformers_version", REFERENCE_TRANSFORMERS_VERSION
        )
        if not from_model_config:
            # a model's config.json holds many unrelated keys: only keep extras otherwise
            for key, value in kwargs.items():
                setattr(self, key, value)
        self.validate()

    # -- metadata ----------------------------------------------------------------------

    @staticmethod
    def field_specs() -> dict[str, FieldSpec]:
        """The :data:`FIELDS` mapping (name -> FieldSpec)."""
        return FIELDS

    # -- comparison and display -------------------------------------------------------

    def _comparable_json(self) -> str:
        data = self.to_dict()
        for key in METADATA_FIELDS:
            data.pop(key, None)
        return json.dumps(_string_keys(data), indent=2, sort_keys=True, default=repr)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GenerationConfig):
            return NotImplemented
        return self._comparable_json() == other._comparable_json()

    def __hash__(self) -> int:
        return hash(self._comparable_json())

    def __repr__(self) -> str:
        diff = self.to_diff_dict()
        for key in METADATA_FIELDS:
            diff.pop(key, None)
        args = ", ".join(f"{k}={v!r}" for k, v in diff.items())
        return f"{type(self).__name__}({args})"

    def copy(self) -> GenerationConfig:
        """An independent deep copy."""
        return copy.deepcopy(self)

    # -- mode ------------------------------------------------------------------------

    def get_generation_mode(self, assistant_model: Any = None) -> GenerationMode:
        """The decoding strategy these settings select, decided as the reference does.

        Example::

            >>> GenerationConfig(do_sample=True, num_beams=3).get_generation_mode().value
            'beam_sample'

        assistant_model: an assistant (draft) model, which selects assisted generation.
        """
        if self.constraints is not None or self.force_words_ids is not None:
            mode = GenerationMode.CONSTRAINED_BEAM_SEARCH
        elif self.num_beams == 1:
            if self.do_sample is False:
                contrastive = (
                    self.top_k is not None
                    and self.top_k > 1
                    and self.penalty_alpha is not None
                    and self.penalty_alpha > 0
                )
                mode = (
                    GenerationMode.CONTRASTIVE_SEARCH
                    if contrastive
                    else GenerationMode.GREEDY_SEARCH
                )
            else:
                mode = GenerationMode.SAMPLE
        elif self.num_beam_groups > 1:
            mode = GenerationMode.GROUP_BEAM_SEARCH
        elif self.do_sample is True:
            mode = GenerationMode.BEAM_SAMPLE
        else:
            mode = GenerationMode.BEAM_SEARCH

        simple = (GenerationMode.GREEDY_SEARCH, GenerationMode.SAMPLE)
        assisted = (
            assistant_model is not None
            or self.prompt_lookup_num_tokens is not None
            or self.assistant_early_exit is not None
        )
        if assisted:
            if mode in simple:
                mode = GenerationMode.ASSISTED_GENERATION
            else:
                warnings.warn(
                    f"assisted generation only extends greedy search and sampling; these settings "
                    f"select {mode.value}, so the assistant settings are ignored.",
                    UserWarning,
                    stacklevel=2,
                )
        if self.dola_layers is not None:
            if mode in simple:
                mode = GenerationMode.DOLA_GENERATION
            else:
                warnings.warn(
                    f"DoLa only extends greedy search and sampling; these settings select "
                    f"{mode.value}, so `dola_layers` is ignored.",
                    UserWarning,
                    stacklevel=2,
                )
        return mode

    # -- validation ------------------------------------------------------------------

    def validate(self, strict: bool = False) -> None:
        """Check every field and their combinations.

        Raises ValueError (naming the field, the value and the allowed values) for a value
        outside its domain or an impossible combination. Combinations that the reference
        only warns about (e.g. ``temperature`` set while ``do_sample=False``) give one
        UserWarning, or a ValueError when ``strict=True``.

        Example::

            >>> GenerationConfig(top_p=1.5)
            Traceback (most recent call last):
            ...
            ValueError: `top_p` must be a number in [0, 1], or None, got 1.5. ...
        """
        self.watermarking_config = coerce_watermarking(self.watermarking_config)
        self.compile_config = coerce_compile(self.compile_config)
        bias = getattr(self, "sequence_bias", None)
        if isinstance(bias, dict) and any(isinstance(k, str) for k in bias):
            # keys as a JSON file holds them ("(10454,)"): read back as tuples of ids, the
            # form generate() takes (the reference keeps the strings and then refuses them)
            self.sequence_bias = normalize_sequence_bias(bias)
        minor: dict[str, str] = {}

        # 1. each field on its own, from its spec
        for spec in _SPECS:
            value = getattr(self, spec.name, spec.default)
            check_range = spec.only_when is None or bool(getattr(self, spec.only_when, False))
            if spec.name in _WARN_ONLY_RANGES and not strict:
                check_spec_value(spec, value, check_range=False, checks=_CHECKS)
                if _is_real(value) and not spec.in_range(value):
                    minor[spec.name] = (
                        f"{value!r} is outside {spec.range_text()}; batched generation with "
                        f"padding will fail. Set `{spec.name}` to a real token id."
                    )
                continue
            check_spec_value(spec, value, check_range=check_range, checks=_CHECKS)
        # the samplers beyond the reference: only those set are attributes
        check_sampler_fields(self)

        # 2. combinations
        self._check_combinations(minor)

        # 3. arguments of generate() stored in the config by mistake
        for arg in GENERATE_ONLY_ARGUMENTS:
            if arg in self.__dict__:
                raise ValueError(
                    f"`{arg}` is not a GenerationConfig field; pass it to generate() directly."
                )

        if minor:
            details = "\n".join(f"- `{k}`: {v}" for k, v in minor.items())
            if strict:
                raise ValueError("GenerationConfig is invalid:\n" + details)
            warnings.warn(
                f"{INCONSISTENT} and may be ignored: {list(minor)}.\n" + details,
                UserWarning,
                stacklevel=3,  # the caller of __init__/update/validate
            )

    def _check_combinations(self, minor: dict[str, str]) -> None:
        """Cross-field rules: hard errors raise, soft ones are collected in ``minor``."""
        if self.do_sample is False:
            unused = "is only used when sampling; set do_sample=True or reset it to {default!r}."
            for name, default in (
                ("temperature", 1.0),
                ("top_p", 1.0),
                ("typical_p", 1.0),
                ("top_k", 50),
                ("epsilon_cutoff", 0.0),
                ("eta_cutoff", 0.0),
                ("min_p", None),
            ):
                if name == "top_k" and self.penalty_alpha:  # contrastive search uses top_k
                    continue
                value = getattr(self, name)
                if value is not None and value != default:
                    minor[name] = f"{value!r} " + unused.format(default=default)
            # genlab's samplers that only run when sampling (attributes only once set)
            for name, default in SAMPLING_ONLY_SAMPLER_FIELDS.items():
                value = getattr(self, name, default)
                if value != default:
                    minor[name] = f"{value!r} " + unused.format(default=default)

        if self.num_beams == 1:
            beam_only = "is only used by beam search; set num_beams > 1 or reset it to {default!r}."
            for name, default in (
                ("early_stopping", False),
                ("num_beam_groups", 1),
                ("diversity_penalty", 0.0),
                ("length_penalty", 1.0),
                ("constraints", None),
            ):
                value = getattr(self, name)
                if value is not None and value != default:
                    minor[name] = f"{value!r} " + beam_only.format(default=default)
        elif self.constraints is not None or self.force_words_ids is not None:
            if self.do_sample is True:
                raise ValueError(
                    "`do_sample`=True cannot be combined with `constraints`/`force_words_ids` "
                    "(constrained beam search is deterministic); set do_sample=False or remove "
                    "the constraints."
                )
            if self.num_beam_groups is not None and self.num_beam_groups != 1:
                raise ValueError(
                    f"`num_beam_groups`={self.num_beam_groups} cannot be combined with "
                    "`constraints`/`force_words_ids`; set num_beam_groups=1 or remove the "
                    "constraints."
                )
        elif self.diversity_penalty != 0.0 or self.num_beam_groups != 1:
            if self.do_sample is True:
                raise ValueError(
                    f"`do_sample`=True cannot be combined with group beam search "
                    f"(num_beam_groups={self.num_beam_groups}, diversity_penalty="
                    f"{self.diversity_penalty}); set do_sample=False or num_beam_groups=1."
                )
            if self.num_beams % self.num_beam_groups != 0:
                raise ValueError(
                    f"`num_beam_groups`={self.num_beam_groups} must divide `num_beams`="
                    f"{self.num_beams}; choose num_beams as a multiple of num_beam_groups."
                )
            if not self.diversity_penalty:
                raise ValueError(
                    f"`diversity_penalty` must be > 0 for group beam search (num_beam_groups="
                    f"{self.num_beam_groups}), got {self.diversity_penalty!r}; otherwise the "
                    "groups are identical."
                )

        if self.num_return_sequences != 1:
            if self.num_beams == 1 and self.do_sample is False:
                raise ValueError(
                    f"`num_return_sequences`={self.num_return_sequences} needs sampling or beam "
                    "search (greedy search returns one sequence); set do_sample=True or "
                    "num_beams >= num_return_sequences."
                )
            if self.num_beams > 1 and self.num_return_sequences > self.num_beams:
                raise ValueError(
                    f"`num_return_sequences`={self.num_return_sequences} must be <= `num_beams`="
                    f"{self.num_beams} for beam search; raise num_beams or lower "
                    "num_return_sequences."
                )

        if self.use_cache is False:
            for name in ("cache_implementation", "cache_config", "return_legacy_cache"):
                if getattr(self, name) is not None:
                    minor[name] = "has no effect because use_cache=False."

        if self.return_dict_in_generate is not True:
            for name in EXTRA_OUTPUT_FLAGS:
                if getattr(self, name) is True:
                    minor[name] = "is ignored unless return_dict_in_generate=True."

    def check_token_ids(self, vocab_size: int) -> None:
        """Raise ValueError if any token-id field holds an id outside [0, vocab_size).

        Example::

            >>> GenerationConfig(eos_token_id=[2, 70]).check_token_ids(64)
            Traceback (most recent call last):
            ...
            ValueError: `eos_token_id` holds token id 70, outside the vocabulary [0, 64). ...
        """
        if not _is_int(vocab_size) or vocab_size < 1:
            raise _bad("vocab_size", vocab_size, "an int >= 1")
        for spec in _SPECS:
            value = getattr(self, spec.name, None)
            if not spec.token_ids or value is None:
                continue
            if spec.kind == "mapping":
                ids = [i for key in normalize_sequence_bias(value) for i in key]
            else:
                ids = _flat_ids(value)
            for token_id in ids:
                if not (_is_int(token_id) and 0 <= token_id < vocab_size):
                    raise ValueError(
                        f"`{spec.name}` holds token id {token_id!r}, outside the vocabulary "
                        f"[0, {vocab_size}). Use ids of this model's tokenizer."
                    )

    # -- update ----------------------------------------------------------------------

    def update(self, **kwargs) -> dict[str, Any]:
        """Set the attributes named in ``kwargs`` that exist; validate; return the rest.

        Example::

            >>> GenerationConfig().update(max_new_tokens=5, not_a_field=1)
            {'not_a_field': 1}
        """
        used = [key for key in kwargs if key in self.__dict__ or key in SAMPLER_FIELDS]
        for key in used:
            setattr(self, key, kwargs[key])
        self.validate()
        return {k: v for k, v in kwargs.items() if k not in used}

    # -- dicts and JSON --------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """All attributes as plain data (watermark config as a dict; no compile_config)."""
        out = {}
        for key, value in self.__dict__.items():
            if key in ("_commit_hash", "_original_object_hash", "compile_config"):
                continue
            out[key] = _plain(copy.deepcopy(value))
        out["transformers_version"] = REFERENCE_TRANSFORMERS_VERSION
        return out

    def to_diff_dict(self) -> dict[str, Any]:
        """Only the attributes that differ from ``GenerationConfig()`` (plus the version)."""
        defaults = _default_dict()
        return {
            k: v
            for k, v in self.to_dict().items()
            if k not in defaults or k == "transformers_version" or v != defaults[k]
        }

    def to_json_string(self, use_diff: bool = True, ignore_metadata: bool = False) -> str:
        """The config as JSON text (sorted keys, 2-space indent, as the reference writes).

        use_diff: write only the fields that differ from the defaults;
        ignore_metadata: leave out the transformers version field.
        """
        data = self.to_diff_dict() if use_diff else self.to_dict()
        if ignore_metadata:
            for key in METADATA_FIELDS:
                data.pop(key, None)
        try:
            return json.dumps(_string_keys(data), indent=2, sort_keys=True) + "\n"
        except TypeError as err:
            raise ValueError(
                f"this GenerationConfig holds a value JSON cannot store ({err}); `constraints` "
                "objects cannot be saved: use force_words_ids instead, or set constraints=None."
            ) from None

    def to_json_file(self, json_file_path: str | os.PathLike, use_diff: bool = True) -> None:
        """Write :meth:`to_json_string` to a file.

        json_file_path: where to write; use_diff: only the fields that differ from the defaults.
        """
        text = self.to_json_string(use_diff=use_diff)
        with open(json_file_path, "w", encoding="utf-8") as fh:
            fh.write(text)

    @classmethod
    def from_dict(cls, config_dict: dict[str, Any], **kwargs):
        """Build from a dict; ``kwargs`` override it.

        With ``return_unused_kwargs=True`` returns ``(config, unused_kwargs)``.

        config_dict: field name -> value; unknown names are kept as extra attributes.
        """
        return_unused = kwargs.pop("return_unused_kwargs", False)
        kwargs.pop("_from_auto", None)
        kwargs.pop("_from_pipeline", None)
        if "_commit_hash" in kwargs and "_commit_hash" in config_dict:
            kwargs["_commit_hash"] = config_dict["_commit_hash"]
        config = cls(**{**config_dict, **kwargs})
        unused = config.update(**kwargs)
        return (config, unused) if return_unused else config

    @classmethod
    def from_any(cls, value: Any) -> GenerationConfig:
        """A genlab config from None, a genlab config (copied), a dict, or any object with
        ``to_dict()`` such as transformers' GenerationConfig.

        value: None, a genlab or transformers GenerationConfig, a dict, or an object with
        ``to_dict()``.
        """
        if value is None:
            return cls()
        if isinstance(value, GenerationConfig):
            return value.copy()
        if isinstance(value, dict):
            return cls.from_dict(value)
        if hasattr(value, "to_dict"):
            data = value.to_dict()
            compile_config = getattr(value, "compile_config", None)
            if compile_config is not None:
                data["compile_config"] = compile_config
            return cls.from_dict(data)
        raise ValueError(
            "`generation_config` must be a GenerationConfig, a dict or None, got "
            f"{type(value).__name__}."
        )

    # -- files and the Hub -----------------------------------------------------------

    def save_pretrained(
        self,
        save_directory: str | os.PathLike,
        config_file_name: str = GENERATION_CONFIG_NAME,
    ) -> Path:
        """Write ``<save_directory>/<config_file_name>`` (diff JSON); return its path.

        Validates strictly first, so an inconsistent config is never saved.
        """
        try:
            self.validate(strict=True)
        except ValueError as err:
            raise ValueError(
                f"{err}\nFix these settings before saving the configuration."
            ) from None
        folder = Path(save_directory)
        if folder.is_file():
            raise ValueError(f"`save_directory` must be a folder, but {folder} is a file.")
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / config_file_name
        self.to_json_file(path, use_diff=True)
        return path

    @classmethod
    def from_pretrained(
        cls,
        pretrained_model_name: str | os.PathLike,
        config_file_name: str = GENERATION_CONFIG_NAME,
        return_unused_kwargs: bool = False,
        *,
        cache_dir: str | os.PathLike | None = None,
        force_download: bool = False,
        local_files_only: bool = False,
        token: str | bool | None = None,
        revision: str | None = None,
        subfolder: str = "",
        **kwargs,
    ):
        """Load from a folder, a JSON file, or a Hub repo id (through huggingface_hub,
        which honours HF_HUB_OFFLINE and the local cache). ``kwargs`` override the loaded
        values; with ``return_unused_kwargs=True`` returns ``(config, unused_kwargs)``.

        Example::

            (The lines marked +SKIP are not run as a test: it writes files into a folder
            (``tmp_path``); tests/test_config.py does it.)

            >>> cfg = GenerationConfig(max_new_tokens=7)
            >>> path = cfg.save_pretrained(tmp_path)           # doctest: +SKIP
            >>> GenerationConfig.from_pretrained(tmp_path).max_new_tokens  # doctest: +SKIP
            7

        Args:
            pretrained_model_name: a folder, a JSON file or a Hub repo id;
            config_file_name: the file name inside the folder or repo;
            cache_dir: the Hub cache to use; force_download: fetch again even if cached;
            local_files_only: never go to the network;
            token: a Hub token (or True for the saved one);
            revision: a branch, tag or commit of the repo; subfolder: a folder inside the repo.
        """
        path, commit_hash = resolve_config_file(
            pretrained_model_name,
            config_file_name,
            cache_dir=cache_dir,
            force_download=force_download,
            local_files_only=local_files_only,
            token=token,
            revision=revision,
            subfolder=subfolder,
        )
        config_dict = read_json_dict(path)
        config_dict["_commit_hash"] = commit_hash
        kwargs.pop("_commit_hash", None)
        result = cls.from_dict(config_dict, return_unused_kwargs=True, **kwargs)
        config, unused = result
        config._original_object_hash = hash(config)
        return (config, unused) if return_unused_kwargs else config

    @classmethod
    def from_model_config(cls, model_config: Any) -> GenerationConfig:
        """Generation settings found in a model config (a dict, a transformers
        PretrainedConfig, or a dataclass such as ``ModelInfo``), as the reference reads them.

        Example::

            >>> cfg = GenerationConfig.from_model_config({"bos_token_id": 1, "eos_token_id": 2})
            >>> cfg.eos_token_id
            2

        model_config: a dict, a transformers PretrainedConfig or a dataclass such as ModelInfo.
        """
        full = _model_config_dict(model_config)
        given = {k: v for k, v in full.items() if v is not None and k != "_from_model_config"}
        config = cls.from_dict(given, return_unused_kwargs=False, _from_model_config=True)

        decoder = _decoder_sub_config(full)
        if decoder is not None:
            defaults = cls()
            for attr in config.to_dict():
                if attr in decoder and getattr(config, attr) == getattr(defaults, attr, None):
                    setattr(config, attr, decoder[attr])

        if config.return_dict_in_generate is False and any(
            getattr(config, flag, False) for flag in EXTRA_OUTPUT_FLAGS
        ):
            config.return_dict_in_generate = True
        config._original_object_hash = hash(config)
        return config


def field_table() -> str:
    """Every field of :class:`GenerationConfig` as a table (markdown, readable as text):
    name, group, default, allowed values and what it does; the reference's fields first,
    then genlab's samplers (attributes only once set). It ends the class's docstring, so
    ``help(GenerationConfig)`` and the API reference list them.

    >>> print(field_table().splitlines()[4][:53])
    | `max_length` | length | 20 | an int >= 1, or None |
    >>> "| `mirostat_mode` | samplers | 0 | one of [0, 1, 2] |" in field_table()
    True
    """
    lines = [
        "Fields (the reference's, then genlab's samplers beyond it, off by default):",
        "",
        "| field | group | default | allowed | what it does |",
        "|---|---|---|---|---|",
    ]
    specs = [*FIELDS.values(), *SAMPLER_FIELDS.values()]
    for spec in specs:
        group = "samplers" if spec.name in SAMPLER_FIELDS else spec.group
        cells = (f"`{spec.name}`", group, repr(spec.default), spec.describe(), spec.help)
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


GenerationConfig.__doc__ = f"{GenerationConfig.__doc__}\n{field_table()}\n"

_DEFAULT_DICT: dict[str, Any] | None = None


def _default_dict() -> dict[str, Any]:
    global _DEFAULT_DICT
    if _DEFAULT_DICT is None:
        _DEFAULT_DICT = GenerationConfig().to_dict()
    return _DEFAULT_DICT
