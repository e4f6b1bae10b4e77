"""The durable code mode magics in real kernels sharing a real store file (the
notebook side): a gated call pauses the cell; a later cell, or a new kernel after
``kill -9`` of the first, approves or rejects it; a stored run is forked; a session outlives
its kernel; bad input is one line. Host-side counters prove which calls were made where."""

from __future__ import annotations

import re
import time

import pytest
from _durable_cells import CELL, GATED, made, paused_run
from _kernels import Kernel, kernel

from jupyter_sandbox import Store
from jupyter_sandbox.records import TRACE_MIME


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
        again = k.ok(f"%orchestrate_approve {run_id}")  # the cell run again: one calm line
        assert (
            again.text.strip()
            == f"run {run_id} already answered in cell [{approved.execution_count}]"
        )
        assert made(k) == "[('count', 2), ('delete', '/data/old')]"


def test_an_answered_approval_run_again_after_a_restart_says_so_and_the_cells_after_it_run(store):
    """A Run All after a restart runs the paused cell again (a new run pauses) and then the
    cells the buttons inserted, which answered the old run: each says in one line where its
    run was answered and which run waits now, and raises nothing, so the cells after it run.
    Only the run that is paused now is answered by a magic that names it."""
    with kernel(store) as k:
        k.ok(GATED)
        approved_id = paused_run(k.ok(CELL))
        approved = k.ok(f"%orchestrate_approve {approved_id}")
        rejected_id = paused_run(k.ok(CELL))
        rejected = k.ok(f"%orchestrate_reject {rejected_id} not now")
        assert rejected.value == "(2, 'refused: not now')"
    with kernel(store) as k:  # the restart, then Run All
        k.ok(GATED)
        waiting = paused_run(k.ok(CELL))
        for run_id, answered in ((approved_id, approved), (rejected_id, rejected)):
            for magic in (f"%orchestrate_approve {run_id}", f"%orchestrate_reject {run_id} no"):
                again = k.ok(magic)
                assert again.text.strip() == (
                    f"run {run_id} already answered in cell [{answered.execution_count}]; "
                    f"run {waiting} above is waiting now"
                )
        assert made(k) == "[('count', 2)]"  # nothing answered twice, the new run still waits
        assert [run.run_id for run in Store(store).runs(status="paused")] == [waiting]
        assert k.ok(f"%orchestrate_approve {waiting}").value == "(2, 'deleted /data/old')"
        never = k.run("%orchestrate_approve 0123456789ab")  # no such run: refused as before
        assert never.status == "error" and "no run '0123456789ab'" in never.text


@pytest.mark.parametrize(
    "tidy",
    [
        "from jupyter_sandbox import orchestrator\n@tool\n@orchestrator\n",
        "@tool\n",
    ],
    ids=["orchestrator", "tool-calling-it-as-python"],
)
def test_a_gated_call_a_cell_makes_through_another_tool_is_refused_not_made(store, tidy):
    """The cell's run would pause for a person at a gated call; a call made inside its tool
    (an orchestrator's nested run, or the tool's own Python calling the gated tool) cannot,
    so it is refused in one line saying it needs approval. The same call made by the cell's
    own code still pauses for a person."""
    with kernel(store) as k:
        k.ok(GATED)
        k.ok(tidy + "def tidy(path: str) -> str:\n    return delete(path)\n")
        ran = k.run("%%orchestrate\ntidy('/data/old')")
        assert ran.status == "error"
        assert "delete() needs approval" in ran.text and "cannot pause" in ran.text
        assert made(k) == "[]"
        assert Store(store).runs(status="paused") == []
        paused_run(k.ok(CELL))
        assert made(k) == "[('count', 2)]"


def test_a_rejected_call_raises_permission_error_with_the_reason(store):
    with kernel(store) as k:
        k.ok(GATED)
        run_id = paused_run(k.ok(CELL))
        rejected = k.ok(f"%orchestrate_reject {run_id} not on a Friday")
        assert rejected.value == "(2, 'refused: not on a Friday')"
        assert made(k) == "[('count', 2)]"


