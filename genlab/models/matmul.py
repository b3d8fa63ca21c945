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
  ``x @ W^T`` would run on a single core in torch's CPU BLAS); on other CPUs a single block
  is faster, so the block count is measured too.

Under ``torch.compile`` a product is the operator ``genlab::matmul``, opaque to the compiler
(inductor would otherwise rewrite the one-column batched product, or cannot take a packed
weight).

Which form a decoder stores is measured, not fixed: the cost of the packed one-row product
against the split one depends on the machine (benchmarks/README.md, "Figures behind the
code"), so :func:`choose_form` times both forms once per process (per dtype and thread
count) on matrices the size of a small model's layers, for one row and for 16 rows, and
keeps the faster for each (the split form at its faster block count). Where one row
prefers the split form, several rows the packed one, and memory allows a second copy of
the weights, a decoder keeps **both** (:class:`TwoForms`): the split view for decoding
one row, the packed copy for prompts and batches.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

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
    ``packed``: True, False, "both"); ms: the measured milliseconds of each form for one and
    for 16 rows over the probe matrices (``{"packed": (one, sixteen), "split": (...)}``,
    empty when nothing was measured); reason: one line for people; parts: the row blocks
    of the split form that was measured fastest (None: not measured, the decoder's default).
    """

    form: str
    reason: str
    ms: dict = field(default_factory=dict)
    parts: int | None = None

    @property
    def packed(self) -> bool | str:
        """The form as :func:`pack_weight`'s ``packed`` argument."""
        return {"packed": True, "split": False, "both": "both"}[self.form]


# (dtype, threads) -> (ms dict) measured once per process
_MEASURED: dict[tuple, dict] = {}
# the probe: a small model's four layer matrices (out, in), four layers: ~56 MB in float32,
# more than a last-level cache, so that products read memory as a decoding step does
PROBE_SHAPES = ((960, 576), (576, 576), (3072, 576), (576, 1536))
PROBE_LAYERS = 4
PROBE_ROWS = 16
PROBE_REPEATS = 3
MANY_ROWS_MARGIN = 0.75  # split serves several rows only when this much faster than packed
BOTH_MEMORY_SHARE = 0.25  # keep both forms when the extra copy is at most this share of free memory
# ... and only when split decodes one row clearly faster than packed: a second copy of the
# weights (538 MB for the demo) is not worth a near tie (benchmarks/README.md, "Figures
# behind the code")
BOTH_ONE_ROW_GAIN = 0.85


def measure_forms(dtype: torch.dtype = torch.float32, repeats: int = PROBE_REPEATS) -> dict:
    """Milliseconds of the packed and the split form for 1 and :data:`PROBE_ROWS` rows over
    :data:`PROBE_SHAPES` x :data:`PROBE_LAYERS` matrices (best of ``repeats``, the forms
    alternating): ``{"packed": (one_row, many_rows), "split": (one_row, many_rows),
    "split_parts": n}``. The split form is timed with one row block per thread and with a
    single block (one batched product over the whole matrix); ``split`` holds the variant
    faster for one row and ``split_parts`` its block count (which count is faster differs
    from one CPU to another: benchmarks/README.md).
    Measured once per process for each dtype and thread count; later calls return the
    stored figures."""
    key = (dtype, torch.get_num_threads())
    if key in _MEASURED:
        return _MEASURED[key]
    threads = torch.get_num_threads()
    weights = [
        torch.full(shape, 0.01, dtype=dtype) for _ in range(PROBE_LAYERS) for shape in PROBE_SHAPES
    ]
    forms = {"packed": [pack_weight(w, threads, packed=True) for w in weights]}
    for parts in dict.fromkeys((threads, 1)):
        forms[f"split{parts}"] = [pack_weight(w, parts, packed=False) for w in weights]
    inputs = {}
    for rows in (1, PROBE_ROWS):
        for w in weights:
            inputs.setdefault((rows, w.shape[1]), torch.full((rows, w.shape[1]), 0.5, dtype=dtype))
    best = {(name, rows): float("inf") for name in forms for rows in (1, PROBE_ROWS)}
    with torch.inference_mode():
        for i in range(repeats + 1):  # the first round warms up (oneDNN creates its kernels)
            for rows in (1, PROBE_ROWS):
                for name in forms if i % 2 else reversed(list(forms)):
                    start = time.perf_counter()
                    for w, m in zip(weights, forms[name], strict=True):
                        _matmul(inputs[(rows, w.shape[1])], m, None)
                    seconds = time.perf_counter() - start
                    if i:
                        best[(name, rows)] = min(best[(name, rows)], seconds)
    ms = {name: (1e3 * best[(name, 1)], 1e3 * best[(name, PROBE_ROWS)]) for name in forms}
    split = min((name for name in ms if name != "packed"), key=lambda name: ms[name][0])
    ms = {"packed": ms["packed"], "split": ms[split], "split_parts": int(split[5:])}
    _MEASURED[key] = ms
    return ms


def split_parts(dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu") -> int:
    """Row blocks for the split form here: the count :func:`measure_forms` found fastest
    for one row (once per process), or one block per thread where it cannot measure."""
    if can_pack(torch.empty(1, 1, dtype=dtype, device=device)):
        return measure_forms(dtype)["split_parts"]
    return torch.get_num_threads()


def free_memory_bytes() -> int | None:
    """Memory this process may still take: the smaller of the system's available memory and
    what its cgroup limit leaves (a container, e.g. Binder); None where neither is known."""
    limits = []
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemAvailable:"):
                limits.append(int(line.split()[1]) * 1024)
    except OSError:
        pass
    for limit_file, usage_file in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),  # cgroup v2
        (
            "/sys/fs/cgroup/memory/memory.limit_in_bytes",
            "/sys/fs/cgroup/memory/memory.usage_in_bytes",
        ),
    ):
        try:
            limit = open(limit_file).read().strip()
            usage = int(open(usage_file).read().strip())
        except (OSError, ValueError):
            continue
        if limit.isdigit() and int(limit) < 1 << 60:
            limits.append(max(0, int(limit) - usage))
        break
    return min(limits) if limits else None


