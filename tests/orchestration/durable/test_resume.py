"""Resuming and answering stored runs in the engine, with real Monty workers, real SQLite stores in
tmp_path and real processes: a paused run's call is read from the store (no Monty), a paused
session run updates its session when approved, a run live in another process is not taken up
twice (a dead one is), a resumed snapshot runs under the limits given now, and a fork's N is
the trace's ``#``. Host-side counters prove which calls ran."""

from __future__ import annotations

import json
import os
import pickle
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_sandbox import Store, fork_run, orchestrate, resume_run
from jupyter_sandbox.errors import SandboxConfigError, StoreError, ToolError
from jupyter_sandbox.orchestration import Limits, Tool
from jupyter_sandbox.orchestration.durable._paused import paused_runs

TOOLS = textwrap.dedent(
    """
    import os, time

    def _count(name):
        with open(os.environ["COUNTS"], "a") as f:
            f.write(name + "\\n")

    def step(x: int) -> int:
        _count("step")
        return x * 2

    def hold(x: int) -> int:
        # blocks while the file $HOLD exists: a run that stays "running" in its process
        _count("hold")
        while os.path.exists(os.environ.get("HOLD", "")):
            time.sleep(0.05)
        return x + 1

    def delete(path: str, force: bool = False) -> str:
        _count("delete")
        return "deleted " + path
    """
)


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, object]]:
    """The tools module importable (here and in child processes), the counter file, a store
    path; all in tmp_path."""
    (tmp_path / "gap_tools.py").write_text(TOOLS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("COUNTS", str(tmp_path / "counts"))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    import gap_tools

    yield tmp_path, gap_tools
    sys.modules.pop("gap_tools", None)


def counts(tmp_path: Path) -> dict[str, int]:
    path = tmp_path / "counts"
    names = path.read_text().split() if path.exists() else []
    return {name: names.count(name) for name in set(names)}


def tools(mod: object) -> list[Tool]:
    return [Tool(mod.step), Tool(mod.hold), Tool(mod.delete, approve=True)]  # type: ignore[attr-defined]


GATED = 'x = step(1)\nr = delete("/data/old", force=True)\n[x, r]'


def python(script: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
    )


def written(store: Store) -> set[int]:
    """The call records of the store's newest run (its inputs' record, -1, apart)."""
    listed = store.runs()
    return {i for i in store.run(listed[0].run_id).calls if i >= 0} if listed else set()


# -- 1. the pending call is in the checkpoint ---------------------------------------------


def test_paused_runs_reads_the_gated_call_from_the_store_without_a_monty_worker(env):
    tmp_path, mod = env
    store = tmp_path / "s.sqlite"
    paused = orchestrate(GATED, tools=tools(mod), store=store)
    assert paused.status == "paused"
    (waiting,) = paused.pending
    saved = Store(store).run(paused.run_id).checkpoint
    assert saved is not None and saved.call == {
        "call_id": waiting.call_id,
        "index": 1,
        "tool": "delete",
        "args": ("/data/old",),
        "kwargs": {"force": True},
        "digest": paused.to_record()["pending"][0]["digest"],  # the call shown is the one kept
        "chars": len("'/data/old'") + len("True"),
    }
    # a fresh process lists it: no Monty pool is ever started there
    lister = python(
        f"""
        import json
        from jupyter_sandbox.orchestration import _workers
        from jupyter_sandbox.orchestration.durable._paused import paused_runs
        from jupyter_sandbox import Store
        (run,) = paused_runs(Store({str(store)!r}))
        print(json.dumps([run.run_id, run.tool, run.args, run.kwargs, run.call_id,
                          len(_workers.current().pools)]))
        """
    )
    out, err = lister.communicate(timeout=120)
    assert lister.returncode == 0, err
    assert json.loads(out) == [
        paused.run_id,
        "delete",
        ["/data/old"],
        {"force": True},
        waiting.call_id,
        0,  # no worker pool: the store alone answered
    ]
    assert counts(tmp_path) == {"step": 1}


def test_a_version_1_store_is_migrated_and_its_paused_run_still_approved(env):
    """A store written before the schema kept owners and the checkpoint's call: opening it
    adds the column and bumps the version; its paused run lists without its call (the store
    never had it) and is approved as before."""
    tmp_path, mod = env
    path = tmp_path / "old.sqlite"
    paused = orchestrate(GATED, tools=tools(mod), store=path)
    old = Store(path)
    with sqlite3.connect(path) as db:  # make it what version 1 wrote
        db.execute("ALTER TABLE runs DROP COLUMN owner")
        db.execute("ALTER TABLE runs DROP COLUMN size")  # version 3's
        db.execute("ALTER TABLE runs DROP COLUMN prompt")  # version 4's
        db.execute("ALTER TABLE runs DROP COLUMN answered")  # version 5's
        db.execute("UPDATE meta SET value = '1' WHERE key = 'schema'")
        (payload,) = db.execute("SELECT payload FROM checkpoints").fetchone()
        dump, index, pending, _ = pickle.loads(payload)
        payload = pickle.dumps((dump, index, pending))
        _, mac = old._seal("checkpoint", (paused.run_id,), payload)
        db.execute("UPDATE checkpoints SET payload = ?, mac = ?", (payload, mac))
    old.close()

    migrated = Store(path)
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone() == ("5",)
        (size,) = db.execute("SELECT size FROM runs").fetchone()
        assert size > 0  # counted from its rows
    run = migrated.run(paused.run_id)
    assert run.checkpoint is not None and run.checkpoint.call is None and run.owner is None
    (listed,) = paused_runs(migrated)
    assert (listed.run_id, listed.tool) == (paused.run_id, None)
    done = resume_run(paused.run_id, approve=True, store=migrated, tools=tools(mod))
    assert done.value == [2, "deleted /data/old"]
    assert counts(tmp_path) == {"step": 1, "delete": 1}


# -- 2. a paused session run updates its session ------------------------------------------


def test_a_paused_session_run_updates_its_session_when_resume_run_completes_it(env):
    tmp_path, mod = env
    store = tmp_path / "s.sqlite"
    scope = f"gaps-{tmp_path.name}"
    code = 'n = step(2)\nsaid = delete("/data/x")\nlabel = said + "!"\nlabel'
    paused = orchestrate(code, tools=tools(mod), store=store, session="s", scope=scope)
    assert paused.status == "paused"
    done = resume_run(paused.run_id, approve=True, store=store, tools=tools(mod))
    assert done.value == "deleted /data/x!" and done.session == "s"
    after = orchestrate("(n, label)", tools=tools(mod), store=store, session="s", scope=scope)
    assert after.value == (4, "deleted /data/x!")
    assert counts(tmp_path) == {"step": 1, "delete": 1}


# -- 3. a run live in another process is not taken up twice --------------------------------


def test_a_run_running_in_a_live_process_is_refused_and_taken_over_once_it_is_killed(env):
    tmp_path, mod = env
    store = tmp_path / "s.sqlite"
    hold = tmp_path / "hold"
    hold.touch()
    db = Store(store)
    code = "a = step(1)\nb = hold(a)\nc = step(b)\n[a, b, c]"
    other = python(
        f"""
        import gap_tools as m
        from jupyter_sandbox import orchestrate
        from jupyter_sandbox.orchestration import Tool
        orchestrate({code!r}, tools=[Tool(m.step), Tool(m.hold)], store={str(store)!r})
        """,
        HOLD=str(hold),
    )
    try:
        deadline = time.monotonic() + 120
        # the other process is inside hold(2), and step(1)'s record is written (a timer
        # writes it within a second): so a resume answers step(1) from it
        while counts(tmp_path).get("hold") != 1 or 0 not in written(db):
            assert time.monotonic() < deadline and other.poll() is None
            time.sleep(0.05)
        (info,) = db.runs()
        assert info.status == "running"
        with pytest.raises(StoreError) as refused:
            resume_run(info.run_id, store=store, tools=tools(mod))
        assert str(refused.value) == (
            f"run {info.run_id} is running in process {other.pid}: interrupt it there or wait"
        )
        assert db.run(info.run_id).status == "running"  # left as it was
        other.send_signal(signal.SIGKILL)
        other.wait(timeout=60)
    finally:
        if other.poll() is None:
            other.kill()
            other.wait(timeout=60)
        other.stdout.close()  # type: ignore[union-attr]
        other.stderr.close()  # type: ignore[union-attr]
    hold.unlink()
    taken = resume_run(info.run_id, store=store, tools=tools(mod))
    assert taken.value == [2, 3, 6] and taken.run_id == info.run_id
    owner = db.run(info.run_id).owner
    assert owner is not None and owner.process.pid == os.getpid()
    assert counts(tmp_path) == {"step": 2, "hold": 2}  # hold had not finished: made again


# -- 4. a resumed snapshot runs under the limits given now ---------------------------------


def test_a_run_paused_under_a_tight_memory_limit_resumes_under_a_larger_one(env):
    tmp_path, mod = env
    store = tmp_path / "s.sqlite"
    code = 'x = step(1)\nr = delete("/data/a")\nbig = [x] * 3_000_000\nlen(big)'
    paused = orchestrate(code, tools=tools(mod), store=store, limits=Limits(max_memory=8))
    assert paused.status == "paused"
    done = resume_run(
        paused.run_id,
        approve=True,
        store=store,
        tools=tools(mod),
        limits=Limits(max_memory=256),
    )
    assert done.value == 3_000_000


# -- 5. fork N is the trace's # -------------------------------------------------------------


def test_fork_n_is_the_number_the_trace_shows_when_the_code_sleeps_between_calls(env):
    tmp_path, mod = env
    store = tmp_path / "s.sqlite"
    code = "import asyncio\na = step(1)\nawait asyncio.sleep(0.01)\nb = step(a)\n[a, b]"
    first = orchestrate(code, tools=tools(mod), store=store)
    assert first.value == [2, 4]
    numbers = [call.call_id for call in first.trace]
    assert numbers[1] != 1, numbers  # the sleep took a number: # and order differ
    fork = fork_run(first.run_id, numbers[1], value=100, store=store, tools=tools(mod))
    assert fork.value == [2, 100]
    assert fork.forked_from == (first.run_id, numbers[1])
    assert counts(tmp_path) == {"step": 2}  # step(1) answered from the store, b by the value
    listed = ", ".join(f"#{n}" for n in numbers)
    with pytest.raises(SandboxConfigError) as wrong:
        fork_run(first.run_id, 1, value=0, store=store, tools=tools(mod))
    assert str(wrong.value) == (
        f"call_index: run {first.run_id} has no call #1; it made calls {listed} "
        "(the trace's # column)"
    )


# -- a run taken up whose driver is never made is given back, not left "running" -----------


def _interrupt_making_the_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C lands while the run's driver is being made (after the run was taken up in the
    store): the kernel's SIGINT raises KeyboardInterrupt at whatever line runs then."""
    from jupyter_sandbox.orchestration import _plan

    real = _plan.Driver

    def interrupted(*args: object, **kwargs: object) -> object:
        monkeypatch.setattr(_plan, "Driver", real)  # once
        raise KeyboardInterrupt

    monkeypatch.setattr(_plan, "Driver", interrupted)