def test_a_run_id_in_a_variable_is_named_with_a_dollar_and_nothing_else_expands(store):
    """``%orchestrate_approve $run_id`` (and reject, fork) reads the variable's value; a
    missing or non-string variable is one line, and ``{...}`` is still not run."""
    with kernel(store) as k:
        k.ok(GATED)
        k.ok(f"run_id = {paused_run(k.ok(CELL))!r}")
        for line, says in [
            ("%orchestrate_approve $nothing", "RUN_ID $nothing: no notebook variable nothing"),
            ("%orchestrate_approve $made", "RUN_ID $made: made is a list, not a run id"),
            ("%orchestrate_approve {run_id}", "RUN_ID"),
        ]:
            shown = k.run(line).text.strip()
            assert shown.startswith("UsageError: ") and "\n" not in shown, shown
            assert says in shown, shown
        approved = k.ok("%orchestrate_approve $run_id")
        assert approved.value == "(2, 'deleted /data/old')"
        k.ok(f"again = {paused_run(k.ok(CELL))!r}")
        rejected = k.ok("%orchestrate_reject $again not on a Friday, $run_id")
        assert rejected.value == "(2, 'refused: not on a Friday, $run_id')"  # the reason as written
        forked = k.ok("%orchestrate_fork $run_id 0 --value 5").records(TRACE_MIME)[-1]
        assert forked["forked_from"]["run_id"] == k.ok("run_id").value.strip("'"), forked


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
            ("%orchestrate_pending now", "RUN_ID 'now' is not a run id: .*12 hex"),
            ("%orchestrate_pending 0123456789ab now", "unrecognized arguments: now"),
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
    # {edited} is not expanded (no %orchestrate_* magic runs what is between braces)
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


def test_a_call_the_listing_cuts_is_approved_only_with_its_digest(forkable, store, capsys):
    """%orchestrate_pending shows a call on one line, cut past it: a person who approves from
    the listing has not seen the call whole, so approving without --expect is refused with
    the digest to give; a call the line shows whole is approved without one."""
    shell, _ = forkable
    long_path = "/data/" + "x" * 80 + "/.ssh"
    assert shell.run_cell(f"%%orchestrate --quiet\ndelete({long_path!r})").success
    (run,) = Store(store).runs(status="paused")
    shell.run_line_magic("orchestrate_pending", "")
    assert "(arguments cut" in capsys.readouterr().out
    refused = shell.run_cell(f"%orchestrate_approve {run.run_id}")
    assert not refused.success
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "longer than %orchestrate_pending's line shows" in err
    digest = re.search(r"--expect ([0-9a-f]{16})", err).group(1)
    assert shell.user_ns["made"] == [("count", 1)]
    approved = shell.run_cell(f"%orchestrate_approve {run.run_id} --expect {digest}")
    assert approved.success and approved.result == "deleted " + long_path
    assert shell.run_cell("%%orchestrate --quiet\ndelete('/tmp/a')").success
    (short,) = Store(store).runs(status="paused")
    assert shell.run_cell(f"%orchestrate_approve {short.run_id}").result == "deleted /tmp/a"


# -- --resume after a failure takes the inputs given now ------------------

MENDED = """
from jupyter_sandbox import tool
made = []
flaky_once = [True]

@tool
def step(n: int) -> int:
    made.append(("step", n))
    return n

@tool
def flaky(n: int) -> int:
    made.append(("flaky", n))
    if flaky_once.pop() if flaky_once else False:
        raise ConnectionError("try again")
    return n * 10
"""

FLAKY_CELL = "%%orchestrate --in k{resume}\na = step(1)\nflaky(k) + a"


def test_resume_after_a_failure_uses_the_input_set_since(store):
    """(a) flaky(k) fails; the person sets k = 5 and runs --resume: step(1) is answered from
    the record (the code runs from the top), flaky is called with the new k, and one line says
    k changed. With k as it was, --resume continues from the snapshot as before."""
    with kernel(store) as k:
        k.ok(MENDED)
        k.ok("k = 1")
        failed = k.run(FLAKY_CELL.format(resume=""))
        assert failed.status == "error" and "try again" in failed.text
        k.ok("k = 5")
        resumed = k.ok(FLAKY_CELL.format(resume=" --resume"))
        assert resumed.value == "51"
        assert made(k) == "[('step', 1), ('flaky', 1), ('flaky', 5)]"
        changed = [line for line in resumed.printed.splitlines() if "changed" in line]
        assert len(changed) == 1 and "input k changed" in changed[0], resumed.text
        # the same inputs: from the snapshot, step(1) not repeated, no line about inputs
        k.ok("flaky_once.append(True); made.clear()")
        assert k.run(FLAKY_CELL.format(resume="")).status == "error"
        again = k.ok(FLAKY_CELL.format(resume=" --resume"))
        assert again.value == "51" and "changed" not in again.text
        assert made(k) == "[('step', 1), ('flaky', 5), ('flaky', 5)]"


