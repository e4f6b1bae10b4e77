"""What the store keeps: the caps on runs per cell and in all, and on bytes (`Store.make_room`).

Ended runs are evicted oldest first; a paused run is never dropped (a person may approve it
hours later), and a running one may be another kernel's.
"""

from __future__ import annotations

import sqlite3

ENDED = "('ok', 'error', 'interrupted')"
"""The statuses of runs the store may evict for room (a paused run waits for a person, a
running one may be another kernel's)."""

WAL_KEPT_BYTES = 16 * 2**20
"""Bytes the ``-wal`` file is cut back to after a checkpoint (SQLite's journal_size_limit):
without it the WAL stays as large as the largest burst of writes ever was."""


def evict(db: sqlite3.Connection, cap: int, keep: str, cell: tuple[str, str] | None = None) -> int:
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
        f"SELECT run_id, size FROM runs WHERE {where} AND status IN {ENDED} AND run_id != ? "
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


def prune(
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
