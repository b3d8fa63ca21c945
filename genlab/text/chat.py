"""Chat templates: how a tokenizer turns a conversation into the text a chat model reads.

Templates are rendered with jinja2 in a sandboxed environment set up the way transformers
sets it up (``trim_blocks``, ``lstrip_blocks``, ``raise_exception``, ``strftime_now``, a
``tojson`` that does not escape HTML, loop controls and the ``{% generation %}`` block), so
a template renders to the same text in both.
:meth:`genlab.text.tokenizer.Tokenizer.apply_chat_template`
renders with :func:`compile_chat_template` and tokenizes the result.

>>> template = compile_chat_template("{{ messages[0]['content'] | upper }}")
>>> template.render(messages=[{"role": "user", "content": "hi"}])
'HI'
"""

from __future__ import annotations

import functools
import json
from datetime import datetime
from pathlib import Path

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment


def read_chat_template_files(folder: Path) -> dict[str, str]:
    """Templates saved as files: chat_template.jinja ("default") and
    additional_chat_templates/<name>.jinja."""
    templates = {}
    default = folder / "chat_template.jinja"
    if default.is_file():
        templates["default"] = default.read_text(encoding="utf-8")
    extra = folder / "additional_chat_templates"
    if extra.is_dir():
        for path in sorted(extra.glob("*.jinja")):
            templates[path.stem] = path.read_text(encoding="utf-8")
    return templates


def normalize_chat_template(template) -> str | dict[str, str] | None:
    """A template string, or a dict name -> template (a single "default" becomes a string).

    tokenizer_config.json may also hold a list of ``{"name", "template"}`` entries.
    """
    if isinstance(template, list):
        template = {entry["name"]: entry["template"] for entry in template}
    if isinstance(template, dict) and list(template) == ["default"]:
        return template["default"]
    return template


def choose_chat_template(own, chat_template: str | None = None, tools: list | None = None) -> str:
    """The template to render: ``chat_template`` (a template, or the name of one of the
    tokenizer's templates ``own``: a string, a dict name -> template, or None), else the
    tokenizer's own (``tool_use`` when tools are given and there is one, else ``default``).
    """
    if isinstance(own, dict):
        if chat_template is not None and chat_template in own:
            return own[chat_template]
        if chat_template is None:
            if tools is not None and "tool_use" in own:
                return own["tool_use"]
            if "default" in own:
                return own["default"]
            raise ValueError(
                f"this tokenizer has several chat templates and none is named 'default'; "
                f"pass chat_template= one of {sorted(own)} or a template string."
            )
        return chat_template
    if chat_template is not None:
        return chat_template
    if own is None:
        raise ValueError(
            "this tokenizer has no chat template (tokenizer.chat_template is None): pass "
            "chat_template='...' or set tokenizer.chat_template to a jinja template."
        )
    return own


def as_conversation_batch(conversation) -> tuple[list[list[dict]], bool]:
    """(list of conversations, whether a batch was given); checks the message shape."""
    if not isinstance(conversation, (list, tuple)) or not conversation:
        raise ValueError(
            "conversation must be a non-empty list of messages like "
            f"[{{'role': 'user', 'content': 'Hi'}}]; got {conversation!r:.80}"
        )
    batched = isinstance(conversation[0], (list, tuple))
    conversations = list(conversation) if batched else [conversation]
    for chat in conversations:
        for message in chat:
            if not isinstance(message, dict) or "role" not in message:
                raise ValueError(
                    "each message must be a dict with a 'role' (and usually 'content'); "
                    f"got {message!r:.80}"
                )
    return [list(chat) for chat in conversations], batched


def check_tools(tools, documents) -> None:
    if tools is not None and not all(isinstance(t, dict) for t in tools):
        raise ValueError(
            "tools must be a list of JSON-schema dicts ({'type': 'function', 'function': {...}}); "
            "genlab does not derive schemas from Python functions."
        )
    if documents is not None and not all(isinstance(d, dict) for d in documents):
        raise ValueError("documents must be a list of dicts with 'title' and 'text' keys")


def cut_after_final_message(text: str, messages: list[dict]) -> str:
    """Drop what the template renders after the last message's content (end-of-turn tokens),
    so the model continues that message."""
    final = messages[-1].get("content")
    if isinstance(final, (list, tuple)):  # content blocks: continue the last text block
        texts = [block["text"] for block in final if isinstance(block, dict) and "text" in block]
        if not texts:
            raise ValueError(
                "continue_final_message=True but the final message has no text block to continue"
            )
        final = texts[-1]
    if not isinstance(final, str) or final.strip() not in text:
        raise ValueError(
            "continue_final_message=True but the final message's content does not appear in the "
            "rendered chat (the template changes it); check the template and the message."
        )
    start = text.rindex(final.strip())
    kept = final.lstrip()
    if text[start : start + len(kept)] == final:
        return text[: start + len(kept)]
    # the template trimmed trailing spaces of the message: end at its stripped content
    return text[: start + len(final.strip())]


class GenerationBlock(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}``: marks the assistant's part of a template;
    rendered as its body (genlab does not compute assistant-token masks)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        call = self.call_method("_render_body")
        return jinja2.nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    def _render_body(self, caller):
        return caller()


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # jinja's own tojson escapes <, >, & for HTML; chat templates want the plain JSON
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(format):
    return datetime.now().strftime(format)


@functools.lru_cache(maxsize=16)
def compile_chat_template(template: str) -> jinja2.Template:
    """Compile a chat template in a sandbox configured like transformers' renderer."""
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[GenerationBlock, jinja2.ext.loopcontrols],
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env.from_string(template)


__all__ = [
    "GenerationBlock",
    "as_conversation_batch",
    "check_tools",
    "choose_chat_template",
    "compile_chat_template",
    "cut_after_final_message",
    "normalize_chat_template",
    "read_chat_template_files",
]
