"""Decoding strategies, registered by the reference's generation-mode names."""

from __future__ import annotations

from .base import Selection, Strategy
from .sampling import GreedySearch, MultinomialSampling

STRATEGIES: dict[str, type[Strategy]] = {}


def register(cls: type[Strategy]) -> type[Strategy]:
    """Make ``cls`` the strategy of its generation mode (``cls.mode``); returns it."""
    STRATEGIES[cls.mode] = cls
    return cls


for _cls in (GreedySearch, MultinomialSampling):
    register(_cls)

from .beam import BeamSample, BeamSearch  # noqa: E402
from .constrained_beam import ConstrainedBeamSearch  # noqa: E402
from .group_beam import GroupBeamSearch  # noqa: E402

for _cls in (BeamSearch, BeamSample, GroupBeamSearch, ConstrainedBeamSearch):
    register(_cls)


from .assisted import AssistedDecoding  # noqa: E402
from .contrastive import ContrastiveSearch  # noqa: E402
from .dola import DolaDecoding  # noqa: E402

register(ContrastiveSearch)
register(DolaDecoding)
register(AssistedDecoding)


def strategy_for(mode: str) -> type[Strategy]:
    """The strategy class for a generation mode name (e.g. "beam_search")."""
    mode = getattr(mode, "value", mode)
    try:
        return STRATEGIES[mode]
    except KeyError:
        raise NotImplementedError(
            f"generation mode {mode!r} is not available in genlab yet; "
            f"available: {', '.join(sorted(STRATEGIES))}"
        ) from None


__all__ = [
    "STRATEGIES",
    "GreedySearch",
    "MultinomialSampling",
    "Selection",
    "Strategy",
    "register",
    "strategy_for",
]
