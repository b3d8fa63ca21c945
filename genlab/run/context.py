"""How a run is read: the :class:`RunView` (``run.views``), and what a decoding strategy may
see and do during one step: the :class:`StepContext`, that view plus a step's verbs.

A strategy never receives the :class:`~genlab.run.engine.Run`. It gets this narrow view, made
by the engine: read-only facts (the running sequences and mask, the effective config, the
step index, the prompt length, special tokens, the model's info), the run's cache (which
the engine checkpoints before the step and restores if the step fails), and the few
operations a strategy needs:

* :meth:`~StepContext.forward` -- the one place where the model runs during generation;
* :meth:`~StepContext.process` -- the logits processors in order, with their hook points;
* :meth:`~StepContext.criteria_met` -- the stopping criteria on given sequences
  (``Run.stop``, not a strategy's, ends a run);
* :meth:`~StepContext.has` / :meth:`~StepContext.fire` / :meth:`~StepContext.notify` --
  the hook points a strategy adds, with the registry's verbs (:mod:`genlab.inside.hooks`): is
  anyone listening, pass a value through the hooks then the observers (an extra stage
  ``processor.dola``, the ``beam.candidates`` payload), show observers only;
* :meth:`~StepContext.spawn` -- a nested run (assisted decoding's draft model).

This module imports nothing from the engine; the engine passes itself in.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

from ..ids import position_ids_from_mask
from ..models.base import ModelOutput
from ..processors import call_processor, stage_name_of


class RunView:
    """A run read-only: what it was given and what is in force now (``run.views``). The
    strategies' :class:`StepContext` is this view plus the verbs of a step.

    Given at the start: :attr:`model`, :attr:`info`, :attr:`tokenizer`, :attr:`device`,
    :attr:`input_ids`, :attr:`batch_size`, :attr:`prompt_length`, :attr:`streamer`,
    :attr:`warnings`, :attr:`assistant_model`, :attr:`user_processors`. In force now:
    :attr:`sequences`, :attr:`attention_mask`, :attr:`kv_cache`, :attr:`step_index`,
    :attr:`strategy`, :attr:`random`, and the plan's :attr:`gen_config`,
    :attr:`processors`, :attr:`stopping_criteria`, :attr:`pad_token_id`,
    :attr:`eos_token_ids`, :attr:`has_eos_stopping`.
    """

    __slots__ = ("_run",)

    def __init__(self, run) -> None:
        self._run = run

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._run!r})"

    # -- given at the start ------------------------------------------------------------------
    @property
    def model(self):
        """The genlab-protocol model (strategies use it for heads and draft models only;
        the forward pass goes through :meth:`StepContext.forward`)."""
        return self._run.given.model

    @property
    def info(self):
        """The model's :class:`~genlab.models.base.ModelInfo`."""
        return self._run.given.info

    @property
    def tokenizer(self):
        """The tokenizer (or None)."""
        return self._run.given.tokenizer

    @property
    def device(self) -> torch.device:
        """Where the run's tensors live."""
        return self._run.given.device

    @property
    def input_ids(self) -> torch.LongTensor:
        """(batch, length) the prompt."""
        return self._run.given.input_ids

    @property
    def batch_size(self) -> int:
        """Number of prompts (rows before expansion for beams or several returns)."""
        return self._run.given.batch_size

    @property
    def prompt_length(self) -> int:
        """Tokens in the prompt (padding included)."""
        return self._run.given.prompt_length

    @property
    def streamer(self):
        """The streamer (or None)."""
        return self._run.given.streamer

    @property
    def warnings(self) -> tuple[str, ...]:
        """Warnings raised while the run was set up."""
        return self._run.given.warnings

    @property
    def assistant_model(self):
        """The draft model given to generate (assisted decoding), or None."""
        return self._run.given.assistant_model

    @property
    def user_processors(self):
        """The logits processors the user passed to generate (draft runs get them too)."""
        return self._run.given.user_processors

    # -- in force now ------------------------------------------------------------------------
    @property
    def sequences(self) -> torch.LongTensor:
        """(rows, length) prompt plus generated tokens."""
        return self._run.state.sequences

    @property
    def attention_mask(self) -> torch.LongTensor:
        """(rows, length) 1 on real tokens, 0 on padding."""
        return self._run.state.attention_mask

    @property
    def kv_cache(self):
        """The run's KV cache (strategies may crop or reorder it inside a step)."""
        return self._run.state.kv_cache

    @property
    def step_index(self) -> int:
        """Index of the step being computed (0 for the first generated token)."""
        return self._run.state.step_index

    @property
    def strategy(self):
        """The decoding strategy in force."""
        return self._run.state.strategy

    @property
    def random(self):
        """The run's :class:`~genlab.run.randomness.RunRandom`: every random draw of a strategy
        comes from it (the run's own generator; the global one only for plain generate
        calls without a seed, as in the reference)."""
        return self._run.random

    @property
    def gen_config(self):
        """The config in force at this step (lengths resolved for the prompt);
        ``run.config`` is the user's editable one."""
        return self._run.state.plan.config

    @property
    def processors(self):
        """The run's LogitsProcessorList (:meth:`StepContext.process` runs them with their
        hook points)."""
        return self._run.state.plan.processors

    @property
    def stopping_criteria(self):
        """The run's StoppingCriteriaList (:meth:`StepContext.criteria_met` applies it)."""
        return self._run.state.plan.stopping_criteria

    @property
    def pad_token_id(self) -> int | None:
        """The id finished rows receive (the config's, else the first EOS)."""
        return self._run.state.plan.pad_token_id

    @property
    def eos_token_ids(self) -> list[int]:
        """The EOS ids as a list (the config in force)."""
        return self._run.state.plan.eos_token_ids

    @property
    def has_eos_stopping(self) -> bool:
        """True when an EOS stopping criterion is active (finished rows get padding)."""
        return self._run.state.plan.has_eos_stopping


