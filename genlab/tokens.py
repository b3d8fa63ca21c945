"""How one token is shown to a person: decoded text with its spaces made visible.

Tokenizer pieces (``"Ġsaid"``, ``"▁said"``) are an implementation detail of the tokenizer;
tables, figures, reprs and widgets show what the token *adds to the text* instead, with
the whitespace a reader could not otherwise see drawn as symbols::

    >>> show_token(" said")
    '␣said'
    >>> show_token("\\n")
    '↵'
    >>> show_token("said")
    'said'

This module is the one place for that rule; it imports nothing from the rest of genlab.
"""

from __future__ import annotations

from typing import Any

#: symbols for whitespace a reader cannot see
SPACE = "\u2423"  # ␣
NEWLINE = "\u21b5"  # ↵
TAB = "\u2192"  # →
EMPTY = "\u2205"  # ∅ (a token that decodes to nothing, e.g. a lone byte of a character)
NBSP = "\u237d"  # ⍽ (a no-break space, which would look like a space or nothing)


def token_text(tokenizer: Any, token_id: int) -> str:
    """The text one token adds: ``tokenizer.decode([id])``, a callable ``id -> text``, or
    ``str(id)`` when there is no tokenizer (or the id is negative, e.g. padding)."""
    token_id = int(token_id)
    if tokenizer is None or token_id < 0:
        return str(token_id)
    if hasattr(tokenizer, "decode"):
        return tokenizer.decode([token_id])
    if callable(tokenizer):
        return str(tokenizer(token_id))
    raise ValueError(
        f"tokenizer must have decode(ids) or be a callable id -> text, got {tokenizer!r}"
    )


def show_token(text: str) -> str:
    """``text`` with spaces at its ends shown as ␣, newlines as ↵, tabs as → and no-break
    spaces as ⍽.

    Spaces inside a multi-word text stay spaces (they are visible there); an empty text
    is shown as ∅ so that it is never mistaken for a missing value.
    """
    if text == "":
        return EMPTY
    text = text.replace("\n", NEWLINE).replace("\t", TAB).replace("\xa0", NBSP)
    core = text.strip(" ")
    if not core:
        return SPACE * len(text)
    lead = len(text) - len(text.lstrip(" "))
    trail = len(text) - len(text.rstrip(" "))
    return SPACE * lead + core + SPACE * trail


def shown(tokenizer: Any, token_id: int) -> str:
    """``show_token(token_text(tokenizer, token_id))``: one token as a person sees it."""
    return show_token(token_text(tokenizer, token_id))
