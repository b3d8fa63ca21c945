"""The step loop: one place where generation happens.

``genlab.generate(model, ...)`` behaves like transformers' ``generate()`` (reference
4.56.2). It is a :class:`Run` driven to the end; a notebook can instead hold the Run and
``step()``, ``force()``, ``rewind()`` and ``fork()`` it. One step::

    strategy.forward (via the step context) -> raw logits       [hook: logits]
    strategy.process: logits processors     -> scores           [hook: processor.<Name>]
                                                                 [hook: scores]
    strategy.select / strategy.force        -> next tokens      [hook: select]
    append tokens, strategy bookkeeping (stopping criteria), reorder the cache for beams
    ---- commit ----                                             [hook: step_end]

A step is a transaction: it takes an :class:`~genlab.state.Undo` first, and any error
before the commit (a hook, a processor, the model, the strategy, KeyboardInterrupt) puts the
run back exactly as it was and re-raises the error unchanged. ``step_end`` hooks run after
the commit. Strategies see a :class:`~genlab.context.StepContext`, never the Run; the trace
observes the hook points like any other hook.
"""

from __future__ import annotations

import copy
import time
import warnings
from dataclasses import dataclass
from typing import Any

import torch

from .caches import compiled_forward, make_cache
from .context import StepContext
from .history import replay, restore_snapshot, take_snapshot
from .hooks import HookRegistry
from .ids import check_ids
from .inputs import prompt_from_mapping
from .models.adapt import as_model
from .prefix import PrefixCache
from .prepare import config_values, make_plan, prepare_config, prepare_inputs, switch_strategy
from .state import STATEFUL_PROCESSORS, Given, RunState, Snapshot, Undo
from .strategies import Selection, strategy_for
from .tokens import show_token

#: keyword arguments of ``generate`` that are inputs, not config fields
INPUT_KEYS = ("input_ids", "attention_mask", "tokenizer")

__all__ = ["Run", "Step", "as_model", "generate", "prepare_config", "start"]


# ----------------------------------------------------------------------------------------
# records
# ----------------------------------------------------------------------------------------
@dataclass
class Step:
    """What one step did.

    index: the step's number (0 = first generated token); tokens: (rows,) chosen ids, or
    (rows, n) when a step appends several (assisted decoding); parents: (rows,) the row
    each new row continues, for beam-like strategies, else None; logprobs: log-softmax of
    the final scores at the chosen tokens; finished: the run ended with this step;
    forced: the token came from :meth:`Run.force`; text: the chosen tokens as decoded
    text, one string per token (when a tokenizer is known); info: strategy details.
    """

    index: int
    tokens: torch.LongTensor
    parents: torch.LongTensor | None
    logprobs: torch.Tensor
    finished: bool
    forced: bool = False
    text: list[str] | None = None
    info: dict[str, Any] | None = None

    def __repr__(self) -> str:
        shown = [show_token(t) for t in self.text] if self.text is not None else None
        shown = shown if shown is not None else self.tokens.tolist()
        lp = [round(v, 3) for v in self.logprobs.reshape(-1).tolist()]
        extra = ", forced" if self.forced else ""
        return f"Step({self.index}, tokens={shown}, logprobs={lp}, finished={self.finished}{extra})"


