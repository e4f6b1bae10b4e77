"""What the durable store costs per write: a checkpoint (seal + insert of a real Monty snapshot
dump) and a call record (pickle + seal + insert). Medians over interleaved rounds.

    .venv/bin/python benchmarks/bench_store.py [--rounds 1000]

Baseline: sealing the dump alone (HMAC-SHA256), the part of a checkpoint that is not SQLite.
The last row is what keeping the store within its caps adds to each of a run's writes
(`Store.make_room`, nothing to evict).
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
from pathlib import Path

from _timing import measure, print_table

from jupyter_sandbox.orchestration._workers import pool
from jupyter_sandbox.orchestration.durable._store import Store

PAUSED = "acc = 0\nfor i in range(50):\n    acc = add(acc, i)\nacc"


def snapshot_dump() -> bytes:
    """A loop paused at a tool call, as the engine would checkpoint it."""
    with pool().checkout(limits={"max_suspensions": 100}) as session:
        return bytes(session.feed_start(PAUSED).dump())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=1000)
    rounds = parser.parse_args().rounds
    dump = snapshot_dump()
    with tempfile.TemporaryDirectory() as folder, Store(Path(folder) / "store.sqlite") as store:
        run_id = store.new_run(scope="bench", cell="c", code=PAUSED, tools=["add"])
        index = itertools.count()
        record = {
            "tool": "add",
            "args": (1, 2),
            "kwargs": {},
            "status": "ok",
            "result": 3,
            "call_id": 7,
        }
        rows = [
            ("seal the dump (HMAC-SHA256)", lambda: store._seal("checkpoint", (run_id,), dump)),
            (
                "checkpoint (seal + insert)",
                lambda: store.checkpoint(run_id, dump=dump, call_index=3),
            ),
            (
                "record_call (pickle + seal + insert)",
                lambda: store.record_call(run_id, next(index), record),
            ),
            # a durable run asks it after each write (once a second at most): the caps' cost
            ("make_room (caps checked, room left)", lambda: store.make_room(run_id)),
        ]
        results = measure(rows, rounds)
    print_table(f"durable store writes, {len(dump)}-byte dump, median of {rounds}", results)


if __name__ == "__main__":
    main()
