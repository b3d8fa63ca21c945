"""The Run and its parts: the step loop (:mod:`genlab.run.engine`), its state and plan,
its records and result, its timeline for rewinding, forks, randomness, inputs and trace."""

import pkgutil as _pkgutil

from genlab.lazy import lazy_exports as _lazy_exports

# its modules are attributes (``genlab.run.<module>``), each imported when first read
__getattr__, __dir__ = _lazy_exports(
    __name__, {}, subpackages=tuple(m.name for m in _pkgutil.iter_modules(__path__))
)
