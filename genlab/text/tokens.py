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

A token that holds only part of a character (its text decodes to "\ufffd") is shown
as the bytes it holds, read from its piece: ``⟨E6 97⟩`` (see :func:`shown`).

This module is the one place for that rule; it imports nothing from the rest of genlab.
"""

from __future__ import annotations

import re
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


#: what decode() gives for bytes that are not a whole UTF-8 character
REPLACEMENT = "\ufffd"


def _byte_level_alphabet() -> dict[str, int]:
    """Byte-level BPE (GPT-2 and its descendants) writes each byte as one printable
    character: the printable Latin-1 bytes as themselves, the other 68 bytes as the
    characters from U+0100 on, in byte order. Returns character -> byte."""
    keep = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    moved = [b for b in range(256) if b not in keep]
    alphabet = {chr(b): b for b in keep}
    alphabet.update({chr(0x100 + i): b for i, b in enumerate(moved)})
    return alphabet


_BYTE_LEVEL = _byte_level_alphabet()
_BYTE_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")  # SentencePiece's byte pieces


def piece_bytes(piece: str) -> bytes | None:
    """The bytes a tokenizer piece stands for: a byte-level BPE piece (``"âĢ"`` ->
    ``b"\xe2\x80"``) or a byte-fallback piece (``"<0xE2>"``); None for other pieces."""
    found = _BYTE_FALLBACK.fullmatch(piece)
    if found:
        return bytes([int(found.group(1), 16)])
    if piece and all(ch in _BYTE_LEVEL for ch in piece):
        return bytes(_BYTE_LEVEL[ch] for ch in piece)
    return None


def show_bytes(data: bytes) -> str:
    """``data`` as text, with the bytes that are not whole UTF-8 characters written in
    hexadecimal: ``b" \xe2\x80"`` -> ``" ⟨E2 80⟩"`` (a token holding part of a character)."""
    out, rest = [], data
    while rest:
        try:
            out.append(rest.decode("utf-8"))
            break
        except UnicodeDecodeError as err:
            out.append(rest[: err.start].decode("utf-8"))
            out.append(
                "\u27e8" + " ".join(f"{b:02X}" for b in rest[err.start : err.end]) + "\u27e9"
            )
            rest = rest[err.end :]
    return "".join(out).replace("\u27e9\u27e8", " ")


def shown(tokenizer: Any, token_id: int) -> str:
    """One token as a person sees it: ``show_token(token_text(tokenizer, token_id))``, and
    for a token that holds only part of a character (whose text decodes to ``"\ufffd"``)
    its bytes, ``⟨E2 80⟩``, read from the token's piece."""
    text = token_text(tokenizer, token_id)
    if REPLACEMENT in text and hasattr(tokenizer, "convert_ids_to_tokens"):
        piece = tokenizer.convert_ids_to_tokens(int(token_id))
        data = piece_bytes(piece) if isinstance(piece, str) else None
        if data is not None:
            text = show_bytes(data)
    return show_token(text)


def token_bytes(tokenizer: Any, token_id: int) -> bytes | None:
    """The bytes one token adds to the text when they are not a whole character on their
    own (read from its piece, see :func:`piece_bytes`); None for a token whose decoded
    text is complete (or when the tokenizer cannot say)."""
    text = token_text(tokenizer, token_id)
    if REPLACEMENT not in text or not hasattr(tokenizer, "convert_ids_to_tokens"):
        return None
    piece = tokenizer.convert_ids_to_tokens(int(token_id))
    return piece_bytes(piece) if isinstance(piece, str) else None


def running_pieces(tokenizer: Any, token_ids, *, complete: bool = True) -> list[tuple[str, str]]:
    """The text each token adds to running text, as ``(text, tip)`` pairs.

    A character split over several tokens (an emoji, most CJK characters in byte-level
    BPE) is shown whole on the token that completes it; the tokens before it add nothing
    visible (``""``), and every token of the character has its bytes in ``tip`` (for a
    tooltip). ``tip`` is ``""`` for an ordinary token. Bytes that never complete a
    character are shown as :func:`show_bytes` does (``⟨F0 9F⟩``); with ``complete=False``
    (a text that may go on, e.g. a run in progress) the bytes at its end are not a failed
    character yet: they add nothing visible, their bytes in ``tip``.

    >>> running_pieces(lambda i: "ab"[i], [0, 1])
    [('a', ''), ('b', '')]
    """
    return [(text, tip) for text, tip, _ in _pieces(tokenizer, token_ids, complete)]


