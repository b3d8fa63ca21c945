"""Tokenizer: a ``tokenizers.Tokenizer`` with the part of transformers' tokenizer API genlab uses.

The names and meanings follow transformers' fast tokenizers (``encode``, ``decode``,
``batch_decode``, ``__call__``, ``apply_chat_template``, ``bos_token_id`` ...) so that a
transformers tokenizer can stand in for a genlab one and the other way round. Differences
from transformers' defaults: ``padding_side`` is ``"left"`` (decoder-only generation), and
``__call__`` pads and returns PyTorch tensors unless told otherwise.

Chat templates are rendered with jinja2 in a sandboxed environment set up the way
transformers sets it up (``trim_blocks``, ``lstrip_blocks``, ``raise_exception``,
``strftime_now``, a ``tojson`` that does not escape HTML, loop controls and the
``{% generation %}`` block), so a template renders to the same text in both
(:mod:`genlab.text.chat`).

Example (the first line needs a model folder and is not run as a test; the others run on
the demo model's tokenizer)::

    >>> tok = Tokenizer.from_folder("path/to/model")  # tokenizer.json  # doctest: +SKIP
    >>> batch = tok(["Hi", "Hello there"])                    # left-padded tensors
    >>> batch["input_ids"].shape                              # (2, longest)
    torch.Size([2, 2])
    >>> tok.decode(batch["input_ids"][1], skip_special_tokens=True)
    'Hello there'
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

# a fork after the Rust tokenizer used its thread pool (a process-pool sweep) would warn
# and turn parallelism off; genlab encodes short prompts, so it asks for none (the user's
# own setting stays)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from tokenizers import AddedToken, processors  # noqa: E402
from tokenizers import Tokenizer as BackendTokenizer  # noqa: E402

from .chat import (
    as_conversation_batch,
    check_tools,
    choose_chat_template,
    compile_chat_template,
    cut_after_final_message,
    normalize_chat_template,
    read_chat_template_files,
)

# Special-token attributes in the order transformers lists them (all_special_tokens).
SPECIAL_TOKEN_ATTRIBUTES = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)
# tokenizer_class values whose transformers class rebuilds the post-processor from
# add_bos_token / add_eos_token, with the class's default for add_bos_token.
_BOS_EOS_TEMPLATE_CLASSES = {
    "LlamaTokenizer": True,
    "CodeLlamaTokenizer": True,
    "GemmaTokenizer": True,
    "CohereTokenizer": True,
    "GPTNeoXTokenizer": False,
}
_PADDING_CHOICES = (True, False, "longest", "max_length", "do_not_pad")


class _SpecialTokenId:
    """``<name>_id`` attribute: the id of the token stored in ``<name>`` (None if unset)."""

    def __set_name__(self, owner, name):
        self.token_attribute = name.removesuffix("_id")

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        token = getattr(obj, self.token_attribute)
        return None if token is None else obj.convert_tokens_to_ids(token)

    def __set__(self, obj, value):
        token = None if value is None else obj.convert_ids_to_tokens(int(value))
        setattr(obj, self.token_attribute, token)


class BatchEncoding(dict):
    """``{"input_ids", "attention_mask"}`` with attribute access and ``.to(device)``."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def to(self, device) -> BatchEncoding:
        """Move every tensor to ``device``; lists are left as they are."""
        return BatchEncoding(
            {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in self.items()}
        )