def test_resume_sees_a_changed_input_too_big_for_the_store(store):
    """An input over the store's 1 MB for a value is kept as its digest: set smaller after a
    failure, --resume still sees the change and calls flaky with the new length."""
    with kernel(store) as k:
        k.ok(MENDED)
        k.ok("big = list(range(300_000))")
        cell = "%%orchestrate --in big{resume}\na = step(1)\nflaky(len(big)) + a"
        assert k.run(cell.format(resume="")).status == "error"
        k.ok("big = [1, 2]")
        resumed = k.ok(cell.format(resume=" --resume"))
        assert resumed.value == "21" and "input big changed" in resumed.text
        assert made(k) == "[('step', 1), ('flaky', 300000), ('flaky', 2)]"


LOOP_CELL = """%%orchestrate --in n --timeout 1{resume}
total = 0
for i in range(n):
    total += step(i)
    busy = 0
    while busy < 20000:  # Monty's own time: what --timeout counts
        busy += 1
total"""


def test_resume_after_a_timeout_with_a_smaller_bound_finishes(store):
    """(b) a loop bounded by n hits --timeout 1; the person lowers n and runs --resume: the
    loop runs to the new bound (its first calls answered from the record), not into the same
    limit again."""
    with kernel(store) as k:
        k.ok(MENDED)
        k.ok("n = 10**6")
        timed_out = k.run(LOOP_CELL.format(resume=""))
        assert timed_out.status == "error" and "timeout" in timed_out.text.lower()
        k.ok("n = 3; made.clear()")
        resumed = k.ok(LOOP_CELL.format(resume=" --resume"))
        assert resumed.value == "3"  # 0 + 1 + 2
        assert "input n changed" in resumed.text
        assert made(k) == "[]"  # step(0..2) were made before the timeout: answered


# -- approve what you see --------------------------------------------

SHOWN = """
from jupyter_sandbox import tool
made = []

class Targets:
    def __init__(self, paths):
        self.paths = paths
    def __repr__(self):
        return f"Targets({self.paths!r})"

@tool(approve=True)
def delete(paths: list[str]) -> int:
    '''Delete every one of paths.

    Folders too.'''
    made.append(paths)
    return len(paths)

@tool(approve=True)
def wipe(targets: object) -> str:
    made.append(targets.paths)
    return "wiped"

@tool(approve=True)
def send(body: str, to: str) -> int:
    made.append(("send", len(body), to))
    return len(body)
"""

PATHS = [f"/data/tmp/cache-{i}" for i in range(12)] + ["/home/alice/.ssh"]


def pending_call(ran) -> dict:
    """The one pending call of the paused record a cell showed."""
    (call,) = ran.records(TRACE_MIME)[-1]["pending"]
    return call


def test_the_record_of_a_paused_call_holds_every_argument_and_its_digest(store):
    """13 paths: the record carries the list whole (the 13th is the one that matters) and a
    digest; approving with another digest makes nothing and leaves the run paused; with its
    own digest the call is made."""
    with kernel(store) as k:
        k.ok(SHOWN)
        k.ok(f"paths = {PATHS!r}")
        ran = k.ok("%%orchestrate --in paths\ndelete(paths)")
        run_id, call = paused_run_id(ran), pending_call(ran)
        assert call["args"] == [repr(PATHS)] and "cut" not in call
        digest = call["digest"]
        assert re.fullmatch("[0-9a-f]{16}", digest)
        listed = k.ok("%orchestrate_pending").text
        assert f"digest {digest}" in listed
        wrong = k.run(f"%orchestrate_approve {run_id} --expect {'0' * 16}")
        assert wrong.status == "error" and "is not the call approved" in wrong.text
        assert made(k) == "[]" and Store(store).run(run_id).status == "paused"
        bad = k.run(f"%orchestrate_approve {run_id} --expect nope")
        assert bad.status == "error" and "not a digest" in bad.text
        approved = k.ok(f"%orchestrate_approve {run_id} --expect {digest}")
        assert approved.value == "13" and "/home/alice/.ssh" in made(k)


