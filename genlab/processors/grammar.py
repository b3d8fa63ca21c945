"""The grammar stage: removes every token that cannot continue a text the constraint (a
JSON schema, a regular expression or a Lark grammar, :mod:`genlab.text.grammar`) accepts.

Where it sits: first among the processors passed in ``logits_processor`` (after the
config's built-in processors, before the sampling warpers), the place transformers gives
a grammar engine's own processor passed in ``logits_processor=[...]``. That order is also
the one that works: penalties and biases change scores but cannot bring back a token the
grammar removed (``-inf`` stays ``-inf``), and the warpers that follow (top-k, top-p,
min-p...) then choose only among allowed tokens, so they never leave a step with no
allowed token at all, which a grammar after them could.

Each row's parser state (an llguidance matcher) is a function of the tokens the row has
generated: at every call the processor matches each row's tokens against the matchers it
kept from the call before, rolls one back or copies it when a row was rewound, forked or
reordered by beam search, and feeds it the tokens that are new. So rewinding, forking,
beams and forced tokens need nothing from it, and a copy of the processor (a fork's) has
matchers of its own.
"""

from __future__ import annotations

import copy
from typing import Any, ClassVar

import numpy as np
import torch

from .base import LogitsProcessor


class GrammarLogitsProcessor(LogitsProcessor):
    """Allow only the tokens that keep the text inside ``grammar`` (a compiled
    :class:`~genlab.text.grammar.Grammar`); EOS only once the text is complete (then only EOS,
    when the text cannot go on). A row that has taken EOS is left as it is (its tokens are
    padding from then on).

    Made by ``json_schema=``, ``regex=`` or ``grammar=``; pass one in ``logits_processor``
    to place it yourself.

    >>> from genlab.text.grammar import compile_grammar
    >>> proc = GrammarLogitsProcessor(compile_grammar(lm.tokenizer, regex="yes|no"))
    >>> ids = torch.tensor([[1]])                   # the prompt: one token
    >>> allowed = proc(ids, torch.zeros(1, 49152)).isfinite()[0].nonzero().flatten()
    >>> [lm.tokenizer.decode([i]) for i in allowed.tolist()]
    ['n', 'y', 'no', 'ye', 'yes']
    """

    stage_name: ClassVar[str] = "grammar"
    shown: ClassVar[tuple[str, ...]] = ("kind", "source")

    def __init__(self, grammar) -> None:
        self.grammar = grammar
        self.kind = grammar.kind
        self.source = grammar.source
        self.prompt_length: int | None = None
        self._eos = frozenset(int(i) for i in grammar.engine_tokenizer.eos_tokens)
        # one (tokens, matcher) per row of the last call: the tokens the matcher has taken
        self._rows: list[tuple[tuple[int, ...], Any]] = []
        self._index: dict[tuple[int, ...], int] = {}  # tokens -> their place in _rows
        #: per row of the last call, how many tokens the grammar allowed (-1: row ended)
        self.allowed_counts: list[int] = []

    # -- the parser state of each row -------------------------------------------------------
    def _source(self, tokens: tuple[int, ...]) -> tuple[int | None, int]:
        """The kept row whose tokens share the longest prefix with ``tokens`` (one that is
        a whole prefix first: it needs no rollback), and the length of that prefix."""
        for known in (tokens[:-1], tokens):  # one new token since the last call, or none
            index = self._index.get(known)
            if index is not None:
                return index, len(known)
        best, best_key = None, (-1, False)
        for index, (seen, _) in enumerate(self._rows):
            n = _common_prefix(seen, tokens)
            key = (n, n == len(seen))
            if key > best_key:
                best, best_key = index, key
        return best, best_key[0]

    def _matchers(self, rows: list[tuple[int, ...]], copy_all: bool = False) -> list:
        """A matcher per row that has consumed exactly the row's tokens (or stopped
        inside them, at EOS), made from the kept matchers: each kept one serves its first
        row itself and the others as copies, all taken before any of them moves."""
        claimed: set[int] = set()
        starts = []
        for tokens in rows:
            index, n = self._source(tokens)
            if index is None:
                starts.append((self.grammar.matcher(), (), 0))
                continue
            seen, matcher = self._rows[index]
            if copy_all or index in claimed:
                matcher = matcher.deep_copy()
            claimed.add(index)
            starts.append((matcher, seen, n))
        out = []
        for tokens, (matcher, seen, n) in zip(rows, starts, strict=True):
            if n < len(seen) and not matcher.rollback(len(seen) - n):
                matcher, n = self.grammar.matcher(), 0  # too far back: start again
            for t in tokens[n:]:
                if not matcher.consume_token(t) or matcher.is_error():
                    raise ValueError(
                        f"the {self.kind} refuses token {_text(self.grammar.tokenizer, t)} "
                        f"(id {t}) after {n} tokens: {_error(matcher)}"
                    )
                n += 1
            out.append(matcher)
        return out

    def _generated(self, input_ids: torch.LongTensor) -> list[tuple[int, ...]]:
        """Each row's generated tokens up to its first EOS (what follows is padding)."""
        if self.prompt_length is None:
            self.prompt_length = int(input_ids.shape[1])
        eos = self._eos
        rows = []
        for row in input_ids[:, self.prompt_length :].tolist():
            end = next((i + 1 for i, t in enumerate(row) if t in eos), len(row))
            rows.append(tuple(row[:end]))
        return rows

    def _sync(self, input_ids: torch.LongTensor) -> list:
        rows = self._generated(input_ids)
        matchers = self._matchers(rows)
        self._rows = list(zip(rows, matchers, strict=True))
        self._index = {tokens: index for index, tokens in enumerate(rows)}
        return matchers

    # -- the mask ---------------------------------------------------------------------------
    def allowed_mask(self, input_ids: torch.LongTensor, vocab: int) -> torch.BoolTensor:
        """(rows, vocab) True where the grammar allows the token after ``input_ids``
        (every token for a row that has ended)."""
        import llguidance  # installed: the grammar was compiled with it (genlab.text.grammar)

        llg_torch = _engine_torch(llguidance)
        matchers = self._sync(input_ids)
        size = self.grammar.vocab_size
        bitmask = torch.full((len(matchers), (size + 31) // 32), -1, dtype=torch.int32)
        ended = []
        for r, (tokens, matcher) in enumerate(self._rows):
            if tokens and tokens[-1] in self._eos:
                ended.append(r)
                continue
            llg_torch.fill_next_token_bitmask(matcher, bitmask, r)
        # bit i of 32-bit word w is token 32 w + i (the words little-endian, as the engine's)
        bits = np.unpackbits(bitmask.numpy().view(np.uint8), axis=1, bitorder="little")
        if vocab <= bits.shape[1]:
            allowed = bits[:, :vocab]
        else:  # logits past the engine's vocabulary: never allowed
            allowed = np.zeros((len(matchers), vocab), dtype=np.uint8)
            allowed[:, : bits.shape[1]] = bits
        allowed[:, size:] = 0
        allowed[ended] = 1
        counts = allowed.sum(1, dtype=np.int64).tolist()
        self.allowed_counts = [-1 if r in ended else int(c) for r, c in enumerate(counts)]
        allowed = torch.from_numpy(allowed.view(np.bool_))
        return allowed

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        # input_ids: (rows, length); scores: (rows, vocab) -> (rows, vocab)
        allowed = self.allowed_mask(input_ids, scores.shape[-1]).to(scores.device)
        return scores.masked_fill(~allowed, float("-inf"))

    # -- forced tokens ----------------------------------------------------------------------
    def check_forced(self, input_ids: torch.LongTensor, token_ids) -> None:
        """A ValueError when the grammar forbids any of ``token_ids`` (taken one per step
        after ``input_ids``, every row), naming the token and what the grammar expects."""
        rows = self._generated(input_ids)
        for r, matcher in enumerate(self._matchers(rows, copy_all=True)):
            for k, t in enumerate(token_ids):
                if rows[r] and rows[r][-1] in self._eos:
                    break  # the row has ended
                if matcher.validate_tokens([int(t)]) == 1:
                    if int(t) in self._eos:
                        break  # the row ends there
                    matcher.consume_token(int(t))
                    continue
                expected = self._expected(matcher)
                where = f"row {r}, " if input_ids.shape[0] > 1 else ""
                raise ValueError(
                    f"force: the {self.kind} forbids token {_text(self.grammar.tokenizer, t)} "
                    f"(id {int(t)}) at {where}forced token {k + 1} of {len(token_ids)}; it "
                    f"allows {expected} there. Force one of those, or drop the {self.kind}"
                )

    def _expected(self, matcher) -> str:
        bits = np.frombuffer(matcher.compute_bitmask(), dtype=np.uint8)
        ids = np.flatnonzero(np.unpackbits(bits, bitorder="little")[: self.grammar.vocab_size])
        tok = self.grammar.tokenizer
        shown = ", ".join(_text(tok, int(i)) for i in ids[:8])
        more = f" and {len(ids) - 8} more" if len(ids) > 8 else ""
        return f"{len(ids)} token{'s' if len(ids) != 1 else ''} ({shown}{more})"

    # -- copies -----------------------------------------------------------------------------
    def __deepcopy__(self, memo: dict) -> GrammarLogitsProcessor:
        other = copy.copy(self)  # the compiled grammar and tokenizer are shared (read only)
        other._rows = [(tokens, matcher.deep_copy()) for tokens, matcher in self._rows]
        other.allowed_counts = list(self.allowed_counts)
        memo[id(self)] = other
        return other


def _common_prefix(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _text(tokenizer: Any, token_id: int) -> str:
    from genlab.text.tokens import shown

    return repr(shown(tokenizer, int(token_id)))


def engine_message(text: str) -> str:
    """The engine's error, on one line (its grammar dump dropped)."""
    text = text.split("<state>")[0].split("<grammar>")[0]
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " ".join(lines)[:400]


def _error(matcher) -> str:
    return engine_message(matcher.get_error() or "")


def _engine_torch(llg):
    import llguidance.torch as llg_torch

    return llg_torch
