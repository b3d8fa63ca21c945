"""The built-in Llama-family decoder (Llama, SmolLM2, Mistral, Qwen2-style q/k/v bias).

One decoder layer, top to bottom::

    x ─ RMSNorm ─ fused QKV ─ RoPE(q, k) ─ append k, v to the cache ─ attention ─ o_proj ─(+x)
      ─ RMSNorm ─ fused gate|up ─ silu(gate) * up ─ down_proj ─(+)

The weights are plain tensors (no ``nn.Module``), laid out for a lean decoding step:

* q/k/v are stacked into one matrix and gate/up into another (two matrix products where the
  reference runs five), and each RMSNorm weight (times sqrt(hidden)) is folded into the
  columns of the matrix that follows it, so a norm costs a reduction, a hypot of one number
  per row and a division;
* within each head, q/k rows are reordered so that the pairs RoPE rotates together are
  adjacent: RoPE is then one in-place complex multiplication by a table. Attention
  scores do not change (q and k share the order); keys in the cache are stored that way;
* every matrix (the vocabulary head too) is packed once for fast products on all cores
  (:func:`~genlab.runtime.matmul.pack_weight`: oneDNN's layout on the CPU, row blocks
  elsewhere): one row (a decoding step) runs at close to the memory bandwidth, 4-16 rows
  (beams, batches) at close to the arithmetic peak;
* keys and values are written in place into :class:`~genlab.models.base.KVCache`;
* the residual additions ride on the output projections (``baddbmm``), and the final norm
  and vocabulary projection run only on the positions whose logits are kept.

The input checks and attention masks it shares with ``gpt2.py`` are in :mod:`genlab.models.masks`.

Example (not run as a test: it needs a checkpoint's config and weights)::

    >>> from genlab.models.architectures import build_decoder
    >>> lm = build_decoder(config_dict, state_dict)  # transformers-style names  # doctest: +SKIP
    >>> cache = lm.new_cache(batch_size=1)                    # doctest: +SKIP
    >>> out = lm.forward(ids, attention_mask=torch.ones_like(ids),  # doctest: +SKIP
    ...                  position_ids=torch.arange(ids.shape[1])[None], cache=cache)
    >>> out.logits.shape                                      # (1, 1, vocab)  # doctest: +SKIP
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F

from genlab.inside.taps import FINAL, Taps, add_product
from genlab.models.attention import explicit_attention
from genlab.models.base import BuiltinDecoder, KVCache, ModelInfo, ModelOutput, SlotWriter
from genlab.models.masks import (
    _keep_mask,
    additive_mask,
    check_forward_inputs,
    check_positions,
    embeds_as_ids,
    sdpa_keep_mask,
    static_keep_mask,
)
from genlab.runtime import threads
from genlab.runtime.matmul import decoder_form, describe_numerics, head_logits, matmul, pack_weight
from genlab.runtime.quant import release_freed_memory

# transformers' class defaults for fields a config.json may leave out, per model_type
CONFIG_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": {
        "vocab_size": 32000,
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": None,
        "head_dim": None,
        "hidden_act": "silu",
        "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": None,
    },
    "mistral": {
        "vocab_size": 32000,
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": None,
        "hidden_act": "silu",
        "max_position_embeddings": 4096 * 32,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "sliding_window": 4096,
        "tie_word_embeddings": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": None,
    },
    "qwen2": {
        "vocab_size": 151936,
        "hidden_size": 4096,
        "intermediate_size": 22016,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "hidden_act": "silu",
        "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "use_sliding_window": False,
        "tie_word_embeddings": False,
        "bos_token_id": None,
        "eos_token_id": None,
        "pad_token_id": None,
    },
}

SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3")


# --------------------------------------------------------------------------------------------
# Settings read from a transformers-style config dict
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LlamaSettings:
    """The architecture numbers of a Llama-family decoder.

    ``qkv_bias``: biases on q/k/v (Qwen2, or Llama with ``attention_bias``); ``o_bias``: bias
    on the output projection (Llama with ``attention_bias`` only); ``sliding_window``: keys
    further back than this many positions are masked (Mistral), None for full attention.
    """

    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: dict | None
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool
    tie_word_embeddings: bool
    max_position_embeddings: int | None
    sliding_window: int | None

    @classmethod
    def from_config(cls, config: dict) -> LlamaSettings:
        """Read a config.json dict (``model_type`` llama, mistral or qwen2).

        Fields the dict leaves out take transformers' defaults for that model_type.
        """
        model_type = config.get("model_type", "llama")
        if model_type not in CONFIG_DEFAULTS:
            raise ValueError(
                f"model_type={model_type!r} is not a Llama-family type; "
                f"expected one of {sorted(CONFIG_DEFAULTS)}"
            )
        c = {**CONFIG_DEFAULTS[model_type], **config}
        hidden = _positive_int(c, "hidden_size")
        heads = _positive_int(c, "num_attention_heads")
        kv_heads = c.get("num_key_value_heads") or heads
        if not isinstance(kv_heads, int) or kv_heads <= 0 or heads % kv_heads:
            raise ValueError(
                f"num_key_value_heads={kv_heads!r} must be a positive divisor of "
                f"num_attention_heads={heads}"
            )
        head_dim = c.get("head_dim") or hidden // heads
        if c.get("hidden_act", "silu") != "silu":
            raise ValueError(
                f"hidden_act={c['hidden_act']!r} is not supported by the Llama decoder; "
                "it supports 'silu' only"
            )
        if model_type == "qwen2" and c.get("use_sliding_window"):
            raise ValueError(
                "use_sliding_window=True (Qwen2 per-layer sliding windows) is not supported; "
                "set it to False or load the model through transformers (genlab.load(hf_model))"
            )
        attention_bias = bool(c.get("attention_bias", False))
        rope_scaling = c.get("rope_scaling")
        _check_rope_scaling(rope_scaling)
        return cls(
            model_type=model_type,
            vocab_size=_positive_int(c, "vocab_size"),
            hidden_size=hidden,
            intermediate_size=_positive_int(c, "intermediate_size"),
            num_layers=_positive_int(c, "num_hidden_layers"),
            num_heads=heads,
            num_kv_heads=kv_heads,
            head_dim=int(head_dim),
            rms_norm_eps=float(c["rms_norm_eps"]),
            rope_theta=float(c["rope_theta"]),
            rope_scaling=dict(rope_scaling) if rope_scaling else None,
            qkv_bias=attention_bias or model_type == "qwen2",
            o_bias=attention_bias and model_type != "qwen2",
            mlp_bias=bool(c.get("mlp_bias", False)),
            tie_word_embeddings=bool(c.get("tie_word_embeddings", False)),
            max_position_embeddings=c.get("max_position_embeddings"),
            sliding_window=c.get("sliding_window") if model_type == "mistral" else None,
        )


def _positive_int(config: dict, key: str) -> int:
    value = config.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"config field {key}={value!r} must be a positive integer")
    return value


def _check_rope_scaling(rope_scaling: Any) -> None:
    if not rope_scaling:
        return
    if not isinstance(rope_scaling, dict):
        raise ValueError(f"rope_scaling={rope_scaling!r} must be a dict or None")
    kind = rope_scaling.get("rope_type", rope_scaling.get("type", "default"))
    if kind not in SUPPORTED_ROPE_TYPES:
        raise ValueError(
            f"rope_scaling type {kind!r} is not supported by the built-in decoder; supported: "
            f"{list(SUPPORTED_ROPE_TYPES)} (load the model through transformers for others)"
        )
    needed = {
        "linear": ["factor"],
        "llama3": [
            "factor",
            "low_freq_factor",
            "high_freq_factor",
            "original_max_position_embeddings",
        ],
    }
    missing = [k for k in needed.get(kind, []) if k not in rope_scaling]
    if missing:
        raise ValueError(f"rope_scaling of type {kind!r} lacks the field(s) {missing}")


def expected_shapes(s: LlamaSettings) -> dict[str, tuple[int, ...]]:
    """Every tensor the decoder needs, by transformers' parameter name, with its shape."""
    h, d = s.hidden_size, s.head_dim
    q_out, kv_out, inter = s.num_heads * d, s.num_kv_heads * d, s.intermediate_size
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (s.vocab_size, h)}
    for i in range(s.num_layers):
        p = f"model.layers.{i}."
        shapes[p + "input_layernorm.weight"] = (h,)
        shapes[p + "self_attn.q_proj.weight"] = (q_out, h)
        shapes[p + "self_attn.k_proj.weight"] = (kv_out, h)
        shapes[p + "self_attn.v_proj.weight"] = (kv_out, h)
        shapes[p + "self_attn.o_proj.weight"] = (h, q_out)
        if s.qkv_bias:
            shapes[p + "self_attn.q_proj.bias"] = (q_out,)
            shapes[p + "self_attn.k_proj.bias"] = (kv_out,)
            shapes[p + "self_attn.v_proj.bias"] = (kv_out,)
        if s.o_bias:
            shapes[p + "self_attn.o_proj.bias"] = (h,)
        shapes[p + "post_attention_layernorm.weight"] = (h,)
        shapes[p + "mlp.gate_proj.weight"] = (inter, h)
        shapes[p + "mlp.up_proj.weight"] = (inter, h)
        shapes[p + "mlp.down_proj.weight"] = (h, inter)
        if s.mlp_bias:
            shapes[p + "mlp.gate_proj.bias"] = (inter,)
            shapes[p + "mlp.up_proj.bias"] = (inter,)
            shapes[p + "mlp.down_proj.bias"] = (h,)
    shapes["model.norm.weight"] = (h,)
    if not s.tie_word_embeddings:
        shapes["lm_head.weight"] = (s.vocab_size, h)
    return shapes


