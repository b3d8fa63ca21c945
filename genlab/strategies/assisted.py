"""Assisted (speculative) decoding: a cheap drafter proposes tokens, the model checks them.

One *iteration* (one engine step) of assisted generation, as transformers 4.56.2 runs it:

1. a **drafter** proposes up to ``n`` candidate tokens after the current sequence:

   * an assistant model (``assistant_model=``) generating greedily / by sampling with the
     same processors, stopping early when its confidence drops below
     ``assistant_confidence_threshold``;
   * prompt lookup (``prompt_lookup_num_tokens=``): copy what followed the last n-gram
     the last time it appeared in the text (no model at all);
   * early exit (``assistant_early_exit=k``): the model's own first ``k`` layers, through
     its final norm and head;
2. the model runs **once** over all candidates (``logits_to_keep = n + 1``) and the logits
   processors run at every position;
3. greedy: accept the longest prefix of candidates equal to the model's own argmax, then add
   the model's token after it (so every iteration adds 1..n+1 tokens); sampling with an
   assistant: speculative sampling (accept with probability min(1, p/q), resample the first
   rejected position from max(p - q, 0)); sampling with prompt lookup: one draw per
   position from the model's distribution, accepted while it equals the candidate;
4. the model's cache is cropped to drop rejected positions; the drafter adapts
   (``num_assistant_tokens_schedule``: "heuristic" adds 2 after a fully accepted draft and
   removes 1 otherwise; "constant" never changes).

The engine records one score / logit per *token* (the Selection carries them), so
``scores`` and ``compute_transition_scores`` look exactly like greedy search's.

Reference quirk kept for parity: with a transformers assistant, ``num_assistant_tokens``,
its schedule and ``assistant_confidence_threshold`` are read from the *assistant's*
``generation_config`` (for early exit: the model's own), not from the ``generate`` call; a
genlab assistant takes them from the call. The reference adapts the confidence threshold
with scikit-learn's ROC curve when scikit-learn is installed; genlab keeps it fixed.

(Not run as a test: it needs a model and prompt ids of your own (``model``, ``ids``); the tests run
these calls.)

>>> out = generate(model, input_ids=ids, prompt_lookup_num_tokens=5)   # doctest: +SKIP
>>> genlab.run.trace.assisted_table(ctx.history)  # drafted, accepted  # doctest: +SKIP
"""

from __future__ import annotations

import copy
import warnings
from typing import Any

import torch

from ..models import early_exit
from ..models.base import ModelOutput
from ..stopping import StopStringCriteria
from .base import Selection
from .sampling import TokenByToken
from .stepdata import AssistedStep, DraftSource

# ----------------------------------------------------------------------------------------
# drafters
# ----------------------------------------------------------------------------------------


def prompt_lookup_candidates(
    ids: torch.LongTensor, num_tokens: int, max_ngram: int, max_length: int, eos: list[int]
) -> torch.LongTensor:
    """Prompt-lookup draft: tokens that followed an earlier occurrence of the last n-gram.

    ids: (1, length). Tries n-gram sizes from ``max_ngram`` down to 1; the first (leftmost)
    earlier match of the largest size wins; up to ``num_tokens`` tokens are copied, stopping
    before an EOS (the copy may not reach past ``min(length, max_length)`` as in the
    reference). Returns the drafted tokens, shape (k,), k >= 0.

    >>> prompt_lookup_candidates(torch.tensor([[1, 2, 3, 9, 1, 2]]), 3, 2, 50, []).tolist()
    [3, 9, 1]
    """
    length = ids.shape[1]
    empty = ids.new_empty((0,))
    if max_length == length + 1:
        return empty
    for size in range(min(max_ngram, length - 1), 0, -1):
        windows = ids.unfold(dimension=1, size=size, step=1)  # (1, length - size + 1, size)
        hits = (windows == ids[0, -size:]).all(dim=2).nonzero(as_tuple=True)[1]
        for start in (hits + size).tolist():
            end = min(start + num_tokens, length, max_length)
            if start < end:
                drafted = ids[0, start:end]
                if eos:
                    at_eos = torch.isin(drafted, torch.tensor(eos, device=ids.device))
                    if at_eos.any():
                        drafted = drafted[: int(at_eos.nonzero()[0, 0])]
                return drafted
    return empty


