"""The durable code mode magics in real kernels sharing a real store file (issue 11 items
2-5, notebook side): a gated call pauses the cell; a later cell, or a new kernel after
``kill -9`` of the first, approves or rejects it; a stored run is forked; a session outlives
its kernel; bad input is one line. Host-side counters prove which calls were made where."""

from __future__ import annotations

import re
import time

import pytest
from _kernels import Kernel, kernel

from jupyter_sandbox import Store
from jupyter_sandbox.records import TRACE_MIME

GATED = """
from jupyter_sandbox import tool
made = []

@tool
def count(n: int) -> int:
    made.append(("count", n))
    return n

@tool(approve=True)
def delete(path: str) -> str:
    made.append(("delete", path))
    return "deleted " + path
"""

CELL = """%%orchestrate
n = count(2)
try:
    said = delete("/data/old")
except PermissionError as e:
    said = "refused: " + str(e)
print(said)
(n, said)"""


def paused_run(ran) -> str:
    """The run id of the paused record a cell showed."""
    records = ran.records(TRACE_MIME)
    assert records, ran.text
    last = records[-1]
    assert last["status"] == "paused", last
    assert [call["tool"] for call in last["pending"]] == ["delete"]
    return str(last["run_id"])


def made(k: Kernel) -> str:
    return k.ok("made").value or ""


@pytest.fixture
def store(tmp_path):
    return tmp_path / "store.sqlite"


def test_a_gated_call_pauses_and_a_later_cell_approves_it(store):
    with kernel(store) as k:
        k.ok(GATED)
        run_id = paused_run(k.ok(CELL))
        assert made(k) == "[('count', 2)]"  # the gated call waits: not made
        pending = k.ok("%orchestrate_pending").text
        assert run_id in pending and "#1 delete('/data/old')" in pending
        approved = k.ok(f"%orchestrate_approve {run_id}")
        assert approved.value == "(2, 'deleted /data/old')"
        assert "deleted /data/old" in approved.text  # the continued run's print
        assert approved.records(TRACE_MIME)[-1]["status"] == "ok"
        # count(2) ran before the snapshot: it is not made again
        assert made(k) == "[('count', 2), ('delete', '/data/old')]"
        assert "no paused runs" in k.ok("%orchestrate_pending").text
        again = k.run(f"%orchestrate_approve {run_id}")
        assert again.status == "error" and "is ok, not paused" in again.text


def test_a_rejected_call_raises_permission_error_with_the_reason(store):
    with kernel(store) as k:
        k.ok(GATED)
        run_id = paused_run(k.ok(CELL))
        rejected = k.ok(f"%orchestrate_reject {run_id} not on a Friday")
        assert rejected.value == "(2, 'refused: not on a Friday')"
        assert made(k) == "[('count', 2)]"


def test_approve_in_a_new_kernel_after_the_first_was_killed(tmp_path):
    """Both kernels find the store through ``%config`` (their environment names another)."""
    shared = tmp_path / "shared.sqlite"
    setting = f"%config OrchestrateMagics.store = {str(shared)!r}"
    first = Kernel(tmp_path / "unused.sqlite")
    try:
        first.ok("%load_ext jupyter_sandbox\n" + setting)
        first.ok(GATED)
        run_id = paused_run(first.ok(CELL))
    finally:
        first.kill()
    with kernel(tmp_path / "unused.sqlite") as k:
        assert "no paused runs" in k.ok("%orchestrate_pending").text
        k.ok(setting)
        k.ok(GATED)  # the notebook's tools, defined again in the new kernel
        assert run_id in k.ok("%orchestrate_pending").text
        approved = k.ok(f"%orchestrate_approve {run_id}")
        assert approved.value == "(2, 'deleted /data/old')"
        # only the gated call is made here: count(2) came back with the snapshot
        assert made(k) == "[('delete', '/data/old')]"


