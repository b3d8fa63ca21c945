"""KV caches chosen by ``cache_implementation``.

* ``None`` / ``"dynamic"`` / ``"dynamic_full"``: the model's own growing cache
  (:class:`~genlab.models.base.KVCache` for the built-in decoders, transformers'
  ``DynamicCache`` through the adapter);
* ``"static"``: preallocated once for ``max_length - 1`` positions (the last token is never
  fed back) and written in place, never reallocated: the layout ``torch.compile`` wants.
  On a transformers model it is transformers' ``StaticCache``, as the reference uses.

With a static cache, greedy and sampling runs compile their one-token decoding steps
(:func:`compiled_forward`) under the reference's conditions: ``disable_compile`` is False and
the model is on a CUDA device, or ``compile_config.all_devices`` is True. The
prompt is processed eagerly; every later step has the same shapes (one token per row,
attention over the whole preallocated cache with a mask), so it compiles once.

Offloaded and quantized caches (``"offloaded"``, ``"offloaded_static"``, ``"quantized"``)
exist to save accelerator memory; genlab runs on one device and raises a clear error for
them instead of silently using another cache.

(Not run as a test: it needs a model and prompt ids of your own (``model``, ``ids``); the tests run
these calls.)

>>> cache = make_cache(model, rows=2, config=cfg)   # doctest: +SKIP
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from ..config import CompileConfig
from ..models.base import KVCache

#: cache_implementation values genlab accepts
SUPPORTED = ("dynamic", "dynamic_full", "static")
#: names the reference maps to its static cache (the layer types are inferred)
_STATIC_ALIASES = ("static", "sliding_window", "hybrid", "hybrid_chunked")
#: modes whose reference cache is a plain DynamicCache (no sliding layers)
_PLAIN_DYNAMIC_MODES = ("assisted_generation", "contrastive_search")


class StaticKVCache(KVCache):
    """A :class:`KVCache` allocated once at ``capacity`` positions and written in place.

    Each layer's k/v buffers are (rows, kv_heads, capacity, head_dim) from the first append;
    appending past ``capacity`` raises instead of growing.

    >>> c = StaticKVCache(num_layers=1, capacity=4)
    >>> _ = c.append(0, torch.zeros(1, 2, 3, 8), torch.zeros(1, 2, 3, 8))
    >>> c.length(), c.keys[0].shape[2]
    (3, 4)
    """

    #: fixed shapes: a decoding step on it can be compiled (see :func:`compiled_forward`)
    is_compileable = True

    def __init__(self, num_layers: int, capacity: int):
        super().__init__(num_layers, chunk=0)
        if capacity < 1:
            raise ValueError(f"a static cache needs capacity >= 1 position, got {capacity}")
        self.capacity = int(capacity)

    def ready_for_fixed_step(self, new_len: int) -> bool:
        """True when every layer's buffers exist and ``new_len`` more positions fit."""
        return self.keys[0] is not None and self.length() + new_len <= self.capacity

    def advance(self, n: int) -> None:
        """Count ``n`` positions written by a fixed-shape step (``SlotWriter``) in every layer."""
        self._len = [length + n for length in self._len]

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        """Write k, v (rows, kv_heads, new, head_dim) after the valid positions; a
        ValueError when they do not fit in the capacity."""
        start, n = self._len[layer], k.shape[2]
        if start + n > self.capacity:
            raise ValueError(
                f"the static cache holds {self.capacity} positions (max_length - 1) and is "
                f"full: raise max_length / max_new_tokens or use cache_implementation='dynamic'"
            )
        if self.keys[layer] is None:
            shape = (k.shape[0], k.shape[1], self.capacity, k.shape[3])
            self.keys[layer] = k.new_zeros(shape)
            self.values[layer] = v.new_zeros((v.shape[0], v.shape[1], self.capacity, v.shape[3]))
        return super().append(layer, k, v)

    def copy(self) -> StaticKVCache:
        """An independent copy (same capacity)."""
        other = StaticKVCache(self.num_layers, self.capacity)
        other._len = list(self._len)
        other.keys = [None if k is None else k.clone() for k in self.keys]
        other.values = [None if v is None else v.clone() for v in self.values]
        return other


