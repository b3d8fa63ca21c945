"""Streamers: show text while it is being generated.

``generate(..., streamer=s)`` calls ``s.put(prompt_ids)`` once with the prompt, then
``s.put(token_ids)`` after every step, then ``s.end()``. The streamers here behave like the
reference's (transformers 4.56.2) and also work when handed to transformers' own
``generate``:

* :class:`TextStreamer` prints text as soon as it is final: up to the last space, a whole
  line at a newline, or at once after a CJK ideograph. A multi-byte character split across
  tokens therefore never prints half-decoded.
* :class:`TextIteratorStreamer` puts the same chunks in a queue and is iterated from
  another thread.
* :class:`NotebookStreamer` shows the growing text in one notebook output that updates in
  place (throttled), and prints like :class:`TextStreamer` outside a notebook.

All of them stream one sequence (batch size 1).

Example, with a toy tokenizer whose token ids are character codes::

    >>> class Chars:
    ...     def decode(self, ids, **kwargs):
    ...         return "".join(map(chr, ids))
    >>> streamer = TextIteratorStreamer(Chars(), skip_prompt=True)
    >>> for piece in ["Say:", " he", "llo", " wor", "ld"]:  # prompt, then one put per step
    ...     streamer.put([ord(c) for c in piece])
    >>> streamer.end()
    >>> list(streamer)
    [' ', '', 'hello ', '', 'world']

With a model: ``Thread(target=generate, args=(model, ids), kwargs=dict(streamer=streamer))``
then ``for chunk in streamer: ...`` in the notebook or web server.
"""

from __future__ import annotations

import html
import sys
import time
from queue import Queue
from typing import Any

__all__ = [
    "BaseStreamer",
    "TextStreamer",
    "TextIteratorStreamer",
    "NotebookStreamer",
    "BeamStreamer",
    "is_cjk_char",
]

# Unicode blocks of CJK unified and compatibility ideographs (inclusive code point ranges).
# Hangul, hiragana and katakana are written with spaces and are not in this list.
_CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)

# The clock the notebook streamer throttles with (a module attribute so tests can set it).
_clock = time.monotonic


def is_cjk_char(char: str) -> bool:
    """True when ``char`` (one character) is a CJK ideograph, after which text can flush.

    >>> is_cjk_char("中"), is_cjk_char("a"), is_cjk_char("한")
    (True, False, False)
    """
    code = ord(char)
    return any(low <= code <= high for low, high in _CJK_RANGES)


def _token_list(value: Any, streamer: str) -> list[int]:
    """The token ids of one ``put``: a (n,) or (1, n) tensor / array / list -> [id, ...]."""
    data = value.tolist() if hasattr(value, "tolist") else value
    if isinstance(data, int):
        return [data]
    if data and isinstance(data[0], list):
        if len(data) > 1:
            raise ValueError(
                f"{streamer}: streams one sequence at a time (batch size 1), but put() received "
                f"{len(data)} rows; generate one prompt at a time with a streamer"
            )
        data = data[0]
    if data and not all(isinstance(t, int) for t in data):
        raise ValueError(
            f"{streamer}: put() expects token ids of shape (n,) or (1, n); got {value!r}"
        )
    return list(data)


class BaseStreamer:
    """What generate() calls: ``put(token_ids)`` for the prompt and each step, ``end()``."""

    def put(self, value: Any) -> None:
        """Receive token ids: the prompt first, then the tokens of each step."""
        raise NotImplementedError(f"{type(self).__name__} must define put(value)")

    def end(self) -> None:
        """The generation has finished."""
        raise NotImplementedError(f"{type(self).__name__} must define end()")


