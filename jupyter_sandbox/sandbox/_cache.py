"""Opt-in result cache: the same image, code, inputs and output spec give the same outputs.

Keyed on the staged input files (so `File`/`Dir` inputs count by content, not path) and the
image id (so a rebuilt image misses). Entries hold encoded outputs, never pickles; an entry whose
`File`/`Dir` output has since been deleted is a miss.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from . import _codec
from ._types import Dir, File

_VERSION = 1


def cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(root) / "jupyter-sandbox" / "results"


def _hash_tree(digest: Any, root: Path) -> None:
    for path in sorted(root.rglob("*")):
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        if path.is_file():
            digest.update(hashlib.sha256(path.read_bytes()).digest())


def cache_key(*, image_id: str, program: dict[str, Any], inputs_dir: Path) -> str:
    """Hash of what determines the outputs; ``program`` holds code/command/types/env names."""
    digest = hashlib.sha256(json.dumps([_VERSION, image_id, program], sort_keys=True).encode())
    _hash_tree(digest, inputs_dir)
    return digest.hexdigest()


def load(key: str) -> dict[str, Any] | None:
    """The cached outputs (declaration order) and transcript, or None on a miss."""
    path = cache_dir() / f"{key}.json"
    try:
        entry = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    outputs: dict[str, Any] = {}
    for name, (tag, data) in entry["outputs"].items():
        if tag in _codec.PATH_TAGS:
            if not Path(data).exists():
                return None
            outputs[name] = (File if tag == "file" else Dir)(data)
        else:
            outputs[name] = _codec.decode(tag, base64.b64decode(data))
    return {**entry, "outputs": outputs}


def store(key: str, outputs: dict[str, Any], stdout: str, stderr: str) -> None:
    encoded: dict[str, tuple[str, str]] = {}
    for name, value in outputs.items():
        if isinstance(value, File | Dir):
            encoded[name] = ("file" if isinstance(value, File) else "dir", str(value.path))
        else:
            tag = _codec.infer(value)
            encoded[name] = (tag, base64.b64encode(_codec.encode(tag, value)).decode())
    path = cache_dir() / f"{key}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"outputs": encoded, "stdout": stdout, "stderr": stderr}))
    tmp.replace(path)
