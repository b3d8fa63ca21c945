"""Matrix products of the built-in decoders: weights packed once, products on every core.

Every weight matrix (out, in) is stored in the form :func:`pack_weight` chose for it and
multiplied by :func:`matmul`:

* **packed** (CPU, float32 / bfloat16, where torch has oneDNN): the matrix reordered once
  into oneDNN's blocked layout. One product then runs on all cores for any number of rows:
  one row (a decoding step) at close to the memory bandwidth, 4 to 16 rows (beams, batches,
  ``num_return_sequences``) at close to the CPU's arithmetic peak, and a prompt several
  times faster than torch's own CPU matrix product.
* **split** (anything else, e.g. CUDA or float16): blocks of rows,
  (parts, out // parts, in), a view of the matrix. A one-row product ``x @ W^T`` runs on a
  single core in torch's CPU BLAS; as ``W @ x`` over blocks of rows it becomes a batched
  product whose blocks run on separate cores.

Under ``torch.compile`` a product is the operator ``genlab::matmul``, opaque to the compiler
(inductor would otherwise rewrite the one-column batched product, or cannot take a packed
weight).
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
PACK_ROWS = 16  # the row count oneDNN packs for; 1 to 200 rows all run well with it

_PACKABLE: dict[torch.dtype, bool] = {}  # dtype -> oneDNN packing works here (probed once)


def can_pack(weight: torch.Tensor) -> bool:
    """True when ``weight`` can be stored packed: a CPU tensor of a dtype for which torch's
    oneDNN linear runs and agrees with ``F.linear`` (probed once per dtype)."""
    dtype = weight.dtype
    if weight.device.type != "cpu" or dtype not in (torch.float32, torch.bfloat16):
        return False
    if dtype not in _PACKABLE:
        _PACKABLE[dtype] = _probe(dtype)
    return _PACKABLE[dtype]


def _probe(dtype: torch.dtype) -> bool:
    try:
        if not torch.backends.mkldnn.is_available():
            return False
        gen = torch.Generator().manual_seed(0)
        w = torch.randn(24, 40, generator=gen).to(dtype)
        x = torch.randn(3, 40, generator=gen).to(dtype)
        add = torch.randn(3, 24, generator=gen).to(dtype)
        packed = torch.ops.mkldnn._reorder_linear_weight(w, PACK_ROWS)
        want = F.linear(x.float(), w.float())
        tol = 1e-4 if dtype == torch.float32 else 0.1
        got = _packed(x, packed, None).float()
        got_add = _packed(x, packed, add).float()
        return bool(
            torch.allclose(got, want, atol=tol, rtol=tol)
            and torch.allclose(got_add, want + add.float(), atol=tol, rtol=tol)
        )
    except Exception:  # an operator missing from this torch build: use the split form
        return False


def pack_weight(weight: torch.Tensor, parts: int, packed: bool | None = None) -> torch.Tensor:
    """(out, in) weight -> the form :func:`matmul` takes.

    packed: True (oneDNN's layout: a new tensor, ``is_mkldnn``), False (the split form, see
    :func:`split_weight`, with ``parts`` row blocks), or None: packed where
    :func:`can_pack` says it works. ValueError for packed=True where it does not.
    """
    if packed is None:
        packed = can_pack(weight)
    elif packed and not can_pack(weight):
        raise ValueError(
            f"packed=True: torch's oneDNN linear is not available for {weight.dtype} weights "
            f"on {weight.device}; use packed=None (choose) or False (split row blocks)"
        )
    if packed:
        return torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), PACK_ROWS)
    return split_weight(weight, row_blocks(weight.shape[0], parts))


def split_weight(weight: torch.Tensor, parts: int) -> torch.Tensor:
    """(out, in) weight -> (parts, out // parts, in): blocks of rows (a view when contiguous)."""
    out_features, in_features = weight.shape
    return weight.contiguous().view(parts, out_features // parts, in_features)


def dense_weight(weight: torch.Tensor) -> torch.Tensor:
    """A weight of :func:`pack_weight` back as the plain (out, in) matrix (for inspection)."""
    if weight.is_mkldnn:
        return weight.to_dense()
    return weight.reshape(-1, weight.shape[-1])


def out_features(weight: torch.Tensor) -> int:
    """The number of outputs of a weight in either form (packed (out, in); split
    (parts, out // parts, in))."""
    return weight.shape[0] if weight.dim() == 2 else weight.shape[0] * weight.shape[1]


def matmul(x: torch.Tensor, weight: torch.Tensor, add: torch.Tensor | None = None):
    """``x @ W^T (+ add)`` for W stored by :func:`pack_weight`: x (m, in); add (m, out) or
    None -> (m, out). Under ``torch.compile`` the operator ``genlab::matmul``."""
    if torch.compiler.is_compiling():
        return torch.ops.genlab.matmul(x, weight, add)
    return _matmul(x, weight, add)


def _matmul(x: torch.Tensor, weight: torch.Tensor, add: torch.Tensor | None):
    if weight.is_mkldnn:
        return _packed(x, weight, add)
    return _split(x, weight, add)


def _packed(x: torch.Tensor, weight: torch.Tensor, add: torch.Tensor | None):
    if x.requires_grad or (add is not None and add.requires_grad):
        if torch.is_grad_enabled():  # oneDNN's operator has no backward: ours does
            return _PackedProduct.apply(x, weight, add)
    x = x if x.is_contiguous() else x.contiguous()
    if add is None:
        return torch.ops.mkldnn._linear_pointwise(x, weight, None, "none", [], "")
    add = add if add.is_contiguous() else add.contiguous()
    return torch.ops.mkldnn._linear_pointwise.binary(x, add, weight, None, "add")


class _PackedProduct(torch.autograd.Function):
    """A packed product that gradients flow through, to ``x`` and ``add`` (attributions,
    saliency); the weights are constants. Backward unpacks the weight for its product."""

    @staticmethod
    def forward(ctx, x, weight, add):
        ctx.weight = weight
        ctx.has_add = add is not None
        with torch.no_grad():
            return _packed(x.detach(), weight, None if add is None else add.detach())

    @staticmethod
    def backward(ctx, grad):
        grad_x = grad @ ctx.weight.to_dense().to(grad.dtype)
        return grad_x, None, grad if ctx.has_add else None


def _split(x: torch.Tensor, weight: torch.Tensor, add: torch.Tensor | None):
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


# The operator form of matmul for compiled graphs. Registered through torch.library's
# low-level API: a call costs ~5 us more than the function (torch.library.custom_op: ~30 us).
_OPS = torch.library.Library("genlab", "DEF")
_OPS.define("matmul(Tensor x, Tensor weight, Tensor? add) -> Tensor")
_OPS.impl("matmul", _matmul, "CompositeExplicitAutograd")


@torch.library.register_fake("genlab::matmul", lib=_OPS)
def _matmul_shape(x, weight, add):
    return x.new_empty(x.shape[0], out_features(weight))


def head_logits(kept: torch.Tensor, head: torch.Tensor) -> torch.Tensor:
    """Normed hidden states (rows, kept, hidden) through the vocabulary head (a
    :func:`pack_weight` weight) -> float32 logits (rows, kept, vocab)."""
    rows, n_kept = kept.shape[:2]
    logits = matmul(kept.reshape(rows * n_kept, -1), head).view(rows, n_kept, -1)
    return logits if logits.dtype == torch.float32 else logits.float()
