"""TableLM: a language model written by hand as a tree of next-word probabilities.

The whole model is a table ``prefix -> {next word: probability}``. A prefix is the tuple of
words after the BOS token (the prompt included), so ``"The dog"`` means "after the words
The, dog". It is small enough to read, to draw and to enumerate, which makes it the model
for teaching decoding: greedy search, beam search and sampling can be checked by hand.

It implements genlab's model protocol (:mod:`genlab.models.base`):

* logits are the table's log-probabilities for the real tokens seen so far (left padding is
  skipped through the attention mask, a leading BOS is dropped);
* a word with probability 0 gets the finite logit :data:`ZERO_PROB_LOGIT` (-1e4) instead of
  -inf, so beam-search sums stay finite (``exp(-1e4)`` is exactly 0 in float32, so a
  softmax or log-softmax of the logits gives back the table's probabilities);
* a prefix that is not in the table gets the *fallback* distribution ("eos": all mass on
  EOS, the default; "uniform"; "error"; or an explicit ``{word: prob}``).

Example::

    >>> lm = TableLM.classic()
    >>> lm.next_word_probs("The")
    {'nice': 0.5, 'dog': 0.4, 'car': 0.1}
    >>> round(lm.sequence_probability("The nice woman <eos>"), 6)  # what greedy finds
    0.2
    >>> round(lm.sequence_probability("The dog has <eos>"), 6)  # the most probable text
    0.36
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping, Sequence
from numbers import Real
from typing import Any

import torch

from genlab.models.base import ModelInfo, ModelOutput

__all__ = ["ZERO_PROB_LOGIT", "TableCache", "TableLM", "WordTokenizer", "WordBatch"]

# Logit of a word with probability 0: very negative but finite (see the module docstring).
ZERO_PROB_LOGIT = -1e4
# Rows must sum to 1 within this tolerance.
ROW_SUM_TOLERANCE = 1e-6

PAD, BOS, UNK = "<pad>", "<bos>", "<unk>"
_FALLBACKS = ("eos", "uniform", "error")

Prefix = tuple[str, ...]


# --------------------------------------------------------------------------- tokenizer


class WordBatch(dict):
    """Tokenizer output: a dict (``input_ids``, ``attention_mask``) with attribute access."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def to(self, device: Any) -> WordBatch:
        return WordBatch(
            {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in self.items()}
        )


