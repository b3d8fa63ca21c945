"""Load transformers-style checkpoints: a local folder or a Hugging Face Hub repo id.

A checkpoint folder holds

* ``config.json`` (required): the model's architecture and sizes;
* ``model.safetensors``, or shards listed in ``model.safetensors.index.json``;
* ``tokenizer.json`` (+ ``tokenizer_config.json``, ``special_tokens_map.json``,
  ``chat_template.jinja``): read by :class:`~genlab.text.tokenizer.Tokenizer`;
* ``generation_config.json`` (optional): the model's generation defaults, handed to the
  model as ``ModelInfo.generation_defaults``.

Hub repos are fetched with ``huggingface_hub.snapshot_download`` into the normal cache
(only the files above), which honours ``HF_HUB_OFFLINE`` (then only the cache is read),
``HF_HUB_CACHE`` and the usual token settings.

Example (not run as a test: the first line needs the Hugging Face Hub, the second a folder)::

    >>> model, tokenizer = load_checkpoint("HuggingFaceTB/SmolLM2-135M-Instruct")  # doctest: +SKIP
    >>> model, tokenizer = load_checkpoint("/path/to/saved/folder")  # doctest: +SKIP
"""

from __future__ import annotations

import errno
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from genlab.text.tokenizer import Tokenizer, read_json

logger = logging.getLogger(__name__)

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
WEIGHTS_INDEX_FILE = "model.safetensors.index.json"
GENERATION_CONFIG_FILE = "generation_config.json"
# Everything but the weights: fetched first, so the index can name the shards to fetch.
HUB_METADATA_PATTERNS = [
    CONFIG_FILE,
    GENERATION_CONFIG_FILE,
    WEIGHTS_INDEX_FILE,
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "additional_chat_templates/*.jinja",
]
# Generation settings transformers takes from config.json when a model has no
# generation_config.json (GenerationConfig.from_model_config).
CONFIG_GENERATION_KEYS = (
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "decoder_start_token_id",
    "max_length",
    "min_length",
    "do_sample",
    "early_stopping",
    "num_beams",
    "num_beam_groups",
    "diversity_penalty",
    "temperature",
    "top_k",
    "top_p",
    "typical_p",
    "repetition_penalty",
    "length_penalty",
    "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size",
    "bad_words_ids",
    "num_return_sequences",
    "forced_bos_token_id",
    "forced_eos_token_id",
    "remove_invalid_values",
    "exponential_decay_length_penalty",
    "suppress_tokens",
    "begin_suppress_tokens",
)


@dataclass
class Checkpoint:
    """The parts of a checkpoint folder, before any model is built.

    state_dict: transformers parameter names -> tensors as stored (dtype unchanged).
    tokenizer: None when the folder has no tokenizer.json.
    """

    folder: Path
    config: dict
    state_dict: dict[str, torch.Tensor]
    tokenizer: Tokenizer | None
    generation_defaults: dict


# ------------------------------------------------------------------- folder parts


def read_config(folder: Path) -> dict:
    """config.json as a dict; ValueError naming the folder when it is missing or broken."""
    path = folder / CONFIG_FILE
    if not path.is_file():
        check_not_a_broken_link(path)
        ggufs = sorted(folder.glob("*.gguf"))
        if ggufs:
            raise ValueError(
                f"{str(folder)!r} has no {CONFIG_FILE} but holds the GGUF file "
                f"{ggufs[0].name!r}: a GGUF file loads by its own path, "
                f"genlab.load({str(ggufs[0])!r})"
                + (f" (the folder has {len(ggufs)} .gguf files)" if len(ggufs) > 1 else "")
            )
        raise ValueError(
            f"{str(folder)!r} has no {CONFIG_FILE}: a model folder needs the config.json written "
            "by transformers' save_pretrained (or downloaded from the model's Hub repo)."
        )
    config = read_json(path, CONFIG_FILE)
    if "model_type" not in config:
        raise ValueError(
            f"{str(path)!r} has no 'model_type'; it does not look like a transformers "
            "config.json (save the model again with save_pretrained)."
        )
    return config


