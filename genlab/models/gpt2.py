"""The built-in GPT-2 family decoder.

One block, top to bottom::

    x ─ LayerNorm ─ c_attn (q|k|v) ─ append k, v to the cache ─ attention ─ c_proj ─(+x)
      ─ LayerNorm ─ c_fc ─ gelu_new ─ c_proj ─(+)

Positions are learned (``wpe``), added to the token embeddings; the vocabulary projection is
tied to ``wte`` unless the config says otherwise. transformers stores GPT-2's projections as
``Conv1D`` weights of shape (in, out); they are transposed once at load into the (out, in)
layout that ``F.linear`` uses. Input checks and masks are shared with ``llama.py``.

Example (not run as a test: it needs a GPT-2 checkpoint's config and weights)::

    >>> from genlab.models.architectures import build_decoder
    >>> lm = build_decoder(gpt2_config_dict, gpt2_state_dict)  # doctest: +SKIP
    >>> out = lm.forward(ids, attention_mask=torch.ones_like(ids),  # doctest: +SKIP
    ...                  position_ids=torch.arange(ids.shape[1])[None], cache=lm.new_cache(1))
    >>> out.logits.shape                                      # (1, 1, 50257)  # doctest: +SKIP
"""

from __future__ import annotations

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

CONFIG_DEFAULTS: dict[str, dict[str, Any]] = {
    "gpt2": {
        "vocab_size": 50257,
        "n_positions": 1024,
        "n_embd": 768,
        "n_layer": 12,
        "n_head": 12,
        "n_inner": None,
        "activation_function": "gelu_new",
        "layer_norm_epsilon": 1e-5,
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
        "tie_word_embeddings": True,
        "bos_token_id": 50256,
        "eos_token_id": 50256,
        "pad_token_id": None,
    }
}

# the names transformers' GPT2Config also accepts for its fields
_ALIASES = {
    "hidden_size": "n_embd",
    "num_attention_heads": "n_head",
    "num_hidden_layers": "n_layer",
    "max_position_embeddings": "n_positions",
}

ACTIVATIONS = {
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_fast": lambda x: F.gelu(x, approximate="tanh"),
    "gelu": F.gelu,
    "relu": F.relu,
    "silu": F.silu,
    "swish": F.silu,
}


@dataclass(frozen=True)
class GPT2Settings:
    """The architecture numbers of a GPT-2 decoder (``num_layers`` etc. in genlab's words)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    head_dim: int
    max_positions: int
    layer_norm_eps: float
    activation: str
    scale_attn_weights: bool
    scale_attn_by_inverse_layer_idx: bool
    tie_word_embeddings: bool

    @classmethod
    def from_config(cls, config: dict) -> GPT2Settings:
        """Read a GPT-2 config.json dict; left-out fields take transformers' defaults."""
        c = dict(CONFIG_DEFAULTS["gpt2"])
        for key, value in config.items():
            c[_ALIASES.get(key, key)] = value
        hidden, heads = c["n_embd"], c["n_head"]
        for key in ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head"):
            if not isinstance(c[key], int) or isinstance(c[key], bool) or c[key] <= 0:
                raise ValueError(f"config field {key}={c[key]!r} must be a positive integer")
        if hidden % heads:
            raise ValueError(f"n_embd={hidden} must be divisible by n_head={heads}")
        if c["activation_function"] not in ACTIVATIONS:
            raise ValueError(
                f"activation_function={c['activation_function']!r} is not supported; "
                f"supported: {sorted(ACTIVATIONS)}"
            )
        return cls(
            vocab_size=c["vocab_size"],
            hidden_size=hidden,
            intermediate_size=c["n_inner"] or 4 * hidden,
            num_layers=c["n_layer"],
            num_heads=heads,
            head_dim=hidden // heads,
            max_positions=c["n_positions"],
            layer_norm_eps=float(c["layer_norm_epsilon"]),
            activation=c["activation_function"],
            scale_attn_weights=bool(c["scale_attn_weights"]),
            scale_attn_by_inverse_layer_idx=bool(c["scale_attn_by_inverse_layer_idx"]),
            tie_word_embeddings=bool(c["tie_word_embeddings"]),
        )


