"""Inside the model: hook points, the logit lens and attention, steering, patching and
attribution."""

from genlab.lazy import lazy_exports as _lazy_exports

# its modules are attributes (``genlab.inside.<module>``), each imported when first read
__getattr__, __dir__ = _lazy_exports(
    __name__, {}, subpackages=("attribution", "hooks", "lens", "steering", "taps")
)
