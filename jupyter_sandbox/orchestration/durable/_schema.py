"""The store's schema, and the migrations that take an older store to it.

The ``meta`` table holds the schema version; a store from a newer release is refused, not
guessed at. Version 2 added the runs' owner and the checkpoint's waiting call; version 3 each
run's size in bytes (``runs.size``), counted from its rows when migrated; version 4 the prompt
number of the cell a run ran in, version 5 that of the cell whose magic answered its pause. A
file made before incremental vacuum was set is rebuilt once, when first opened, so that it can
shrink.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

from ..._shared._errors import StoreError

SCHEMA_VERSION = 5

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, scope TEXT NOT NULL, cell TEXT NOT NULL, status TEXT NOT NULL,
    created REAL NOT NULL, updated REAL NOT NULL, forked_run TEXT, forked_call INTEGER,
    monty TEXT NOT NULL, mac BLOB NOT NULL, payload BLOB NOT NULL, owner TEXT,
    size INTEGER NOT NULL DEFAULT 0, prompt INTEGER, answered INTEGER);
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

RUN_SIZE = (
    "length(payload) + coalesce((SELECT sum(length(c.payload)) FROM calls AS c "
    "WHERE c.run_id = runs.run_id), 0) + coalesce((SELECT length(k.payload) FROM checkpoints "
    "AS k WHERE k.run_id = runs.run_id), 0)"
)
"""A run's bytes in the store, counted from its rows (`Store.make_room` keeps ``size``)."""

MIGRATIONS = {
    1: ("ALTER TABLE runs ADD COLUMN owner TEXT",),
    2: (
        "ALTER TABLE runs ADD COLUMN size INTEGER NOT NULL DEFAULT 0",
        f"UPDATE runs SET size = {RUN_SIZE}",
    ),
    3: ("ALTER TABLE runs ADD COLUMN prompt INTEGER",),
    4: ("ALTER TABLE runs ADD COLUMN answered INTEGER",),
}
"""The statements that take a store from each schema version to the next."""


def migrated(db: sqlite3.Connection, path: Path) -> int:
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
        while version in MIGRATIONS:
            for statement in MIGRATIONS[version]:
                db.execute(statement)
            version += 1
            db.execute("UPDATE meta SET value = ? WHERE key = 'schema'", (str(version),))
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
    return version


def vacuumable(db: sqlite3.Connection) -> None:
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