class TextStreamer(BaseStreamer):
    """Print generated text to stdout in word-sized chunks, as soon as it is final.

    tokenizer: anything with ``decode(ids: list[int], **decode_kwargs) -> str``
    skip_prompt: drop the first ``put`` (the prompt) and show only new text
    decode_kwargs: passed to ``tokenizer.decode`` (e.g. ``skip_special_tokens=True``)

    Subclasses override :meth:`on_finalized_text` to send chunks elsewhere.

    Example: ``generate(model, ids, streamer=TextStreamer(tokenizer, skip_prompt=True))``
    prints the answer as it is generated.
    """

    def __init__(self, tokenizer: Any, skip_prompt: bool = False, **decode_kwargs: Any):
        self.tokenizer = tokenizer
        self.skip_prompt = skip_prompt
        self.decode_kwargs = decode_kwargs
        self.token_cache: list[int] = []  # tokens since the last newline
        self.print_len = 0  # characters of decode(token_cache) already emitted
        self.next_tokens_are_prompt = True

    def put(self, value: Any) -> None:
        """Decode the tokens so far and emit the part of the text that can no longer change.

        value: the new token ids, (batch, n) or (n,), as generation sends them.
        """
        tokens = _token_list(value, type(self).__name__)
        if self.skip_prompt and self.next_tokens_are_prompt:
            self.next_tokens_are_prompt = False
            return
        self.token_cache.extend(tokens)
        text = self.tokenizer.decode(self.token_cache, **self.decode_kwargs)
        self.on_finalized_text(self._take_final_text(text))

    def _take_final_text(self, text: str) -> str:
        """The newly final part of ``text`` (the decoded cache); advances the bookkeeping."""
        if text.endswith("\n"):  # a finished line: emit it and start a fresh cache
            chunk = text[self.print_len :]
            self.token_cache = []
            self.print_len = 0
            return chunk
        if text and is_cjk_char(text[-1]):  # ideographs stand alone: emit everything
            chunk = text[self.print_len :]
        else:  # the last word may still grow (or be half a character): stop at its space
            chunk = text[self.print_len : text.rfind(" ") + 1]
        self.print_len += len(chunk)
        return chunk

    def end(self) -> None:
        """Emit whatever is left, end the line and get ready for the next prompt."""
        chunk = ""
        if self.token_cache:
            text = self.tokenizer.decode(self.token_cache, **self.decode_kwargs)
            chunk = text[self.print_len :]
        self.token_cache = []
        self.print_len = 0
        self.next_tokens_are_prompt = True
        self.on_finalized_text(chunk, stream_end=True)

    def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
        """Print ``text`` (no newline), or ``text`` and a newline at the end of the stream.

        text: the text that can no longer change; stream_end: True on the last call.
        """
        print(text, flush=True, end="\n" if stream_end else "")


class TextIteratorStreamer(TextStreamer):
    """Put the chunks a :class:`TextStreamer` would print into a queue; iterate to read them.

    timeout: seconds each queue operation may wait; ``queue.Empty`` is raised when reading
        waits longer (use it so a failed generation thread does not block the reader)

    Example (see the module docstring for a runnable one)::

        streamer = TextIteratorStreamer(tokenizer, skip_prompt=True, timeout=30)
        Thread(target=generate, args=(model, ids), kwargs=dict(streamer=streamer)).start()
        text = "".join(streamer)
    """

    def __init__(
        self,
        tokenizer: Any,
        skip_prompt: bool = False,
        timeout: float | None = None,
        **decode_kwargs: Any,
    ):
        super().__init__(tokenizer, skip_prompt, **decode_kwargs)
        self.text_queue: Queue = Queue()
        self.stop_signal = None  # queued after the last chunk
        self.timeout = timeout

    def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
        """Queue ``text``; at the end of the stream also queue the stop signal.

        text: the text that can no longer change; stream_end: True on the last call.
        """
        self.text_queue.put(text, timeout=self.timeout)
        if stream_end:
            self.text_queue.put(self.stop_signal, timeout=self.timeout)

    def __iter__(self) -> TextIteratorStreamer:
        return self

    def __next__(self) -> str:
        chunk = self.text_queue.get(timeout=self.timeout)
        if chunk == self.stop_signal:
            raise StopIteration
        return chunk


def _notebook_kernel_running() -> bool:
    """True inside a Jupyter kernel; never imports IPython when it is not loaded already."""
    if "IPython" not in sys.modules:  # a notebook kernel always has it imported
        return False
    from IPython import get_ipython

    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


