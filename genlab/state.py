"""The parts of a :class:`~genlab.engine.Run`, and how a step is undone.

* :class:`Given` -- what the run was given: model, tokenizer, prompt, user objects. Never
  changes after the start.
* :class:`Plan` -- what the config currently means: the effective config, the generation
  mode, processors, stopping criteria, the compiled step. Rebuilt when the config changes.
* :class:`RunState` -- everything a step changes and a snapshot holds: sequences, mask,
  cache, plan, strategy, recorded outputs, random state, the forced queue, the step index.

A step first takes an :class:`Undo` (cheap: references, lengths, the strategy's state and
a cache checkpoint); if anything in the step raises, :meth:`Undo.restore` puts the state
back exactly as it was.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from typing import Any

import torch

#: the per-step output lists a run records (scores, raw logits, attentions, hidden states)
RECORDED = ("scores", "logits", "attentions", "cross", "hidden")
#: processors that keep state between steps (restored on undo; rewinding them replays)
STATEFUL_PROCESSORS = (
    "UnbatchedClassifierFreeGuidanceLogitsProcessor",
    "SynthIDTextWatermarkLogitsProcessor",
)


@dataclass
class Given:
    """What a run was given; fixed for its life."""

    model: Any
    info: Any
    tokenizer: Any
    device: torch.device
    input_ids: torch.LongTensor
    prompt_length: int
    batch_size: int
    pad_token_id: int | None
    eos_token_ids: list[int]
    user_processors: Any = None
    user_criteria: Any = None
    prefix_allowed_tokens_fn: Any = None
    assistant_model: Any = None
    negative_prompt_ids: Any = None
    negative_prompt_attention_mask: Any = None
    encdec: Any = None
    streamer: Any = None
    has_default_max_length: bool = True
    has_default_min_length: bool = True
    seed: int | None = None
    keep_history: bool = False
    prefix_cache: Any = None  # a PrefixCache the prompt's keys and values come from / go to
    warnings: tuple[str, ...] = ()


@dataclass
class Plan:
    """What the config means for the next step."""

    config: Any  # effective GenerationConfig (lengths resolved for the prompt)
    mode: str
    processors: Any
    stopping_criteria: Any
    has_eos_stopping: bool
    compiled: Any  # compiled decoding step, or None
    seen: dict  # the user's config values this plan was built from


@dataclass
class RunState:
    """Everything one step changes."""

    sequences: torch.LongTensor
    attention_mask: torch.LongTensor
    cache: Any
    plan: Plan
    strategy: Any
    recorded: dict[str, list] = field(default_factory=lambda: {k: [] for k in RECORDED})
    forced: list[int] = field(default_factory=list)
    step_index: int = 0
    finished: bool = False
    streaming: bool = False  # the streamer still receives tokens


# ----------------------------------------------------------------------------------------
# checkpoints of caches and stateful processors
# ----------------------------------------------------------------------------------------
def cache_checkpoint(cache) -> Any:
    """A token from which :func:`cache_restore` rebuilds the cache as it is now."""
    if cache is None:
        return None
    if hasattr(cache, "checkpoint"):
        return cache.checkpoint()
    return ("length", cache.length())


def cache_restore(cache, token) -> None:
    """Put ``cache`` back to :func:`cache_checkpoint`'s ``token``."""
    if cache is None or token is None:
        return
    if isinstance(token, tuple) and len(token) == 2 and token[0] == "length":
        cache.crop(token[1])
        return
    cache.restore(token)


def processor_states(processors) -> list[tuple[Any, dict]] | None:
    """The state of every stateful processor (shallow copies; caches checkpointed)."""
    out = None
    for p in processors or ():
        if type(p).__name__ not in STATEFUL_PROCESSORS:
            continue
        saved = {}
        for k, v in vars(p).items():
            if hasattr(v, "length") and hasattr(v, "crop"):  # a KV cache
                saved[k] = (v, cache_checkpoint(v))
            elif isinstance(v, (torch.Tensor, torch.nn.Module)) or k == "model":
                saved[k] = v
            else:
                saved[k] = copy.copy(v)
        out = (out or []) + [(p, saved)]
    return out


def restore_processor_states(states) -> None:
    """Put the processors of :func:`processor_states` back as they were."""
    for p, saved in states or ():
        values = {}
        for k, v in saved.items():
            if isinstance(v, tuple) and len(v) == 2 and hasattr(v[0], "crop"):
                cache_restore(v[0], v[1])
                v = v[0]
            values[k] = v
        vars(p).clear()
        vars(p).update(values)


# ----------------------------------------------------------------------------------------
# undo
# ----------------------------------------------------------------------------------------
@dataclass
class Undo:
    """What :meth:`restore` needs to put a run's state back as it was when taken."""

    state: RunState
    lengths: dict[str, int]
    strategy_state: dict
    cache: Any
    processors: Any
    random: Any  # the run's RunRandom
    random_state: torch.Tensor | None  # its generator's state (None: torch's global one)

    @classmethod
    def take(cls, state: RunState, random) -> Undo:
        """The undo point of ``state`` (and of the run's random source) before a step."""
        return cls(
            state=replace(state, forced=list(state.forced)),
            lengths={k: len(v) for k, v in state.recorded.items()},
            strategy_state=state.strategy.get_state(),
            cache=cache_checkpoint(state.cache),
            processors=processor_states(state.plan.processors),
            random=random,
            random_state=random.get_state(),
        )

    def restore(self) -> RunState:
        """Put caches, processors, strategy and random state back; returns the state."""
        state = self.state
        for name, n in self.lengths.items():
            del state.recorded[name][n:]
        state.strategy.set_state(self.strategy_state)
        cache_restore(state.cache, self.cache)
        restore_processor_states(self.processors)
        self.random.set_state(self.random_state)  # the global generator is never touched
        return state
