"""The step loop: one place where generation happens.

``genlab.generate(model, ...)`` behaves like transformers' ``generate()`` (reference
4.56.2). It is a :class:`Run` driven to the end; a notebook can instead hold the Run and
``step()``, ``force()``, ``rewind()`` and ``fork()`` it. One step::

    strategy.forward (via the step context) -> raw logits       [hook: logits]
    strategy.process: logits processors     -> scores           [hook: processor.<label>]
                                                                 [hook: scores]
    strategy.select / strategy.force        -> next tokens      [hook: select]
    append tokens, strategy bookkeeping (stopping criteria), reorder the cache for beams
    ---- commit ----                                             [hook: step_end]

A step is a transaction: it takes an :class:`~genlab.run.state.Undo` first, and any error
before the commit (a hook, a processor, the model, the strategy, KeyboardInterrupt) puts the
run back exactly as it was and re-raises the error unchanged. ``step_end`` hooks run after
the commit. Strategies see a :class:`~genlab.run.context.StepContext`, never the Run; the trace
observes the hook points like any other hook.

The Run's other parts have modules of their own: its set-up stages (:mod:`genlab.run.plan`
lists them), its :class:`~genlab.run.records.Step` records and output
(:mod:`genlab.run.records`), its timeline for rewinding and replaying (:mod:`genlab.run.timeline`),
what a fork copies (:mod:`genlab.run.branches`) and its result (:mod:`genlab.run.result`).
"""

from __future__ import annotations

import contextlib
import copy
import threading
import warnings

import torch

from ..config import prepare_config
from ..config.generation import INCONSISTENT
from ..ids import check_ids
from ..inside.hooks import HookRegistry, warn_unheard
from ..models.adapt import as_model
from ..processors.samplers import drawing_from
from ..runtime import threads
from ..runtime.kv_cache import compiled_forward
from ..strategies import Selection, strategy_for
from ..text.grammar import GRAMMAR_ARGUMENTS, check_forced, with_grammar
from .branches import fork_parts
from .context import RunView, StepContext
from .inputs import forced_ids, prepare_inputs, warn_ignored_arguments
from .plan import (
    carry_processor_state,
    check_row_layout,
    config_values,
    effective_config,
    forward_route,
    make_plan,
    switch_strategy,
)
from .randomness import RunRandom
from .records import Step, build_output, step_record
from .result import GenerationResult
from .state import RunState, Undo, initial_state
from .timeline import Timeline, needs_replay

__all__ = ["Run", "RunView", "Step", "as_model", "generate", "prepare_config", "start"]


#: the calls into a run that compute (the others edit or read it)
_COMPUTES = frozenset({"step", "run", "rewind"})


class _AtLimit(Exception):
    """A step was asked of a run that already holds max_length tokens."""


def _set_up_warnings(fn):
    """Run ``fn()`` and return (result, the warnings it raised as strings). Each distinct
    warning is shown once (the config is checked more than once while a run is set up), at
    the user's line: the first frame outside genlab."""
    import os
    import sys

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fn()
    distinct = list({(w.category, str(w.message)): w for w in caught}.values())
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # genlab/
    frame, level = sys._getframe(0), 1  # level 1: this function, warnings.warn's caller
    while frame.f_back is not None and os.path.abspath(frame.f_code.co_filename).startswith(
        package
    ):
        frame, level = frame.f_back, level + 1
    for w in distinct:
        warnings.warn(w.message, stacklevel=level)
    return result, tuple(str(w.message) for w in distinct)