def compiled_forward(model, config, cache, mode: str):
    """The compiled forward for this run's decoding steps, or None to stay eager.

    The reference's conditions: a greedy or sampling run, ``disable_compile`` False, a cache
    that is compileable (static), and a CUDA device unless
    ``compile_config.all_devices`` is True. A ``compile_config`` given when these
    do not hold is skipped with a warning that says why. The model brings the compiled
    callable (``model.compiled_forward(compile_config)``, cached on the model so that later
    runs reuse it); it has ``forward``'s signature.
    """
    if mode not in ("greedy_search", "sample") or config.disable_compile:
        return None
    compile_config = config.compile_config
    device = getattr(model, "device", None)
    on_cuda = isinstance(device, torch.device) and device.type == "cuda"
    all_devices = bool(compile_config is not None and compile_config.all_devices)
    reasons = []
    if not (on_cuda or all_devices):
        reasons.append(
            f"the model is on {device or 'cpu'}, and compiling happens on CUDA only unless "
            "compile_config.all_devices = True"
        )
    if not getattr(cache, "is_compileable", False):
        reasons.append("the cache is not static: set cache_implementation='static'")
    elif not hasattr(model, "compiled_forward"):
        reasons.append(f"{type(model).__name__} has no compiled_forward()")
    if reasons:
        if compile_config is not None:
            warnings.warn(
                "compile_config is set but the decoding steps will not be compiled: "
                + "; ".join(reasons),
                stacklevel=4,
            )
        return None
    return model.compiled_forward(compile_config or CompileConfig())


def check_cache_implementation(value) -> None:
    """ValueError for a ``cache_implementation`` genlab cannot honour."""
    if value is None or value in SUPPORTED or value in _STATIC_ALIASES:
        return
    raise ValueError(
        f"cache_implementation={value!r} is not supported by genlab: use one of "
        f"{', '.join(repr(s) for s in SUPPORTED)} (or None). Offloaded and quantized caches save "
        "accelerator memory and are not implemented here."
    )


def make_cache(model, rows: int, config, mode: str | None = None, has_assistant: bool = False):
    """The cache a generation with ``config`` starts from.

    model: a genlab-protocol model; rows: running rows (batch * beams); config: the resolved
    GenerationConfig (``max_length`` already counts the prompt); mode: the generation mode.
    """
    impl = config.cache_implementation
    check_cache_implementation(impl)
    if has_assistant:  # the reference falls back to a dynamic cache with an assistant
        impl = None
    hf = getattr(model, "hf", None)
    if impl in _STATIC_ALIASES:
        capacity = int(config.max_length) - 1
        if hasattr(model, "new_static_cache"):  # the transformers adapter
            return model.new_static_cache(capacity)
        plain = model.new_cache(rows)
        if not isinstance(plain, KVCache):
            raise ValueError(
                f"cache_implementation='static' needs a built-in decoder or a transformers "
                f"model; {type(model).__name__} has its own cache: use 'dynamic'"
            )
        return StaticKVCache(plain.num_layers, capacity)
    if hf is not None and (mode in _PLAIN_DYNAMIC_MODES or impl == "dynamic_full"):
        return model.new_cache(rows, sliding=False)
    return model.new_cache(rows)


def cache_checkpoint(cache) -> Any:
    """A token from which :func:`cache_restore` rebuilds the cache as it is now."""
    if cache is None:
        return None
    if hasattr(cache, "checkpoint"):
        return cache.checkpoint()
    return ("length", cache.length())


def cache_restore(cache, token) -> None:
    """Put ``cache`` back to :func:`cache_checkpoint`'s ``token``."""
    if cache is None or token is None:
        return
    if isinstance(token, tuple) and len(token) == 2 and token[0] == "length":
        cache.crop(token[1])
        return
    cache.restore(token)