def test_a_session_outlives_its_kernel(store):
    first = Kernel(store)
    try:
        first.ok("%load_ext jupyter_sandbox")
        first.ok(
            "%%orchestrate --session keep --quiet\n"
            "words = ['a', 'b']\ndef twice(s: str) -> str:\n    return s * 2"
        )
    finally:
        first.kill()
    with kernel(store) as k:
        assert "keep" in k.ok("%orchestrate_sessions").text
        again = k.ok("%%orchestrate --session keep --quiet\n[twice(w) for w in words]")
        assert again.value == "['aa', 'bb']"


def test_a_session_cell_approved_later_updates_its_session(store):
    """A ``--session`` cell that pauses at a gated call leaves its state in the session once
    it is approved and completes, as the cell would have without the gate."""
    with kernel(store) as k:
        k.ok(GATED)
        ran = k.ok(
            '%%orchestrate --session s\nn = count(2)\nsaid = delete("/data/x")\n'
            'label = said + "!"\nlabel'
        )
        run_id = paused_run(ran)
        assert k.ok(f"%orchestrate_approve {run_id}").value == "'deleted /data/x!'"
        after = k.ok("%%orchestrate --session s\n(n, label)")
        assert after.value == "(2, 'deleted /data/x!')"
        assert "label: str" in k.ok("%orchestrate_sessions").text
        assert made(k) == "[('count', 2), ('delete', '/data/x')]"


def test_fork_answers_a_call_with_the_given_value(store):
    with kernel(store) as k:
        k.ok(GATED)
        done = k.ok("%%orchestrate\nn = count(2)\nm = count(n + 1)\n(n, m)")
        assert done.value == "(2, 3)"
        run_id = str(done.records(TRACE_MIME)[-1]["run_id"])
        forked = k.ok(f"%orchestrate_fork {run_id} 0 --value 40")
        assert forked.value == "(40, 41)"
        record = forked.records(TRACE_MIME)[-1]
        assert record["forked_from"] == {"run_id": run_id, "call": 0}
        # call 0 was answered with the value, call 1 made again with its new argument
        assert made(k) == "[('count', 2), ('count', 3), ('count', 41)]"


def test_bad_input_is_one_line_saying_what_to_do(store):
    with kernel(store) as k:
        k.ok(GATED)
        run_id = k.ok("%%orchestrate\ncount(1)").records(TRACE_MIME)[-1]["run_id"]
        for line, message in (
            ("%orchestrate_approve nosuchrun", "RUN_ID 'nosuchrun' is not a run id: .*12 hex"),
            ("%orchestrate_approve 0123456789ab", "no run '0123456789ab' in .*_pending"),
            ("%orchestrate_reject 0123456789ab why", "no run '0123456789ab'"),
            (f"%orchestrate_fork {run_id} 0 --value {{x", "--value: not JSON"),
            (
                f"%orchestrate_fork {run_id} 9 --value 1",
                "N: run \\w+ has no call #9; it made calls #0",
            ),
            (f"%orchestrate_approve {run_id}", "is ok, not paused"),
            ("%orchestrate_reset", "required: NAME"),
            ("%orchestrate_reset a b", "unrecognized arguments: b"),
            ("%orchestrate_pending now", "unrecognized arguments: now"),
            ("%config OrchestrateMagics.store = '/etc/passwd/store.sqlite'", None),
            ("%%orchestrate\n1", "OrchestrateMagics.store: cannot open the store at /etc/"),
            ("%config OrchestrateMagics.store = ''", None),
            ("%orchestrate_pending", "no store \\(%config OrchestrateMagics.store is empty\\)"),
        ):
            if message is None:
                k.ok(line)
                continue
            ran = k.run(line)
            shown = ran.text.strip()  # IPython prints a UsageError alone, on stderr
            assert ran.status == "error" and shown.startswith("UsageError: "), (line, shown)
            assert "\n" not in shown and re.search(message, shown), (line, shown)


def test_no_store_keeps_a_cell_out_of_the_store(store):
    with kernel(store) as k:
        k.ok(GATED)
        stays = k.run("%%orchestrate --no-store --quiet\ndelete('/x')")
        assert stays.status == "error" and "approver" in stays.text
        assert made(k) == "[]"


