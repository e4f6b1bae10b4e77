"""Sessions that outlive the kernel (``keep=True``, ``--keep``), and the private files sessions
keep: their tokens and snapshots.

A kept session's container carries no owner's labels (the watchdog and the reaper leave it)
but its notebook's: ``jupyter-sandbox.notebook`` is a hash of the user's uid and the
notebook's path, ``jupyter-sandbox.session`` its name, ``jupyter-sandbox.token`` the SHA-256
of a secret token. The token itself is only in a 0600 file of the user's, in a 0700 folder
named by that hash (`state_dir`), and in the session's server, which learnt it in its first
hello. A new kernel re-attaches only when all agree: the container of this notebook's hash
and name, whose token hash is that of the token in our file, and whose server then proves it
knows the token (an HMAC of a fresh nonce, `_session.greet`). A record, a notebook or another
user's kernel names no token: nothing they hold lets them attach.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._shared import _defaults as default
from .._shared._errors import SandboxConfigError
from . import _pool, _warm
from ._client import KIND, LABEL

if TYPE_CHECKING:
    from docker import DockerClient

    from ._pool import ContainerSetup, Slot

SESSION_DIR_ENV = "JUPYTER_SANDBOX_SESSION_DIR"
"""Where tokens and snapshots are kept (default: beside the durable store)."""
SESSION = f"{LABEL}.session"
NOTEBOOK = f"{LABEL}.notebook"
TOKEN = f"{LABEL}.token"
scope = "default"
"""The notebook this kernel runs (the magics set it from `notebook_scope`)."""


def state_dir() -> Path:
    """This user's folder of this notebook's sessions, made 0700 (and checked to be ours)."""
    root = Path(
        os.environ.get(SESSION_DIR_ENV) or default.default_store_path().parent / "sessions"
    ).expanduser()
    folder = root / notebook_key()
    for path in (root, folder):
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = path.lstat()
        if info.st_uid != os.getuid() or info.st_mode & 0o077 or path.is_symlink():
            raise SandboxConfigError(
                f"{path} must be a folder of yours that no one else can read (chmod 700)"
            )
    return folder


def notebook_key() -> str:
    return hashlib.sha256(f"{os.getuid()}\0{scope}".encode()).hexdigest()[:24]


def _private_write(path: Path, data: bytes) -> None:
    """Write ``path`` 0600 through a fresh file (never following a planted link)."""
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=".part-")
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def _private_read(path: Path) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if info.st_uid != os.getuid() or info.st_mode & 0o077:
            return None
        return file.read()


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create(docker: DockerClient, image: str, setup: ContainerSetup, name: str, token: str) -> Slot:
    """A kept session's container, created and not started: its own process is the waiter
    (as PID 1, so the container ends when its server does), its token saved for re-attach."""
    _private_write(state_dir() / f"{name}.token", token.encode())
    start_env = " ".join(f"{k}={v}" for k, v in _warm.START_ENV.items())
    own = ["sh", "-c", f'{start_env} exec python3 -c "$1" 0', "jupyter-sandbox", _warm.WAITER]
    labels = {KIND: "session", SESSION: name, NOTEBOOK: notebook_key(), TOKEN: token_hash(token)}
    slot = _pool.create_kept(docker, image, setup, own, labels)
    slot.own = False
    return slot


def token_of(name: str) -> str | None:
    data = _private_read(state_dir() / f"{name}.token")
    return None if data is None else data.decode()


def forget(name: str) -> None:
    (state_dir() / f"{name}.token").unlink(missing_ok=True)


def find(docker: DockerClient) -> list[dict[str, Any]]:
    """This notebook's kept sessions that we hold the token of: rows with ``Id``, ``name``,
    ``token``, ``image``."""
    rows = docker.api.containers(
        filters={"label": [f"{KIND}=session", f"{NOTEBOOK}={notebook_key()}"]}
    )
    found = []
    for row in rows:
        labels = row.get("Labels") or {}
        name = labels.get(SESSION, "")
        if not name.isidentifier():
            continue
        token = token_of(name)
        if token is None or labels.get(TOKEN) != token_hash(token):
            continue
        found.append({"Id": row["Id"], "name": name, "token": token, "image": row.get("Image")})
    return found


def store_snapshot(name: str, tag: str, data: bytes, spec: dict[str, Any] | None = None) -> Path:
    """Keep a snapshot's bytes (opaque: never unpickled here) in a private file."""
    folder = state_dir() / "snapshots"
    folder.mkdir(mode=0o700, exist_ok=True)
    path = folder / f"{name}@{tag}.tar"
    _private_write(path, data)
    if spec is not None:
        _private_write(folder / f"{name}@{tag}.json", json.dumps(spec).encode())
    return path


def stored_snapshot(name: str, tag: str | None) -> tuple[Path, dict[str, Any]] | None:
    """A snapshot kept on disk for this notebook (``tag`` None: the newest) and its spec."""
    folder = state_dir() / "snapshots"
    if not folder.is_dir():
        return None
    if tag is None:
        found = sorted(folder.glob(f"{name}@*.tar"), key=lambda p: p.stat().st_mtime)
        if not found:
            return None
        path = found[-1]
    else:
        path = folder / f"{name}@{tag}.tar"
    raw = _private_read(path.with_suffix(".json"))
    try:
        info = path.lstat()
    except OSError:
        return None
    if raw is None or info.st_uid != os.getuid() or info.st_mode & 0o077 or path.is_symlink():
        return None
    try:
        spec = json.loads(raw)
    except ValueError:
        return None
    return (path, spec) if isinstance(spec, dict) else None