# --------------------------------------------------------------------------------------------
# Rotary position embedding
# --------------------------------------------------------------------------------------------


def rope_inverse_frequencies(s: LlamaSettings) -> torch.Tensor:
    """Inverse frequencies (head_dim // 2,) float32, with "linear" / "llama3" scaling applied.

    Default: ``1 / theta ** (2i / head_dim)``. llama3 keeps high frequencies, divides low ones
    by ``factor`` and blends in between (wavelengths measured against the original context).
    """
    d = s.head_dim
    inv = 1.0 / (s.rope_theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    scaling = s.rope_scaling or {}
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "linear":
        return inv / scaling["factor"]
    if kind == "llama3":
        factor = scaling["factor"]
        low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
        old_len = scaling["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > old_len / low, inv / factor, inv)
        smooth = (old_len / wavelen - low) / (high - low)
        blended = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
        return torch.where(medium, blended, scaled)
    return inv


class RotaryTable:
    """Rotations ``exp(i * position * inv_freq)`` as complex64, by position, grown on demand.

    The decoder stores each head's q/k dimensions interleaved (``interleave_rope_rows``), so
    that the pairs RoPE rotates together, (j, j + head_dim/2) in transformers' layout, sit side
    by side; rotating them is then one complex multiplication (:func:`apply_rotary`).

    The table starts at ``initial_length`` positions (or the first request) and doubles when a
    position beyond it is asked for, so that it holds no more than twice the positions used
    (a 4096-position table of head_dim 64 would be 1 MB, its construction three times that).
    """

    #: the table is rebuilt from inv_freq when longer: the forward cache keys inv_freq only
    _forward_key_skip = ("table",)

    def __init__(self, inv_freq: torch.Tensor, initial_length: int = 64):
        self.inv_freq = inv_freq  # (head_dim // 2,) float32
        self.initial_length = initial_length
        self.table = torch.empty(0, dtype=torch.complex64)  # (length, head_dim // 2)

    def _build(self, length: int, device: torch.device) -> None:
        positions = torch.arange(length, dtype=torch.float32)
        angles = torch.outer(positions, self.inv_freq)  # (length, head_dim // 2)
        self.table = torch.polar(torch.ones_like(angles), angles).to(device)

    def lookup(self, position_ids: torch.Tensor, max_position: int) -> torch.Tensor:
        """position_ids (rows, new) -> rotations (rows, new, 1, head_dim // 2) complex64."""
        if max_position >= self.table.shape[0]:
            length = max(self.initial_length, 2 * self.table.shape[0], 1)
            while length <= max_position:
                length *= 2
            self._build(length, position_ids.device)
        return self.table[position_ids].unsqueeze(2)


def interleave_rope_rows(weight: torch.Tensor, heads: int) -> torch.Tensor:
    """Reorder a q/k projection's output rows so RoPE pairs are adjacent within each head.

    weight (heads * head_dim, ...) in transformers' layout, where dimension j of a head is
    rotated with j + head_dim/2 -> rows ordered (0, d/2, 1, d/2 + 1, ...). Attention scores are
    unchanged, since q and k get the same order (keys in the cache are stored this way).
    """
    half = weight.shape[0] // heads // 2
    return weight.unflatten(0, (heads, 2, half)).transpose(1, 2).flatten(0, 2).contiguous()


def rope_row_order(weight: torch.Tensor, heads: int) -> torch.Tensor:
    """:func:`interleave_rope_rows` as a view (rows unflattened: (heads, d/2, 2, ...))."""
    half = weight.shape[0] // heads // 2
    return weight.unflatten(0, (heads, 2, half)).transpose(1, 2)


def stack_rows(parts: list[torch.Tensor], column_scale: torch.Tensor) -> torch.Tensor:
    """``torch.cat([p.flatten(0, -2) ...]) * column_scale`` written straight into one new
    (rows, in) tensor: no intermediate copies (each part may be any view of rows x in)."""
    rows = [math.prod(p.shape[:-1]) for p in parts]
    out = torch.empty(sum(rows), parts[0].shape[-1], dtype=parts[0].dtype, device=parts[0].device)
    for part, block in zip(parts, out.split(rows), strict=True):
        torch.mul(part, column_scale, out=block.view(part.shape))
    return out


def apply_rotary(x: torch.Tensor, rotation: torch.Tensor) -> torch.Tensor:
    """Rotate x (rows, new, heads, head_dim), dims interleaved, by rotation (rows, new, 1, d/2).

    The same numbers as transformers' ``x * cos + rotate_half(x) * sin`` on the
    non-interleaved layout; returns a new tensor of x's shape and dtype.
    """
    if x.dtype != torch.float32:  # the table is complex64: rotate in float32
        return apply_rotary(x.float(), rotation).to(x.dtype)
    pairs = torch.view_as_complex(x.unflatten(-1, (-1, 2)))  # (rows, new, heads, d/2)
    return torch.view_as_real(pairs * rotation).flatten(-2)


def rotate_rounded_(x: torch.Tensor, rotation: torch.Tensor) -> torch.Tensor:
    """:func:`apply_rotary_` for bfloat16 / float16 ``x``, rounded as the reference rounds:
    cos and sin in x's dtype, each product and each sum rounded to it. In place; returns x."""
    pairs = x.unflatten(-1, (-1, 2))
    re, im = pairs[..., 0], pairs[..., 1]
    cos, sin = rotation.real.to(x.dtype), rotation.imag.to(x.dtype)
    turned_re = re * cos - im * sin
    turned_im = im * cos + re * sin
    re.copy_(turned_re)
    im.copy_(turned_im)
    return x


def apply_rotary_(x: torch.Tensor, rotation: torch.Tensor) -> torch.Tensor:
    """:func:`apply_rotary` in place (x may be a view whose last axis is contiguous); returns x.

    One kernel and no new tensor when x is float32. ``rotation`` may also be given as real
    pairs (``torch.view_as_real`` of the complex table, (..., d/2, 2)): the compiled decoding
    step takes that form, since inductor generates no code for complex arithmetic.
    """
    if not rotation.is_complex():
        pairs = x.unflatten(-1, (-1, 2)).float()
        re, im = pairs.unbind(-1)
        cos, sin = rotation.unbind(-1)
        turned = torch.stack((re * cos - im * sin, re * sin + im * cos), dim=-1)
        return x.copy_(turned.flatten(-2))
    if x.dtype != torch.float32:
        return x.copy_(apply_rotary(x, rotation))
    torch.view_as_complex(x.unflatten(-1, (-1, 2))).mul_(rotation)
    return x


# --------------------------------------------------------------------------------------------
# The decoder
# --------------------------------------------------------------------------------------------


class LlamaLayer:
    """One decoder layer's weights, stored the way the forward pass uses them.

    Matrices are in :func:`~genlab.runtime.matmul.pack_weight` form (out, in as shapes):
    qkv: out = q_out + 2 * kv_out, q and k rows interleaved for RoPE, columns scaled by the
    input RMSNorm weight times sqrt(hidden) (see ``LlamaDecoder._rms_divisor``); o: in =
    q_out, out = hidden; gate_up: out = 2 * intermediate (gate then up), columns scaled by
    the post-attention RMSNorm weight times sqrt(hidden); down: in = intermediate, out =
    hidden. Biases are plain vectors (or None).

    In bfloat16 / float16 the norms are not folded (``attn_norm``, ``mlp_norm``: the RMSNorm
    weights, None in float32): the layer then rounds where the reference rounds (see
    ``LlamaDecoder._layer``), so that its tokens follow the reference's in that dtype.
    """

    __slots__ = (
        "qkv",
        "qkv_bias",
        "o",
        "o_bias",
        "gate_up",
        "gate_up_bias",
        "down",
        "down_bias",
        "attn_norm",
        "mlp_norm",
    )

    def __init__(self, **tensors: torch.Tensor | None):
        for name in self.__slots__:
            setattr(self, name, tensors.get(name))


class LlamaDecoder(BuiltinDecoder):
    """A Llama-family causal LM implementing genlab's model protocol (see ``base.py``).

    Build it with :func:`genlab.models.architectures.build_decoder` (transformers names) or
    :meth:`from_tensors`. ``forward`` returns float32 logits (rows, kept, vocab).
    """

    def __init__(
        self,
        settings: LlamaSettings,
        info: ModelInfo,
        embed: torch.Tensor,
        layers: list[LlamaLayer],
        norm: torch.Tensor,
        head: torch.Tensor,
    ):
        self.settings = settings
        self.info = info
        self.name = info.name
        self.embed = embed  # (vocab, hidden)
        self.layers = layers
        self.norm = norm  # (hidden,)
        self.head = head  # (vocab, hidden), pack_weight form (packed: a copy of embed's if tied)
        self.rope = RotaryTable(rope_inverse_frequencies(settings))
        self.scale = settings.head_dim**-0.5
        floor = math.sqrt(settings.hidden_size * settings.rms_norm_eps)  # see _rms_divisor
        self.norm_floor = torch.tensor(floor, dtype=head.dtype, device=head.device)

    def __repr__(self) -> str:
        s = self.settings
        return (
            f"LlamaDecoder({self.name!r}, {s.model_type}, {s.num_layers} layers, hidden "
            f"{s.hidden_size}, heads {s.num_heads}/{s.num_kv_heads} kv, vocab {s.vocab_size}, "
            f"{str(self.dtype).removeprefix('torch.')})"
        )

    # ---- construction ----------------------------------------------------------------------

    @classmethod
    def from_tensors(
        cls,
        settings: LlamaSettings,
        tensors: dict[str, torch.Tensor],
        info: ModelInfo,
        dtype: torch.dtype | None = torch.float32,
        parts: int | None = None,
        packed: bool | None = None,
        quantization: str | None = None,
        blocks: dict | None = None,
    ) -> LlamaDecoder:
        """Assemble from tensors named as in :func:`expected_shapes` (already shape-checked).

        quantization: "int4" or "int8" (:mod:`genlab.runtime.quant`): the matrices quantized,
        the norms applied unfolded, the embedding and head int8; blocks: a GGUF file's own
        4-bit blocks by tensor name (``(codes, scale, minimum)``), used as they are for int4;
        for int8, callables giving the float32 values of matrices that ``tensors`` holds as
        shapes alone (``meta``), called as each is quantized (one float matrix at a time).

        packed: the matrices' form (see :func:`~genlab.runtime.matmul.pack_weight`): None
        packs them where oneDNN works (the default), False keeps row blocks; parts: row
        blocks per matrix in that form (default: the count measured fastest here, see
        :func:`~genlab.runtime.matmul.decoder_form`). Entries of
        ``tensors`` are removed as they are used (the caller's dict is emptied).
        """
        threads.configure()  # thread defaults for shared machines (genlab/runtime/threads.py)
        if quantization is not None:
            packed, parts = False, 1  # views until quantized: never a packed copy
        # the matrices' form and row blocks: as given, else measured (matmul.decoder_form)
        choice, packed, target = decoder_form(tensors, dtype, packed, parts)

        def get(name: str) -> torch.Tensor:
            t = tensors.pop(name).detach()  # consumed: see build_decoder's consume
            if t.is_meta and quantization == "int8" and name.startswith("model.layers."):
                t = blocks.pop(name)()  # its floats, made now (gguf_blocks' floats=True)
            return t.to(dtype) if dtype is not None else t

        def maybe(name: str) -> torch.Tensor | None:
            return get(name) if name in tensors else None

        def pack(weight: torch.Tensor, parts_of=()) -> torch.Tensor:
            """The matrix in its form; quantized, from the file's blocks of ``parts_of``
            ((name, row order or None) for each part, in order) where it has them."""
            if quantization is None:
                return pack_weight(weight, target, packed)
            from ..runtime.quant import blocks_of, quantize_matrix

            return quantize_matrix(weight, quantization, blocks_of(blocks, parts_of))

        nh, nkv = settings.num_heads, settings.num_kv_heads
        norm_scale = math.sqrt(settings.hidden_size)
        low = (dtype or tensors["model.embed_tokens.weight"].dtype) != torch.float32
        low = low or quantization is not None  # the norms cannot be folded into 4-bit blocks
        layers = []
        for i in range(settings.num_layers):
            p = f"model.layers.{i}."
            a, m = p + "self_attn.", p + "mlp."
            # RMSNorm weights (times sqrt(hidden), see _rms_divisor) folded into the columns
            # of the projections that follow them
            attn_norm = get(p + "input_layernorm.weight")
            mlp_norm = get(p + "post_attention_layernorm.weight")
            if low:  # norms applied as the reference does (see _layer); matrices as stored
                attn_fold = mlp_fold = torch.ones((), dtype=attn_norm.dtype)
            else:
                attn_fold, mlp_fold = attn_norm * norm_scale, mlp_norm * norm_scale
            qkv = stack_rows(  # q and k rows interleaved for RoPE
                [
                    rope_row_order(get(a + "q_proj.weight"), nh),
                    rope_row_order(get(a + "k_proj.weight"), nkv),
                    get(a + "v_proj.weight"),
                ],
                attn_fold,
            )
            qkv_parts = [
                (a + "q_proj.weight", lambda t: rope_row_order(t, nh)),
                (a + "k_proj.weight", lambda t: rope_row_order(t, nkv)),
                (a + "v_proj.weight", None),
            ]
            qkv_bias = None
            if settings.qkv_bias:
                qkv_bias = torch.cat([
                    interleave_rope_rows(get(a + "q_proj.bias"), nh),
                    interleave_rope_rows(get(a + "k_proj.bias"), nkv),
                    get(a + "v_proj.bias"),
                ])  # fmt: skip
            gate_up = stack_rows([get(m + "gate_proj.weight"), get(m + "up_proj.weight")], mlp_fold)
            gate_up_bias = None
            if settings.mlp_bias:
                gate_up_bias = torch.cat([get(m + "gate_proj.bias"), get(m + "up_proj.bias")])
            layers.append(
                LlamaLayer(
                    qkv=pack(qkv, qkv_parts),
                    qkv_bias=qkv_bias,
                    o=pack(get(a + "o_proj.weight"), [(a + "o_proj.weight", None)]),
                    o_bias=maybe(a + "o_proj.bias"),
                    gate_up=pack(
                        gate_up, [(m + "gate_proj.weight", None), (m + "up_proj.weight", None)]
                    ),
                    gate_up_bias=gate_up_bias,
                    down=pack(get(m + "down_proj.weight"), [(m + "down_proj.weight", None)]),
                    down_bias=maybe(m + "down_proj.bias"),
                    attn_norm=attn_norm if low else None,
                    mlp_norm=mlp_norm if low else None,
                )
            )
            release_freed_memory()  # the layer's transient copies, freed for real
        embed = get("model.embed_tokens.weight").contiguous()
        if quantization is not None:  # int8 rows, one scale per token (genlab.runtime.quant)
            from ..runtime.quant import Int8Weight

            ready = (blocks or {}).pop("model.embed_tokens.weight", None)  # from the file
            embed = ready() if ready is not None else Int8Weight.quantize(embed)
            tied = settings.tie_word_embeddings
            head = embed if tied else Int8Weight.quantize(get("lm_head.weight"))
            release_freed_memory()
        else:
            head = pack(embed if settings.tie_word_embeddings else get("lm_head.weight"))
            release_freed_memory()
        norm = get("model.norm.weight").contiguous()
        model = cls(settings, info, embed, layers, norm, head)
        model.form_choice = choice  # None when the caller chose the form
        model.info = replace(
            model.info, numerics=describe_numerics(choice, packed, norm.dtype, quantization)
        )
        return model

    # ---- protocol --------------------------------------------------------------------------

    def embed_tokens(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Token embeddings: (rows, new) -> (rows, new, hidden)."""
        if isinstance(self.embed, torch.Tensor):
            return F.embedding(input_ids, self.embed)
        return self.embed.rows(input_ids)  # int8 rows (quantization)

    def forward(
        self,
        input_ids: torch.Tensor,
        *,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        cache: KVCache | None = None,
        logits_to_keep: int = 1,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
        taps: Taps | None = None,
        inputs_embeds: torch.Tensor | None = None,
    ) -> ModelOutput:
        """Run the new tokens through the model, appending their keys/values to ``cache``.

        input_ids (rows, new), or ``inputs_embeds`` (rows, new, hidden) in their place (a
        prompt given as embeddings); attention_mask (rows, cache_len + new), 0 on padding;
        position_ids (rows, new). Returns logits (rows, kept, vocab) float32 for the last
        ``logits_to_keep`` positions (0: all), hidden_states (layers + 1 tensors of
        (rows, new, hidden): embeddings first, the last after the final norm) and attentions
        (per layer (rows, heads, new, cache_len + new)) when asked. taps: the hooks inside the
        layers for this pass (:class:`~genlab.inside.taps.Taps`), or None.
        """
        s = self.settings
        ids = input_ids if inputs_embeds is None else embeds_as_ids(self.name, inputs_embeds)
        past, attention_mask, position_ids = check_forward_inputs(
            self.name, ids, attention_mask, position_ids, cache, logits_to_keep,
            s.vocab_size, s.num_layers,
        )  # fmt: skip
        new_len = ids.shape[1]
        max_position = check_positions(self.name, position_ids, None)
        rotation = self.rope.lookup(position_ids, max_position)  # (rows, new, 1, d/2) complex
        if output_attentions:  # explicit softmax path: the reference's additive eager mask
            keep = _keep_mask(attention_mask, past, new_len, s.sliding_window)
            mask, is_causal = additive_mask(keep, self.dtype), False
        else:
            mask, is_causal = sdpa_keep_mask(
                attention_mask, past, new_len, s.sliding_window, dtype=self.dtype
            )

        if inputs_embeds is None:
            h = self.embed_tokens(input_ids)  # (rows, new, hidden)
        else:
            h = inputs_embeds.to(self.dtype)
        if taps is not None:
            h, mask = self._tap_start(
                taps, h, mask, attention_mask, past, new_len, output_attentions
            )
        hidden_states = [h] if output_hidden_states else None
        attentions = [] if output_attentions else None
        for i, layer in enumerate(self.layers):
            h, weights = self._layer(
                i, layer, h, rotation, mask, is_causal, cache, attentions, taps
            )
            if hidden_states is not None:
                hidden_states.append(h)
            if attentions is not None:
                attentions.append(weights)

        if hidden_states is not None:  # the reference's last entry is the normed output
            h = self._final_norm(h)
            hidden_states[-1] = h
            kept = h if logits_to_keep == 0 else h[:, -logits_to_keep:]
        else:
            kept = h if logits_to_keep == 0 else h[:, -logits_to_keep:]
            kept = self._final_norm(kept)
        if taps is not None and taps.wants(FINAL):
            kept = taps.fire(FINAL, kept, skip=new_len - kept.shape[1])
        return ModelOutput(
            logits=head_logits(kept, self.head),
            hidden_states=tuple(hidden_states) if hidden_states is not None else None,
            attentions=tuple(attentions) if attentions is not None else None,
        )

    __call__ = forward

    def final_norm(self, hidden: torch.Tensor) -> torch.Tensor:
        """The final RMSNorm alone: (..., hidden) -> (..., hidden). The logit lens reads
        an earlier layer as ``head_logits(final_norm(h))``."""
        return self._final_norm(hidden)

    def _tap_start(self, taps, h, mask, attention_mask, past, new_len, output_attentions):
        """``hook_embed``, and the additive mask the layers with ``attn.hook_pattern`` take
        (they materialise the probabilities, as ``output_attentions`` does)."""
        if taps.wants("hook_embed"):
            h = taps.fire("hook_embed", h)
        if taps.wants_pattern() and not output_attentions:
            keep = _keep_mask(attention_mask, past, new_len, self.settings.sliding_window)
            taps.mask = additive_mask(keep, self.dtype)
        return h, mask

    # ---- the fixed-shape decoding step (static cache, torch.compile; see base.py) ---------

    def fixed_inputs(self, input_ids, attention_mask, position_ids, cache):
        s = self.settings
        _, attention_mask, position_ids = check_forward_inputs(
            self.name, input_ids, attention_mask, position_ids, cache, 1, s.vocab_size,
            s.num_layers,
        )  # fmt: skip
        max_position = check_positions(self.name, position_ids, None)
        rotation = torch.view_as_real(self.rope.lookup(position_ids, max_position))  # real pairs
        return rotation, static_keep_mask(attention_mask, cache.capacity, s.sliding_window)

    def fixed_step(self, input_ids, rotation, keep, keys, values, slots):
        writer = SlotWriter(keys, values, slots)
        h = self.embed_tokens(input_ids)
        for i, layer in enumerate(self.layers):
            h, _ = self._layer(i, layer, h, rotation, keep, False, writer, None)
        return head_logits(self._final_norm(h), self.head)

    # ---- one layer -------------------------------------------------------------------------

    def _rms_divisor(self, h: torch.Tensor) -> torch.Tensor:
        """sqrt(sum(h**2) + hidden * eps) over the last axis: (..., hidden) -> (..., 1).

        That is sqrt(hidden) * RMS(h); the sqrt(hidden) is folded into the matrices that take
        the normed input (with the norm weights), so ``h / divisor`` is the RMSNorm in
        three kernels (a norm, hypot, the division).
        """
        return torch.hypot(torch.linalg.vector_norm(h, dim=-1, keepdim=True), self.norm_floor)

    def _rms_norm(self, h: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """RMSNorm rounded as the reference rounds it in bfloat16 / float16: normalised in
        float32, rounded to h's dtype, then times the weight in that dtype."""
        x = h.float()
        x = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + self.settings.rms_norm_eps)
        return weight * x.to(h.dtype)

    def _final_norm(self, h: torch.Tensor) -> torch.Tensor:
        if self.dtype == torch.float32:
            return F.rms_norm(
                h, (self.settings.hidden_size,), self.norm, self.settings.rms_norm_eps
            )
        return self._rms_norm(h, self.norm)

    def _layer(self, index, layer, h, rotation, mask, is_causal, cache, attentions, taps=None):
        s = self.settings
        rows, new_len, hidden = h.shape
        nh, nkv, d = s.num_heads, s.num_kv_heads, s.head_dim
        names = None if taps is None else self._layer_names(index)  # see genlab.inside.taps
        if names is not None and taps.wants(names[0]):
            h = taps.fire(names[0], h)  # hook_resid_pre
        h = h.reshape(rows * new_len, hidden)

        low = layer.attn_norm is not None  # bfloat16 / float16: round where the reference does

        # attention: one matmul for q, k and v; RoPE on q and k together, in place
        if low:
            x = self._rms_norm(h, layer.attn_norm)
        else:
            x = h / self._rms_divisor(h)  # RMSNorm; its weight is folded into the qkv matrix
        qkv = matmul(x, layer.qkv)  # (rows * new, (nh + 2 * nkv) * d), a new tensor
        if layer.qkv_bias is not None:
            qkv += layer.qkv_bias
        qkv = qkv.view(rows, new_len, nh + 2 * nkv, d)
        if low and rotation.is_complex():
            rotate_rounded_(qkv[:, :, : nh + nkv], rotation)
        else:
            apply_rotary_(qkv[:, :, : nh + nkv], rotation)
        q = qkv[:, :, :nh]  # (rows, new, nh, d)
        k = qkv[:, :, nh : nh + nkv].transpose(1, 2)  # (rows, nkv, new, d)
        v = qkv[:, :, nh + nkv :].transpose(1, 2)
        if cache is not None:
            k, v = cache.append(index, k, v)  # (rows, nkv, past + new, d)
        weights = None
        pattern = names is not None and taps.wants(names[1])
        if attentions is not None or pattern:
            edit = (lambda p: taps.fire(names[1], p, seq_axis=2)) if pattern else None
            m = mask if attentions is not None else taps.mask
            out, weights = explicit_attention(q.transpose(1, 2), k, v, m, self.scale, edit=edit)
            out = out.transpose(1, 2)
        else:
            out = F.scaled_dot_product_attention(
                q.transpose(1, 2), k, v, attn_mask=mask, is_causal=is_causal, scale=self.scale,
                enable_gqa=nkv != nh,
            ).transpose(1, 2)  # fmt: skip
        if names is not None and taps.wants(names[2]):
            out = taps.fire(names[2], out)  # hook_z: (rows, new, nh, d)
        out = out.reshape(rows * new_len, nh * d)

        # output projection with the residual added in the same product (in bfloat16: the
        # product rounded, then the sum, as the reference does)
        shape = (rows, new_len, hidden)
        h = add_product(  # hook_attn_out
            h, out, layer.o, layer.o_bias, taps, names and names[3], shape, fused=not low
        )
        if names is not None and taps.wants(names[4]):  # hook_resid_mid
            h = taps.fire(names[4], h.view(rows, new_len, hidden)).reshape(rows * new_len, hidden)

        # gated MLP: one matmul for gate and up
        if low:
            x = self._rms_norm(h, layer.mlp_norm)
        else:
            x = h / self._rms_divisor(h)  # weight folded into the gate_up matrix
        gate_up = matmul(x, layer.gate_up)  # a new tensor
        if layer.gate_up_bias is not None:
            gate_up += layer.gate_up_bias
        gate, up = gate_up.chunk(2, dim=-1)
        act = F.silu(gate).mul_(up)
        h = add_product(  # hook_mlp_out
            h, act, layer.down, layer.down_bias, taps, names and names[5], shape, fused=not low
        )
        h = h.view(rows, new_len, hidden)
        if names is not None and taps.wants(names[6]):
            h = taps.fire(names[6], h)  # hook_resid_post
        return h, weights
