"""Structured output: a JSON schema, a regular expression or a Lark grammar, compiled by the
llguidance engine for a tokenizer (the optional extra ``genlab[grammar]``).

``lm.generate(prompt, json_schema=schema)`` (or ``regex=``, ``grammar=``; also on
``lm.start`` and :func:`genlab.generate`) compiles the constraint here, before any step,
and adds a :class:`~genlab.processors.grammar.GrammarLogitsProcessor` (stage label
``grammar``) to the run: at every step it removes the tokens that cannot continue a text
the constraint accepts, and allows EOS once the text is complete.

Why llguidance: it depends on nothing (no transformers), takes JSON Schema, regular
expressions and Lark grammars, computes the mask of the demo's 49,152 tokens in tens of
microseconds, and rolls a matcher back or copies it cheaply, which keeps rewind and fork
cheap. The comparison with xgrammar and outlines-core, with the figures, is in
benchmarks/README.md.

The engine's description of the vocabulary is built from genlab's own tokenizer: the bytes
each token stands for (:func:`genlab.text.tokens.piece_bytes` for byte-level BPE,
``<0xNN>`` pieces and ``▁`` for SentencePiece-style vocabularies), with the special tokens
marked. llguidance's own reader of ``tokenizer.json`` keeps the demo's ``Ġ`` as text (its
decoder is a sequence with a byte fallback), so genlab hands it the bytes itself.

>>> g = compile_grammar(lm.tokenizer, regex=r"[0-9]{4}-[0-9]{2}-[0-9]{2}")  # lm: the demo
>>> g.kind, len(g.allowed(lm.tokenizer.encode("2024-", add_special_tokens=False)))
('regex', 10)

The engine's ``\\d`` is Unicode's: it also allows digits of other scripts (25 tokens of
the demo after ``"2024-"``, not 10); write ``[0-9]`` for ASCII digits.
"""

from __future__ import annotations

import json
from typing import Any

#: the install command named by the errors of a missing engine
INSTALL_HINT = "pip install 'genlab[grammar]'"

#: the arguments that constrain a run, in the order they are checked
GRAMMAR_ARGUMENTS = ("json_schema", "regex", "grammar")


def engine():
    """The llguidance module, or an ImportError that names the extra to install."""
    try:
        import llguidance
    except ImportError as err:
        raise ImportError(
            "json_schema=, regex= and grammar= need the llguidance engine, which genlab "
            f"installs as an optional extra: {INSTALL_HINT} (or pip install llguidance)"
        ) from err
    return llguidance


# ---------------------------------------------------------------------------------------
# the engine's tokenizer, built from genlab's (or a transformers fast tokenizer's)

_TOKENIZERS: dict[int, tuple[Any, Any]] = {}


def engine_tokenizer(tokenizer: Any):
    """llguidance's ``LLTokenizer`` for ``tokenizer``, built once per tokenizer object
    (reading the vocabulary takes a few hundred milliseconds on the demo's)."""
    key = id(tokenizer)
    held = _TOKENIZERS.get(key)
    if held is not None and held[0] is tokenizer:
        return held[1]
    llg = engine()
    description = _Vocabulary(tokenizer)
    built = llg.LLTokenizer(llg.TokenizerWrapper(description), eos_token=description.eos_ids)
    if len(_TOKENIZERS) > 8:
        _TOKENIZERS.clear()
    _TOKENIZERS[key] = (tokenizer, built)
    return built


