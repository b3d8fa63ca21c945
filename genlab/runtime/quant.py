"""Weights in 4 or 8 bits, multiplied by torch's own CPU kernels: ``quantization="int4"`` or
``"int8"`` in :func:`genlab.load`.

* **int4**: groups of 32 weights along a row, each with a scale and a zero point (asymmetric):
  ``w = q * scale + minimum`` with ``q`` in 0..15. Products run in
  ``torch.ops.aten._weight_int4pack_mm_for_cpu`` (torch's kernel writes the same value as
  ``(q - 8) * scale + zero`` with ``zero = minimum + 8 * scale``). A GGUF file whose matrices
  are Q4_1 blocks (the demo) gives its own blocks: Q4_1 stores exactly ``q * d + m`` per block
  of 32, so the int4 weights dequantize to the float32 path's weights, bit for bit.
  Matrices in float32 or bfloat16 are quantized group by group (min and max of each group).
* **int8**: one scale per output row (symmetric, ``w = q * scale``, ``q`` in -127..127);
  products run in ``torch._weight_int8pack_mm``.

In both, the embedding and the output head (tied in the demo) are int8 with one scale per
token: an embedding row is ``q[token] * scale[token]``. The norms, RoPE, attention and the
residual stream stay float32; only the matrix products take the quantized weights. Their
activations go in as bfloat16 (torch's float32 path for these kernels is a slow fallback on the
CPUs measured; :func:`compute_dtype`); the scales are then rounded to bfloat16 inside the
product, and the result comes back as float32.

What it costs in quality is measured, not assumed: ``lm.compare(other, prompts)`` gives the
top-1 agreement and the mean KL divergence per token against another LM (the float32 model).

>>> w = torch.randn(64, 64)
>>> q = Int4Weight.quantize(w)
>>> float((q.dense() - w).abs().max()) < float(w.abs().max()) / 10
True
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F

#: the quantization names genlab.load accepts
MODES = ("int4", "int8")
GROUP = 32  # int4 group size along a row (Q4_1's block)
_INNER_K_TILES = 2  # torch's int4 packing: K must be a multiple of 16 * this


def check_quantization(value) -> str | None:
    """``quantization=`` checked: None, "int4" or "int8" (any case); else a ValueError."""
    if value is None:
        return None
    if isinstance(value, str) and value.strip().lower() in MODES:
        return value.strip().lower()
    raise ValueError(
        f"quantization={value!r} is not supported: give 'int4' (4-bit groups of 32), 'int8' "
        "(8 bits, one scale per row) or None (the weights as they are)"
    )


def compute_dtype() -> torch.dtype:
    """The dtype the activations of the int4 and int8 products take: bfloat16 (torch's float32
    path for these kernels is a slow fallback on the CPUs measured), or what
    ``GENLAB_QUANT_COMPUTE=float32|bfloat16`` sets. Never timed: the two sum in different
    precisions, and the bits of a load must not depend on what else the machine is doing."""
    forced = os.environ.get("GENLAB_QUANT_COMPUTE", "").strip().lower()
    if forced:
        if forced not in ("float32", "bfloat16"):
            raise ValueError(
                f"GENLAB_QUANT_COMPUTE={forced!r}: give float32 or bfloat16 (or unset it)"
            )
        return getattr(torch, forced)
    return torch.bfloat16


class QuantizedWeight:
    """A quantized (out, in) matrix: ``matmul(x, add)``, ``dense()`` (float32), and the
    ``shape``, ``dtype`` (of the activations: float32), ``device`` and ``nbytes`` a decoder
    reads."""

    mode = ""
    dtype = torch.float32  # of the activations in and out

    def __init__(self, out_features: int, in_features: int) -> None:
        self.shape = torch.Size((out_features, in_features))
        self._compute = torch.bfloat16

    def set_compute(self, dtype: torch.dtype) -> None:
        """The dtype the activations take inside the product (see :func:`compute_dtype`)."""
        self._compute = dtype

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    def matmul(self, x: torch.Tensor, add: torch.Tensor | None = None) -> torch.Tensor:
        y = self._product(x.to(self._compute).contiguous()).to(x.dtype)
        return y if add is None else y.add_(add)

    def _product(self, x: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def dense(self) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def __repr__(self) -> str:
        out, inp = self.shape
        return f"{type(self).__name__}({out}x{inp}, {self.nbytes / 1e6:.1f} MB)"


class Int4Weight(QuantizedWeight):
    """Groups of 32 along each row: 4-bit codes, a scale and a minimum per group."""

    mode = "int4"

    def __init__(self, codes: torch.Tensor, scale: torch.Tensor, minimum: torch.Tensor):
        """codes (out, in) integers 0..15; scale, minimum (out, in // 32) float32."""
        out, inp = codes.shape
        if inp % GROUP or inp % (16 * _INNER_K_TILES):
            raise ValueError(
                f"int4 needs in_features divisible by {GROUP}; got {inp}: use "
                "quantization='int8' for this model"
            )
        if out % 16:  # torch's int4 packing works on blocks of 16 output rows
            raise ValueError(
                f"int4 needs out_features divisible by 16 (torch's int4 packing); got {out} "
                "rows (a fused q|k|v matrix counts q, k and v together): use "
                "quantization='int8' for this model"
            )
        super().__init__(out, inp)
        self.scale = scale.float().contiguous()
        self.minimum = minimum.float().contiguous()
        self.packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(
            codes.to(torch.int32).contiguous(), _INNER_K_TILES
        )
        self.set_compute(torch.bfloat16)

    def set_compute(self, dtype: torch.dtype) -> None:
        # the kernel's (in // 32, out, 2) scales and zeros, in the activations' dtype
        zero = self.minimum + 8 * self.scale
        pairs = torch.stack([self.scale, zero], dim=-1).transpose(0, 1)
        self._scales_zeros = pairs.contiguous().to(dtype)
        self._compute = dtype

    @classmethod
    def quantize(cls, weight: torch.Tensor) -> Int4Weight:
        """Group-wise min/max quantization of a float matrix (out, in)."""
        if weight.shape[-1] % GROUP:
            raise ValueError(
                f"int4 needs in_features divisible by {GROUP}; got {weight.shape[-1]}: use "
                "quantization='int8' for this model"
            )
        w = weight.detach().float()
        groups = w.unflatten(1, (-1, GROUP))
        low, high = groups.amin(-1), groups.amax(-1)
        scale = (high - low) / 15
        scale = torch.where(scale > 0, scale, torch.ones_like(scale))
        codes = ((groups - low[..., None]) / scale[..., None]).round_().clamp_(0, 15)
        return cls(codes.flatten(1).to(torch.uint8), scale, low)

    def _product(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten._weight_int4pack_mm_for_cpu(x, self.packed, GROUP, self._scales_zeros)

    def codes(self) -> torch.Tensor:
        """The 4-bit codes (out, in) as uint8, read back from the kernel's packed layout: the
        kernel itself multiplies the identity by (q - 8) * 1 + 8 = q (exact in bfloat16)."""
        eye = torch.eye(self.shape[1], dtype=torch.bfloat16)
        pairs = torch.ones(self.shape[1] // GROUP, self.shape[0], 2, dtype=torch.bfloat16)
        pairs[..., 1] = 8
        q = torch.ops.aten._weight_int4pack_mm_for_cpu(eye, self.packed, GROUP, pairs)
        return q.t().round().to(torch.uint8)

    def dense(self) -> torch.Tensor:
        """The float32 matrix these weights stand for: ``q * scale + minimum`` per group."""
        groups = self.codes().float().unflatten(1, (-1, GROUP))
        return (self.scale[..., None] * groups + self.minimum[..., None]).flatten(1)

    @property
    def nbytes(self) -> int:
        return self.packed.nbytes + self.scale.nbytes + self.minimum.nbytes


class Int8Weight(QuantizedWeight):
    """8-bit codes with one scale per row: ``w = q * scale``."""

    mode = "int8"

    def __init__(self, codes: torch.Tensor, scale: torch.Tensor):
        super().__init__(*codes.shape)
        self.codes = codes.to(torch.int8).contiguous()
        self.scale = scale.float().contiguous()

    @classmethod
    def quantize(cls, weight: torch.Tensor) -> Int8Weight:
        """Symmetric quantization with one scale per row of a float matrix (out, in)."""
        w = weight.detach().float()
        scale = w.abs().amax(1) / 127
        scale = torch.where(scale > 0, scale, torch.ones_like(scale))
        codes = (w / scale[:, None]).round_().clamp_(-127, 127)
        return cls(codes.to(torch.int8), scale)

    def _product(self, x: torch.Tensor) -> torch.Tensor:
        return torch._weight_int8pack_mm(x, self.codes, self.scale.to(x.dtype))

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        """Rows ``ids`` (any shape) of the float matrix: an embedding lookup."""
        return F.embedding(ids, self.codes).float() * F.embedding(ids, self.scale[:, None])

    def dense(self) -> torch.Tensor:
        return self.codes.float() * self.scale[:, None]

    @property
    def nbytes(self) -> int:
        return self.codes.nbytes + self.scale.nbytes


def release_freed_memory() -> None:
    """Give the C heap's freed pages back to the system (glibc's ``malloc_trim``; nothing
    elsewhere). Building a decoder frees many transient matrices of a few MB, which glibc
    keeps in its heap (how much: benchmarks/README.md "Figures behind the code")."""
    import ctypes
    import sys

    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):  # not glibc (musl): nothing to do
            pass


def quantize_matrix(weight, mode: str, blocks=None) -> QuantizedWeight:
    """``weight`` (a float matrix) in ``mode``; ``blocks`` (codes, scale, minimum) of the same
    matrix from a file are used as they are for int4."""
    if mode == "int4":
        out = Int4Weight(*blocks) if blocks is not None else Int4Weight.quantize(weight)
    else:
        out = Int8Weight.quantize(weight)
    out.set_compute(compute_dtype())
    return out


def blocks_of(blocks: dict | None, parts) -> tuple | None:
    """The file's blocks for a matrix assembled from ``parts`` ((tensor name, row order or
    None) each, stacked by rows in order), or None unless every part has blocks. The blocks
    are removed from ``blocks`` as they are used."""
    if not blocks or not parts or not all(name in blocks for name, _ in parts):
        return None
    pieces = []
    for name, order in parts:
        arrays = blocks.pop(name)
        arrays = arrays() if callable(arrays) else arrays  # read when used (gguf_blocks)
        pieces.append([(order(a) if order else a).flatten(0, -2) for a in arrays])
    return tuple(torch.cat([p[i] for p in pieces]) for i in range(3))


def gguf_q4_1_blocks(data, rows: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A GGUF Q4_1 tensor's raw bytes (rows, blocks * 20) -> (codes (rows, cols) uint8,
    scale d (rows, blocks) float32, minimum m (rows, blocks) float32), so that the weights
    are ``codes * d + m`` per block of 32, as llama.cpp (and gguf's dequantize) read them.
    A block is d (float16), m (float16) and 16 bytes: the low nibbles are the block's first
    16 weights, the high nibbles the last 16."""
    import numpy as np

    raw = np.asarray(data, dtype=np.uint8).reshape(rows, -1, 20)
    d = raw[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32)
    m = raw[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float32)
    nibbles = raw[..., 4:]
    codes = np.concatenate([nibbles & 0x0F, nibbles >> 4], axis=-1).reshape(rows, -1)
    return torch.from_numpy(codes), torch.from_numpy(d), torch.from_numpy(m)
