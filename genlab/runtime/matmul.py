"""Matrix products of the built-in decoders: weights packed once, products on every core.

Every weight matrix (out, in) is stored in the form :func:`pack_weight` chose for it and
multiplied by :func:`matmul`:

* **packed** (CPU, float32 / bfloat16, where torch has oneDNN): the matrix reordered once
  into oneDNN's blocked layout. One product then runs on all cores for any number of rows:
  one row (a decoding step) at close to the memory bandwidth, 4 to 16 rows (beams, batches,
  ``num_return_sequences``) at close to the CPU's arithmetic peak, and a prompt several
  times faster than torch's own CPU matrix product.
* **split** (anything else, e.g. CUDA or float16): blocks of rows,
  (parts, out // parts, in), a view of the matrix, multiplied as ``W @ x`` in one batched
  product. With one block per thread the blocks run on separate cores (where a one-row
  ``x @ W^T`` would run on a single core in torch's CPU BLAS); on Intel CPUs a single
  block is faster (:func:`split_parts`).

Under ``torch.compile`` a product is the operator ``genlab::matmul``, opaque to the compiler
(inductor would otherwise rewrite the one-column batched product, or cannot take a packed
weight).

The two forms sum their products in different orders, so they give logits that differ in
the last bits (up to 6e-5 on the demo). Which form a decoder stores is therefore decided
from what the machine is and the dtype (:func:`choose_form`) or given by the user
(``GENLAB_WEIGHT_FORM``), never timed: two processes on one machine
load the same form, whatever else the machine is doing, and give the same bits. The choice
and its reason are in ``lm.model.form_choice``. ``GENLAB_WEIGHT_FORM=both`` keeps a second
copy (:class:`TwoForms`): the split view for one row, the packed copy for several.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

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


class TwoForms:
    """A weight kept in both forms: ``split`` (row blocks, a view of the matrix) for
    one-row products, ``packed`` (oneDNN) for several rows. :func:`matmul` picks by the
    number of rows; the tensor-like attributes describe the (out, in) matrix."""

    __slots__ = ("packed", "split")

    def __init__(self, packed: torch.Tensor, split: torch.Tensor):
        self.packed, self.split = packed, split

    @property
    def dtype(self) -> torch.dtype:
        return self.split.dtype

    @property
    def device(self) -> torch.device:
        return self.split.device

    @property
    def shape(self) -> torch.Size:
        return self.packed.shape

    is_mkldnn = False

    def numel(self) -> int:
        """Elements of one copy (the products read one of the two)."""
        return self.split.numel()

    def element_size(self) -> int:
        return self.split.element_size()

    def __repr__(self) -> str:
        return f"TwoForms({tuple(self.shape)}, {self.dtype}: packed + {self.split.shape[0]} blocks)"


@dataclass(frozen=True)
class FormChoice:
    """What :func:`choose_form` decided, and why.

    form: "packed", "split" or "both" (the argument :func:`pack_weight` takes as
    ``packed``: True, False, "both"); reason: one line for people (``lm.info`` shows it);
    parts: the row blocks of the split form (None for the packed form alone).
    """

    form: str
    reason: str
    parts: int | None = None

    @property
    def packed(self) -> bool | str:
        """The form as :func:`pack_weight`'s ``packed`` argument."""
        return {"packed": True, "split": False, "both": "both"}[self.form]


#: the forms ``GENLAB_WEIGHT_FORM`` may name
FORMS = ("packed", "split", "both")