def test_ctrl_c_while_a_paused_run_is_taken_up_leaves_it_paused(env, monkeypatch):
    tmp_path, mod = env
    store = tmp_path / "s.sqlite"
    paused = orchestrate(GATED, tools=tools(mod), store=store)
    _interrupt_making_the_driver(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        resume_run(paused.run_id, approve=True, store=store, tools=tools(mod))
    assert Store(store).run(paused.run_id).status == "paused"  # not "running" in this kernel
    done = resume_run(paused.run_id, approve=True, store=store, tools=tools(mod))
    assert done.value == [2, "deleted /data/old"]
    assert counts(tmp_path) == {"step": 1, "delete": 1}


def test_ctrl_c_while_a_fork_is_begun_records_it_interrupted(env, monkeypatch):
    tmp_path, mod = env
    store = tmp_path / "s.sqlite"
    done = orchestrate("step(1) + step(2)", tools=tools(mod), store=store)
    _interrupt_making_the_driver(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        fork_run(done.run_id, 1, 10, store=store, tools=tools(mod))
    (fork,) = [run for run in Store(store).runs() if run.run_id != done.run_id]
    assert fork.status == "interrupted"  # a new run that never ran: not "running"
    assert fork_run(done.run_id, 1, 10, store=store, tools=tools(mod)).value == 2 + 10


def test_a_durable_run_nested_too_deep_is_recorded_as_an_error_not_running(env, monkeypatch):
    """`LimitExceeded` for nesting comes from making the driver, after the run was begun in
    the store: the record said "running" for as long as the kernel lived."""
    driver_module = sys.modules["jupyter_sandbox.orchestration._driver"]
    tmp_path, mod = env
    store = tmp_path / "s.sqlite"
    monkeypatch.setattr(driver_module, "NESTING_CEILING", 0)

    def nested() -> int:
        return orchestrate("step(1)", tools=tools(mod), store=store, cell="inner").value

    with pytest.raises(ToolError, match="nested more than 0 levels"):
        orchestrate("nested()", tools=[Tool(nested)], type_check=False)
    (inner,) = Store(store).runs()
    assert inner.status == "error"


def test_ctrl_c_while_a_dead_kernels_run_is_taken_over_leaves_it_to_take_over_again(
    env, monkeypatch
):
    """A run left "running" by a kernel that died is taken over (claimed: its owner becomes
    this process). Given back with its status alone, it was "running" in this live process,
    refused by every resume until a restart: its owner must go back too."""
    from jupyter_sandbox.orchestration.durable._store import this_process

    tmp_path, mod = env
    store = tmp_path / "s.sqlite"
    paused = orchestrate(GATED, tools=tools(mod), store=store)
    host, _, token = this_process().encode().rsplit(" ", 2)
    start, boot, ns = token.split("-")
    dead = f"{host} {os.getppid()} {int(start) + 1}-{boot}-{ns}"  # a reused pid: gone
    with sqlite3.connect(store) as db:
        db.execute("UPDATE runs SET status = 'running', owner = ?", (dead,))
    _interrupt_making_the_driver(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        resume_run(paused.run_id, store=store, tools=tools(mod))
    again = resume_run(paused.run_id, store=store, tools=tools(mod))
    assert again.status == "paused"  # taken over: asked again, nobody answered it
    assert counts(tmp_path) == {"step": 1}
