"""The journal behind ``--resume`` and the cache: one file per generation, keyed by what
decides its result (prompt, samples, model, options).

Each model reply and each test run is appended to the generation's journal as it happens. A
generation taken up again (``resume=True``) answers from the journal, in order, what it holds,
without asking the model or running the sandbox again, then goes on live; a journal that ended
in a result is the cache: the same key gives that result and asks no model at all.

The orchestration's durable store keeps Monty runs (snapshots, calls, sessions, approvals);
a generation is none of those, so it has this small store of its own: JSON files (no pickle)
in a private folder, each read back as untrusted data (a file that does not parse, or holds
entries of another shape, is a journal with nothing in it).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

VERSION = 1
_KINDS = {"reply": {"text": str}, "tests": {"output": str}}


def key_of(parts: dict[str, Any]) -> str:
    blob = json.dumps({"version": VERSION, **parts}, sort_keys=True, default=repr)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


class Journal:
    """One generation's entries: those read back (to answer first), then those appended."""

    def __init__(self, folder: Path | None, key: str, *, resume: bool, cached: bool) -> None:
        self.path = None if folder is None else folder / f"{key}.json"
        self.entries: list[dict[str, Any]] = []
        self.done = False
        self.replay: list[dict[str, Any]] = []
        if self.path is None:
            return
        stored, done = _read(self.path)
        if (done and cached) or (resume and not done):
            self.replay = list(stored)
            self.done = done

    def next(self, kind: str) -> dict[str, Any] | None:
        """The next journaled entry if it is a ``kind``; else replay stops there."""
        if self.replay and self.replay[0].get("kind") == kind:
            entry = self.replay.pop(0)
            self.entries.append(entry)
            return entry
        self.replay = []
        return None

    @property
    def replaying(self) -> bool:
        return bool(self.replay)

    def add(self, entry: dict[str, Any]) -> None:
        self.replay = []
        self.entries.append(entry)
        self._write(done=False)

    def finish(self, success: bool) -> None:
        """Mark the journal a result (only a success is one the cache gives again)."""
        self._write(done=success)

    def _write(self, *, done: bool) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        text = json.dumps({"version": VERSION, "done": done, "entries": self.entries})
        handle, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=".journal-")
        try:
            with os.fdopen(handle, "w") as out:
                out.write(text)
            os.replace(temporary, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise


def _read(path: Path) -> tuple[list[dict[str, Any]], bool]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return [], False
    if not isinstance(data, dict) or data.get("version") != VERSION:
        return [], False
    entries = data.get("entries")
    if not isinstance(entries, list) or not all(_valid(e) for e in entries):
        return [], False
    return entries, data.get("done") is True


def _valid(entry: object) -> bool:
    if not isinstance(entry, dict):
        return False
    fields = _KINDS.get(entry.get("kind"))  # type: ignore[arg-type]
    return fields is not None and all(isinstance(entry.get(k), t) for k, t in fields.items())
