"""Sealing: every blob the store keeps carries an HMAC-SHA256 with the user's key over its
kind, the row it belongs to and the Monty version (`seal`); the key file (`read_key`) is
created 0600 under a temporary name and linked into place, and refused when unsafe.
"""

from __future__ import annotations

import hmac
import os
import secrets
import tempfile
from pathlib import Path

from ..._shared._errors import StoreError
from ._files import check_file, check_private_file, reason

KEY_BYTES = 32


def run_context(
    run_id: str, scope: str, cell: str, forked_from: tuple[str, int] | None
) -> tuple[str, ...]:
    forked = "" if forked_from is None else f"{forked_from[0]}:{forked_from[1]}"
    return run_id, scope, cell, forked


def seal(
    keyed: hmac.HMAC, kind: str, context: tuple[str, ...], monty: str, payload: bytes
) -> bytes:
    """HMAC-SHA256 (``keyed``: one with the key taken in) over length-prefixed parts (no two
    different tuples encode alike), then the payload."""
    mac = keyed.copy()
    encoded = [part.encode("utf-8", "surrogatepass") for part in (kind, *context, monty)]
    mac.update(b"".join([len(part).to_bytes(8, "big") + part for part in encoded]))
    mac.update(payload)  # not concatenated: a dump may be megabytes
    return mac.digest()


def read_key(path: Path) -> bytes:
    """The user's signing key at ``path``, created if missing, refused if unsafe (checked as
    `check_file` checks, on the descriptor it is then read from)."""
    fix = f"run rm {path} (blobs it signed can then no longer be loaded)"
    what = "the store's key file"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return _new_key(path)
    except OSError as error:
        check_file(path, what)  # a link, a socket, another user's: said as such
        raise StoreError(f"cannot read {what} {path}: {reason(error)}; {fix}") from error
    with os.fdopen(fd, "rb") as file:
        check_private_file(path, os.fstat(file.fileno()), what)
        key = file.read(KEY_BYTES + 1)  # one more: a longer file is told apart
    if len(key) != KEY_BYTES:
        raise StoreError(f"{what} {path} holds {len(key)} bytes, not {KEY_BYTES}: {fix}")
    return key


def _new_key(path: Path) -> bytes:
    """Write a key under a temporary name (0600, O_EXCL) and link it into place: a process
    racing us reads either no key or the whole of one. The loser of a race reads the winner's."""
    key = secrets.token_bytes(KEY_BYTES)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".key-")  # 0600, O_EXCL
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(key)
            file.flush()
            os.fsync(file.fileno())
        os.link(temporary, path)
    except FileExistsError:
        return read_key(path)
    finally:
        os.unlink(temporary)
    return key
