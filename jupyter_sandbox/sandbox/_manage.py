"""Housekeeping through labels: list and prune our images, reap containers of dead kernels."""

from __future__ import annotations

import os
import socket
from typing import Any

from ._client import KIND, LABEL, OWNER_HOST, OWNER_PID, client
from ._pool import settle


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reap_orphans() -> list[str]:
    """Remove run containers whose owning process (on this host) is gone; their ids.

    Called when the extension loads: a kernel killed with SIGKILL runs no atexit handler.
    """
    engine = client()  # first: it imports the SDK safely
    from docker.errors import APIError

    host = socket.gethostname()
    reaped = []
    # the plain list call: containers may vanish meanwhile (inspecting each one would race)
    for row in engine.api.containers(all=True, filters={"label": f"{KIND}=run"}):
        labels = row.get("Labels") or {}
        pid = labels.get(OWNER_PID, "")
        if labels.get(OWNER_HOST) != host or not pid.isdigit() or _alive(int(pid)):
            continue
        try:
            engine.api.remove_container(row["Id"], force=True)
        except APIError as exc:  # gone already, or its removal is under way
            if exc.status_code in (404, 409):
                continue
            raise
        reaped.append(str(row["Id"]))
    return reaped


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
