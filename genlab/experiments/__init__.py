"""Experiments over many generations: teacher-forced scoring, sweeps, best-of-N and
coverage, evaluation, model agreement and task sets."""

import pkgutil as _pkgutil

from genlab.lazy import lazy_exports as _lazy_exports

# its modules are attributes (``genlab.experiments.<module>``), each imported when first read
__getattr__, __dir__ = _lazy_exports(
    __name__, {}, subpackages=tuple(m.name for m in _pkgutil.iter_modules(__path__))
)
