"""Generation settings: every field of transformers 4.56.2's ``GenerationConfig``.

``GenerationConfig`` holds the knobs of one ``generate`` call (length, strategy, logits
processing, outputs, special tokens, ...) with the reference's names and defaults, and
reads and writes ``generation_config.json`` files that transformers reads and writes too.

Each field is also described by a :class:`FieldSpec` in :data:`FIELDS` (group, kind,
default, range, choices, one line of help). The widget panel is generated from these
specs, and :meth:`GenerationConfig.validate` checks values against the very same specs,
so the range a slider offers is the range validation enforces.

Example::

    >>> cfg = GenerationConfig(do_sample=True, top_p=0.9, max_new_tokens=16)
    >>> cfg.get_generation_mode().value
    'sample'
    >>> cfg
    GenerationConfig(max_new_tokens=16, do_sample=True, top_p=0.9)
    >>> FIELDS["top_p"].range_text()
    '(0, 1]'
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import json
import numbers
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

# The transformers release whose GenerationConfig this module mirrors; written into
# ``transformers_version`` of the JSON files genlab saves.
REFERENCE_TRANSFORMERS_VERSION = "4.56.2"
GENERATION_CONFIG_NAME = "generation_config.json"

STATIC_CACHE_IMPLEMENTATIONS = ("static", "offloaded_static")
DEPRECATED_STATIC_CACHE_IMPLEMENTATIONS = (
    "sliding_window",
    "hybrid",
    "hybrid_chunked",
    "offloaded_hybrid",
    "offloaded_hybrid_chunked",
)
DYNAMIC_CACHE_IMPLEMENTATIONS = ("dynamic", "dynamic_full", "offloaded", "quantized")
ALL_CACHE_IMPLEMENTATIONS = (
    STATIC_CACHE_IMPLEMENTATIONS
    + DEPRECATED_STATIC_CACHE_IMPLEMENTATIONS
    + DYNAMIC_CACHE_IMPLEMENTATIONS
)

GROUPS = (
    "length",
    "strategy",
    "cache",
    "logits",
    "outputs",
    "special_tokens",
    "encoder_decoder",
    "assisted",
    "performance",
    "watermark",
)
KINDS = (
    "int",
    "float",
    "bool",
    "choice",
    "str",
    "token_ids",
    "token_id_lists",
    "token_id_or_ids",
    "mapping",
    "json",
    "str_list",
)

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


# --------------------------------------------------------------------------------------
# Field metadata
# --------------------------------------------------------------------------------------


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _fmt_number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(x)


@dataclass(frozen=True)
class FieldSpec:
    """What one config field holds, for validation and for generated widgets.

    kind is one of :data:`KINDS`; group one of :data:`GROUPS`. ``min``/``max`` bound
    numbers (exclusive when ``min_exclusive``/``max_exclusive``); ``nullable`` says None is
    allowed; ``token_ids`` marks fields holding vocabulary ids (see
    ``GenerationConfig.check_token_ids``); ``only_when`` names a boolean field that must be
    True for the range to be enforced (``temperature`` only matters when sampling).

    Example::

        >>> FieldSpec("top_k", "logits", "int", 50, min=0).range_text()
        '>= 0'
    """

    name: str
    group: str
    kind: str
    default: Any
    min: float | None = None
    max: float | None = None
    choices: tuple | None = None
    help: str = ""
    step: float | None = None
    nullable: bool = False
    min_exclusive: bool = False
    max_exclusive: bool = False
    token_ids: bool = False
    only_when: str | None = None

    def range_text(self) -> str:
        """The allowed numeric range as text: '(0, 1]', '>= 1', '[0, 1)'... ('' if none)."""
        lo, hi = self.min, self.max
        if lo is not None and hi is not None:
            left = "(" if self.min_exclusive else "["
            right = ")" if self.max_exclusive else "]"
            return f"{left}{_fmt_number(lo)}, {_fmt_number(hi)}{right}"
        if lo is not None:
            return f"{'>' if self.min_exclusive else '>='} {_fmt_number(lo)}"
        if hi is not None:
            return f"{'<' if self.max_exclusive else '<='} {_fmt_number(hi)}"
        return ""

    def in_range(self, value: float) -> bool:
        """Whether a number lies inside [min, max] (honouring exclusive bounds)."""
        if self.min is not None:
            if value < self.min or (self.min_exclusive and value == self.min):
                return False
        if self.max is not None:
            if value > self.max or (self.max_exclusive and value == self.max):
                return False
        return True

    def describe(self) -> str:
        """What values the field accepts, in words (used in error messages)."""
        base = {
            "int": "an int",
            "float": "a number",
            "bool": "True or False",
            "choice": f"one of {list(self.choices or ())}",
            "str": "a string",
            "token_ids": "a list of token ids (ints >= 0)",
            "token_id_lists": "a non-empty list of non-empty lists of token ids (ints >= 0)",
            "token_id_or_ids": "a token id (int >= 0) or a non-empty list of token ids",
            "mapping": "a dict {tuple of token ids: float bias} or a list of [ids, bias] pairs",
            "json": "a JSON-like value",
            "str_list": "a non-empty string or a non-empty list of non-empty strings",
        }[self.kind]
        rng = self.range_text()
        if rng:
            text = f"{base} in {rng}" if rng[0] in "([" else f"{base} {rng}"
        else:
            text = base
        if self.nullable:
            text += ", or None"
        return text


def _f(name, group, kind, default, help, **kw) -> FieldSpec:
    return FieldSpec(name=name, group=group, kind=kind, default=default, help=help, **kw)


# In the order the reference's __init__ assigns them (to_dict keeps this order).
# fmt: off
_SPECS: list[FieldSpec] = [
    _f("max_length", "length", "int", 20, min=1, step=1, nullable=True,
       help="Total length (prompt + new tokens); max_new_tokens wins if it is set."),
    _f("max_new_tokens", "length", "int", None, min=1, step=1, nullable=True,
       help="How many new tokens to generate at most."),
    _f("min_length", "length", "int", 0, min=0, step=1, nullable=True,
       help="Minimum total length (prompt included); EOS is blocked before it."),
    _f("min_new_tokens", "length", "int", None, min=0, step=1, nullable=True,
       help="Minimum number of new tokens; EOS is blocked before."),
    _f("early_stopping", "length", "choice", False, choices=(False, True, "never"),
       help="Beam search stops at num_beams hypotheses (True), by heuristic (False), or never."),
    _f("max_time", "length", "float", None, min=0, min_exclusive=True, step=0.5, nullable=True,
       help="Stop after this many seconds (the current step still finishes)."),
    _f("stop_strings", "length", "str_list", None, nullable=True,
       help="Stop when the text ends with one of these strings (needs the tokenizer)."),
    _f("do_sample", "strategy", "bool", False,
       help="Sample from the distribution instead of taking the most likely token."),
    _f("num_beams", "strategy", "int", 1, min=1, step=1,
       help="Number of beams; 1 means no beam search."),
    _f("num_beam_groups", "strategy", "int", 1, min=1, step=1,
       help="Diverse beam search: split the beams into this many groups."),
    _f("use_cache", "cache", "bool", True,
       help="Reuse past keys/values instead of recomputing the whole sequence."),
    _f("cache_implementation", "cache", "choice", None, choices=ALL_CACHE_IMPLEMENTATIONS,
       nullable=True, help="KV-cache class for transformers models (None: the model's own)."),
    _f("cache_config", "cache", "json", None, nullable=True,
       help="Arguments of the KV-cache class (a dict)."),
    _f("return_legacy_cache", "cache", "bool", None, nullable=True,
       help="Return past_key_values in the legacy tuple format."),
    _f("prefill_chunk_size", "cache", "int", None, min=1, step=1, nullable=True,
       help="Run the prompt through the model in chunks of this many tokens."),
    _f("temperature", "logits", "float", 1.0, min=0, min_exclusive=True, step=0.05,
       nullable=True, only_when="do_sample",
       help="Divide the logits by this before sampling: < 1 sharpens, > 1 flattens."),
    _f("top_k", "logits", "int", 50, min=0, step=1, nullable=True,
       help="Sample only among the k most likely tokens; 0 turns it off."),
    _f("top_p", "logits", "float", 1.0, min=0, max=1, min_exclusive=True, step=0.01,
       nullable=True, help="Keep the fewest top tokens whose probabilities add up to top_p."),
    _f("min_p", "logits", "float", None, min=0, max=1, step=0.01, nullable=True,
       help="Drop tokens less likely than min_p times the top token's probability."),
    _f("typical_p", "logits", "float", 1.0, min=0, max=1, min_exclusive=True, step=0.01,
       nullable=True, help="Locally typical sampling: probability mass kept; 1 turns it off."),
    _f("epsilon_cutoff", "logits", "float", 0.0, min=0, max=1, max_exclusive=True,
       step=0.0001, nullable=True, help="Drop tokens with probability below this; 0 turns it off."),
    _f("eta_cutoff", "logits", "float", 0.0, min=0, max=1, max_exclusive=True, step=0.0001,
       nullable=True, help="Eta sampling: entropy-dependent cutoff; 0 turns it off."),
    _f("diversity_penalty", "logits", "float", 0.0, min=0, step=0.1, nullable=True,
       help="Group beam search: penalty on tokens other groups chose at this step."),
    _f("repetition_penalty", "logits", "float", 1.0, min=0, min_exclusive=True, step=0.05,
       nullable=True, help="Penalise tokens already present (prompt too); 1 turns it off."),
    _f("encoder_repetition_penalty", "logits", "float", 1.0, min=0, min_exclusive=True,
       step=0.05, nullable=True, help="Favour tokens of the encoder input; 1 turns it off."),
    # bounded (the reference is not): length ** 10**30 hangs on Python ints and
    # length ** 200 overflows float64; None fails in the reference's scoring
    _f("length_penalty", "logits", "float", 1.0, min=-50, max=50, step=0.1,
       help="Beam scores are divided by generated_length ** length_penalty."),
    _f("no_repeat_ngram_size", "logits", "int", 0, min=0, step=1, nullable=True,
       help="Forbid repeating any n-gram of this size; 0 turns it off."),
    _f("bad_words_ids", "logits", "token_id_lists", None, nullable=True, token_ids=True,
       help="Token sequences that must never be generated."),
    _f("force_words_ids", "logits", "json", None, nullable=True, token_ids=True,
       help="Token sequences that must appear (constrained beam); nest lists for alternatives."),
    _f("renormalize_logits", "logits", "bool", False,
       help="Log-softmax the scores again after all processors."),
    _f("constraints", "logits", "json", None, nullable=True,
       help="Constraint objects for constrained beam search."),
    _f("forced_bos_token_id", "logits", "int", None, min=0, step=1, nullable=True,
       token_ids=True, help="Token forced as the first generated token."),
    _f("forced_eos_token_id", "logits", "token_id_or_ids", None, nullable=True, token_ids=True,
       help="Token(s) forced as the last token when max_length is reached."),
    _f("remove_invalid_values", "logits", "bool", False,
       help="Replace nan and inf in the scores so that generation does not crash."),
    _f("exponential_decay_length_penalty", "logits", "json", None, nullable=True,
       help="(start_index, decay_factor): raise EOS more and more after start_index tokens."),
    _f("suppress_tokens", "logits", "token_ids", None, nullable=True, token_ids=True,
       help="Tokens that are never generated."),
    _f("begin_suppress_tokens", "logits", "token_ids", None, nullable=True, token_ids=True,
       help="Tokens that cannot be the first generated token."),
    _f("sequence_bias", "logits", "mapping", None, nullable=True, token_ids=True,
       help="Bias added to a token when it would complete the given token sequence."),
    _f("token_healing", "logits", "bool", False,
       help="Re-tokenise the end of the prompt so the continuation is not biased."),
    _f("guidance_scale", "logits", "float", None, step=0.1, nullable=True,
       help="Classifier-free guidance scale; > 1 follows the prompt more closely."),
    _f("watermarking_config", "watermark", "json", None, nullable=True,
       help="WatermarkingConfig or SynthIDTextWatermarkingConfig (or a dict of one)."),
    _f("num_return_sequences", "outputs", "int", 1, min=1, step=1,
       help="Sequences returned per prompt (at most num_beams with beam search)."),
    _f("output_attentions", "outputs", "bool", False,
       help="Return the attention weights of every step."),
    _f("output_hidden_states", "outputs", "bool", False,
       help="Return the hidden states of every step."),
    _f("output_scores", "outputs", "bool", False,
       help="Return the processed scores of every step."),
    _f("output_logits", "outputs", "bool", None, nullable=True,
       help="Return the raw logits of every step."),
    _f("return_dict_in_generate", "outputs", "bool", False,
       help="Return an output object instead of only the token ids."),
    _f("pad_token_id", "special_tokens", "int", None, min=0, step=1, nullable=True,
       token_ids=True, help="Token that pads finished rows."),
    _f("bos_token_id", "special_tokens", "int", None, min=0, step=1, nullable=True,
       token_ids=True, help="Beginning-of-sequence token."),
    _f("eos_token_id", "special_tokens", "token_id_or_ids", None, nullable=True, token_ids=True,
       help="End-of-sequence token(s): generating one finishes the row."),
    _f("encoder_no_repeat_ngram_size", "encoder_decoder", "int", 0, min=0, step=1,
       nullable=True, help="Forbid n-grams of this size that occur in the encoder input."),
    _f("decoder_start_token_id", "encoder_decoder", "token_id_or_ids", None, nullable=True,
       token_ids=True, help="First decoder token (or one per batch row)."),
    _f("is_assistant", "assisted", "bool", False,
       help="This model is the draft (assistant) model."),
    _f("num_assistant_tokens", "assisted", "int", 20, min=1, step=1,
       help="Draft tokens proposed per assisted step."),
    _f("num_assistant_tokens_schedule", "assisted", "choice", "constant",
       choices=("heuristic", "heuristic_transient", "constant"),
       help="How num_assistant_tokens changes during generation."),
    _f("assistant_confidence_threshold", "assisted", "float", 0.4, min=0, max=1, step=0.05,
       nullable=True, help="The draft stops when its confidence falls below this."),
    _f("prompt_lookup_num_tokens", "assisted", "int", None, min=1, step=1, nullable=True,
       help="Prompt lookup decoding: candidate tokens copied from the prompt."),
    _f("max_matching_ngram_size", "assisted", "int", None, min=1, step=1, nullable=True,
       help="Prompt lookup: longest n-gram matched in the prompt (2 if unset)."),
    _f("assistant_early_exit", "assisted", "int", None, min=1, step=1, nullable=True,
       help="Draft with the model's own first n layers (early exit)."),
    _f("assistant_lookbehind", "assisted", "int", 10, min=0, step=1,
       help="Different tokenizers: assistant tokens re-checked when aligning."),
    _f("target_lookbehind", "assisted", "int", 10, min=0, step=1,
       help="Different tokenizers: target tokens re-checked when aligning."),
    _f("compile_config", "performance", "json", None, nullable=True,
       help="torch.compile settings (CompileConfig or dict); never written to JSON."),
    _f("disable_compile", "performance", "bool", False,
       help="Never compile the forward pass automatically."),
    _f("low_memory", "logits", "bool", None, nullable=True,
       help="Contrastive search: score the candidates one at a time."),
    _f("penalty_alpha", "strategy", "float", None, min=0, step=0.05, nullable=True,
       help="Contrastive search: degeneration penalty (used with top_k > 1)."),
    _f("dola_layers", "strategy", "json", None, nullable=True,
       help="DoLa decoding: 'low', 'high' or a list of layer indices."),
]
# fmt: on

#: Every GenerationConfig field, by name, in the reference's order.
FIELDS: dict[str, FieldSpec] = {spec.name: spec for spec in _SPECS}

# Range violations that the reference only warns about (some real checkpoints ship them).
_WARN_ONLY_RANGES = frozenset({"pad_token_id"})


# --------------------------------------------------------------------------------------
# Small helpers shared by validation and token-id checks
# --------------------------------------------------------------------------------------


def _bad(name: str, value: Any, expected: str, hint: str = "") -> ValueError:
    text = f"`{name}` must be {expected}, got {value!r}."
    if hint:
        text += f" {hint}"
    return ValueError(text)


def _as_id_list(value: Any) -> list | None:
    """A tensor, tuple or list as a plain list (None if it is none of these)."""
    if isinstance(value, torch.Tensor):
        return value.tolist() if value.ndim else [value.item()]
    if isinstance(value, (list, tuple)):
        return list(value)
    return None


def _flat_ids(value: Any) -> list:
    """Every leaf of a nested list/tuple/tensor of ids."""
    items = _as_id_list(value)
    if items is None:
        return [value]
    out: list = []
    for item in items:
        out.extend(_flat_ids(item))
    return out


def _is_id_list(value: Any, *, allow_empty: bool) -> bool:
    items = _as_id_list(value)
    if items is None or (not items and not allow_empty):
        return False
    return all(_is_int(i) and i >= 0 for i in items)


_INT_RE = re.compile(r"-?\d+")


def normalize_sequence_bias(
    value: Any, name: str = "sequence_bias"
) -> dict[tuple[int, ...], float]:
    """``sequence_bias`` in any accepted form as ``{(ids...): bias}``.

    Accepted: a dict with tuple (or list) keys, a dict whose keys are the strings JSON files
    hold (``"(1, 2)"``, as transformers writes them), or a list of ``[ids, bias]`` pairs.

    Example::

        >>> normalize_sequence_bias({"(5, 6)": -1.0, (7,): 2.0})
        {(5, 6): -1.0, (7,): 2.0}
    """
    if isinstance(value, dict):
        pairs = list(value.items())
    elif isinstance(value, (list, tuple)):
        pairs = []
        for item in value:
            if not isinstance(item, (list, tuple)) or len(item) != 2:
                raise _bad(name, value, "a list of [token_ids, bias] pairs", f"Bad pair: {item!r}.")
            pairs.append((item[0], item[1]))
    else:
        raise _bad(name, value, FIELDS["sequence_bias"].describe())
    if not pairs:
        raise _bad(name, value, "non-empty", "Use None for no bias.")
    out: dict[tuple[int, ...], float] = {}
    for key, bias in pairs:
        if isinstance(key, str):
            ids = tuple(int(t) for t in _INT_RE.findall(key))
        elif _is_int(key):
            ids = (int(key),)
        else:
            items = _as_id_list(key)
            ids = tuple(items) if items is not None else ()
        if not ids or not all(_is_int(i) and i >= 0 for i in ids):
            raise _bad(name, value, "keyed by non-empty sequences of token ids (ints >= 0)")
        if not _is_real(bias):
            raise _bad(name, value, "a mapping to float biases", f"Bias of {key!r} is {bias!r}.")
        out[tuple(int(i) for i in ids)] = float(bias)
    return out


# --------------------------------------------------------------------------------------
# Watermarking and compile configs
# --------------------------------------------------------------------------------------


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
        return copy.deepcopy(dataclasses.asdict(self))

    def to_json_string(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    def to_json_file(self, json_file_path: str | os.PathLike) -> None:
        with open(json_file_path, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")

    def update(self, **kwargs) -> dict[str, Any]:
        """Set the given fields; return the kwargs that are not fields."""
        names = {f.name for f in dataclasses.fields(self)}
        for key, value in kwargs.items():
            if key in names:
                setattr(self, key, value)
        return {k: v for k, v in kwargs.items() if k not in names}


# fmt: off
#: Fields of WatermarkingConfig (for widgets and validation).
WATERMARK_FIELDS: dict[str, FieldSpec] = {s.name: s for s in [
    _f("greenlist_ratio", "watermark", "float", 0.25, min=0, max=1, step=0.05,
       help="Share of the vocabulary that is green at each step."),
    _f("bias", "watermark", "float", 2.0, step=0.5, help="Added to the logits of green tokens."),
    _f("hashing_key", "watermark", "int", 15485863, step=1,
       help="Key mixed into the green-list seed."),
    _f("seeding_scheme", "watermark", "choice", "lefthash", choices=("lefthash", "selfhash"),
       help="lefthash: seed from the previous token; selfhash: from the candidate too."),
    _f("context_width", "watermark", "int", 1, min=1, step=1,
       help="Tokens of context used for the seed."),
]}

#: Fields of SynthIDTextWatermarkingConfig (for widgets and validation).
SYNTHID_FIELDS: dict[str, FieldSpec] = {s.name: s for s in [
    _f("ngram_len", "watermark", "int", None, min=1, step=1,
       help="Length of the n-grams that key the g-values."),
    _f("keys", "watermark", "json", None, help="One watermarking key (int) per tournament layer."),
    _f("context_history_size", "watermark", "int", 1024, min=1, step=1,
       help="How many seen contexts are remembered."),
    _f("sampling_table_seed", "watermark", "int", 0, step=1, help="Seed of the sampling table."),
    _f("sampling_table_size", "watermark", "int", 2**16, min=1, max=2**24, step=1,
       help="Size of the sampling table."),
    _f("skip_first_ngram_calls", "watermark", "bool", False,
       help="Do not watermark the first n-gram of each context."),
    _f("debug_mode", "watermark", "bool", False,
       help="Make the logits uniform before watermarking (for testing)."),
]}
# fmt: on


def _check_spec_value(spec: FieldSpec, value: Any, *, check_range: bool = True) -> None:
    """Raise ValueError if ``value`` does not fit ``spec`` (kind, choices, range)."""
    name = spec.name
    if value is None:
        if spec.nullable:
            return
        raise _bad(name, value, spec.describe(), "None is not allowed here.")
    kind = spec.kind
    if kind == "int":
        if not _is_int(value):
            raise _bad(name, value, spec.describe())
    elif kind == "float":
        if not _is_real(value) or value != value:  # also rejects nan
            raise _bad(name, value, spec.describe())
    elif kind == "bool":
        if not isinstance(value, bool):
            raise _bad(name, value, spec.describe())
    elif kind == "choice":
        if value not in (spec.choices or ()):
            raise _bad(name, value, spec.describe())
    elif kind == "str":
        if not isinstance(value, str):
            raise _bad(name, value, spec.describe())
    elif kind == "str_list":
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, (list, tuple)) or not items:
            raise _bad(name, value, spec.describe())
        if not all(isinstance(s, str) and s for s in items):
            raise _bad(name, value, spec.describe(), "Empty strings cannot be stop strings.")
    elif kind == "token_ids":
        if not _is_id_list(value, allow_empty=True):
            raise _bad(name, value, spec.describe())
    elif kind == "token_id_lists":
        items = _as_id_list(value)
        if not items or not all(_is_id_list(x, allow_empty=False) for x in items):
            raise _bad(name, value, spec.describe())
    elif kind == "token_id_or_ids":
        is_one = _is_int(value) and value >= 0
        if not (is_one or _is_id_list(value, allow_empty=False)):
            raise _bad(name, value, spec.describe())
    elif kind == "mapping":
        normalize_sequence_bias(value, name)
    elif kind == "json":
        _JSON_CHECKS.get(name, lambda v: None)(value)
    if check_range and _is_real(value) and not spec.in_range(value):
        raise _bad(name, value, spec.describe(), spec.help)


def _validate_small(fields: dict[str, FieldSpec], obj: Any, owner: str) -> None:
    for spec in fields.values():
        try:
            _check_spec_value(spec, getattr(obj, spec.name))
        except ValueError as err:
            raise ValueError(f"{owner}: {err}") from None


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
    """

    greenlist_ratio: float = 0.25
    bias: float = 2.0
    hashing_key: int = 15485863
    seeding_scheme: str = "lefthash"
    context_width: int = 1

    def validate(self) -> None:
        """Raise ValueError naming the watermark field that is out of its domain."""
        _validate_small(WATERMARK_FIELDS, self, "watermarking_config")