class PromptLookupDrafter:
    """Drafts by prompt lookup; has no state and never adapts. Its settings (draft length,
    n-gram size, max_length, EOS ids) are read from the config in force at each draft, so
    that a run edited between steps (a raised max_new_tokens) drafts as a new run would."""

    name = "prompt_lookup"

    def __init__(self, config):
        self.num_assistant_tokens = int(config.prompt_lookup_num_tokens)

    def draft(self, ctx, ids):
        """``ids`` (1, length) followed by the drafted tokens, and no draft scores."""
        cfg = ctx.gen_config
        self.num_assistant_tokens = int(cfg.prompt_lookup_num_tokens)
        drafted = prompt_lookup_candidates(
            ids,
            self.num_assistant_tokens,
            int(cfg.max_matching_ngram_size or 2),
            int(cfg.max_length),
            ctx.eos_token_ids,
        )
        return torch.cat([ids, drafted[None, :]], dim=1), None

    def adapt(self, n_matches: int, n_drafted: int) -> None:
        """Prompt lookup keeps its draft length."""

    def finish(self) -> None:
        """Nothing to write back."""


def _draft_settings(ctx, source) -> tuple[float, str, float | None, Any]:
    """(num_assistant_tokens, schedule, confidence threshold, generation_config to write
    back to) for a drafter model, following the reference's precedence."""
    cfg = ctx.gen_config
    call = (
        float(cfg.num_assistant_tokens),
        cfg.num_assistant_tokens_schedule,
        cfg.assistant_confidence_threshold,
    )
    hf = getattr(source, "hf", source)
    own = getattr(hf, "generation_config", None)
    if own is None or not hasattr(hf, "config"):
        return (*call, None)
    settings = (
        float(own.num_assistant_tokens),
        own.num_assistant_tokens_schedule,
        own.assistant_confidence_threshold,
    )
    if settings != call:
        from ..config import GenerationConfig

        plain = GenerationConfig()
        defaults = (
            float(plain.num_assistant_tokens),
            plain.num_assistant_tokens_schedule,
            plain.assistant_confidence_threshold,
        )
        if call != defaults:
            warnings.warn(
                "num_assistant_tokens / num_assistant_tokens_schedule / "
                "assistant_confidence_threshold are read from the transformers assistant's "
                f"generation_config {settings}, not from this call {call}, as in the "
                "reference: set them on assistant_model.generation_config",
                stacklevel=4,
            )
    return (*settings, own)