def cpu_vendor() -> str:
    """The CPU's vendor string from ``/proc/cpuinfo`` ("GenuineIntel", "AuthenticAMD", ...;
    "" where it cannot be read)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def machine_summary() -> str:
    """One line: the CPU vendor and torch's CPU capability (the kernels it dispatches to),
    what the weight form is chosen from."""
    capability = torch.backends.cpu.get_cpu_capability()
    return f"CPU {cpu_vendor() or 'unknown'}, torch CPU capability {capability}"


def split_parts(device: torch.device | str = "cpu") -> int:
    """Row blocks for the split form, from what the machine is: on an Intel CPU one block
    (one batched product over the whole matrix read about twice as fast there as one block
    per thread), elsewhere one block per thread (benchmarks/README.md, "Figures behind the
    code")."""
    if torch.device(device).type == "cpu" and cpu_vendor() == "GenuineIntel":
        return 1
    return torch.get_num_threads()


def choose_form(
    dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu"
) -> FormChoice:
    """The form a decoder's matrices take here, from what the machine is and what the user
    asked, never from a timing: the same machine, thread count and arguments always give
    the same form, and so the same bits.

    * ``GENLAB_WEIGHT_FORM=packed|split|both`` sets it (both: a second copy of the weights,
      split for one row and packed for several);
    * float32: split row blocks (:func:`split_parts`), one copy, which the tied head shares
      with the embedding. Decoding one row is what the lessons and panels do, and there the
      split form was the faster on the CPUs measured, while packed runs many rows faster
      (benchmarks/README.md, "Figures behind the code");
    * bfloat16 where torch's oneDNN linear packs it (a CPU): packed, one copy (the faster
      form for one row there too);
    * anything else (CUDA, float16, a torch without oneDNN): split row blocks.
    """
    forced = os.environ.get("GENLAB_WEIGHT_FORM", "").strip().lower()
    packable = can_pack(torch.empty(1, 1, dtype=dtype, device=device))
    if forced:
        if forced not in FORMS:
            raise ValueError(
                f"GENLAB_WEIGHT_FORM={forced!r}: give packed, split or both (or unset it)"
            )
        if forced != "split" and not packable:
            return FormChoice(
                "split",
                f"GENLAB_WEIGHT_FORM={forced} but oneDNN cannot pack {dtype} here: split",
                split_parts(device),
            )
        parts = split_parts(device) if forced != "packed" else None
        return FormChoice(forced, f"GENLAB_WEIGHT_FORM={forced}", parts)
    if not packable:
        where = f"{dtype} on {torch.device(device).type}"
        return FormChoice(
            "split", f"no oneDNN linear for {where}: split row blocks", split_parts(device)
        )
    if dtype == torch.float32:
        parts = split_parts(device)
        return FormChoice(
            "split",
            f"float32 ({machine_summary()}): split in {parts} block{'s' if parts > 1 else ''}, "
            "one copy, fastest for one row; GENLAB_WEIGHT_FORM=packed|both for batches",
            parts,
        )
    return FormChoice(
        "packed",
        f"oneDNN packs {dtype} here ({machine_summary()}); one copy; "
        "GENLAB_WEIGHT_FORM=split|both chooses another",
    )


def describe_numerics(
    choice: FormChoice | None,
    packed: bool | str,
    dtype: torch.dtype,
    quantization: str | None = None,
) -> str:
    """One line for ``lm.info.numerics``: the weights' dtype and form and why (what decides
    the bits a load gives)."""
    if quantization is not None:
        from .quant import compute_dtype

        activations = str(compute_dtype()).removeprefix("torch.")
        return (
            f"{quantization} weights, {activations} activations in the products "
            "(GENLAB_QUANT_COMPUTE=float32|bfloat16 to choose)"
        )
    name = str(dtype).removeprefix("torch.")
    if choice is not None:
        return f"{name} weights, {choice.form} form: {choice.reason}"
    form = {True: "packed", False: "split", "both": "both"}[packed]
    return f"{name} weights, {form} form: given by the caller"


def decoder_form(
    tensors: dict[str, torch.Tensor],
    dtype: torch.dtype | None,
    packed: bool | str | None,
    parts: int | None,
) -> tuple[FormChoice | None, bool | str, int]:
    """(choice, packed, parts) for a decoder about to be built from ``tensors`` (converted
    to ``dtype``): ``packed`` None is chosen by :func:`choose_form` (whose choice is
    returned; else None); ``parts`` None is :func:`split_parts`, or one a thread for packed
    matrices."""
    first = next(iter(tensors.values()))
    choice = None
    if packed is None:
        choice = choose_form(dtype or first.dtype, first.device)
        packed = choice.packed
    if not parts:
        parts = (choice and choice.parts) or (
            torch.get_num_threads() if packed is True else split_parts(first.device)
        )
    return choice, packed, parts


def pack_weight(
    weight: torch.Tensor, parts: int, packed: bool | str | None = None
) -> torch.Tensor | TwoForms:
    """(out, in) weight -> the form :func:`matmul` takes.

    packed: True (oneDNN's layout: a new tensor, ``is_mkldnn``), False (the split form, see
    :func:`split_weight`, with ``parts`` row blocks), "both" (a :class:`TwoForms` holding
    the two) or None: packed where :func:`can_pack` says it works. ValueError for
    packed=True or "both" where it does not. (Decoders pass :func:`choose_form`'s choice.)
    """
    if packed is None:
        packed = can_pack(weight)
    elif packed and not can_pack(weight):
        raise ValueError(
            f"packed={packed!r}: torch's oneDNN linear is not available for {weight.dtype} "
            f"weights on {weight.device}; use packed=None (choose) or False (split row blocks)"
        )
    if packed == "both":
        weight = weight.contiguous()
        return TwoForms(
            torch.ops.mkldnn._reorder_linear_weight(weight, PACK_ROWS),
            split_weight(weight, row_blocks(weight.shape[0], parts)),
        )
    if packed:
        return torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), PACK_ROWS)
    return split_weight(weight, row_blocks(weight.shape[0], parts))


