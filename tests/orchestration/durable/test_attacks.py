"""An adversarial review of durable code mode, against real Monty workers and real
SQLite stores in tmp_path: what a person answers is what happens, a store others can read or
swap is refused, a resume or approval that fails before its run starts leaves the run as it
was, and racing approvals make the gated call once. Host-side counters prove which calls ran.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from _kernels import TOOLS, Kernel
from IPython.core.error import UsageError

from jupyter_sandbox import Store, fork_run, orchestrate, resume_run
from jupyter_sandbox.errors import Interrupted, SandboxConfigError, StoreError, ToolError
from jupyter_sandbox.orchestration import Tool
from jupyter_sandbox.orchestration.durable._durable import open_store
from jupyter_sandbox.orchestration.durable._paused import paused_runs
from jupyter_sandbox.orchestration.durable._store import this_process

TRACE = "application/vnd.jupyter-sandbox.trace+json"

GATED = 'x = step(1)\nr = delete("/data/old")\n[x, r]'


class Calls:
    """The tools, each counting its calls on the host."""

    def __init__(self) -> None:
        self.made: list[str] = []
        self._lock = threading.Lock()

    def step(self, x: int) -> int:
        with self._lock:
            self.made.append("step")
        return x * 2

    def delete(self, path: str) -> str:
        with self._lock:
            self.made.append(f"delete {path}")
        return "deleted " + path

    def tools(self, *, gated: bool = True) -> list[Tool]:
        def step(x: int) -> int:
            return self.step(x)

        def delete(path: str) -> str:
            return self.delete(path)

        return [Tool(step), Tool(delete, approve=gated)]


@pytest.fixture
def calls() -> Calls:
    return Calls()


def status(path: Path, run_id: str) -> str:
    return open_store(path).run(run_id).status


# -- what the person answered is what happens ---------------------------------------------


def test_a_rejected_call_is_not_made_when_its_tool_is_no_longer_gated(calls, tmp_path):
    """The kernel that answers registers the tool without approve= (or a predicate that now
    says no): the person's rejection still stands."""
    store = tmp_path / "s.sqlite"
    paused = orchestrate(GATED, tools=calls.tools(), store=store)
    assert paused.status == "paused"
    with pytest.raises(ToolError, match="PermissionError: no"):
        resume_run(
            paused.run_id, approve=False, reason="no", store=store, tools=calls.tools(gated=False)
        )
    assert calls.made == ["step"]


# -- a resume that fails before its run starts leaves the run as it was -------------------


def tamper_session(path: Path, name: str) -> None:
    from jupyter_sandbox.orchestration.durable._sessions import sessions

    sessions.drop("adversarial", name)  # this process's copy: the store's is read next
    with sqlite3.connect(path) as db:
        db.execute("UPDATE sessions SET payload = payload || x'00' WHERE name = ?", (name,))


def paused_in_a_tampered_session(calls, tmp_path):
    """A run of session ``s`` paused at its gated call, the session's stored dump then
    modified: the store's path, the session's options and the paused result."""
    store = tmp_path / "s.sqlite"
    session = {"session": "s", "scope": "adversarial"}
    orchestrate("k = 1", tools=calls.tools(), store=store, **session)
    paused = orchestrate(GATED, tools=calls.tools(), store=store, **session)
    tamper_session(store, "s")
    return store, session, paused


def test_an_approval_refused_before_the_run_starts_leaves_it_paused(calls, tmp_path):
    """Its session's dump is refused (modified, or another Monty's): the run stays paused,
    and approving it works once the session is reset, in this very process."""
    store, _, paused = paused_in_a_tampered_session(calls, tmp_path)
    with pytest.raises(StoreError, match=r"session 's'.*modified"):
        resume_run(paused.run_id, approve=True, store=store, tools=calls.tools())
    assert status(store, paused.run_id) == "paused"
    open_store(store).drop_session("adversarial", "s")
    done = resume_run(paused.run_id, approve=True, store=store, tools=calls.tools())
    assert done.value == [2, "deleted /data/old"]
    assert calls.made == ["step", "delete /data/old"]


def test_a_resume_refused_before_the_run_starts_leaves_it_as_it_was(calls, tmp_path):
    store, session, paused = paused_in_a_tampered_session(calls, tmp_path)
    with pytest.raises(StoreError, match=r"session 's'.*modified"):
        orchestrate(GATED, tools=calls.tools(), store=store, resume=True, **session)
    assert status(store, paused.run_id) == "paused"


# -- the store's file and folder ----------------------------------------------------------