class ModelDrafter:
    """Drafts with a model (an assistant, or the model's own first layers); keeps the
    draft model's cache between iterations."""

    name = "assistant"

    def __init__(self, ctx, model, settings_source):
        self.model = ctx.as_model(model)
        if self.model.info.vocab_size != ctx.info.vocab_size:
            raise ValueError(
                f"assistant_model has a vocabulary of {self.model.info.vocab_size} tokens but "
                f"the model {ctx.info.vocab_size}: use an assistant with the same tokenizer"
            )
        num, schedule, threshold, own = _draft_settings(ctx, settings_source)
        self.num_assistant_tokens = num
        self.schedule = schedule
        self.threshold = threshold
        self._write_back = own
        self.cache = None
        self.mask = ctx.attention_mask.clone()

    def _config(self, ctx):
        cfg = copy.deepcopy(ctx.gen_config)
        cfg.return_dict_in_generate = True
        cfg.output_scores = True
        cfg.is_assistant = True
        cfg.assistant_confidence_threshold = self.threshold
        cfg.min_length = 0
        cfg.min_new_tokens = None
        cfg.cache_implementation = None
        cfg.prompt_lookup_num_tokens = None
        cfg.assistant_early_exit = None
        # stop strings: the draft gets the run's own criteria (below), built with the
        # tokenizer the draft run does not have
        cfg.stop_strings = None
        return cfg

    def draft(self, ctx, ids):
        """``ids`` (1, length) followed by the draft model's tokens, and their scores
        (1, n, vocab); the draft model's cache is kept for the next draft."""
        cur = ids.shape[1]
        cfg = ctx.gen_config
        max_new = min(int(self.num_assistant_tokens), int(cfg.max_length) - cur - 1)
        min_new = max(min(max_new, int(cfg.min_length or 0) - cur), 0)
        if max_new <= 0:
            return ids, None
        if self.cache is not None:  # drop what the model rejected (and re-feed 2 tokens)
            self.cache.crop(cur - 2)
            extra = cur - self.mask.shape[1]
            if extra > 0:
                self.mask = torch.cat([self.mask, self.mask.new_ones((1, extra))], dim=1)
            else:
                self.mask = self.mask[:, :cur]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            draft = ctx.spawn(
                self.model,
                input_ids=ids,
                attention_mask=self.mask,
                generation_config=self._config(ctx),
                logits_processor=ctx.user_processors,
                max_new_tokens=max_new,
                min_new_tokens=min_new,
                cache=self.cache,
                # a draft ends at a stop string, as the reference's does, so that the
                # verified step ends there too
                stopping_criteria=[
                    c for c in ctx.stopping_criteria if isinstance(c, StopStringCriteria)
                ]
                or None,
            )
        draft.run(keep_on_interrupt=False)
        self.cache = draft.views.kv_cache
        self.mask = draft.views.attention_mask
        return draft.sequences, torch.stack(draft.recorded_scores(), dim=1)  # (1, n, vocab)

    def __deepcopy__(self, _memo):
        # a fork shares the draft model but gets its own cache
        other = copy.copy(self)
        other.cache = None if self.cache is None else self.cache.copy()
        other.mask = self.mask.clone()
        return other

    def adapt(self, n_matches: int, n_drafted: int) -> None:
        """The heuristic schedules draft 2 more tokens after a full match, 1 fewer after a
        miss (as the reference)."""
        if self.schedule in ("heuristic", "heuristic_transient"):
            if n_matches == n_drafted:
                self.num_assistant_tokens += 2.0
            else:
                self.num_assistant_tokens = max(1.0, self.num_assistant_tokens - 1.0)

    def finish(self) -> None:
        """Write the adapted draft length back to the assistant's config."""
        # the reference keeps the adapted length on the assistant for the next call
        if self._write_back is not None and self.schedule == "heuristic":
            self._write_back.num_assistant_tokens = self.num_assistant_tokens


# ----------------------------------------------------------------------------------------
# verification
# ----------------------------------------------------------------------------------------


def greedy_matches(drafted: torch.LongTensor, chosen: torch.LongTensor) -> int:
    """Length of the longest prefix where the draft equals the model's choice.

    drafted: (1, n); chosen: (1, n + 1) the model's token at each position.

    >>> greedy_matches(torch.tensor([[4, 5, 6]]), torch.tensor([[4, 5, 7, 8]]))
    2
    """
    return int(((drafted != chosen[:, :-1]).cumsum(dim=-1) < 1).sum())