def check_not_a_broken_link(path: Path) -> None:
    """ValueError when ``path`` is a symbolic link that leads to no file (a loop, or a
    target that is gone): such a file is there, but cannot be read."""
    if not path.is_symlink() or path.exists():  # exists() follows the link (a Hub cache's)
        return
    try:
        target = os.readlink(path)
    except OSError:
        target = "?"
    why = "its target is gone"
    try:
        path.resolve(strict=True)
    except RuntimeError:  # Python < 3.13: a loop
        why = "the link points back to itself (a symlink loop)"
    except OSError as err:
        if getattr(err, "errno", None) == errno.ELOOP:
            why = "the link points back to itself (a symlink loop)"
    raise ValueError(
        f"{str(path)!r} is a symbolic link to {target!r} that cannot be read: {why}. Replace "
        f"it with the real file (or a link to it), or download or save the model again."
    )


def weight_files(folder: Path) -> list[Path]:
    """The safetensors files holding the weights: the shards named in the index, or
    model.safetensors."""
    index_path = folder / WEIGHTS_INDEX_FILE
    check_not_a_broken_link(index_path)
    if index_path.is_file():
        index = read_json(index_path, WEIGHTS_INDEX_FILE)
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(weight_map, dict) or not weight_map:
            raise ValueError(
                f"{str(index_path)!r} has no 'weight_map'; the index is broken: download or "
                "save the model again."
            )
        shards = [folder / name for name in dict.fromkeys(weight_map.values())]
        for shard in shards:
            check_not_a_broken_link(shard)
        missing = [p.name for p in shards if not p.is_file()]
        if missing:
            raise ValueError(
                f"{str(folder)!r} lacks weight shard(s) {missing} listed in {WEIGHTS_INDEX_FILE}; "
                "the download is incomplete: download the model again."
            )
        return shards
    single = folder / WEIGHTS_FILE
    check_not_a_broken_link(single)
    if single.is_file():
        return [single]
    other = sorted(p.name for p in folder.glob("*.bin")) + sorted(
        p.name for p in folder.glob("*.pt")
    )
    hint = (
        f" It has {other}: genlab reads safetensors only; convert with transformers "
        "(AutoModelForCausalLM.from_pretrained(folder).save_pretrained(folder))."
        if other
        else ""
    )
    raise ValueError(f"{str(folder)!r} has no {WEIGHTS_FILE} and no {WEIGHTS_INDEX_FILE}.{hint}")


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """All tensors of one safetensors file; ValueError naming the file when it is corrupt."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError, RuntimeError, ValueError) as err:
        raise ValueError(
            f"weights file {str(path)!r} is corrupt or truncated ({err}); delete it and "
            "download or save the model again."
        ) from err
    check_finite(tensors, path)
    return tensors


def check_finite(tensors: dict[str, torch.Tensor], path: str | os.PathLike) -> None:
    """ValueError naming the first tensor of ``path`` that holds NaN or infinite values.

    One float32 sum per tensor (no tensor-sized temporary): NaN and inf survive a sum, and
    real weights never add up to 3e38. Only a tensor whose sum is not finite is counted.
    """
    for name, tensor in tensors.items():
        if not tensor.is_floating_point() or tensor.numel() == 0:
            continue
        if torch.isfinite(tensor.sum(dtype=torch.float32)):
            continue
        bad = int((~torch.isfinite(tensor)).sum())
        if bad == 0:  # finite values whose sum overflowed: not a corrupt tensor
            continue
        raise ValueError(
            f"weights file {str(path)!r}: tensor {name!r} holds {bad} NaN or infinite "
            f"value(s) of {tensor.numel()}; the file is corrupt (or the model diverged in "
            "training): download or save the model again."
        )


def read_tensor_shapes(folder: Path) -> dict[str, tuple[int, ...]]:
    """Every tensor's name and shape from the safetensors headers; no weight is read."""
    from safetensors import SafetensorError, safe_open

    shapes: dict[str, tuple[int, ...]] = {}
    for path in weight_files(folder):
        try:
            with safe_open(str(path), framework="pt") as f:
                for name in f.keys():
                    shapes[name] = tuple(f.get_slice(name).get_shape())
        except (SafetensorError, OSError, RuntimeError, ValueError) as err:
            raise ValueError(
                f"weights file {str(path)!r} is corrupt or truncated ({err}); delete it and "
                "download or save the model again."
            ) from err
    return shapes


