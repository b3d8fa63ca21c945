"""What makes generation fast on this machine, without changing what it computes beyond
what the machine decides: threads, weight forms, quantization, the forward cache, the KV
caches and the random draws."""

import pkgutil as _pkgutil

from genlab.lazy import lazy_exports as _lazy_exports

# its modules are attributes (``genlab.runtime.<module>``), each imported when first read
__getattr__, __dir__ = _lazy_exports(
    __name__, {}, subpackages=tuple(m.name for m in _pkgutil.iter_modules(__path__))
)
