"""A ``%%sandbox`` cell's `File` and `Dir` outputs, put where JupyterLab can open them.

A run's outputs come back to a private temp folder outside the JupyterLab root, which no link
in the notebook can reach. So the magic (only the magic: ``create().run()`` returns the temp
`File` as before) links each one into ``sandbox-outputs/cell<N>-<random>/<name>`` beside the
notebook (the kernel's working directory, which JupyterLab's contents API serves), and the
record carries the relative path, name and size for the renderers to draw as a link. The
notebook variable becomes that copy (`magics._sandbox`), so the file it reads is the file the
link opens.

The files are the container's, so untrusted: the name is the ``--out`` variable (an
identifier the user wrote, never one the container chose), a `Dir`'s entries were already
checked on the way out (`sandbox._io.extract_outputs`: no ``..``, no special files, links only
inside the output) and are checked again here (regular files, folders and links only). A
folder is new for every run (``mkdtemp``: never a user's file overwritten, two cells writing
the same name keep both), private (0700) like every folder the package writes, and each file
is a copy of its own (`_copy` says why not a hard link). Past
``SandboxMagics.link_limit`` (`_defaults.LINK_LIMIT`) bytes for one run the file stays where
it is and the record says so in one line; a limit of 0 links nothing (the records show the temp
paths, as before).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from ..records import FileLink
from ..sandbox import Dir, File

FOLDER = "sandbox-outputs"
"""The folder beside the notebook that holds the cells' linked outputs."""


class _Refused(Exception):
    """An output that cannot be linked: the message says why, in a clause."""


def link_outputs(
    outputs: Mapping[str, Any], *, root: Path, cell: int, limit: int
) -> dict[str, FileLink | str]:
    """Link each `File`/`Dir` of ``outputs`` into a new folder under ``root / FOLDER``, in
    declaration order until ``limit`` bytes: its `FileLink`, or a one-line note why not."""
    paths = {name: value for name, value in outputs.items() if isinstance(value, File | Dir)}
    if not paths or limit <= 0:
        return {}
    done: dict[str, FileLink | str] = {}
    folder: Path | None = None
    spent = 0
    for name, value in paths.items():
        source = Path(value.path)
        try:
            size = _size(source, isinstance(value, Dir))
            if spent + size > limit:
                raise _Refused(
                    f"is {_human(size)}, over the {_human(limit)} a run links beside the "
                    "notebook (%config SandboxMagics.link_limit = '1g' raises it)"
                )
            folder = folder or _new_folder(root, cell)
            target = folder / (name if isinstance(value, Dir) else name + _extension(source))
            if isinstance(value, Dir):
                shutil.copytree(source, target, symlinks=True, copy_function=_copy)
            else:
                _copy(source, target)
        except (_Refused, OSError) as exc:
            why = str(exc) if isinstance(exc, _Refused) else f"could not be linked ({exc})"
            done[name] = f"{name} {why}: it stays at {source}"
            continue
        spent += size
        relative = target.relative_to(root).as_posix()
        done[name] = {"path": relative, "name": target.name, "size": size, "kind": _kind(value)}
    return done


_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", ".png"),
    (b"\xff\xd8\xff", ".jpg"),
    (b"GIF8", ".gif"),
    (b"%PDF-", ".pdf"),
    (b"PK\x03\x04", ".zip"),
    (b"\x1f\x8b", ".gz"),
)
"""Leading bytes of the formats JupyterLab (or the browser, downloading) opens by name."""
_SNIFF = 4096


def _extension(path: Path) -> str:
    """An extension for a file named after its ``--out`` variable (``chart``), from its
    first bytes: JupyterLab picks a viewer by name, and a PNG named ``chart`` would open as
    text. UTF-8 text is ``.txt`` (``.svg`` when it is an SVG); anything else keeps no
    extension (JupyterLab offers to open it as text)."""
    with open(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC), "rb") as file:
        head = file.read(_SNIFF)
    for magic, extension in _MAGIC:
        if head.startswith(magic):
            return extension
    try:
        text = head.decode()
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 3:  # not just a character cut at the end of the sniff
            return ""
        text = head[: exc.start].decode()
    if "\x00" in text:
        return ""
    start = text.lstrip()
    svg = start.startswith(("<svg", "<?xml")) and "<svg" in start[:1024]
    return ".svg" if svg else ".txt"


def _kind(value: File | Dir) -> Literal["file", "dir"]:
    return "dir" if isinstance(value, Dir) else "file"


def _size(path: Path, is_dir: bool) -> int:
    """Bytes of the regular files at ``path`` (links counted as nothing, never followed)."""
    if not is_dir:
        return _regular(path).st_size
    total = 0
    for folder, dirs, files in os.walk(path):
        for entry in (*dirs, *files):
            info = os.lstat(os.path.join(folder, entry))
            if stat.S_ISREG(info.st_mode):
                total += info.st_size
            elif not (stat.S_ISDIR(info.st_mode) or stat.S_ISLNK(info.st_mode)):
                raise _Refused(f"holds {entry!r}, which is not a file, folder or link")
    return total


def _regular(path: Path | str) -> os.stat_result:
    info = os.lstat(path)
    if not stat.S_ISREG(info.st_mode):
        raise _Refused(f"is not a regular file ({os.fspath(path)!r})")
    return info


def _new_folder(root: Path, cell: int) -> Path:
    """A new private folder for this run under ``root / FOLDER`` (made private if absent);
    refused when that name is a link or a file: nothing is written through it."""
    base = root / FOLDER
    with contextlib.suppress(FileExistsError):
        os.mkdir(base, 0o700)
    info = os.lstat(base)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise _Refused(f"was not linked: {base} is not a folder of this user (a link or a file)")
    return Path(tempfile.mkdtemp(prefix=f"cell{cell}-", dir=base))


def _copy(source: str | Path, target: str | Path) -> None:
    """Copy a regular file to a new file, never through a link nor over an existing file.

    A copy, not a hard link: Jupyter's contents API saves an edited file in place, so editing
    a hard-linked file in JupyterLab would change the run's own `File` (and a ``--cache``
    entry replaying it). ``copy_file_range`` lets the file system share the blocks where it
    can (a reflink on btrfs and XFS: no disk spent until one side changes); elsewhere it is a
    kernel-side copy, and a plain read/write loop where even that is missing.
    """
    _regular(source)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    with (
        open(os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC), "rb") as src,
        open(os.open(target, flags, 0o600), "wb") as out,
    ):
        try:
            while os.copy_file_range(src.fileno(), out.fileno(), _CHUNK_BYTES):
                pass
            return
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL):
                raise
        src.seek(0)
        out.seek(0)
        out.truncate()
        shutil.copyfileobj(src, out)


_CHUNK_BYTES = 1 << 30
"""Bytes one ``copy_file_range`` call may copy (it returns 0 at the end of the file)."""


def _human(size: int) -> str:
    from ..display import size_text  # the renderers' words for a size

    return size_text(size)