def check_weight_sizes(config: dict, folder: Path) -> None:
    """config.json's sizes (layers, heads, hidden, MLP, vocabulary) against the tensor
    shapes in the weight files' headers, before any weight is read or any model built; a
    size the weights contradict is a ValueError naming the file and the field."""
    from genlab.models.architectures import check_sizes

    shapes = read_tensor_shapes(folder)
    try:
        check_sizes(config, shapes)
    except ValueError as err:
        raise ValueError(f"{str(folder / CONFIG_FILE)!r}: {err}") from None


def read_state_dict(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the checkpoint (all shards merged), with the stored dtypes."""
    state_dict: dict[str, torch.Tensor] = {}
    for path in weight_files(folder):
        state_dict.update(read_safetensors(path))
    return state_dict


def read_generation_defaults(folder: Path, config: dict) -> dict:
    """generation_config.json as a dict of settings (private keys and the version dropped);
    without that file, the generation settings found in config.json, as transformers does."""
    path = folder / GENERATION_CONFIG_FILE
    if path.is_file():
        values = read_json(path, GENERATION_CONFIG_FILE)
        values = {
            k: v for k, v in values.items() if not k.startswith("_") and k != "transformers_version"
        }
        check_generation_values(values, path)
        return values
    return {k: config[k] for k in CONFIG_GENERATION_KEYS if config.get(k) is not None}


def check_generation_values(values: dict, path: Path) -> None:
    """ValueError naming ``path`` when a setting of generation_config.json is out of its
    domain (``"top_k": "x"``); combinations the reference only warns about pass."""
    import warnings

    from genlab.config import GenerationConfig

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # shown again when a run uses the settings
            GenerationConfig.from_dict(dict(values))
    except (ValueError, TypeError) as err:
        raise ValueError(
            f"{str(path)!r}: {err} Fix that setting in generation_config.json or delete the "
            "file (the model then generates with transformers' defaults)."
        ) from None


def read_tokenizer(folder: Path) -> Tokenizer | None:
    """The folder's tokenizer, or None (with a warning) when it has no tokenizer.json."""
    if not (folder / "tokenizer.json").is_file():
        logger.warning(
            "%s has no tokenizer.json: the model is loaded without a tokenizer (pass token ids, "
            "or a transformers tokenizer)",
            folder,
        )
        return None
    return Tokenizer.from_folder(folder)


def check_vocab_fits(tokenizer: Tokenizer | None, config: dict, folder: Path) -> None:
    """A tokenizer with more tokens than the model's embedding rows would produce ids the
    model cannot look up: refuse it."""
    vocab_size = config.get("vocab_size")
    if tokenizer is None or not isinstance(vocab_size, int):
        return
    if len(tokenizer) > vocab_size:
        raise ValueError(
            f"the tokenizer in {str(folder)!r} has {len(tokenizer)} tokens but config.json has "
            f"vocab_size={vocab_size}: the tokenizer does not belong to this model (ids >= "
            f"{vocab_size} have no embedding). Use the tokenizer saved with the model."
        )


def read_checkpoint(folder: str | os.PathLike) -> Checkpoint:
    """Read config, weights, tokenizer and generation defaults from a local folder.

    config.json's sizes are checked against the weight files' headers first
    (:func:`check_weight_sizes`), so an absurd size fails before any weight is read."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"model folder {str(folder)!r} does not exist or is not a folder")
    config = read_config(folder)
    tokenizer = read_tokenizer(folder)
    check_vocab_fits(tokenizer, config, folder)
    check_weight_sizes(config, folder)  # from the headers: before any weight is read
    state_dict = read_state_dict(folder)
    generation_defaults = read_generation_defaults(folder, config)
    return Checkpoint(folder, config, state_dict, tokenizer, generation_defaults)


# -------------------------------------------------------------------------- Hub


def hub_offline() -> bool:
    """Whether HF_HUB_OFFLINE is set (read now, not when huggingface_hub was imported)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def hub_cache_dir() -> str | None:
    """HF_HUB_CACHE as set now (None: huggingface_hub's default cache)."""
    return os.environ.get("HF_HUB_CACHE") or None


def download_from_hub(repo_id: str, *, revision: str | None = None) -> Path:
    """The local snapshot folder of ``repo_id`` with config, tokenizer and safetensors files.

    Fetches only those files (the shards the index names, or model.safetensors); offline
    (HF_HUB_OFFLINE=1) it only looks in the cache. Errors say what to do.
    """
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError

    def fetch(patterns: list[str]) -> Path:
        return Path(
            snapshot_download(
                repo_id,
                revision=revision,
                allow_patterns=patterns,
                cache_dir=hub_cache_dir(),
                local_files_only=hub_offline(),
            )
        )

    try:
        folder = fetch(HUB_METADATA_PATTERNS)
        index_path = folder / WEIGHTS_INDEX_FILE
        if index_path.is_file():
            index = read_json(index_path, WEIGHTS_INDEX_FILE)
            shards = sorted(set(index.get("weight_map", {}).values()))
            folder = fetch(shards or [WEIGHTS_FILE])
        else:
            folder = fetch([WEIGHTS_FILE])
    except HFValidationError:  # its advice (repo_type=...) is about its own API: not shown
        raise ValueError(
            f"source={repo_id!r} is not an existing folder nor a valid Hub repo id ('owner/name'"
            ", of letters, digits, '-', '_' and '.'): check the folder's path or the repo id"
        ) from None
    except Exception as err:  # one short error, not huggingface_hub's chain of causes
        raise hub_error(repo_id, revision, err) from None
    return folder


def hub_error(repo_id: str, revision: str | None, err: Exception) -> Exception:
    """A ValueError explaining why ``repo_id`` could not be fetched."""
    from huggingface_hub.errors import (
        GatedRepoError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    where = f"{repo_id!r}" + (f" at revision {revision!r}" if revision else "")
    if isinstance(err, LocalEntryNotFoundError):
        cache = hub_cache_dir() or "the default Hugging Face cache"
        if hub_offline():
            advice = (
                "HF_HUB_OFFLINE is set. Unset HF_HUB_OFFLINE (with a connection) to download "
                "it, or pass the path of a local folder."
            )
        else:
            advice = (
                "the Hub could not be reached. Check the connection (and proxy settings) and "
                "try again, or pass the path of a local folder."
            )
        return ValueError(f"{where} is not in {cache} and it cannot be downloaded now: {advice}")
    if isinstance(err, GatedRepoError):
        return ValueError(
            f"{where} is gated: accept its licence on the Hub and log in (huggingface-cli login)"
        )
    if isinstance(err, RevisionNotFoundError):
        return ValueError(f"revision={revision!r} does not exist in {repo_id!r}")
    if isinstance(err, RepositoryNotFoundError):
        return ValueError(
            f"{repo_id!r} is not a local folder and no Hub repo has that id (or it is private: "
            "log in with huggingface-cli login)"
        )
    return ValueError(f"could not fetch {where} from the Hub: {err}")


# ----------------------------------------------------------------------- loading


def resolve_folder(source: str | os.PathLike, *, revision: str | None = None) -> Path:
    """A local folder as it is; anything else is taken as a Hub repo id and downloaded."""
    path = Path(source)
    if path.is_dir():
        return path
    if path.exists():
        raise ValueError(
            f"source={str(source)!r} is a file, not a model folder: pass the folder that holds "
            "config.json (a .gguf file loads with genlab.models.gguf.load_gguf)."
        )
    if looks_like_a_path(source):
        raise ValueError(
            f"source={str(source)!r} is not an existing folder nor a valid Hub repo id: no "
            f"such folder. Check the path (a relative one starts from {os.getcwd()!r}); a Hub "
            "repo id is written 'owner/name'"
        )
    return download_from_hub(str(source), revision=revision)


def looks_like_a_path(source: str | os.PathLike) -> bool:
    """Whether ``source`` can only be a filesystem path, never a Hub repo id ('owner/name'
    or 'name'): a path object, or a text that is absolute, starts with '.' or '~', holds a
    backslash or more than one '/'.

    >>> [looks_like_a_path(s) for s in ("/no/such/dir", "./m", "gpt2", "org/name", "a/b/c")]
    [True, True, False, False, True]
    """
    if not isinstance(source, str):
        return True
    return (
        os.path.isabs(source)
        or source.startswith((".", "~"))
        or "\\" in source
        or source.count("/") > 1
    )


def load_checkpoint(
    source: str | os.PathLike, *, revision: str | None = None, dtype=None, quantization=None
):
    """(model, tokenizer) from a transformers-style folder or Hub repo id, on a built-in decoder.

    dtype: the weights' dtype (None: float32).

    tokenizer is None when the checkpoint has no tokenizer.json. Raises ValueError for a
    missing config.json, missing or corrupt weights, an architecture with no built-in
    decoder, sizes in config.json that the weights contradict (checked on the files'
    headers, before any weight is read), or a tokenizer larger than the model's vocabulary.
    """
    from genlab.models.architectures import build_decoder

    folder = resolve_folder(source, revision=revision)
    config = read_config(folder)
    check_model_type(config, folder)  # before reading any weights
    check_config_fields(config, folder / CONFIG_FILE)
    checkpoint = read_checkpoint(folder)  # sizes checked on the headers before weights are read
    model = build_decoder(
        checkpoint.config,
        checkpoint.state_dict,
        name=checkpoint_name(source, folder),
        generation_defaults=checkpoint.generation_defaults,
        consume=True,  # the checkpoint's own dict: free each tensor once it is packed
        dtype=dtype or torch.float32,
        quantization=quantization,
    )
    return model, checkpoint.tokenizer


def check_config_fields(config: dict, path: Path) -> None:
    """The architecture settings of config.json read as the decoder will read them; a bad
    field (``"rms_norm_eps": "x"``) is a ValueError naming the file and the field."""
    from genlab.models.architectures import read_settings

    try:
        read_settings(config)
    except ValueError as err:
        raise ValueError(
            f"{str(path)!r}: {err}. Fix that field in config.json (or save the model again "
            "with transformers' save_pretrained)."
        ) from None


def check_model_type(config: dict, folder: Path) -> None:
    """ValueError when no built-in decoder handles config.json's model_type."""
    from genlab.models.architectures import supported_model_types

    model_type = config.get("model_type")
    if model_type not in supported_model_types():
        raise ValueError(
            f"model_type={model_type!r} in {str(folder / CONFIG_FILE)!r} has no built-in decoder; "
            f"supported: {supported_model_types()}. Load the model with transformers and pass "
            "it to genlab instead (genlab.load(hf_model, hf_tokenizer))."
        )


def checkpoint_name(source: str | os.PathLike, folder: Path) -> str:
    """A short display name: the repo id, or the folder's name."""
    if Path(source).is_dir():
        return folder.resolve().name
    return str(source)