SLOW = """
import asyncio, pathlib
from jupyter_sandbox import tool
made = []

@tool
def count(n: int) -> int:
    made.append(("count", n))
    return n

@tool
async def slow(n: int) -> int:
    made.append(("slow", n))
    pathlib.Path({started!r}).touch()
    await asyncio.sleep({seconds})
    return n * 10
"""

SLOW_CELL = "%%orchestrate --resume --quiet\nn = count(1)\nm = await slow(n + 1)\n(n, m)"


def counted_written(store) -> bool:
    """Whether the store's newest run holds count(1)'s record (call 0)."""
    if not store.exists():
        return False
    with Store(store) as opened:
        runs = opened.runs()
        return bool(runs) and 0 in opened.run(runs[0].run_id).calls


def test_resume_after_kill_continues_from_the_snapshot(tmp_path, store):
    """The kernel dies while the cell waits on a slow tool, once count(1)'s record is written
    (within a second of its end: records are written in batches, see `_durable`); in a new
    kernel the same cell with --resume continues from the snapshot: count(1) is not made
    again, the slow call (which never completed) is."""
    started = tmp_path / "started"
    first = Kernel(store)
    try:
        first.ok("%load_ext jupyter_sandbox")
        first.ok(SLOW.format(started=str(started), seconds=600))
        first.start(SLOW_CELL)
        deadline = time.monotonic() + 120
        while not (started.exists() and counted_written(store)):
            assert time.monotonic() < deadline, "the slow tool never started, or count's record"
            time.sleep(0.1)
    finally:
        first.kill()
    with kernel(store) as k:
        k.ok(SLOW.format(started=str(started), seconds=0))
        resumed = k.ok(SLOW_CELL)
        assert resumed.value == "(1, 20)"
        assert made(k) == "[('slow', 2)]"


# -- in this process's IPython (the `shell` fixture): how a line reaches the fork magic --------


@pytest.fixture
def forkable(shell, store):
    """A real shell whose OrchestrateMagics.store is ``store``, with one stored run that made
    one call (count(1)); yields the shell and the run's id."""
    shell.run_line_magic("config", f"OrchestrateMagics.store = {str(store)!r}")
    try:
        assert shell.run_cell(GATED).success
        assert shell.run_cell("%%orchestrate --quiet\ncount(1)").result == 1
        yield shell, Store(store).runs()[0].run_id
    finally:
        shell.run_line_magic("config", "OrchestrateMagics.store = None")


def test_a_fork_takes_a_literal_and_expands_no_variable(forkable, capsys):
    shell, run_id = forkable
    shell.user_ns["edited"] = {"rows": [1, 2], "note": "a b"}
    # a Python literal as written (single quotes, spaces)
    forked = shell.run_cell(
        f"%orchestrate_fork {run_id} 0 --value {{'rows': [1, 2], 'note': 'a b'}}"
    )
    assert forked.success and forked.result == {"rows": [1, 2], "note": "a b"}
    # {edited} is not expanded (issue 20: no %orchestrate_* magic runs what is between braces)
    refused = shell.run_cell(f"%orchestrate_fork {run_id} 0 --value {{edited}}")
    assert not refused.success
    assert "--value: not JSON nor a Python literal: {edited}" in capsys.readouterr().err
    # JSON in quotes, as a shell would write it; the quotes are dropped
    forked = shell.run_cell(f"""%orchestrate_fork {run_id} 0 --value '{{"rows": [3]}}'""")
    assert forked.success and forked.result == {"rows": [3]}


def test_a_fork_call_number_counts_only_the_calls_made(forkable, capsys):
    """The run's inputs are kept under record -1: N=-1 is no call, and the error lists the
    calls the code made by their trace numbers (#0 here)."""
    shell, run_id = forkable
    for n in (-1, 1):
        ran = shell.run_cell(f"%orchestrate_fork {run_id} {n} --value 5")
        assert not ran.success
        shown = capsys.readouterr().err.strip()
        assert shown == (
            f"UsageError: N: run {run_id} has no call #{n}; it made calls #0 (the trace's # column)"
        ), shown
    assert shell.run_cell(f"%orchestrate_fork {run_id} 0 --value 5").result == 5
