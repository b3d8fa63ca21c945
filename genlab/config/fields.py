"""The field table: one :class:`FieldSpec` per generation setting, and the checks it drives.

:data:`FIELDS` describes every ``GenerationConfig`` field; :data:`WATERMARK_FIELDS` and
:data:`SYNTHID_FIELDS` every field of the two watermarking configs. Each spec is the one
place a setting is declared: its kind, default, range and help. ``validate()``, the
watermark processors' own checks and the widget panel's controls all read these specs, so
the range a slider offers is the range validation enforces, and a value the config
accepts is one the processor accepts.

>>> FIELDS["top_p"].range_text()
'[0, 1]'
>>> check_spec_value(WATERMARK_FIELDS["greenlist_ratio"], 1.0)  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: `greenlist_ratio` must be a number in (0, 1), got 1.0. Share of the ...
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from ..checks import is_int as _is_int
from ..checks import is_real as _is_real
from ..ids import is_id_list

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


#: Integer ranges set by how a value is used, not by what it means (see FieldSpec.storage).
STORAGE_RANGES: dict[str, tuple[int, int]] = {
    "int64": (-(2**63), 2**63 - 1),  # multiplied in torch int64 arithmetic
    "seed": (-(2**63), 2**64 - 1),  # what torch.Generator.manual_seed accepts
}


def _fmt_number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(x)


@dataclass(frozen=True)
class FieldSpec:
    """What one config field holds, for validation and for generated widgets.

    kind is one of :data:`KINDS`; group one of :data:`GROUPS`. ``min``/``max`` bound
    numbers (exclusive when ``min_exclusive``/``max_exclusive``); ``nullable`` says None is
    allowed; ``token_ids`` marks fields holding vocabulary ids (see
    ``GenerationConfig.check_token_ids``); ``only_when`` names a boolean field that must be
    True for the range to be enforced (``temperature`` only matters when sampling);
    ``storage`` names a key of :data:`STORAGE_RANGES`, the integers a value must fit in
    because of how it is used (int64 arithmetic, torch's seed range). That bound is
    enforced like ``min``/``max`` but is no range to offer on a slider.

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
    storage: str | None = None

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
        """Whether a number lies inside [min, max] (honouring exclusive bounds) and fits
        its ``storage``."""
        if self.storage is not None:
            low, high = STORAGE_RANGES[self.storage]
            if not low <= value <= high:
                return False
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
        if self.storage is not None:
            low, high = STORAGE_RANGES[self.storage]
            text += f" fitting {self.storage} [{low}, {high}]"
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
    _f("top_p", "logits", "float", 1.0, min=0, max=1, step=0.01, nullable=True,
       help="Keep the fewest top tokens whose probabilities add up to top_p."),
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

# Range violations that the reference only warns about (some real checkpoints ship them).


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


def _check_cache_config(value: Any) -> None:
    if not isinstance(value, dict) and not hasattr(value, "to_dict"):
        raise _bad("cache_config", value, "a dict of cache arguments, or None")


_CONSTRAINT_METHODS = ("advance", "does_advance", "update", "reset", "remaining", "copy")


def _check_constraints(value: Any) -> None:
    expected = (
        "a list of Constraint objects (genlab.strategies.constraints.PhrasalConstraint, "
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
        if is_id_list(word, allow_empty=False):
            continue
        alternatives = _as_id_list(word)
        if not alternatives or not all(is_id_list(a, allow_empty=False) for a in alternatives):
            raise _bad("force_words_ids", value, expected)


def _check_exponential_decay(value: Any) -> None:
    expected = "a pair (start_index: int >= 0, decay_factor: float)"
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise _bad("exponential_decay_length_penalty", value, expected)
    start, factor = value
    if not (_is_int(start) and start >= 0 and _is_real(factor)):
        raise _bad("exponential_decay_length_penalty", value, expected)


def _check_dola_layers(value: Any) -> None:
    if value in ("low", "high") or is_id_list(value, allow_empty=False):
        return
    raise _bad("dola_layers", value, "'low', 'high' or a non-empty list of layer indices")


def _check_keys(value: Any) -> None:
    if int_list(value) is None:
        raise _bad(
            "keys",
            value,
            "a non-empty sequence of ints fitting int64 (a list, tuple, numpy array or tensor; "
            "one watermarking key per tournament layer)",
        )


def int_list(value: Any) -> list[int] | None:
    """A non-empty sequence of int64 integers (list, tuple, numpy array, tensor) as a list
    of Python ints; None when ``value`` is anything else.

    >>> import numpy as np
    >>> int_list(np.array([7, 9])), int_list([]), int_list("12")
    ([7, 9], None, None)
    """
    if hasattr(value, "tolist") and not isinstance(value, (list, tuple)):
        value = value.tolist()  # numpy arrays and tensors, as the reference takes them
    if not isinstance(value, (list, tuple)) or not value:
        return None
    low, high = STORAGE_RANGES["int64"]
    if not all(_is_int(k) and low <= k <= high for k in value):
        return None
    return [int(k) for k in value]


#: checks of the "json" kind fields that hold plain data, by field name
JSON_CHECKS: dict[str, Callable[[Any], None]] = {
    "cache_config": _check_cache_config,
    "constraints": _check_constraints,
    "force_words_ids": _check_force_words_ids,
    "exponential_decay_length_penalty": _check_exponential_decay,
    "dola_layers": _check_dola_layers,
    "keys": _check_keys,
}


# --------------------------------------------------------------------------------------
# The watermark fields: what WatermarkingConfig, SynthIDTextWatermarkingConfig, the
# processors of genlab.watermark and the widget panel all read
# --------------------------------------------------------------------------------------

# fmt: off
#: Fields of WatermarkingConfig (the green-list watermark), in the reference's order.
WATERMARK_FIELDS: dict[str, FieldSpec] = {s.name: s for s in [
    _f("greenlist_ratio", "watermark", "float", 0.25, min=0, max=1, min_exclusive=True,
       max_exclusive=True, step=0.05,
       help="Share of the vocabulary that is green at each step (0 and 1 leave nothing to "
            "detect)."),
    _f("bias", "watermark", "float", 2.0, step=0.5, help="Added to the logits of green tokens."),
    _f("hashing_key", "watermark", "int", 15485863, step=1, storage="int64",
       help="Key mixed into the green-list seed."),
    _f("seeding_scheme", "watermark", "choice", "lefthash", choices=("lefthash", "selfhash"),
       help="lefthash: seed from the previous token; selfhash: from the candidate too."),
    _f("context_width", "watermark", "int", 1, min=1, step=1,
       help="Tokens of context used for the seed."),
]}

#: Fields of SynthIDTextWatermarkingConfig, in the reference's order.
SYNTHID_FIELDS: dict[str, FieldSpec] = {s.name: s for s in [
    _f("ngram_len", "watermark", "int", None, min=2, step=1,
       help="Length of the n-grams that key the g-values (the context is ngram_len - 1 "
            "tokens, at least one)."),
    _f("keys", "watermark", "json", None,
       help="One watermarking key (int) per tournament layer."),
    _f("context_history_size", "watermark", "int", 1024, min=0, step=1,
       help="How many seen contexts are remembered (0: none)."),
    _f("sampling_table_seed", "watermark", "int", 0, step=1, storage="seed",
       help="Seed of the sampling table."),
    _f("sampling_table_size", "watermark", "int", 2**16, min=1, max=2**24, step=1,
       help="Size of the sampling table."),
    _f("skip_first_ngram_calls", "watermark", "bool", False,
       help="Do not watermark the first n-gram of each context."),
    _f("debug_mode", "watermark", "bool", False,
       help="Make the logits uniform before watermarking (for testing)."),
]}
# fmt: on


# --------------------------------------------------------------------------------------
# Checking values against specs
# --------------------------------------------------------------------------------------


def check_spec_value(
    spec: FieldSpec,
    value: Any,
    *,
    check_range: bool = True,
    checks: Mapping[str, Callable[[Any], None]] = JSON_CHECKS,
) -> None:
    """Raise ValueError if ``value`` does not fit ``spec`` (kind, choices, range).

    ``checks``: the check of each "json" kind field, by name (fields without one accept
    any value).

    >>> check_spec_value(FIELDS["top_k"], 5)
    >>> check_spec_value(FIELDS["top_k"], -1)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: `top_k` must be an int >= 0, or None, got -1. Sample only among the k ...
    """
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
        if not is_id_list(value, allow_empty=True):
            raise _bad(name, value, spec.describe())
    elif kind == "token_id_lists":
        items = _as_id_list(value)
        if not items or not all(is_id_list(x, allow_empty=False) for x in items):
            raise _bad(name, value, spec.describe())
    elif kind == "token_id_or_ids":
        is_one = _is_int(value) and value >= 0
        if not (is_one or is_id_list(value, allow_empty=False)):
            raise _bad(name, value, spec.describe())
    elif kind == "mapping":
        normalize_sequence_bias(value, name)
    elif kind == "json":
        checks.get(name, lambda v: None)(value)
    if check_range and _is_real(value) and not spec.in_range(value):
        raise _bad(name, value, spec.describe(), spec.help)


def check_fields(specs: Mapping[str, FieldSpec], values: Any, owner: str) -> None:
    """Check each field of ``specs`` on ``values`` (an object with those attributes, or a
    mapping); the ValueError names ``owner`` and the field.

    >>> check_fields(WATERMARK_FIELDS, {"context_width": 0}, "owner")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: owner: `context_width` must be an int >= 1, got 0. Tokens of context ...
    """
    for spec in specs.values():
        if isinstance(values, Mapping):
            if spec.name not in values:
                continue
            value = values[spec.name]
        else:
            value = getattr(values, spec.name)
        try:
            check_spec_value(spec, value)
        except ValueError as err:
            raise ValueError(f"{owner}: {err}") from None


def spec_defaults(specs: Mapping[str, FieldSpec]) -> dict[str, Any]:
    """``{name: default}`` of the fields of ``specs`` that have a default (not None).

    >>> spec_defaults(WATERMARK_FIELDS)["greenlist_ratio"]
    0.25
    """
    return {name: spec.default for name, spec in specs.items() if spec.default is not None}