def shown_views(ran) -> tuple[str, str]:
    """The text and HTML views of the last record a cell showed."""
    (data,) = [
        msg["content"]["data"]
        for msg in ran.outputs
        if TRACE_MIME in msg["content"].get("data", {})
    ][-1:]
    return data["text/plain"], data["text/html"].replace("&#x27;", "'")


def test_a_paused_calls_views_show_its_arguments_whole_by_name_beside_the_tools_summary(store):
    """The 13th path is the one that matters: the text and HTML views show the list whole,
    named by the tool's parameter, under the first line of the tool's docstring."""
    with kernel(store) as k:
        k.ok(SHOWN)
        k.ok(f"paths = {PATHS!r}")
        text, html = shown_views(k.ok("%%orchestrate --in paths\ndelete(paths)"))
        assert f"  #0 delete  line 2  Delete every one of paths.\n      paths={PATHS!r}\n" in text
        assert '"jsb-arg-name">paths=</td>' in html and f">{PATHS!r}</pre>" in html
        assert "Delete every one of paths." in html and "Folders too" not in text + html
        assert "cut" not in text


def test_a_paused_call_cut_in_its_views_says_how_much_and_the_magic_that_shows_all(store):
    """Past `PENDING_SHOWN` the long argument is cut, the short one beside it is whole (each
    named from the signature though passed by position); the views say how many characters
    they left out, and the magic they name shows that run's call whole."""
    from jupyter_sandbox.display._format import PENDING_SHOWN

    with kernel(store) as k:
        k.ok(SHOWN)
        ran = k.ok("%%orchestrate\nsend('a long body ' * 2_000, 'bob')")
        run_id, call = paused_run_id(ran), pending_call(ran)
        whole = len(repr("a long body " * 2_000))
        note = (
            f"... {whole - (PENDING_SHOWN - len(repr('bob'))):,} more characters cut (of body):"
            f" run `%orchestrate_pending {run_id} --full` to see them all"
        )
        text, html = shown_views(ran)
        for view in (text, html):
            assert note in view and "to=" in view and "'bob'" in view
        assert call["params"] == ["body", "to"]
        listed = k.ok(f"%orchestrate_pending {run_id} --full").text
        assert listed.startswith(run_id)
        assert listed.split("  #0 ", 1)[1].count("a long body") == 2_000  # the call, whole
        other = k.ok("%orchestrate_pending 0123456789ab").text
        assert other.startswith("no paused run 0123456789ab in ")
        bad = k.run("%orchestrate_pending nope")
        assert bad.status == "error" and "\n" not in bad.text.strip()


def test_a_call_too_big_to_show_whole_is_approved_only_with_its_digest(store):
    """A 300,000-character body: the record carries its first part and says how long it is
    whole; the small argument beside it is whole; Approve without the digest is refused."""
    with kernel(store) as k:
        k.ok(SHOWN)
        ran = k.ok("%%orchestrate\nsend('a very long body ' * 16_000, to='bob')")
        run_id, call = paused_run_id(ran), pending_call(ran)
        assert call["kwargs"] == {"to": "'bob'"}
        assert call["cut"] == {"0": 17 * 16_000 + 2}
        assert 90_000 < len(call["args"][0]) < 100_000
        blind = k.run(f"%orchestrate_approve {run_id}")
        assert blind.status == "error" and "approved only with its digest" in blind.text
        assert call["digest"] in blind.text and made(k) == "[]"
        full = k.ok("%orchestrate_pending --full").text
        assert full.split("  #0 ", 1)[1].count("a very long body") == 16_000  # the call
        approved = k.ok(f"%orchestrate_approve {run_id} --expect {call['digest']}")
        assert approved.value == str(17 * 16_000)


def test_an_argument_over_the_stores_size_is_still_shown_whole(store):
    """A 2,000,000-character body is not kept in the store's call record (over 1 MB): the
    record shows its first part, and %orchestrate_pending --full reads it from the run's
    snapshot, whole, with the digest it paused with."""
    with kernel(store) as k:
        k.ok(SHOWN)
        ran = k.ok("%%orchestrate\nsend('y' * 2_000_000, to='bob')")
        call = pending_call(ran)
        assert call["cut"] == {"0": 2_000_002}
        full = k.ok("%orchestrate_pending --full").text
        assert "'" + "y" * 2_000_000 + "'" in full
        assert f"digest {call['digest']}" in full and "it paused as" not in full


