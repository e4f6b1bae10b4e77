"""Memory and disk stay bounded, whatever the cell's code does.

Tool arguments are copied out of Monty to the host, results come back; before, the trace,
the ``--resume`` journals (256 cells of them) and the store kept each whole, outside every
limit. These tests are the red team's cells: a real kernel, its RSS read from ``/proc``.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from pathlib import Path

import pytest
from _kernels import kernel

from jupyter_sandbox import Keep, LimitExceeded, Limits
from jupyter_sandbox.orchestration import Journal, ToolCache, orchestrate
from jupyter_sandbox.orchestration._keep import Summary
from jupyter_sandbox.orchestration._memo import Journals
from jupyter_sandbox.orchestration.durable._store import Store

BIG_ARGUMENT = """
@tool
def f(s: str) -> int:
    return len(s)
"""
RED_TEAM = "%%orchestrate\ns = 'x' * 5_000_000\nn = 0\nfor i in range(200):\n    n += f(s)\nn"


def rss_mb(pid: int) -> float:
    """The process's resident memory, from ``/proc`` (no psutil)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def test_big_arguments_passed_in_ten_cells_leave_the_kernel_where_it_started(
    tmp_path: Path,
) -> None:
    """Before: +~950 MB a cell, never freed (1014, 1967, 2921, 3875 MB after four)."""
    with kernel(tmp_path / "store.sqlite") as k:
        k.ok(BIG_ARGUMENT)
        k.ok("%%orchestrate\nf('warm')")  # the worker pool, Monty, the store: loaded once
        pid = k.km.provisioner.pid  # type: ignore[union-attr]
        start = rss_mb(pid)
        grown = []
        for cell in range(10):
            ran = k.ok(RED_TEAM, timeout=600)
            assert ran.value == str(200 * 5_000_000), ran.text
            grown.append(round(rss_mb(pid) - start))
            assert grown[-1] < 300, f"kernel RSS grew by {grown} MB after {cell + 1} cells"
        assert k.ok("%%orchestrate\nf('next')").value == "4"
        print(f"kernel RSS {start:.0f} MB at the start, grown by {grown} MB")


def test_a_value_too_large_to_keep_is_a_summary_and_its_call_is_not_replayed() -> None:
    calls = []

    def f(s: str) -> int:
        calls.append(len(s))
        return len(s)

    journal = Journal()
    code = "s = 'x' * 2_000_000\nf('small') + f(s)"
    result = orchestrate(code, tools=[f], journal=journal)
    small, big = result.trace
    assert small.args == ("small",)
    (kept,) = big.args
    assert isinstance(kept, Summary) and kept["size"] == "2000000"
    assert kept["handle"] == "builtins.str" and len(kept["digest"]) == 16
    assert "2,000,000 bytes" in repr(kept)
    assert [c.status for c in journal.calls] == ["ok", "ok"]
    calls.clear()
    orchestrate(code, tools=[f], journal=journal, resume=True)
    assert calls == [2_000_000]  # the small call answered from the journal, the big one made


def test_a_run_keeps_values_whole_up_to_its_budget_then_summaries() -> None:
    def echo(s: str) -> str:
        return s

    journal = Journal()
    code = "[echo(str(i) * 300_000) for i in range(10)]"
    result = orchestrate(code, tools=[echo], journal=journal, keep=Keep(run=2))
    whole = [c for c in result.trace if not isinstance(c.result, Summary)]
    assert 2 <= len(whole) < 5, len(whole)  # 2 MB of 0.3 MB arguments and results
    assert journal.size <= 2 * 2**20
    assert result.value[9] == "9" * 300_000  # the code itself got every value


def test_the_kernels_journals_together_keep_at_most_their_budget() -> None:
    """``%config OrchestrateMagics.keep_kernel``: the least recently run cell is forgotten."""

    def echo(s: str) -> str:
        return s

    journals = Journals(budget=3 * 2**20)
    for cell in range(6):
        code = f"# {cell}\n[echo(str(i) * 200_000) for i in range(3)]"
        journal, _ = journals.start(f"cell{cell}", code, resume=False)
        orchestrate(code, tools=[echo], journal=journal)
        journals.finished(code, journal)
        assert journal.size > 2**20  # six values of 0.2 MB each, kept whole
        assert journals.size <= 3 * 2**20
    _, resumable = journals.start("cell5", "# 5", resume=True)
    assert resumable == 3  # the latest cell's journal is kept
    _, resumable = journals.start("cell0", "# 0", resume=True)
    assert resumable == 0  # the oldest was forgotten


def test_the_tool_cache_keeps_at_most_its_budget() -> None:
    def make(n: int) -> str:
        return "c" * n

    cache = ToolCache(budget=3 * 2**20)
    orchestrate("[make(1_000_000 + i) for i in range(10)]", tools=[make], cache=cache)
    assert len(cache) == 3  # the last three results, the oldest forgotten
    assert cache.get(cache.key("make", (1_000_009,), {}) or "")[0]


