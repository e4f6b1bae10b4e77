"""Housekeeping: list and prune our images; reap the containers and temp folders of dead kernels."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from typing import Any

from .._shared._owner import folder_owner
from . import _egress
from ._client import KIND, LABEL, client, orphaned
from ._pool import settle

KEPT_FOLDERS = frozenset({"out"})
"""Temp folder kinds the reaper leaves alone. ``out`` folders hold the `File`/`Dir` values a
run returned: the user's results, which a saved notebook or another program may still name.
A kernel never removes them, even at a clean exit, so a crash must not remove them either."""


def reap_orphans() -> list[str]:
    """Remove run containers whose owning process (on this host) is gone; their ids.

    Called when the extension loads: a kernel killed with SIGKILL runs no atexit handler.
    A zombie owner or a pid now used by another process counts as gone (see `_owner`).
    """
    engine = client()  # first: it imports the SDK safely
    from docker.errors import APIError

    reaped = []
    # the plain list call: containers may vanish meanwhile (inspecting each one would race)
    for row in engine.api.containers(all=True, filters={"label": f"{KIND}=run"}):
        if not orphaned(row.get("Labels") or {}):
            continue
        try:
            engine.api.remove_container(row["Id"], force=True)
        except APIError as exc:  # gone already, or its removal is under way
            if exc.status_code in (404, 409):
                continue
            raise
        reaped.append(str(row["Id"]))
    return reaped + _egress.remove_owned(engine)  # allow-lists' proxies and networks


def reap_folders() -> list[str]:
    """Remove the temp folders dead kernels left (runs, builds, Monty launchers); their paths.

    Needs no Docker. Only folders directly in `tempfile.gettempdir`, whose name says which
    process made them (`_owner.temp_prefix`), that are real directories (never a link),
    belong to our uid and whose owner is provably dead; never `KEPT_FOLDERS`. ``rmtree``
    does not follow links inside them.
    """
    root = tempfile.gettempdir()
    uid = os.getuid()
    reaped = []
    with os.scandir(root) as entries:
        for entry in entries:
            named = folder_owner(entry.name)
            if named is None or named[0] in KEPT_FOLDERS:
                continue
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:  # gone meanwhile
                continue
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid or named[1].alive():
                continue
            _remove_tree(entry.path)
            reaped.append(entry.path)
    return reaped


def _remove_tree(path: str) -> None:
    """``rmtree`` without following links; a folder nested past Python's recursion limit (a
    dead kernel's copy of a hostile ``Dir``) goes through ``rm``, which has no such limit: the
    reaper runs on ``%load_ext`` and must never fail it."""
    try:
        shutil.rmtree(path, ignore_errors=True)
    except RecursionError:
        subprocess.run(["rm", "-rf", "--one-file-system", "--", path], check=False)


def list_images() -> list[dict[str, Any]]:
    """Our images (base and built environments), newest first."""
    rows = []
    for image in client().images.list(filters={"label": LABEL}):
        labels = image.labels or {}
        rows.append(
            {
                "tags": list(image.tags),
                "id": image.short_id,
                "kind": labels.get(KIND, "?"),
                "size_mb": round(image.attrs.get("Size", 0) / 1e6, 1),
                "created": image.attrs.get("Created", ""),
                "packages": labels.get(f"{LABEL}.packages", ""),
                "system_packages": labels.get(f"{LABEL}.system-packages", ""),
            }
        )
    return sorted(rows, key=lambda row: str(row["created"]), reverse=True)


def prune(*, include_base: bool = False) -> list[str]:
    """Remove our environment images (and the base too with ``include_base``); removed tags.

    Images a container still uses are skipped (Docker refuses), not forced.
    """
    engine = client()
    from docker.errors import APIError

    settle()  # our finished runs and spare containers would hold their images
    removed = []
    kinds = ("env", "base") if include_base else ("env",)
    for image in engine.images.list(filters={"label": LABEL}):
        if (image.labels or {}).get(KIND) not in kinds:
            continue
        for tag in image.tags or [image.id]:
            try:
                engine.images.remove(tag)
            except APIError:
                continue
            removed.append(tag)
    return removed