def speculative_sampling(
    drafted: torch.LongTensor,
    q_logits: torch.Tensor,
    p_logits: torch.Tensor,
    done: bool,
    random,
) -> tuple[torch.LongTensor, int]:
    """Accept/resample a sampled draft (Leviathan et al. 2023, algorithm 1).

    drafted: (1, n) tokens; q_logits: (1, n, vocab) the drafter's processed scores;
    p_logits: (1, n + 1, vocab) the model's processed scores. Returns the tokens to append
    (1, m) and the number of accepted draft tokens. Draws random numbers from ``random``
    (the run's :class:`~genlab.run.randomness.RunRandom`) in the reference's order (one
    uniform per draft token, then one multinomial).
    """
    n = drafted.shape[1]
    q = q_logits.softmax(dim=-1)
    p = p_logits.softmax(dim=-1)
    positions = torch.arange(n)
    q_i = q[:, positions, drafted].squeeze(0, 1)
    p_i = p[:, positions, drafted].squeeze(0, 1)
    ratio = p_i / q_i
    accepted = random.rand_like(ratio) <= ratio
    n_matches = int(((~accepted).cumsum(dim=-1) < 1).sum())
    if done and n_matches == n:
        n_matches -= 1
        return drafted[:, : n_matches + 1], n_matches
    p_next = p[:, n_matches, :]
    if n_matches < q_logits.shape[1]:
        residual = torch.clamp(p_next - q[:, n_matches, :], min=0)
        residual.div_(residual.sum())
    else:
        residual = p_next
    token = random.multinomial(residual, num_samples=1).squeeze(1)[None, :]
    return torch.cat([drafted[:, :n_matches], token], dim=-1), n_matches