# ----------------------------------------------------------------------------------------
# the run
# ----------------------------------------------------------------------------------------
class Run:
    """A generation in progress: step it, force tokens, rewind, fork, edit its config.

    Create it with :func:`start` or ``lm.start(...)`` (same arguments as :func:`generate`,
    plus ``trace``, ``seed`` and ``keep_history``). A run has three parts: ``given`` (what
    it was given), ``state`` (what a step changes) and its ``timeline`` (for
    :meth:`rewind`); ``views`` reads them.
    ``run.config`` is the GenerationConfig to edit between steps; any change takes effect
    at the next step, or that step is refused with a ValueError and nothing changes.

    Arguments (those of :func:`generate`, where they mean what the reference's do):
    model: a genlab model, an ``LM`` or a transformers model; input_ids, attention_mask:
    the prompt (batch, length) and its mask; generation_config and keyword config fields;
    logits_processor, stopping_criteria: your own processors and criteria (added to the
    built ones); prefix_allowed_tokens_fn: allowed next tokens per row; synced_gpus:
    accepted and ignored (one process); assistant_model: a draft model for assisted
    decoding; streamer: receives the tokens as they are chosen; negative_prompt_ids,
    negative_prompt_attention_mask: the unconditional prompt of classifier-free guidance;
    use_model_defaults: whether the model's generation defaults fill unset fields;
    tokenizer: for stop strings, healing and readable records; trace: record every stage
    (``True`` or Tracer options such as ``{"depth": 20}``); seed: the run's own random
    stream; keep_history: keep a :class:`~genlab.run.timeline.Timeline` (:attr:`timeline`) so
    that :meth:`rewind` works (True by default, as in ``lm.start``); forward_cache: a
    :class:`~genlab.runtime.forward_cache.ForwardCache` whose kept forward passes the run may
    reuse and add to (its results stay bit-identical);
    random: a :class:`~genlab.run.randomness.RunRandom` to draw from (nested runs share their
    parent's).

    One thread at a time: a call from a second thread while the run is stepping waits for
    it; a call from inside one of the run's own hooks (or processors, criteria, streamer)
    raises a RuntimeError naming the hook point, except :meth:`fork` and :attr:`output`
    from a ``step_end`` or ``finish`` hook, where the step has committed.

    >>> run = lm.start("Once upon a time", do_sample=True, seed=0)
    >>> run.step(); run.config.top_k = 5; run.step(); run.rewind(1)
    Step(0, text=[','], logprobs=[-0.062], finished=False)
    Step(1, text=['␣there'], logprobs=[-2.002], finished=False)
    Run(sample, step=1, rows=1, running)
    >>> run.force(" dragon"); run.step().text
    Run(sample, step=1, rows=1, running)
    [' dragon']
    """

    def __init__(
        self,
        model,
        *,
        input_ids=None,
        attention_mask=None,
        generation_config=None,
        logits_processor=None,
        stopping_criteria=None,
        prefix_allowed_tokens_fn=None,
        synced_gpus=None,
        assistant_model=None,
        streamer=None,
        negative_prompt_ids=None,
        negative_prompt_attention_mask=None,
        use_model_defaults=None,
        tokenizer=None,
        trace: bool | dict = False,
        seed: int | None = None,
        keep_history: bool = True,
        forward_cache=None,
        random: RunRandom | None = None,
        **kwargs,
    ) -> None:
        self.registry = HookRegistry()
        self._tracer = None
        self._tracer_off: list = []
        #: the Step records of the steps taken by :meth:`step`, and by :meth:`run` when the
        #: run keeps a timeline (``keep_history=True``; ``generate`` keeps none); a rewind
        #: drops the records of the steps it undoes
        self.history: list[Step] = []
        #: what :meth:`rewind` needs (``keep_history=True``), or None
        self.timeline: Timeline | None = None
        self._output = None
        self._returned_nodes = None  # beam search's winners, named when the output is built
        self._ctx = StepContext(self)  # the strategies' view, with a step's verbs
        self._lock = threading.Lock()  # one caller at a time (see _exclusive)
        self._owner: int | None = None  # the thread holding the lock
        self._stepping = False  # inside a step (its hooks, processors, criteria, streamer)
        self._stop_requested = False
        self._finished_by: str | None = None
        if any(name in kwargs for name in GRAMMAR_ARGUMENTS):
            # json_schema= / regex= / grammar=: compiled now, a processor first among the user's
            logits_processor = with_grammar(model, tokenizer, logits_processor, kwargs)

        def set_up():
            return self._set_up(
                as_model(model),
                input_ids,
                attention_mask,
                generation_config,
                use_model_defaults,
                kwargs,
                dict(
                    tokenizer=tokenizer,
                    user_processors=logits_processor,
                    user_criteria=stopping_criteria,
                    prefix_allowed_tokens_fn=prefix_allowed_tokens_fn,
                    assistant_model=assistant_model,
                    negative_prompt_ids=negative_prompt_ids,
                    negative_prompt_attention_mask=negative_prompt_attention_mask,
                    streamer=streamer,
                    seed=seed,
                    keep_history=keep_history,
                    forward_cache=forward_cache,
                    random=random,
                    synced_gpus=synced_gpus,
                ),
            )

        _, caught = _set_up_warnings(set_up)
        self.given.warnings = caught
        self.registry.bind(self.given.model)  # hook points inside its layers, if it has them
        if self.given.keep_history:
            self.timeline = Timeline(self, replays=needs_replay(self))
        if trace:
            from .trace import Tracer

            self.attach_tracer(Tracer(self, **(trace if isinstance(trace, dict) else {})))

    # -- set-up ------------------------------------------------------------------------------
    def _set_up(self, model, input_ids, attention_mask, generation_config, use_defaults,
                kwargs, parts) -> None:  # fmt: skip
        """The set-up pipeline, each stage entered once: the call's config -> what the run
        was given -> the plan -> the first state (see :mod:`genlab.run.plan`)."""
        inputs = kwargs.pop("inputs", None)
        config, unused = prepare_config(model, generation_config, use_defaults, **kwargs)
        random, synced_gpus = parts.pop("random"), parts.pop("synced_gpus")
        self.given = prepare_inputs(
            model, config, unused, input_ids, attention_mask, inputs=inputs, parts=parts,
            generate=generate, has_default_max_length="max_length" not in kwargs,
            has_default_min_length="min_length" not in kwargs,
        )  # fmt: skip
        warn_ignored_arguments(config, synced_gpus=synced_gpus)  # (the inputs stage's)
        self.config = config
        plan = make_plan(config, self.given)
        initial_state(self, plan, self._ctx, random)

    def _refresh_plan(self, seen: dict | None = None) -> None:
        """Rebuild the plan (and the strategy, on a mode switch) after a config change;
        ``seen``: the config's values when the caller has them already."""
        state = self.state
        seen = config_values(self.config) if seen is None else seen
        if seen == state.plan.seen:
            return
        plan = make_plan(self.config, self.given, seen)
        self._check_length(plan)
        carry_processor_state(state.plan.processors, plan.processors)  # mirostat's μ
        old = state.strategy
        cls = strategy_for(plan.mode)
        check_row_layout(old, cls, plan, state.plan)
        if type(old) is cls:
            old.config = plan.config  # beam strategies refuse changes of their row layout
            strategy = old
        else:
            strategy = switch_strategy(old, cls, plan, state.plan, self._ctx)
        if self.given.encdec is None:  # a config change may turn compiling on or off
            plan.compiled = compiled_forward(
                self.given.model, plan.config, state.kv_cache, plan.mode
            )
        plan.route = forward_route(plan, self.given)
        state.plan, state.strategy = plan, strategy

    # -- one caller at a time ------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        """True while a step, run, rewind, fork or edit is in progress (in any thread)."""
        return self._lock.locked()

    @contextlib.contextmanager
    def _exclusive(self, op: str, committed_ok: bool = False):
        """Hold the run for ``op``: another thread waits; a call from inside this run's own
        step (a hook, processor, criterion or streamer) is refused by name, except
        ``committed_ok`` operations from the hooks that run after the commit."""
        me = threading.get_ident()
        if self._owner == me and not self._stepping:  # inside an operation of this thread
            yield  # that is not a step (a rewind replaying steps): it holds the run already
            return
        if self._owner == me:
            point = self.registry.firing
            if committed_ok and point in ("step_end", "finish"):
                yield
                return
            where = (
                f"a hook at {point!r}"
                if point
                else "a processor, stopping criterion or streamer of its step"
            )
            raise RuntimeError(
                f"run.{op}() was called from inside {where} of this run, while it is "
                f"stepping (step {self.state.step_index}): a run cannot {op} in the middle of "
                "its own step. Call it after the step returns (from a hook, fork() and "
                "output work in a 'step_end' hook, and stop() ends the run after the step)."
            )
        # the thread policy of a busy machine while the run computes (genlab/runtime/threads.py)
        policy = threads.watching() if op in _COMPUTES else contextlib.nullcontext()
        with self._lock, policy:
            self._owner = me
            self._ctx.weights_memo.clear()  # user code ran since the last call: read again
            try:
                yield
            finally:
                self._owner = None

    # -- public API --------------------------------------------------------------------------
    @property
    def finished(self) -> bool:
        """True once a stopping criterion ended every row (or the run was interrupted)."""
        return self.state.finished

    @property
    def finished_by(self) -> str | None:
        """Why the run ended: ``"length"`` (max_length / max_new_tokens: raising it resumes
        the run), ``"eos"`` (every row produced an EOS token), ``"criteria"`` (stop strings,
        max_time or your own criteria), ``"interrupted"`` (:meth:`stop` or Ctrl-C); None
        while it runs."""
        return self._finished_by if self.state.finished else None

    def set(self, **fields) -> Run:
        """Change config fields now, checked at once: a value or a mode switch that cannot
        apply is refused with a ValueError and the config stays as it was.

        Lengths mean what they say: ``max_new_tokens`` (or ``max_length``) below what is
        already generated is refused; raised on a run that ended by length, the run goes
        on (its last step is computed again under the new limit).

        >>> run = lm.start("Once upon a time", do_sample=True, seed=0)
        >>> run.set(top_k=5, temperature=0.7)
        Run(sample, step=0, rows=1, running)
        """
        with self._exclusive("set"):
            before = copy.deepcopy(self.config)
            state = self.state
            plan, strategy = state.plan, state.strategy
            strategy_state = strategy.get_state()
            try:
                unused = self.config.update(**fields)
                if unused:
                    raise ValueError(f"not GenerationConfig fields: {', '.join(sorted(unused))}")
                with warnings.catch_warnings():  # update() has warned about these once
                    warnings.filterwarnings("ignore", INCONSISTENT, UserWarning)
                    self._refresh_plan()
                self._can_go_on()  # a run that cannot go on under the new limit: refused now
            except BaseException:
                self.config = before
                state.plan, state.strategy = plan, strategy
                strategy.set_state(strategy_state)
                raise
            st = self.state
            if not st.finished and st.sequences.shape[1] >= int(st.plan.config.max_length):
                self._finish(st, "length")  # the new limit is exactly what the run holds
            self._resume_if_longer()
        return self

    # -- rewind, fork, going on after a raised length limit ------------------------------------
    def rewind(self, n: int = 1) -> Run:
        """Undo the last ``n`` steps, restoring the exact earlier state: tokens, cache,
        random state, the config in force at that step and the forced queue. ``rewind(0)``
        does nothing. Needs the run's :attr:`timeline` (``keep_history=True``, the default)."""
        with self._exclusive("rewind"):
            self._rewind(n)
        return self

    def _rewind(self, n: int) -> None:
        if self.timeline is None:
            raise ValueError(
                "this run keeps no history: start it with keep_history=True (the default) to rewind"
            )
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= self.state.step_index:
            raise ValueError(f"can rewind 0..{self.state.step_index} steps, not {n!r}")
        if n == 0:
            return
        self.timeline.rewind(self, self.state.step_index - n)
        self.state.finished = False
        self._finished_by = None
        self._output = None

    def fork(self) -> Run:
        """An independent copy: stepping, forcing, rewinding or editing one never changes
        the other. It shares only the model and tokenizer; everything else (cache, config,
        strategy, plan and processors, forced queue, random state, history, hooks, trace)
        is its own (:func:`genlab.run.branches.fork_parts`)."""
        with self._exclusive("fork", committed_ok=True):
            parts = fork_parts(self)
            other = copy.copy(self)
            other.given = copy.copy(self.given)
            other.given.streamer = None
            other._lock, other._owner = threading.Lock(), None
            other._stop_requested = other._stepping = False
            other.state, other.config, other.random = parts.state, parts.config, parts.random
            other.registry, other.history, other.timeline = (
                parts.registry,
                parts.history,
                parts.timeline,
            )
            other._ctx = StepContext(other)
            other._tracer, other._tracer_off = None, []
            if self._tracer is not None:
                other.attach_tracer(self._tracer.fork(other))
            return other

    def _resume_if_longer(self) -> None:
        """A run that ended by length goes on when its limit was raised: its last step is
        computed again under the new config (so rows that ended by EOS stay ended)."""
        if not self._can_go_on():
            return
        config = copy.deepcopy(self.config)
        self._rewind(1)
        self.config = config
        self._step(want_record=True)

    def _can_go_on(self) -> bool:
        """Whether the run ended by length under a limit that is now higher (it then goes
        on); a ValueError when it would but cannot (it keeps no history)."""
        st = self.state
        if not (st.finished and self._finished_by == "length" and st.step_index):
            return False
        if int(effective_config(self.config, self.given).max_length) <= st.sequences.shape[1]:
            return False
        if self.timeline is None:
            raise ValueError(
                "this run ended by length and keeps no history, so it cannot go on: start it "
                "with keep_history=True (the default), or start a new run"
            )
        return True

    def _check_length(self, plan) -> None:
        """Refuse a length limit below the tokens already generated (before any change)."""
        have = self.state.sequences.shape[1]
        limit = int(plan.config.max_length)
        if limit >= have:
            return
        generated = have - self.given.prompt_length
        if self.config.max_new_tokens is not None:
            field, value = "max_new_tokens", self.config.max_new_tokens
        else:
            field, value = "max_length", self.config.max_length
        raise ValueError(
            f"{field}={value} is below what this run already holds ({generated} generated "
            f"tokens, {have} with the prompt): give at least {generated} new tokens, or "
            f"rewind({generated - max(limit - self.given.prompt_length, 0)}) first"
        )

    @property
    def pending_forced(self) -> tuple[int, ...]:
        """Token ids queued by :meth:`force` that the next steps will take, in order."""
        return tuple(self.state.forced)

    @property
    def tracer(self):
        """The :class:`~genlab.run.trace.Tracer` recording this run (``trace=True``), or None."""
        return self._tracer

    def attach_tracer(self, tracer) -> None:
        """Record with ``tracer`` (a :class:`~genlab.run.trace.Tracer` or subclass) from the next
        step on, in place of the current one. It observes the hook points."""
        for off in self._tracer_off:
            off()
        self._tracer = tracer
        self._tracer_off = [] if tracer is None else tracer.attach(self.registry)

    def hooks(self, mapping=None, **hooks):
        """Temporary hooks for a ``with`` block: ``with run.hooks(logits=fn): run.step()``.

        mapping: ``{point: fn or [fns]}`` (for names that are not identifiers, such as
        ``"processor.top_k"`` or ``"blocks.3.hook_resid_post"``: the points inside
        the built-in decoders' layers, :mod:`genlab.inside.taps`); keyword arguments add
        more."""
        return self.registry.temporary(mapping, **hooks)

    def add_hook(self, name: str, fn):
        """Register a permanent hook ``fn(value, *, step)`` at the hook point ``name``;
        returns a function that removes it."""
        return self.registry.add(name, fn)

    def force(self, token) -> Run:
        """Make the next step(s) choose ``token``: an id, a list of ids, a token string or
        a text (all of its tokens, one per step). Queued ids: :attr:`pending_forced`."""
        ids = forced_ids(token, self.given.tokenizer, self.given.info.vocab_size)
        with self._exclusive("force"):
            check_forced(self.state, [*self.state.forced, *ids])  # a grammar's refusal
            self.state.forced = [*self.state.forced, *ids]
        return self

    def clear_forced(self) -> tuple[int, ...]:
        """Drop the queued forced ids (e.g. after a rewind, to take another token instead);
        returns them."""
        with self._exclusive("clear_forced"):
            dropped, self.state.forced = tuple(self.state.forced), []
        return dropped

    def step(self, *, record: bool = True) -> Step | None:
        """Advance one token; returns the Step record (None when already finished).

        ``record=False`` adds nothing to :attr:`history` and returns None, unless a
        ``step_end`` hook listens (it is given the record, which is then returned too): the
        :class:`~genlab.run.timeline.Timeline` replays steps so, with the run's loop hooks set
        aside."""
        with self._exclusive("step"):
            self._resume_if_longer()
            if self.state.finished:
                return None
            return self._step(want_record=record)

    def run(self, max_steps: int | None = None, keep_on_interrupt: bool = True, progress=False):
        """Step until a stopping criterion ends the generation (or ``max_steps`` steps);
        returns the output (:attr:`output`: the final one, or the tokens so far when
        ``max_steps`` came first). On KeyboardInterrupt the step in progress is undone and every
        step before it kept: by default the run ends as interrupted and its output is
        returned; with ``keep_on_interrupt=False`` the interrupt propagates (as
        ``genlab.generate`` and the reference do). :meth:`stop` from another thread ends it
        after the current step. ``progress=True`` shows a tqdm bar."""
        with self._exclusive("run"):
            return self._run_steps(max_steps, keep_on_interrupt, progress)

    def _run_steps(self, max_steps, keep_on_interrupt, progress):
        self._resume_if_longer()
        n = 0
        want = self.given.keep_history
        bar = self._progress_bar() if progress else None
        try:  # stop() from a hook or another thread ends it after a commit (_transaction)
            while not self.state.finished and (max_steps is None or n < max_steps):
                before = self.state.sequences.shape[1]
                self._step(want_record=want)
                n += 1
                if bar is not None:
                    bar.update(self.state.sequences.shape[1] - before)
        except KeyboardInterrupt:
            if not keep_on_interrupt:  # the run is abandoned: its streamer's reader must
                self._end_stream(self.state)  # not wait for tokens that never come
                raise
            warnings.warn(
                f"generation interrupted after {self.state.step_index} steps; the tokens "
                "produced so far are kept",
                stacklevel=3,
            )
            self._end_interrupted()
        finally:
            self._stop_requested = False
            if bar is not None:
                bar.close()
        return self._output_now()

    def _progress_bar(self):
        from tqdm.auto import tqdm

        total = int(self.state.plan.config.max_length) - self.state.sequences.shape[1]
        return tqdm(total=max(total, 0), unit="tok", desc=f"genlab {self.mode}")

    def stop(self) -> Run:
        """End the run, keeping every step so far (``finished_by`` becomes "interrupted");
        a :meth:`rewind` makes it steppable again. Called from another thread while
        :meth:`run` is going, or from one of the run's own hooks, it ends the run once the
        step in progress has committed."""
        if self.busy:  # another thread's step, or a hook of this one: after its commit
            self._stop_requested = True
            return self
        with self._exclusive("stop"):
            if not self.state.finished:
                self._end_interrupted()
        return self

    def _end_interrupted(self) -> None:
        self._finish(self.state, "interrupted")

    @property
    def output(self):
        """The reference-shaped output (LongTensor or output object): the final one once
        the run finished (the ``finish`` hooks fired on it when it finished), the tokens so
        far before. Reading it changes nothing."""
        with self._exclusive("output", committed_ok=True):
            return self._output_now()

    def result(self):
        """The run as a :class:`~genlab.run.result.GenerationResult`: its :attr:`output` (so
        far, or final) with the texts and tokens of every row and the trace."""
        with self._exclusive("result", committed_ok=True):
            out = self._output_now()
        seqs = out if isinstance(out, torch.Tensor) else out.sequences
        n, tok = self.given.prompt_length, self.given.tokenizer
        texts, tokens = [], []
        for row in seqs[:, n:].tolist():
            if tok is None:
                texts.append(" ".join(map(str, row)))
                tokens.append([str(t) for t in row])
                continue
            texts.append(tok.decode(row, skip_special_tokens=True))
            tokens.append([tok.decode([t]) for t in row])
        trace = self._tracer.trace if self._tracer is not None else None
        return GenerationResult(out, seqs, n, texts, tokens, self, trace)

    def _output_now(self):
        """:attr:`output`, for callers that hold the run already."""
        if self._output is None:
            self._output = self._build_output()
        return self._output

    @property
    def returned_nodes(self) -> list[int]:
        """Beam search: the beam-tree node of each returned sequence, in output row order
        (what ``finalize`` chose; [] while the run goes on, or for other strategies)."""
        if not self.state.finished:
            return []
        nodes = self._returned_nodes  # named when the final output was built
        return [] if nodes is None else [int(v) for v in torch.as_tensor(nodes).reshape(-1)]

    @property
    def texts(self) -> list[str]:
        """The text generated so far in every row (prompt and special tokens left out);
        needs the run's tokenizer (``lm.start`` has one)."""
        tok = self.given.tokenizer
        if tok is None or not hasattr(tok, "decode"):
            raise ValueError(
                "this run has no tokenizer to decode with: read run.sequences, or start it "
                "with lm.start(...) / tokenizer=..."
            )
        new = self.state.sequences[:, self.given.prompt_length :].tolist()
        return [tok.decode(row, skip_special_tokens=True) for row in new]

    @property
    def text(self) -> str:
        """The text generated so far in the first row (see :attr:`texts`)."""
        return self.texts[0]

    def recorded_scores(self):
        """What the reference hands stopping criteria as ``scores``."""
        cfg = self.state.plan.config
        if cfg.return_dict_in_generate and cfg.output_scores:
            return tuple(self.state.recorded["scores"])
        return None

    # -- what a user reads most; the rest: run.views -------------------------------------------
    @property
    def sequences(self) -> torch.LongTensor:
        """(rows, length) all tokens, the prompt included."""
        return self.state.sequences

    @property
    def step_index(self) -> int:
        """Steps taken so far."""
        return self.state.step_index

    @property
    def prompt_length(self) -> int:
        """Prompt tokens (the width of the prompt)."""
        return self.given.prompt_length

    @property
    def mode(self) -> str:
        """The generation mode's name."""
        return self.state.plan.mode

    @property
    def views(self) -> RunView:
        """The run read-only (:class:`~genlab.run.context.RunView`, the view its strategy's
        step context extends): ``run.views.kv_cache``, ``run.views.gen_config``,
        ``run.views.tokenizer`` ..."""
        return RunView(self)  # made when asked: a view kept by the run would be a cycle

    # -- the step --------------------------------------------------------------------------------
    def _step(self, want_record: bool) -> Step | None:
        self._stepping = True
        try:
            return self._step_in_mode(want_record)
        finally:
            self._stepping = False

    def _step_in_mode(self, want_record: bool) -> Step | None:
        # A run started under torch.inference_mode() holds inference tensors (its cache is
        # written in place every step); it goes on in that mode wherever it is stepped.
        try:
            if self.state.sequences.is_inference() and not torch.is_inference_mode_enabled():
                with torch.inference_mode():
                    return self._transaction(want_record)
            with torch.no_grad():
                return self._transaction(want_record)
        except _AtLimit:  # the config was edited down to exactly the tokens held
            self._finish(self.state, "length")
            return None

    def _transaction(self, want_record: bool) -> Step | None:
        undo = Undo.take(self.state, self.random)
        values = config_values(self.config)
        timeline = self.timeline
        entry = timeline.begin(self, values) if timeline is not None else None
        try:
            # the step writes a new state object (its recorded lists are shared: the undo
            # truncates them back) ...
            state = copy.copy(self.state)
            self.state = state
            record, took, new, done = self._compute(state, want_record, values)
        except BaseException:
            self.state = undo.restore()  # ... or puts the old one back, as it was
            raise
        # ---- committed ----
        self._output = None
        if entry is not None:
            timeline.commit(entry, took, self.random)
            if record is not None and want_record:
                self.history.append(record)
        if state.streaming:  # after the commit: a streamer never shows an undone token
            self.given.streamer.put(new)
        if done:
            self._finish(state, self._why_done(state), output=False)
        if record is not None and self.registry.has("step_end"):
            self.registry.fire("step_end", record, record.index)
        if done:  # the final output, after the last step's step_end hooks
            self._output = self._build_output()
        if self._stop_requested and not state.finished:  # stop() during this step
            self._stop_requested = False
            self._end_interrupted()
        return record

    def _why_done(self, state: RunState) -> str:
        if state.sequences.shape[1] >= int(state.plan.config.max_length):
            return "length"
        eos = state.plan.eos_token_ids
        if eos and bool(torch.isin(state.sequences[:, -1:], torch.tensor(eos)).all()):
            return "eos"
        return "criteria"

    def _compute(self, state: RunState, want_record: bool, values: dict):
        """One step on ``state`` (a copy the transaction owns); returns its record, the
        forced id it took, the new tokens for the streamer and whether the run is done."""
        self._refresh_plan(values)
        registry, ctx, strategy = self.registry, self._ctx, state.strategy
        if registry:
            warn_unheard(registry, state.plan)  # hooks at processor labels the plan lacks
        cfg, idx = state.plan.config, state.step_index
        if state.sequences.shape[1] >= int(cfg.max_length):
            raise _AtLimit

        # 1. forward pass over the tokens the cache has not seen
        out = strategy.forward(ctx)
        logits = out.logits[:, -1, :].to(dtype=torch.float32, copy=True)
        if registry:
            logits = registry.fire("logits", logits, idx)

        # 2. logits processors (the strategy decides how: beams take a log-softmax first),
        # 3. choose. A processor's random draws (XTC's, also in assisted decoding's drafts,
        # processed during select) come from the run's generator in every mode
        with drawing_from(ctx.random):
            scores = strategy.process(ctx, logits)
            if registry:
                scores = registry.fire("scores", scores, idx)
            took = state.forced[0] if state.forced else None
            sel = (
                strategy.select(ctx, scores) if took is None else strategy.force(ctx, scores, took)
            )
        if registry.has("select"):
            tokens = registry.fire("select", sel.tokens, idx)
            check_ids("tokens returned by the 'select' hook", tokens, self.given.info.vocab_size)
            sel = Selection(tokens, sel.parents, sel.info, sel.scores, sel.logits)

        # 4. the new state: recorded outputs, tokens, mask, bookkeeping
        rec = state.recorded
        if cfg.return_dict_in_generate:
            several = sel.scores is not None
            if cfg.output_scores:
                rec["scores"].extend(sel.scores if several else (scores,))
            if cfg.output_logits:
                rec["logits"].extend(sel.logits if several else (logits,))
            if cfg.output_attentions:
                rec["attentions"].append(out.attentions)
                if self.given.encdec is not None:
                    rec["cross"].append(getattr(out, "cross_attentions", None))
            if cfg.output_hidden_states:
                rec["hidden"].append(out.hidden_states)
        new = sel.tokens if sel.tokens.dim() == 2 else sel.tokens[:, None]
        reorder = sel.parents is not None and not torch.equal(
            sel.parents, torch.arange(len(sel.parents), device=sel.parents.device)
        )
        sequences = state.sequences[sel.parents] if reorder else state.sequences
        state.sequences = torch.cat([sequences, new], dim=-1)
        mask = state.attention_mask  # rows of one input share it, as in the reference
        state.attention_mask = torch.cat([mask, mask.new_ones((mask.shape[0], new.shape[1]))], -1)
        if took is not None:
            state.forced = state.forced[1:]
        strategy.update(ctx, sel)
        state.step_index = idx + 1
        done = strategy.is_done(ctx)
        record = None
        if want_record or registry.has("step_end"):
            record = step_record(idx, sel, scores, took is not None, done, self.given.tokenizer)
        streamed = None
        if state.streaming:
            streamed = new.cpu() if sel.tokens.dim() == 2 else sel.tokens.cpu()
        if reorder:  # last: an in-place reorder of the cache cannot be undone
            state.kv_cache.reorder(sel.parents)
        return record, took, streamed, done

    def _finish(self, state: RunState, by: str, output: bool = True) -> None:
        """The run ended (``by``: see :attr:`finished_by`); its final output is built now
        and the ``finish`` hooks see it (``output=False``: the caller builds it later)."""
        self._finished_by = by
        state.finished = True
        self._end_stream(state)
        if output:
            self._output = self._build_output()

    def _end_stream(self, state: RunState) -> None:
        if state.streaming:
            state.streaming = False
            self.given.streamer.end()

    def _build_output(self):
        state = self.state
        out, self._returned_nodes = build_output(state, self._ctx, self.given.encdec)
        if self.registry and state.finished:  # fired once, when the run finishes
            out = self.registry.fire("finish", out, state.step_index)
        return out

    def __repr__(self) -> str:
        st = self.state
        status = "finished" if st.finished else "running"
        return f"Run({st.plan.mode}, step={st.step_index}, rows={st.sequences.shape[0]}, {status})"


