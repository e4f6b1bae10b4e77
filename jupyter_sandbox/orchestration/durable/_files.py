"""The store's files and folder are private: a regular file of this user that group and
others cannot use, in a folder others cannot write to; SQLite's side files are checked alike.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from ..._shared._errors import StoreError


def make_file(path: Path, *, held: bool) -> None:
    """Create the store's file 0600 if it is missing; else check it (`check_file`).

    ``held``: this process has the store open already. Then the file is only looked at
    (``lstat``), never opened here: closing any descriptor of a database file drops every
    POSIX lock this process holds on it, so a second `Store` of a path this process already
    has open would silently unlock the first one's transactions (and another kernel could
    then checkpoint the WAL under it: "database disk image is malformed"; SQLite's "How To
    Corrupt", 2.2)."""
    try:
        os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
        return
    except FileExistsError:
        pass
    check_file(path, "the store", held=held)


SIDE_FILES = ("-wal", "-shm", "-journal")
"""The files SQLite keeps beside the store: the WAL holds recent writes (tools' results,
code) and the ``-shm`` index says which of them count. A ``-wal`` another user planted
before the store was opened would receive every write (readable by them) and one they wrote
would be read as the store's own, so each is checked like the store itself."""


def check_side_files(path: Path, *, held: bool) -> None:
    """Check the store's `SIDE_FILES` that exist (SQLite makes them 0600 and ours)."""
    for suffix in SIDE_FILES:
        check_file(Path(f"{path}{suffix}"), f"the store's {suffix[1:]} file", held=held)


def check_file(path: Path, what: str, *, held: bool = False) -> os.stat_result | None:
    """Refuse ``path`` (one line, with the command that fixes it) unless it is a regular
    file of this user that group and others cannot use; None if it does not exist.

    Opened without following a link and without blocking (``O_NOFOLLOW|O_NONBLOCK``: a FIFO
    planted there would hang the open forever), then checked with ``fstat``, so what is
    checked is what was opened; ``held`` (this process has SQLite's descriptors on it, see
    `make_file`): looked at with ``lstat`` only, which neither follows nor blocks either."""
    try:
        if held:
            info = os.lstat(path)
        else:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            try:
                info = os.fstat(fd)
            finally:
                os.close(fd)
    except FileNotFoundError:
        return None
    except OSError as error:  # a link (ELOOP), a socket (ENXIO), another user's 0600 file
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return None
        if stat.S_ISREG(info.st_mode) and error.errno != errno.ELOOP:
            check_private_file(path, info, what)
            raise
    check_private_file(path, info, what)
    return info


def check_private_folder(folder: Path) -> None:
    """Refuse a store folder others may write to (``/tmp``): anyone there could put their
    own ``-wal`` file beside the store (which then receives its writes) or swap the store.
    Root's folders are fine (only root writes them)."""
    info = os.stat(folder)
    if info.st_mode & stat.S_IWOTH or info.st_uid not in (os.geteuid(), 0):
        raise StoreError(
            f"the store's folder {folder} is writable by others or belongs to uid "
            f"{info.st_uid} (mode {stat.S_IMODE(info.st_mode):04o}): put the store in a "
            "folder of your own, e.g. the default ~/.local/share/jupyter-sandbox"
        )


def check_private_file(path: Path, info: os.stat_result, what: str) -> None:
    """Refuse a file of the store (``what``) that is not a regular file, that another user
    owns or that group or others can use: one line, ending in the command that fixes it."""
    if stat.S_ISDIR(info.st_mode):  # a path mistyped, not planted: no rm advice for it
        raise IsADirectoryError(errno.EISDIR, f"{path} is a folder", str(path))
    if not stat.S_ISREG(info.st_mode):
        kind = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "not a regular file"
        raise StoreError(f"{what} {path} is {kind}: run rm {path}")
    if info.st_uid != os.geteuid():
        raise StoreError(
            f"{what} {path} belongs to uid {info.st_uid}, not to you "
            f"(uid {os.geteuid()}): run rm {path}"
        )
    if info.st_mode & 0o077:
        raise StoreError(
            f"{what} {path} is readable or writable by others "
            f"(mode {stat.S_IMODE(info.st_mode):04o}): run chmod 600 {path}"
        )


def make_folder(folder: Path) -> None:
    """Create ``folder`` and its missing parents, each 0700 (what the store holds is private)."""
    if folder.exists() and not folder.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(folder))
    missing = []
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    for path in reversed(missing):
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:  # another process made it meanwhile
            continue
        os.chmod(path, 0o700)  # whatever the umask


def reason(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error) or type(error).__name__
