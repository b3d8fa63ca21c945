"""The step loop: one place where generation happens.

``genlab.generate(model, ...)`` behaves like transformers' ``generate()`` (reference
4.56.2). It is a :class:`Run` driven to the end; a notebook can instead hold the Run and
``step()``, ``force()``, ``rewind()`` and ``fork()`` it. One step::

    forward (new tokens only, KV cache)  -> raw logits          [hook: logits]
    logits processors, one by one        -> scores              [hook: processor.<Name>]
                                                                 [hook: scores]
    strategy.select                      -> next tokens         [hook: select]
    reorder cache for beams, append tokens, strategy bookkeeping (stopping criteria)
                                                                 [hook: step_end]
"""

from __future__ import annotations

import copy
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch

from .caches import compiled_forward, make_cache
from .encdec import check_ids
from .hooks import HookRegistry
from .inputs import check_generated_length, prompt_from_mapping, prompt_ids
from .models.base import ModelOutput
from .processors import call_processor
from .strategies import Selection, strategy_for

#: keyword arguments of ``generate`` that are inputs, not config fields
INPUT_KEYS = ("input_ids", "attention_mask", "tokenizer")
#: processors that keep state between steps (rewinding them needs a replay)
_STATEFUL_PROCESSORS = (
    "UnbatchedClassifierFreeGuidanceLogitsProcessor",
    "SynthIDTextWatermarkLogitsProcessor",
)


# ----------------------------------------------------------------------------------------
# model and config preparation
# ----------------------------------------------------------------------------------------
def as_model(model):
    """A genlab-protocol model from a genlab model, an ``LM`` or a transformers model."""
    inner = getattr(model, "model", None)
    if inner is not None and hasattr(inner, "info") and hasattr(inner, "forward"):
        return inner  # an LM wrapper
    if hasattr(model, "info") and hasattr(model, "new_cache"):
        return model
    from .models.hf import HFModel, is_transformers_model

    if is_transformers_model(model):
        wrapped = getattr(model, "_genlab_adapter", None)
        if wrapped is None:
            wrapped = HFModel(model)
            try:
                model._genlab_adapter = wrapped
            except AttributeError:
                pass
        return wrapped
    raise TypeError(
        f"model must be a genlab model, a genlab LM or a transformers PreTrainedModel, "
        f"got {type(model).__name__}"
    )


def prepare_config(model, generation_config=None, use_model_defaults=None, **kwargs):
    """Base config (the model's defaults or the given one) updated with ``kwargs``.

    Returns ``(config, unused_kwargs)``, mirroring the reference's precedence: explicit
    kwargs > the given config > the model's generation defaults > global defaults.
    """
    from .config import GenerationConfig

    info = model.info
    defaults = dict(info.generation_defaults or {})
    # a model without a generation_config.json still knows its special tokens
    for key in ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id"):
        if defaults.get(key) is None and getattr(info, key, None) is not None:
            defaults[key] = getattr(info, key)
    if generation_config is None:
        config = GenerationConfig.from_dict(defaults) if defaults else GenerationConfig()
    else:
        config = copy.deepcopy(GenerationConfig.from_any(generation_config))
        if use_model_defaults is not False and defaults:
            plain = GenerationConfig()
            for key, value in defaults.items():
                if key.startswith("_") or key == "transformers_version":
                    continue
                if getattr(config, key, None) == getattr(plain, key, None) and value != getattr(
                    plain, key, None
                ):
                    setattr(config, key, value)
            if config.temperature == 0.0:
                config.do_sample = False
    unused = config.update(**kwargs)
    return config, unused


def _as_ids(x, name: str) -> torch.LongTensor | None:
    if x is None:
        return None
    if not isinstance(x, torch.Tensor):
        try:
            x = torch.tensor(x, dtype=torch.long)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{name} must be a tensor or a (nested) list of ints: {e}") from None
    if x.dim() == 1:
        x = x.unsqueeze(0)
    if x.dim() != 2:
        raise ValueError(f"{name} must have shape (batch, length), got {tuple(x.shape)}")
    return x


def _eos_list(eos) -> list[int]:
    if eos is None:
        return []
    if isinstance(eos, torch.Tensor):
        eos = eos.tolist()
    return [int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos])]


