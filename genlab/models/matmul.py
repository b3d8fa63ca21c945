"""Matrix products that use every core for one row, shared by the built-in decoders.

A decoding step multiplies one row (or a few) by each weight matrix. Split into row blocks,
the same product becomes a batched one whose blocks run on all cores; under
``torch.compile`` it is the opaque operator ``genlab::split_matmul``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def row_blocks(out_features: int, target: int) -> int:
    """The largest divisor of ``out_features`` that is at most ``target`` (at least 1)."""
    for parts in range(max(1, min(target, out_features)), 0, -1):
        if out_features % parts == 0:
            return parts
    return 1


SPLIT_ROWS = 16  # measured crossover (2 cores): split blocks win up to 16 rows at a time


def split_weight(weight: torch.Tensor, parts: int) -> torch.Tensor:
    """(out, in) weight -> (parts, out // parts, in): blocks of rows (a view when contiguous).

    A one-row product ``x @ W^T`` (decoding one token) runs on a single core in torch's CPU
    BLAS, at well under the machine's memory bandwidth. Computed as ``W @ x`` over blocks of
    rows (:func:`split_matmul`), the same product is a batched one whose blocks run on
    separate cores, at close to the bandwidth of a plain ``sum()``.
    """
    out_features, in_features = weight.shape
    return weight.contiguous().view(parts, out_features // parts, in_features)


def split_matmul(x: torch.Tensor, weight: torch.Tensor, add: torch.Tensor | None = None):
    """``x @ W^T (+ add)`` for W stored by :func:`split_weight`.

    x (m, in); weight (parts, out // parts, in); add (m, out) or None -> (m, out). Up to
    ``SPLIT_ROWS`` rows (decoding, beams) the blocks run as a batched product; for more rows
    (a prompt) the product is compute-bound and torch's matrix product is faster.

    Under ``torch.compile`` it is the operator ``genlab::split_matmul``, opaque to the
    compiler: inductor (CPU) would rewrite the one-column batched product as a multiply and
    a sum, or copy the shared column into a layout BLAS is slow on.
    """
    if torch.compiler.is_compiling():
        return torch.ops.genlab.split_matmul(x, weight, add)
    return _split_matmul(x, weight, add)


def _split_matmul(x: torch.Tensor, weight: torch.Tensor, add: torch.Tensor | None):
    parts, width, in_features = weight.shape
    m = x.shape[0]
    if m > SPLIT_ROWS:
        whole = weight.view(parts * width, in_features)  # the (out, in) matrix
        return F.linear(x, whole) if add is None else torch.addmm(add, x, whole.t())
    # x as columns, shared by every block: (parts, in, m), strides (0, 1, in); BLAS takes
    # the fast path for this layout (a (0, 1, 1)-strided vector is ten times slower)
    columns = x.t().expand(parts, in_features, m)
    if add is None:
        y = torch.bmm(weight, columns)  # (parts, width, m)
    else:
        add = add.view(parts, width, 1) if m == 1 else add.t().unflatten(0, (parts, width))
        y = torch.baddbmm(add, weight, columns)
    if m == 1:  # decoding one row: the reshape is a view
        return y.view(1, parts * width)
    return y.permute(2, 0, 1).contiguous().view(m, parts * width)


# The operator form of split_matmul for compiled graphs. Registered through torch.library's
# low-level API: a call costs ~5 us more than the function (torch.library.custom_op: ~30 us).
_OPS = torch.library.Library("genlab", "DEF")
_OPS.define("split_matmul(Tensor x, Tensor weight, Tensor? add) -> Tensor")
_OPS.impl("split_matmul", _split_matmul, "CompositeExplicitAutograd")


@torch.library.register_fake("genlab::split_matmul", lib=_OPS)
def _split_matmul_shape(x, weight, add):
    return x.new_empty(x.shape[0], weight.shape[0] * weight.shape[1])


def head_logits(kept: torch.Tensor, head: torch.Tensor) -> torch.Tensor:
    """Normed hidden states (rows, kept, hidden) through the vocabulary head (split_weight
    form) -> float32 logits (rows, kept, vocab)."""
    rows, n_kept = kept.shape[:2]
    logits = split_matmul(kept.reshape(rows * n_kept, -1), head).view(rows, n_kept, -1)
    return logits if logits.dtype == torch.float32 else logits.float()
