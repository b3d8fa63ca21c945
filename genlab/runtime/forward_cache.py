"""Forward passes kept between runs: :class:`ForwardCache`.

Exploring means running the same prompt again and again with other settings: a temperature,
a top-k, a seed, a longer ``max_new_tokens``, going back to a value seen a moment ago. The
model's forward pass does not depend on any of those. It depends on the tokens it is given,
on the keys and values already in the cache, on the weights, and on whatever hooks can
change it. So the logits and the new keys and values of a one-row forward pass can be kept
and handed to any later run of the same LM that reaches the same tokens *the same way*; that
run's results are bit-identical to a cold model's.

"The same way": the cache is a tree of *chunks*, the blocks of tokens each forward pass took
(the whole prompt in one pass, then one token per step). A prompt that only begins like an
earlier one does not reuse that one's keys and values: a cold model computes its prompt in
one pass, and the floats of one pass over 12 positions need not equal those of a pass over
10 and then one over 2. Each node keeps the logits of its chunk's last position and the keys
and values of its positions; a run served from a node appends those to its own cache, so its
next forward pass sees exactly the cache a cold run would have built.

Nothing is served, and nothing is kept, where a cached pass could differ from a fresh one or
could not give what was asked:

* several rows, padding, an encoder-decoder model, ``use_cache=False``, a static or compiled
  cache, or a model whose cache is not genlab's :class:`~genlab.models.base.KVCache` (a
  transformers model through the adapter);
* hidden states or attentions asked for, or logits for more than the last position;
* hooks inside the model: hook points inside the layers in the run's hooks, a model whose
  ``has_active_hooks()`` is true, a ``forward`` replaced on the model object;
* other weights or other parts: see "Never stale" below.

**Never stale.** A kept pass is served only to a run whose model is, at that moment, the
one that computed it. Each tree's root is keyed by the model's *weights key*
(:func:`weights_of`), in two parts:

* its structure (:func:`weights_key`): every object the model holds, to
  any depth: each tensor by identity, storage, dtype, shape and version counter (an in-place
  edit moves it), each function or part by identity (``lm.model.act = torch.relu``, a new
  ``RotaryTable``), each setting by value (``settings.rms_norm_eps``);
* its content (:func:`weights_fingerprint`): the exact bytes of every tensor (xxHash), and
  for a oneDNN-packed matrix, whose bytes are opaque, its product with a fixed vector. This
  sees what the version counter does not: an edit through ``.data``, through a NumPy view,
  a quantized matrix's scales. It reads every weight once, about one decoding step's time,
  so it is taken once per call into a run (each ``step``, ``run``, ``rewind``,
  ``generate``), when its first pass would use the cache, not at every step. A run whose
  key no longer matches its tree's (weights edited, then a rewind or another step) computes
  its passes fresh and keeps none of them. ``max_bytes=0`` turns all of it off.

What is not seen in the middle of a call: an edit of the weights made by a hook, streamer,
processor or stopping criterion of the run itself while it runs. It is seen at the run's
next call (a hook that edits weights should be a hook inside the model, which turns the
cache off for the run).

Memory is capped (``max_bytes``, 64 MiB by default: a dozen recent runs of the demo fit
beside a 2 GB Binder's model; benchmarks/README.md "Figures behind the code") and the least
recently used branches go first.

``lm.generate``, ``lm.start``, their forks and every panel use their LM's cache (``lm.cache``);
``genlab.generate`` and ``genlab.start`` never do unless given ``forward_cache=``.

>>> fc = ForwardCache(max_bytes=2**20)
>>> fc.info()
CacheInfo(hits=0, misses=0, entries=0, bytes=0, max_bytes=1048576)
"""

from __future__ import annotations

import inspect
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import torch
import xxhash

from ..models.base import KVCache, ModelOutput

#: the default memory cap of an LM's forward cache
DEFAULT_MAX_BYTES = 64 * 2**20


@dataclass(frozen=True)
class CacheInfo:
    """What a :class:`ForwardCache` holds and has saved.

    hits / misses: forward passes served from the cache / computed and kept;
    entries: chunks held; bytes: their logits, keys and values; max_bytes: the cap.
    """

    hits: int
    misses: int
    entries: int
    bytes: int
    max_bytes: int


