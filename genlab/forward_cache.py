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
* other weights: the tree's root is keyed by every weight tensor's identity, dtype, shape and
  version counter (an in-place edit under ``torch.no_grad()`` moves the counter; an edit
  through ``.data`` does not, so call ``lm.cache_clear()`` after one).

Memory is capped (``max_bytes``, 64 MiB by default: a 20-token run of the demo with a
30-token prompt takes about 6.5 MB, so a dozen recent runs fit beside a 2 GB Binder's model)
and the least recently used branches go first.

``lm.generate``, ``lm.start``, their forks and every panel use their LM's cache (``lm.cache``);
``genlab.generate`` and ``genlab.start`` never do unless given ``forward_cache=``.

>>> fc = ForwardCache(max_bytes=2**20)
>>> fc.info()
CacheInfo(hits=0, misses=0, entries=0, bytes=0, max_bytes=1048576)
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .models.base import KVCache, ModelOutput

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
        "parent", "chunk", "tokens", "children", "logits", "keys", "values", "nbytes", "alive"
    )  # fmt: skip

    def __init__(self, parent, chunk: tuple, logits=None, keys=(), values=()):
        self.parent = parent
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
    """A key that changes when the weights change: each tensor the model holds, by identity,
    storage, dtype, shape and version counter (in the order they are found)."""
    found: list = []
    _collect(model, found, set(), depth=0)
    return (id(model), tuple(found))


def _tensor_key(t: torch.Tensor) -> tuple:
    try:
        ptr, version = t.data_ptr(), t._version
    except (RuntimeError, NotImplementedError):  # an opaque (mkldnn) tensor
        ptr, version = 0, 0
    return (id(t), ptr, t.dtype, tuple(t.shape), version)


def _collect(obj, found: list, seen: set, depth: int) -> None:
    if depth > 6 or id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        found.append(_tensor_key(obj))
    elif isinstance(obj, torch.nn.Module):
        found.extend(_tensor_key(t) for t in obj.state_dict(keep_vars=True).values())
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            _collect(item, found, seen, depth + 1)
    elif isinstance(obj, dict):
        for item in obj.values():
            _collect(item, found, seen, depth + 1)
    elif hasattr(obj, "__dict__") or hasattr(type(obj), "__slots__"):
        if isinstance(obj, (str, bytes, int, float, bool, type)):
            return
        names = getattr(type(obj), "__slots__", ())
        values = [getattr(obj, n, None) for n in names]
        values += list(getattr(obj, "__dict__", {}).values())
        for item in values:
            if isinstance(item, (torch.Tensor, torch.nn.Module, list, tuple, dict)) or (
                hasattr(item, "__slots__") and not isinstance(item, (str, bytes))
            ):
                _collect(item, found, seen, depth + 1)


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
    ) -> ModelOutput:
        """The forward pass over the tokens of ``sequences`` (1, length) that ``cache`` has
        not seen: served from the tree when the same chunk followed the same chunks with the
        same weights, else ``compute()`` (which appends to ``cache``) and kept.

        The weights are keyed when a run starts (its cache is empty): a run whose weights
        change while it runs goes on in the tree it started in.
        """
        if not self.applies(model, cache, sequences, attention_mask):
            return compute()
        past = cache.length()
        prefix = sequences[0].tolist()
        chunk = tuple(prefix[past:])
        key = weights_key(model) if past == 0 else None
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
    def _node_for(self, cache, key: tuple | None, prefix: list):
        """The node whose tokens the cache holds, None when the cache's content is not known
        to come from this tree in chunks (a pass that was not kept). key: the weights' key for
        an empty cache (the root)."""
        if key is not None:
            root = self._roots.get(key)
            if root is None:
                root = self._roots[key] = _Node(None, ())
            return root
        node = getattr(cache, "origin", None)
        if node is None or not node.alive or node.length != len(prefix):
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


__all__ = ["CacheInfo", "DEFAULT_MAX_BYTES", "ForwardCache", "model_is_plain", "weights_key"]