class WordTokenizer:
    """A word-level tokenizer: split on whitespace, one id per word, unknown words -> <unk>.

    It offers the subset of the transformers tokenizer API that genlab uses: ``encode``,
    ``decode``, ``batch_decode``, ``__call__`` (left padding), ``convert_ids_to_tokens``,
    ``convert_tokens_to_ids``, ``get_vocab``, ``apply_chat_template`` and the special ids.

    Example::

        >>> tok = WordTokenizer(["<pad>", "<bos>", "<eos>", "<unk>", "The", "dog"])
        >>> tok.encode("The dog cat")
        [1, 4, 5, 3]
        >>> tok.decode([1, 4, 5, 2], skip_special_tokens=True)
        'The dog'
    """

    def __init__(
        self,
        vocab: Sequence[str],
        *,
        bos_token: str = BOS,
        eos_token: str = "<eos>",
        pad_token: str = PAD,
        unk_token: str = UNK,
    ):
        self._id_to_token = list(vocab)
        self._token_to_id = {tok: i for i, tok in enumerate(self._id_to_token)}
        if len(self._token_to_id) != len(self._id_to_token):
            raise ValueError(f"`vocab` must not contain duplicate words, got {list(vocab)!r}.")
        for field, tok in [
            ("bos_token", bos_token),
            ("eos_token", eos_token),
            ("pad_token", pad_token),
            ("unk_token", unk_token),
        ]:
            if tok not in self._token_to_id:
                raise ValueError(f"`{field}` {tok!r} is not in the vocabulary; add it to `vocab`.")
        self.bos_token, self.eos_token = bos_token, eos_token
        self.pad_token, self.unk_token = pad_token, unk_token
        self.bos_token_id = self._token_to_id[bos_token]
        self.eos_token_id = self._token_to_id[eos_token]
        self.pad_token_id = self._token_to_id[pad_token]
        self.unk_token_id = self._token_to_id[unk_token]
        self.padding_side = "left"
        self.name_or_path = "table"

    # -- vocabulary

    def __len__(self) -> int:
        return len(self._id_to_token)

    @property
    def vocab_size(self) -> int:
        return len(self._id_to_token)

    @property
    def all_special_tokens(self) -> list[str]:
        return [self.bos_token, self.eos_token, self.unk_token, self.pad_token]

    @property
    def all_special_ids(self) -> list[int]:
        return [self.bos_token_id, self.eos_token_id, self.unk_token_id, self.pad_token_id]

    def get_vocab(self) -> dict[str, int]:
        return dict(self._token_to_id)

    def tokenize(self, text: str) -> list[str]:
        """Words of ``text`` (whitespace split), unknown ones kept as they are."""
        if not isinstance(text, str):
            raise ValueError(f"`text` must be a str, got {type(text).__name__}: {text!r}.")
        return text.split()

    def convert_tokens_to_ids(self, tokens: str | Sequence[str]) -> int | list[int]:
        """A word's id (unknown words -> ``unk_token_id``); a list maps element-wise."""
        if isinstance(tokens, str):
            return self._token_to_id.get(tokens, self.unk_token_id)
        return [self._token_to_id.get(t, self.unk_token_id) for t in tokens]

    def convert_ids_to_tokens(
        self, ids: int | Sequence[int] | torch.Tensor, skip_special_tokens: bool = False
    ) -> str | list[str]:
        """The word of an id; a list (or 1-D tensor) maps element-wise."""
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        if isinstance(ids, int):
            return self._token(ids)
        special = set(self.all_special_ids) if skip_special_tokens else set()
        return [self._token(i) for i in ids if i not in special]

    def _token(self, token_id: int) -> str:
        if not isinstance(token_id, int) or not 0 <= token_id < len(self._id_to_token):
            raise ValueError(
                f"token id {token_id!r} is out of range: ids go from 0 to "
                f"{len(self._id_to_token) - 1} for this vocabulary."
            )
        return self._id_to_token[token_id]

    # -- text <-> ids

    def encode(
        self, text: str, add_special_tokens: bool = True, return_tensors: str | None = None
    ) -> list[int] | torch.Tensor:
        """Ids of the words of ``text``, BOS first when ``add_special_tokens``.

        With ``return_tensors="pt"``: a LongTensor of shape (1, n).
        """
        ids = self.convert_tokens_to_ids(self.tokenize(text))
        if add_special_tokens:
            ids = [self.bos_token_id, *ids]
        _check_return_tensors(return_tensors)
        return torch.tensor([ids], dtype=torch.long) if return_tensors == "pt" else ids

    def decode(self, token_ids: Any, skip_special_tokens: bool = False, **_: Any) -> str:
        """Words of ``token_ids`` (int, list or 0-/1-D tensor) joined by single spaces."""
        if isinstance(token_ids, torch.Tensor):
            if token_ids.dim() > 1:
                raise ValueError(
                    f"`token_ids` must be 0- or 1-D, got shape {tuple(token_ids.shape)}; "
                    "use batch_decode for a batch."
                )
            token_ids = token_ids.tolist()
        if isinstance(token_ids, int):
            token_ids = [token_ids]
        return " ".join(self.convert_ids_to_tokens(list(token_ids), skip_special_tokens))

    def batch_decode(self, sequences: Any, skip_special_tokens: bool = False, **_: Any) -> list:
        """``decode`` of every row of a 2-D tensor or a list of id lists."""
        if isinstance(sequences, torch.Tensor):
            sequences = sequences.tolist()
        return [self.decode(seq, skip_special_tokens) for seq in sequences]

    def __call__(
        self,
        text: str | Sequence[str],
        padding: bool | str = True,
        return_tensors: str | None = "pt",
        add_special_tokens: bool = True,
        **_: Any,
    ) -> WordBatch:
        """Tokenize one text or a batch; pad on ``padding_side`` (left by default).

        Returns ``input_ids`` and ``attention_mask``: (batch, longest) LongTensors with
        ``return_tensors="pt"``, lists otherwise (flat lists for a single str).
        """
        _check_return_tensors(return_tensors)
        single = isinstance(text, str)
        texts = [text] if single else list(text)
        rows = [self.encode(t, add_special_tokens) for t in texts]
        if padding not in (True, False, "longest", "do_not_pad"):
            raise ValueError(
                f"`padding` must be True/'longest' or False/'do_not_pad', got {padding!r}."
            )
        if padding in (True, "longest"):
            width = max((len(r) for r in rows), default=0)
            masks = [self._pad([1] * len(r), width, 0) for r in rows]
            rows = [self._pad(r, width, self.pad_token_id) for r in rows]
        else:
            masks = [[1] * len(r) for r in rows]
        if return_tensors == "pt":
            if len({len(r) for r in rows}) > 1:
                raise ValueError(
                    "texts of different lengths need padding=True to make a tensor "
                    f"(lengths {[len(r) for r in rows]})."
                )
            return WordBatch(
                input_ids=torch.tensor(rows, dtype=torch.long),
                attention_mask=torch.tensor(masks, dtype=torch.long),
            )
        if single:
            return WordBatch(input_ids=rows[0], attention_mask=masks[0])
        return WordBatch(input_ids=rows, attention_mask=masks)

    def _pad(self, row: list[int], width: int, value: int) -> list[int]:
        if self.padding_side not in ("left", "right"):
            raise ValueError(
                f"`padding_side` must be 'left' or 'right', got {self.padding_side!r}."
            )
        fill = [value] * (width - len(row))
        return fill + row if self.padding_side == "left" else row + fill

    def apply_chat_template(
        self,
        conversation: Sequence[Mapping[str, str]],
        tokenize: bool = True,
        add_generation_prompt: bool = False,
        return_tensors: str | None = None,
        return_dict: bool = False,
        **_: Any,
    ) -> str | list[int] | torch.Tensor | WordBatch:
        """The "chat template" of a table: the messages' contents joined by spaces.

        Roles and ``add_generation_prompt`` are ignored. With ``tokenize`` the text is
        encoded (BOS first); ``return_tensors="pt"`` gives a (1, n) tensor, ``return_dict``
        an ``input_ids``/``attention_mask`` batch.
        """
        if isinstance(conversation, Mapping) or not isinstance(conversation, Sequence):
            raise ValueError(
                f"`conversation` must be a list of {{'role': ..., 'content': ...}} dicts, got "
                f"{conversation!r}."
            )
        for i, message in enumerate(conversation):
            if not isinstance(message, Mapping) or not isinstance(message.get("content"), str):
                raise ValueError(
                    f"`conversation[{i}]` must be a dict with a str 'content', got {message!r}."
                )
        text = " ".join(m["content"] for m in conversation)
        if not tokenize:
            return text
        if return_dict:
            return self(text, return_tensors=return_tensors)
        return self.encode(text, return_tensors=return_tensors)