class _Vocabulary:
    """What llguidance's ``TokenizerWrapper`` reads: each token's bytes, the special
    token ids, EOS and BOS, and a function that tokenizes text."""

    def __init__(self, tokenizer: Any) -> None:
        from .tokens import piece_bytes

        for name in ("convert_ids_to_tokens", "encode"):
            if not hasattr(tokenizer, name):
                raise ValueError(
                    f"json_schema=, regex= and grammar= need the model's tokenizer (genlab's or "
                    f"a transformers one); got {type(tokenizer).__name__}, which has no {name}"
                )
        self._tokenizer = tokenizer
        eos = getattr(tokenizer, "eos_token_id", None)
        if eos is None:
            raise ValueError(
                "the tokenizer has no EOS token, so a constrained run could never end: set "
                "tokenizer.eos_token before passing json_schema=, regex= or grammar="
            )
        self.eos_token_id = int(eos)
        self.eos_ids = [self.eos_token_id]
        self.bos_token_id = getattr(tokenizer, "bos_token_id", None)
        special = set(getattr(tokenizer, "all_special_ids", []) or [])
        added = getattr(tokenizer, "added_tokens_decoder", None)
        if added is None and hasattr(tokenizer, "backend_tokenizer"):
            added = tokenizer.backend_tokenizer.get_added_tokens_decoder()
        special |= {int(i) for i, t in (added or {}).items() if getattr(t, "special", False)}
        self.special_token_ids = sorted(special)
        byte_level = _is_byte_level(tokenizer)
        pieces = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
        tokens: list[bytes] = []
        for i, piece in enumerate(pieces):
            if piece is None:
                tokens.append(b"")
            elif i in special:
                tokens.append(piece.encode("utf-8"))
            elif byte_level:
                data = piece_bytes(piece)
                tokens.append(piece.encode("utf-8") if data is None else data)
            else:
                data = piece_bytes(piece) if piece.startswith("<0x") else None
                tokens.append(data if data is not None else piece.replace("▁", " ").encode())
        self.tokens = tokens

    def __call__(self, text: str | bytes) -> list[int]:
        if isinstance(text, bytes):
            text = text.decode("utf-8", errors="replace")
        return [int(i) for i in self._tokenizer.encode(text, add_special_tokens=False)]


def _is_byte_level(tokenizer: Any) -> bool:
    """Whether the vocabulary writes bytes as byte-level BPE characters (``Ġ`` for a space)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return False
    spec = json.loads(backend.to_str())
    return '"ByteLevel"' in json.dumps([spec.get("pre_tokenizer"), spec.get("decoder")])


# ---------------------------------------------------------------------------------------
# compiling a constraint


class Grammar:
    """A compiled constraint for one tokenizer: ``kind`` (``"json_schema"``, ``"regex"``
    or ``"grammar"``), ``source`` (what was given, as text) and the engine's grammar.
    :meth:`matcher` makes a fresh matcher (the engine's parser state) for a new row."""

    def __init__(self, kind: str, source: str, lark: str, tokenizer: Any, schema=None) -> None:
        self.kind = kind
        self.source = source
        self.schema = schema  # the JSON schema as a dict (json_schema only), for validation
        self._grammar = lark
        self.tokenizer = tokenizer
        self.engine_tokenizer = engine_tokenizer(tokenizer)

    def matcher(self):
        """A new llguidance ``LLMatcher`` at the start of the constrained text."""
        return engine().LLMatcher(self.engine_tokenizer, self._grammar, log_level=0)

    @property
    def vocab_size(self) -> int:
        """The number of tokens the engine's masks cover."""
        return int(self.engine_tokenizer.vocab_size)

    def allowed(self, token_ids=()) -> list[int]:
        """The ids the constraint allows after the generated tokens ``token_ids``."""
        import numpy as np

        m = self.matcher()
        if token_ids and not m.consume_tokens([int(t) for t in token_ids]):
            raise ValueError(f"the {self.kind} refuses these tokens: {_first_line(m)}")
        bits = np.frombuffer(m.compute_bitmask(), dtype=np.uint8)
        return np.flatnonzero(np.unpackbits(bits, bitorder="little")[: self.vocab_size]).tolist()

    def __repr__(self) -> str:
        text = self.source if len(self.source) <= 60 else self.source[:57] + "..."
        return f"Grammar({self.kind}={text!r})"


def _first_line(matcher) -> str:
    return (matcher.get_error() or "").strip().splitlines()[0] if matcher.get_error() else ""


def compile_grammar(
    tokenizer: Any, *, json_schema: Any = None, regex: str | None = None, grammar: str | None = None
) -> Grammar:
    """Compile one constraint for ``tokenizer``; a ValueError names the argument and says
    what is wrong before anything is generated.

    json_schema: a dict, a JSON string, or a pydantic model class; regex: a regular
    expression the whole answer must match; grammar: a Lark grammar (llguidance's dialect:
    ``start: ...`` with rules and ``/regex/`` terminals). Exactly one of them.
    """
    given = {
        name: value
        for name, value in zip(GRAMMAR_ARGUMENTS, (json_schema, regex, grammar), strict=True)
        if value is not None
    }
    if len(given) != 1:
        raise ValueError(
            f"pass exactly one of json_schema=, regex= and grammar=; got {sorted(given) or 'none'}"
            ": they would each constrain the whole answer (put a pattern inside a schema with "
            'its "pattern" keyword)'
        )
    (kind, value), llg = next(iter(given.items())), engine()
    schema = None
    if kind == "json_schema":
        schema = _schema_dict(value)
        source = json.dumps(schema)
        lark = llg.LLMatcher.grammar_from_json_schema(source)
    elif kind == "regex":
        if not isinstance(value, str) or not value:
            raise ValueError(
                f"regex= must be a non-empty string (a regular expression); got {value!r}"
            )
        source, lark = value, llg.LLMatcher.grammar_from_regex(value)
    else:
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"grammar= must be a Lark grammar (a non-empty string); got {value!r}")
        source, lark = value, llg.LLMatcher.grammar_from_lark(value)
    out = Grammar(kind, source, lark, tokenizer, schema=schema)
    _check_compiles(out, kind)
    return out


