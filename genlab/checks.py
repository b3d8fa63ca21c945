"""Argument checks shared by every layer: is it an integer, a real number, in range; can a
hook's returned value stand in for the one it was given (:func:`check_replacement`).

Each check raises a ``ValueError`` that names the argument, the value given and what is
allowed, so a user can correct the call without reading the source.

>>> check_int("top_k", 5, minimum=1)
5
>>> check_real("temperature", 0.7, allowed="> 0", ok=lambda t: t > 0)
0.7
>>> is_int(True), is_int(3), is_real(2.5)
(False, True, True)
"""

from __future__ import annotations

import math
import numbers
from typing import Any


def is_int(value: Any) -> bool:
    """True for integers (Python's, numpy's), never for ``bool``."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_real(value: Any) -> bool:
    """True for real numbers (ints and floats of Python or numpy), never for ``bool``."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def is_int_scalar_tensor(value: Any) -> bool:
    """True for a one-element integer torch tensor (e.g. ``torch.tensor(3)``)."""
    import torch

    return isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_floating_point()


def is_int_like(value: Any) -> bool:
    """:func:`is_int`, or a one-element integer tensor (how token ids often arrive)."""
    return is_int(value) or is_int_scalar_tensor(value)


def check_real(name: str, value: Any, *, allowed: str, ok) -> float:
    """Return ``float(value)`` if it is a real number (not bool, not NaN) with
    ``ok(value)`` true, else raise a ValueError naming ``name``, the value and ``allowed``."""
    if not is_real(value) or math.isnan(value) or not ok(float(value)):
        raise ValueError(f"`{name}` must be {allowed}, got {value!r}")
    return float(value)


def check_int(name: str, value: Any, *, minimum: int, maximum: int | None = None) -> int:
    """Return ``value`` as an int if it is an integer (not bool; a one-element integer
    tensor counts) in ``[minimum, maximum]``, else raise a ValueError naming ``name``."""
    if is_int_scalar_tensor(value):
        value = int(value)
    allowed = (
        f"an integer >= {minimum}" if maximum is None else f"an integer in [{minimum}, {maximum}]"
    )
    if not is_int(value) or value < minimum or (maximum is not None and value > maximum):
        raise ValueError(f"`{name}` must be {allowed}, got {value!r}")
    return int(value)


def check_replacement(name: str, fn: Any, old: Any, new: Any, *, inside: bool = False) -> Any:
    """``new`` if it can stand in for ``old`` at hook point ``name``, else a ValueError
    naming the point and the function: a tensor must keep its shape and kind; float scores
    may not hold NaN or +inf (-inf rules a token out), and with ``inside`` (a point inside
    the model's layers, :mod:`genlab.inside.taps`) every value must be finite. The result
    takes ``old``'s dtype and device."""
    import torch

    if not isinstance(old, torch.Tensor):
        return new
    what = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    where = f"the {name!r} hook {what}"
    if not isinstance(new, torch.Tensor):
        raise ValueError(
            f"{where} returned a {type(new).__name__}; return a tensor of shape "
            f"{tuple(old.shape)} (or None to leave the value as it is)"
        )
    if new.shape != old.shape:
        raise ValueError(
            f"{where} returned shape {tuple(new.shape)}; it must keep the shape "
            f"{tuple(old.shape)} of what it was given"
        )
    if new.is_floating_point() != old.is_floating_point():
        kind = "floating-point values" if old.is_floating_point() else "integer token ids"
        raise ValueError(f"{where} returned dtype {new.dtype}; it must return {kind}")
    if inside and new.is_floating_point() and not bool(torch.isfinite(new).all()):
        raise ValueError(
            f"{where} returned NaN or infinite values; activations inside the model must "
            "stay finite (every later layer and score would turn NaN): return finite values, "
            "e.g. torch.nan_to_num(x), or None to leave the value as it is"
        )
    if new.is_floating_point() and bool((torch.isnan(new) | (new == float("inf"))).any()):
        raise ValueError(
            f"{where} returned NaN or +inf scores; use -inf to rule a token out and finite "
            "values elsewhere"
        )
    return new.to(dtype=old.dtype, device=old.device)
