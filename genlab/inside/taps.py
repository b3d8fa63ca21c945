"""Hook points inside the built-in decoders' layers, named as TransformerLens names them.

=================================  ===========================================================
``hook_embed``                     token embeddings (rows, new, hidden)
``hook_pos_embed``                 GPT-2 only: the position embeddings (rows, new, hidden)
``blocks.{i}.hook_resid_pre``      the residual stream entering layer ``i`` (rows, new, hidden)
``blocks.{i}.attn.hook_pattern``   attention probabilities (rows, heads, new, keys)
``blocks.{i}.attn.hook_z``         each head's output before the output projection
                                   (rows, new, heads, head_dim)
``blocks.{i}.hook_attn_out``       the attention block's output (rows, new, hidden)
``blocks.{i}.hook_resid_mid``      the residual stream after attention (rows, new, hidden)
``blocks.{i}.hook_mlp_out``        the MLP's output (rows, new, hidden)
``blocks.{i}.hook_resid_post``     the residual stream leaving layer ``i`` (rows, new, hidden)
``ln_final.hook_normalized``       the final norm's output, at the positions whose logits are
                                   computed (rows, kept, hidden)
=================================  ===========================================================

``new`` is the number of positions the forward pass computes: the whole prompt at step 0,
then one token a step with the KV cache (every position again with ``use_cache=False``).
A hook is ``fn(value, *, step)`` as at the loop's points: it returns a tensor of the same
shape to replace the value, or None to leave it. A hook with ``takes_positions = True``
(the interventions of :mod:`genlab.inside.steering`) is also given ``positions``: the sequence
indices (new,) of the positions in ``value``, so that it can act at chosen positions and
act the same with and without the cache.

The decoders run a point's code only when a hook or an observer listens there: a forward
pass without hooks passes ``taps=None`` and skips every point's code (a few ``is None``
tests per layer).
"""

from __future__ import annotations

import difflib
import re
import weakref

import torch

from ..checks import check_replacement

#: the final norm's point
FINAL = "ln_final.hook_normalized"
#: the per-layer points, in the order a layer visits them
LAYER_POINTS = (
    "hook_resid_pre",
    "attn.hook_pattern",
    "attn.hook_z",
    "hook_attn_out",
    "hook_resid_mid",
    "hook_mlp_out",
    "hook_resid_post",
)
_INSIDE = re.compile(r"^(hook_embed|hook_pos_embed|ln_final\.hook_normalized|blocks\..*)$")


def add_product(h, x, weight, bias, taps, name, shape, *, fused: bool = True):
    """The residual ``h`` plus ``x @ weight^T`` (plus ``bias``): the product alone passes
    the hook point ``name`` (``hook_attn_out``, ``hook_mlp_out``; None: no hooks) when one
    listens there; otherwise it is fused into the add (``fused=False``: added after the
    product is rounded, as the reference does in bfloat16). h, x: (rows * new, ...);
    shape: (rows, new, hidden), what the hook sees."""
    from ..runtime.matmul import matmul

    if name is not None and taps.wants(name):
        product = matmul(x, weight)
        if bias is not None:
            product += bias
        return h + taps.fire(name, product.view(shape)).reshape(h.shape)
    h = matmul(x, weight, add=h) if fused else h + matmul(x, weight)
    if bias is not None:
        h += bias
    return h


def is_inside_name(name: str) -> bool:
    """True when ``name`` is spelled as a point inside the model (``blocks.*``,
    ``hook_embed``, ``ln_final.*``), valid or not."""
    return bool(_INSIDE.match(name))


def point_names(num_layers: int, positions: bool = False) -> list[str]:
    """Every hook point of a decoder with ``num_layers`` layers, in the order a forward pass
    visits them (``positions``: GPT-2's ``hook_pos_embed`` too)."""
    names = ["hook_embed"] + (["hook_pos_embed"] if positions else [])
    for i in range(num_layers):
        names += [f"blocks.{i}.{p}" for p in LAYER_POINTS]
    return names + ["ln_final.hook_normalized"]