class Tokenizer:
    """A ``tokenizers.Tokenizer`` plus special tokens, padding and a chat template.

    Build one with :meth:`from_folder` / :meth:`from_file`, or wrap a backend directly::

        >>> backend = lm.tokenizer.backend_tokenizer   # a tokenizers.Tokenizer: the demo's
        >>> tok = Tokenizer(backend, bos_token="<|im_start|>", eos_token="<|im_end|>",
        ...                 pad_token="<|im_end|>")
        >>> tok.encode("hello")                   # list[int]
        [28120]
        >>> tok("hello")["input_ids"].shape        # (1, n)
        torch.Size([1, 1])

    Special tokens named here that the backend does not yet hold as added tokens are added
    to it as special tokens, as transformers does when it loads a tokenizer.
    """

    bos_token_id = _SpecialTokenId()
    eos_token_id = _SpecialTokenId()
    unk_token_id = _SpecialTokenId()
    sep_token_id = _SpecialTokenId()
    pad_token_id = _SpecialTokenId()
    cls_token_id = _SpecialTokenId()
    mask_token_id = _SpecialTokenId()

    def __init__(
        self,
        backend: BackendTokenizer,
        *,
        bos_token: str | None = None,
        eos_token: str | None = None,
        unk_token: str | None = None,
        sep_token: str | None = None,
        pad_token: str | None = None,
        cls_token: str | None = None,
        mask_token: str | None = None,
        additional_special_tokens: list[str] | tuple[str, ...] = (),
        chat_template: str | dict[str, str] | None = None,
        padding_side: str = "left",
        clean_up_tokenization_spaces: bool = False,
        model_max_length: int | None = None,
        name_or_path: str = "",
    ):
        if not isinstance(backend, BackendTokenizer):
            raise ValueError(
                f"backend must be a tokenizers.Tokenizer; got {type(backend).__name__}. "
                "Use Tokenizer.from_file('tokenizer.json') to load one from a file."
            )
        self._backend = backend
        self.bos_token = bos_token
        self.eos_token = eos_token
        self.unk_token = unk_token
        self.sep_token = sep_token
        self.pad_token = pad_token
        self.cls_token = cls_token
        self.mask_token = mask_token
        self.additional_special_tokens = list(additional_special_tokens)
        self.chat_template = chat_template
        self.padding_side = padding_side
        self.clean_up_tokenization_spaces = bool(clean_up_tokenization_spaces)
        self.model_max_length = model_max_length
        self.name_or_path = name_or_path
        self._register_special_tokens()

    # ----------------------------------------------------------------- construction

    @classmethod
    def from_file(
        cls,
        tokenizer_file: str | os.PathLike,
        tokenizer_config: str | os.PathLike | dict | None = None,
        **overrides: Any,
    ) -> Tokenizer:
        """Load ``tokenizer.json``, with special tokens and settings from ``tokenizer_config``
        (a path to tokenizer_config.json or its parsed dict).

        ``overrides`` replace config entries (e.g. ``chat_template=...``, ``pad_token=...``).
        """
        path = Path(tokenizer_file)
        if not path.is_file():
            raise ValueError(
                f"tokenizer_file={str(path)!r} does not exist; pass the path of a tokenizer.json "
                "written by the tokenizers library or by transformers' save_pretrained."
            )
        try:
            backend = BackendTokenizer.from_file(str(path))
        except Exception as err:  # the Rust side raises a plain Exception
            raise ValueError(
                f"tokenizer_file={str(path)!r} could not be read as a tokenizers file ({err}); "
                "it may be truncated or from an incompatible tokenizers version: "
                "download it again."
            ) from err
        if tokenizer_config is None or isinstance(tokenizer_config, dict):
            config = dict(tokenizer_config or {})
        else:
            config = read_json(Path(tokenizer_config), "tokenizer_config")
        config.update(overrides)
        config.setdefault("name_or_path", str(path.parent))
        return cls.from_backend_and_config(backend, config)

    @classmethod
    def from_folder(cls, folder: str | os.PathLike) -> Tokenizer:
        """Load the tokenizer saved in ``folder`` the way transformers saves one.

        Reads tokenizer.json (required), tokenizer_config.json and special_tokens_map.json
        (optional; the latter's entries win, as in transformers), and the chat template from
        chat_template.jinja / additional_chat_templates/*.jinja, or else from
        tokenizer_config.json's ``chat_template``.
        """
        folder = Path(folder)
        tokenizer_file = folder / "tokenizer.json"
        if not tokenizer_file.is_file():
            raise ValueError(
                f"{str(folder)!r} has no tokenizer.json. genlab reads tokenizers in the "
                "`tokenizers` format: save one with transformers "
                "(AutoTokenizer.from_pretrained(...).save_pretrained(folder)) or pass a tokenizer "
                "object instead."
            )
        config = read_json_if_present(folder / "tokenizer_config.json", "tokenizer_config")
        config.update(
            read_json_if_present(folder / "special_tokens_map.json", "special_tokens_map")
        )
        templates = read_chat_template_files(folder)
        if templates:
            config["chat_template"] = templates
        config.setdefault("name_or_path", str(folder))
        try:
            check_tokenizer_config(config)
        except ValueError as err:
            raise ValueError(
                f"{str(folder)!r} (tokenizer_config.json / special_tokens_map.json): {err}. Fix "
                "that entry, or save the tokenizer again with transformers' save_pretrained."
            ) from None
        return cls.from_file(tokenizer_file, config)

    @classmethod
    def from_backend_and_config(cls, backend: BackendTokenizer, config: dict) -> Tokenizer:
        """A Tokenizer from a backend and a tokenizer_config-style dict, read as transformers
        reads it."""
        check_tokenizer_config(config)
        special = {attr: token_content(config.get(attr)) for attr in SPECIAL_TOKEN_ATTRIBUTES}
        additional = [token_content(t) for t in config.get("additional_special_tokens") or []]
        apply_add_prefix_space(backend, config.get("add_prefix_space", False))
        tokenizer = cls(
            backend,
            **special,
            additional_special_tokens=additional,
            chat_template=normalize_chat_template(config.get("chat_template")),
            # left whatever the saved config says: genlab pads prompts for decoder-only generation
            padding_side="left",
            clean_up_tokenization_spaces=config.get("clean_up_tokenization_spaces", False),
            model_max_length=config.get("model_max_length"),
            name_or_path=str(config.get("name_or_path", "")),
        )
        tokenizer_class = str(config.get("tokenizer_class") or "").removesuffix("Fast")
        if tokenizer_class in _BOS_EOS_TEMPLATE_CLASSES:
            tokenizer.set_bos_eos_template(
                config.get("add_bos_token", _BOS_EOS_TEMPLATE_CLASSES[tokenizer_class]),
                config.get("add_eos_token", False),
            )
        return tokenizer

    def _register_special_tokens(self) -> None:
        """Add the special tokens the backend does not hold as added tokens yet (as special)."""
        known = {t.content for t in self._backend.get_added_tokens_decoder().values()}
        missing = [t for t in self.all_special_tokens if t not in known]
        if missing:
            self._backend.add_tokens(
                [AddedToken(t, special=True, normalized=False) for t in missing]
            )

    def set_bos_eos_template(self, add_bos_token: bool, add_eos_token: bool) -> None:
        """Make encoding add BOS before and/or EOS after each text (a template post-processor).

        This is what transformers' Llama-style tokenizer classes do from their
        ``add_bos_token`` / ``add_eos_token`` settings.
        """
        if add_bos_token and self.bos_token is None:
            raise ValueError("add_bos_token=True needs a bos_token; set tokenizer.bos_token first")
        if add_eos_token and self.eos_token is None:
            raise ValueError("add_eos_token=True needs an eos_token; set tokenizer.eos_token first")
        bos = f"{self.bos_token}:0 " if add_bos_token else ""
        eos = f" {self.eos_token}:0" if add_eos_token else ""
        bos_b = f" {self.bos_token}:1" if add_bos_token else ""
        eos_b = f" {self.eos_token}:1" if add_eos_token else ""
        specials = []
        if add_bos_token:
            specials.append((self.bos_token, self.bos_token_id))
        if add_eos_token:
            specials.append((self.eos_token, self.eos_token_id))
        single = f"{bos}$A:0{eos}"
        self._backend.post_processor = processors.TemplateProcessing(
            single=single, pair=f"{single}{bos_b} $B:1{eos_b}", special_tokens=specials
        )

    # ------------------------------------------------------------------ vocabulary

    @property
    def backend_tokenizer(self) -> BackendTokenizer:
        """The wrapped ``tokenizers.Tokenizer``."""
        return self._backend

    @property
    def vocab_size(self) -> int:
        """Size of the base vocabulary (without added tokens), as in transformers."""
        return self._backend.get_vocab_size(with_added_tokens=False)

    def __len__(self) -> int:
        """Size of the whole vocabulary, added tokens included."""
        return self._backend.get_vocab_size(with_added_tokens=True)

    def get_vocab(self) -> dict[str, int]:
        """token string -> id, added tokens included."""
        return self._backend.get_vocab(with_added_tokens=True)

    @property
    def all_special_tokens(self) -> list[str]:
        """Every special token set on this tokenizer, once each (bos, eos, unk, ..., additional)."""
        tokens: list[str] = []
        for attr in SPECIAL_TOKEN_ATTRIBUTES:
            token = getattr(self, attr)
            if token is not None and token not in tokens:
                tokens.append(token)
        tokens += [t for t in self.additional_special_tokens if t not in tokens]
        return tokens

    @property
    def all_special_ids(self) -> list[int]:
        """Ids of :attr:`all_special_tokens`, in the same order."""
        return self.convert_tokens_to_ids(self.all_special_tokens)

    @property
    def special_tokens_map(self) -> dict[str, str | list[str]]:
        """attribute name -> token, for the special tokens that are set (templates see these)."""
        mapping: dict[str, str | list[str]] = {
            attr: getattr(self, attr)
            for attr in SPECIAL_TOKEN_ATTRIBUTES
            if getattr(self, attr) is not None
        }
        if self.additional_special_tokens:
            mapping["additional_special_tokens"] = list(self.additional_special_tokens)
        return mapping

    def convert_tokens_to_ids(self, tokens: str | list[str]) -> int | None | list[int | None]:
        """Token string(s) -> id(s); a token not in the vocabulary gives ``unk_token_id``."""
        if isinstance(tokens, str):
            return self._token_to_id(tokens)
        return [self._token_to_id(t) for t in tokens]

    def _token_to_id(self, token: str) -> int | None:
        index = self._backend.token_to_id(token)
        return self.unk_token_id if index is None else index

    def convert_ids_to_tokens(
        self, ids: int | list[int] | torch.Tensor, skip_special_tokens: bool = False
    ) -> str | None | list[str | None]:
        """Id(s) -> token string(s) (None for an id outside the vocabulary).

        A single int gives a string; a list or 1-D tensor gives a list, without the special
        tokens when ``skip_special_tokens``.
        """
        ids = to_python_ids(ids)
        if isinstance(ids, int):
            return self._backend.id_to_token(ids)
        skip = set(self.all_special_ids) if skip_special_tokens else set()
        return [self._backend.id_to_token(i) for i in ids if i not in skip]

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        """Text of a list of token strings, through the backend's decoder (as transformers)."""
        decoder = self._backend.decoder
        return decoder.decode(list(tokens)) if decoder is not None else " ".join(tokens)

    # ------------------------------------------------------------- encode / decode

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of ``text`` (with BOS/EOS when the tokenizer adds them and
        ``add_special_tokens``)."""
        check_text(text, "text")
        return self._backend.encode(text, add_special_tokens=add_special_tokens).ids

    def tokenize(self, text: str, add_special_tokens: bool = False) -> list[str]:
        """Token strings of ``text`` (without BOS/EOS by default, as in transformers)."""
        check_text(text, "text")
        return self._backend.encode(text, add_special_tokens=add_special_tokens).tokens

    def decode(
        self,
        token_ids: int | list[int] | torch.Tensor | np.ndarray,
        skip_special_tokens: bool = False,
        clean_up_tokenization_spaces: bool | None = None,
    ) -> str:
        """Text of a sequence of ids (int, list, or 1-D tensor / array)."""
        ids = to_python_ids(token_ids)
        if isinstance(ids, int):
            ids = [ids]
        if ids and isinstance(ids[0], list):
            raise ValueError(
                "decode takes one sequence of ids; got a batch (nested list or 2-D tensor): "
                "use batch_decode for several sequences."
            )
        text = self._backend.decode(ids, skip_special_tokens=skip_special_tokens)
        if clean_up_tokenization_spaces is None:
            clean_up_tokenization_spaces = self.clean_up_tokenization_spaces
        return clean_up_tokenization(text) if clean_up_tokenization_spaces else text

    def batch_decode(
        self,
        sequences: list[list[int]] | torch.Tensor | np.ndarray,
        skip_special_tokens: bool = False,
        clean_up_tokenization_spaces: bool | None = None,
    ) -> list[str]:
        """:meth:`decode` for each row of ``sequences`` (list of lists, or a 2-D tensor)."""
        rows = to_python_ids(sequences)
        if isinstance(rows, int) or (rows and not isinstance(rows[0], list)):
            raise ValueError(
                "batch_decode takes a batch of sequences (list of lists or a 2-D tensor); "
                "use decode for a single sequence."
            )
        return [self.decode(r, skip_special_tokens, clean_up_tokenization_spaces) for r in rows]

    def __call__(
        self,
        text: str | list[str],
        padding: bool | str = True,
        return_tensors: str | None = "pt",
        add_special_tokens: bool = True,
        truncation: bool = False,
        max_length: int | None = None,
        padding_side: str | None = None,
    ) -> BatchEncoding:
        """Encode one text or a list of texts into ``{"input_ids", "attention_mask"}``.

        padding: True / "longest" pads to the longest row, "max_length" to ``max_length``,
        False / "do_not_pad" not at all; rows are padded on ``padding_side`` (default
        ``self.padding_side``, "left") with ``pad_token_id`` and mask 0.
        return_tensors: "pt" -> LongTensors (rows, length), "np" -> int64 arrays, None ->
        lists (a single text gives a flat list).
        truncation: keep at most ``max_length`` tokens (special tokens included).

        Example::

            >>> tok = lm.tokenizer
            >>> tok(["a b c", "d"])["attention_mask"]
            tensor([[1, 1, 1],
                    [0, 0, 1]])
        """
        texts, single = as_text_batch(text)
        check_call_options(padding, return_tensors, truncation, max_length, padding_side)
        ids = self._encode_rows(texts, add_special_tokens, truncation, max_length)
        masks = [[1] * len(row) for row in ids]
        target = padding_target(padding, ids, max_length)
        if target is not None:
            ids, masks = self._pad(ids, masks, target, padding_side or self.padding_side)
        return make_batch(ids, masks, return_tensors, single)

    def _encode_rows(
        self, texts: list[str], add_special_tokens: bool, truncation: bool, max_length: int | None
    ) -> list[list[int]]:
        if truncation and max_length is not None:
            # let the backend truncate, so special tokens are kept the way transformers keeps them
            self._backend.enable_truncation(max_length)
            try:
                encodings = self._backend.encode_batch(texts, add_special_tokens=add_special_tokens)
            finally:
                self._backend.no_truncation()
        else:
            encodings = self._backend.encode_batch(texts, add_special_tokens=add_special_tokens)
        return [e.ids for e in encodings]

    def _pad(
        self, ids: list[list[int]], masks: list[list[int]], length: int, side: str
    ) -> tuple[list[list[int]], list[list[int]]]:
        """Pad every row to ``length`` on ``side`` with pad_token_id (mask 0)."""
        if any(len(r) < length for r in ids) and self.pad_token_id is None:
            raise ValueError(
                "padding needs a pad token, and this tokenizer has none: set one "
                "(tokenizer.pad_token = tokenizer.eos_token) or call with padding=False."
            )
        pad_id = self.pad_token_id
        out_ids, out_masks = [], []
        for row, mask in zip(ids, masks, strict=True):
            n = length - len(row)
            if side == "left":
                out_ids.append([pad_id] * n + row)
                out_masks.append([0] * n + mask)
            else:
                out_ids.append(row + [pad_id] * n)
                out_masks.append(mask + [0] * n)
        return out_ids, out_masks

    # --------------------------------------------------------------- chat template

    def get_chat_template(self, chat_template: str | None = None, tools: list | None = None) -> str:
        """The template to render: ``chat_template`` (a template or the name of one of this
        tokenizer's templates), else this tokenizer's (``tool_use`` when tools are given and
        there is one, else ``default``)."""
        return choose_chat_template(self.chat_template, chat_template, tools)

    def apply_chat_template(
        self,
        conversation: list[dict] | list[list[dict]],
        add_generation_prompt: bool = False,
        tokenize: bool = True,
        return_tensors: str | None = None,
        *,
        tools: list[dict] | None = None,
        documents: list[dict] | None = None,
        chat_template: str | None = None,
        continue_final_message: bool = False,
        padding: bool | str = False,
        truncation: bool = False,
        max_length: int | None = None,
        return_dict: bool = False,
        **kwargs: Any,
    ):
        """Render ``conversation`` (a list of ``{"role", "content"}`` dicts, or a batch of such
        lists) with the chat template, then tokenize it without adding special tokens.

        Returns the text (``tokenize=False``), the ids (a list, a list of lists for a batch,
        or a LongTensor (rows, length) with ``return_tensors="pt"``), or a
        :class:`BatchEncoding` with ``return_dict=True``. Extra ``kwargs`` reach the template
        (next to the special tokens, which they override).

        Example::

            >>> tok = lm.tokenizer
            >>> print(tok.apply_chat_template([{"role": "user", "content": "Hi"}],
            ...                               add_generation_prompt=True, tokenize=False))
            <|im_start|>system
            You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>
            <|im_start|>user
            Hi<|im_end|>
            <|im_start|>assistant
            <BLANKLINE>
        """
        conversations, batched = as_conversation_batch(conversation)
        if continue_final_message and add_generation_prompt:
            raise ValueError(
                "continue_final_message=True and add_generation_prompt=True cannot be combined: "
                "continue the last message, or open a new assistant turn, not both."
            )
        check_tools(tools, documents)
        template = compile_chat_template(self.get_chat_template(chat_template, tools))
        variables = {**self.special_tokens_map, **kwargs}
        rendered = []
        for messages in conversations:
            text = template.render(
                messages=messages,
                tools=tools,
                documents=documents,
                add_generation_prompt=add_generation_prompt,
                **variables,
            )
            if continue_final_message:
                text = cut_after_final_message(text, messages)
            rendered.append(text)
        if not tokenize:
            return rendered if batched else rendered[0]
        out = self(
            rendered if batched else rendered[0],
            padding=padding,
            return_tensors=return_tensors,
            add_special_tokens=False,
            truncation=truncation,
            max_length=max_length,
        )
        return out if return_dict else out["input_ids"]

    def __repr__(self) -> str:
        return (
            f"Tokenizer(name_or_path={self.name_or_path!r}, vocab_size={self.vocab_size}, "
            f"len={len(self)}, special_tokens={self.special_tokens_map}, "
            f"padding_side={self.padding_side!r})"
        )


# ---------------------------------------------------------------------- helpers


def read_json(path: Path, what: str) -> dict:
    """Parse a JSON file that must hold an object, with an error naming the file when it is
    not valid UTF-8 JSON or holds something else (a list, a string, a number)."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        raise ValueError(f"{what}: {str(path)!r} does not exist") from None
    except UnicodeDecodeError as err:
        raise ValueError(
            f"{what}: {str(path)!r} is not UTF-8 text ({err.reason} at byte {err.start}); "
            "JSON files must be saved as UTF-8: download or save it again."
        ) from None
    except json.JSONDecodeError as err:
        raise ValueError(
            f"{what}: {str(path)!r} is not valid JSON ({err}); the file may be truncated: "
            "download or save it again."
        ) from None
    if not isinstance(data, dict):
        raise ValueError(
            f"{what}: {str(path)!r} must hold a JSON object ({{...}}), but it holds a "
            f"{type(data).__name__} ({json.dumps(data)[:60]}): download or save it again."
        )
    return data


def read_json_if_present(path: Path, what: str) -> dict:
    """:func:`read_json`, or {} when the file does not exist."""
    return read_json(path, what) if path.is_file() else {}


def _is_token(value: Any) -> bool:
    """A special token as a tokenizer config holds one: text, an AddedToken, a serialised
    AddedToken dict with text content, or None."""
    if isinstance(value, dict):
        return isinstance(value.get("content"), str)
    return value is None or isinstance(value, (str, AddedToken))


def check_tokenizer_config(config: dict) -> None:
    """ValueError naming the first entry of a tokenizer_config-style dict of the wrong type."""
    for attr in SPECIAL_TOKEN_ATTRIBUTES:
        if not _is_token(config.get(attr)):
            raise ValueError(
                f"{attr}={config[attr]!r} must be the token's text (or an AddedToken dict with "
                "a 'content' string)"
            )
    extra = config.get("additional_special_tokens")
    if extra is not None and (
        not isinstance(extra, (list, tuple)) or not all(map(_is_token, extra))
    ):
        raise ValueError(f"additional_special_tokens={extra!r} must be a list of token texts")
    template = config.get("chat_template")
    if template is not None and not isinstance(template, (str, list, dict)):
        raise ValueError(
            f"chat_template={template!r} must be a Jinja template string (or a list of "
            "{'name', 'template'} entries)"
        )
    length = config.get("model_max_length")
    if length is not None and (isinstance(length, bool) or not isinstance(length, (int, float))):
        raise ValueError(f"model_max_length={length!r} must be a number")
    for flag in (
        "add_prefix_space",
        "add_bos_token",
        "add_eos_token",
        "clean_up_tokenization_spaces",
    ):
        value = config.get(flag)
        if value is not None and not isinstance(value, bool):
            raise ValueError(f"{flag}={value!r} must be true or false")


def token_content(token) -> str | None:
    """The text of a special token given as a string or a serialised AddedToken dict."""
    if isinstance(token, dict):
        return token.get("content")
    if isinstance(token, AddedToken):
        return token.content
    return token


def apply_add_prefix_space(backend: BackendTokenizer, add_prefix_space) -> None:
    """Give the top-level pre-tokenizer the configured ``add_prefix_space`` (transformers
    overrides the value stored in tokenizer.json with the one in the tokenizer config)."""
    if backend.pre_tokenizer is None or not isinstance(add_prefix_space, bool):
        return
    try:
        state = json.loads(backend.pre_tokenizer.__getstate__())
    except Exception:  # a custom pre-tokenizer that cannot be serialised
        return
    if "add_prefix_space" not in state or state["add_prefix_space"] == add_prefix_space:
        return
    state["add_prefix_space"] = add_prefix_space
    from tokenizers import pre_tokenizers

    kind = getattr(pre_tokenizers, state.pop("type"))
    backend.pre_tokenizer = kind(**state)


def clean_up_tokenization(text: str) -> str:
    """Remove the spaces before punctuation and English contractions (transformers'
    ``clean_up_tokenization_spaces``)."""
    for spaced, joined in (
        (" .", "."),
        (" ?", "?"),
        (" !", "!"),
        (" ,", ","),
        (" ' ", "'"),
        (" n't", "n't"),
        (" 'm", "'m"),
        (" 's", "'s"),
        (" 've", "'ve"),
        (" 're", "'re"),
    ):
        text = text.replace(spaced, joined)
    return text


def to_python_ids(ids) -> int | list:
    """Tensors / arrays / numpy ints -> Python ints and (nested) lists."""
    if isinstance(ids, (torch.Tensor, np.ndarray)):
        return ids.tolist()
    if isinstance(ids, np.integer):
        return int(ids)
    if isinstance(ids, (list, tuple)):
        return [to_python_ids(i) if not isinstance(i, int) else i for i in ids]
    if isinstance(ids, int):
        return ids
    raise ValueError(
        f"token ids must be an int, a list of ints, or a tensor; got {type(ids).__name__}"
    )


def check_text(text, name: str) -> None:
    if not isinstance(text, str):
        raise ValueError(f"{name} must be a str; got {type(text).__name__}: {text!r:.80}")


def as_text_batch(text) -> tuple[list[str], bool]:
    """(list of texts, whether a single text was given)."""
    if isinstance(text, str):
        return [text], True
    if isinstance(text, (list, tuple)) and text and all(isinstance(t, str) for t in text):
        return list(text), False
    raise ValueError(
        f"text must be a str or a non-empty list of str; got {type(text).__name__}: {text!r:.80}"
    )


def check_call_options(padding, return_tensors, truncation, max_length, padding_side) -> None:
    if padding not in _PADDING_CHOICES:
        raise ValueError(f"padding={padding!r}; allowed: {list(_PADDING_CHOICES)}")
    if return_tensors not in ("pt", "np", None):
        raise ValueError(f"return_tensors={return_tensors!r}; allowed: 'pt', 'np' or None")
    if padding_side not in (None, "left", "right"):
        raise ValueError(f"padding_side={padding_side!r}; allowed: 'left' or 'right'")
    needs_length = padding == "max_length" or truncation
    if needs_length and (not isinstance(max_length, int) or max_length < 1):
        raise ValueError(
            f"max_length={max_length!r}: padding='max_length' and truncation=True need "
            "max_length, an int >= 1"
        )


def padding_target(padding, ids: list[list[int]], max_length: int | None) -> int | None:
    """Length to pad every row to, or None for no padding."""
    if padding in (False, "do_not_pad"):
        return None
    longest = max(len(r) for r in ids)
    if padding == "max_length":
        return max(longest, max_length)
    return longest


def make_batch(
    ids: list[list[int]], masks: list[list[int]], return_tensors: str | None, single: bool
) -> BatchEncoding:
    """Lists -> BatchEncoding of tensors / arrays / lists."""
    if return_tensors is None:
        if single:
            return BatchEncoding(input_ids=ids[0], attention_mask=masks[0])
        return BatchEncoding(input_ids=ids, attention_mask=masks)
    if len({len(r) for r in ids}) > 1:
        raise ValueError(
            "the texts encode to different lengths, which cannot form one tensor: "
            "pass padding=True (or return_tensors=None for lists)."
        )
    if return_tensors == "pt":
        return BatchEncoding(
            input_ids=torch.tensor(ids, dtype=torch.long),
            attention_mask=torch.tensor(masks, dtype=torch.long),
        )
    return BatchEncoding(
        input_ids=np.array(ids, dtype=np.int64), attention_mask=np.array(masks, dtype=np.int64)
    )
