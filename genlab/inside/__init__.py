"""Inside the model: hook points, the logit lens and attention, steering, patching and
attribution."""

import pkgutil as _pkgutil

from genlab.lazy import lazy_exports as _lazy_exports

# its modules are attributes (``genlab.inside.<module>``), each imported when first read
__getattr__, __dir__ = _lazy_exports(
    __name__, {}, subpackages=tuple(m.name for m in _pkgutil.iter_modules(__path__))
)