@dataclass
class SynthIDTextWatermarkingConfig(_SmallConfig):
    """SynthID-Text tournament watermarking, with the reference's defaults.

    Example::

        >>> SynthIDTextWatermarkingConfig(ngram_len=5, keys=[654, 400]).sampling_table_size
        65536

    Args:
        ngram_len: the context length plus one that seeds the g-values;
        keys: one watermarking key per tournament layer;
        context_history_size: how many contexts are remembered to skip repeated ones;
        sampling_table_seed: the seed of the sampling table;
        sampling_table_size: the size of the sampling table;
        skip_first_ngram_calls: do not watermark the first ngram_len - 1 tokens;
        debug_mode: apply the watermark to a flat distribution (as the reference's debug mode).
    """

    ngram_len: int
    keys: list[int]
    context_history_size: int = 1024
    sampling_table_seed: int = 0
    sampling_table_size: int = 2**16
    skip_first_ngram_calls: bool = False
    debug_mode: bool = False

    def validate(self) -> None:
        """Raise ValueError naming the watermark field that is out of its domain."""
        _validate_small(SYNTHID_FIELDS, self, "watermarking_config")
        if hasattr(self.keys, "tolist") and not isinstance(self.keys, (list, tuple)):
            self.keys = self.keys.tolist()  # numpy arrays and tensors, as the reference takes
        keys = self.keys
        if not (isinstance(keys, (list, tuple)) and keys and all(map(_is_int, keys))):
            raise _bad("watermarking_config.keys", self.keys, "a non-empty list of ints")