def _check_return_tensors(return_tensors: str | None) -> None:
    if return_tensors not in (None, "pt"):
        raise ValueError(f"`return_tensors` must be None or 'pt', got {return_tensors!r}.")


# --------------------------------------------------------------------------- cache


class TableCache:
    """The "KV cache" of a table: the token ids seen so far, (rows, length) LongTensor."""

    def __init__(self, batch_size: int):
        self.ids = torch.zeros(batch_size, 0, dtype=torch.long)

    def length(self) -> int:
        return self.ids.shape[1]

    @property
    def batch_size(self) -> int:
        return self.ids.shape[0]

    def append(self, new_ids: torch.Tensor) -> torch.Tensor:
        """Add (rows, new) ids; return all ids (rows, length + new)."""
        self.ids = torch.cat([self.ids, new_ids.to(torch.long)], dim=1)
        return self.ids

    def reorder(self, index: torch.LongTensor) -> None:
        """rows <- rows[index] (beam search); ``index`` may change the number of rows."""
        self.ids = self.ids.index_select(0, index.to(self.ids.device))

    def crop(self, length: int) -> None:
        """Keep the first ``length`` positions (negative: drop that many from the end)."""
        if length < 0:
            length = self.length() + length
        self.ids = self.ids[:, : max(length, 0)]

    def copy(self) -> TableCache:
        other = TableCache(0)
        other.ids = self.ids.clone()
        return other

    def __repr__(self) -> str:
        return f"TableCache(rows={self.batch_size}, length={self.length()})"