def _call_custom_generate(fn, model, run: Run):
    """A user's decoding loop, after the usual preparation: ``fn(run)`` (genlab style, one
    parameter), or the reference's ``fn(model, input_ids, logits_processor=...,
    stopping_criteria=..., generation_config=..., synced_gpus=..., streamer=...,
    attention_mask=..., use_cache=...)``."""
    import inspect

    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) == 1 and not any(p.kind == p.VAR_KEYWORD for p in params):
        return fn(run)
    kwargs = {
        "attention_mask": run.views.attention_mask,
        "use_cache": run.views.gen_config.use_cache,
    }
    inner = getattr(run.views.kv_cache, "inner", None)
    if inner is not None:
        kwargs["past_key_values"] = inner
    return fn(
        model,
        run.sequences,
        logits_processor=run.views.processors,
        stopping_criteria=run.views.stopping_criteria,
        generation_config=run.views.gen_config,
        synced_gpus=False,
        streamer=run.views.streamer,
        **kwargs,
    )


def _prompt(inputs, kwargs: dict):
    """The prompt given positionally (``inputs``) or as ``input_ids=``, popped from kwargs."""
    input_ids = kwargs.pop("input_ids", None)
    if inputs is not None and input_ids is not None:
        raise ValueError(
            "the prompt was given twice, as inputs and as input_ids: pass only one of them"
        )
    return input_ids if inputs is None else inputs