class _Node:
    """One chunk of tokens after its parent's, with what the forward pass over it gave."""

    __slots__ = (
        "parent", "chunk", "tokens", "children", "logits", "keys", "values", "nbytes", "alive",
        "root", "key",
    )  # fmt: skip

    def __init__(self, parent, chunk: tuple, logits=None, keys=(), values=(), key=None):
        self.parent = parent
        self.root = parent.root if parent is not None else self
        self.key = key  # the weights' key, on a root
        self.chunk = chunk
        self.tokens: tuple = (parent.tokens if parent is not None else ()) + chunk
        self.children: dict[tuple, _Node] = {}
        self.logits = logits
        self.keys, self.values = keys, values
        self.nbytes = (0 if logits is None else logits.nbytes) + sum(
            t.nbytes for t in (*keys, *values)
        )
        self.alive = True  # in the tree (False once dropped: a cache may still point here)

    @property
    def length(self) -> int:
        return len(self.tokens)

    def at_length(self, length: int):
        """This node's ancestor (or itself) holding exactly ``length`` tokens, else None."""
        node = self
        while node is not None and node.length > length:
            node = node.parent
        return node if node is not None and node.length == length else None


def weights_key(model) -> tuple:
    """The structure of everything ``model`` holds (module doc, "Never stale"): a tuple that
    changes when a tensor is replaced or edited in place through torch, a part or function
    is swapped, or a setting changes. Cheap (no tensor data is read)."""
    found: list = []
    _walk(model, found, None, set(), depth=0)
    return (id(model), type(model), tuple(found))


def weights_fingerprint(model) -> int:
    """A hash of the content of every tensor ``model`` holds (module doc, "Never stale"):
    the exact bytes of each plain tensor, and the product of each oneDNN-packed matrix with
    a fixed vector."""
    tensors: list = []
    _walk(model, [], tensors, set(), depth=0)
    digest = xxhash.xxh3_64()
    read: set = set()  # a view of memory already read (a tied head over the embedding)
    for t in tensors:
        if not t.is_mkldnn and t.is_contiguous():
            extent = (t.data_ptr(), t.numel() * t.element_size())
            if extent in read:
                digest.update(b"view")
                continue
            read.add(extent)
        digest.update(_content(t))
    return digest.intdigest()


_LOCK = type(threading.Lock())
_SCALARS = (str, bytes, int, float, complex, bool, type(None), torch.dtype, torch.device)
_PROBES: dict = {}  # (in_features, dtype) -> the fixed vector a packed matrix is multiplied by


def _tensor_key(t: torch.Tensor) -> tuple:
    try:
        ptr = t.data_ptr()
    except (RuntimeError, NotImplementedError):  # an opaque (mkldnn) tensor
        ptr = 0
    try:
        version = t._version
    except (RuntimeError, NotImplementedError):
        version = -1
    return ("t", id(t), ptr, t.dtype, tuple(t.shape), version)


def _content(t: torch.Tensor) -> bytes | memoryview:
    t = t.detach()
    if t.is_mkldnn:  # opaque bytes: its product with a fixed vector stands for them
        from .matmul import matmul

        width = t.shape[1]
        probe = _PROBES.get((width, t.dtype))
        if probe is None:
            gen = torch.Generator().manual_seed(width)
            probe = _PROBES[(width, t.dtype)] = torch.rand(1, width, generator=gen).to(t.dtype)
        with torch.inference_mode():
            t = matmul(probe, t)
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.contiguous().reshape(-1)
    if t.dtype == torch.bool:
        t = t.to(torch.uint8)
    return memoryview(t.view(torch.uint8).numpy())


def _walk(obj, found: list, tensors: list | None, seen: set, depth: int) -> None:
    """Append the structure of ``obj`` to ``found`` (and its tensors to ``tensors``)."""
    if isinstance(obj, _SCALARS):
        found.append(obj)
        return
    if id(obj) in seen or depth > 8:
        found.append(("seen", id(obj)))
        return
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        found.append(_tensor_key(obj))
        if tensors is not None:
            tensors.append(obj)
    elif isinstance(obj, torch.nn.Module):
        found.append(("module", id(obj), type(obj)))
        for name, t in obj.state_dict(keep_vars=True).items():
            found.append(name)
            _walk(t, found, tensors, seen, depth + 1)
    elif isinstance(obj, (list, tuple)):
        found.append((type(obj), len(obj)))
        for item in obj:
            _walk(item, found, tensors, seen, depth + 1)
    elif isinstance(obj, dict):
        found.append(("dict", len(obj)))
        for name, item in obj.items():
            found.append(name if isinstance(name, _SCALARS) else id(name))
            _walk(item, found, tensors, seen, depth + 1)
    elif callable(obj) and not hasattr(obj, "__slots__") and not _has_state(obj):
        found.append(("fn", id(obj)))  # a function, a class, a method: by identity
    else:
        skip = getattr(type(obj), "_forward_key_skip", ())
        found.append(("obj", id(obj), type(obj)))
        names = [n for c in type(obj).__mro__ for n in getattr(c, "__slots__", ())]
        state = [(n, getattr(obj, n, None)) for n in names]
        state += list(getattr(obj, "__dict__", {}).items())
        for name, item in state:
            if name in skip or isinstance(item, (_LOCK, weakref.WeakSet)):
                continue
            found.append(name)
            _walk(item, found, tensors, seen, depth + 1)


