"""What listing paused runs costs (``%orchestrate_pending``, `paused_runs`): reading each run's
gated call from its checkpoint row (this release) against loading each run's snapshot into a
Monty worker to have the call announced again (what the listing did before the store kept the
call). Also what resuming pays to put the limits given now into a snapshot (`with_limits`).
Medians of interleaved rounds, with the machine's load.

    .venv/bin/python benchmarks/bench_paused.py [--runs 20] [--rounds 15]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import pydantic_monty as pm
from _timing import measure, print_table

from jupyter_sandbox import Store, orchestrate, tool
from jupyter_sandbox.orchestration import Limits
from jupyter_sandbox.orchestration._workers import pool
from jupyter_sandbox.orchestration.durable._paused import paused_runs
from jupyter_sandbox.orchestration.durable._sessions import with_limits

CODE = 'rows = [step(i) for i in range(20)]\ndone = delete("/data/old", force=True)\n(rows, done)'


def step(i: int) -> int:
    return i * 2


def delete(path: str, force: bool = False) -> str:
    return "deleted " + path


def through_monty(store: Store) -> list[tuple[str, str]]:
    """The former listing: each paused run's snapshot loaded into a worker to read its call."""
    found = []
    for info in store.runs(status="paused"):
        saved = store.run(info.run_id).checkpoint
        assert saved is not None
        with pool().checkout() as session:
            snap = session.load_snapshot(saved.dump)
            assert isinstance(snap, pm.FunctionSnapshot)
            found.append((info.run_id, str(snap.function_name)))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="paused runs in the store")
    parser.add_argument("--rounds", type=int, default=15)
    options = parser.parse_args()
    tools = [tool(step), tool(approve=True)(delete)]
    with tempfile.TemporaryDirectory() as folder:
        store = Store(Path(folder) / "store.sqlite")
        for _ in range(options.runs):
            assert orchestrate(CODE, tools=tools, store=store).status == "paused"
        listed = paused_runs(store)
        assert len(listed) == options.runs
        assert {r.tool for r in listed} == {"delete"}
        rows = measure(
            [
                ("load each snapshot in Monty (before)", lambda: through_monty(store)),
                ("read the call from the store (now)", lambda: paused_runs(store)),
            ],
            options.rounds,
        )
        print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print_table(f"%orchestrate_pending with {options.runs} paused runs", rows, unit="ms")
        saved = store.run(listed[0].run_id).checkpoint
        assert saved is not None
        limits = Limits(timeout=60, max_memory=512)
        rows = measure(
            [
                ("copy the snapshot (baseline)", lambda: bytes(bytearray(saved.dump))),
                ("with_limits on the snapshot", lambda: with_limits(saved.dump, limits)),
            ],
            options.rounds * 20,
        )
        print_table(f"limits put into a {len(saved.dump):,}-byte snapshot on resume", rows)


if __name__ == "__main__":
    main()