def test_a_store_file_others_can_read_is_refused(tmp_path):
    path = tmp_path / "s.sqlite"
    Store(path).close()
    os.chmod(path, 0o644)
    with pytest.raises(StoreError, match=f"readable or writable by others.*chmod 600 {path}"):
        Store(path)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_store_file_another_user_owns_is_refused(tmp_path):
    path = tmp_path / "s.sqlite"
    Store(path).close()
    os.chown(path, 65534, 65534)
    with pytest.raises(StoreError, match="belongs to uid 65534"):
        Store(path)


def test_a_store_in_a_folder_others_can_write_is_refused(tmp_path):
    """Anyone could put their own ``-wal`` file (which then receives our writes) or swap the
    store there."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    with pytest.raises(StoreError, match=f"folder {shared} is writable by others"):
        Store(shared / "s.sqlite")
    assert not (shared / "s.sqlite").exists() and not (shared / "key").exists()


@pytest.mark.parametrize("version", ["abc", "0", ""])
def test_a_store_with_an_unreadable_schema_version_is_refused_in_one_line(tmp_path, version):
    path = tmp_path / "s.sqlite"
    Store(path).close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value = ? WHERE key = 'schema'", (version,))
    with pytest.raises(StoreError, match=f"schema version {version!r}, which no jupyter"):
        Store(path)


# -- odd input ------------------------------------------------------------------------------


@pytest.mark.parametrize("number", [-1, 10**30, "0", True, 0.0, None])
def test_a_fork_of_a_call_number_not_in_the_run_lists_the_valid_ones(calls, tmp_path, number):
    store = tmp_path / "s.sqlite"
    done = orchestrate("a = step(1)\nstep(a)", tools=calls.tools(), store=store)
    with pytest.raises(SandboxConfigError, match=r"it made calls #0, #1 \(the trace's #"):
        fork_run(done.run_id, number, value=5, store=store, tools=calls.tools())
    assert calls.made == ["step", "step"]


def test_a_run_whose_owner_pid_was_reused_is_taken_over(calls, tmp_path):
    """Its owner names a live pid (our parent's) with another start time: a new process has
    that number, the run's is gone."""
    store = tmp_path / "s.sqlite"
    paused = orchestrate(GATED, tools=calls.tools(), store=store)
    host, _, token = this_process().encode().rsplit(" ", 2)
    start, boot, ns = token.split("-")
    reused = f"{host} {os.getppid()} {int(start) + 1}-{boot}-{ns}"
    with sqlite3.connect(store) as db:
        db.execute("UPDATE runs SET status = 'running', owner = ?", (reused,))
    again = resume_run(paused.run_id, store=store, tools=calls.tools())
    assert again.status == "paused"  # asked again: nobody answered it
    assert calls.made == ["step"]


def test_a_paused_run_whose_checkpoint_is_refused_is_listed_without_hiding_the_others(
    calls, tmp_path
):
    """One run's checkpoint modified (or saved by another Monty version, after an upgrade):
    %orchestrate_pending still lists every paused run, that one with the reason."""
    store = tmp_path / "s.sqlite"
    first = orchestrate('delete("/a")', tools=calls.tools(), store=store)
    second = orchestrate('delete("/b")', tools=calls.tools(), store=store)
    with sqlite3.connect(store) as db:
        db.execute(
            "UPDATE checkpoints SET payload = payload || x'00' WHERE run_id = ?", (second.run_id,)
        )
    listed = {run.run_id: run for run in paused_runs(open_store(store))}
    assert listed[first.run_id].args == ("/a",) and listed[first.run_id].refused is None
    refused = listed[second.run_id].refused
    assert refused is not None and "modified outside jupyter-sandbox" in refused
    with pytest.raises(StoreError, match="modified outside"):
        resume_run(second.run_id, approve=True, store=store, tools=calls.tools())
    assert calls.made == []


# -- interrupts -----------------------------------------------------------------------------


def test_an_approved_call_interrupted_on_the_host_is_asked_again_on_resume(calls, tmp_path):
    """Ctrl-C (a real SIGINT, sent by the tool once it runs) while the approved call runs:
    the run is left interrupted, and resuming it pauses at that call again instead of making
    it unasked (the approval was spent); a second approval makes it."""
    store = tmp_path / "s.sqlite"
    release = threading.Event()

    def delete(path: str) -> str:
        calls.made.append(f"delete {path}")
        if len(calls.made) == 2:  # the first approval's call: stopped by Ctrl-C
            os.kill(os.getpid(), signal.SIGINT)
            release.wait(60)
        return "deleted " + path

    tools = [Tool(calls.step), Tool(delete, approve=True)]
    paused = orchestrate(GATED, tools=tools, store=store)
    try:
        with pytest.raises(Interrupted, match=r"the call to delete\(\).*was abandoned"):
            resume_run(paused.run_id, approve=True, store=store, tools=tools)
    finally:
        release.set()
    assert status(store, paused.run_id) == "interrupted"
    again = resume_run(paused.run_id, store=store, tools=tools)
    assert again.status == "paused" and calls.made == ["step", "delete /data/old"]
    done = resume_run(paused.run_id, approve=True, store=store, tools=tools)
    assert done.value == [2, "deleted /data/old"]
    assert calls.made == ["step", "delete /data/old", "delete /data/old"]


def test_approving_an_interrupted_run_says_how_to_continue_it(shell, calls, tmp_path):
    store = tmp_path / "s.sqlite"
    paused = orchestrate(GATED, tools=calls.tools(), store=store)
    with sqlite3.connect(store) as db:  # as the interrupted approval above leaves it
        db.execute("UPDATE runs SET status = 'interrupted'")
    shell.run_line_magic("config", f"OrchestrateMagics.store = {str(store)!r}")
    try:
        with pytest.raises(UsageError) as refused:
            shell.run_line_magic("orchestrate_approve", paused.run_id)
    finally:
        shell.run_line_magic("config", "OrchestrateMagics.store = None")
    assert str(refused.value) == (
        f"run {paused.run_id} is interrupted, not paused: nothing to approve or reject; "
        f"jupyter_sandbox.resume_run('{paused.run_id}') continues it (a gated call it has not "
        "made waits for an answer again)"
    )


def test_pending_says_when_it_cut_a_call_and_full_shows_what_the_call_will_get(
    shell, calls, tmp_path, capsys
):
    """A person approving from %orchestrate_pending must be able to see every argument: a
    long path hides what follows it (here ``recursive=True``) in the one-line listing."""
    store = tmp_path / "s.sqlite"

    def remove(path: str, recursive: bool = False) -> str:
        calls.made.append(f"remove {path} {recursive}")
        return "removed"

    path = "/home/user/projects/reports/2024/quarterly/drafts/old/../../../.."
    paused = orchestrate(
        f"remove({path!r}, recursive=True)", tools=[Tool(remove, approve=True)], store=store
    )
    assert paused.status == "paused"
    shell.run_line_magic("config", f"OrchestrateMagics.store = {str(store)!r}")
    try:
        capsys.readouterr()
        shell.run_line_magic("orchestrate_pending", "")
        listed = capsys.readouterr().out
        shell.run_line_magic("orchestrate_pending", "--full")
        full = capsys.readouterr().out
    finally:
        shell.run_line_magic("config", "OrchestrateMagics.store = None")
    assert "recursive=True" not in listed
    assert "(arguments cut: %orchestrate_pending --full shows them whole)" in listed
    assert f"#0 remove({path!r}, recursive=True)" in full and "arguments cut" not in full
    assert calls.made == []


# -- in a real kernel -----------------------------------------------------------------------

KERNEL_TOOLS = """
import os, time
from jupyter_sandbox import tool

@tool(approve=True)
def remove(name: str) -> str:
    with open({made!r}, "a") as f:
        f.write(name + "\\n")
    while os.path.exists({hold!r}):  # held until the test has interrupted the kernel
        time.sleep(0.05)
    return "removed " + name
"""


def test_ctrl_c_during_an_approved_call_in_a_kernel_leaves_a_run_that_asks_again(tmp_path):
    """%orchestrate_approve, then the kernel is interrupted while the approved call runs:
    one line says so; approving again says how to continue; continuing asks again."""
    made, hold = tmp_path / "made", tmp_path / "hold"
    hold.touch()
    k = Kernel(tmp_path / "store.sqlite")
    try:
        k.ok(TOOLS + KERNEL_TOOLS.format(made=str(made), hold=str(hold)))
        paused = k.ok("%%orchestrate\nremove('a')")
        (run_id,) = {r["run_id"] for r in paused.records(TRACE) if r.get("run_id")}
        msg_id = k.start(f"%orchestrate_approve {run_id}")
        deadline = time.monotonic() + 120
        while not made.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        k.km.interrupt_kernel()
        outputs = []
        while True:
            msg = k.client.get_iopub_msg(timeout=120)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                break
            outputs.append(msg)
        errors = [m["content"] for m in outputs if m["msg_type"] == "error"]
        assert len(errors) == 1, errors
        assert "the call to remove(), still running" in errors[0]["evalue"]
        hold.unlink()
        again = k.run(f"%orchestrate_approve {run_id}")
        assert again.status == "error"
        assert "is interrupted, not paused" in again.text and "resume_run" in again.text
        asked = k.ok(f"import jupyter_sandbox\njupyter_sandbox.resume_run({run_id!r}).status")
        assert asked.value == "'paused'"
        assert made.read_text() == "a\n"
    finally:
        hold.unlink(missing_ok=True)
        k.close()