# --------------------------------------------------------------------------- the model


class TableLM:
    """A language model given as a table ``prefix -> {next word: probability}``.

    Args:
        tree: maps a prefix (space-joined words, or a tuple of words; ``""`` is the start
            of the text) to a dict of next-word probabilities summing to 1. Use ``eos`` as
            the word that ends the text.
        eos: the end-of-text word.
        fallback: distribution for prefixes not in ``tree``: ``"eos"`` (default, all mass
            on EOS), ``"uniform"`` (every word and EOS equally likely), ``"error"`` (raise
            ValueError) or a dict ``{word: prob}``.
        hidden_size: width of the fixed random token embedding returned as hidden states.

    The vocabulary is ``<pad>`` (0), ``<bos>`` (1), ``eos`` (2), ``<unk>`` (3), then every
    word of the table in order of first appearance. ``lm.tokenizer`` is the matching
    :class:`WordTokenizer`.

    Example::

        >>> lm = TableLM({"": {"hi": 0.75, "<eos>": 0.25}, "hi": {"<eos>": 1.0}})
        >>> ids = lm.tokenizer("", return_tensors="pt").input_ids       # just BOS: (1, 1)
        >>> out = lm.forward(ids, attention_mask=torch.ones_like(ids),
        ...                  position_ids=torch.zeros_like(ids), cache=lm.new_cache(1))
        >>> out.logits.exp()[0, -1, 2:5].tolist()                         # <eos>, <unk>, hi
        [0.25, 0.0, 0.75]
    """

    def __init__(
        self,
        tree: Mapping[str | Sequence[str], Mapping[str, float]],
        *,
        eos: str = "<eos>",
        fallback: str | Mapping[str, float] = "eos",
        hidden_size: int = 16,
    ):
        _check_word("eos", eos)
        if eos in (PAD, BOS, UNK):
            raise ValueError(f"`eos` must differ from {PAD}, {BOS} and {UNK}, got {eos!r}.")
        if not isinstance(hidden_size, int) or hidden_size < 1:
            raise ValueError(f"`hidden_size` must be a positive int, got {hidden_size!r}.")
        self.eos = eos
        self._tree = _normalise_tree(tree, eos)
        self._fallback_row = _normalise_fallback(fallback, eos)
        self.fallback = fallback if isinstance(fallback, str) else dict(fallback)
        vocab = _build_vocab(self._tree, self._fallback_row, eos)
        self.tokenizer = WordTokenizer(vocab, eos_token=eos)
        self.info = ModelInfo(
            vocab_size=len(vocab),
            bos_token_id=self.tokenizer.bos_token_id,
            eos_token_id=self.tokenizer.eos_token_id,
            pad_token_id=self.tokenizer.pad_token_id,
            name="table",
            architecture="TableLM",
            num_hidden_layers=1,
            hidden_size=hidden_size,
        )
        self._log_rows = {prefix: self._log_row(row) for prefix, row in self._tree.items()}
        self._fallback_log_row = (
            None if fallback == "error" else self._log_row(self._fallback_dist())
        )
        self.embedding = _token_embedding(vocab, hidden_size)  # (vocab, hidden)

    @classmethod
    def classic(cls) -> TableLM:
        """The textbook tree where greedy search misses the most probable sequence.

        Greedy picks "nice" (0.5) then "woman" (0.4): "The nice woman", probability 0.2.
        Beam search with 2 beams keeps "The dog" (0.4) and finds "The dog has",
        probability 0.4 * 0.9 = 0.36. Every three-word sentence then ends (EOS: 1.0).
        """
        tree: dict[str, dict[str, float]] = {
            "": {"The": 1.0},
            "The": {"nice": 0.5, "dog": 0.4, "car": 0.1},
            "The nice": {"woman": 0.4, "house": 0.3, "guy": 0.3},
            "The dog": {"has": 0.9, "runs": 0.05, "and": 0.05},
            "The car": {"is": 0.3, "drives": 0.5, "turns": 0.2},
        }
        for prefix in ["The nice", "The dog", "The car"]:
            for word in list(tree[prefix]):
                tree[f"{prefix} {word}"] = {"<eos>": 1.0}
        return cls(tree)

    # -- reading the table

    @property
    def tree(self) -> dict[Prefix, dict[str, float]]:
        """The table as ``{prefix tuple: {word: prob}}`` (a copy)."""
        return {prefix: dict(row) for prefix, row in self._tree.items()}

    def next_word_probs(self, prefix: str | Sequence[str] = ()) -> dict[str, float]:
        """Next-word probabilities after ``prefix`` (the fallback if it is not in the table)."""
        key = self._drop_bos(_prefix_key(prefix, "prefix"))
        if key in self._tree:
            return dict(self._tree[key])
        if self._fallback_row is None:
            raise ValueError(
                f"prefix {' '.join(key)!r} is not in the table and fallback='error'; add it to "
                "the tree or choose fallback='eos' / 'uniform'."
            )
        return self._fallback_dist()

    def _drop_bos(self, words: Prefix) -> Prefix:
        """Words without a leading BOS (the table is keyed on the words after it)."""
        return words[1:] if words[:1] == (self.tokenizer.bos_token,) else words

    def sequence_probability(self, text: str, prompt: str | Sequence[str] = "") -> float:
        """Probability that the words of ``text`` come next after ``prompt``.

        End ``text`` with the EOS word to get the probability of a complete text; without
        it this is the probability of a beginning. A leading BOS word is ignored.

            >>> round(TableLM.classic().sequence_probability("dog has <eos>", prompt="The"), 6)
            0.36
        """
        prefix = self._drop_bos(_prefix_key(prompt, "prompt"))
        words = _prefix_key(text, "text")
        if not prefix:
            words = self._drop_bos(words)
        prob = 1.0
        for word in words:
            prob *= self.next_word_probs(prefix).get(word, 0.0)
            prefix = (*prefix, word)
        return prob

    def enumerate_sequences(
        self, prompt: str | Sequence[str] = "", max_new_words: int = 10, limit: int = 100_000
    ) -> list[tuple[str, float]]:
        """Every continuation of ``prompt`` with probability > 0, most probable first.

        A continuation ends at the EOS word or after ``max_new_words`` words. Returns
        ``(text, probability)`` pairs, where ``text`` excludes the prompt.

            >>> TableLM.classic().enumerate_sequences("The")[0]
            ('dog has <eos>', 0.36000000000000004)

        limit: stop after this many continuations (a guard against huge tables).
        """
        if not isinstance(max_new_words, int) or max_new_words < 1:
            raise ValueError(f"`max_new_words` must be a positive int, got {max_new_words!r}.")
        start = _prefix_key(prompt, "prompt")
        done: list[tuple[str, float]] = []
        frontier: list[tuple[Prefix, float]] = [((), 1.0)]
        for _ in range(max_new_words):
            grown: list[tuple[Prefix, float]] = []
            for words, prob in frontier:
                for word, p in self.next_word_probs(start + words).items():
                    if p <= 0:
                        continue
                    item = ((*words, word), prob * p)
                    (done if word == self.eos else grown).append(item)
                if len(done) + len(grown) > limit:
                    raise ValueError(
                        f"more than `limit`={limit} continuations; lower `max_new_words` "
                        f"(got {max_new_words}) or raise `limit`."
                    )
            frontier = grown
        done.extend(frontier)
        ranked = sorted(done, key=lambda item: (-item[1], item[0]))
        return [(" ".join(words), prob) for words, prob in ranked]

    def to_frame(self):
        """The table as a pandas DataFrame with columns prefix (space-joined), token, prob."""
        import pandas as pd

        rows = [
            {"prefix": " ".join(prefix), "token": word, "prob": prob}
            for prefix, row in self._tree.items()
            for word, prob in row.items()
        ]
        return pd.DataFrame(rows, columns=["prefix", "token", "prob"])

    def __repr__(self) -> str:
        return (
            f"TableLM({len(self._tree)} prefixes, vocab_size={self.info.vocab_size}, "
            f"fallback={self.fallback!r})"
        )

    # -- the model protocol

    def new_cache(self, batch_size: int) -> TableCache:
        """An empty cache for batch_size rows (the table's cache only keeps the ids)."""
        if not isinstance(batch_size, int) or batch_size < 0:
            raise ValueError(f"`batch_size` must be a non-negative int, got {batch_size!r}.")
        return TableCache(batch_size)

    def forward(
        self,
        input_ids: torch.LongTensor,
        *,
        attention_mask: torch.Tensor,
        position_ids: torch.LongTensor | None = None,
        cache: TableCache,
        logits_to_keep: int = 1,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
    ) -> ModelOutput:
        """Log-probabilities of the table for each kept position.

        Args:
            input_ids: (rows, new_len) the new tokens.
            attention_mask: (rows, cache_len + new_len), 0 on padding.
            position_ids: (rows, new_len); ignored (a table has no positions).
            cache: a :class:`TableCache`; the new ids are appended to it.
            logits_to_keep: last positions to return logits for; 0 means all new ones.

        Returns:
            ModelOutput with logits (rows, kept, vocab) float32; hidden_states (when asked):
            (embedding, embedding), each (rows, new_len, hidden), the fixed embedding of each
            token; attentions (when asked): one (rows, 1, new_len, cache_len + new_len)
            tensor, uniform over the real positions up to each query (zeros on padding).

        output_attentions, output_hidden_states: accepted for the protocol; a table has
        neither (None).
        """
        rows, new_len = self._check_inputs(input_ids, attention_mask, cache, logits_to_keep)
        all_ids = cache.append(input_ids)  # (rows, total)
        total = all_ids.shape[1]
        kept = new_len if logits_to_keep == 0 else min(logits_to_keep, new_len)
        positions = range(total - kept, total)
        ids_list, mask_list = all_ids.tolist(), (attention_mask != 0).tolist()
        logits = torch.stack(
            [
                torch.stack([self._row_logits(ids_list[r], mask_list[r], p) for p in positions])
                for r in range(rows)
            ]
        )  # (rows, kept, vocab)
        hidden = None
        if output_hidden_states:
            embedded = self.embedding[input_ids]  # (rows, new_len, hidden)
            hidden = (embedded, embedded.clone())
        attentions = None
        if output_attentions:
            attentions = (_uniform_attention(attention_mask, new_len),)
        return ModelOutput(logits=logits, hidden_states=hidden, attentions=attentions)

    __call__ = forward

    def _check_inputs(
        self, input_ids: Any, attention_mask: Any, cache: Any, logits_to_keep: Any
    ) -> tuple[int, int]:
        if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2:
            shape = tuple(input_ids.shape) if isinstance(input_ids, torch.Tensor) else input_ids
            raise ValueError(f"`input_ids` must be a 2-D (rows, new_len) tensor, got {shape!r}.")
        if input_ids.dtype.is_floating_point or input_ids.dtype == torch.bool:
            raise ValueError(f"`input_ids` must hold integer ids, got dtype {input_ids.dtype}.")
        vocab = self.info.vocab_size
        if input_ids.numel() and (input_ids.min() < 0 or input_ids.max() >= vocab):
            raise ValueError(
                f"`input_ids` must be in [0, {vocab - 1}] for this table, got values from "
                f"{int(input_ids.min())} to {int(input_ids.max())}."
            )
        rows, new_len = input_ids.shape
        if new_len == 0:
            raise ValueError("`input_ids` has no new tokens (new_len = 0); pass at least one.")
        if not isinstance(cache, TableCache):
            raise ValueError(
                f"`cache` must be a TableCache from lm.new_cache(rows), got {type(cache).__name__}."
            )
        if cache.length() and cache.batch_size != rows:
            raise ValueError(
                f"`input_ids` has {rows} rows but the cache holds {cache.batch_size}; reorder "
                "the cache or start a new one."
            )
        expected = (rows, cache.length() + new_len)
        if not isinstance(attention_mask, torch.Tensor) or tuple(attention_mask.shape) != expected:
            got = (
                tuple(attention_mask.shape)
                if isinstance(attention_mask, torch.Tensor)
                else attention_mask
            )
            raise ValueError(
                f"`attention_mask` must cover the whole sequence, shape (rows, cache_len + "
                f"new_len) = {expected}, got {got!r}."
            )
        if isinstance(logits_to_keep, bool) or not isinstance(logits_to_keep, int):
            raise ValueError(f"`logits_to_keep` must be an int >= 0, got {logits_to_keep!r}.")
        if logits_to_keep < 0:
            raise ValueError(f"`logits_to_keep` must be >= 0 (0 = all), got {logits_to_keep}.")
        if cache.length() == 0:
            cache.ids = cache.ids.new_zeros(rows, 0)  # an empty cache adopts the row count
        return rows, new_len

    def _row_logits(self, ids: list[int], mask: list[bool], position: int) -> torch.Tensor:
        """(vocab,) log-probs after the real tokens of one row up to ``position``."""
        real = [
            tok for tok, keep in zip(ids[: position + 1], mask[: position + 1], strict=True) if keep
        ]
        if real and real[0] == self.tokenizer.bos_token_id:
            real = real[1:]
        words = tuple(self.tokenizer.convert_ids_to_tokens(real))
        row = self._log_rows.get(words)
        if row is not None:
            return row
        if self._fallback_log_row is None:
            raise ValueError(
                f"prefix {' '.join(words)!r} is not in the table and fallback='error'; add it "
                "to the tree or choose fallback='eos' / 'uniform'."
            )
        return self._fallback_log_row

    def _fallback_dist(self) -> dict[str, float]:
        if self._fallback_row is not None:
            return dict(self._fallback_row)
        if self.fallback == "uniform":
            words = [w for w in self.tokenizer.get_vocab() if w not in (PAD, BOS, UNK)]
            return {w: 1.0 / len(words) for w in words}
        return {self.eos: 1.0}  # "eos"; only "error" has no distribution

    def _log_row(self, row: Mapping[str, float]) -> torch.Tensor:
        """(vocab,) float32: log(p) for each word of ``row``, ZERO_PROB_LOGIT elsewhere."""
        out = torch.full((self.info.vocab_size,), ZERO_PROB_LOGIT, dtype=torch.float32)
        vocab = self.tokenizer.get_vocab()
        for word, prob in row.items():
            if prob > 0:
                out[vocab[word]] = math.log(prob)
        return out


