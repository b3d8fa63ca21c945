"""Build a built-in decoder from a transformers-style config dict and state dict.

``build_decoder`` is what the loaders (safetensors folders, the Hub, GGUF) call once they
have a ``config.json`` dict and tensors named the way transformers names them. It picks the
family from ``model_type``, checks that every tensor is there with the right shape (before
any model is built), and returns a decoder implementing the protocol in ``base.py``.

Example::

    >>> from transformers import LlamaConfig, LlamaForCausalLM
    >>> hf = LlamaForCausalLM(LlamaConfig(hidden_size=64, intermediate_size=128,
    ...                                   num_hidden_layers=2, num_attention_heads=4))
    >>> lm = build_decoder(hf.config.to_dict(), hf.state_dict(), name="tiny")
    >>> lm.info.num_hidden_layers
    2
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from genlab.models import gpt2, llama
from genlab.models.base import ModelInfo


@dataclass(frozen=True)
class Family:
    """How to read one architecture family's config and tensors.

    ``prefixes``: the prefix of the canonical tensor names (``model.`` / ``transformer.``) that
    some checkpoints leave out (a bare LlamaModel / GPT2Model, or the original gpt2 files).
    """

    defaults: dict[str, dict[str, Any]]
    settings: Callable[[dict], Any]
    expected_shapes: Callable[[Any], dict[str, tuple[int, ...]]]
    build: Callable[..., Any]
    prefix: str
    max_positions_key: str


FAMILIES: dict[str, Family] = {
    "llama": Family(
        llama.CONFIG_DEFAULTS,
        llama.LlamaSettings.from_config,
        llama.expected_shapes,
        llama.LlamaDecoder.from_tensors,
        "model.",
        "max_position_embeddings",
    ),
    "gpt2": Family(
        gpt2.CONFIG_DEFAULTS,
        gpt2.GPT2Settings.from_config,
        gpt2.expected_shapes,
        gpt2.GPT2Decoder.from_tensors,
        "transformer.",
        "n_positions",
    ),
}
MODEL_TYPES: dict[str, str] = {
    "llama": "llama",
    "mistral": "llama",
    "qwen2": "llama",
    "gpt2": "gpt2",
}


def supported_model_types() -> list[str]:
    """The ``model_type`` values :func:`build_decoder` accepts."""
    return sorted(MODEL_TYPES)


def build_decoder(
    config: dict,
    state_dict: dict[str, torch.Tensor],
    *,
    name: str = "model",
    generation_defaults: dict | None = None,
    dtype: torch.dtype | None = torch.float32,
    packed: bool | None = None,
    consume: bool = False,
    quantization: str | None = None,
    blocks: dict | None = None,
):
    """A built-in decoder for ``config`` (a config.json dict) with weights from ``state_dict``.

    state_dict uses transformers' parameter names (``model.layers.0.self_attn.q_proj.weight``,
    ``transformer.h.0.attn.c_attn.weight``; ``lm_head.weight`` may be absent when tied; the
    ``model.`` / ``transformer.`` prefix may be absent). Tensors are converted to ``dtype``
    (float32 by default; None keeps them as they are); tensors already in that dtype are used
    without a copy where the layout allows. Extra tensors are ignored.

    ``packed`` chooses the form of the weight matrices
    (:func:`~genlab.runtime.matmul.pack_weight`): None (default) packs them into oneDNN's
    layout where torch supports it (the CPU, float32 and bfloat16: a copy, and the fastest
    products for any number of rows), False keeps them as row blocks (views: the decoder
    shares memory with ``state_dict``, and a tied head with the embedding).

    ``quantization`` ("int4", "int8"; Llama-family decoders) stores the matrices in 4 or 8
    bits (:mod:`genlab.runtime.quant`); ``blocks``: a GGUF file's own 4-bit blocks by name.

    ``consume=True`` empties ``state_dict`` (the loaders pass their own): each tensor is then
    freed once its packed copy exists, so that loading never holds the weights twice.

    Raises ValueError for an unknown ``model_type``, missing tensors or wrong shapes, naming
    them. Returns a :class:`~genlab.models.llama.LlamaDecoder` or
    :class:`~genlab.models.gpt2.GPT2Decoder`.
    """
    if not isinstance(config, dict):
        raise ValueError(
            f"config must be a dict (a parsed config.json); got {type(config).__name__}"
        )
    if not isinstance(state_dict, dict):
        raise ValueError(
            f"state_dict must be a dict of name -> tensor; got {type(state_dict).__name__}"
        )
    model_type = config.get("model_type")
    if model_type not in MODEL_TYPES:
        raise ValueError(
            f"model_type={model_type!r} has no built-in decoder; supported model types: "
            f"{supported_model_types()}. Load other models through transformers instead "
            "(genlab.load(hf_model, hf_tokenizer))."
        )
    family = FAMILIES[MODEL_TYPES[model_type]]
    full_config = {**family.defaults[model_type], **config}
    settings = read_settings(config)
    # sizes against the tensors first: a config saying 10^9 layers fails here, at once
    check_sizes(config, {k: tuple(v.shape) for k, v in state_dict.items()}, settings)
    tensors = select_tensors(state_dict, family.expected_shapes(settings), family.prefix)
    warn_unused_layers(config, state_dict, settings.num_layers)
    if consume:
        state_dict.clear()  # from here on ``tensors`` holds the only references
    info = model_info(full_config, settings, name, generation_defaults, family.max_positions_key)
    if quantization is None:
        return family.build(settings, tensors, info, dtype, packed=packed)
    if family is not FAMILIES["llama"]:
        raise ValueError(
            f"quantization={quantization!r} is supported for Llama-family decoders (Llama, "
            f"Qwen2, SmolLM); {model_type!r} has no quantized form: leave quantization=None"
        )
    return family.build(
        settings, tensors, info, torch.float32, quantization=quantization, blocks=blocks
    )


# config fields the decoders read as numbers: name -> (kind, may be None)
NUMBER_FIELDS: dict[str, tuple[str, bool]] = {
    "rms_norm_eps": ("positive number", False),
    "layer_norm_epsilon": ("positive number", False),
    "rope_theta": ("positive number", False),
    "head_dim": ("positive integer", True),
    "n_inner": ("positive integer", True),
    "max_position_embeddings": ("positive integer", True),
    "n_positions": ("positive integer", True),
    "n_ctx": ("positive integer", True),
}


BOOL_FIELDS = ("tie_word_embeddings", "attention_bias", "mlp_bias", "scale_attn_weights")
TOKEN_ID_FIELDS = ("bos_token_id", "eos_token_id", "pad_token_id")


def check_number_fields(config: dict) -> None:
    """ValueError naming the first field of NUMBER_FIELDS, BOOL_FIELDS or TOKEN_ID_FIELDS
    whose value is not of the kind it must be."""
    for key in BOOL_FIELDS:
        if key in config and not isinstance(config[key], bool):
            raise ValueError(f"config field {key}={config[key]!r} must be true or false")
    for key in TOKEN_ID_FIELDS:
        value = config.get(key)
        ids = value if isinstance(value, list) else [value]
        if value is not None and not all(
            isinstance(i, int) and not isinstance(i, bool) for i in ids
        ):  # negative ids (pad_token_id=-1 in some old configs) are left to the config checks
            raise ValueError(
                f"config field {key}={value!r} must be a token id (an int)"
                + (", a list of them" if key == "eos_token_id" else "")
                + " or null"
            )
    for key, (kind, nullable) in NUMBER_FIELDS.items():
        if key not in config or (nullable and config[key] is None):
            continue
        value = config[key]
        wanted = int if kind == "positive integer" else (int, float)
        ok = isinstance(value, wanted) and not isinstance(value, bool)
        if ok and not (value > 0 and value != float("inf")):  # also rejects NaN
            ok = False
        if not ok:
            raise ValueError(
                f"config field {key}={value!r} ({type(value).__name__}) must be a {kind}"
            )


def read_settings(config: dict):
    """The family's settings for a config.json dict (its model_type already checked); a
    field of the wrong type or value is a ValueError naming the field."""
    model_type = config.get("model_type")
    if model_type not in MODEL_TYPES:
        raise ValueError(
            f"model_type={model_type!r} has no built-in decoder; supported model types: "
            f"{supported_model_types()}"
        )
    family = FAMILIES[MODEL_TYPES[model_type]]
    full_config = {**family.defaults[model_type], **config}
    check_number_fields(full_config)
    try:
        return family.settings(full_config)
    except (TypeError, KeyError, AttributeError) as err:
        raise ValueError(
            f"config.json fields could not be read ({type(err).__name__}: {err})"
        ) from None


#: tensor names of one decoder layer, per family: the layer index is group 1
LAYER_NAMES: dict[str, re.Pattern] = {
    "llama": re.compile(r"^(?:model\.)?layers\.(\d+)\."),
    "gpt2": re.compile(r"^(?:transformer\.)?h\.(\d+)\."),
}
#: config.json names of a field, the canonical first (GPT-2 configs may use either)
FIELD_NAMES: dict[str, tuple[str, ...]] = {
    "n_layer": ("n_layer", "num_hidden_layers"),
    "n_embd": ("n_embd", "hidden_size"),
    "n_positions": ("n_positions", "max_position_embeddings"),
}


def _field(config: dict, name: str) -> str:
    """The name under which ``config`` gives the field ``name`` (an alias if it uses one)."""
    names = FIELD_NAMES.get(name, (name,))
    return next((n for n in names if n in config), names[0])


def _size_rows(kind: str, s: Any) -> list[tuple[str, int, str, int]]:
    """(field, size the config gives, tensor, dimension) for the sizes a checkpoint shows."""
    if kind == "llama":
        return [
            ("vocab_size", s.vocab_size, "model.embed_tokens.weight", 0),
            ("hidden_size", s.hidden_size, "model.embed_tokens.weight", 1),
            ("intermediate_size", s.intermediate_size, "model.layers.0.mlp.gate_proj.weight", 0),
        ]
    return [
        ("vocab_size", s.vocab_size, "transformer.wte.weight", 0),
        ("n_embd", s.hidden_size, "transformer.wte.weight", 1),
        ("n_positions", s.max_positions, "transformer.wpe.weight", 0),
        ("n_inner", s.intermediate_size, "transformer.h.0.mlp.c_fc.weight", 1),
    ]


def check_sizes(config: dict, shapes: dict[str, tuple[int, ...]], settings: Any = None) -> None:
    """ValueError naming the config.json field whose size the checkpoint contradicts.

    ``shapes``: tensor name -> shape, as stored (from the safetensors headers, before any
    weight is read). The number of layers is compared with the layer indices in the tensor
    names, and vocabulary, hidden, MLP and attention sizes with the shapes of the embedding
    and the first layer. The work is proportional to the number of tensors, never to the
    sizes in the config, so a config saying ``num_hidden_layers: 1000000000`` fails at
    once. Tensors that are missing are left to :func:`select_tensors` to report; a config
    with fewer layers than the checkpoint passes (the extra layers are ignored).
    """
    kind = MODEL_TYPES.get(config.get("model_type"))
    if kind is None:
        return  # no built-in decoder: build_decoder says so
    family = FAMILIES[kind]
    s = settings if settings is not None else read_settings(config)
    indices = {int(m.group(1)) for m in map(LAYER_NAMES[kind].match, shapes) if m}
    if s.num_layers > len(indices):
        field = _field(config, "num_hidden_layers" if kind == "llama" else "n_layer")
        held = f"{len(indices)} layer(s)" if indices else "no layer tensors"
        raise ValueError(
            f"config field {field}={s.num_layers} does not match the weights, which hold "
            f"{held} ({family.prefix}{'layers' if kind == 'llama' else 'h'}.N.*): set "
            f"{field} to the number of layers saved, or use the weights saved with this config"
        )

    def shape(name: str) -> tuple[int, ...] | None:
        found = shapes.get(name)
        if found is None and name.startswith(family.prefix):
            found = shapes.get(name[len(family.prefix) :])
        return None if found is None else tuple(found)

    def refuse(field: str, value: int, name: str, found: tuple[int, ...], dim: int, why=""):
        raise ValueError(
            f"config field {field}={value}{why} does not match the weights: {name} has shape "
            f"{found}, so dimension {dim} says {found[dim]}. Fix {field} in config.json, or "
            "use the weights saved with this config"
        )

    for name_, value, tensor, dim in _size_rows(kind, s):
        found = shape(tensor)
        if found is not None and len(found) > dim and found[dim] != value:
            refuse(_field(config, name_), value, tensor, found, dim)
    if kind == "llama":  # attention: heads x head_dim query rows, kv heads x head_dim key rows
        d = s.head_dim
        for heads, field, tensor in (
            (s.num_heads, "num_attention_heads", "model.layers.0.self_attn.q_proj.weight"),
            (s.num_kv_heads, "num_key_value_heads", "model.layers.0.self_attn.k_proj.weight"),
        ):
            found = shape(tensor)
            if found is None or not found or found[0] == heads * d:
                continue
            if "head_dim" not in config or d == 0 or found[0] % d == 0:
                refuse(field, heads, tensor, found, 0, f" (x head_dim {d} = {heads * d} rows)")
            refuse("head_dim", d, tensor, found, 0, f" (x {field} {heads} = {heads * d} rows)")


def warn_unused_layers(config: dict, state_dict: dict, num_layers: int) -> None:
    """A UserWarning naming the weights of layers beyond the config's layer count: they are
    not used (transformers 4.56.2 lists them as unused weights too)."""
    kind = MODEL_TYPES[config["model_type"]]
    extra = sorted(
        (int(m.group(1)), name)
        for name, m in ((n, LAYER_NAMES[kind].match(n)) for n in state_dict)
        if m and int(m.group(1)) >= num_layers
    )
    if not extra:
        return
    field = _field(config, "num_hidden_layers" if kind == "llama" else "n_layer")
    held = extra[-1][0] + 1
    names = [name for _, name in extra]
    shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    warnings.warn(
        f"the weights hold {held} layers but config field {field}={num_layers}: the "
        f"{len(names)} tensor(s) of layers {num_layers}..{held - 1} are not used ({shown}). "
        f"Set {field}={held} in config.json to use them, or ignore this if the model is "
        "cut to its first layers on purpose.",
        UserWarning,
        stacklevel=4,
    )


def select_tensors(
    state_dict: dict[str, torch.Tensor], shapes: dict[str, tuple[int, ...]], prefix: str
) -> dict[str, torch.Tensor]:
    """Pick the expected tensors (canonical names) out of ``state_dict`` and check shapes.

    A name missing as such is also looked up without ``prefix``. Raises one ValueError
    listing every missing tensor, or every shape mismatch (name, expected, found).
    """
    found: dict[str, torch.Tensor] = {}
    missing: list[str] = []
    for key in shapes:
        tensor = state_dict.get(key)
        if tensor is None and key.startswith(prefix):
            tensor = state_dict.get(key[len(prefix) :])
        if tensor is None:
            missing.append(key)
        else:
            found[key] = tensor
    if missing:
        shown = ", ".join(missing[:8]) + (
            f" and {len(missing) - 8} more" if len(missing) > 8 else ""
        )
        raise ValueError(
            f"state_dict lacks {len(missing)} tensor(s) the config requires: {shown}. "
            "Check that the checkpoint matches config.json (layers, tied embeddings, biases)."
        )
    wrong = [
        f"{key}: expected {tuple(shape)}, found {tuple(found[key].shape)}"
        for key, shape in shapes.items()
        if tuple(found[key].shape) != tuple(shape)
    ]
    if wrong:
        raise ValueError(
            "state_dict tensor shapes do not match config.json: " + "; ".join(wrong[:8])
            + (f"; and {len(wrong) - 8} more" if len(wrong) > 8 else "")
        )  # fmt: skip
    return found


def model_info(
    config: dict,
    settings: Any,
    name: str,
    generation_defaults: dict | None,
    max_positions_key: str,
) -> ModelInfo:
    """ModelInfo from a config dict already completed with the family's defaults."""
    return ModelInfo(
        vocab_size=settings.vocab_size,
        bos_token_id=config.get("bos_token_id"),
        eos_token_id=config.get("eos_token_id"),
        pad_token_id=config.get("pad_token_id"),
        max_position_embeddings=config.get(max_positions_key),
        name=name,
        architecture=config["model_type"],
        num_hidden_layers=settings.num_layers,
        hidden_size=settings.hidden_size,
        tie_word_embeddings=bool(settings.tie_word_embeddings),
        generation_defaults=dict(generation_defaults or {}),
    )