def choose_form(
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    weight_bytes: int = 0,
) -> FormChoice:
    """The form a decoder's matrices should take here (see the module docstring).

    Where oneDNN cannot pack (``device`` not the CPU, float16, a torch without it): split.
    Otherwise both forms are timed (:func:`measure_forms`, once per process): the faster
    for one row and the faster for 16 rows; when they differ (one row: split, 16 rows:
    packed) both are kept if ``weight_bytes`` (the model's matrices) fit in
    :data:`BOTH_MEMORY_SHARE` of the free memory, else the one-row winner (decoding one row
    is what the widgets and notebooks do). ``GENLAB_WEIGHT_FORM=packed|split|both`` sets it.
    """
    forced = os.environ.get("GENLAB_WEIGHT_FORM", "").strip().lower()
    probe = torch.empty(1, 1, dtype=dtype, device=device)
    packable = can_pack(probe)
    if forced:
        if forced not in ("packed", "split", "both"):
            raise ValueError(
                f"GENLAB_WEIGHT_FORM={forced!r}: give packed, split or both (or unset it)"
            )
        if forced != "split" and not packable:
            return FormChoice("split", f"GENLAB_WEIGHT_FORM={forced} but oneDNN cannot pack here")
        # the form is the user's; the split form's block count is still the one measured
        parts = split_parts(dtype, device) if forced != "packed" else None
        return FormChoice(forced, f"GENLAB_WEIGHT_FORM={forced}", {}, parts)
    if not packable:
        where = f"{dtype} on {torch.device(device).type}"
        return FormChoice("split", f"no oneDNN linear for {where}: split row blocks")
    ms = measure_forms(dtype)
    (p1, p16), (s1, s16) = ms["packed"], ms["split"]
    parts = ms.get("split_parts")
    one = "split" if s1 < p1 else "packed"
    clear_one = s1 < BOTH_ONE_ROW_GAIN * p1
    # several rows: packed unless split is clearly faster. The probe may sit in a large
    # cache and put split ahead where the model's weights favour packed
    # (benchmarks/README.md, "Figures behind the code")
    many = "split" if s16 < MANY_ROWS_MARGIN * p16 else "packed"
    blocks = f" in {parts} block{'s' if parts != 1 else ''}" if parts else ""
    timing = (
        f"1 row: packed {p1:.2f} ms, split{blocks} {s1:.2f} ms; {PROBE_ROWS} rows: packed "
        f"{p16:.2f} ms, split {s16:.2f} ms ({torch.get_num_threads()} threads, {dtype})"
    )
    if one == many:
        return FormChoice(one, f"{one} is faster for 1 and {PROBE_ROWS} rows: {timing}", ms, parts)
    free = free_memory_bytes()
    if (
        one == "split"
        and clear_one
        and free is not None
        and weight_bytes <= BOTH_MEMORY_SHARE * free
    ):
        return FormChoice(
            "both",
            f"split for 1 row, packed for {PROBE_ROWS}; a packed copy ({weight_bytes / 1e6:.0f} "
            f"MB) fits in free memory ({free / 1e9:.1f} GB): both. {timing}",
            ms,
            parts,
        )
    why = (
        "one copy only (memory)"
        if one == "split" and clear_one
        else f"one copy only (split is not {1 - BOTH_ONE_ROW_GAIN:.0%} faster for one row)"
        if one == "split"
        else "the packed copy serves both (a second copy is kept only for a faster one row)"
    )
    return FormChoice(
        one,
        f"{one} for 1 row, {many} for {PROBE_ROWS}; {why}: the one-row winner. {timing}",
        ms,
        parts,
    )