def test_a_handle_approved_in_the_kernel_that_paused_is_the_object_shown(store):
    """The panel showed Targets(['/data/old']); a later cell rebinds `targets`: Approve passes
    the object the run was given, not the variable's new value."""
    with kernel(store) as k:
        k.ok(SHOWN)
        k.ok("targets = Targets(['/data/old'])")
        ran = k.ok("%%orchestrate --in targets\nwipe(targets)")
        run_id, call = paused_run_id(ran), pending_call(ran)
        assert call["args"] == ["Targets(['/data/old'])"]
        k.ok("targets = Targets(['/home/alice'])")
        assert "Targets(['/data/old'])" in k.ok("%orchestrate_pending").text
        approved = k.ok(f"%orchestrate_approve {run_id}")  # here no digest is needed
        assert approved.value == "'wiped'"
        assert made(k) == "[['/data/old']]"
        # what an approval after a restart would bind instead, said in the record
        assert call["bindings"] == [{"variable": "targets", "type": "__main__.Targets"}]


def test_an_object_changed_in_place_after_the_pause_is_not_approved_unseen(store):
    """The same object, changed after the panel showed it (a later cell appends to its list):
    Approve, with the panel's digest or without one, makes nothing; the call as it is now is
    shown with its new digest, which approves it."""
    with kernel(store) as k:
        k.ok(SHOWN)
        k.ok("targets = Targets(['/data/old'])")
        ran = k.ok("%%orchestrate --in targets\nwipe(targets)")
        run_id, shown = paused_run_id(ran), pending_call(ran)["digest"]
        k.ok("targets.paths.append('/home/alice')")
        blind = k.run(f"%orchestrate_approve {run_id}")
        assert blind.status == "error" and "not the call it paused with" in blind.text
        old = k.run(f"%orchestrate_approve {run_id} --expect {shown}")
        assert old.status == "error" and "is not the call approved" in old.text
        now = pending_call(old)
        assert now["args"] == ["Targets(['/data/old', '/home/alice'])"]
        assert made(k) == "[]"
        k.ok(f"%orchestrate_approve {run_id} --expect {now['digest']}")
        assert made(k) == "[['/data/old', '/home/alice']]"


def test_after_a_restart_a_handle_binds_the_variable_shown_before_the_answer(tmp_path, store):
    """After a restart `targets` holds something else: %orchestrate_pending names the
    variable and shows what it holds now; Approve without the digest is refused, and with the
    panel's digest (of the old object) too, the record then showing the call as it is now;
    approving that digest makes it."""
    first = Kernel(store)
    try:
        first.ok("%load_ext jupyter_sandbox")
        first.ok(SHOWN)
        first.ok("targets = Targets(['/data/old'])")
        ran = first.ok("%%orchestrate --in targets\nwipe(targets)")
        run_id, shown = paused_run_id(ran), pending_call(ran)["digest"]
    finally:
        first.kill()
    with kernel(store) as k:
        k.ok(SHOWN)
        k.ok("targets = Targets(['/home/alice'])")
        listed = k.ok("%orchestrate_pending").text
        assert "binds notebook variable `targets`, now Targets(['/home/alice'])" in listed
        assert f"it paused as {shown}" in listed
        blind = k.run(f"%orchestrate_approve {run_id}")
        assert blind.status == "error" and "binds notebook variable `targets`" in blind.text
        old = k.run(f"%orchestrate_approve {run_id} --expect {shown}")
        assert old.status == "error" and "is not the call approved" in old.text
        now = pending_call(old)
        assert now["args"] == ["Targets(['/home/alice'])"] and now["digest"] != shown
        assert made(k) == "[]" and Store(store).run(run_id).status == "paused"
        k.ok(f"%orchestrate_approve {run_id} --expect {now['digest']}")
        assert made(k) == "[['/home/alice']]"


def paused_run_id(ran) -> str:
    """The run id of the paused record a cell showed (any gated tool)."""
    last = ran.records(TRACE_MIME)[-1]
    assert last["status"] == "paused", last
    return str(last["run_id"])