def _has_state(obj) -> bool:
    """True for a callable object with attributes of its own (a module-like part)."""
    return (
        bool(getattr(obj, "__dict__", None))
        and not inspect.isroutine(obj)
        and not (isinstance(obj, type))
    )


def weights_of(model, memo: dict | None = None) -> tuple:
    """(structure, content) of ``model``'s weights (:func:`weights_key`,
    :func:`weights_fingerprint`), read once per ``memo``: a run keeps one and clears it at
    each call into it (``step``, ``run``, ``rewind``...), since user code may have edited
    the weights in between. None: read now."""
    if memo is None:
        return (weights_key(model), weights_fingerprint(model))
    key = memo.get("weights")
    if key is None:
        key = memo["weights"] = (weights_key(model), weights_fingerprint(model))
    return key


def model_is_plain(model) -> bool:
    """True when nothing on ``model`` can change its forward pass from one call to the next:
    no active hooks inside it, no ``forward`` replaced on the object, no torch module hooks."""
    active = getattr(model, "has_active_hooks", None)
    if active is not None and active():
        return False
    if "forward" in getattr(model, "__dict__", {}):
        return False
    modules = [v for v in getattr(model, "__dict__", {}).values() if isinstance(v, torch.nn.Module)]
    if modules and (
        torch.nn.modules.module._global_forward_hooks
        or torch.nn.modules.module._global_forward_pre_hooks
    ):
        return False
    for root in modules:
        for m in root.modules():
            if m._forward_hooks or m._forward_pre_hooks:
                return False
    return True