def check_point(name: str, names: list[str], model_name: str = "model") -> str:
    """``name`` if it is one of ``names``, else a ValueError listing the close names."""
    if name in names:
        return name
    close = difflib.get_close_matches(name, names, n=5, cutoff=0.6)
    layers = sum(1 for n in names if n.endswith(".hook_resid_pre"))
    m = re.match(r"^blocks\.(\d+)\.(.+)$", name)
    if m and m.group(2) in LAYER_POINTS and int(m.group(1)) >= layers:
        last = layers - 1
        close = [f"blocks.{last}.{m.group(2)}"] + [c for c in close if not c.endswith(m.group(2))]
        hint = f" ({model_name} has {layers} layers: blocks.0 to blocks.{last})"
    else:
        hint = ""
    shown = ", ".join(close[:5]) if close else ", ".join(names[:4]) + ", ..."
    raise ValueError(
        f"unknown hook point {name!r} inside {model_name}{hint}; close names: {shown} "
        "(genlab.inside.taps lists them all)"
    )


class Taps:
    """The hooks of one forward pass: a :class:`~genlab.inside.hooks.HookRegistry`'s hooks and
    observers at points inside the model, the step, and the sequence indices computed.

    ``decoder.forward(..., taps=Taps(registry, step, past))``; ``wants(name)`` is the
    cheap test the decoders make before building a point's value.
    """

    __slots__ = ("registry", "step", "past", "wanted", "mask")

    def __init__(self, registry, step: int, past: int = 0) -> None:
        self.registry = registry
        self.step = step
        self.past = past  # the sequence index of the pass's first position
        self.wanted = registry.inside_points()
        self.mask = None  # the additive mask of the layers that materialise the pattern

    def wants(self, name: str) -> bool:
        return name in self.wanted

    def wants_pattern(self) -> bool:
        return any(n.endswith("attn.hook_pattern") for n in self.wanted)

    def fire(self, name: str, value: torch.Tensor, seq_axis: int = 1, skip: int = 0):
        """``value`` through the hooks at ``name`` (each may replace it), then shown to the
        observers; returns what flows on. ``seq_axis``: the axis of the positions;
        ``skip``: how many of the pass's first positions ``value`` leaves out."""
        reg = self.registry
        outer, reg.firing = reg.firing, name
        try:
            for fn in reg.hooks_at(name):
                if getattr(fn, "takes_positions", False):
                    first = self.past + skip
                    pos = torch.arange(first, first + value.shape[seq_axis], device=value.device)
                    out = fn(value, step=self.step, positions=pos)
                else:
                    out = fn(value, step=self.step)
                if out is not None:
                    value = check_replacement(name, fn, value, out, inside=True)
        finally:
            reg.firing = outer
        reg.notify(name, value, self.step)
        return value


class TapsOwner:
    """What a decoder with hook points inside keeps: the registries that may attach hooks
    to it (weakly held), for :meth:`has_active_hooks`."""

    def _tap_users(self) -> weakref.WeakSet:
        users = self.__dict__.get("_taps_users")
        if users is None:
            users = self.__dict__["_taps_users"] = weakref.WeakSet()
        return users

    def hook_points(self) -> list[str]:
        """Every hook point inside this model, in the order a forward pass visits them."""
        names = self.__dict__.get("_taps_names")
        if names is None:
            names = point_names(self.settings.num_layers, positions=hasattr(self, "wpe"))
            self.__dict__["_taps_names"] = names
        return names

    def check_hook_point(self, name: str) -> str:
        """``name`` if it is a hook point inside this model, else a ValueError listing the
        close names."""
        return check_point(name, self.hook_points(), getattr(self, "name", "the model"))

    def attach_registry(self, registry) -> None:
        """Note that ``registry`` has hooks inside this model (see :meth:`has_active_hooks`)."""
        self._tap_users().add(registry)

    def has_active_hooks(self) -> bool:
        """True while any hook or observer is attached to a point inside this model (a run
        with such hooks): a cache of forward results must then not serve this model."""
        return any(r.inside_points() for r in list(self._tap_users()))

    def _layer_names(self, index: int) -> tuple[str, ...]:
        names = self.__dict__.get("_taps_layers")
        if names is None:
            names = [
                tuple(f"blocks.{i}.{p}" for p in LAYER_POINTS)
                for i in range(self.settings.num_layers)
            ]
            self.__dict__["_taps_layers"] = names
        return names[index]


__all__ = [
    "FINAL",
    "LAYER_POINTS",
    "Taps",
    "TapsOwner",
    "check_point",
    "is_inside_name",
    "point_names",
]