class NotebookStreamer(TextStreamer):
    """Show the text being generated in one notebook output that updates in place.

    tokenizer, skip_prompt, decode_kwargs: as for :class:`TextStreamer` (the prompt is
        skipped by default)
    every: refresh after at least this many new tokens (int >= 1)
    min_interval: and at least this many seconds after the previous refresh (>= 0)

    A refresh needs both conditions, so the output changes at most once per ``min_interval``
    seconds and once per ``every`` tokens; ``end()`` always shows the final text. Outside
    a Jupyter kernel it prints like :class:`TextStreamer`. The text is in ``self.text``.

    Example: ``generate(model, ids, streamer=NotebookStreamer(tokenizer, every=4))``.
    """

    def __init__(
        self,
        tokenizer: Any,
        skip_prompt: bool = True,
        every: int = 1,
        min_interval: float = 0.1,
        **decode_kwargs: Any,
    ):
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"every: expected an integer >= 1 (tokens per refresh); got {every!r}")
        if not isinstance(min_interval, (int, float)) or not min_interval >= 0:
            raise ValueError(
                f"min_interval: expected a number of seconds >= 0; got {min_interval!r}"
            )
        super().__init__(tokenizer, skip_prompt, **decode_kwargs)
        self.every = every
        self.min_interval = float(min_interval)
        self.text = ""  # the final text of the current stream so far
        self.refreshes = 0  # how many times the output was drawn
        self._in_notebook = _notebook_kernel_running()
        self._handle: Any = None  # IPython DisplayHandle of the current stream
        self._tokens_since_refresh = 0
        self._last_refresh = float("-inf")
        self._ended = False

    def put(self, value: Any) -> None:
        """Take the next tokens; refresh the output when ``every`` and ``min_interval`` allow.

        value: the new token ids, (batch, n) or (n,), as generation sends them.
        """
        if self._ended:  # a new generation with the same streamer: start a new output
            self._start_new_stream()
        prompt_dropped = self.next_tokens_are_prompt and self.skip_prompt
        super().put(value)
        if prompt_dropped or not self._in_notebook:
            return
        self._tokens_since_refresh += len(_token_list(value, type(self).__name__))
        waited = _clock() - self._last_refresh
        if self._tokens_since_refresh >= self.every and waited >= self.min_interval:
            self._refresh(self.text + self._pending_text())

    def end(self) -> None:
        """Show the complete text (or print its last chunk outside a notebook)."""
        super().end()
        self._ended = True

    def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
        """Collect the final text; draw it at the end of the stream, or print it if no kernel.

        text: the text that can no longer change; stream_end: True on the last call.
        """
        self.text += text
        if not self._in_notebook:
            super().on_finalized_text(text, stream_end)
        elif stream_end:
            self._refresh(self.text)

    def _pending_text(self) -> str:
        """Text decoded after the last final chunk, without a half-decoded last character."""
        if not self.token_cache:
            return ""
        text = self.tokenizer.decode(self.token_cache, **self.decode_kwargs)
        return text[self.print_len :].rstrip("\ufffd")

    def _refresh(self, text: str) -> None:
        """Draw ``text`` in this stream's output (created on the first refresh)."""
        from IPython.display import HTML, display

        body = HTML(
            '<pre class="genlab-stream" style="white-space: pre-wrap; margin: 0">'
            f"{html.escape(text)}</pre>"
        )
        if self._handle is None:
            self._handle = display(body, display_id=True)
        else:
            self._handle.update(body)
        self.refreshes += 1
        self._tokens_since_refresh = 0
        self._last_refresh = _clock()

    def _start_new_stream(self) -> None:
        self.text = ""
        self._handle = None
        self._tokens_since_refresh = 0
        self._last_refresh = float("-inf")
        self._ended = False


