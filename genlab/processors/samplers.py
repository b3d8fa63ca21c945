"""The samplers people run models with, beyond the reference: DRY, XTC, mirostat (v1, v2),
dynamic temperature, quadratic smoothing and top-nσ.

transformers 4.56.2 has none of them; llama.cpp, text-generation-webui, koboldcpp and vLLM
do. Each is a :class:`~genlab.processors.base.LogitsProcessor` with the usual
``__call__(input_ids, scores)`` (``scores``: (rows, vocab) logits, ``input_ids``: (rows,
length)), checked settings, and the definition it follows named in its docstring. They are
checked against llama.cpp's own samplers (text-generation-webui's formula for smoothing,
which llama.cpp lacks) by recorded fixtures (``tests/record_sampler_fixtures.py``).

Where llama.cpp shrinks its candidate array, genlab sets the removed tokens to ``-inf``;
"the candidates" below are the tokens whose score is finite.

Each sampler keeps what it did at its last call in ``last_report`` (one entry per row) for
the trace and the lessons: DRY the penalised tokens with the repeat each would extend, XTC
whether it fired and what it removed, dynamic temperature the temperature it used,
mirostat μ and the surprise of the token the previous step chose.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..checks import check_int, check_real, is_int
from .base import LogitsProcessor

#: the random source of the run whose processors are running (see :func:`drawing_from`)
_RUN_RANDOM: contextvars.ContextVar[Any] = contextvars.ContextVar("genlab_run_random", default=None)


@contextlib.contextmanager
def drawing_from(random: Any) -> Iterator[None]:
    """Within this block, samplers that draw random numbers (XTC) draw them from
    ``random`` (a run's :class:`~genlab.run.randomness.RunRandom`): a step's processors draw
    from the run's own generator, so a seed and a rewind give the same draws again."""
    token = _RUN_RANDOM.set(random)
    try:
        yield
    finally:
        _RUN_RANDOM.reset(token)


def _uniform(rows: int, device: Any, generator: torch.Generator | None) -> torch.Tensor:
    # (rows,) float32 in [0, 1): from the running step's random source, else `generator`
    # (else torch's global generator, for a processor called by hand)
    random = _RUN_RANDOM.get()
    if random is not None:
        return random.rand_like(torch.empty(rows, dtype=torch.float32, device=device))
    return torch.rand(rows, generator=generator, device=device)


# ---------------------------------------------------------------------------------------
# DRY
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DryPenalty:
    """One token DRY penalised: emitting ``token_id`` would extend the repeat of
    ``sequence`` (the last ``repeat_length`` tokens of the context, seen earlier followed
    by ``token_id``), so ``penalty`` was subtracted from its logit."""

    token_id: int
    repeat_length: int
    penalty: float
    sequence: tuple[int, ...]


def dry_breakers(
    tokenizer: Any, strings: Sequence[str], *, max_chars: int = 40, max_tail: int = 20
) -> dict[int, list[tuple[int, ...]]]:
    """DRY's sequence breakers as token sequences, found as llama.cpp finds them.

    A breaker is text (``"\\n"``, ``":"``...). Every vocabulary token whose text contains
    it is a one-token breaker; a token whose text ends with the breaker's beginning is the
    head of a breaker whose tail is the tokenization of the rest (at most ``max_tail``
    tokens). Breakers longer than ``max_chars`` characters are cut. Returns ``{head id:
    [tail, ...]}`` (an empty tail for one-token breakers).

    A breaker that is empty, not a string, or that no token can hold is refused, naming
    the field (``dry_sequence_breakers``).
    """
    if isinstance(strings, str):
        strings = [strings]
    if not isinstance(strings, (list, tuple)):
        raise ValueError(
            f"`dry_sequence_breakers` must be a list of non-empty strings, got {strings!r}"
        )
    texts = _token_texts(tokenizer)
    table: dict[int, list[tuple[int, ...]]] = {}
    for text in strings:
        if not isinstance(text, str) or not text:
            raise ValueError(
                "`dry_sequence_breakers` must hold non-empty strings (each is text that ends "
                f"a repeat, such as '\\n' or ':'), got {text!r}"
            )
        text = text[:max_chars]
        found = False
        for token_id, word in enumerate(texts):
            for tail in _breaker_tails(word, text, tokenizer, max_tail):
                tails = table.setdefault(token_id, [])
                if tail not in tails:
                    tails.append(tail)
                found = True
        if not found:
            raise ValueError(
                f"`dry_sequence_breakers`: {text!r} tokenizes to nothing with this tokenizer "
                "(no token holds it or begins it): remove it or use text the vocabulary has"
            )
    return table


def _token_texts(tokenizer: Any) -> list[str]:
    size = len(tokenizer)
    return tokenizer.batch_decode([[i] for i in range(size)], skip_special_tokens=False)


def _breaker_tails(word: str, text: str, tokenizer: Any, max_tail: int) -> list[tuple[int, ...]]:
    """The tails with which token text ``word`` starts breaker ``text`` (``[()]``: it
    holds the whole breaker; ``[]``: it starts no occurrence of it)."""
    if text in word:
        return [()]
    tails = []
    start = word.find(text[0])
    while start != -1:
        overlap = len(word) - start  # the word ends with text[:overlap]?
        if overlap < len(text) and word[start:] == text[:overlap]:
            ids = tokenizer.encode(text[overlap:], add_special_tokens=False)[:max_tail]
            tail = tuple(int(i) for i in ids)
            if tail not in tails:
                tails.append(tail)
        start = word.find(text[0], start + 1)
    return tails


def _normalize_breakers(breakers: Any) -> dict[int, list[tuple[int, ...]]]:
    """``{head: [tail, ...]}`` from that mapping or from a list of id sequences."""
    expected = (
        "a mapping {head token id: [tail id sequences]} (see dry_breakers) or a list of "
        "token id sequences; for strings use the config field dry_sequence_breakers or "
        "dry_breakers(tokenizer, strings)"
    )
    table: dict[int, list[tuple[int, ...]]] = {}
    if breakers is None:
        return table
    if isinstance(breakers, Mapping):
        items = [(head, tail) for head, tails in breakers.items() for tail in tails]
    elif isinstance(breakers, Iterable) and not isinstance(breakers, str):
        items = []
        for seq in breakers:
            seq = [seq] if is_int(seq) else list(seq)
            if not seq:
                raise ValueError(f"`sequence_breakers` must be {expected}: an empty sequence")
            items.append((seq[0], seq[1:]))
    else:
        raise ValueError(f"`sequence_breakers` must be {expected}, got {breakers!r}")
    for head, tail in items:
        tail = list(tail)
        if not is_int(head) or head < 0 or not all(is_int(t) and t >= 0 for t in tail):
            raise ValueError(f"`sequence_breakers` must be {expected}: bad entry {head!r}")
        tails = table.setdefault(int(head), [])
        if tuple(tail) not in tails:
            tails.append(tuple(int(t) for t in tail))
    return table


def _suffix_matches(rev: list[int]) -> list[int]:
    """Z-array of ``rev``: ``z[k]`` is the length of the longest common prefix of ``rev``
    and ``rev[k:]`` (``rev`` is the context read backwards, so ``z[k]`` is how many tokens
    that end ``k`` positions back equal the context's last ones). Linear time."""
    n = len(rev)
    z = [0] * n
    left = right = 0
    for k in range(1, n):
        if k < right:
            z[k] = min(right - k, z[k - left])
        while k + z[k] < n and rev[z[k]] == rev[k + z[k]]:
            z[k] += 1
        if k + z[k] > right:
            left, right = k, k + z[k]
    return z


class DRYLogitsProcessor(LogitsProcessor):
    """DRY, "Don't Repeat Yourself" (p-e-w, text-generation-webui PR #5677; llama.cpp
    PR #9702, ported from koboldcpp PR #982): a token that would extend a sequence already
    seen in the context by ``allowed_length`` tokens or more loses ``multiplier *
    base ** (length - allowed_length)`` from its logit, where ``length`` is how long the
    repeat already is. A sequence breaker (newline, colon...) ends a repeat: no repeat is
    counted across one, and a one-token breaker is never penalised itself.

    multiplier: strength (> 0; 0 turns DRY off); base: growth per extra token (>= 1);
    allowed_length: repeats this long go unpenalised (>= 1); sequence_breakers: ``{head
    id: [tail ids, ...]}`` (from :func:`dry_breakers`) or id sequences; penalty_last_n:
    how many last tokens are searched (-1: all of them, prompt included).

    >>> dry = DRYLogitsProcessor(1.0, base=2.0, allowed_length=2)
    >>> ids = torch.tensor([[5, 6, 7, 1, 5, 6, 7]])          # 5 6 7 was followed by 1
    >>> dry(ids, torch.zeros(1, 8))[0, 1].item()             # repeat of 3: 1 * 2 ** (3 - 2)
    -2.0
    """

    stage_name = "dry"
    shown = ("multiplier", "base", "allowed_length", "penalty_last_n")

    def __init__(
        self,
        multiplier: float,
        base: float = 1.75,
        allowed_length: int = 2,
        sequence_breakers: Any = None,
        penalty_last_n: int = -1,
    ):
        self.multiplier = check_real(
            "dry_multiplier", multiplier, allowed="a number >= 0", ok=lambda v: v >= 0
        )
        self.base = check_real("dry_base", base, allowed="a number >= 1", ok=lambda v: v >= 1)
        self.allowed_length = check_int("dry_allowed_length", allowed_length, minimum=1)
        self.penalty_last_n = check_int("dry_penalty_last_n", penalty_last_n, minimum=-1)
        self.sequence_breakers = _normalize_breakers(sequence_breakers)
        self.last_report: list[list[DryPenalty]] = []
        #: every call's report, by the length of ``input_ids`` (a step of a run)
        self.reports: dict[int, list[list[DryPenalty]]] = {}

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        self.last_report = [[] for _ in range(scores.shape[0])]
        self.reports[input_ids.shape[-1]] = self.last_report
        if self.multiplier == 0 or self.penalty_last_n == 0:
            return scores
        out = None
        for row in range(scores.shape[0]):
            found = self._row_penalties(input_ids[row].tolist())
            if not found:
                continue
            self.last_report[row] = found
            if out is None:
                out = scores.clone()
            ids = torch.tensor([p.token_id for p in found], device=scores.device)
            ids_ok = ids < scores.shape[-1]
            ids = ids[ids_ok]
            penalty = torch.tensor(
                [p.penalty for p, ok in zip(found, ids_ok.tolist(), strict=True) if ok],
                dtype=torch.float64,
            )
            # llama.cpp subtracts a double from a float: the difference is taken in double
            new = (out[row, ids].double().cpu() - penalty).to(out.dtype)
            out[row, ids] = new.to(out.device)
        return scores if out is None else out

    def _row_penalties(self, tokens: list[int]) -> list[DryPenalty]:
        n = len(tokens) if self.penalty_last_n == -1 else min(len(tokens), self.penalty_last_n)
        if n <= self.allowed_length:
            return []
        rev = tokens[::-1][:n]  # rev[i]: the token i places back from the end
        limit = self._repeat_limit(rev)
        if limit < self.allowed_length:
            return []
        z = _suffix_matches(rev)
        longest: dict[int, int] = {}
        for k in range(1, n):
            length = min(z[k], limit)
            if length >= self.allowed_length:
                token = rev[k - 1]  # what followed the earlier copy of the repeat
                if length > longest.get(token, -1):
                    longest[token] = length
        if self.base > 1.000001:
            max_exponent = int(88.7228391 / math.log(self.base))
        else:
            max_exponent = 0
        out = []
        for token, length in longest.items():
            if () in self.sequence_breakers.get(token, ()):
                continue  # a one-token breaker is never penalised
            exponent = length - self.allowed_length
            if max_exponent > 0:
                exponent = min(exponent, max_exponent)
            penalty = self.multiplier * self.base**exponent
            sequence = tuple(reversed(rev[:length]))
            out.append(DryPenalty(token, length, penalty, sequence))
        return out

    def _repeat_limit(self, rev: list[int]) -> int:
        """How far back a repeat may reach: up to the most recent sequence breaker."""
        for i, token in enumerate(rev):
            tails = self.sequence_breakers.get(token)
            if not tails:
                continue
            longest = -1
            for tail in tails:
                size = len(tail)
                if longest < size <= i and all(tail[j] == rev[i - j - 1] for j in range(size)):
                    longest = size
            if longest >= 0:
                return i - longest
        return len(rev)


# ---------------------------------------------------------------------------------------
# XTC
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class XtcReport:
    """What XTC did to one row: the uniform it drew (None: none was needed), whether it
    fired, and the token ids it removed (the most likely ones above the threshold, all but
    the least likely of them)."""

    drawn: float | None
    fired: bool
    removed: tuple[int, ...]


class XTCLogitsWarper(LogitsProcessor):
    """XTC, "Exclude Top Choices" (p-e-w, text-generation-webui PR #6335; llama.cpp PR
    #9742): with chance ``probability``, every token whose probability is at least
    ``threshold`` is removed except the least likely of them, so the model leaves its most
    obvious continuations for a still plausible one.

    threshold: in [0, 0.5] (above 0.5 at most one token qualifies and XTC never removes
    anything); probability: in [0, 1], the chance that XTC acts at a step; the draw comes
    from the run's own generator (``generator``, else torch's global one, when called by
    hand); min_tokens_to_keep: XTC does not act when fewer would remain.

    >>> xtc = XTCLogitsWarper(threshold=0.2, probability=1.0)
    >>> xtc(None, torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))).isinf().tolist()
    [[True, False, False, False]]
    """

    stage_name = "xtc"
    is_warper = True
    shown = ("threshold", "probability")

    def __init__(
        self,
        threshold: float = 0.1,
        probability: float = 0.5,
        min_tokens_to_keep: int = 1,
        generator: torch.Generator | None = None,
    ):
        self.threshold = check_real(
            "xtc_threshold",
            threshold,
            allowed="a number in [0, 0.5] (above 0.5 no two tokens can both reach it)",
            ok=lambda v: 0 <= v <= 0.5,
        )
        self.probability = check_real(
            "xtc_probability",
            probability,
            allowed="a probability in [0, 1]",
            ok=lambda v: 0 <= v <= 1,
        )
        self.min_tokens_to_keep = check_int("min_tokens_to_keep", min_tokens_to_keep, minimum=1)
        self.generator = generator
        self.last_report: list[XtcReport] = []
        #: every call's report, by the length of ``input_ids`` (a step of a run)
        self.reports: dict[int, list[XtcReport]] = {}

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        rows = scores.shape[0]
        length = input_ids.shape[-1] if input_ids is not None else 0
        if self.probability <= 0:
            self.last_report = self.reports[length] = [XtcReport(None, False, ())] * rows
            return scores
        drawn = _uniform(rows, scores.device, self.generator).tolist()
        out, reports = None, []
        for row in range(rows):
            finite = int(torch.isfinite(scores[row]).sum())
            if finite < 2 or drawn[row] > self.probability:
                reports.append(XtcReport(drawn[row], False, ()))
                continue
            probs = torch.softmax(scores[row].float(), dim=-1)
            # the tokens at or above the threshold lead the sorted candidates: count them
            above = int((probs >= self.threshold).sum())
            remove = above - 1  # all above the threshold but the least likely of them
            if remove <= 0 or finite - remove < self.min_tokens_to_keep:
                reports.append(XtcReport(drawn[row], False, ()))
                continue
            top = torch.topk(probs, remove).indices
            if out is None:
                out = scores.clone()
            out[row, top] = -math.inf
            reports.append(XtcReport(drawn[row], True, tuple(top.tolist())))
        self.last_report = self.reports[length] = reports
        return scores if out is None else out


# ---------------------------------------------------------------------------------------
# mirostat
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MirostatStep:
    """Mirostat at one step of one row: μ it truncated with, how many tokens it kept,
    and the surprise (-log2 p, in bits, under its truncated distribution) of the token
    that was then chosen (None until the next step has seen it)."""

    mu: float
    kept: int
    surprise: float | None


class _Mirostat(LogitsProcessor):
    """Shared state of mirostat v1 and v2: μ per row, updated from the token each step
    chose (seen at the next call, as the last token of ``input_ids``).

    The state is keyed by the tokens so far, so it belongs to the run: rewinding to a
    step finds μ as it was there, a fork (a deep copy) goes on from its own, and a fresh
    run starts from 2τ. Changing the run's config rebuilds the processors; the new
    mirostat of the same version takes the old one's state (:meth:`carry_from`), so μ goes
    on from where it was (a new τ is a new target for it, not a restart).
    """

    is_warper = True
    shown = ("tau", "eta")

    def __init__(self, tau: float = 5.0, eta: float = 0.1):
        self.tau = check_real(
            "mirostat_tau",
            tau,
            allowed="a target surprise in bits > 0 (5 is usual)",
            ok=lambda v: v > 0,
        )
        self.eta = check_real(
            "mirostat_eta",
            eta,
            allowed="a learning rate in (0, 1] (0.1 is usual)",
            ok=lambda v: 0 < v <= 1,
        )
        # keyed by the hash of the tokens so far (a step of one row's history), so that the
        # memory grows with the length, not its square: μ used, tokens kept, and the
        # surprise of the key's last token (the previous step's choice)
        self._mu: dict[int, float] = {}
        self._kept: dict[int, int] = {}
        self._surprise: dict[int, float] = {}
        # per row: (key, μ, log2-probabilities of the truncated distribution)
        self._pending: dict[int, tuple[int, float, torch.Tensor]] = {}
        self.last_report: list[MirostatStep] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        out = torch.full_like(scores, -math.inf)
        reports = []
        for row in range(scores.shape[0]):
            tokens = tuple(input_ids[row].tolist())
            key = hash(tokens)
            mu = self._mu_for(row, tokens, key)
            probs = torch.softmax(scores[row].float(), dim=-1)
            keep = self._kept_ids(probs, mu)
            out[row, keep] = scores[row, keep]
            log2p = torch.full_like(probs, -math.inf)
            log2p[keep] = torch.log2(torch.softmax(scores[row, keep].float(), dim=-1))
            self._mu[key], self._kept[key] = mu, len(keep)
            self._pending[row] = (key, mu, log2p.cpu())
            reports.append(MirostatStep(mu, len(keep), None))
        self.last_report = reports
        return out

    def carry_from(self, old: Any) -> None:
        """Go on from ``old``'s state (the mirostat of the plan this one replaces, after a
        config change): μ, kept counts and surprises so far, copied, so that ``old`` (which
        a rewind may bring back) keeps its own."""
        if type(old) is not type(self):
            return
        self._mu, self._kept = dict(old._mu), dict(old._kept)
        self._surprise, self._pending = dict(old._surprise), dict(old._pending)
        self.last_report = list(old.last_report)

    def _mu_for(self, row: int, tokens: tuple[int, ...], key: int) -> float:
        if key in self._mu:
            return self._mu[key]
        pending = self._pending.get(row)
        if pending is not None and len(tokens) > 1 and pending[0] == hash(tokens[:-1]):
            _, mu, log2p = pending
            token = tokens[-1]
            surprise = -float(log2p[token]) if token < len(log2p) else math.inf
            self._surprise[key] = surprise
            if not math.isfinite(surprise):
                return mu  # a forced token outside the kept set: nothing to learn from
            return _f32(_f32(mu) - _f32(self.eta) * _f32(_f32(surprise) - _f32(self.tau)))
        return _f32(2.0 * self.tau)

    def _kept_ids(self, probs: torch.Tensor, mu: float) -> torch.Tensor:
        """The ids kept, from one row's probabilities (vocab,) and μ."""
        raise NotImplementedError

    def history(self, tokens: Sequence[int] | torch.Tensor, start: int = 0) -> list[MirostatStep]:
        """Mirostat's steps along one row's tokens (a row of ``run.sequences``), from
        length ``start``: μ, tokens kept, and the surprise of the token chosen."""
        if isinstance(tokens, torch.Tensor):
            tokens = tokens.tolist()
        tokens = tuple(tokens)
        out = []
        for length in range(max(start, 1), len(tokens) + 1):
            key = hash(tokens[:length])
            if key not in self._mu:
                continue
            surprise = self._surprise.get(hash(tokens[: length + 1]))
            if surprise is None and length < len(tokens):
                surprise = self._pending_surprise(key, tokens[length])
            out.append(MirostatStep(self._mu[key], self._kept[key], surprise))
        return out

    def _pending_surprise(self, key: int, token: int) -> float | None:
        for pending_key, _mu, log2p in self._pending.values():
            if pending_key == key:
                return -float(log2p[token])
        return None


def _f32(x: float) -> float:
    # llama.cpp keeps μ in a float: round each operation as it does
    return float(torch.tensor(x, dtype=torch.float32))


class MirostatLogitsWarper(_Mirostat):
    """Mirostat v1 (Basu et al., 2021, "Mirostat: a neural text decoding algorithm that
    directly controls perplexity", algorithm 1; llama.cpp's ``llama_sampler_init_mirostat``):
    estimates the Zipf exponent ŝ of the distribution from its ``m`` most likely tokens,
    keeps the top k = ((ε̂·2^μ) / (1 - N^-ε̂))^(1/ŝ) with ε̂ = ŝ - 1, and after each step
    moves μ by ``eta`` times the error between the chosen token's surprise and ``tau``.
    μ starts at 2τ. The token is then drawn from what it keeps, so place it last.

    >>> m = MirostatLogitsWarper(tau=3.0, eta=0.1)
    >>> kept = m(torch.tensor([[0]]), torch.tensor([[4.0, 3.0, 2.0, 1.0, 0.0]])).isfinite()
    >>> m.last_report[0].mu, kept.sum().item()
    (6.0, 5)
    """

    stage_name = "mirostat"
    shown = ("tau", "eta", "m")

    def __init__(self, tau: float = 5.0, eta: float = 0.1, m: int = 100):
        super().__init__(tau, eta)
        self.m = check_int("mirostat_m", m, minimum=2)

    def _kept_ids(self, probs: torch.Tensor, mu: float) -> torch.Tensor:
        size = int((probs > 0).sum())
        n = min(self.m - 1, size - 1)
        if n < 1:
            return torch.topk(probs, 1).indices
        top = torch.topk(probs, n + 1).values  # the m most likely, highest first
        i = torch.arange(n, dtype=torch.float32, device=probs.device)
        t = torch.log((i + 2) / (i + 1))
        b = torch.log(top[:n] / top[1 : n + 1])
        s_hat = float((t * b).sum() / (t * t).sum())
        eps = s_hat - 1
        try:
            k = ((eps * 2.0**mu) / (1 - len(probs) ** (-eps))) ** (1 / s_hat)
        except (OverflowError, ZeroDivisionError):
            k = math.inf
        if isinstance(k, complex) or not math.isfinite(k):
            k = size
        return torch.topk(probs, max(1, min(int(k), size))).indices


class MirostatV2LogitsWarper(_Mirostat):
    """Mirostat v2 (Basu et al., 2021, section 5's simpler variant as llama.cpp implements
    it, ``llama_sampler_init_mirostat_v2``): keeps the most likely tokens whose surprise
    -log2 p is at most μ (at least one), and after each step moves μ by ``eta`` times the
    error between the chosen token's surprise (under the kept, renormalised distribution)
    and ``tau``. μ starts at 2τ. The token is then drawn from what it keeps, so place it
    last.

    >>> m = MirostatV2LogitsWarper(tau=1.0, eta=0.1)           # μ = 2 bits: p >= 1/4
    >>> probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    >>> m(torch.tensor([[0]]), probs.log()).isfinite().tolist()
    [[True, True, False, False]]
    """

    stage_name = "mirostat_v2"

    def _kept_ids(self, probs: torch.Tensor, mu: float) -> torch.Tensor:
        # the tokens whose surprise is at most μ lead the sorted candidates
        keep = torch.nonzero(-torch.log2(probs) <= mu).squeeze(1)
        return keep if len(keep) else torch.topk(probs, 1).indices


# ---------------------------------------------------------------------------------------
# temperature, smoothing, top-nσ
# ---------------------------------------------------------------------------------------


class DynamicTemperatureLogitsWarper(LogitsProcessor):
    """Dynamic (entropy-based) temperature (kalomaze, text-generation-webui PR #5174;
    llama.cpp's ``llama_sampler_init_temp_ext`` with min = t - δ, max = t + δ): the
    temperature is ``low + (high - low) * (H / log N) ** exponent``, where H is the
    entropy of the candidates' distribution and N their number, so a confident step is
    sampled cold and an uncertain one hot.

    low, high: 0 <= low <= high; exponent: > 0. A temperature of 0 keeps only the most
    likely token.

    >>> warper = DynamicTemperatureLogitsWarper(0.5, 1.5)
    >>> _ = warper(None, torch.zeros(1, 4))                   # uniform: H = log N
    >>> warper.last_report
    [1.5]
    """

    stage_name = "dynatemp"
    is_warper = True
    shown = ("low", "high", "exponent")

    def __init__(self, low: float, high: float, exponent: float = 1.0):
        self.low = check_real("dynatemp_low", low, allowed="a number >= 0", ok=lambda v: v >= 0)
        self.high = check_real(
            "dynatemp_high",
            high,
            allowed=f"a number >= dynatemp_low ({self.low})",
            ok=lambda v: v >= self.low,
        )
        self.exponent = check_real(
            "dynatemp_exponent", exponent, allowed="a number > 0", ok=lambda v: v > 0
        )
        self.last_report: list[float | None] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        out = scores.clone()
        reports: list[float | None] = []
        for row in range(scores.shape[0]):
            finite = torch.isfinite(scores[row])
            size = int(finite.sum())
            if size <= 1:
                reports.append(None)
                continue
            values = scores[row][finite].float()
            probs = torch.softmax(values, dim=-1)
            nonzero = probs[probs > 0]
            entropy = float(-(nonzero * torch.log(nonzero)).sum())
            normalized = entropy / math.log(size)
            temp = self.low + (self.high - self.low) * normalized**self.exponent
            reports.append(temp)
            if temp <= 0:
                best = torch.argmax(torch.where(finite, scores[row], -math.inf))
                out[row] = -math.inf
                out[row, best] = scores[row, best]
            else:
                out[row] = scores[row] / temp
        self.last_report = reports
        return out


class QuadraticSmoothingLogitsWarper(LogitsProcessor):
    """Quadratic ("smooth") sampling (kalomaze, text-generation-webui PR #5403, with the
    cubic ``smoothing_curve`` added later there): with d = logit - max logit (<= 0), each
    finite logit becomes ``max - k·f·d² + s·f·d³`` with k = (3 - curve) / 2 and s =
    (curve - 1) / 2. A small factor flattens the top of the distribution and a large one
    sharpens it; curve 1 is the pure quadratic. llama.cpp has no smoothing, so this
    follows text-generation-webui's formula (taken per row).

    smoothing_factor: > 0; smoothing_curve: >= 1.

    >>> QuadraticSmoothingLogitsWarper(0.5)(None, torch.tensor([[2.0, 0.0]])).tolist()
    [[2.0, 0.0]]
    """

    stage_name = "smoothing"
    is_warper = True
    shown = ("smoothing_factor", "smoothing_curve")

    def __init__(self, smoothing_factor: float, smoothing_curve: float = 1.0):
        self.smoothing_factor = check_real(
            "smoothing_factor", smoothing_factor, allowed="a number > 0", ok=lambda v: v > 0
        )
        self.smoothing_curve = check_real(
            "smoothing_curve", smoothing_curve, allowed="a number >= 1", ok=lambda v: v >= 1
        )

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        f, curve = self.smoothing_factor, self.smoothing_curve
        k, s = (3 - curve) / 2, (curve - 1) / 2
        top = scores.max(dim=-1, keepdim=True).values
        d = scores - top
        smoothed = -(k * f * d**2) + (s * f * d**3) + top
        return torch.where(torch.isinf(scores) & (scores < 0), scores, smoothed)


class TopNSigmaLogitsWarper(LogitsProcessor):
    """Top-nσ (Tang et al., 2024, "Top-nσ: Not All Logits Are You Need"; llama.cpp's
    ``llama_sampler_init_top_n_sigma``): keeps the tokens whose logit is at least
    ``max - n·σ``, σ the standard deviation of the candidates' logits. It reads the
    logits themselves, so a temperature applied after it does not change what it keeps.

    n: > 0.

    >>> TopNSigmaLogitsWarper(1.0)(None, torch.tensor([[0.0, 1.0, 2.0, 3.0]])).isfinite().tolist()
    [[False, False, True, True]]
    """

    stage_name = "top_n_sigma"
    is_warper = True
    shown = ("n",)

    def __init__(self, n: float = 1.0):
        self.n = check_real("top_n_sigma", n, allowed="a number > 0", ok=lambda v: v > 0)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        finite = torch.isfinite(scores)
        count = finite.sum(dim=-1, keepdim=True).clamp(min=1)
        values = torch.where(finite, scores, 0.0).double()
        mean = values.sum(dim=-1, keepdim=True) / count
        var = (torch.where(finite, values - mean, 0.0) ** 2).sum(dim=-1, keepdim=True) / count
        top = torch.where(finite, scores, -math.inf).max(dim=-1, keepdim=True).values.double()
        remove = finite & (scores.double() < top - self.n * var.sqrt())
        return scores.masked_fill(remove, -math.inf)


#: the samplers of this module, by stage name
SAMPLERS = {
    cls.stage_name: cls
    for cls in (
        DRYLogitsProcessor,
        XTCLogitsWarper,
        MirostatLogitsWarper,
        MirostatV2LogitsWarper,
        DynamicTemperatureLogitsWarper,
        QuadraticSmoothingLogitsWarper,
        TopNSigmaLogitsWarper,
    )
}

__all__ = [
    "SAMPLERS",
    "DRYLogitsProcessor",
    "DryPenalty",
    "DynamicTemperatureLogitsWarper",
    "MirostatLogitsWarper",
    "MirostatStep",
    "MirostatV2LogitsWarper",
    "QuadraticSmoothingLogitsWarper",
    "TopNSigmaLogitsWarper",
    "XTCLogitsWarper",
    "XtcReport",
    "drawing_from",
    "dry_breakers",
]