def split_weight(weight: torch.Tensor, parts: int) -> torch.Tensor:
    """(out, in) weight -> (parts, out // parts, in): blocks of rows (a view when contiguous)."""
    out_features, in_features = weight.shape
    return weight.contiguous().view(parts, out_features // parts, in_features)


def dense_weight(weight: torch.Tensor | TwoForms) -> torch.Tensor:
    """A weight of :func:`pack_weight` back as the plain (out, in) matrix (for inspection)."""
    if type(weight) is TwoForms:
        weight = weight.split
    if not isinstance(weight, torch.Tensor):  # quantized: what its codes stand for
        return weight.dense()
    if weight.is_mkldnn:
        return weight.to_dense()
    return weight.reshape(-1, weight.shape[-1])


def weight_bytes(model) -> int:
    """Bytes of a built-in decoder's layer matrices and head, one copy each whatever their
    form: what a decoding step reads (an embedding lookup reads a row, not the table)."""

    def size(weight) -> int:
        if isinstance(weight, torch.Tensor) or type(weight) is TwoForms:
            return dense_weight(weight).nbytes
        return weight.nbytes  # quantized (genlab.runtime.quant)

    names = ("qkv", "o", "gate_up", "down")
    return sum(size(getattr(layer, n)) for layer in model.layers for n in names) + size(model.head)


def out_features(weight: torch.Tensor | TwoForms) -> int:
    """The number of outputs of a weight in either form (packed (out, in); split
    (parts, out // parts, in))."""
    if type(weight) is TwoForms or not isinstance(weight, torch.Tensor):
        return weight.shape[0]
    return weight.shape[0] if weight.dim() == 2 else weight.shape[0] * weight.shape[1]


def matmul(x: torch.Tensor, weight: torch.Tensor, add: torch.Tensor | None = None):
    """``x @ W^T (+ add)`` for W stored by :func:`pack_weight`: x (m, in); add (m, out) or
    None -> (m, out). Under ``torch.compile`` the operator ``genlab::matmul``."""
    if type(weight) is TwoForms:  # one row: the split view; more: the packed copy
        weight = weight.split if x.shape[0] == 1 else weight.packed
    elif not isinstance(weight, torch.Tensor):  # 4 or 8 bits (genlab.runtime.quant)
        return weight.matmul(x, add)
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
# low-level API, whose calls cost less than torch.library.custom_op's (benchmarks/README.md).
_OPS = torch.library.Library("genlab", "DEF")
_OPS.define("matmul(Tensor x, Tensor weight, Tensor? add) -> Tensor")
_OPS.impl("matmul", _matmul, "CompositeExplicitAutograd")


@torch.library.register_fake("genlab::matmul", lib=_OPS)
def _matmul_shape(x, weight, add):
    return x.new_empty(x.shape[0], out_features(weight))


def head_logits(kept: torch.Tensor, head: torch.Tensor) -> torch.Tensor:
    """Normed hidden states (rows, kept, hidden) through the vocabulary head (a
    :func:`pack_weight` weight) -> float32 logits (rows, kept, vocab), shaken when
    ``GENLAB_SHAKE`` asks (:func:`shake`)."""
    rows, n_kept = kept.shape[:2]
    logits = matmul(kept.reshape(rows * n_kept, -1), head).view(rows, n_kept, -1)
    logits = logits if logits.dtype == torch.float32 else logits.float()
    return shake(logits) if SHAKE_ULPS else logits


#: ``GENLAB_SHAKE=N``: every logit of the built-in decoders moved by up to N float32 ulps
#: (a test-only setting, read at import; 0 or unset: off). See :func:`shake`.
SHAKE_ULPS = float(os.environ.get("GENLAB_SHAKE", "0") or 0)
_SHAKE_PATTERN: dict[int, torch.Tensor] = {}


def shake(logits: torch.Tensor, ulps: float | None = None) -> torch.Tensor:
    """``logits`` (..., vocab) with each token's logit scaled by ``1 + f * ulps * 2**-23``,
    where ``f`` in [-1, 1] is a fixed pseudo-random number per token id: the numerics
    shaken by about what another summation order does (another CPU, thread count or
    weight form). A lesson whose stored outputs change under it sits on a knife edge:
    ``make notebooks-shaken`` runs every notebook so."""
    ulps = SHAKE_ULPS if ulps is None else ulps
    vocab = logits.shape[-1]
    pattern = _SHAKE_PATTERN.get(vocab)
    if pattern is None:
        ids = torch.arange(vocab, dtype=torch.int64)
        mixed = (ids * 2654435761 + 12345) % (1 << 32)  # Knuth's multiplicative hash
        pattern = _SHAKE_PATTERN[vocab] = (mixed.double() / (1 << 31) - 1.0).float()
    factor = 1.0 + pattern.to(logits.device) * (ulps * 2.0**-23)
    return logits * factor


DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def check_dtype(dtype) -> torch.dtype:
    """A loader's ``dtype`` argument checked: None -> float32; float32, bfloat16 or float16
    (a torch dtype or its name, "bfloat16"); anything else is a ValueError saying what to give."""
    if dtype is None:
        return torch.float32
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype.removeprefix("torch."), dtype)
    if dtype not in DTYPES:
        raise ValueError(
            f"dtype={dtype!r}: give torch.float32 (the default), torch.bfloat16 or torch.float16"
        )
    return dtype
