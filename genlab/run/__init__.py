"""The Run and its parts: the step loop (:mod:`genlab.run.engine`), its state and plan,
its records and result, its timeline for rewinding, forks, randomness, inputs and trace."""

from genlab.lazy import lazy_exports as _lazy_exports

# its modules are attributes (``genlab.run.<module>``), each imported when first read
__getattr__, __dir__ = _lazy_exports(
    __name__,
    {},
    subpackages=(
        "branches",
        "context",
        "encdec",
        "engine",
        "inputs",
        "plan",
        "randomness",
        "records",
        "result",
        "state",
        "timeline",
        "trace",
    ),
)
