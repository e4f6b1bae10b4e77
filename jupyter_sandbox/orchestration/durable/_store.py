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
  left ``running`` is taken up only once that process is gone (see `_resume`).
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
  checkpointed and cut to `WAL_KEPT_BYTES`) and tells the run how many bytes it may still write
  (its own ``caps.store_run`` included): `_durable.Durable` keeps later values as summaries.
  A file made before incremental vacuum was set (``auto_vacuum`` NONE) is rebuilt once, when
  first opened, so that it can shrink.
"""

from __future__ import annotations

import hashlib
import hmac
import importlib.metadata
import json
import os
import secrets
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from ..._shared._defaults import default_store_path as default_store_path
from ..._shared._errors import SandboxConfigError, StoreError
from ..._shared._grammar import new_run_id
from ..._shared._owner import Owner, me, parse_token
from .._keep import Keep
from .._values import HandleMarker as HandleMarker
from ._caps import ENDED, WAL_KEPT_BYTES, evict, prune
from ._files import SIDE_FILES as SIDE_FILES
from ._files import check_private_file as check_private_file
from ._files import check_private_folder as check_private_folder
from ._files import check_side_files, make_file, make_folder, reason
from ._pickling import pickled, unpickled
from ._schema import SCHEMA, SCHEMA_VERSION, migrated, vacuumable
from ._sealing import KEY_BYTES as KEY_BYTES
from ._sealing import read_key, run_context, seal

MONTY_VERSION = importlib.metadata.version("pydantic-monty")
"""Every blob is tagged with it: Monty dumps load only into the version that wrote them."""

RunStatus = Literal["running", "paused", "ok", "error", "interrupted"]

_BUSY_MS = 30_000
"""How long a write waits for another process's write (each holds the lock ~1 ms)."""

_held: dict[Path, int] = {}
"""Stores of each path this process has open (`make_file` says why that matters)."""
_held_lock = threading.Lock()