def _schema_dict(value: Any) -> dict:
    """A JSON schema as a dict: from a dict, a JSON string or a pydantic model class."""
    if isinstance(value, type) and hasattr(value, "model_json_schema"):
        return value.model_json_schema()  # a pydantic (v2) model class
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as err:
            raise ValueError(
                f"json_schema= is a string but not JSON ({err.msg} at character {err.pos}): "
                "pass a dict, a JSON string or a pydantic model class"
            ) from None
    if isinstance(value, bool):  # JSON Schema's true (anything) and false (nothing)
        value = {} if value else {"enum": []}
    if not isinstance(value, dict):
        raise ValueError(
            f"json_schema= must be a dict, a JSON string or a pydantic model class; got "
            f"{type(value).__name__}"
        )
    return value


def _check_compiles(grammar: Grammar, kind: str) -> None:
    """ValueError (naming ``kind``) for a constraint the engine cannot compile, or one it
    finds unsatisfiable (``minLength`` above ``maxLength``, an empty ``enum``...)."""
    from ..processors.grammar import engine_message

    m = grammar.matcher()
    if m.is_error():
        raise ValueError(f"{kind}= cannot be compiled: {engine_message(m.get_error())}")


def grammar_from_arguments(tokenizer: Any, arguments: dict) -> Grammar | None:
    """Pop ``json_schema``, ``regex`` and ``grammar`` from ``arguments`` (a run's keyword
    arguments) and compile them; None when none is given."""
    given = {name: arguments.pop(name) for name in GRAMMAR_ARGUMENTS if name in arguments}
    if all(value is None for value in given.values()):
        return None
    if tokenizer is None:
        name = next(n for n, v in given.items() if v is not None)
        raise ValueError(
            f"{name}= needs the model's tokenizer to know which tokens spell what: use "
            "lm.generate / lm.start, or pass tokenizer= to genlab.generate"
        )
    return compile_grammar(tokenizer, **given)


def with_grammar(model: Any, tokenizer: Any, logits_processor, arguments: dict):
    """The run's processors with the grammar's first (see
    :mod:`genlab.processors.grammar` for why there), when ``arguments`` (a run's keyword
    arguments) hold ``json_schema``, ``regex`` or ``grammar``; they are popped from it."""
    if not any(arguments.get(name) is not None for name in GRAMMAR_ARGUMENTS):
        for name in GRAMMAR_ARGUMENTS:
            arguments.pop(name, None)
        return logits_processor
    if tokenizer is None:
        tokenizer = getattr(model, "tokenizer", None)  # an LM passed to genlab.generate
    grammar = grammar_from_arguments(tokenizer, arguments)
    from ..processors.grammar import GrammarLogitsProcessor

    return [GrammarLogitsProcessor(grammar), *list(logits_processor or [])]


def check_forced(state: Any, token_ids) -> None:
    """A ValueError when a grammar processor of the run's plan forbids forcing
    ``token_ids`` after the run's tokens (see ``GrammarLogitsProcessor.check_forced``)."""
    for processor in state.plan.processors:
        check = getattr(processor, "check_forced", None)
        if check is not None and token_ids:
            check(state.sequences, token_ids)


__all__ = [
    "GRAMMAR_ARGUMENTS",
    "INSTALL_HINT",
    "Grammar",
    "check_forced",
    "compile_grammar",
    "engine",
    "engine_tokenizer",
    "grammar_from_arguments",
    "with_grammar",
]