def start(model, inputs=None, **kwargs) -> Run:
    """Create a steppable :class:`Run` of ``model`` on the prompt ``inputs`` (the other
    arguments are those of :func:`generate`, plus ``trace``, ``seed``, ``keep_history``).

    >>> ids, mask = lm.encode("Once upon a time")          # lm: genlab.load("demo")
    >>> run = genlab.start(lm.model, ids, attention_mask=mask, do_sample=True, seed=0)
    >>> run.step().index, run.rewind(1).step_index  # keep_history=True, as in lm.start
    (0, 0)
    """
    return Run(model, input_ids=_prompt(inputs, kwargs), **kwargs)


def generate(
    model,
    inputs=None,
    generation_config=None,
    logits_processor=None,
    stopping_criteria=None,
    prefix_allowed_tokens_fn=None,
    synced_gpus=None,
    assistant_model=None,
    streamer=None,
    negative_prompt_ids=None,
    negative_prompt_attention_mask=None,
    use_model_defaults=None,
    custom_generate=None,
    **kwargs,
):
    """Generate like transformers' ``model.generate(...)``, on any genlab or HF model.

    Arguments, as in the reference: model (a genlab model, an LM or a transformers model);
    inputs (the prompt ids, or a tokenizer's output); generation_config (a config whose
    fields the keyword arguments override); logits_processor and stopping_criteria (your
    own, added to those the config builds); prefix_allowed_tokens_fn (allowed tokens per
    row and prefix); synced_gpus (accepted, ignored: one process); assistant_model (a
    draft model for assisted decoding); streamer (gets the tokens as they come);
    negative_prompt_ids and negative_prompt_attention_mask (classifier-free guidance's
    unconditional prompt); use_model_defaults (fill unset fields from the model's
    generation config); custom_generate (your own decoding loop, called instead of
    genlab's); keyword arguments are config fields or ``input_ids``,
    ``attention_mask``, ``tokenizer``, and ``json_schema``, ``regex`` or ``grammar``
    (constrain the answer: :mod:`genlab.text.grammar`, which needs the tokenizer).

    Returns a LongTensor (rows, length), or with ``return_dict_in_generate=True`` an output
    object with the reference's field names (sequences, scores, logits, ...).

    >>> ids, mask = lm.encode("Once upon a time")          # lm: genlab.load("demo")
    >>> generate(lm.model, input_ids=ids, attention_mask=mask, max_new_tokens=5)
    tensor([[ 6403,  1980,   253,   655,    28,   260,  2240,   282, 23324]])
    """
    if custom_generate is not None:
        if not callable(custom_generate):
            raise ValueError(
                "custom_generate must be a callable here (no Hub downloads): "
                "custom_generate(model, input_ids, generation_config, ...)"
            )
    kwargs.setdefault("keep_history", False)  # a generation only runs forward
    run = Run(
        model,
        input_ids=_prompt(inputs, kwargs),
        generation_config=generation_config,
        logits_processor=logits_processor,
        stopping_criteria=stopping_criteria,
        prefix_allowed_tokens_fn=prefix_allowed_tokens_fn,
        synced_gpus=synced_gpus,
        assistant_model=assistant_model,
        streamer=streamer,
        negative_prompt_ids=negative_prompt_ids,
        negative_prompt_attention_mask=negative_prompt_attention_mask,
        use_model_defaults=use_model_defaults,
        **kwargs,
    )
    if custom_generate is not None:
        return _call_custom_generate(custom_generate, model, run)
    return run.run(keep_on_interrupt=False)