def position_ids_from_mask(mask: torch.Tensor, new: int) -> torch.LongTensor:
    """Positions of the last ``new`` tokens: count of real tokens before each, 1 on pads."""
    pos = mask.long().cumsum(-1) - 1
    pos.masked_fill_(mask == 0, 1)
    return pos[:, -new:]


# ----------------------------------------------------------------------------------------
# records
# ----------------------------------------------------------------------------------------
@dataclass
class Step:
    """What one step did.

    tokens: (rows,) chosen ids; parents: (rows,) for beam-like strategies else None;
    logprobs: (rows,) log-softmax of the final scores at the chosen tokens;
    text: the chosen tokens as strings when a tokenizer is known.
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
        shown = self.text if self.text is not None else self.tokens.tolist()
        lp = [round(v, 3) for v in self.logprobs.tolist()]
        return f"Step({self.index}, tokens={shown}, logprobs={lp}, finished={self.finished})"


@dataclass
class _Snapshot:
    seq_len: int
    cache_len: int
    recorded: dict[str, int]  # length of each recorded-output list
    strategy: dict
    rng: torch.Tensor | None
    config: Any
    forced: int | None = None
    extra: dict = field(default_factory=dict)


#: the per-step output lists a Run records (scores, raw logits, attentions, hidden states)
_RECORDED = ("_scores", "_logits", "_attentions", "_cross", "_hidden")


# ----------------------------------------------------------------------------------------
# the run
# ----------------------------------------------------------------------------------------
class Run:
    """A generation in progress. Create it with :func:`start` or ``lm.start(...)``."""

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
        **kwargs,
    ) -> None:
        self.model = as_model(model)
        self.info = self.model.info
        self.tokenizer = tokenizer
        self.streamer = streamer
        self.assistant_model = assistant_model
        self.prefix_allowed_tokens_fn = prefix_allowed_tokens_fn
        self.user_processors = logits_processor
        self.user_criteria = stopping_criteria
        self.negative_prompt_ids = negative_prompt_ids
        self.negative_prompt_attention_mask = negative_prompt_attention_mask
        self.keep_history = keep_history
        self.registry = HookRegistry()
        self.interrupted = False

        inputs = kwargs.pop("inputs", None)
        config, unused = prepare_config(self.model, generation_config, use_model_defaults, **kwargs)
        if input_ids is None:
            input_ids = unused.pop("input_ids", None) if "input_ids" in unused else inputs
        if attention_mask is None:
            attention_mask = unused.pop("attention_mask", None)
        input_ids, attention_mask = prompt_from_mapping(input_ids, attention_mask)
        # encoder-decoder models: run the encoder once; the Run then works on the decoder
        self.encdec = None
        if self.info.is_encoder_decoder:
            from .encdec import prepare_encoder_decoder

            self.encdec = prepare_encoder_decoder(
                self.model,
                config,
                input_ids,
                attention_mask,
                unused,
                device=getattr(self.model, "device", None),
            )
            input_ids = self.encdec.decoder_input_ids
            attention_mask = self.encdec.decoder_attention_mask
        elif unused:
            from .encdec import check_decoder_only_inputs

            check_decoder_only_inputs(unused, self.info.architecture or self.info.name)
        if unused:
            raise ValueError(
                f"unknown generate() arguments: {', '.join(sorted(unused))}. They are neither "
                "GenerationConfig fields nor model inputs (input_ids, attention_mask, tokenizer)."
            )
        # what the user sees and may edit between steps; lengths are resolved per prompt
        self.config = config
        self._has_default_max_length = "max_length" not in kwargs
        self._has_default_min_length = "min_length" not in kwargs

        # -- inputs ------------------------------------------------------------------------
        self.device = getattr(self.model, "device", None) or torch.device("cpu")
        ids = _as_ids(prompt_ids(input_ids, "input_ids"), "input_ids")
        if ids is None:
            bos = config.bos_token_id
            if bos is None:
                raise ValueError("input_ids is None and bos_token_id is not set: give a prompt")
            ids = torch.tensor([[int(bos)]], dtype=torch.long)
        ids = ids.to(self.device)
        check_ids("input_ids", ids, self.info.vocab_size)
        ctx = self.info.max_position_embeddings
        if ctx is not None and ids.shape[1] > ctx:
            raise ValueError(
                f"the prompt has {ids.shape[1]} tokens but the model's context is {ctx} "
                "(max_position_embeddings): shorten the prompt"
            )
        self.prompt_length = ids.shape[1]
        self._prepare_special_tokens(attention_mask is not None)
        mask = _as_ids(attention_mask, "attention_mask")
        if mask is None:
            mask = self._infer_attention_mask(ids)
        elif mask.shape != ids.shape:
            raise ValueError(
                f"attention_mask has shape {tuple(mask.shape)} but input_ids {tuple(ids.shape)}"
            )
        if config.token_healing:  # re-tokenized prompts; the mask stays the original's
            from .healing import heal_tokens

            ids = heal_tokens(self.model, ids, tokenizer)
            if mask.shape != ids.shape:
                mask = self._infer_attention_mask(ids)
        self.batch_size = ids.shape[0]
        self.input_ids = ids
        if streamer is not None and getattr(streamer, "is_beam_streamer", False):
            streamer.attach(self)  # a step_end hook: it reads the beams, put() is not used
            self.streamer = None
        elif streamer is not None:
            if config.num_beams > 1:
                raise ValueError(
                    "streamer cannot be used with beam search: use a "
                    "genlab.streamers.BeamStreamer or num_beams=1"
                )

        # -- config-dependent parts (rebuilt when the config changes between steps) --------
        self._config_seen: dict | None = None
        self._refresh_config()
        expand = self.strategy.rows_per_input(self.gen_config)
        if self.encdec is not None:
            self.encdec.expand(expand)
        self.sequences = ids.repeat_interleave(expand, dim=0)
        self.attention_mask = mask.to(self.device).repeat_interleave(expand, dim=0)
        if self.streamer is not None:  # the prompt rows as generation starts (expanded)
            self.streamer.put(self.sequences.cpu())
        self.cache = make_cache(
            self.model,
            self.sequences.shape[0],
            self.gen_config,
            self.mode,
            assistant_model is not None,
        )
        self._compiled = self._compiled_forward()
        self.step_index = 0
        self._scores: list[torch.Tensor] = []
        self._logits: list[torch.Tensor] = []
        self._attentions: list[Any] = []
        self._cross: list[Any] = []  # cross-attentions (encoder-decoder models)
        self._hidden: list[Any] = []
        self._forced: list[int] = []
        self._pending_selection_info: dict | None = None
        self.history: list[Step] = []
        self._snapshots: list[_Snapshot] = []
        self._finished = False
        self._output = None
        self.strategy.start(self)

        # -- randomness: a Run with a seed owns its random stream (forks stay independent) --
        self.seed = seed
        if seed is not None:
            torch.manual_seed(seed)
        self._rng = torch.get_rng_state() if seed is not None else None
        self._initial = self._snapshot() if keep_history else None

        self.tracer = None
        if trace:
            from .trace import Tracer

            opts = trace if isinstance(trace, dict) else {}
            self.tracer = Tracer(self, **opts)

    # -- set-up helpers ------------------------------------------------------------------
    def _prepare_special_tokens(self, has_mask: bool) -> None:
        cfg = self.config
        self.eos_token_ids = _eos_list(cfg.eos_token_id)
        pad = cfg.pad_token_id
        if pad is None and self.eos_token_ids:
            pad = self.eos_token_ids[0]
            if not has_mask:
                warnings.warn(
                    "attention_mask and pad_token_id were not set; pass attention_mask "
                    "for reliable results",
                    stacklevel=3,
                )
        self.pad_token_id = None if pad is None else int(pad)

    def _infer_attention_mask(self, ids: torch.LongTensor) -> torch.LongTensor:
        pad = self.pad_token_id
        if pad is not None and (ids == pad).any() and pad not in self.eos_token_ids:
            return ids.ne(pad).long()
        return torch.ones_like(ids)

    def _effective_config(self):
        """A copy of ``self.config`` with lengths resolved against this prompt."""
        cfg = copy.deepcopy(self.config)
        n = self.prompt_length
        if cfg.max_new_tokens is not None:
            cfg.max_length = cfg.max_new_tokens + n
        elif self._has_default_max_length and cfg.max_length == 20:
            cfg.max_length = 20 + n
            if self.info.max_position_embeddings is not None:
                cfg.max_length = min(cfg.max_length, self.info.max_position_embeddings)
        if cfg.min_new_tokens is not None:
            cfg.min_length = cfg.min_new_tokens + n
        if cfg.pad_token_id is None and self.pad_token_id is not None:
            cfg.pad_token_id = self.pad_token_id
        check_generated_length(cfg, n, self._has_default_max_length, self.encdec is not None)
        return cfg

    def _refresh_config(self) -> None:
        """(Re)build processors, stopping criteria and the strategy after a config change."""
        # shallow copies of what is mutable, so that a value edited in place counts as a change
        values = vars(self.config).items()
        seen = {k: v if isinstance(v, _IMMUTABLE) else copy.copy(v) for k, v in values}
        if seen == self._config_seen:
            return
        self.config.validate()
        self.config.check_token_ids(self.info.vocab_size)
        cfg = self._effective_config()
        mode = cfg.get_generation_mode(self.assistant_model)
        mode = getattr(mode, "value", mode)
        cls = strategy_for(mode)
        old = getattr(self, "strategy", None)
        if old is not None and type(old) is not cls:
            if (
                old.reorders_rows
                or cls.reorders_rows
                or cls.rows_per_input(cfg) != old.rows_per_input(old.config)
            ):
                raise ValueError(
                    f"cannot switch a running generation from {old.mode} to {mode}: start a new "
                    "run (or fork before changing num_beams / num_return_sequences)"
                )
        from .processors import build_processors
        from .stopping import build_stopping_criteria

        self.processors = build_processors(
            cfg,
            input_ids_seq_length=self.prompt_length,
            encoder_input_ids=self.input_ids
            if self.encdec is None
            else self.encdec.encoder_input_ids,
            prefix_allowed_tokens_fn=self.prefix_allowed_tokens_fn,
            logits_processor=self.user_processors,
            model=self.model,
            negative_prompt_ids=self.negative_prompt_ids,
            negative_prompt_attention_mask=self.negative_prompt_attention_mask,
            device=self.device,
            vocab_size=self.info.vocab_size,
            is_beam_sampling=mode == "beam_sample",
        )
        self.stopping_criteria = build_stopping_criteria(
            cfg,
            tokenizer=self.tokenizer,
            user_criteria=self.user_criteria,
            max_position_embeddings=self.info.max_position_embeddings,
        )
        self.has_eos_stopping = any(hasattr(c, "eos_token_id") for c in self.stopping_criteria)
        if old is None or type(old) is not cls:
            new = cls(cfg)
            if old is not None:
                new.set_state(old.get_state())
            self.strategy = new
        else:
            old.config = cfg
        self.gen_config = cfg
        self.mode = mode
        self._config_seen = seen
        if hasattr(self, "cache"):  # a config change may turn compiling on or off
            self._compiled = self._compiled_forward()

    def _compiled_forward(self):
        """The compiled forward for decoding steps, or None (genlab/caches.py decides)."""
        if self.encdec is not None:
            return None
        return compiled_forward(self.model, self.gen_config, self.cache, self.mode)

    # -- public API ----------------------------------------------------------------------
    @property
    def finished(self) -> bool:
        """True once a stopping criterion ended every row (or the run was interrupted)."""
        return self._finished

    @property
    def pending_forced(self) -> tuple[int, ...]:
        """Token ids queued by :meth:`force` that the next steps will take, in order."""
        return tuple(self._forced)

    def hooks(self, mapping=None, **hooks):
        """Temporary hooks for a ``with`` block: ``with run.hooks(logits=fn): run.step()``."""
        return self.registry.temporary(mapping, **hooks)

    def add_hook(self, name: str, fn):
        """Register a permanent hook; returns a function that removes it."""
        return self.registry.add(name, fn)

    def force(self, token) -> Run:
        """Make the next step(s) choose ``token`` (an id, a token string or a text)."""
        if isinstance(token, str):
            if self.tokenizer is None:
                raise ValueError("forcing text needs a tokenizer; pass a token id instead")
            vocab = self.tokenizer.get_vocab()
            ids = (
                [vocab[token]]
                if token in vocab
                else self.tokenizer.encode(token, add_special_tokens=False)
            )
            if not ids:
                raise ValueError(f"{token!r} encodes to no tokens")
        else:
            ids = [int(t) for t in (token if isinstance(token, (list, tuple)) else [token])]
        for t in ids:
            if not 0 <= t < self.info.vocab_size:
                raise ValueError(f"forced token id {t} is outside [0, {self.info.vocab_size})")
        self._forced.extend(ids)
        return self

    def step(self) -> Step | None:
        """Advance one token; returns the Step record (None when already finished)."""
        if self._finished:
            return None
        record = self._step(want_record=True)
        return record

    def run(self, max_steps: int | None = None):
        """Step until a stopping criterion ends the generation (or ``max_steps`` steps)."""
        n = 0
        try:
            while not self._finished and (max_steps is None or n < max_steps):
                self._step(want_record=bool(self.registry.has("step_end")) or self.keep_history)
                n += 1
        except KeyboardInterrupt:
            self.interrupted = True
            warnings.warn(
                f"generation interrupted after {self.step_index} steps; the tokens "
                "produced so far are kept",
                stacklevel=2,
            )
            self._finish()
        if self._finished or self.interrupted:
            return self.output
        return None

    def rewind(self, n: int = 1) -> Run:
        """Undo the last ``n`` steps, restoring the exact earlier state (cache included)."""
        if not self.keep_history:
            raise ValueError(
                "this run keeps no history: start it with keep_history=True "
                "(lm.start does) to rewind"
            )
        if not 0 <= n <= self.step_index:
            raise ValueError(f"can rewind 0..{self.step_index} steps, not {n}")
        target = self.step_index - n
        stateful = any(type(p).__name__ in _STATEFUL_PROCESSORS for p in self.processors)
        if self.strategy.reorders_rows or stateful:
            self._replay(target)
        else:
            self._restore(self._snapshots[target])
            del self._snapshots[target:]
            del self.history[target:]
            self.step_index = target
        self._finished = False
        self._output = None
        if self.tracer is not None:
            self.tracer.truncate(target)
        return self

    def fork(self) -> Run:
        """An independent copy: stepping one does not change the other."""
        other = copy.copy(self)
        keep = {id(self.model): self.model, id(self.tokenizer): self.tokenizer}
        hf = getattr(self.model, "hf", None)
        if hf is not None:
            keep[id(hf)] = hf
        other.cache = self.cache.copy()
        other.config = copy.deepcopy(self.config)
        other.gen_config = copy.deepcopy(self.gen_config)
        other.processors = copy.deepcopy(self.processors, memo=dict(keep))
        other.stopping_criteria = copy.deepcopy(self.stopping_criteria, memo=dict(keep))
        other.strategy = copy.deepcopy(self.strategy)
        other.registry = self.registry.copy()
        other.sequences = self.sequences.clone()
        other.attention_mask = self.attention_mask.clone()
        for name in (*_RECORDED, "_forced", "history", "_snapshots"):
            setattr(other, name, list(getattr(self, name)))
        other._config_seen = dict(self._config_seen)
        other._rng = None if self._rng is None else self._rng.clone()
        other.streamer = None
        other.tracer = None if self.tracer is None else self.tracer.fork(other)
        return other

    @property
    def output(self):
        """The reference-shaped output (LongTensor or output object) once finished."""
        if self._output is None:
            self._output = self._build_output()
        return self._output

    def recorded_scores(self):
        """What the reference hands stopping criteria as ``scores``."""
        cfg = self.gen_config
        if cfg.return_dict_in_generate and cfg.output_scores:
            return tuple(self._scores)
        return None

    # -- the step ------------------------------------------------------------------------
    def apply_processors(self, input_ids: torch.LongTensor, scores: torch.Tensor, **kwargs):
        """Run the logits processors in order, firing ``processor.<Name>`` hooks."""
        registry, tracer = self.registry, self.tracer
        if not registry.wants_processors() and tracer is None:
            return self.processors(input_ids, scores, **kwargs)
        for proc in self.processors:
            scores = call_processor(proc, input_ids, scores, **kwargs)
            name = type(proc).__name__
            if registry:
                scores = registry.fire(f"processor.{name}", scores, self.step_index)
            if tracer is not None:
                tracer.on_stage(self.step_index, name, scores)
        return scores

    def _forward(self, hidden_states: bool = False) -> ModelOutput:
        """One forward over the tokens the cache has not seen; ``hidden_states=True`` asks
        for every layer's hidden states whatever the config says (DoLa reads them)."""
        cfg = self.gen_config
        # use_cache=False: every step runs the whole sequence through a fresh cache
        cache = (
            self.cache
            if cfg.use_cache is not False
            else self.model.new_cache(self.sequences.shape[0])
        )
        past = cache.length()
        new = self.sequences[:, past:]
        # the prompt runs eagerly; with a static cache, decoding steps may run compiled
        forward = self._compiled if past and self._compiled is not None else self.model.forward
        return forward(
            new,
            attention_mask=self.attention_mask,
            position_ids=position_ids_from_mask(self.attention_mask, new.shape[1]),
            cache=cache,
            logits_to_keep=1,
            output_attentions=bool(cfg.output_attentions),
            output_hidden_states=bool(cfg.output_hidden_states) or hidden_states,
            **(self.encdec.step_inputs() if self.encdec is not None else {}),
        )

    def _step(self, want_record: bool) -> Step | None:
        # A run started under torch.inference_mode() holds inference tensors (its cache is
        # written in place every step); it goes on in that mode wherever it is stepped.
        if self.sequences.is_inference() and not torch.is_inference_mode_enabled():
            with torch.inference_mode():
                return self._advance(want_record)
        with torch.no_grad():
            return self._advance(want_record)

    def _advance(self, want_record: bool) -> Step | None:
        if self._rng is not None:
            torch.set_rng_state(self._rng)
        self._refresh_config()
        self._output = None  # a partial output read mid-run is stale after this step
        if self.keep_history:
            self._snapshots.append(self._snapshot())
        registry, tracer, idx = self.registry, self.tracer, self.step_index
        cfg = self.gen_config

        # 1. forward pass over the tokens the cache has not seen
        out = self.strategy.forward(self)
        logits = out.logits[:, -1, :].to(dtype=torch.float32, copy=True)
        if registry:
            logits = registry.fire("logits", logits, idx)
        if tracer is not None:
            tracer.on_logits(idx, logits)

        # 2. logits processors (the strategy decides how: beams take a log-softmax first)
        scores = self.strategy.process(self, logits)
        if registry:
            scores = registry.fire("scores", scores, idx)
        if tracer is not None:
            tracer.on_stage(idx, "final", scores)

        # 3. record what the reference records
        if cfg.return_dict_in_generate:
            if cfg.output_scores:
                self._scores.append(scores)
            if cfg.output_logits:
                self._logits.append(logits)
            if cfg.output_attentions:
                self._attentions.append(out.attentions)
                if self.encdec is not None:
                    self._cross.append(getattr(out, "cross_attentions", None))
            if cfg.output_hidden_states:
                self._hidden.append(out.hidden_states)

        # 4. choose
        forced = self._forced.pop(0) if self._forced else None
        if forced is not None:
            sel = self.strategy.force(self, scores, forced)
        else:
            sel = self.strategy.select(self, scores)
        if registry:
            tokens = registry.fire("select", sel.tokens, idx)
            sel = Selection(tokens, sel.parents, sel.info, sel.scores, sel.logits)
        if self.keep_history:
            self._snapshots[-1].forced = forced

        # 5. update: reorder rows for beams, append tokens, bookkeeping
        if sel.parents is not None:
            if not torch.equal(sel.parents, torch.arange(len(sel.parents), device=self.device)):
                # the mask stays in place, as in the reference: rows of one input share it
                self.cache.reorder(sel.parents)
                self.sequences = self.sequences[sel.parents]
        # several tokens per row when a strategy accepts a draft (assisted decoding)
        new = sel.tokens if sel.tokens.dim() == 2 else sel.tokens[:, None]
        if sel.scores is not None and cfg.return_dict_in_generate:
            if cfg.output_scores:
                self._scores[-1:] = list(sel.scores)
            if cfg.output_logits:
                self._logits[-1:] = list(sel.logits)
        self.sequences = torch.cat([self.sequences, new], dim=-1)
        self.attention_mask = torch.cat(
            [
                self.attention_mask,
                self.attention_mask.new_ones((self.attention_mask.shape[0], new.shape[1])),
            ],
            dim=-1,
        )
        if self.streamer is not None:
            self.streamer.put(new.cpu() if sel.tokens.dim() == 2 else sel.tokens.cpu())
        self.strategy.update(self, sel)
        self.step_index += 1
        done = self.strategy.is_done(self)

        record = None
        if want_record or tracer is not None:
            record = self._record(idx, sel, scores, forced is not None, done)
            if tracer is not None:
                tracer.on_step_end(
                    idx,
                    record,
                    sel
                    if sel.tokens.dim() == 1
                    else Selection(sel.tokens[:, 0], sel.parents, sel.info),
                )
            if registry:
                registry.fire("step_end", record, idx)
            if self.keep_history:
                self.history.append(record)
        if self._rng is not None:
            self._rng = torch.get_rng_state()
        if done:
            self._finish()
        return record

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
        if self.tokenizer is not None:
            text = self.tokenizer.convert_ids_to_tokens(sel.tokens.reshape(-1).tolist())
        return Step(idx, sel.tokens, sel.parents, logprobs, done, forced, text, sel.info)

    def _finish(self) -> None:
        self._finished = True
        if self.streamer is not None:
            self.streamer.end()
            self.streamer = None

    def _build_output(self):
        fields = self.strategy.finalize(self)
        cfg = self.gen_config
        if not cfg.return_dict_in_generate:
            out = fields["sequences"]
        else:
            from . import outputs

            past = getattr(self.cache, "inner", self.cache) if cfg.use_cache else None
            common = dict(
                scores=tuple(self._scores) if cfg.output_scores else None,
                logits=tuple(self._logits) if cfg.output_logits else None,
                attentions=tuple(self._attentions) if cfg.output_attentions else None,
                hidden_states=tuple(self._hidden) if cfg.output_hidden_states else None,
                past_key_values=past,
            )
            common.update(fields)
            if self.encdec is not None:  # decoder_* / cross / encoder_* field names
                cross = tuple(self._cross) if cfg.output_attentions else None
                out = self.encdec.build_output(cfg, common, cross)
            else:
                cls = (
                    outputs.GenerateBeamDecoderOnlyOutput
                    if "beam_indices" in fields
                    else outputs.GenerateDecoderOnlyOutput
                )
                out = cls(**common)
        if self.registry:
            out = self.registry.fire("finish", out, self.step_index)
        return out

    # -- history ---------------------------------------------------------------------------
    def _snapshot(self) -> _Snapshot:
        return _Snapshot(
            seq_len=self.sequences.shape[1],
            cache_len=self.cache.length(),
            recorded={name: len(getattr(self, name)) for name in _RECORDED},
            strategy=self.strategy.get_state(),
            rng=self._rng.clone() if self._rng is not None else torch.get_rng_state(),
            config=copy.deepcopy(self.config),
            extra={"sequences": self.sequences, "attention_mask": self.attention_mask},
        )

    def _restore(self, snap: _Snapshot) -> None:
        self.sequences = snap.extra["sequences"]
        self.attention_mask = snap.extra["attention_mask"]
        self.cache.crop(snap.cache_len)
        self.strategy.set_state(snap.strategy)
        for name, n in snap.recorded.items():
            del getattr(self, name)[n:]
        if self._rng is not None:
            self._rng = snap.rng.clone()
        else:
            torch.set_rng_state(snap.rng)
        self.config = copy.deepcopy(snap.config)

    def _replay(self, target: int) -> None:
        """Rebuild the state after ``target`` steps by re-running them from the start."""
        plan = [(s.config, s.forced) for s in self._snapshots[:target]]
        init = self._initial
        self.cache = make_cache(
            self.model,
            init.extra["sequences"].shape[0],
            self.gen_config,
            self.mode,
            self.assistant_model is not None,
        )
        self.sequences = init.extra["sequences"]
        self.attention_mask = init.extra["attention_mask"]
        self.strategy.set_state(init.strategy)
        for name in _RECORDED:
            getattr(self, name).clear()
        if self._rng is not None:
            self._rng = init.rng.clone()
        else:
            torch.set_rng_state(init.rng)
        self._config_seen = None
        pending = list(self._forced)
        registry, tracer, history = self.registry, self.tracer, self.history
        self.registry, self.tracer = HookRegistry(), None
        self._snapshots, self.history, self.step_index, self._finished = [], [], 0, False
        try:
            for config, forced in plan:
                self.config = copy.deepcopy(config)
                self._forced = [] if forced is None else [forced]
                self._step(want_record=False)
        finally:
            self.registry, self.tracer = registry, tracer
            self.history = history[:target]
            self._forced = pending

    def __repr__(self) -> str:
        state = "finished" if self._finished else "running"
        return f"Run({self.mode}, step={self.step_index}, rows={self.sequences.shape[0]}, {state})"


_IMMUTABLE = (int, float, str, type(None))  # config values compared without a copy


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
    """Create a steppable :class:`Run` (same arguments as :func:`generate`)."""
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
    t0 = time.perf_counter()
    out = run.run()
    run.elapsed = time.perf_counter() - t0
    return out
