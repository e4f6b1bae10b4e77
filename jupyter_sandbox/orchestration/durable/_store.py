"""The durable store: sessions, run journals and checkpoints that outlive the kernel.

One SQLite file (standard library), shared by every kernel of the user:

- **Concurrency.** WAL (readers never block the writer), a busy timeout, and every write in a
  short ``BEGIN IMMEDIATE`` transaction (or one statement, its own transaction): a write
  takes the lock before it reads, so two processes never both hold a read lock that each must
  upgrade (the case where SQLite answers "database is locked" at once instead of waiting).
  Threads of one process share one
  connection behind a lock; a forked child opens its own. ``synchronous=NORMAL``: a commit
  survives the process being killed (the case that matters: a kernel killed mid-run), not
  necessarily a power cut.
- **Integrity.** Every blob (a Monty dump, a pickled call record, a run's code and tools) is
  sealed: HMAC-SHA256 with a per-user key over its kind, the row it belongs to (so a sealed
  blob cannot be moved to another run or call), the ``pydantic-monty`` version and the bytes.
  A blob whose seal does not match, or that another Monty version saved, is refused with a
  `StoreError` and never loaded. The key is the file ``key`` beside the store: 32 random bytes,
  created 0600 under a temporary name and linked into place (so no process ever reads a
  half-written key), and refused when another user owns it or group/others can read it. So
  is a store file (it holds tools' results, unsealed, and code), each of SQLite's files
  beside it (``-wal``, ``-shm``, ``-journal``: a ``-wal`` planted by a group member in a
  group-writable folder would receive our writes), anything there that is not a regular
  file (a FIFO planted as ``key`` would hang the first cell; each is opened
  ``O_NOFOLLOW|O_NONBLOCK`` and checked with ``fstat``), and a folder others may write to
  (``/tmp``: anyone could swap the store or put their own ``-wal`` file beside it). A
  group-writable folder is accepted (umask 002 setups): a file swapped in there between the
  check and SQLite's open is the one gap left; ``chmod g-w`` on the folder closes it.
- **Pickle.** Call records hold tool results, which are arbitrary Python values, so they are
  pickled. Only bytes this store sealed itself are ever unpickled, after their seal checked:
  a forged pickle needs the key. A value pickle cannot store, or could not load again, becomes
  a `HandleMarker` (``{"handle": <type name>}``, never its repr); the engine decides what that
  means.
- **Bounded growth.** `new_run` keeps the last ``keep`` runs of its cell and ``total`` runs in
  all; a paused run is never dropped (a person may approve it hours later). The space they
  held is reused; `prune` also gives it back to the file system.
- **Owners.** A run records the process running it (`_owner.Owner`: pid, start time, boot
  id, PID namespace, and the host), set when it starts and when a process claims it: a run
  left ``running`` is taken up only once that process is gone (see `_runs`).
- **Schema version.** The ``meta`` table holds the schema version; a store from a newer
  release is refused, not guessed at. Version 2 added the runs' owner and the checkpoint's
  waiting call; a version 1 store is migrated when first opened (its checkpoints have no call
  stored: `Checkpoint.call` is None for them). Version 3 added each run's size in bytes
  (``runs.size``), counted from its rows when migrated.
- **Size** (`make_room`). Each run counts its bytes (header, call records, latest snapshot)
  as it writes them; after each write the store evicts ended runs oldest-first until the
  run's cell holds at most ``caps.store_cell`` and the store ``caps.store_total``
  (`_keep.Keep`; paused runs are never evicted, but count, as do sessions and other kernels'
  running runs), gives the freed pages back to the file system (incremental vacuum, the WAL
  checkpointed and cut to `WAL_KEPT`) and tells the run how many bytes it may still write
  (its own ``caps.store_run`` included): `_durable.Durable` keeps later values as summaries.
  A file made before incremental vacuum was set (``auto_vacuum`` NONE) is rebuilt once, when
  first opened, so that it can shrink.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import hmac
import importlib.metadata
import json
import os
import pickle
import re
import secrets
import socket
import sqlite3
import stat
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from ..._errors import SandboxConfigError, StoreError
from ..._grammar import new_run_id
from ..._owner import Owner, me, parse_token
from .._keep import Keep
from .._values import HandleMarker as HandleMarker

MONTY_VERSION = importlib.metadata.version("pydantic-monty")
"""Every blob is tagged with it: Monty dumps load only into the version that wrote them."""

SCHEMA_VERSION = 3

RunStatus = Literal["running", "paused", "ok", "error", "interrupted"]

KEY_BYTES = 32
_BUSY_MS = 30_000
"""How long a write waits for another process's write (each holds the lock ~1 ms)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, scope TEXT NOT NULL, cell TEXT NOT NULL, status TEXT NOT NULL,
    created REAL NOT NULL, updated REAL NOT NULL, forked_run TEXT, forked_call INTEGER,
    monty TEXT NOT NULL, mac BLOB NOT NULL, payload BLOB NOT NULL, owner TEXT,
    size INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS runs_by_cell ON runs (scope, cell, created);