@dataclass
class CompileConfig(_SmallConfig):
    """torch.compile settings (the reference's CompileConfig fields and defaults).

    Used when a greedy or sampling run has ``cache_implementation="static"``: its one-token
    decoding steps are compiled (genlab/caches.py, :func:`~genlab.caches.compiled_forward`).
    As in the reference, that happens on CUDA devices only, unless ``_compile_all_devices``
    is set to True (an attribute, not a field: it is never serialised), e.g. to compile on
    the CPU:

    >>> cc = CompileConfig(fullgraph=True)
    >>> cc._compile_all_devices = True

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
    # compile on every device type, not only CUDA (the reference's flag of the same name)
    _compile_all_devices = None


_WATERMARK_CLASSES = (WatermarkingConfig, SynthIDTextWatermarkingConfig)


def _coerce_watermarking(value: Any) -> Any:
    """dicts and transformers' watermark configs -> genlab's classes (others unchanged)."""
    if value is None or isinstance(value, _WATERMARK_CLASSES):
        return value
    if isinstance(value, dict):
        synthid = "ngram_len" in value or "keys" in value
        return (SynthIDTextWatermarkingConfig if synthid else WatermarkingConfig).from_dict(value)
    cls_name = type(value).__name__
    for cls in _WATERMARK_CLASSES:
        if cls_name == cls.__name__ and hasattr(value, "to_dict"):
            return cls.from_dict(value.to_dict())
    return value


def _coerce_compile(value: Any) -> Any:
    if value is None or isinstance(value, CompileConfig):
        return value
    if isinstance(value, dict):
        return CompileConfig.from_dict(value)
    if type(value).__name__ == "CompileConfig" and hasattr(value, "to_dict"):
        ours = CompileConfig.from_dict(value.to_dict())
        ours._compile_all_devices = getattr(value, "_compile_all_devices", None)
        return ours
    return value


# --------------------------------------------------------------------------------------
# Checks for the "json" kinds
# --------------------------------------------------------------------------------------


def _check_cache_config(value: Any) -> None:
    if not isinstance(value, dict) and not hasattr(value, "to_dict"):
        raise _bad("cache_config", value, "a dict of cache arguments, or None")


_CONSTRAINT_METHODS = ("advance", "does_advance", "update", "reset", "remaining", "copy")


def _check_constraints(value: Any) -> None:
    expected = (
        "a list of Constraint objects (genlab.constraints.PhrasalConstraint, "
        "DisjunctiveConstraint, or the reference's), or None; for plain token ids use "
        "force_words_ids"
    )
    if not isinstance(value, (list, tuple)):
        raise _bad("constraints", value, expected)
    for item in value:
        if not all(callable(getattr(item, m, None)) for m in _CONSTRAINT_METHODS):
            raise _bad("constraints", value, expected)


def _check_force_words_ids(value: Any) -> None:
    expected = "a non-empty list[list[int]] or list[list[list[int]]] of token ids (ints >= 0)"
    items = _as_id_list(value)
    if not items:
        raise _bad("force_words_ids", value, expected)
    for word in items:
        if _is_id_list(word, allow_empty=False):
            continue
        alternatives = _as_id_list(word)
        if not alternatives or not all(_is_id_list(a, allow_empty=False) for a in alternatives):
            raise _bad("force_words_ids", value, expected)


def _check_exponential_decay(value: Any) -> None:
    expected = "a pair (start_index: int >= 0, decay_factor: float)"
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise _bad("exponential_decay_length_penalty", value, expected)
    start, factor = value
    if not (_is_int(start) and start >= 0 and _is_real(factor)):
        raise _bad("exponential_decay_length_penalty", value, expected)


def _check_dola_layers(value: Any) -> None:
    if value in ("low", "high") or _is_id_list(value, allow_empty=False):
        return
    raise _bad("dola_layers", value, "'low', 'high' or a non-empty list of layer indices")


def _check_watermarking(value: Any) -> None:
    if not isinstance(value, _WATERMARK_CLASSES):
        raise _bad(
            "watermarking_config",
            value,
            "a WatermarkingConfig, a SynthIDTextWatermarkingConfig, a dict, or None",
        )
    value.validate()


def _check_compile_config(value: Any) -> None:
    if not isinstance(value, CompileConfig):
        raise _bad("compile_config", value, "a CompileConfig (or a dict of its fields), or None")


_JSON_CHECKS = {
    "cache_config": _check_cache_config,
    "constraints": _check_constraints,
    "force_words_ids": _check_force_words_ids,
    "exponential_decay_length_penalty": _check_exponential_decay,
    "dola_layers": _check_dola_layers,
    "watermarking_config": _check_watermarking,
    "compile_config": _check_compile_config,
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

    def __init__(self, **kwargs):
        from_model_config = kwargs.pop("_from_model_config", False)
        for name, spec in FIELDS.items():
            if name == "is_assistant":
                # like the reference: only set through the "extra attributes" below
                value = False
            else:
                value = kwargs.pop(name, copy.deepcopy(spec.default))
            setattr(self, name, value)
        self.watermarking_config = _coerce_watermarking(self.watermarking_config)
        self.compile_config = _coerce_compile(self.compile_config)
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
            ValueError: `top_p` must be a number in (0, 1], or None, got 1.5. ...
        """
        self.watermarking_config = _coerce_watermarking(self.watermarking_config)
        self.compile_config = _coerce_compile(self.compile_config)
        minor: dict[str, str] = {}

        # 1. each field on its own, from its spec
        for spec in _SPECS:
            value = getattr(self, spec.name, spec.default)
            check_range = spec.only_when is None or bool(getattr(self, spec.only_when, False))
            if spec.name in _WARN_ONLY_RANGES and not strict:
                _check_spec_value(spec, value, check_range=False)
                if _is_real(value) and not spec.in_range(value):
                    minor[spec.name] = (
                        f"{value!r} is outside {spec.range_text()}; batched generation with "
                        f"padding will fail. Set `{spec.name}` to a real token id."
                    )
                continue
            _check_spec_value(spec, value, check_range=check_range)

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
                f"These generation settings are inconsistent and may be ignored: {list(minor)}.\n"
                + details,
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
        used = [key for key in kwargs if key in self.__dict__]
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
        path, commit_hash = _resolve_config_file(
            pretrained_model_name,
            config_file_name,
            cache_dir=cache_dir,
            force_download=force_download,
            local_files_only=local_files_only,
            token=token,
            revision=revision,
            subfolder=subfolder,
        )
        config_dict = _read_json_dict(path)
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


