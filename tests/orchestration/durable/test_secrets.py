"""A secret a sandbox tool returns to orchestration code, across durable runs and live views
(README safety table, the secrets row): it never reaches the durable store's file, the live
trace masks it while the run lasts, and a run resumed or approved in a new kernel masks it as
the original run would.

Real parts: Docker containers (the sandbox tools), Monty workers, Jupyter kernels (``kill -9``
and a new `KernelManager`), the SQLite store in ``tmp_path``, whose bytes (with its ``-wal``)
are searched for the secret. Each test fails if its part of the masking is taken out: the
store keeping the value, the checkpoint holding it, the live view's previews, the resumed
run's `Scrub` seeded from its sandbox tools.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _durable_kernels import wait_for
from _kernels import Kernel, Ran

from jupyter_sandbox import create, orchestrate, tool
from jupyter_sandbox._shared._scrub import SECRET as SECRET_MARKER
from jupyter_sandbox._shared._secrets import HIDDEN, forms
from jupyter_sandbox.orchestration.durable._store import Store, StoredRun

SECRET = "r2-tök-✓-Qv93ZkLm-s3cr3t"
"""Non-ASCII: its UTF-8 bytes differ from its characters, and both are searched."""
TRACE = "application/vnd.jupyter-sandbox.trace+json"


def _shows(*texts: str) -> bool:
    """Whether any text shows the secret, in any spelling a program may print it in."""
    spellings = [*forms([SECRET]), html.escape(SECRET)]
    return any(s in t for t in texts for s in spellings)


def _on_disk(path: Path) -> list[str]:
    """The files of the store at ``path`` (the database, its WAL, its shared memory) whose
    bytes hold the secret, in any spelling."""
    spellings = [s.encode() for s in forms([SECRET])]
    files = [p for p in path.parent.glob(path.name + "*") if p.is_file()]
    assert files  # the store exists: the search below can fail
    return [p.name for p in files if any(s in p.read_bytes() for s in spellings)]


def _the_run(store: Store) -> StoredRun | None:
    listed = store.runs()
    return store.run(listed[0].run_id) if listed else None


# -- the store, in this process -------------------------------------------------------------


@pytest.fixture
def token(monkeypatch: pytest.MonkeyPatch, docker_engine: Any, no_leaked_containers: Any) -> Any:
    """A sandbox tool returning the secret ``R2_TOKEN`` holds (set for this test)."""
    monkeypatch.setenv("R2_TOKEN", SECRET)
    return tool(
        create(
            "token",
            code="import os\ntok = os.environ['R2_TOKEN']",
            outputs={"tok": str},
            secrets=["R2_TOKEN"],
        )
    )


def test_a_durable_run_keeps_no_secret_in_its_store_file(tmp_path: Path, token: Any) -> None:
    """The token call's result, a call's argument, a call's error and the snapshot at the
    next sandbox call (the code holds the token there) would each put the secret in the file."""
    box = tool(create("box", code="n = 1", outputs={"n": int}))

    @tool
    def echo(text: str) -> int:
        return len(text)

    @tool
    def check(text: str) -> None:
        raise ValueError(f"rejected {text}")

    code = (
        "tok = await token()\n"
        "n = echo(tok)\n"
        "m = await box()\n"  # a sandbox call: a checkpoint is due, and the dump holds tok
        "try:\n"
        "    check(tok)\n"
        "except ValueError:\n"
        "    pass\n"
        "[tok, n, m]\n"
    )
    path = tmp_path / "store.sqlite"
    result = orchestrate(code, tools=[token, box, echo, check], store=path)
    assert result.value == [SECRET, len(SECRET), 1]  # the code had the real value
    stored = Store(path).run(result.run_id)
    records = [stored.calls[i] for i in sorted(stored.calls) if i >= 0]
    assert [r["tool"] for r in records] == ["token", "echo", "box", "check"]
    assert records[0]["result"] == {"handle": SECRET_MARKER}  # made again on resume
    assert records[1]["args"] == ({"handle": SECRET_MARKER},)
    assert records[3]["error"] is not None and "***" in records[3]["error"]
    assert stored.checkpoint is not None
    assert stored.checkpoint.call_index == 0  # the one before token(); not the one at box()
    assert _on_disk(path) == []


def test_an_input_holding_a_returned_secret_is_not_kept(tmp_path: Path, token: Any) -> None:
    """A notebook variable holding the token (``--out`` of an earlier cell) given as an input:
    the store names it as not kept, so a resume must be given it again."""
    tok = orchestrate("await token()", tools=[token]).value
    path = tmp_path / "store.sqlite"
    result = orchestrate("len(tok)", inputs={"tok": tok, "n": 1}, store=path)
    assert result.value == len(SECRET)
    inputs = Store(path).run(result.run_id).calls[-1]["inputs"]
    assert inputs == {"tok": {"handle": SECRET_MARKER}, "n": 1}
    assert _on_disk(path) == []


def test_a_session_holding_a_secret_is_kept_in_the_kernel_only(tmp_path: Path, token: Any) -> None:
    """The session's state is dropped from the store (a new kernel finds none rather than an
    older one), and this process goes on with it."""
    path, scope = tmp_path / "store.sqlite", tmp_path.name
    orchestrate("n = 1", session="s", store=path, scope=scope)
    assert [info.name for info in Store(path).sessions(scope)] == ["s"]
    orchestrate("tok = await token()", tools=[token], session="s", store=path, scope=scope)
    assert Store(path).sessions(scope) == []
    again = orchestrate("[n, len(tok)]", tools=[token], session="s", store=path, scope=scope)
    assert again.value == [1, len(SECRET)]
    assert _on_disk(path) == []


# -- real kernels ---------------------------------------------------------------------------

TOOLS = """
%load_ext jupyter_sandbox
from pathlib import Path
from jupyter_sandbox import create, tool