CREATE INDEX IF NOT EXISTS runs_by_age ON runs (created);
CREATE TABLE IF NOT EXISTS calls (
    run_id TEXT NOT NULL REFERENCES runs ON DELETE CASCADE, idx INTEGER NOT NULL,
    monty TEXT NOT NULL, mac BLOB NOT NULL, payload BLOB NOT NULL,
    PRIMARY KEY (run_id, idx));
CREATE TABLE IF NOT EXISTS checkpoints (
    run_id TEXT PRIMARY KEY REFERENCES runs ON DELETE CASCADE, saved REAL NOT NULL,
    monty TEXT NOT NULL, mac BLOB NOT NULL, payload BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS sessions (
    scope TEXT NOT NULL, name TEXT NOT NULL, names TEXT NOT NULL, size INTEGER NOT NULL,
    updated REAL NOT NULL, monty TEXT NOT NULL, mac BLOB NOT NULL, payload BLOB NOT NULL,
    PRIMARY KEY (scope, name));
"""

_RUN_SIZE = (
    "length(payload) + coalesce((SELECT sum(length(c.payload)) FROM calls AS c "
    "WHERE c.run_id = runs.run_id), 0) + coalesce((SELECT length(k.payload) FROM checkpoints "
    "AS k WHERE k.run_id = runs.run_id), 0)"
)
"""A run's bytes in the store, counted from its rows (`Store.make_room` keeps ``size``)."""

_MIGRATIONS = {
    1: ("ALTER TABLE runs ADD COLUMN owner TEXT",),
    2: (
        "ALTER TABLE runs ADD COLUMN size INTEGER NOT NULL DEFAULT 0",
        f"UPDATE runs SET size = {_RUN_SIZE}",
    ),
}
"""The statements that take a store from each schema version to the next."""

_ENDED = "('ok', 'error', 'interrupted')"
"""The statuses of runs the store may evict for room (a paused run waits for a person, a
running one may be another kernel's)."""

WAL_KEPT = 16 * 2**20
"""Bytes the ``-wal`` file is cut back to after a checkpoint (SQLite's journal_size_limit):
without it the WAL stays as large as the largest burst of writes ever was."""

_held: dict[Path, int] = {}
"""Stores of each path this process has open (`_make_file` says why that matters)."""
_held_lock = threading.Lock()

_SEALED = "CAST(monty AS TEXT), CAST(mac AS BLOB), CAST(payload AS BLOB)"
"""A sealed blob's columns, as the seal check takes them whatever another program stored."""


def default_store_path() -> Path:
    """``$JUPYTER_SANDBOX_STORE`` if set, else ``~/.local/share/jupyter-sandbox/store.sqlite``."""
    configured = os.environ.get("JUPYTER_SANDBOX_STORE")
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".local" / "share" / "jupyter-sandbox" / "store.sqlite"


@dataclass(frozen=True)
class SessionInfo:
    name: str
    names: dict[str, str]
    """Variable -> type name, as saved with the session."""
    size: int
    """Bytes of the session's dump."""
    updated: float


@dataclass(frozen=True)
class Checkpoint:
    """A run's latest Monty snapshot (older ones are replaced)."""

    dump: bytes
    call_index: int
    pending: list[dict[str, Any]]
    saved: float
    call: dict[str, Any] | None = None
    """The call the snapshot stopped at (call_id, index, tool, args, kwargs): a paused run's
    gated call, read without loading the dump. None in a checkpoint of a version 1 store."""


@dataclass(frozen=True)
class RunOwner:
    """The process a run was last started or claimed by."""

    host: str
    process: Owner

    def alive(self) -> bool:
        """Whether that process still runs. One on another host cannot be judged from here:
        it counts as alive (a run is never taken from a process that may be running it)."""
        return self.host != socket.gethostname() or self.process.alive()

    def encode(self) -> str:
        return f"{self.host} {self.process.pid} {self.process.token}"

    @staticmethod
    def decode(text: str | None) -> RunOwner | None:
        parts = (text or "").rsplit(" ", 2)
        process = parse_token(parts[1], parts[2]) if len(parts) == 3 else None
        return None if process is None else RunOwner(parts[0], process)


def this_process() -> RunOwner:
    return RunOwner(socket.gethostname(), me())


@dataclass(frozen=True)
class RunInfo:
    """A run as `Store.runs` lists it (nothing unsealed)."""

    run_id: str
    scope: str
    cell: str
    status: RunStatus
    calls: int
    """Call records stored."""
    forked_from: tuple[str, int] | None
    created: float
    updated: float
    """When its last checkpoint or status change was stored."""


@dataclass(frozen=True)
class StoredRun:
    """A run with everything needed to resume or fork it, every blob verified."""

    run_id: str
    scope: str
    cell: str
    code: str
    tools: list[str]
    status: RunStatus
    calls: dict[int, dict[str, Any]]
    """Call records by call index, in index order (a gather may leave gaps)."""
    checkpoint: Checkpoint | None
    forked_from: tuple[str, int] | None
    created: float
    updated: float
    """When its last checkpoint or status change was stored."""
    owner: RunOwner | None = None
    """The process that started or last claimed it (None: a run of a version 1 store)."""
    session: str | None = None
    """The session (``--session``) the run continues, which it updates when it completes."""


class Store:
    """The durable store at ``path`` (default `default_store_path`), created if missing."""

    def __init__(
        self, path: str | os.PathLike[str] | None = None, *, keep: int = 20, total: int = 2000
    ) -> None:
        self.path = Path(default_store_path() if path is None else path).expanduser().absolute()
        self.keep = keep
        """Runs `new_run` keeps per cell (paused runs are always kept)."""
        self.total = total
        """Runs `new_run` keeps in all (paused runs are always kept)."""
        self.caps: Keep = Keep()
        """The bytes it keeps per run, per cell and in all (`make_room`); ``%config
        OrchestrateMagics.store_run``, ``store_cell`` and ``store_total`` set them."""
        self._lock = threading.Lock()
        self._counted = False
        """Whether this store is counted in `_held` (until `close`)."""
        try:
            _make_folder(self.path.parent)
            check_private_folder(self.path.parent)
            self._key = _key(self.path.parent / "key")
            self._keyed = hmac.new(self._key, digestmod=hashlib.sha256)
            """The HMAC with the key taken in: each seal copies it (half the cost of a new one)."""
            with _held_lock:
                held = _held.get(self.path, 0) > 0
                _make_file(self.path, held=held)
                _check_side_files(self.path, held=held)
                self._pid = os.getpid()
                self._db = self._connect()
                _held[self.path] = _held.get(self.path, 0) + 1
                self._counted = True
        except (OSError, sqlite3.Error) as error:
            raise StoreError(
                f"cannot open the store at {self.path}: {_reason(error)}; point "
                "%config OrchestrateMagics.store or $JUPYTER_SANDBOX_STORE at a writable path"
            ) from error

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r})"

    def close(self) -> None:
        with self._lock, _held_lock:
            self._db.close()
            if self._counted:
                self._counted = False
                _held[self.path] -= 1

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- sessions ---

    def save_session(self, scope: str, name: str, dump: bytes, names: dict[str, str]) -> None:
        """Keep session ``name``'s dump (replacing the previous one) and its variables' types."""
        listed = json.dumps(names, sort_keys=True)
        monty, mac = self._seal("session", (scope, name, listed), dump)
        with self._write() as db:
            db.execute(
                "INSERT OR REPLACE INTO sessions VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (scope, name, listed, len(dump), time.time(), monty, mac, dump),
            )

    def load_session(self, scope: str, name: str) -> bytes | None:
        """The session's dump, verified; None if there is no such session."""
        with self._read() as db:
            row = db.execute(
                f"SELECT names, {_SEALED} FROM sessions WHERE scope = ? AND name = ?",
                (scope, name),
            ).fetchone()
        if row is None:
            return None
        listed, monty, mac, payload = row
        return self._unseal(
            "session",
            (scope, name, listed),
            monty,
            mac,
            payload,
            what=f"session {name!r}",
            advice=f"%orchestrate_reset {name} drops it",
        )

    def sessions(self, scope: str) -> list[SessionInfo]:
        """The sessions of ``scope``, by name."""
        with self._read() as db:
            rows = db.execute(
                "SELECT name, names, size, updated FROM sessions WHERE scope = ? ORDER BY name",
                (scope,),
            ).fetchall()
        return [
            SessionInfo(name, json.loads(names), size, updated)
            for name, names, size, updated in rows
        ]

    def drop_session(self, scope: str, name: str) -> bool:
        """Forget a session; False if there was none."""
        with self._write() as db:
            cursor = db.execute("DELETE FROM sessions WHERE scope = ? AND name = ?", (scope, name))
        return cursor.rowcount > 0

    # --- runs ---

    def new_run(
        self,
        *,
        scope: str,
        cell: str,
        code: str,
        tools: list[str],
        forked_from: tuple[str, int] | None = None,
        session: str | None = None,
    ) -> str:
        """Start a run (status ``running``, owned by this process) and return its id: 12 hex
        digits (`_grammar.new_run_id`, whose grammar the magics and the renderer check).
        ``session``: the session the run continues (`StoredRun.session`)."""
        header = json.dumps({"code": code, "tools": list(tools), "session": session}).encode()
        forked_run, forked_call = forked_from if forked_from else (None, None)
        with self._write() as db:
            while True:
                run_id = new_run_id()
                if not db.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone():
                    break
            context = _run_context(run_id, scope, cell, forked_from)
            monty, mac = self._seal("run", context, header)
            now = time.time()
            db.execute(
                "INSERT INTO runs (run_id, scope, cell, status, created, updated, forked_run, "
                "forked_call, monty, mac, payload, owner, size) "
                "VALUES (?, ?, ?, 'running', ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    *(run_id, scope, cell, now, now, forked_run, forked_call),
                    *(monty, mac, header, this_process().encode(), len(header)),
                ),
            )
            _prune(db, keep=self.keep, total=self.total, cell=(scope, cell))
        return run_id

    def record_call(self, run_id: str, index: int, record: dict[str, Any]) -> None:
        """Keep call ``index``'s record (replacing an earlier one of the same index)."""
        self.record_calls(run_id, {index: record})

    def record_calls(self, run_id: str, records: Mapping[int, dict[str, Any]]) -> None:
        """Keep several calls' records (by index) in one transaction: a durable run writes
        the records it buffered at once (see `_durable`)."""
        rows = [self._call_row(run_id, index, record) for index, record in records.items()]
        # The run's `updated` is left alone: it is its last checkpoint or status change.
        with self._write() as db:
            self._insert_calls(db, run_id, rows)

    def checkpoint(
        self,
        run_id: str,
        *,
        dump: bytes,
        call_index: int,
        pending: list[dict[str, Any]] | None = None,
        calls: Mapping[int, dict[str, Any]] | None = None,
        call: dict[str, Any] | None = None,
    ) -> None:
        """Keep the run's latest snapshot (the previous one is replaced), and ``calls``
        (records by index) with it in the same transaction, so a checkpoint is never
        visible without the records that finished before it. ``call``: the call the
        snapshot stopped at (`Checkpoint.call`)."""
        rows = [self._call_row(run_id, index, record) for index, record in (calls or {}).items()]
        payload = _pickle((dump, call_index, pending or [], call))
        monty, mac = self._seal("checkpoint", (run_id,), payload)
        with self._write() as db:
            now = self._touch(db, run_id)
            self._insert_calls(db, run_id, rows)
            (old,) = db.execute(
                "SELECT coalesce(sum(length(payload)), 0) FROM checkpoints WHERE run_id = ?",
                (run_id,),
            ).fetchone()
            db.execute(
                "INSERT OR REPLACE INTO checkpoints VALUES (?, ?, ?, ?, ?)",
                (run_id, now, monty, mac, payload),
            )
            db.execute(
                "UPDATE runs SET size = size + ? WHERE run_id = ?", (len(payload) - old, run_id)
            )

    def finish(self, run_id: str, status: RunStatus) -> None:
        """Set the run's status (``paused`` too: a paused run is not over)."""
        if status not in get_args(RunStatus):
            raise SandboxConfigError(
                f"status must be one of {', '.join(get_args(RunStatus))}, not {status!r}",
                parameter="status",
            )
        with self._write() as db:
            self._touch(db, run_id, status)

    def claim(self, run_id: str, expected: RunStatus, owner: RunOwner | None = None) -> bool:
        """Set the run's status to ``running`` and its owner to this process if, and only if,
        its status is ``expected`` and its owner ``owner`` now, in one transaction: of two
        processes continuing one paused run (two approvals of the same call), or taking over
        one whose kernel died, exactly one gets True."""
        return self._swap(run_id, (expected, owner), ("running", this_process()))

    def unclaim(self, run_id: str, status: RunStatus, owner: RunOwner | None) -> None:
        """Undo this process' `claim` of a run it never ran: its status and owner as they
        were (a dead kernel's run left "running" under this live process would be refused by
        every resume). Only while the run is still running here."""
        self._swap(run_id, ("running", this_process()), (status, owner))

    def _swap(
        self,
        run_id: str,
        now: tuple[RunStatus, RunOwner | None],
        then: tuple[RunStatus, RunOwner | None],
    ) -> bool:
        """Set the run's status and owner to ``then`` if they are ``now``, in one
        transaction; whether they were."""
        with self._write() as db:
            cursor = db.execute(
                "UPDATE runs SET updated = ?, status = ?, owner = ? "
                "WHERE run_id = ? AND status = ? AND owner IS ?",
                (
                    time.time(),
                    then[0],
                    None if then[1] is None else then[1].encode(),
                    run_id,
                    now[0],
                    None if now[1] is None else now[1].encode(),
                ),
            )
            return cursor.rowcount == 1

    def run(self, run_id: str) -> StoredRun:
        """The run, every blob verified; `StoreError` if there is no such run."""
        with self._read() as db:
            head = db.execute(
                "SELECT scope, cell, status, created, updated, forked_run, forked_call, owner, "
                f"{_SEALED} FROM runs WHERE run_id = ?",
                (run_id,),
            ).fetchone()
            if head is None:
                raise self._unknown(run_id)
            calls = db.execute(
                f"SELECT idx, {_SEALED} FROM calls WHERE run_id = ? ORDER BY idx",
                (run_id,),
            ).fetchall()
            saved = db.execute(
                f"SELECT saved, {_SEALED} FROM checkpoints WHERE run_id = ?", (run_id,)
            ).fetchone()
        scope, cell, status, created, updated, forked_run, forked_call, owner, *sealed = head
        forked_from = _forked(forked_run, forked_call)
        where = f"run {run_id!r}"
        context = _run_context(run_id, scope, cell, forked_from)
        header = json.loads(self._unseal("run", context, *sealed, what=where))
        records = {
            index: _unpickle(
                self._unseal("call", (run_id, str(index)), *blob, what=f"call {index} of {where}"),
                f"call {index} of {where}",
            )
            for index, *blob in calls
        }
        checkpoint = None if saved is None else self._checkpoint(run_id, saved)
        return StoredRun(
            run_id=run_id,
            scope=scope,
            cell=cell,
            code=header["code"],
            tools=header["tools"],
            status=status,
            calls=records,
            checkpoint=checkpoint,
            forked_from=forked_from,
            created=created,
            updated=updated,
            owner=RunOwner.decode(owner),
            session=header.get("session"),
        )

    def checkpoint_of(self, run_id: str) -> Checkpoint | None:
        """The run's latest checkpoint alone, verified (None if it has none): what listing a
        paused run's call needs, without unsealing every call record as `run` does."""
        with self._read() as db:
            saved = db.execute(
                f"SELECT saved, {_SEALED} FROM checkpoints WHERE run_id = ?", (run_id,)
            ).fetchone()
        return None if saved is None else self._checkpoint(run_id, saved)

    def runs(self, *, scope: str | None = None, status: RunStatus | None = None) -> list[RunInfo]:
        """Runs, newest first, optionally of one scope and/or one status."""
        query = (
            "SELECT run_id, scope, cell, status, (SELECT count(*) FROM calls AS c WHERE "
            "c.run_id = r.run_id), forked_run, forked_call, created, updated FROM runs AS r "
            "WHERE (?1 IS NULL OR scope = ?1) AND (?2 IS NULL OR status = ?2) "
            "ORDER BY created DESC, rowid DESC"
        )
        with self._read() as db:
            rows = db.execute(query, (scope, status)).fetchall()
        return [
            RunInfo(run_id, run_scope, cell, run_status, calls, _forked(run, call), *times)
            for run_id, run_scope, cell, run_status, calls, run, call, *times in rows
        ]

    def last_run(self, scope: str, cell: str) -> StoredRun | None:
        """The latest run of this cell, verified; None if it has none."""
        with self._read() as db:
            row = db.execute(
                "SELECT run_id FROM runs WHERE scope = ? AND cell = ? "
                "ORDER BY created DESC, rowid DESC LIMIT 1",
                (scope, cell),
            ).fetchone()
        return None if row is None else self.run(row[0])

    def make_room(self, run_id: str) -> int:
        """Evict ended runs, oldest first, until run ``run_id``'s cell and the store are
        within ``caps`` (`_keep.Keep`), give the space back, and return the bytes the run
        may still write (0 or less: keep its later values as summaries): its own cap, less
        what no eviction can free (paused runs, running ones, sessions: they count). Older
        ended runs make room for it as it writes."""
        caps, mb = self.caps, 2**20
        with self._write() as db:
            row = db.execute("SELECT scope, cell, size FROM runs WHERE run_id = ?", (run_id,))
            head = row.fetchone()
            if head is None:
                raise self._unknown(run_id)
            scope, cell, own = head
            evicted = _evict(db, caps.store_cell * mb, run_id, (scope, cell))
            evicted += _evict(db, caps.store_total * mb, run_id)
            # What no eviction can free: this run, paused and running runs, the sessions.
            fixed = f"(status NOT IN {_ENDED} OR run_id = ?1)"
            (cell_size,) = db.execute(
                f"SELECT coalesce(sum(size), 0) FROM runs WHERE scope = ?2 AND cell = ?3 "
                f"AND {fixed}",
                (run_id, scope, cell),
            ).fetchone()
            (total,) = db.execute(
                f"SELECT (SELECT coalesce(sum(size), 0) FROM runs WHERE {fixed}) + "
                "(SELECT coalesce(sum(length(payload)), 0) FROM sessions)",
                (run_id,),
            ).fetchone()
        if evicted:
            self._shrink()
        return int(
            min(
                caps.store_run * mb - own,
                caps.store_cell * mb - cell_size,
                caps.store_total * mb - total,
            )
        )

    def size(self) -> int:
        """Bytes of runs and sessions the store holds (what ``caps.store_total`` bounds)."""
        with self._read() as db:
            (total,) = db.execute(
                "SELECT (SELECT coalesce(sum(size), 0) FROM runs) + "
                "(SELECT coalesce(sum(length(payload)), 0) FROM sessions)"
            ).fetchone()
        return int(total)

    def _shrink(self) -> None:
        """Give the pages freed by dropping runs back to the file system: free pages moved
        to the end and cut off (incremental vacuum), then the WAL copied into the file
        (which cuts the file there) and truncated. Waiting for no one: another process
        reading meanwhile leaves the WAL to be cut back to `WAL_KEPT` on its next reuse."""
        with self._lock, self._errors():  # execute() would free one page: one per step
            db = self._connection()
            db.executescript("PRAGMA incremental_vacuum;")
            db.execute("PRAGMA busy_timeout = 0")
            try:
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            finally:
                db.execute(f"PRAGMA busy_timeout = {_BUSY_MS}")

    def prune(self, keep: int | None = None, total: int | None = None) -> int:
        """Drop all but the last ``keep`` runs of each cell and the last ``total`` runs in all
        (defaults: the store's); paused runs stay, and the file shrinks by the space freed.
        Returns how many runs were dropped."""
        with self._write() as db:
            dropped = _prune(
                db,
                keep=self.keep if keep is None else keep,
                total=self.total if total is None else total,
            )
        self._shrink()
        return dropped

    # --- plumbing ---

    def _connect(self) -> sqlite3.Connection:
        """A connection, set up. Kernels opening a new store at once race to switch it to
        WAL, which SQLite answers "database is locked" without waiting for: retry that, up to
        the busy timeout."""
        deadline = time.monotonic() + _BUSY_MS / 1000
        while True:
            try:
                return self._connect_once()
            except sqlite3.OperationalError as error:
                if "locked" not in str(error) or time.monotonic() > deadline:
                    raise
                time.sleep(0.02 + secrets.randbelow(30) / 1000)

    def _connect_once(self) -> sqlite3.Connection:
        db = sqlite3.connect(
            self.path, timeout=_BUSY_MS / 1000, isolation_level=None, check_same_thread=False
        )
        try:
            db.execute(f"PRAGMA busy_timeout = {_BUSY_MS}")
            db.execute("PRAGMA auto_vacuum = INCREMENTAL")  # a new file only, before WAL
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = NORMAL")
            db.execute("PRAGMA foreign_keys = ON")
            db.execute(f"PRAGMA journal_size_limit = {WAL_KEPT}")
            db.executescript(
                f"BEGIN IMMEDIATE; {_SCHEMA} INSERT OR IGNORE INTO meta "
                f"VALUES ('schema', '{SCHEMA_VERSION}'); COMMIT;"
            )
            version = _migrated(db, self.path)
            _vacuumable(db)
        except BaseException:
            db.close()
            raise
        if version > SCHEMA_VERSION:
            db.close()
            raise StoreError(
                f"the store at {self.path} has schema version {version}, written by a newer "
                f"jupyter-sandbox (this one knows {SCHEMA_VERSION}): upgrade jupyter-sandbox "
                "or point $JUPYTER_SANDBOX_STORE at another store"
            )
        return db

    def _connection(self) -> sqlite3.Connection:
        """This process's connection: a forked child must not use its parent's (SQLite's
        rule), nor close it (that could release the parent's locks), so it opens its own."""
        if self._pid != os.getpid():
            self._inherited = self._db
            self._pid, self._db = os.getpid(), self._connect()
        return self._db

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One short write transaction, taking the write lock at once (see the module doc)."""
        with self._lock, self._errors():
            db = self._connection()
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """One read transaction: its queries see one state of the store."""
        with self._lock, self._errors():
            db = self._connection()
            db.execute("BEGIN")
            try:
                yield db
            finally:
                db.execute("COMMIT")

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as error:
            raise StoreError(f"the store at {self.path} failed: {_reason(error)}") from error

    def _checkpoint(self, run_id: str, saved: tuple[Any, ...]) -> Checkpoint:
        """A checkpoints row (saved, then the sealed blob's columns), verified and loaded."""
        what = f"the checkpoint of run {run_id!r}"
        dump, call_index, pending, *call = _unpickle(  # no call: schema version 1
            self._unseal("checkpoint", (run_id,), *saved[1:], what=what), what
        )
        return Checkpoint(dump, call_index, pending, saved[0], *call)

    def _touch(self, db: sqlite3.Connection, run_id: str, status: str | None = None) -> float:
        """Mark the run updated now (and set its status); `StoreError` if there is no such run."""
        now = time.time()
        cursor = db.execute(
            "UPDATE runs SET updated = ?, status = coalesce(?, status) WHERE run_id = ?",
            (now, status, run_id),
        )
        if cursor.rowcount == 0:
            raise self._unknown(run_id)
        return now

    def _call_row(
        self, run_id: str, index: int, record: dict[str, Any]
    ) -> tuple[str, int, str, bytes, bytes]:
        payload = _pickle(record)
        monty, mac = self._seal("call", (run_id, str(index)), payload)
        return run_id, index, monty, mac, payload

    def _insert_calls(
        self, db: sqlite3.Connection, run_id: str, rows: list[tuple[str, int, str, bytes, bytes]]
    ) -> None:
        try:
            db.executemany("INSERT OR REPLACE INTO calls VALUES (?, ?, ?, ?, ?)", rows)
        except sqlite3.IntegrityError:  # the foreign key: no such run
            raise self._unknown(run_id) from None
        # A record replacing one of the same number counts again: the size is an upper bound.
        added = sum(len(row[4]) for row in rows)
        db.execute("UPDATE runs SET size = size + ? WHERE run_id = ?", (added, run_id))

    def _unknown(self, run_id: str) -> StoreError:
        return StoreError(
            f"no run {run_id!r} in {self.path}; %orchestrate_pending lists paused runs"
        )

    def _seal(self, kind: str, context: tuple[str, ...], payload: bytes) -> tuple[str, bytes]:
        return MONTY_VERSION, _mac(self._keyed, kind, context, MONTY_VERSION, payload)

    def _unseal(
        self,
        kind: str,
        context: tuple[str, ...],
        monty: str,
        mac: bytes,
        payload: bytes,
        *,
        what: str,
        advice: str = "re-run the cell without --resume",
    ) -> bytes:
        """``payload`` if this store sealed it for this row and this Monty version."""
        if not hmac.compare_digest(mac, _mac(self._keyed, kind, context, monty, payload)):
            raise StoreError(
                f"{what} in {self.path} was modified outside jupyter-sandbox "
                "(signature mismatch): refusing to load it"
            )
        if monty != MONTY_VERSION:
            raise StoreError(
                f"{what} was saved by pydantic-monty {monty}, this kernel has {MONTY_VERSION}: "
                f"{advice}"
            )
        return payload


def _migrated(db: sqlite3.Connection, path: Path) -> int:
    """The store's schema version, after migrating an older one to `SCHEMA_VERSION` (in one
    transaction: of kernels opening an old store at once, one migrates it)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        (value,) = db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
        if not str(value).isdigit() or int(value) < 1:
            raise StoreError(
                f"the store at {path} has schema version {value!r}, which no jupyter-sandbox "
                "writes: point $JUPYTER_SANDBOX_STORE at another store"
            )
        version = int(value)
        while version in _MIGRATIONS:
            for statement in _MIGRATIONS[version]:
                db.execute(statement)
            version += 1
            db.execute("UPDATE meta SET value = ? WHERE key = 'schema'", (str(version),))
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
    return version


def _vacuumable(db: sqlite3.Connection) -> None:
    """Make a store whose file cannot shrink (``auto_vacuum`` NONE: made by a release that did
    not set it, or by another program) incremental: SQLite changes that mode only by
    rebuilding the file (``VACUUM``), once, taking as long as copying it. Another process
    using the store then (``database is locked``) leaves it for the next open."""
    (mode,) = db.execute("PRAGMA auto_vacuum").fetchone()
    if mode != 0:
        return
    db.execute("PRAGMA auto_vacuum = INCREMENTAL")
    with contextlib.suppress(sqlite3.OperationalError):
        db.execute("VACUUM")


def _evict(db: sqlite3.Connection, cap: int, keep: str, cell: tuple[str, str] | None = None) -> int:
    """Drop ended runs (not ``keep``), oldest first, while the runs of ``cell`` (all runs
    and the sessions, when None) hold more than ``cap`` bytes; how many were dropped."""
    where, params = ("scope = ? AND cell = ?", cell) if cell else ("1", ())
    (size,) = db.execute(
        f"SELECT coalesce(sum(size), 0) FROM runs WHERE {where}", params
    ).fetchone()
    if cell is None:
        size += db.execute("SELECT coalesce(sum(length(payload)), 0) FROM sessions").fetchone()[0]
    if size <= cap:
        return 0
    dropped: list[str] = []
    candidates = db.execute(
        f"SELECT run_id, size FROM runs WHERE {where} AND status IN {_ENDED} AND run_id != ? "
        "ORDER BY created, rowid",
        (*params, keep),
    )
    for run_id, run_size in candidates:
        if size <= cap:
            break
        dropped.append(run_id)
        size -= run_size
    db.executemany("DELETE FROM runs WHERE run_id = ?", [(run_id,) for run_id in dropped])
    return len(dropped)


def _forked(run: str | None, call: int | None) -> tuple[str, int] | None:
    return None if run is None or call is None else (run, call)


def _run_context(
    run_id: str, scope: str, cell: str, forked_from: tuple[str, int] | None
) -> tuple[str, ...]:
    forked = "" if forked_from is None else f"{forked_from[0]}:{forked_from[1]}"
    return run_id, scope, cell, forked


def _mac(
    keyed: hmac.HMAC, kind: str, context: tuple[str, ...], monty: str, payload: bytes
) -> bytes:
    """HMAC-SHA256 (``keyed``: one with the key taken in) over length-prefixed parts (no two
    different tuples encode alike), then the payload."""
    mac = keyed.copy()
    encoded = [part.encode("utf-8", "surrogatepass") for part in (kind, *context, monty)]
    mac.update(b"".join([len(part).to_bytes(8, "big") + part for part in encoded]))
    mac.update(payload)  # not concatenated: a dump may be megabytes
    return mac.digest()


def _pickle(value: object) -> bytes:
    try:
        return _round_trip(value)
    except Exception:  # a value's own __reduce__ or constructor may raise anything
        return _round_trip(_picklable(value))


def _round_trip(value: object) -> bytes:
    """``value`` pickled, once it is known to unpickle too: an exception class whose
    ``__init__`` takes more than its message pickles but cannot be rebuilt, and one such record
    must not make its whole run unloadable. Bytes naming no class (no byte of the opcodes
    that load one anywhere in them: builtin data only, the usual call record) always load:
    they are not loaded to check (a durable run stores every call)."""
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    if _CLASS_OPCODES.search(data):
        pickle.loads(data)
    return data


_CLASS_OPCODES = re.compile(
    b"[" + re.escape(pickle.STACK_GLOBAL + pickle.EXT1 + pickle.EXT2 + pickle.EXT4) + b"]"
)
"""The opcodes by which a protocol 4+ pickle names a class or function (GLOBAL is protocol
3's). A byte of one inside data (an int, a character) is only a false alarm: it checks."""


def _picklable(value: object) -> object:
    """``value`` with each part pickle cannot store replaced by a `HandleMarker`, looking
    inside plain dicts, lists and tuples so that one odd argument does not hide the rest."""
    try:
        _round_trip(value)
    except Exception:
        pass
    else:
        return value
    if type(value) is dict:
        return {key: _picklable(item) for key, item in value.items()}
    if type(value) is list:
        return [_picklable(item) for item in value]
    if type(value) is tuple:
        return tuple(_picklable(item) for item in value)
    kind = type(value)
    return HandleMarker(f"{kind.__module__}.{kind.__qualname__}")


def _unpickle(payload: bytes, what: str) -> Any:
    """Bytes this store sealed (checked by the caller): a value whose class this process
    lacks (one defined in a notebook cell not run yet) cannot be rebuilt, and says so."""
    try:
        return pickle.loads(payload)
    except Exception as error:
        raise StoreError(
            f"{what} holds a value this process cannot rebuild ({_reason(error)}): define "
            "what it names (run the cell that does), then try again"
        ) from error


def _prune(
    db: sqlite3.Connection, *, keep: int, total: int, cell: tuple[str, str] | None = None
) -> int:
    """Drop old runs that are not paused (their calls and checkpoints go with them)."""
    by_cell = (
        "DELETE FROM runs WHERE status != 'paused' AND run_id IN (SELECT run_id FROM "
        "(SELECT run_id, row_number() OVER (PARTITION BY scope, cell ORDER BY created DESC, "
        "rowid DESC) AS n FROM runs WHERE ?2 IS NULL OR (scope = ?2 AND cell = ?3)) "
        "WHERE n > ?1)"
    )
    scope, name = cell if cell else (None, None)
    dropped = db.execute(by_cell, (keep, scope, name)).rowcount
    in_all = (
        "DELETE FROM runs WHERE run_id IN (SELECT run_id FROM runs WHERE status != 'paused' "
        "ORDER BY created DESC, rowid DESC LIMIT -1 OFFSET ?)"
    )
    return dropped + db.execute(in_all, (total,)).rowcount


def _make_file(path: Path, *, held: bool) -> None:
    """Create the store's file 0600 if it is missing; else check it (`_check_file`).

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
    _check_file(path, "the store", held=held)


SIDE_FILES = ("-wal", "-shm", "-journal")
"""The files SQLite keeps beside the store: the WAL holds recent writes (tools' results,
code) and the ``-shm`` index says which of them count. A ``-wal`` another user planted
before the store was opened would receive every write (readable by them) and one they wrote
would be read as the store's own, so each is checked like the store itself."""


def _check_side_files(path: Path, *, held: bool) -> None:
    """Check the store's `SIDE_FILES` that exist (SQLite makes them 0600 and ours)."""
    for suffix in SIDE_FILES:
        _check_file(Path(f"{path}{suffix}"), f"the store's {suffix[1:]} file", held=held)


def _check_file(path: Path, what: str, *, held: bool = False) -> os.stat_result | None:
    """Refuse ``path`` (one line, with the command that fixes it) unless it is a regular
    file of this user that group and others cannot use; None if it does not exist.

    Opened without following a link and without blocking (``O_NOFOLLOW|O_NONBLOCK``: a FIFO
    planted there would hang the open forever), then checked with ``fstat``, so what is
    checked is what was opened; ``held`` (this process has SQLite's descriptors on it, see
    `_make_file`): looked at with ``lstat`` only, which neither follows nor blocks either."""
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


def _make_folder(folder: Path) -> None:
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


def _key(path: Path) -> bytes:
    """The user's signing key at ``path``, created if missing, refused if unsafe (checked as
    `_check_file` checks, on the descriptor it is then read from)."""
    fix = f"run rm {path} (blobs it signed can then no longer be loaded)"
    what = "the store's key file"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return _new_key(path)
    except OSError as error:
        _check_file(path, what)  # a link, a socket, another user's: said as such
        raise StoreError(f"cannot read {what} {path}: {_reason(error)}; {fix}") from error
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
        return _key(path)
    finally:
        os.unlink(temporary)
    return key


def _reason(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error) or type(error).__name__