def decoder_form(
    tensors: dict[str, torch.Tensor],
    dtype: torch.dtype | None,
    packed: bool | str | None,
    parts: int | None,
) -> tuple[FormChoice | None, bool | str, int]:
    """(choice, packed, parts) for a decoder about to be built from ``tensors`` (converted
    to ``dtype``): ``packed`` None is measured (:func:`choose_form`, whose choice is
    returned; else None); ``parts`` None is the split form's block count measured fastest
    here (:func:`split_parts`), or one a thread for packed matrices."""
    dtype, device, size = matrix_bytes(tensors, dtype)
    choice = None
    if packed is None:  # measured once per process
        choice = choose_form(dtype, device, size)
        packed = choice.packed
    if not parts:
        parts = (choice and choice.parts) or (
            torch.get_num_threads() if packed is True else split_parts(dtype, device)
        )
    return choice, packed, parts


def matrix_bytes(
    tensors: dict[str, torch.Tensor], dtype: torch.dtype | None
) -> tuple[torch.dtype, torch.device, int]:
    """(dtype, device, bytes) of a checkpoint's 2-D tensors once converted to ``dtype``
    (None: as stored): the arguments of :func:`choose_form` for a decoder about to be built."""
    first = next(iter(tensors.values()))
    dtype = dtype or first.dtype
    size = torch.empty((), dtype=dtype).element_size()
    total = sum(t.numel() for t in tensors.values() if t.dim() == 2)
    return dtype, first.device, total * size


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
        return weight.nbytes  # quantized (genlab.models.quant)

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
    elif not isinstance(weight, torch.Tensor):  # 4 or 8 bits (genlab.models.quant)
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
    :func:`pack_weight` weight) -> float32 logits (rows, kept, vocab)."""
    rows, n_kept = kept.shape[:2]
    logits = matmul(kept.reshape(rows * n_kept, -1), head).view(rows, n_kept, -1)
    return logits if logits.dtype == torch.float32 else logits.float()


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