class AssistedDecoding(TokenByToken):
    """Draft, verify in one forward, accept a prefix (see the module docstring).

    One engine step = one iteration; its Selection carries (1, m) tokens and their m
    scores. Batch size 1 and num_return_sequences=1, as in the reference.
    """

    mode = "assisted_generation"

    def start(self, ctx) -> None:
        cfg = self.config
        if ctx.sequences.shape[0] != 1:
            raise ValueError(
                f"assisted generation supports one prompt at a time, got a batch "
                f"of {ctx.sequences.shape[0]} rows (num_return_sequences must be "
                "1 too): generate each prompt separately"
            )
        if cfg.use_cache is False:
            raise ValueError("assisted generation needs use_cache=True (got use_cache=False)")
        if cfg.cache_implementation in ("static", "hybrid", "sliding_window"):
            raise ValueError(
                f"assisted generation cannot use cache_implementation="
                f"{cfg.cache_implementation!r}: use 'dynamic' (the default)"
            )
        super().start(ctx)
        self.drafter = self._make_drafter(ctx)
        self.pending = None

    def _drafter_kind(self) -> tuple:
        """What drafts under the config in force (a change between steps, say from prompt
        lookup to early exit, makes a new drafter)."""
        cfg = self.config
        if cfg.assistant_early_exit is not None:
            return ("early_exit", int(cfg.assistant_early_exit))
        return ("prompt_lookup",) if cfg.prompt_lookup_num_tokens is not None else ("assistant",)

    def _make_drafter(self, ctx):
        self.drafter_kind = self._drafter_kind()
        cfg = self.config
        if cfg.assistant_early_exit is not None:
            return ModelDrafter(
                ctx, early_exit.EarlyExitModel(ctx.model, int(cfg.assistant_early_exit)), ctx.model
            )
        if cfg.prompt_lookup_num_tokens is not None:
            return PromptLookupDrafter(cfg)
        if ctx.assistant_model is None:
            raise ValueError(
                "assisted generation needs assistant_model, "
                "prompt_lookup_num_tokens or assistant_early_exit"
            )
        return ModelDrafter(ctx, ctx.assistant_model, ctx.assistant_model)

    # -- forward: draft, then one pass of the model over all drafted tokens --------------
    def forward(self, ctx) -> ModelOutput:
        if self._drafter_kind() != self.drafter_kind:
            self.drafter = self._make_drafter(ctx)
        ids = ctx.sequences
        cur = ids.shape[1]
        budget = self.drafter.num_assistant_tokens
        candidates, draft_scores = self.drafter.draft(ctx, ids)  # (1, cur + n)
        n = candidates.shape[1] - cur
        done = bool(ctx.criteria_met(candidates, scores=None)[0]) if n else False
        mask = torch.cat([ctx.attention_mask, ctx.attention_mask.new_ones((1, n))], dim=1)
        new = candidates[:, ctx.kv_cache.length() :]
        out = ctx.forward(new, mask=mask, cache=ctx.kv_cache, logits_to_keep=n + 1)
        raw = out.logits[:, -n - 1 :].to(dtype=torch.float32)  # (1, n + 1, vocab)
        self.pending = {
            "candidates": candidates,
            "draft_scores": draft_scores,
            "n": n,
            "done": done,
            "raw": raw,
            "cur": cur,
            "budget": budget,
        }
        # the engine processes (and hooks, traces) position 0; select does the others
        return ModelOutput(
            logits=raw[:, :1], hidden_states=out.hidden_states, attentions=out.attentions
        )

    def select(self, ctx, scores: torch.Tensor) -> Selection:
        p = self.pending
        n, cur, raw, candidates = p["n"], p["cur"], p["raw"], p["candidates"]
        processed = [scores]
        for i in range(1, n + 1):
            ctx.notify("logits", raw[:, i])  # observers (the trace) see every position
            processed.append(ctx.process(candidates[:, : cur + i], raw[:, i].clone()))
        new_scores = torch.stack(processed, dim=1)  # (1, n + 1, vocab)
        drafted = candidates[:, cur:]
        if self.config.do_sample and p["draft_scores"] is not None:
            tokens, n_matches = speculative_sampling(
                drafted, p["draft_scores"], new_scores, p["done"], ctx.random
            )
        else:
            if self.config.do_sample:
                probs = new_scores[0].softmax(dim=-1)
                chosen = ctx.random.multinomial(probs, 1).squeeze(1)[None, :]
            else:
                chosen = new_scores.argmax(dim=-1)  # (1, n + 1)
            n_matches = greedy_matches(drafted, chosen)
            if p["done"] and n_matches == n:
                n_matches -= 1
            tokens = chosen[:, : n_matches + 1]
        ctx.kv_cache.crop(cur + n_matches)  # drop rejected positions (the last token is fed next)
        self.drafter.adapt(n_matches, n)
        kept = n_matches + 1
        info = AssistedStep(
            source=DraftSource(self.drafter.name),
            num_assistant_tokens=p["budget"],
            drafted=tuple(drafted[0].tolist()),
            accepted=n_matches,
            rejected=tuple(drafted[0, n_matches:].tolist()),
            added=tuple(tokens[0].tolist()),
        )
        self.pending = None
        return Selection(
            tokens,
            info=info,
            scores=tuple(new_scores[:, i] for i in range(kept)),
            logits=tuple(raw[:, i].clone() for i in range(kept)),
        )

    def force(self, ctx, scores: torch.Tensor, token_id: int) -> Selection:
        p = self.pending
        ctx.kv_cache.crop(p["cur"])
        self.pending = None
        drafted = tuple(p["candidates"][0, p["cur"] :].tolist())
        info = AssistedStep(
            source=DraftSource(self.drafter.name),
            num_assistant_tokens=p["budget"],
            drafted=drafted,
            accepted=0,
            rejected=drafted,
            added=(int(token_id),),
            forced=True,
        )
        return Selection(super().force(ctx, scores, token_id).tokens, info=info)

    def update(self, ctx, selection: Selection) -> None:
        super().update(ctx, selection)
        if self.is_done(ctx):
            self.drafter.finish()

    # snapshots for rewind: the drafter (and its model) is shared, only its budget is saved;
    # its cache needs no restoring, the next draft crops it to the rewound sequence
    def get_state(self) -> dict[str, Any]:
        return {"unfinished": self.unfinished.clone(),
                "budget": self.drafter.num_assistant_tokens}  # fmt: skip

    def set_state(self, state: dict[str, Any]) -> None:
        self.unfinished = state["unfinished"].clone()
        self.drafter.num_assistant_tokens = state["budget"]
        self.pending = None