def _set_up_warnings(fn):
    """Run ``fn()`` and return (result, the warnings it raised as strings), re-raising them."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fn()
    for w in caught:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return result, tuple(str(w.message) for w in caught)


# ----------------------------------------------------------------------------------------
# the run
# ----------------------------------------------------------------------------------------
def _view(path: str, doc: str) -> property:
    """A read-only property showing ``self.<path>`` (a part of the run), documented."""
    names = path.split(".")

    def get(self):
        value = self
        for name in names:
            value = getattr(value, name)
        return value

    get.__name__, get.__doc__ = names[-1], doc
    return property(get)


class Run:
    """A generation in progress: step it, force tokens, rewind, fork, edit its config.

    Create it with :func:`start` or ``lm.start(...)`` (same arguments as :func:`generate`,
    plus ``trace``, ``seed`` and ``keep_history``). A run has three parts: ``given`` (what
    it was given), ``state`` (what a step changes) and its history (for :meth:`rewind`).
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
    (``True`` or Tracer options such as ``{"top_k": 20}``); seed: the run's own random
    stream; keep_history: keep snapshots so that :meth:`rewind` works; prefix_cache: a
    :class:`~genlab.prefix.PrefixCache` whose prompt keys and values the run may reuse.

    >>> run = lm.start("Once upon a time", do_sample=True, seed=0)   # doctest: +SKIP
    >>> run.step(); run.config.top_k = 5; run.step(); run.rewind(1)  # doctest: +SKIP
    >>> run.force(" dragon"); run.step().text                        # doctest: +SKIP
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
        keep_history: bool = False,
        prefix_cache=None,
        **kwargs,
    ) -> None:
        self.registry = HookRegistry()
        self._tracer = None
        self._tracer_off: list = []
        self.interrupted = False
        self.elapsed = 0.0
        self.history: list[Step] = []
        self._snapshots: list[Snapshot] = []
        self._initial: Snapshot | None = None
        self._output = None
        self._ctx = StepContext(self)

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
                    prefix_cache=prefix_cache,
                ),
            )

        _, caught = _set_up_warnings(set_up)
        self.given.warnings = caught
        if self.given.keep_history:
            self._initial = take_snapshot(self)
        if trace:
            from .trace import Tracer

            self.attach_tracer(Tracer(self, **(trace if isinstance(trace, dict) else {})))

    # -- set-up ------------------------------------------------------------------------------
    def _set_up(self, model, input_ids, attention_mask, generation_config, use_defaults,
                kwargs, parts) -> None:  # fmt: skip
        inputs = kwargs.pop("inputs", None)
        config, unused = prepare_config(model, generation_config, use_defaults, **kwargs)
        if input_ids is None:
            input_ids = unused.pop("input_ids", None) if "input_ids" in unused else inputs
        if attention_mask is None:
            attention_mask = unused.pop("attention_mask", None)
        input_ids, attention_mask = prompt_from_mapping(input_ids, attention_mask)
        ids, mask, pad, eos, encdec, device = prepare_inputs(
            model, config, unused, input_ids, attention_mask, parts["tokenizer"], generate
        )
        streamer = parts.pop("streamer")
        beam_streamer = streamer is not None and getattr(streamer, "is_beam_streamer", False)
        if streamer is not None and not beam_streamer and config.num_beams > 1:
            raise ValueError(
                "streamer cannot be used with beam search: use a "
                "genlab.streamers.BeamStreamer or num_beams=1"
            )
        self.given = given = Given(
            model=model,
            info=model.info,
            device=device,
            input_ids=ids,
            prompt_length=ids.shape[1],
            batch_size=ids.shape[0],
            pad_token_id=pad,
            eos_token_ids=eos,
            encdec=encdec,
            has_default_max_length="max_length" not in kwargs,
            has_default_min_length="min_length" not in kwargs,
            streamer=None if beam_streamer else streamer,
            **parts,
        )
        self.config = config
        plan = make_plan(config, given)
        strategy = strategy_for(plan.mode)(plan.config)
        expand = strategy.rows_per_input(plan.config)
        if encdec is not None:
            encdec.expand(expand)
        sequences = ids.repeat_interleave(expand, dim=0)
        has_assistant = given.assistant_model is not None
        cache = make_cache(model, sequences.shape[0], plan.config, plan.mode, has_assistant)
        if given.prefix_cache is not None:  # start from an earlier run's prompt cache
            if PrefixCache.applies(ids, mask, plan.config, encdec):
                cache = given.prefix_cache.take(model, ids, sequences.shape[0]) or cache
            else:
                given.prefix_cache = None
        if encdec is None:
            plan.compiled = compiled_forward(model, plan.config, cache, plan.mode)
        rng = None
        if given.seed is not None:  # the run's own random stream; the global one is kept
            user = torch.get_rng_state()
            torch.manual_seed(given.seed)
            rng = torch.get_rng_state()
            torch.set_rng_state(user)
        self.state = RunState(
            sequences=sequences,
            attention_mask=mask.to(device).repeat_interleave(expand, dim=0),
            cache=cache,
            plan=plan,
            strategy=strategy,
            rng=rng,
        )
        strategy.start(self._ctx)
        if beam_streamer:
            streamer.attach(self)  # a step_end hook: it reads the beams, put() is not used
        elif streamer is not None:
            self.state.streaming = True
            streamer.put(sequences.cpu())  # the prompt rows as generation starts (expanded)

    def _refresh_plan(self) -> None:
        """Rebuild the plan (and the strategy, on a mode switch) after a config change."""
        state = self.state
        seen = config_values(self.config)
        if seen == state.plan.seen:
            return
        plan = make_plan(self.config, self.given, seen)
        old = state.strategy
        cls = strategy_for(plan.mode)
        if type(old) is cls:
            old.config = plan.config  # beam strategies refuse changes of their row layout
            strategy = old
        else:
            strategy = switch_strategy(old, cls, plan, state.plan, self._ctx)
        if self.given.encdec is None:  # a config change may turn compiling on or off
            plan.compiled = compiled_forward(self.given.model, plan.config, state.cache, plan.mode)
        state.plan, state.strategy = plan, strategy

    # -- public API --------------------------------------------------------------------------
    @property
    def finished(self) -> bool:
        """True once a stopping criterion ended every row (or the run was interrupted)."""
        return self.state.finished

    @property
    def pending_forced(self) -> tuple[int, ...]:
        """Token ids queued by :meth:`force` that the next steps will take, in order."""
        return tuple(self.state.forced)

    @property
    def tracer(self):
        """The :class:`~genlab.trace.Tracer` recording this run (``trace=True``), or None."""
        return self._tracer

    def attach_tracer(self, tracer) -> None:
        """Record with ``tracer`` (a :class:`~genlab.trace.Tracer` or subclass) from the next
        step on, in place of the current one. It observes the hook points."""
        for off in self._tracer_off:
            off()
        self._tracer = tracer
        self._tracer_off = [] if tracer is None else tracer.attach(self.registry)

    def hooks(self, mapping=None, **hooks):
        """Temporary hooks for a ``with`` block: ``with run.hooks(logits=fn): run.step()``.

        mapping: ``{point: fn or [fns]}`` (for names that are not identifiers, such as
        ``"processor.TopKLogitsWarper"``); keyword arguments add more."""
        return self.registry.temporary(mapping, **hooks)

    def add_hook(self, name: str, fn):
        """Register a permanent hook ``fn(value, *, step)`` at the hook point ``name``;
        returns a function that removes it."""
        return self.registry.add(name, fn)

    def set(self, **fields) -> Run:
        """Change config fields now, checked at once: a value or a mode switch that cannot
        apply is refused with a ValueError and the config stays as it was.

        >>> run.set(top_k=5, temperature=0.7)   # doctest: +SKIP
        """
        before = copy.deepcopy(self.config)
        state = self.state
        plan, strategy = state.plan, state.strategy
        strategy_state = strategy.get_state()
        try:
            unused = self.config.update(**fields)
            if unused:
                raise ValueError(f"not GenerationConfig fields: {', '.join(sorted(unused))}")
            self._refresh_plan()
        except BaseException:
            self.config = before
            state.plan, state.strategy = plan, strategy
            strategy.set_state(strategy_state)
            raise
        return self

    def force(self, token) -> Run:
        """Make the next step(s) choose ``token``: an id, a list of ids, a token string or
        a text (all of its tokens, one per step). Queued ids: :attr:`pending_forced`."""
        ids = self._forced_ids(token)
        self.state.forced = [*self.state.forced, *ids]
        return self

    def clear_forced(self) -> tuple[int, ...]:
        """Drop the queued forced ids (e.g. after a rewind, to take another token instead);
        returns them."""
        dropped, self.state.forced = tuple(self.state.forced), []
        return dropped

    def _forced_ids(self, token) -> list[int]:
        vocab_size = self.given.info.vocab_size
        tok = self.given.tokenizer
        if isinstance(token, str):
            if tok is None:
                raise ValueError("forcing text needs a tokenizer; pass a token id instead")
            if token == "":
                raise ValueError("force('') has no tokens to force: give a text or a token id")
            vocab = tok.get_vocab()
            ids = [vocab[token]] if token in vocab else tok.encode(token, add_special_tokens=False)
            if not ids:
                raise ValueError(f"{token!r} encodes to no tokens")
            return [int(i) for i in ids]
        items = list(token) if isinstance(token, (list, tuple)) else [token]
        if isinstance(token, torch.Tensor):
            items = token.reshape(-1).tolist()
        if not items:
            raise ValueError("force([]) has no tokens to force: give a text or token ids")
        ids = []
        for t in items:
            if isinstance(t, torch.Tensor) and t.numel() == 1:
                t = t.item()
            if isinstance(t, bool) or not isinstance(t, int):
                raise ValueError(
                    f"force takes token ids (ints) or text, got {t!r} ({type(t).__name__}): "
                    "pass an int id, a list of int ids or a string"
                )
            if not 0 <= t < vocab_size:
                raise ValueError(f"forced token id {t} is outside [0, {vocab_size})")
            ids.append(int(t))
        return ids

    def step(self) -> Step | None:
        """Advance one token; returns the Step record (None when already finished)."""
        if self.state.finished:
            return None
        return self._step(want_record=True)

    def run(self, max_steps: int | None = None, keep_on_interrupt: bool = True, progress=False):
        """Step until a stopping criterion ends the generation (or ``max_steps`` steps);
        returns the output. KeyboardInterrupt keeps every step finished so far and returns
        their output (with ``keep_on_interrupt=False`` it propagates, as nested runs need).
        ``progress=True`` shows a tqdm bar (tokens so far, tokens/s; the notebook widget in
        Jupyter)."""
        n = 0
        t0 = time.perf_counter()
        want = self.given.keep_history
        bar = self._progress_bar() if progress else None
        try:
            while not self.state.finished and (max_steps is None or n < max_steps):
                before = self.state.sequences.shape[1]
                self._step(want_record=want)
                n += 1
                if bar is not None:
                    bar.update(self.state.sequences.shape[1] - before)
        except KeyboardInterrupt:
            if not keep_on_interrupt:
                raise
            self.interrupted = True
            warnings.warn(
                f"generation interrupted after {self.state.step_index} steps; the tokens "
                "produced so far are kept",
                stacklevel=2,
            )
            self._finish(self.state)
        finally:
            self.elapsed += time.perf_counter() - t0
            if bar is not None:
                bar.close()
        if self.state.finished or self.interrupted:
            return self.output
        return None

    def _progress_bar(self):
        from tqdm.auto import tqdm

        total = int(self.gen_config.max_length) - self.state.sequences.shape[1]
        return tqdm(total=max(total, 0), unit="tok", desc=f"genlab {self.mode}")

    def stop(self) -> Run:
        """End the run now, keeping every step so far (``interrupted`` becomes True); a
        :meth:`rewind` makes it steppable again."""
        if not self.state.finished:
            self.interrupted = True
            self._finish(self.state)
            self._output = None
        return self

    def rewind(self, n: int = 1) -> Run:
        """Undo the last ``n`` steps, restoring the exact earlier state: tokens, cache,
        random state, config and forced queue. ``rewind(0)`` does nothing."""
        if not self.given.keep_history:
            raise ValueError(
                "this run keeps no history: start it with keep_history=True "
                "(lm.start does) to rewind"
            )
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= self.state.step_index:
            raise ValueError(f"can rewind 0..{self.state.step_index} steps, not {n!r}")
        if n == 0:
            return self
        target = self.state.step_index - n
        stateful = any(type(p).__name__ in STATEFUL_PROCESSORS for p in self.processors)
        if self.state.strategy.reorders_rows or stateful:
            replay(self, target)
        else:
            restore_snapshot(self, self._snapshots[target], target)
            del self._snapshots[target:]
            del self.history[target:]
        self.state.finished = False
        self.interrupted = False
        self._output = None
        if self._tracer is not None:
            self._tracer.truncate(target)
        return self

    def fork(self) -> Run:
        """An independent copy (cache, config, strategy, forced queue, hooks, trace):
        stepping one does not change the other."""
        other = copy.copy(self)
        given = self.given
        keep = {id(given.model): given.model, id(given.tokenizer): given.tokenizer}
        hf = getattr(given.model, "hf", None)
        if hf is not None:
            keep[id(hf)] = hf
        other.given = copy.copy(given)
        other.given.streamer = None
        st = self.state
        plan = copy.copy(st.plan)
        plan.config = copy.deepcopy(st.plan.config)
        plan.processors = copy.deepcopy(st.plan.processors, memo=dict(keep))
        plan.stopping_criteria = copy.deepcopy(st.plan.stopping_criteria, memo=dict(keep))
        plan.seen = dict(st.plan.seen)
        other.state = RunState(
            sequences=st.sequences.clone(),
            attention_mask=st.attention_mask.clone(),
            cache=st.cache.copy(),
            plan=plan,
            strategy=copy.deepcopy(st.strategy),
            recorded={k: list(v) for k, v in st.recorded.items()},
            rng=None if st.rng is None else st.rng.clone(),
            forced=list(st.forced),
            step_index=st.step_index,
            finished=st.finished,
            streaming=False,
        )
        other.state.strategy.config = plan.config
        other.config = copy.deepcopy(self.config)
        other.registry = self.registry.copy()
        other.history = list(self.history)
        other._snapshots = list(self._snapshots)
        other._ctx = StepContext(other)
        other._tracer, other._tracer_off = None, []
        if self._tracer is not None:
            other.attach_tracer(self._tracer.fork(other))
        return other

    @property
    def output(self):
        """The reference-shaped output (LongTensor or output object) once finished."""
        if self._output is None:
            self._output = self._build_output()
        return self._output

    def recorded_scores(self):
        """What the reference hands stopping criteria as ``scores``."""
        cfg = self.state.plan.config
        if cfg.return_dict_in_generate and cfg.output_scores:
            return tuple(self.state.recorded["scores"])
        return None

    # -- read-only views of the parts -----------------------------------------------------------
    model = _view("given.model", "The genlab-protocol model.")
    info = _view("given.info", "The model's ModelInfo.")
    tokenizer = _view("given.tokenizer", "The tokenizer (or None).")
    device = _view("given.device", "Where the run's tensors live.")
    input_ids = _view("given.input_ids", "(batch, length) the prompt.")
    prompt_length = _view("given.prompt_length", "Prompt tokens.")
    batch_size = _view("given.batch_size", "Number of prompts.")
    streamer = _view("given.streamer", "The streamer (or None).")
    warnings = _view("given.warnings", "Warnings raised at the start.")
    pad_token_id = _view("given.pad_token_id", "Padding id in use.")
    eos_token_ids = _view("given.eos_token_ids", "EOS ids, a list.")
    sequences = _view("state.sequences", "(rows, length) all tokens.")
    attention_mask = _view("state.attention_mask", "(rows, length).")
    cache = _view("state.cache", "The KV cache.")
    step_index = _view("state.step_index", "Steps taken so far.")
    strategy = _view("state.strategy", "The decoding strategy.")
    gen_config = _view("state.plan.config", "The effective config.")
    mode = _view("state.plan.mode", "The generation mode's name.")
    processors = _view("state.plan.processors", "The processors.")
    stopping_criteria = _view("state.plan.stopping_criteria", "The stopping criteria.")

    # -- the step --------------------------------------------------------------------------------
    def _step(self, want_record: bool) -> Step | None:
        # A run started under torch.inference_mode() holds inference tensors (its cache is
        # written in place every step); it goes on in that mode wherever it is stepped.
        if self.state.sequences.is_inference() and not torch.is_inference_mode_enabled():
            with torch.inference_mode():
                return self._transaction(want_record)
        with torch.no_grad():
            return self._transaction(want_record)

    def _transaction(self, want_record: bool) -> Step | None:
        undo = Undo.take(self.state)
        snap = take_snapshot(self, undo) if self.given.keep_history else None
        user_rng = None
        if self.state.rng is not None:
            user_rng = torch.get_rng_state()
            torch.set_rng_state(self.state.rng)
        try:
            # the step writes a new state object (its recorded lists are shared: the undo
            # truncates them back) ...
            state = copy.copy(self.state)
            self.state = state
            record, took = self._compute(state, want_record)
        except BaseException:
            self.state = undo.restore()  # ... or puts the old one back, as it was
            if user_rng is not None:
                torch.set_rng_state(user_rng)
            raise
        if user_rng is not None:
            state.rng = torch.get_rng_state()
            torch.set_rng_state(user_rng)
        # ---- committed ----
        self._output = None
        if state.step_index == 1 and self.given.prefix_cache is not None:
            self.given.prefix_cache.remember(self.given.model, self.given.input_ids, state.cache)
        if snap is not None:
            snap.took_forced = took
            self._snapshots.append(snap)
            if record is not None:
                self.history.append(record)
        if record is not None and self.registry.has("step_end"):
            self.registry.fire("step_end", record, record.index)
        return record

    def _compute(self, state: RunState, want_record: bool) -> tuple[Step | None, int | None]:
        """One step on ``state`` (a copy the transaction owns); returns its record and the
        forced id it took."""
        self._refresh_plan()
        registry, ctx, strategy = self.registry, self._ctx, state.strategy
        cfg, idx = state.plan.config, state.step_index

        # 1. forward pass over the tokens the cache has not seen
        out = strategy.forward(ctx)
        logits = out.logits[:, -1, :].to(dtype=torch.float32, copy=True)
        if registry:
            logits = registry.fire("logits", logits, idx)

        # 2. logits processors (the strategy decides how: beams take a log-softmax first)
        scores = strategy.process(ctx, logits)
        if registry:
            scores = registry.fire("scores", scores, idx)

        # 3. choose
        took = state.forced[0] if state.forced else None
        sel = strategy.select(ctx, scores) if took is None else strategy.force(ctx, scores, took)
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
            record = self._record(idx, sel, scores, took is not None, done)
        if state.streaming:
            self.given.streamer.put(new.cpu() if sel.tokens.dim() == 2 else sel.tokens.cpu())
        if reorder:  # last: an in-place reorder of the cache cannot be undone
            state.cache.reorder(sel.parents)
        if done:
            self._finish(state)
        return record, took

    def _record(self, idx, sel: Selection, scores, forced: bool, done: bool) -> Step:
        if sel.parents is not None:
            scores = scores[sel.parents]
        if sel.tokens.dim() == 2:  # (rows, n) tokens, one score tensor each
            each = sel.scores if sel.scores is not None else (scores,) * sel.tokens.shape[1]
            logprobs = torch.stack(
                [
                    torch.log_softmax(s.float(), dim=-1).gather(1, t[:, None])[:, 0]
                    for s, t in zip(each, sel.tokens.unbind(1))
                ],
                dim=1,
            )
        else:
            logprobs = torch.log_softmax(scores.float(), dim=-1).gather(1, sel.tokens[:, None])
            logprobs = logprobs[:, 0]
        text = None
        tok = self.given.tokenizer
        if tok is not None and hasattr(tok, "decode"):
            text = [tok.decode([t]) for t in sel.tokens.reshape(-1).tolist()]
        return Step(idx, sel.tokens, sel.parents, logprobs, done, forced, text, sel.info)

    def _finish(self, state: RunState) -> None:
        state.finished = True
        if state.streaming:
            state.streaming = False
            self.given.streamer.end()

    def _build_output(self):
        state = self.state
        fields = state.strategy.finalize(self._ctx)
        cfg = state.plan.config
        if not cfg.return_dict_in_generate:
            out = fields["sequences"]
        else:
            from . import outputs

            rec = state.recorded
            past = getattr(state.cache, "inner", state.cache) if cfg.use_cache else None
            common = dict(
                scores=tuple(rec["scores"]) if cfg.output_scores else None,
                logits=tuple(rec["logits"]) if cfg.output_logits else None,
                attentions=tuple(rec["attentions"]) if cfg.output_attentions else None,
                hidden_states=tuple(rec["hidden"]) if cfg.output_hidden_states else None,
                past_key_values=past,
            )
            common.update(fields)
            if self.given.encdec is not None:  # decoder_* / cross / encoder_* field names
                cross = tuple(rec["cross"]) if cfg.output_attentions else None
                out = self.given.encdec.build_output(cfg, common, cross)
            else:
                cls = (
                    outputs.GenerateBeamDecoderOnlyOutput
                    if "beam_indices" in fields
                    else outputs.GenerateDecoderOnlyOutput
                )
                out = cls(**common)
        if self.registry:
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
    kwargs = {"attention_mask": run.attention_mask, "use_cache": run.gen_config.use_cache}
    inner = getattr(run.cache, "inner", None)
    if inner is not None:
        kwargs["past_key_values"] = inner
    return fn(
        model,
        run.sequences,
        logits_processor=run.processors,
        stopping_criteria=run.stopping_criteria,
        generation_config=run.gen_config,
        synced_gpus=False,
        streamer=run.streamer,
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

    >>> run = genlab.start(model, ids, do_sample=True, seed=0, keep_history=True)  # doctest: +SKIP
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
    ``attention_mask``, ``tokenizer``.

    Returns a LongTensor (rows, length), or with ``return_dict_in_generate=True`` an output
    object with the reference's field names (sequences, scores, logits, ...).

    >>> out = generate(model, input_ids=ids, max_new_tokens=5)   # doctest: +SKIP
    """
    if custom_generate is not None:
        if not callable(custom_generate):
            raise ValueError(
                "custom_generate must be a callable here (no Hub downloads): "
                "custom_generate(model, input_ids, generation_config, ...)"
            )
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
    return run.run()
