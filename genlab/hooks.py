"""Named hook points of the step loop.

A hook is ``fn(value, *, step) -> value | None``. Returning a value replaces what flows on
(an intervention); returning ``None`` only observes. Hook points, in the order one step
visits them:

=========================  =====================================================
``logits``                 raw next-token logits, (rows, vocab) float32
``processor.<Name>``       scores right after the logits processor ``<Name>``
``scores``                 final processed scores, what the strategy chooses from
``beam.candidates``        beam search: the candidates it scored (a table payload)
``select``                 the chosen tokens, (rows,) long
``step_end``               the finished :class:`~genlab.engine.Step` record
``finish``                 the final output object
=========================  =====================================================

Hooks are temporary by default::

    with run.hooks(logits=lambda x, step: x.clamp(max=10)):
        run.step()

With no hook registered the loop pays one truthiness test per point.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

HOOK_POINTS = ("logits", "processor.*", "scores", "beam.candidates", "select", "step_end", "finish")

Hook = Callable[..., Any]


def _check_name(name: str) -> str:
    name = name.replace("__", ".")  # allow keyword spelling processor__TopKLogitsWarper
    if name in HOOK_POINTS or (name.startswith("processor.") and len(name) > len("processor.")):
        return name
    raise ValueError(
        f"unknown hook point {name!r}; use one of {', '.join(HOOK_POINTS)} "
        "(processor.* means processor.<ProcessorClassName>, e.g. processor.TopKLogitsWarper)"
    )


class HookRegistry:
    """Hooks by point name. ``bool(registry)`` is False when nothing is registered."""

    def __init__(self) -> None:
        self._hooks: dict[str, list[Hook]] = {}

    def __bool__(self) -> bool:
        return bool(self._hooks)

    def has(self, name: str) -> bool:
        return name in self._hooks

    def wants_processors(self) -> bool:
        """True when some hook listens after individual processors."""
        return any(k.startswith("processor.") for k in self._hooks)

    def add(self, name: str, fn: Hook) -> Callable[[], None]:
        """Register ``fn`` at ``name`` permanently; returns a function that removes it."""
        if not callable(fn):
            raise TypeError(f"hook for {name!r} must be callable, got {type(fn).__name__}")
        name = _check_name(name)
        self._hooks.setdefault(name, []).append(fn)

        def remove() -> None:
            fns = self._hooks.get(name, [])
            if fn in fns:
                fns.remove(fn)
            if not fns:
                self._hooks.pop(name, None)

        return remove

    @contextlib.contextmanager
    def temporary(
        self, mapping: dict[str, Hook | list[Hook]] | None = None, **hooks
    ) -> Iterator[None]:
        """Register hooks for the duration of a ``with`` block; always cleaned up."""
        items = dict(mapping or {}, **hooks)
        removers = []
        try:
            for name, fns in items.items():
                for fn in fns if isinstance(fns, (list, tuple)) else [fns]:
                    removers.append(self.add(name, fn))
            yield
        finally:
            for remove in reversed(removers):
                remove()

    def fire(self, name: str, value: Any, step: int) -> Any:
        """Pass ``value`` through every hook at ``name``; a non-None return replaces it."""
        for fn in tuple(self._hooks.get(name, ())):
            out = fn(value, step=step)
            if out is not None:
                value = out
        return value

    def clear(self) -> None:
        self._hooks.clear()

    def copy(self) -> HookRegistry:
        other = HookRegistry()
        other._hooks = {k: list(v) for k, v in self._hooks.items()}
        return other