# --------------------------------------------------------------------------- helpers


def _check_word(field: str, word: Any) -> None:
    if not isinstance(word, str) or not word or any(ch.isspace() for ch in word):
        raise ValueError(f"`{field}` must be one non-empty word without spaces, got {word!r}.")


def _prefix_key(prefix: Any, field: str) -> Prefix:
    """A prefix as a tuple of words, from a space-joined string or a sequence of words."""
    if isinstance(prefix, str):
        return tuple(prefix.split())
    if isinstance(prefix, Sequence):
        for word in prefix:
            _check_word(f"{field} word", word)
        return tuple(prefix)
    raise ValueError(
        f"`{field}` must be a space-joined str or a tuple of words, got {type(prefix).__name__}: "
        f"{prefix!r}."
    )


def _check_row(where: str, row: Any, eos: str) -> dict[str, float]:
    """Validate one next-word distribution; return it as a plain dict."""
    if not isinstance(row, Mapping) or not row:
        raise ValueError(f"{where} must be a non-empty dict {{word: probability}}, got {row!r}.")
    for word, prob in row.items():
        _check_word(f"{where} word", word)
        if word in (PAD, BOS, UNK):
            raise ValueError(
                f"{where} uses the reserved word {word!r}; use {eos!r} to end the text."
            )
        if isinstance(prob, bool) or not isinstance(prob, Real) or not 0.0 <= prob <= 1.0:
            raise ValueError(f"{where} probability of {word!r} must be in [0, 1], got {prob!r}.")
    total = math.fsum(float(p) for p in row.values())
    if abs(total - 1.0) > ROW_SUM_TOLERANCE:
        raise ValueError(
            f"{where} probabilities must sum to 1 (within {ROW_SUM_TOLERANCE}), got {total!r}."
        )
    return {word: float(prob) for word, prob in row.items()}