_DEFAULT_DICT: dict[str, Any] | None = None


def _default_dict() -> dict[str, Any]:
    global _DEFAULT_DICT
    if _DEFAULT_DICT is None:
        _DEFAULT_DICT = GenerationConfig().to_dict()
    return _DEFAULT_DICT


def _read_json_dict(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path} is not a valid JSON file ({err}); fix or delete it.") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object, got {type(data).__name__}.")
    return data


_COMMIT_RE = re.compile(r"snapshots[\\/]([^\\/]+)[\\/]")


def _resolve_config_file(
    name: str | os.PathLike,
    file_name: str,
    *,
    cache_dir,
    force_download,
    local_files_only,
    token,
    revision,
    subfolder,
) -> tuple[Path, str | None]:
    """Local file/folder first, then the Hub (or its cache). Returns (path, commit)."""
    local = Path(name)
    if local.is_file():
        return local, None
    candidate = local / subfolder / file_name if subfolder else local / file_name
    if candidate.is_file():
        return candidate, None
    if local.is_dir():
        raise FileNotFoundError(
            f"folder {local} has no {file_name}; save one with GenerationConfig.save_pretrained "
            "or pass the right config_file_name."
        )
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import HFValidationError

    try:
        resolved = hf_hub_download(
            repo_id=str(name),
            filename=file_name,
            subfolder=subfolder or None,
            revision=revision,
            cache_dir=cache_dir,
            force_download=force_download,
            local_files_only=local_files_only,
            token=token,
        )
    except HFValidationError as err:
        raise ValueError(
            f"{str(name)!r} is neither an existing folder nor a valid Hub repo id ({err})."
        ) from None
    except Exception as err:  # network, missing repo/file, offline cache miss
        offline = local_files_only or os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {
            "1",
            "ON",
            "YES",
            "TRUE",
        }
        advice = (
            "HF_HUB_OFFLINE is set (or local_files_only=True), so only the Hugging Face cache "
            "is read: unset it with a connection to download the file, or pass a local folder."
            if offline
            else "Check the repo id, the revision and the connection, or pass a local folder."
        )
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise OSError(
            f"could not load {file_name} for {str(name)!r} ({reason}). {advice}"
        ) from None
    match = _COMMIT_RE.search(str(resolved))
    return Path(resolved), match.group(1) if match else None