class StepContext(RunView):
    """The strategies' view of a run: :class:`RunView` plus the verbs of a step (one per
    run; it reads the run's current state)."""

    __slots__ = ("weights_memo",)

    def __init__(self, run) -> None:
        # a weak reference: the run holds its context, and a context holding the run made
        # every finished run a reference cycle, its cache and recorded scores kept until
        # Python's cyclic collector ran (issue 44: 320 MiB of lesson 22's dead runs)
        super().__init__(weakref.proxy(run))
        #: the weights' key the forward cache read in this call into the run
        #: (genlab/runtime/forward_cache.py, "Never stale"); the run clears it at every call
        self.weights_memo: dict = {}

    # -- operations ---------------------------------------------------------------------------
    def forward(
        self,
        new: torch.LongTensor | None = None,
        *,
        mask: torch.Tensor | None = None,
        cache=None,
        logits_to_keep: int = 1,
        hidden_states: bool | None = None,
        attentions: bool | None = None,
    ) -> ModelOutput:
        """Run the model; the one place where generation calls it.

        Defaults: the tokens the cache has not seen, the run's mask and cache (a fresh cache
        each step with ``use_cache=False``), the config's output flags. ``hidden_states=True``
        asks for every layer's hidden states whatever the config says.
        """
        run = self._run
        state, cfg = run.state, run.state.plan.config
        default = new is None and cache is None
        if cache is None:
            cache = (
                state.kv_cache
                if cfg.use_cache is not False
                else run.given.model.new_cache(state.sequences.shape[0])
            )
        if new is None:
            new = state.sequences[:, cache.length() :]
        if mask is None:
            mask = state.attention_mask
        forward, route = run.given.model.forward, state.plan.route  # chosen with the plan
        registry, extra = run.registry, {}
        if registry and registry.inside_points():  # hooks inside the layers: the eager pass
            from ..inside.taps import Taps

            if default and state.step_index == 0 and cache.length():
                cache.crop(0)  # a prompt cache computed without these hooks: compute it again
                new = state.sequences
            extra["taps"] = Taps(registry, state.step_index, cache.length())
        elif default and route == "compiled" and cache.length():
            forward = state.plan.compiled  # the prompt runs eagerly; decoding steps compiled
        encdec = run.given.encdec
        attentions = bool(cfg.output_attentions) if attentions is None else attentions
        hidden_states = bool(cfg.output_hidden_states) or bool(hidden_states)

        def compute():
            return forward(
                new,
                attention_mask=mask,
                position_ids=position_ids_from_mask(mask, new.shape[1]),
                cache=cache,
                logits_to_keep=logits_to_keep,
                output_attentions=attentions,
                output_hidden_states=hidden_states,
                **(encdec.step_inputs() if encdec is not None else {}),
                **extra,
            )

        own_call = not default or logits_to_keep != 1 or attentions or hidden_states
        if route != "cached" or own_call or extra:  # a strategy's own call (DoLa), or taps
            return compute()
        return run.given.forward_cache.forward(
            run.given.model, cache, state.sequences, mask, compute, self.weights_memo
        )

    def process(self, input_ids: torch.LongTensor, scores: torch.Tensor, **kwargs) -> torch.Tensor:
        """The logits processors in order; each one's result passes ``processor.<label>``
        (the processor's stage label, ``processor.top_k``: :func:`stage_name_of`)."""
        run = self._run
        processors, registry = run.state.plan.processors, run.registry
        if not registry.has("processor.*"):
            return processors(input_ids, scores, **kwargs)
        step = run.state.step_index
        for proc in processors:
            scores = call_processor(proc, input_ids, scores, **kwargs)
            scores = registry.fire(f"processor.{stage_name_of(proc)}", scores, step)
        return scores

    def has(self, point: str) -> bool:
        """True when a hook or observer listens at ``point`` (build payloads only then);
        ``"processor.*"``: someone listens to the processors one by one."""
        return self._run.registry.has(point)

    def fire(self, point: str, value: Any, notify: bool = True) -> Any:
        """``value`` through the hooks at ``point`` (they may replace it, except at
        ``beam.candidates``), then shown to its observers; returns what flows on. A strategy's
        extra stage is ``processor.<label>`` (DoLa's ``processor.dola``). With
        ``notify=False`` observers are not shown this part; call :meth:`notify` with the
        whole stage once it is complete (group beam search fills it group by group)."""
        registry = self._run.registry
        if registry.has(point):
            return registry.fire(point, value, self._run.state.step_index, notify=notify)
        return value

    def notify(self, point: str, value: Any) -> None:
        """Show ``value`` to the observers of ``point`` (the trace, widgets) only."""
        self._run.registry.notify(point, value, self._run.state.step_index)

    def criteria_met(self, sequences: torch.LongTensor, scores: Any = ...) -> torch.BoolTensor:
        """The stopping criteria on ``sequences`` (rows, length) -> (rows,) bools; they get
        the recorded scores as in the reference unless ``scores`` is given."""
        run = self._run
        if scores is ...:
            scores = run.recorded_scores()
        hits = run.state.plan.stopping_criteria(sequences, scores)
        hits = torch.as_tensor(hits, dtype=torch.bool, device=sequences.device)
        return hits.expand(sequences.shape[0]) if hits.dim() == 0 else hits

    def spawn(self, model, cache=None, **kwargs):
        """A nested run on ``model`` (same arguments as :func:`genlab.start`), going on in
        ``cache`` when one is given (a draft model's cache kept between drafts). It draws
        from this run's random source, in the order the reference draws."""
        kwargs.setdefault("keep_history", False)  # a nested run only goes forward
        run = self._run.__class__(model, random=self._run.random, **kwargs)
        if cache is not None:
            run.state.kv_cache = cache
        return run

    def as_model(self, model):
        """``model`` (a genlab model, an LM or a transformers model) as a genlab model."""
        from ..models.adapt import as_model

        return as_model(model)


__all__ = ["RunView", "StepContext", "call_processor"]