def _normalise_tree(tree: Any, eos: str) -> dict[Prefix, dict[str, float]]:
    if not isinstance(tree, Mapping) or not tree:
        raise ValueError(
            f"`tree` must be a non-empty dict {{prefix: {{word: prob}}}}, got {tree!r}."
        )
    out: dict[Prefix, dict[str, float]] = {}
    for prefix, row in tree.items():
        key = _prefix_key(prefix, "tree prefix")
        if key in out:
            raise ValueError(f"`tree` lists the prefix {' '.join(key)!r} twice ({prefix!r}).")
        out[key] = _check_row(f"`tree` row for prefix {' '.join(key)!r}", row, eos)
    return out


def _normalise_fallback(fallback: Any, eos: str) -> dict[str, float] | None:
    """An explicit fallback dict, validated; None for the named fallbacks."""
    if isinstance(fallback, str):
        if fallback not in _FALLBACKS:
            raise ValueError(
                f"`fallback` must be one of {_FALLBACKS} or a dict {{word: prob}}, "
                f"got {fallback!r}."
            )
        return None
    return _check_row("`fallback`", fallback, eos)


def _build_vocab(
    tree: dict[Prefix, dict[str, float]], fallback_row: dict[str, float] | None, eos: str
) -> list[str]:
    vocab = {PAD: None, BOS: None, eos: None, UNK: None}  # ordered set: ids 0..3
    for prefix, row in tree.items():
        vocab.update(dict.fromkeys(prefix))
        vocab.update(dict.fromkeys(row))
    vocab.update(dict.fromkeys(fallback_row or {}))
    return list(vocab)


def _token_embedding(vocab: list[str], hidden_size: int) -> torch.Tensor:
    """(vocab, hidden) fixed N(0, 1) matrix, seeded by the vocabulary (same words, same matrix)."""
    seed = zlib.crc32("\n".join(vocab).encode("utf-8"))
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(len(vocab), hidden_size, generator=generator)


def _uniform_attention(attention_mask: torch.Tensor, new_len: int) -> torch.Tensor:
    """(rows, 1, new_len, total) weights, uniform over real keys at or before each query."""
    total = attention_mask.shape[1]
    real = (attention_mask != 0).to(torch.float32)  # (rows, total)
    causal = torch.ones(total, total).tril()[total - new_len :]  # (new_len, total)
    weights = causal[None] * real[:, None, :]  # (rows, new_len, total)
    counts = weights.sum(-1, keepdim=True).clamp_min(1.0)
    return (weights / counts)[:, None]
