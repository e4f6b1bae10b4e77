"""Declared types: what a user may write (``int``, ``"int"``, ``File``...) and what a value is.

Declarations normalise to the codec's tags so the rest of the engine handles strings only; a
type we cannot round-trip exactly is refused at `create()`, before anything runs.
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._shared._errors import SandboxConfigError
from ._codec import TAGS, infer


@dataclass(frozen=True)
class File:
    """A file on the host. As an input it is mounted read-only at ``/var/inputs/<name>``; as an
    output the code writes ``/var/outputs/<name>`` and gets back a `File` on the host."""

    path: Path

    def __init__(self, path: str | os.PathLike[str]) -> None:
        object.__setattr__(self, "path", Path(path))

    def __fspath__(self) -> str:
        return str(self.path)

    def read_text(self) -> str:
        return self.path.read_text()

    def read_bytes(self) -> bytes:
        return self.path.read_bytes()


@dataclass(frozen=True)
class Dir:
    """A directory on the host, mounted and returned like `File`."""

    path: Path

    def __init__(self, path: str | os.PathLike[str]) -> None:
        object.__setattr__(self, "path", Path(path))

    def __fspath__(self) -> str:
        return str(self.path)


_BY_TYPE: dict[Any, str] = {
    int: "int",
    float: "float",
    bool: "bool",
    str: "str",
    bytes: "bytes",
    None: "none",
    type(None): "none",
    dt.datetime: "datetime",
    dt.date: "date",
    dt.timedelta: "timedelta",
    list: "json",
    dict: "json",
    File: "file",
    Dir: "dir",
}
_ALIASES = {"list": "json", "dict": "json", "nonetype": "none"}


def type_tag(declared: Any) -> str:
    """The codec tag for a declared type (a Python type, or its name as in ``--out x:int``)."""
    if isinstance(declared, str):
        tag = declared.strip().lower().rsplit(".", 1)[-1]
        tag = _ALIASES.get(tag, tag)
        if tag in TAGS:
            return tag
    else:
        try:
            return _BY_TYPE[declared]
        except (KeyError, TypeError):
            pass
    supported = (
        "int, float, str, bool, bytes, None, datetime, date, timedelta, list, dict, File, Dir"
    )
    raise SandboxConfigError(f"unsupported type {declared!r}; supported: {supported}")


def infer_tag(value: Any) -> str:
    """The tag of a value, for inputs declared without a type."""
    if isinstance(value, File | Dir):
        return _BY_TYPE[type(value)]
    try:
        return infer(value)
    except TypeError:
        raise SandboxConfigError(
            f"cannot send a {type(value).__name__} into a sandbox; wrap paths in File/Dir, "
            "or convert to a supported type"
        ) from None
