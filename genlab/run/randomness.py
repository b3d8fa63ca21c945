"""A run's random numbers: its own ``torch.Generator``, never torch's global one.

Every draw a strategy makes goes through the run's :class:`RunRandom` (``ctx.random``):

* a **seeded** run draws from ``torch.Generator().manual_seed(seed)``. The CPU generator
  is the same Mersenne Twister as torch's global one, so ``seed=s`` gives the tokens the
  reference gives after ``torch.manual_seed(s)``, and no other thread or run can move it;
* a run that **keeps history** without a seed gets its own generator too, started from a
  copy of torch's global state (so it draws what the reference would draw next), and
  advances the global stream by one draw so that the next such run differs;
* a plain ``genlab.generate`` call without a seed draws from torch's global generator,
  exactly as the reference does (its results then depend on ``torch.manual_seed``).

Rewinding needs the generator's state before any step. A state is 5 KB, so keeping one
per step would cost 10 MB for 2,000 sampled tokens. Instead :class:`RunRandom` logs what
each step drew (how many uniforms, of which dtype), and the history keeps a full state
only every :data:`CHECKPOINT_EVERY` steps: :meth:`RunRandom.restore` loads the last
checkpoint and draws the logged amounts again, which leaves the generator bit for bit
where it was. A draw whose consumption is not known (``torch.multinomial`` on a device or
dtype the exact race does not cover) makes the next step keep a full checkpoint.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import torch

from ..runtime.draws import draw

#: the history keeps the generator's full state once in this many steps
CHECKPOINT_EVERY = 32

#: a logged draw: (dtype, number of uniforms); ``None`` means "not replayable"
Draw = tuple[torch.dtype, int]


@dataclass(frozen=True)
class RandomMark:
    """Where a run's generator stood before a step: a full state, or ``None`` (recover it
    from the last full state and the logged draws since)."""

    state: torch.Tensor | None
    draws: tuple[Draw, ...] | None  # what the step drew (filled after it); None: unknown


class RunRandom:
    """The random source of one run (see the module docstring).

    generator: the run's own ``torch.Generator``, or None for torch's global one.
    """

    __slots__ = ("generator", "_log", "_opaque")

    def __init__(self, generator: torch.Generator | None) -> None:
        self.generator = generator
        self._log: list[Draw] = []
        self._opaque = False

    @classmethod
    def for_run(cls, seed: int | None, own: bool, device: torch.device) -> RunRandom:
        """The random source of a new run: seeded, own (a copy of the global state, which
        then moves on by one draw), or the global generator (``own=False``, no seed)."""
        dev = torch.device(device)
        if seed is not None:
            return cls(torch.Generator(dev).manual_seed(int(seed)))
        if not own:
            return cls(None)
        generator = torch.Generator(dev)
        if dev.type == "cpu":
            generator.set_state(torch.get_rng_state())
            torch.randint(2, (1,))  # the next run of this kind starts elsewhere
        else:
            generator.manual_seed(int(torch.randint(2**62, (1,)).item()))
        return cls(generator)

    # -- draws ------------------------------------------------------------------------------
    def multinomial(self, probs: torch.Tensor, num_samples: int) -> torch.LongTensor:
        """``torch.multinomial(probs, num_samples)`` without replacement, from this run's
        generator: (rows, vocab) -> (rows, num_samples)."""
        tokens, uniforms = draw(probs, num_samples, self.generator)
        if uniforms is None:
            self._opaque = True
        else:
            self._log.append((torch.float64, uniforms))
        return tokens

    def rand_like(self, x: torch.Tensor) -> torch.Tensor:
        """``torch.rand_like(x)`` from this run's generator."""
        out = torch.empty_like(x).uniform_(generator=self.generator)
        self._log.append((x.dtype, x.numel()))
        return out

    # -- history ----------------------------------------------------------------------------
    def mark(self, step: int) -> RandomMark | None:
        """What the history keeps before ``step`` (None for the global generator): a full
        state every :data:`CHECKPOINT_EVERY` steps or after an unknown draw."""
        if self.generator is None:
            return None
        self._log = []
        full = step % CHECKPOINT_EVERY == 0 or self._opaque
        self._opaque = False
        return RandomMark(self.generator.get_state() if full else None, None)

    def drawn(self) -> tuple[Draw, ...] | None:
        """The draws since :meth:`mark` (None when one of them cannot be replayed)."""
        return None if self._opaque else tuple(self._log)

    def get_state(self) -> torch.Tensor | None:
        """The generator's state (None for the global generator)."""
        return None if self.generator is None else self.generator.get_state()

    def set_state(self, state: torch.Tensor | None) -> None:
        """Put the generator back to a :meth:`get_state` result."""
        if self.generator is not None and state is not None:
            self.generator.set_state(state)
        self._log, self._opaque = [], False

    def restore(self, marks: list[RandomMark], target: int) -> None:
        """Put the generator where it stood before step ``target``, from the history's
        marks (``marks[i]``: before step i)."""
        if self.generator is None:
            return
        start = target
        while marks[start].state is None:
            start -= 1
        self.generator.set_state(marks[start].state)
        for mark in marks[start:target]:
            for dtype, n in mark.draws:
                _scratch(n, dtype, self.generator.device).uniform_(generator=self.generator)
        self._log, self._opaque = [], False

    def copy(self) -> RunRandom:
        """An independent copy (a fork's random source): same state, its own generator."""
        if self.generator is None:
            return RunRandom(None)
        other = torch.Generator(self.generator.device)
        other.set_state(self.generator.get_state())
        return RunRandom(other)


_SCRATCH = threading.local()  # per thread, by (dtype, device): what a replayed draw fills


def _scratch(n: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    buffers = _SCRATCH.__dict__
    buf = buffers.get((dtype, device))
    if buf is None or buf.numel() < n:
        buf = buffers[(dtype, device)] = torch.empty(n, dtype=dtype, device=device)
    return buf[:n]


__all__ = ["CHECKPOINT_EVERY", "RandomMark", "RunRandom"]
