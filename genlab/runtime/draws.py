"""Random draws of the sampling strategies: ``torch.multinomial`` without replacement,
the same tokens from the same random state, several times faster on the CPU.

On the CPU, ``torch.multinomial(p, k)`` without replacement is the exponential race: one
Exp(1) variable per entry (``exponential_`` on the default generator), then the k largest
``p / q``. ``exponential_`` computes every variable in one serial loop (-log1p(-u) of a
53-bit uniform u): for 16 rows of a large vocabulary, as long as the model's whole step
(benchmarks/README.md, "Figures behind the code"). :func:`multinomial` draws the same
uniforms in the same order (``uniform_`` on a float64 tensor consumes the generator
identically and is faster) into a buffer kept from step to step, and takes the
logarithm vectorised on every core: the same variables, bit for bit, so seeds give the
reference's tokens and leave the generator where the reference leaves it.

Whether this torch build draws that way is checked once (:func:`exact_race`), against
``torch.multinomial`` itself; where it does not, ``torch.multinomial`` is used.
"""

from __future__ import annotations

import threading

import torch

_BUFFERS = threading.local()  # per thread, by dtype: the buffers a draw works in
_EXACT: list[bool] = []  # [whether the fast race reproduces torch.multinomial], probed once


def multinomial(probs: torch.Tensor, num_samples: int) -> torch.LongTensor:
    """``torch.multinomial(probs, num_samples)`` (without replacement) on the default
    generator: (rows, vocab) -> (rows, num_samples), bit-identical to it."""
    return draw(probs, num_samples)[0]


def draw(
    probs: torch.Tensor, num_samples: int, generator: torch.Generator | None = None
) -> tuple[torch.LongTensor, int | None]:
    """:func:`multinomial` from ``generator`` (None: torch's global one). Also returns how
    many float64 uniforms the draw consumed, or None where ``torch.multinomial`` drew in a
    way this module does not reproduce (a run's history then keeps a full random state)."""
    race = (
        probs.device.type == "cpu"
        and probs.dtype in (torch.float32, torch.float64)
        and probs.dim() == 2
        and exact_race()
        # what torch checks (inf, nan, negative, an all-zero row): it raises its own errors
        and bool((probs.max() < float("inf")) & (probs.min() >= 0))
        and not bool((probs.sum(1) == 0).any())
    )
    if race:
        return _race(probs, num_samples, generator), probs.numel()
    return torch.multinomial(probs, num_samples, generator=generator), None


def _buffer(numel: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """A buffer of ``numel`` entries of ``dtype``, kept per thread from draw to draw: a new
    3-6 MB tensor a step costs its page faults every time."""
    buffers = _BUFFERS.__dict__
    buffer = buffers.get(dtype)
    if buffer is None or buffer.numel() < numel:
        buffer = buffers[dtype] = torch.empty(numel, dtype=dtype)
    return buffer[:numel]


def _race(probs, num_samples, generator):
    rows, vocab = probs.shape
    uniform = _buffer(rows * vocab).view(rows, vocab).uniform_(generator=generator)
    q = uniform.neg_().log1p_().neg_()  # the Exp(1) variables, in place
    if probs.dtype != q.dtype:  # rounded as .to() rounds, into a kept buffer
        q = _buffer(rows * vocab, probs.dtype).view(rows, vocab).copy_(q)
    ratio = torch.div(probs, q, out=q)
    if num_samples == 1:
        return ratio.argmax(dim=-1, keepdim=True)
    return torch.topk(ratio, num_samples).indices


def exact_race() -> bool:
    """True when :func:`multinomial`'s race gives ``torch.multinomial``'s draws here (the
    same tokens and the same generator state afterwards); probed once per process."""
    if not _EXACT:
        _EXACT.append(_probe())
    return _EXACT[0]


def _probe() -> bool:
    try:
        probs = torch.softmax(torch.randn(3, 4099, generator=torch.Generator().manual_seed(1)), -1)
        for k in (1, 5):
            ours, theirs = torch.Generator().manual_seed(11), torch.Generator().manual_seed(11)
            got = _race(probs, k, ours)
            want = torch.multinomial(probs, k, generator=theirs)
            if not (torch.equal(got, want) and torch.equal(ours.get_state(), theirs.get_state())):
                return False
        return True
    except Exception:  # any surprise in this torch build: use torch.multinomial
        return False