def expected_shapes(s: GPT2Settings) -> dict[str, tuple[int, ...]]:
    """Every tensor the decoder needs, by transformers' name, in transformers' (Conv1D) shape."""
    h, inter = s.hidden_size, s.intermediate_size
    shapes: dict[str, tuple[int, ...]] = {
        "transformer.wte.weight": (s.vocab_size, h),
        "transformer.wpe.weight": (s.max_positions, h),
    }
    for i in range(s.num_layers):
        p = f"transformer.h.{i}."
        shapes[p + "ln_1.weight"] = (h,)
        shapes[p + "ln_1.bias"] = (h,)
        shapes[p + "attn.c_attn.weight"] = (h, 3 * h)
        shapes[p + "attn.c_attn.bias"] = (3 * h,)
        shapes[p + "attn.c_proj.weight"] = (h, h)
        shapes[p + "attn.c_proj.bias"] = (h,)
        shapes[p + "ln_2.weight"] = (h,)
        shapes[p + "ln_2.bias"] = (h,)
        shapes[p + "mlp.c_fc.weight"] = (h, inter)
        shapes[p + "mlp.c_fc.bias"] = (inter,)
        shapes[p + "mlp.c_proj.weight"] = (inter, h)
        shapes[p + "mlp.c_proj.bias"] = (h,)
    shapes["transformer.ln_f.weight"] = (h,)
    shapes["transformer.ln_f.bias"] = (h,)
    if not s.tie_word_embeddings:
        shapes["lm_head.weight"] = (s.vocab_size, h)
    return shapes


class GPT2Block:
    """One block's weights: LayerNorm vectors, biases, and the four projections in
    :func:`~genlab.runtime.matmul.pack_weight` form."""

    __slots__ = (
        "ln1_weight",
        "ln1_bias",
        "qkv",
        "qkv_bias",
        "proj",
        "proj_bias",
        "ln2_weight",
        "ln2_bias",
        "fc",
        "fc_bias",
        "out",
        "out_bias",
    )

    def __init__(self, **tensors: torch.Tensor):
        for name in self.__slots__:
            setattr(self, name, tensors[name])