class ForwardCache:
    """The forward passes of an LM's one-row runs, as a tree of token chunks (module doc).

    :meth:`forward` is called by the step loop's single model call; it serves a pass from the
    tree or computes it and keeps it. ``max_bytes`` caps the memory; the least recently used
    branches are dropped first.
    """

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._roots: dict[tuple, _Node] = {}
        self._lru: OrderedDict[_Node, None] = OrderedDict()  # least recent first
        self._bytes = 0
        self._lock = threading.Lock()  # panels generate in worker threads
        self.hits = 0
        self.misses = 0

    @property
    def max_bytes(self) -> int:
        return self._max_bytes

    @max_bytes.setter
    def max_bytes(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(
                f"max_bytes={value!r} must be a whole number of bytes >= 0 (0 keeps nothing)"
            )
        self._max_bytes = value
        if hasattr(self, "_lock"):
            with self._lock:
                self._evict()

    # -- the one entry point -----------------------------------------------------------------
    def forward(
        self,
        model,
        cache,
        sequences: torch.LongTensor,
        attention_mask: torch.Tensor,
        compute: Callable[[], ModelOutput],
        memo: dict | None = None,
    ) -> ModelOutput:
        """The forward pass over the tokens of ``sequences`` (1, length) that ``cache`` has
        not seen: served from the tree when the same chunk followed the same chunks with the
        same weights, else ``compute()`` (which appends to ``cache``) and kept.

        memo: the run's memo of the weights' key (:func:`weights_of`; None: read them now).
        A cache whose tree was keyed by other weights than the model's now (edited since)
        is neither served nor kept.
        """
        if self._max_bytes == 0 or not self.applies(model, cache, sequences, attention_mask):
            return compute()
        key = weights_of(model, memo)
        past = cache.length()
        prefix = sequences[0].tolist()
        chunk = tuple(prefix[past:])
        with self._lock:
            node = self._node_for(cache, key, prefix[:past])
            child = node.children.get(chunk) if node is not None else None
            if child is not None:
                self.hits += 1
                self._touch(child)
        if child is not None:
            for layer, (k, v) in enumerate(zip(child.keys, child.values, strict=True)):
                cache.append(layer, k, v)
            cache.origin = child
            return ModelOutput(logits=child.logits.clone())
        out = compute()
        if node is None or not self._storable(out, cache, past, len(chunk)):
            return out
        keys = tuple(k[:, :, past : past + len(chunk)].clone() for k in cache.keys)
        values = tuple(v[:, :, past : past + len(chunk)].clone() for v in cache.values)
        new = _Node(node, chunk, out.logits.detach().clone(), keys, values)
        with self._lock:
            self.misses += 1
            if new.nbytes <= self._max_bytes and node.alive:
                old = node.children.get(chunk)
                if old is not None:  # another thread kept the same pass meanwhile
                    self._drop(old)
                node.children[chunk] = new
                self._bytes += new.nbytes
                self._touch(new)
                self._evict()
                cache.origin = new if new.alive else None
        return out

    @staticmethod
    def applies(model, cache, sequences, attention_mask) -> bool:
        """True when a pass over this one-row state may be served or kept (module doc)."""
        return (
            type(cache) is KVCache
            and sequences.shape[0] == 1
            and bool(attention_mask.all())
            and model_is_plain(model)
        )

    # -- bookkeeping ---------------------------------------------------------------------------
    def _node_for(self, cache, key: tuple, prefix: list):
        """The node whose tokens the cache holds, None when the cache's content is not known
        to come from this tree in chunks (a pass that was not kept) or came from a tree of
        other weights than ``key`` (the weights' key now). An empty cache: the root of
        ``key``'s tree."""
        if not prefix:
            root = self._roots.get(key)
            if root is None:
                root = self._roots[key] = _Node(None, (), key=key)
            return root
        node = getattr(cache, "origin", None)
        if node is None or not node.alive or node.length != len(prefix):
            return None
        if node.root.key != key:  # the weights changed since this cache was built
            cache.origin = None
            return None
        return node if node.tokens == tuple(prefix) else None

    @staticmethod
    def _storable(out, cache, past: int, n: int) -> bool:
        logits = getattr(out, "logits", None)
        return (
            isinstance(logits, torch.Tensor)
            and logits.dim() == 3
            and logits.shape[:2] == (1, 1)
            and out.hidden_states is None
            and out.attentions is None
            and cache.length() == past + n
            and all(k is not None for k in cache.keys)
        )

    def _touch(self, node) -> None:
        # a node is never more recent than its ancestors, so the least recent one is a leaf
        while node is not None and node.parent is not None:
            self._lru[node] = None
            self._lru.move_to_end(node)
            node = node.parent

    def _drop(self, node) -> None:
        for child in list(node.children.values()):
            self._drop(child)
        node.children.clear()
        node.alive = False
        if node.parent is not None and node.parent.children.get(node.chunk) is node:
            del node.parent.children[node.chunk]
        if node in self._lru:
            del self._lru[node]
            self._bytes -= node.nbytes
        root = node.parent
        if root is not None and root.parent is None and not root.children:
            root.alive = False
            self._roots = {k: r for k, r in self._roots.items() if r is not root}

    def _evict(self) -> None:
        while self._lru and self._bytes > self._max_bytes:
            oldest = next(iter(self._lru))
            self._drop(oldest)

    # -- what users see ------------------------------------------------------------------------
    def info(self) -> CacheInfo:
        """Hits, misses, entries and bytes (see :class:`CacheInfo`)."""
        with self._lock:
            return CacheInfo(self.hits, self.misses, len(self._lru), self._bytes, self._max_bytes)

    def clear(self) -> None:
        """Forget every kept pass (the counts stay)."""
        with self._lock:
            for node in (*self._lru, *self._roots.values()):
                node.alive = False
            self._roots.clear()
            self._lru.clear()
            self._bytes = 0

    def __len__(self) -> int:
        return len(self._lru)

    def __repr__(self) -> str:
        i = self.info()
        return (
            f"ForwardCache({i.entries} chunks, {i.bytes / 2**20:.1f} of "
            f"{i.max_bytes / 2**20:.0f} MiB, hits={i.hits}, misses={i.misses})"
        )


__all__ = [
    "CacheInfo",
    "DEFAULT_MAX_BYTES",
    "ForwardCache",
    "model_is_plain",
    "weights_fingerprint",
    "weights_key",
    "weights_of",
]