FLAG = Path({flag!r})
token = tool(create(
    "token", code="import os\\ntok = os.environ['R2_TOKEN']", outputs={{"tok": str}},
    secrets=["R2_TOKEN"],
))

@tool
def hang() -> None:
    FLAG.touch()
    while {hang}:
        pass

@tool
def pause(seconds: float) -> None:
    import time
    time.sleep(seconds)

@tool(approve=True)
def deploy(key: str) -> int:
    return len(key)
"""


@pytest.fixture
def kernels(tmp_path: Path, docker_engine: Any, no_leaked_containers: Any) -> Iterator[Any]:
    """Starts kernels on one store in ``tmp_path`` with ``R2_TOKEN`` set and the tools above;
    shuts down (or has killed) every one it started."""
    path = tmp_path / "store.sqlite"
    started: list[Kernel] = []

    def start(*, hang: bool = False) -> Kernel:
        k = Kernel(path, env={"R2_TOKEN": SECRET})
        started.append(k)
        k.ok(TOOLS.format(flag=str(tmp_path / "hanging"), hang=hang))
        return k

    start.path = path  # type: ignore[attr-defined]
    try:
        yield start
    finally:
        for k in started:
            if k.km.is_alive():
                k.close()


def _everything(ran: Ran) -> str:
    return json.dumps(ran.outputs, ensure_ascii=False, default=str)


def test_the_live_trace_masks_a_returned_secret_on_iopub(kernels: Any) -> None:
    """While the run lasts, the live trace shows the token call's result and the call it is
    passed to; no iopub message of the cell (live updates included) carries the secret."""
    k = kernels()
    ran = k.ok("%%orchestrate\ntok = await token()\npause(1.0)\npause(1.0)\nlen(tok)")
    live = [
        r
        for r in ran.records(TRACE)
        if r["status"] == "running"
        and any(c["tool"] == "token" and c["result"] is not None for c in r["calls"])
    ]
    assert live  # a live update showed the token call finished, before the run ended
    assert ran.value == str(len(SECRET))
    assert not _shows(_everything(ran))


RESUMED = """%%orchestrate --out kept
tok = await token()
print("got", tok)
hang()
print("after", tok)
tok
"""


def test_a_killed_kernels_run_resumed_in_a_new_kernel_masks_the_secret(kernels: Any) -> None:
    path = kernels.path
    flag = path.parent / "hanging"
    first = kernels(hang=True)
    try:
        first.start(RESUMED)
        wait_for("hang() to run in the first kernel", flag.exists)
    finally:
        first.kill()
    run = _the_run(Store(path))
    assert run is not None and run.status == "running"
    second = kernels()
    resumed = second.ok(RESUMED.replace("--out kept", "--out kept --resume"))
    assert "after ***" in resumed.text
    assert resumed.value == HIDDEN
    real = second.ok("assert kept == __import__('os').environ['R2_TOKEN']")
    assert not _shows(_everything(resumed), _everything(real))
    assert Store(path).run(run.run_id).status == "ok"
    assert _on_disk(path) == []


APPROVED = """%%orchestrate
tok = await token()
deploy(tok)
print("after", tok)
"""


def test_a_run_approved_in_a_new_kernel_masks_the_secret_its_snapshot_holds(
    kernels: Any,
) -> None:
    """The pause's snapshot is taken after token() returned: the approved run starts there,
    with no call of token() to learn the secret from. It masks it from its start anyway."""
    first = kernels()
    paused = first.ok(APPROVED)
    assert not _shows(_everything(paused))
    first.kill()
    run = _the_run(Store(kernels.path))
    assert run is not None and run.status == "paused"
    second = kernels()
    approved = second.ok(f"%orchestrate_approve {run.run_id}")
    assert "after ***" in approved.text
    assert not _shows(_everything(approved))