class BeamStreamer:
    """Show the best beams of a beam search while it runs (a ``step_end`` hook consumer).

    tokenizer: decodes token ids (None shows the ids); batch: which input to show;
    top: how many beams / finished hypotheses to list (default: all);
    every: refresh after at least this many steps; min_interval: and this many seconds.

    Each refresh lists the running beams and the finished hypotheses of the input, best
    (length-normalised) score first, as lines ``score  [done]  text``. In a notebook the
    list updates in place; outside one the final list is printed at the end. Every shown
    list is also kept in ``self.snapshots`` (step, [(score, finished, text), ...]).

    Use it as a streamer (genlab only: transformers refuses streamers with beams)::

        lm.generate("Once", num_beams=4, max_new_tokens=20, streamer=BeamStreamer(lm.tokenizer))

    or attach it to a run you step by hand: ``BeamStreamer(tok).attach(run)``.

    skip_special_tokens: leave special tokens (EOS, padding) out of the shown text.
    """

    is_beam_streamer = True

    def __init__(
        self,
        tokenizer: Any = None,
        *,
        batch: int = 0,
        top: int | None = None,
        every: int = 1,
        min_interval: float = 0.1,
        skip_special_tokens: bool = True,
    ):
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"every: expected an integer >= 1 (steps per refresh); got {every!r}")
        if not isinstance(min_interval, (int, float)) or not min_interval >= 0:
            raise ValueError(f"min_interval: expected seconds >= 0; got {min_interval!r}")
        if top is not None and (not isinstance(top, int) or top < 1):
            raise ValueError(f"top: expected None or an integer >= 1; got {top!r}")
        if not isinstance(batch, int) or batch < 0:
            raise ValueError(f"batch: expected an input index >= 0; got {batch!r}")
        self.tokenizer = tokenizer
        self.batch = batch
        self.top = top
        self.every = every
        self.min_interval = float(min_interval)
        self.skip_special_tokens = skip_special_tokens
        self.snapshots: list[tuple[int, list[tuple[float, bool, str]]]] = []
        self.refreshes = 0
        self._run: Any = None
        self._remove: Any = None
        self._handle: Any = None
        self._steps_since = 0
        self._last_refresh = float("-inf")
        self._in_notebook = _notebook_kernel_running()

    def attach(self, run: Any) -> BeamStreamer:
        """Listen to ``run``'s ``step_end`` hook (replacing an earlier attachment)."""
        self.detach()
        if self.batch >= run.views.batch_size:
            raise ValueError(f"batch={self.batch} but the run has {run.views.batch_size} input(s)")
        self._run = run
        self._remove = run.add_hook("step_end", self._on_step)
        self._handle = None
        return self

    def detach(self) -> None:
        """Stop listening."""
        if self._remove is not None:
            self._remove()
        self._remove = None

    def beams(self) -> list[tuple[float, bool, str]]:
        """The current list: (score, finished, text), best first."""
        run = self._run
        if run is None:
            return []
        listing = getattr(run.views.strategy, "beams", None)
        if listing is None:  # not a beam search: the row itself, unscored
            p = run.prompt_length
            entries = [(run.sequences[self.batch, p:].tolist(), float("nan"), run.finished)]
        else:
            entries = listing(run, self.batch)
        rows = [(score, done, self._decode(ids)) for ids, score, done in entries]
        return rows[: self.top] if self.top else rows

    def _decode(self, ids: list[int]) -> str:
        if self.tokenizer is None:
            return " ".join(str(i) for i in ids)
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)

    def _on_step(self, record: Any, *, step: int) -> None:
        self._steps_since += 1
        finished = bool(getattr(record, "finished", False))
        waited = _clock() - self._last_refresh
        if finished or (self._steps_since >= self.every and waited >= self.min_interval):
            self._refresh(step, finished)

    def render(self, rows: list[tuple[float, bool, str]] | None = None) -> str:
        """The list as plain text, one line per beam.

        rows: ``(score, finished, text)`` triples to show (default: the latest beams).
        """
        rows = self.beams() if rows is None else rows
        return "\n".join(
            f"{score:9.3f}  {'done' if done else '    '}  {text}" for score, done, text in rows
        )

    def _refresh(self, step: int, finished: bool) -> None:
        rows = self.beams()
        self.snapshots.append((step, rows))
        self.refreshes += 1
        self._steps_since = 0
        self._last_refresh = _clock()
        text = self.render(rows)
        if self._in_notebook:
            from IPython.display import HTML, display

            body = HTML(
                f'<pre class="genlab-beams" style="margin: 0">step {step}\n'
                f"{html.escape(text)}</pre>"
            )
            if self._handle is None:
                self._handle = display(body, display_id=True)
            else:
                self._handle.update(body)
        elif finished:
            print(text, flush=True)
