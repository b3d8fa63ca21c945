"""Reading generation config files: local folders and files, or the Hugging Face Hub.

>>> GENERATION_CONFIG_NAME
'generation_config.json'
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

GENERATION_CONFIG_NAME = "generation_config.json"


def read_json_dict(path: Path) -> dict[str, Any]:
    """The JSON object in ``path`` as a dict (a clear ValueError for anything else)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path} is not a valid JSON file ({err}); fix or delete it.") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object, got {type(data).__name__}.")
    return data


_COMMIT_RE = re.compile(r"snapshots[\\/]([^\\/]+)[\\/]")


def resolve_config_file(
    name: str | os.PathLike,
    file_name: str,
    *,
    cache_dir,
    force_download,
    local_files_only,
    token,
    revision,
    subfolder,
) -> tuple[Path, str | None]:
    """Local file/folder first, then the Hub (or its cache). Returns (path, commit)."""
    local = Path(name)
    if local.is_file():
        return local, None
    candidate = local / subfolder / file_name if subfolder else local / file_name
    if candidate.is_file():
        return candidate, None
    if local.is_dir():
        raise FileNotFoundError(
            f"folder {local} has no {file_name}; save one with GenerationConfig.save_pretrained "
            "or pass the right config_file_name."
        )
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import HFValidationError

    try:
        resolved = hf_hub_download(
            repo_id=str(name),
            filename=file_name,
            subfolder=subfolder or None,
            revision=revision,
            cache_dir=cache_dir,
            force_download=force_download,
            local_files_only=local_files_only,
            token=token,
        )
    except HFValidationError as err:
        raise ValueError(
            f"{str(name)!r} is neither an existing folder nor a valid Hub repo id ({err})."
        ) from None
    except Exception as err:  # network, missing repo/file, offline cache miss
        offline = local_files_only or os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {
            "1",
            "ON",
            "YES",
            "TRUE",
        }
        advice = (
            "HF_HUB_OFFLINE is set (or local_files_only=True), so only the Hugging Face cache "
            "is read: unset it with a connection to download the file, or pass a local folder."
            if offline
            else "Check the repo id, the revision and the connection, or pass a local folder."
        )
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise OSError(
            f"could not load {file_name} for {str(name)!r} ({reason}). {advice}"
        ) from None
    match = _COMMIT_RE.search(str(resolved))
    return Path(resolved), match.group(1) if match else None