def test_a_tool_failing_with_a_huge_message_in_a_loop_keeps_both_ends_of_it() -> None:
    """Found probing: 100 calls raising ``ValueError('z' * 5_000_000)`` kept ~10 MB each
    (the error and the host traceback), 2.9 GB over three runs."""

    def boom(n: int) -> int:
        raise ValueError("start " + "z" * n + " end")

    code = (
        "for i in range(30):\n    try:\n        boom(2_000_000)\n    except ValueError:\n"
        "        pass"
    )
    result = orchestrate(code, tools=[boom])
    kept = sum(len(c.error or "") + len(c.host_traceback or "") for c in result.trace)
    assert kept < 2 * 2**20, kept
    first = result.trace[0]
    assert first.error is not None and first.error.startswith("ValueError: start zzz")
    assert first.error.endswith("zzz end") and "(2,000,022 characters, cut)" in first.error


def test_arguments_crossing_to_the_host_count_against_max_transfer() -> None:
    def f(s: str) -> int:
        return len(s)

    code = "s = 'x' * 1_000_000\nfor i in range(20):\n    f(s)"
    with pytest.raises(
        LimitExceeded, match=r"more than 8 MB.*Limits\(max_transfer=\.\.\.\)"
    ) as error:
        orchestrate(code, tools=[f], limits=Limits(max_transfer=8))
    assert error.value.limit == "transfer"
    assert len(error.value.result.trace) == 8  # the ninth call's arguments went past it


# -- the store --------------------------------------------------------------------

MB = 2**20
ONE_MB_ARGUMENT = """
@tool
def g(s: str) -> int:
    return len(s)

@tool(approve=True)
def gate(n: int) -> int:
    return n
"""


def body(cell: int) -> str:
    """The code of big-argument cell number ``cell`` (each cell of its own)."""
    return f"# cell {cell}\ns = 'y' * 1_000_000\nsum(g(s) for _ in range(300))"


def on_disk(store: Path) -> int:
    """Bytes of the store's file and its WAL, as ``du`` would count them."""
    return sum(
        os.path.getsize(path) for path in (store, Path(f"{store}-wal")) if os.path.exists(path)
    )


def kept_runs(store: Path) -> list[tuple[str, str, int]]:
    with sqlite3.connect(store) as db:
        rows = db.execute("SELECT cell, status, size FROM runs ORDER BY created").fetchall()
    return [(cell, status, size) for cell, status, size in rows]


def test_cells_passing_big_arguments_keep_the_store_within_its_caps(tmp_path: Path) -> None:
    """Before: three cells of 300 calls with a 1 MB argument grew store + WAL by ~290 MB each
    (581 -> 871 -> 1161 MB), and nothing ever shrank the file."""
    path = tmp_path / "store.sqlite"
    with kernel(path) as k:
        k.ok(ONE_MB_ARGUMENT)
        k.ok(
            "%config OrchestrateMagics.store_run = 8\n"
            "%config OrchestrateMagics.store_cell = 12\n"
            "%config OrchestrateMagics.store_total = 30"
        )
        k.ok("%%orchestrate\ngate(1)")  # waits for a person: never evicted
        assert kept_runs(path)[0][1] == "paused"
        sizes = []
        for cell in range(6):
            code = (
                f"%%orchestrate\n# cell {cell}\ns = 'y' * 1_000_000\nsum(g(s) for _ in range(300))"
            )
            ran = k.ok(code, timeout=600)
            assert ran.value == str(300 * 1_000_000), ran.text
            assert ran.text.count("filled its room in the store") == 1, ran.text
            assert "store_run" in ran.text
            sizes.append(on_disk(path) // MB)
            runs = kept_runs(path)
            assert sum(size for *_, size in runs) <= 30 * MB, runs
            assert sizes[-1] < 64, f"store + WAL: {sizes} MB"
        assert k.ok("%%orchestrate\ng('next')").value == "4"
    runs = kept_runs(path)
    assert runs[0][1] == "paused"  # kept through every eviction, and counted
    order = [hashlib.sha256(f"{body(n)}\n".encode()).hexdigest() for n in range(6)]  # cell ids
    kept = [order.index(cell) for cell, status, _ in runs if cell in order]
    assert 0 < len(kept) < 6 and kept == list(range(6 - len(kept), 6)), kept  # oldest went first
    print(f"store + WAL after each cell: {sizes} MB; runs kept: {len(runs)}")


def test_the_file_shrinks_when_runs_are_evicted(tmp_path: Path) -> None:
    store = Store(tmp_path / "store.sqlite")
    runs = []
    for cell in range(4):
        run = store.new_run(scope="nb", cell=f"c{cell}", code="", tools=[])
        store.record_calls(run, {i: {"args": (os.urandom(2**20),)} for i in range(10)})
        store.finish(run, "ok")
        runs.append(run)
    assert store.make_room(runs[-1]) > 0
    grown = on_disk(store.path)
    assert grown > 40 * MB
    store.caps = Keep(store_total=15)
    store.make_room(runs[-1])
    assert [r.run_id for r in store.runs()] == [runs[-1]]  # oldest first, the writer's kept
    assert store.size() <= 15 * MB
    shrunk = on_disk(store.path)
    assert shrunk < grown / 2, (grown, shrunk)
    print(f"store + WAL {grown // MB} MB -> {shrunk // MB} MB after eviction")


def test_a_store_file_that_could_not_shrink_is_made_incremental_once(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite"
    Store(path).close()
    with sqlite3.connect(path) as db:  # as a file made without incremental vacuum
        db.execute("PRAGMA journal_mode = DELETE")
        db.execute("PRAGMA auto_vacuum = NONE")
        db.execute("VACUUM")
        assert db.execute("PRAGMA auto_vacuum").fetchone() == (0,)
    Store(path).close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA auto_vacuum").fetchone() == (2,)