_SEALED = "CAST(monty AS TEXT), CAST(mac AS BLOB), CAST(payload AS BLOB)"
PROMPT_MAX = 10**9
"""Prompt numbers a store keeps (`Store.note_prompt`, `Store.note_answer`) are below this."""
"""A sealed blob's columns, as the seal check takes them whatever another program stored."""


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
            make_folder(self.path.parent)
            check_private_folder(self.path.parent)
            self._key = read_key(self.path.parent / "key")
            self._keyed = hmac.new(self._key, digestmod=hashlib.sha256)
            """The HMAC with the key taken in: each seal copies it (half the cost of a new one)."""
            with _held_lock:
                held = _held.get(self.path, 0) > 0
                make_file(self.path, held=held)
                check_side_files(self.path, held=held)
                self._pid = os.getpid()
                self._db = self._connect()
                _held[self.path] = _held.get(self.path, 0) + 1
                self._counted = True
        except (OSError, sqlite3.Error) as error:
            raise StoreError(
                f"cannot open the store at {self.path}: {reason(error)}; point "
                "store= or $JUPYTER_SANDBOX_STORE at a writable path",
                parameter="store",
                hint="store=",
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
            advice=f"Store.drop_session({scope!r}, {name!r}) drops it",
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
            context = run_context(run_id, scope, cell, forked_from)
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
            prune(db, keep=self.keep, total=self.total, cell=(scope, cell))
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
        payload = pickled((dump, call_index, pending or [], call))
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
        context = run_context(run_id, scope, cell, forked_from)
        header = json.loads(self._unseal("run", context, *sealed, what=where))
        records = {
            index: unpickled(
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

    def note_prompt(self, run_id: str, prompt: int) -> None:
        """Keep the prompt number (``In [n]``) of the cell run ``run_id`` ran in: after a kernel
        restart, the saved notebook still shows it, and ``%orchestrate_pending`` names the cell
        by it (`prompt`). Not sealed: a number shown, never acted on."""
        self._note("prompt", run_id, prompt)

    def prompt(self, run_id: str) -> int | None:
        """The prompt number `note_prompt` kept for run ``run_id``; None if none was, or the
        store holds something else there (an edited store is untrusted input)."""
        return self._noted("prompt", run_id)

    def note_answer(self, run_id: str, prompt: int) -> None:
        """Keep the prompt number of the cell whose magic answered run ``run_id``'s pause: that
        cell run again (a Run All, after a restart too) says where the run was answered
        instead of failing on a run no longer paused (`answered_in`). Not sealed, as
        `note_prompt`: a number shown, never acted on."""
        self._note("answered", run_id, prompt)

    def answered_in(self, run_id: str) -> int | None:
        """The prompt number `note_answer` kept for run ``run_id``; None if no magic answered
        it (or the store holds something else there)."""
        return self._noted("answered", run_id)

    def _note(self, column: Literal["prompt", "answered"], run_id: str, prompt: int) -> None:
        if type(prompt) is int and 0 < prompt < PROMPT_MAX:
            with self._write() as db:
                db.execute(f"UPDATE runs SET {column} = ? WHERE run_id = ?", (prompt, run_id))

    def _noted(self, column: Literal["prompt", "answered"], run_id: str) -> int | None:
        with self._read() as db:
            row = db.execute(f"SELECT {column} FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        found = None if row is None else row[0]
        return found if type(found) is int and 0 < found < PROMPT_MAX else None

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
            evicted = evict(db, caps.store_cell * mb, run_id, (scope, cell))
            evicted += evict(db, caps.store_total * mb, run_id)
            # What no eviction can free: this run, paused and running runs, the sessions.
            fixed = f"(status NOT IN {ENDED} OR run_id = ?1)"
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
        reading meanwhile leaves the WAL to be cut back to `WAL_KEPT_BYTES` on its next reuse."""
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
            dropped = prune(
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
            db.execute(f"PRAGMA journal_size_limit = {WAL_KEPT_BYTES}")
            db.executescript(
                f"BEGIN IMMEDIATE; {SCHEMA} INSERT OR IGNORE INTO meta "
                f"VALUES ('schema', '{SCHEMA_VERSION}'); COMMIT;"
            )
            version = migrated(db, self.path)
            vacuumable(db)
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
            raise StoreError(f"the store at {self.path} failed: {reason(error)}") from error

    def _checkpoint(self, run_id: str, saved: tuple[Any, ...]) -> Checkpoint:
        """A checkpoints row (saved, then the sealed blob's columns), verified and loaded."""
        what = f"the checkpoint of run {run_id!r}"
        dump, call_index, pending, *call = unpickled(  # no call: schema version 1
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
        payload = pickled(record)
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
        hint = "Store.runs() lists its runs"
        return StoreError(f"no run {run_id!r} in {self.path}; {hint}", parameter="runs", hint=hint)

    def _seal(self, kind: str, context: tuple[str, ...], payload: bytes) -> tuple[str, bytes]:
        return MONTY_VERSION, seal(self._keyed, kind, context, MONTY_VERSION, payload)

    def _unseal(
        self,
        kind: str,
        context: tuple[str, ...],
        monty: str,
        mac: bytes,
        payload: bytes,
        *,
        what: str,
        advice: str = "run it again with resume=False",
    ) -> bytes:
        """``payload`` if this store sealed it for this row and this Monty version."""
        if not hmac.compare_digest(mac, seal(self._keyed, kind, context, monty, payload)):
            raise StoreError(
                f"{what} in {self.path} was modified outside jupyter-sandbox "
                "(signature mismatch): refusing to load it"
            )
        if monty != MONTY_VERSION:
            resumes = "resume=False" in advice
            raise StoreError(
                f"{what} was saved by pydantic-monty {monty}, this kernel has {MONTY_VERSION}: "
                f"{advice}",
                parameter="resume" if resumes else "",
                hint="with resume=False" if resumes else "",
            )
        return payload


def _forked(run: str | None, call: int | None) -> tuple[str, int] | None:
    return None if run is None or call is None else (run, call)