class GPT2Decoder(BuiltinDecoder):
    """A GPT-2 causal LM implementing genlab's model protocol (see ``base.py``)."""

    def __init__(
        self,
        settings: GPT2Settings,
        info: ModelInfo,
        wte: torch.Tensor,
        wpe: torch.Tensor,
        blocks: list[GPT2Block],
        ln_f: tuple[torch.Tensor, torch.Tensor],
        head: torch.Tensor,
    ):
        self.settings = settings
        self.info = info
        self.name = info.name
        self.wte = wte  # (vocab, hidden)
        self.wpe = wpe  # (max_positions, hidden)
        self.layers = blocks  # named as in LlamaDecoder (early-exit views slice it)
        self.ln_f = ln_f
        self.head = head  # (vocab, hidden) in pack_weight form (packed: a copy of wte's when tied)
        self.act = ACTIVATIONS[settings.activation]
        base = settings.head_dim**-0.5 if settings.scale_attn_weights else 1.0
        self.scales = [
            base / (i + 1) if settings.scale_attn_by_inverse_layer_idx else base
            for i in range(settings.num_layers)
        ]

    def __repr__(self) -> str:
        s = self.settings
        return (
            f"GPT2Decoder({self.name!r}, {s.num_layers} layers, hidden {s.hidden_size}, heads "
            f"{s.num_heads}, vocab {s.vocab_size}, {str(self.dtype).removeprefix('torch.')})"
        )

    @classmethod
    def from_tensors(
        cls,
        settings: GPT2Settings,
        tensors: dict[str, torch.Tensor],
        info: ModelInfo,
        dtype: torch.dtype | None = torch.float32,
        parts: int | None = None,
        packed: bool | None = None,
    ) -> GPT2Decoder:
        """Assemble from tensors named as in :func:`expected_shapes` (already shape-checked).

        packed, parts: the matrices' form, as in
        :meth:`~genlab.models.llama.LlamaDecoder.from_tensors`. Entries of ``tensors`` are
        removed as they are used.
        """
        threads.configure()  # thread defaults for shared machines (genlab/runtime/threads.py)
        # the matrices' form and row blocks: as given, else measured (matmul.decoder_form)
        choice, packed, target = decoder_form(tensors, dtype, packed, parts)

        def get(name: str) -> torch.Tensor:
            t = tensors.pop(name).detach()  # consumed: see build_decoder's consume
            return (t.to(dtype) if dtype is not None else t).contiguous()

        def pack(weight: torch.Tensor) -> torch.Tensor:  # (out, in)
            return pack_weight(weight, target, packed)

        blocks = []
        for i in range(settings.num_layers):
            p = f"transformer.h.{i}."
            blocks.append(
                GPT2Block(  # Conv1D weights are (in, out): transposed (copied) once, here
                    ln1_weight=get(p + "ln_1.weight"),
                    ln1_bias=get(p + "ln_1.bias"),
                    qkv=pack(get(p + "attn.c_attn.weight").t()),
                    qkv_bias=get(p + "attn.c_attn.bias"),
                    proj=pack(get(p + "attn.c_proj.weight").t()),
                    proj_bias=get(p + "attn.c_proj.bias"),
                    ln2_weight=get(p + "ln_2.weight"),
                    ln2_bias=get(p + "ln_2.bias"),
                    fc=pack(get(p + "mlp.c_fc.weight").t()),
                    fc_bias=get(p + "mlp.c_fc.bias"),
                    out=pack(get(p + "mlp.c_proj.weight").t()),
                    out_bias=get(p + "mlp.c_proj.bias"),
                )
            )
        wte = get("transformer.wte.weight")
        tied = settings.tie_word_embeddings
        head = pack(wte if tied else get("lm_head.weight"))
        ln_f = (get("transformer.ln_f.weight"), get("transformer.ln_f.bias"))
        wpe = get("transformer.wpe.weight")
        model = cls(settings, info, wte, wpe, blocks, ln_f, head)
        model.form_choice = choice  # None when the caller chose the form
        model.info = replace(model.info, numerics=describe_numerics(choice, packed, ln_f[0].dtype))
        return model

    # ---- protocol --------------------------------------------------------------------------

    def embed_tokens(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Token embeddings (without positions): (rows, new) -> (rows, new, hidden)."""
        return F.embedding(input_ids, self.wte)

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
        """Same contract as :meth:`genlab.models.llama.LlamaDecoder.forward` (``inputs_embeds``
        take the token embeddings' place; the position embeddings are added to them).

        input_ids (rows, new); attention_mask (rows, cache_len + new); position_ids
        (rows, new), each < ``n_positions``. Returns float32 logits (rows, kept, vocab).
        """
        s = self.settings
        ids = input_ids if inputs_embeds is None else embeds_as_ids(self.name, inputs_embeds)
        past, attention_mask, position_ids = check_forward_inputs(
            self.name, ids, attention_mask, position_ids, cache, logits_to_keep,
            s.vocab_size, s.num_layers,
        )  # fmt: skip
        check_positions(self.name, position_ids, s.max_positions)
        new_len = ids.shape[1]
        if output_attentions:
            keep = _keep_mask(attention_mask, past, new_len)
            mask, is_causal = additive_mask(keep, self.dtype), False
        else:
            mask, is_causal = sdpa_keep_mask(attention_mask, past, new_len, dtype=self.dtype)

        tok = (
            self.embed_tokens(input_ids) if inputs_embeds is None else inputs_embeds.to(self.dtype)
        )
        if taps is None:
            h = tok + F.embedding(position_ids, self.wpe)
        else:
            h = self._tap_start(taps, tok, position_ids, attention_mask, past, new_len)
        hidden_states = [h] if output_hidden_states else None
        attentions = [] if output_attentions else None
        for i, block in enumerate(self.layers):
            h, weights = self._block(i, block, h, mask, is_causal, cache, past, attentions, taps)
            if hidden_states is not None:
                hidden_states.append(h)
            if attentions is not None:
                attentions.append(weights)

        w, b = self.ln_f
        if hidden_states is not None:
            h = F.layer_norm(h, (s.hidden_size,), w, b, s.layer_norm_eps)
            hidden_states[-1] = h
            kept = h if logits_to_keep == 0 else h[:, -logits_to_keep:]
        else:
            kept = h if logits_to_keep == 0 else h[:, -logits_to_keep:]
            kept = F.layer_norm(kept, (s.hidden_size,), w, b, s.layer_norm_eps)
        if taps is not None and taps.wants(FINAL):
            kept = taps.fire(FINAL, kept, skip=new_len - kept.shape[1])
        return ModelOutput(
            logits=head_logits(kept, self.head),
            hidden_states=tuple(hidden_states) if hidden_states is not None else None,
            attentions=tuple(attentions) if attentions is not None else None,
        )

    __call__ = forward

    def final_norm(self, hidden: torch.Tensor) -> torch.Tensor:
        """The final LayerNorm alone: (..., hidden) -> (..., hidden). The logit lens reads
        an earlier layer as ``head_logits(final_norm(h))``."""
        s, (w, b) = self.settings, self.ln_f
        return F.layer_norm(hidden, (s.hidden_size,), w, b, s.layer_norm_eps)

    def _tap_start(self, taps, tok, position_ids, attention_mask, past, new_len):
        """The token embeddings ``tok`` (rows, new, hidden) and the position embeddings through
        ``hook_embed`` and ``hook_pos_embed``, and the additive mask the layers with
        ``attn.hook_pattern`` take."""
        pos = F.embedding(position_ids, self.wpe)
        if taps.wants("hook_embed"):
            tok = taps.fire("hook_embed", tok)
        if taps.wants("hook_pos_embed"):
            pos = taps.fire("hook_pos_embed", pos)
        if taps.wants_pattern():
            taps.mask = additive_mask(_keep_mask(attention_mask, past, new_len), self.dtype)
        return tok + pos

    # ---- the fixed-shape decoding step (static cache, torch.compile; see base.py) ---------

    def fixed_inputs(self, input_ids, attention_mask, position_ids, cache):
        s = self.settings
        _, attention_mask, position_ids = check_forward_inputs(
            self.name, input_ids, attention_mask, position_ids, cache, 1, s.vocab_size,
            s.num_layers,
        )  # fmt: skip
        check_positions(self.name, position_ids, s.max_positions)
        positions = F.embedding(position_ids, self.wpe)
        return positions, static_keep_mask(attention_mask, cache.capacity)

    def fixed_step(self, input_ids, positions, keep, keys, values, slots):
        writer = SlotWriter(keys, values, slots)
        h = self.embed_tokens(input_ids) + positions
        for i, block in enumerate(self.layers):
            h, _ = self._block(i, block, h, keep, False, writer, 0, None)
        s, (w, b) = self.settings, self.ln_f
        return head_logits(F.layer_norm(h, (s.hidden_size,), w, b, s.layer_norm_eps), self.head)

    def _block(self, index, block, h, mask, is_causal, cache, past, attentions, taps=None):
        s = self.settings
        rows, new_len, hidden = h.shape
        nh, d = s.num_heads, s.head_dim
        names = None if taps is None else self._layer_names(index)  # see genlab.inside.taps
        if names is not None and taps.wants(names[0]):
            h = taps.fire(names[0], h)  # hook_resid_pre
        h = h.reshape(rows * new_len, hidden)

        x = F.layer_norm(h, (hidden,), block.ln1_weight, block.ln1_bias, s.layer_norm_eps)
        qkv = (matmul(x, block.qkv) + block.qkv_bias).view(rows, new_len, 3, nh, d)
        q, k, v = (qkv[:, :, j].transpose(1, 2) for j in range(3))  # (rows, nh, new, d)
        if cache is not None:
            k, v = cache.append(index, k, v)  # (rows, nh, past + new, d)
        scale = self.scales[index]
        pattern = names is not None and taps.wants(names[1])
        if attentions is None and not pattern:
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, is_causal=is_causal, scale=scale
            )
            weights = None
        else:
            edit = (lambda p: taps.fire(names[1], p, seq_axis=2)) if pattern else None
            out, weights = explicit_attention(
                q, k, v, mask if attentions is not None else taps.mask, scale, causal_past=past,
                float32_softmax=False, edit=edit,
            )  # the reference's eager GPT-2 masking  # fmt: skip
        out = out.transpose(1, 2)
        if names is not None and taps.wants(names[2]):
            out = taps.fire(names[2], out)  # hook_z: (rows, new, nh, d)
        out = out.reshape(rows * new_len, hidden)

        # projections with the residual added in the same product
        shape = (rows, new_len, hidden)
        h = add_product(h, out, block.proj, block.proj_bias, taps, names and names[3], shape)
        if names is not None and taps.wants(names[4]):  # hook_resid_mid
            h = taps.fire(names[4], h.view(rows, new_len, hidden)).reshape(rows * new_len, hidden)
        x = F.layer_norm(h, (hidden,), block.ln2_weight, block.ln2_bias, s.layer_norm_eps)
        x = self.act(matmul(x, block.fc) + block.fc_bias)
        h = add_product(h, x, block.out, block.out_bias, taps, names and names[5], shape)
        h = h.view(rows, new_len, hidden)
        if names is not None and taps.wants(names[6]):
            h = taps.fire(names[6], h)  # hook_resid_post
        return h, weights
