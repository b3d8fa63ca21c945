"""Named hook points of the step loop.

A hook is ``fn(value, *, step) -> value | None``. Returning a value replaces what flows on
(an intervention); returning ``None`` only observes. Hook points, in the order one step
visits them:

=========================  =====================================================
``logits``                 raw next-token logits, (rows, vocab) float32
``processor.<label>``      scores right after the logits processor of that stage label
                           (``processor.top_k``; a processor without one: its class name;
                           ``mirostat_mode=2`` is ``processor.mirostat_v2``, though
                           ``sampler_order`` names it ``"mirostat"``). A label no
                           processor of the run has is warned about (:func:`warn_unheard`)
``scores``                 final processed scores, what the strategy chooses from
``beam.candidates``        beam search: the candidates it scored (a table payload;
                           observe only: a return value is ignored)
``select``                 the chosen tokens, (rows,) long
``step_end``               the finished :class:`~genlab.run.engine.Step` record (observe only)
``finish``                 the final output object
=========================  =====================================================

Inside the built-in decoders (Llama, Qwen2, GPT-2), named as TransformerLens names them
(:mod:`genlab.inside.taps` describes each; they run inside the forward pass, before
``logits``): ``hook_embed``, ``blocks.{i}.hook_resid_pre``, ``blocks.{i}.attn.hook_pattern``,
``blocks.{i}.attn.hook_z``, ``blocks.{i}.hook_attn_out``, ``blocks.{i}.hook_resid_mid``,
``blocks.{i}.hook_mlp_out``, ``blocks.{i}.hook_resid_post``, ``ln_final.hook_normalized``
(GPT-2 also ``hook_pos_embed``). A name the model does not have is refused with the close
names. With the KV cache such a hook sees the positions the step computes (the prompt at
step 0, then the new token); :mod:`genlab.inside.steering` has ready-made interventions.

Hooks are temporary by default::

    with run.hooks(logits=lambda x, step: x.clamp(max=10)):
        run.step()

With no hook or observer registered, the loop asks :meth:`HookRegistry.has` at each point
(a lookup in two dicts) and builds no payload.

The registry's verbs (:class:`HookRegistry`; a strategy's
:class:`~genlab.run.context.StepContext` has the last three, without the step):

* :meth:`~HookRegistry.add` -- register a hook, which may replace the value;
* :meth:`~HookRegistry.observe` -- register an observer ``fn(point, value, step)`` (the
  trace, the widgets), which sees the value after the hooks and never replaces it;
* :meth:`~HookRegistry.has` -- is anyone listening at a point (``"processor.*"``: after
  any processor)? Payloads are built only then;
* :meth:`~HookRegistry.fire` -- a point of the loop: hooks, then observers;
* :meth:`~HookRegistry.notify` -- observers only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from ..checks import check_replacement

HOOK_POINTS = ("logits", "processor.*", "scores", "beam.candidates", "select", "step_end", "finish")

Hook = Callable[..., Any]


def _check_name(name: str, model: Any = None) -> str:
    name = name.replace("__", ".")  # allow keyword spelling processor__top_k
    if name in HOOK_POINTS or (name.startswith("processor.") and len(name) > len("processor.")):
        return name
    from .taps import is_inside_name

    if is_inside_name(name):
        if model is None or not hasattr(model, "check_hook_point"):
            what = type(model).__name__ if model is not None else "this registry's model"
            raise ValueError(
                f"hook point {name!r} is inside a model's layers; {what} has none (genlab's "
                "built-in Llama, Qwen2 and GPT-2 decoders have them: genlab.load a checkpoint "
                "onto them, or hook 'logits')"
            )
        return model.check_hook_point(name)
    raise ValueError(
        f"unknown hook point {name!r}; use one of {', '.join(HOOK_POINTS)} "
        "(processor.* means processor.<stage label>, e.g. processor.top_k)"
    )


def warn_unheard(registry: HookRegistry, plan: Any) -> None:
    """Warn, once per label and set of stages, about hooks at ``processor.<label>`` where
    no processor of the step's ``plan`` (:class:`~genlab.run.plan.Plan`) has that label: they
    would never be called. A warning, not an error: a config edit may turn that
    processor on later. ``sampler_order`` names mirostat ``"mirostat"`` for both versions,
    while the stage label of ``mirostat_mode=2`` is ``"mirostat_v2"``."""
    import difflib
    import warnings

    hooked = [p for p in registry._hooks if p.startswith("processor.")]
    if not hooked:
        return
    from ..processors.base import stage_name_of

    stages = [stage_name_of(p) for p in plan.processors or ()]
    if plan.mode == "dola_generation":
        stages.append("dola")  # the strategy's own stage
    warned = registry.warned_unheard
    for point in hooked:
        label = point[len("processor.") :]
        if label in stages:
            continue
        key = (label, tuple(stages))
        if key in warned:
            continue
        warned.add(key)
        close = difflib.get_close_matches(label, stages, n=1, cutoff=0.6)
        hint = f"Did you mean 'processor.{close[0]}'? " if close else ""
        if label.startswith("mirostat"):
            hint += (
                "(sampler_order names both mirostat versions 'mirostat'; their stage labels "
                "are 'mirostat' for mirostat_mode=1 and 'mirostat_v2' for mirostat_mode=2.) "
            )
        warnings.warn(
            f"the hook at {point!r} is never called: no processor of this run has the stage "
            f"label {label!r}; its stages are {stages or 'none'}. {hint}Hook one of those "
            "stages, or turn that processor on in the config (its hook then runs from that "
            "step on).",
            UserWarning,
            stacklevel=4,
        )


#: points whose observers see the value before the hooks (the step is already committed)
_OBSERVE_FIRST = ("step_end", "finish")
#: points whose hooks observe only: what they return is ignored
_OBSERVE_ONLY = ("step_end", "beam.candidates")


class HookRegistry:
    """Hooks by point name. ``bool(registry)`` is False when nothing is registered."""

    def __init__(self) -> None:
        #: the hook point whose hooks or observers are running now (None between them)
        self.firing: str | None = None
        #: the model whose inside hook points this registry may hook (see :meth:`bind`)
        self.model: Any = None
        self._hooks: dict[str, list[Hook]] = {}
        # observers: fn(point, value, step), never replace values; "processor.*" matches all
        self._observers: dict[str, list[Callable[[str, Any, int], None]]] = {}
        #: (label, stages) of the processor hooks :func:`warn_unheard` warned about
        self.warned_unheard: set[tuple[str, tuple[str, ...]]] = set()

    def __bool__(self) -> bool:
        return bool(self._hooks) or bool(self._observers)

    def bind(self, model: Any) -> None:
        """Hooks inside ``model``'s layers (``blocks.3.hook_resid_post``...) are checked
        against its hook points and make its ``has_active_hooks()`` true while registered."""
        self.model = model
        if self.inside_points():
            model.attach_registry(self)

    def inside_points(self) -> frozenset:
        """The points inside the model where a hook or observer is registered now."""
        from .taps import is_inside_name

        if not self.model_attached:
            return frozenset()
        return frozenset(
            n for n in (*self._hooks, *self._observers) if n[0] in "hbl" and is_inside_name(n)
        )

    @property
    def model_attached(self) -> bool:
        return self.model is not None and hasattr(self.model, "attach_registry")

    def _checked(self, name: str) -> str:
        name = _check_name(name, self.model)
        if self.model_attached and name not in HOOK_POINTS and not name.startswith("processor."):
            self.model.attach_registry(self)
        return name

    def has(self, name: str) -> bool:
        """True when a hook or an observer listens at ``name``; ``"processor.*"``: after any
        processor (the processors then run one by one)."""
        if name == "processor.*":
            return any(k.startswith("processor.") for k in (*self._hooks, *self._observers))
        if name in self._hooks or name in self._observers:
            return True
        return name.startswith("processor.") and "processor.*" in self._observers

    def observe(self, name: str, fn: Callable[[str, Any, int], None]) -> Callable[[], None]:
        """Register an observer ``fn(point, value, step)`` at ``name`` (``processor.*`` for
        every processor); it sees the value after the hooks and cannot replace it. The
        trace and the widgets observe this way. Returns a function that removes it."""
        name = name if name == "processor.*" else self._checked(name)
        self._observers.setdefault(name, []).append(fn)

        def remove() -> None:
            fns = self._observers.get(name, [])
            if fn in fns:
                fns.remove(fn)
            if not fns:
                self._observers.pop(name, None)

        return remove

    def add(self, name: str, fn: Hook) -> Callable[[], None]:
        """Register ``fn`` at ``name`` permanently; returns a function that removes it."""
        if not callable(fn):
            raise TypeError(f"hook for {name!r} must be callable, got {type(fn).__name__}")
        name = self._checked(name)
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

    def fire(self, name: str, value: Any, step: int, notify: bool = True) -> Any:
        """Pass ``value`` through every hook at ``name``; a non-None return replaces it
        (checked by :func:`check_replacement`; ignored at ``step_end`` and
        ``beam.candidates``, whose hooks observe only). Observers see the result (unless
        ``notify`` is False: the caller notifies them itself). ``step``: the step index."""
        outer, self.firing = self.firing, name
        try:
            first = name in _OBSERVE_FIRST
            if first and notify:
                self.notify(name, value, step)
            for fn in tuple(self._hooks.get(name, ())):
                out = fn(value, step=step)
                if out is not None and name not in _OBSERVE_ONLY:
                    value = out if name == "finish" else check_replacement(name, fn, value, out)
            if not first and notify:
                self.notify(name, value, step)
            return value
        finally:
            self.firing = outer

    def notify(self, name: str, value: Any, step: int) -> None:
        """Show ``value`` to the observers of ``name`` only."""
        if not self._observers:
            return
        fns = self._observers.get(name, ())
        if name.startswith("processor."):
            fns = (*fns, *self._observers.get("processor.*", ()))
        outer, self.firing = self.firing, name
        try:
            for fn in tuple(fns):
                fn(name, value, step)
        finally:
            self.firing = outer

    def clear(self) -> None:
        """Remove every hook (observers stay: they belong to the trace and the widgets)."""
        self._hooks.clear()

    def copy(self) -> HookRegistry:
        """A registry with the same hooks (observers are not copied: a fork's trace
        registers its own)."""
        other = HookRegistry()
        other._hooks = {k: list(v) for k, v in self._hooks.items()}
        if self.model is not None:
            other.bind(self.model)
        return other

    def hooks_at(self, name: str) -> tuple:
        """The hooks registered at the point ``name``, in order (observers aside)."""
        return tuple(self._hooks.get(name, ()))

    def inside_hooks(self) -> dict | None:
        """The hooks inside the model now, ``{point: (fns...)}`` (those that change what the
        model computes; a run's history keeps them for replays), or None."""
        if not self._hooks or not self.model_attached:
            return None
        inside = self.inside_points()
        held = {k: tuple(v) for k, v in self._hooks.items() if k in inside}
        return held or None

    @classmethod
    def holding(cls, model: Any, hooks: dict | None) -> HookRegistry:
        """A registry bound to ``model`` holding ``hooks`` (from :meth:`inside_hooks`)."""
        other = cls()
        other._hooks = {k: list(v) for k, v in (hooks or {}).items()}
        other.bind(model)
        return other
