"""Opt-in result cache: the same image, code, inputs and output spec give the same outputs.

Keyed on the staged input files (so `File`/`Dir` inputs count by content, not path) and the
image id (so a rebuilt image misses). Entries hold encoded outputs, never pickles; an entry whose
`File`/`Dir` output has since been deleted, or is no longer ours alone (`_still_ours`), is a
miss.

A run's secrets decide its outputs too, so their values enter the key, through an HMAC with a
random key of this cache (a plain hash of a short token could be brute-forced from the file
name): a changed secret misses. A result that holds a secret's value (an output equal to the
token, or holding it in any spelling `_secrets.forms` knows) is never written: `store` refuses
it and the run's record says so (`NOT_KEPT`). Entries would hold it base64-encoded, where no
masking finds it, in a file that outlives the kernel. The folder is 0700 and every file 0600
all the same.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import os
import secrets as random
import stat
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .._shared._secrets import holds_secret
from . import _codec
from ._types import Dir, File

_VERSION = 2
_KEY_FILE = ".hmac-key"
NOT_KEPT = "not kept in the result cache: an output holds a secret's value"
"""The record's ``uncached`` for a result `store` refused."""


def cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(root) / "jupyter-sandbox" / "results"


def _private_dir() -> Path:
    """The cache folder, created (and kept) readable by its owner only."""
    root = cache_dir()
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(root, 0o700)
    return root


def _write_private(data: bytes) -> Path:
    """A new file of the cache holding ``data``, created 0600 (never readable by others, not
    even for a moment); the caller moves it into place."""
    fd, name = tempfile.mkstemp(dir=_private_dir(), suffix=".tmp")
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    return Path(name)


def _hmac_key() -> bytes:
    """This cache's random HMAC key, made on first use (linked into place whole, so two
    kernels racing both end up with the first one)."""
    path = _private_dir() / _KEY_FILE
    if not path.exists():
        tmp = _write_private(random.token_bytes(32))
        try:
            with contextlib.suppress(FileExistsError):
                os.link(tmp, path)
        finally:
            tmp.unlink()
    return path.read_bytes()


def cache_key(
    *,
    image_id: str,
    program: Mapping[str, Any],
    inputs: Iterable[bytes],
    secrets: Mapping[str, str],
) -> str:
    """Hash of what determines the outputs; ``program`` holds code/command/types/env names,
    ``inputs`` the staged inputs' names and digests (`_staging.Staged.fingerprint`, taken as
    they were written), ``secrets`` the secrets' values (keyed by an HMAC, never hashed in
    clear)."""
    digest = hashlib.sha256(json.dumps([_VERSION, image_id, program], sort_keys=True).encode())
    if secrets:
        values = json.dumps(secrets, sort_keys=True).encode()
        digest.update(hmac.new(_hmac_key(), values, hashlib.sha256).digest())
    for chunk in inputs:
        digest.update(chunk)
    return digest.hexdigest()


def load(key: str) -> dict[str, Any] | None:
    """The cached outputs (declaration order) and transcript, or None on a miss."""
    path = _private_dir() / f"{key}.json"  # closes a folder an older version left open
    try:
        entry = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    outputs: dict[str, Any] = {}
    for name, (tag, data) in entry["outputs"].items():
        if tag in _codec.PATH_TAGS:
            if not _still_ours(Path(data), tag):
                return None
            outputs[name] = (File if tag == "file" else Dir)(data)
        else:
            outputs[name] = _codec.decode(tag, base64.b64decode(data))
    return {"displays": [], **entry, "outputs": outputs}  # an entry from before displays


def _still_ours(path: Path, tag: str) -> bool:
    """Whether a cached `File`/`Dir` output at ``path`` is still the one the run kept: the
    file (``tag`` "file") or folder itself, in the private temp folder the run moved it to
    (ours, no group/other bits), neither a link. Those folders sit in ``/tmp``, where anyone
    can list their names; once the reaper removes one (its kernel gone), another local user
    can make it again with their own file at the same path, which a plain ``exists()``
    would serve as the sandbox's output."""
    uid = os.geteuid()
    try:  # lstat: a link is neither a regular file nor a folder
        folder, entry = os.lstat(path.parent), os.lstat(path)
    except OSError:
        return False
    private = stat.S_ISDIR(folder.st_mode) and not folder.st_mode & 0o077
    kind = stat.S_ISREG if tag == "file" else stat.S_ISDIR
    return private and folder.st_uid == uid and kind(entry.st_mode)  # only we write there


def store(
    key: str,
    outputs: dict[str, Any],
    stdout: str,
    stderr: str,
    secrets: tuple[str, ...],
    displays: list[dict[str, Any]],
) -> bool:
    """Keep a run's result under ``key``; False (nothing written) when the outputs, the
    transcript or the displays hold the value of one of the run's ``secrets``. A `File`/`Dir`
    is kept as its path, so its contents are not searched: they are the run's own folder,
    kept either way. Displays are kept as the run checked them (`_displays`)."""
    if holds_secret([outputs, stdout, stderr, displays], secrets):
        return False
    encoded: dict[str, tuple[str, str]] = {}
    for name, value in outputs.items():
        if isinstance(value, File | Dir):
            encoded[name] = ("file" if isinstance(value, File) else "dir", str(value.path))
        else:
            tag = _codec.infer(value)
            encoded[name] = (tag, base64.b64encode(_codec.encode(tag, value)).decode())
    entry = {"outputs": encoded, "stdout": stdout, "stderr": stderr, "displays": displays}
    _write_private(json.dumps(entry).encode()).replace(cache_dir() / f"{key}.json")
    return True