def piece_labels(tokenizer: Any, token_ids, *, complete: bool = True) -> list[tuple[str, str]]:
    """:func:`running_pieces` for a table or a figure: ``(label, tip)`` per token, the
    label as :func:`show_token` shows it, a token holding part of a character as
    :data:`PARTIAL` (after the spaces it adds): the character is on the token that
    completes it, the bytes only in ``tip``.

    >>> piece_labels(lambda i: " a"[i], [0, 1])
    [('␣', ''), ('a', '')]
    """
    return [_label(*p) for p in _pieces(tokenizer, token_ids, complete)]


def candidate_labels(tokenizer: Any, before, token_ids) -> list[tuple[str, str]]:
    """``(label, tip)`` as :func:`piece_labels` gives them for each of ``token_ids`` as
    the token that follows the tokens ``before`` (e.g. the candidates of a step after
    the tokens generated so far): a candidate that completes a character begun in
    ``before`` is labelled with the whole character, one that begins or goes on with a
    character with :data:`PARTIAL`.

    >>> candidate_labels(lambda i: "ab"[i], [0], [1, 0])
    [('b', ''), ('a', '')]
    """
    before = [int(t) for t in list(before)[-3:]]  # a character spans 4 tokens at most
    return [_label(*_pieces(tokenizer, [*before, int(t)], False)[-1]) for t in token_ids]


#: a token holding part of a character, in a table or a figure
PARTIAL = "\u25cc"  # ◌


def _label(text: str, tip: str, partial: bool) -> tuple[str, str]:
    if partial:
        lead = text[: len(text) - len(text.lstrip(" "))]
        return SPACE * len(lead) + PARTIAL, tip
    return show_token(text), tip


def _pieces(tokenizer: Any, token_ids, complete: bool) -> list[tuple[str, str, bool]]:
    """``(text, tip, partial)`` per token: see :func:`running_pieces`; ``partial`` for a
    token holding part of a character that a later token completes (or that may still
    be completed, with ``complete=False``)."""
    import codecs

    out: list[tuple[str, str, bool]] = []
    pending: list[int] = []  # positions in out of the pieces of an unfinished character
    buffer = b""
    decoder = codecs.getincrementaldecoder("utf-8")()

    def flush_invalid() -> None:
        nonlocal buffer
        for j in pending:  # bytes that never made a character: shown as bytes, where they were
            text, hexed, _ = out[j]
            out[j] = (text + hexed, f"bytes {hexed}: not a whole character", False)
        pending.clear()
        buffer = b""
        decoder.reset()

    for tid in list(token_ids):
        data = token_bytes(tokenizer, int(tid))
        if data is None:
            flush_invalid()
            out.append((token_text(tokenizer, int(tid)), "", False))
            continue
        hexed = show_bytes(data[len(data.rstrip(bytes(range(0x80, 0x100)))) :]) if data else ""
        try:
            text = decoder.decode(data)
        except UnicodeDecodeError:  # the unfinished character before fails; this may begin one
            flush_invalid()
            try:
                text = decoder.decode(data)
            except UnicodeDecodeError:
                decoder.reset()
                bad = show_bytes(data)
                out.append((bad, f"bytes {bad}: not a whole character", False))
                continue
        buffer += data
        if decoder.getstate()[0]:  # a character is still incomplete: shown when it is
            pending.append(len(out))
            out.append((text, hexed, True))
            continue
        done = text[-1:] if pending else ""
        for j in pending:
            out[j] = (out[j][0], f"part of {done!r}: {out[j][1]}", True)
        tip = ""
        if pending:
            tip = f"{done!r} from bytes {' '.join(f'{b:02X}' for b in buffer.lstrip(b' '))}"
            tip += f" over {len(pending) + 1} tokens"
        pending.clear()
        buffer = b""
        out.append((text, tip, False))
    if complete:
        flush_invalid()
    else:
        for j in pending:
            text, hexed, _ = out[j]
            out[j] = (text, f"part of a character not finished yet: {hexed}", True)
    return out
