"""Durable code mode across kernels, with real Jupyter kernels
(``kill -9`` and a new `KernelManager`), a real SQLite store in ``tmp_path``, real Monty and
real Docker.

The tools count their calls in a host file, so what ran in which kernel is seen across
processes; the tests read the store from this process to know when a kernel is where they want
to kill it (a call completed, a checkpoint written), never by sleeping.
"""

from __future__ import annotations

import ast
import sqlite3
import textwrap
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from _durable_kernels import alive, counted, descendants, the_run, wait_for
from _kernels import Kernel

from jupyter_sandbox.orchestration.durable._store import Store, StoredRun

TRACE = "application/vnd.jupyter-sandbox.trace+json"

TOOLS = """
%load_ext jupyter_sandbox
import asyncio
from pathlib import Path
from jupyter_sandbox import tool

COUNTER = Path({counter!r})
DELAY = {delay}  # seconds `slow` takes: long in the kernel that is killed, 0 after

def count(line: str) -> None:
    with COUNTER.open("a") as f:
        print(line, file=f)

@tool
def step(n: int) -> int:
    count(f"step {{n}}")
    return n * 10

@tool
async def quick(n: int) -> int:
    count(f"quick {{n}}")
    return n * 10

@tool
async def slow(n: int) -> int:
    count(f"slow {{n}} started")
    await asyncio.sleep(DELAY)
    count(f"slow {{n}} done")
    return n * 10

@tool(approve=True)
def remove(name: str) -> str:
    count(f"remove {{name}}")
    return f"removed {{name}}"
"""

BOX = """
from jupyter_sandbox import create
box = create(
    "box",
    code="import random, time\\ntime.sleep({delay} if slow else 0)\\nnonce = random.random()",
    inputs={{"slow": bool}},
    outputs={{"nonce": float}},
)
tool(box)
"""


def started(store: Path, delay: float) -> Kernel:
    """A kernel on ``store`` with the tools above, counting into ``counter`` beside it."""
    k = Kernel(store)
    k.ok(TOOLS.format(counter=str(store.parent / "counter"), delay=delay))
    return k


def completed(run: StoredRun, tool: str) -> bool:
    return any(r["tool"] == tool and r["status"] == "ok" for i, r in run.calls.items() if i >= 0)


def trace(ran: Any) -> dict[str, Any]:
    """The last state of the cell's trace record."""
    return ran.records(TRACE)[-1]


def live_calls(record: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """The calls a trace shows as made in this run (not answered from a record)."""
    return [(c["tool"], c["args"]) for c in record["calls"] if not c["replayed"]]


SLOW_CELL = """
import asyncio
print("before the checkpoint")
a = step(1)
b, c = await asyncio.gather(quick(2), slow(3))
print("after the checkpoint")
d = step(4)
[a, b, c, d]
"""


def test_a_killed_kernel_resumes_from_its_checkpoint_in_a_new_kernel(tmp_path):
    path = tmp_path / "store.sqlite"
    store = Store(path)
    first = started(path, delay=3600)
    try:
        first.start("%%orchestrate --quiet" + SLOW_CELL)
        # quick(2) finished and slow(3) is running: the checkpoint before slow(3) is stored
        run = wait_for(
            "quick(2) recorded while slow(3) runs",
            lambda: (
                (r := the_run(store)) is not None
                and completed(r, "quick")
                and counted(path)["slow 3 started"] == 1
                and r
            ),
        )
        assert run.checkpoint is not None and run.status == "running"
        workers = descendants(first.km.provisioner.pid)
        assert workers  # the cell's Monty worker, at least
    finally:
        first.kill()
    wait_for("the killed kernel's Monty workers to end", lambda: not alive(workers))

    second = started(path, delay=0)
    try:
        resumed = second.ok("%%orchestrate --resume" + SLOW_CELL)
    finally:
        second.close()
    assert resumed.value == "[10, 20, 30, 40]"
    assert "after the checkpoint" in resumed.text
    assert "before the checkpoint" not in resumed.text  # the code before it did not run again
    assert counted(path) == {
        "step 1": 1,  # before the checkpoint: not again
        "quick 2": 1,  # completed in the killed kernel: answered from its record
        "slow 3 started": 2,  # in flight at the kill: made again (the in-flight rule)
        "slow 3 done": 1,
        "step 4": 1,
    }
    assert store.run(run.run_id).status == "ok"


def test_a_run_live_in_another_kernel_is_refused_until_that_kernel_is_killed(tmp_path):
    """Two kernels on one store: the second may not ``--resume`` the cell the first is still
    running (both would make its calls); once the first is killed, it takes the run over."""
    path = tmp_path / "store.sqlite"
    store = Store(path)
    first = started(path, delay=3600)
    second = started(path, delay=0)
    try:
        first.start("%%orchestrate --quiet" + SLOW_CELL)
        run = wait_for(  # and the records before it written: a resume answers them
            "quick(2) recorded while slow(3) runs in the first kernel",
            lambda: (
                (r := the_run(store)) is not None
                and completed(r, "quick")
                and counted(path)["slow 3 started"] == 1
                and r
            ),
        )
        refused = second.run("%%orchestrate --resume" + SLOW_CELL)
        pid = first.km.provisioner.pid  # type: ignore[union-attr]
        assert refused.status == "error"
        assert refused.text.strip() == (
            f"UsageError: run {run.run_id} is running in process {pid}: interrupt it there or wait"
        )
        assert store.run(run.run_id).status == "running"
        assert counted(path)["step 4"] == 0 and counted(path)["slow 3 started"] == 1
        first.kill()
        resumed = second.ok("%%orchestrate --resume" + SLOW_CELL)
    finally:
        if first.km.is_alive():  # not killed: the test failed before
            first.close()
        second.close()
    assert resumed.value == "[10, 20, 30, 40]"
    taken = store.run(run.run_id)
    assert taken.status == "ok" and taken.owner is not None and taken.owner.process.pid != pid
    assert counted(path)["step 1"] == 1  # before the checkpoint: not made again
    assert counted(path)["slow 3 started"] == 2  # in flight at the kill: made again


BIG_CELL = """
a = step(1)
b = await slow(2)
big = [a] * 3_000_000
len(big)
"""


def test_resume_in_a_new_kernel_runs_under_the_limits_it_is_given(tmp_path):
    """A run killed under ``--max-memory 8`` resumes under ``--max-memory 256``: the
    snapshot's own limits are replaced by those the resuming cell gives."""
    path = tmp_path / "store.sqlite"
    store = Store(path)
    first = started(path, delay=3600)
    try:
        first.start("%%orchestrate --quiet --max-memory 8" + BIG_CELL)
        wait_for(
            "step(1) recorded while slow(2) runs",
            lambda: (
                (r := the_run(store)) is not None
                and completed(r, "step")
                and counted(path)["slow 2 started"] == 1
            ),
        )
    finally:
        first.kill()
    second = started(path, delay=0)
    try:
        resumed = second.ok("%%orchestrate --quiet --resume --max-memory 256" + BIG_CELL)
    finally:
        second.close()
    assert resumed.value == "3000000"
    assert counted(path)["step 1"] == 1  # before the checkpoint: not made again


def kernel_containers(docker_engine: Any, pid: int) -> list[dict[str, Any]]:
    labels = ["jupyter-sandbox.kind=run", f"jupyter-sandbox.owner-pid={pid}"]
    return docker_engine.api.containers(all=True, filters={"label": labels})


def running_a_program(docker_engine: Any, pid: int) -> bool:
    """Whether a container of kernel ``pid`` runs a sandbox's code (an exec besides its sleep)."""
    for found in kernel_containers(docker_engine, pid):
        try:
            processes = docker_engine.api.top(found["Id"])["Processes"] or []
        except Exception:  # removed meanwhile
            continue
        if any("python" in " ".join(p) for p in processes):
            return True
    return False


BOX_CELL = """
print("before the checkpoint")
first = await box(False)
second = await box(True)
print("after the checkpoint")
[first, second]
"""


@pytest.mark.docker
def test_a_killed_kernel_resumes_a_sandbox_tool_and_leaks_no_container(tmp_path, docker_engine):
    path = tmp_path / "store.sqlite"
    store = Store(path)
    first = started(path, delay=0)
    pid = first.km.provisioner.pid
    try:
        first.ok(BOX.format(delay=3600))
        first.start("%%orchestrate --quiet" + BOX_CELL)
        run = wait_for(
            "the first sandbox call recorded and the second one's container running",
            lambda: (
                (r := the_run(store)) is not None
                and completed(r, "box")
                and running_a_program(docker_engine, pid)
                and r
            ),
        )
    finally:
        first.kill()
    # the kernel's watchdog removes its containers, the running one included
    wait_for(
        "the killed kernel's containers removed", lambda: not kernel_containers(docker_engine, pid)
    )
    nonce = next(r["result"] for i, r in run.calls.items() if i >= 0 and r["tool"] == "box")

    second = started(path, delay=0)
    pid2 = second.km.provisioner.pid
    try:
        second.ok(BOX.format(delay=0))
        resumed = second.ok("%%orchestrate --resume" + BOX_CELL)
    finally:
        second.close()
        wait_for(
            "the second kernel's containers removed",
            lambda: not kernel_containers(docker_engine, pid2),
        )
    values = ast.literal_eval(resumed.value or "")  # [first, second]: two floats
    assert values[0] == nonce  # the first container's result, from the store: not run again
    assert values[1] != nonce
    assert "before the checkpoint" not in resumed.text
    assert "after the checkpoint" in resumed.text
    assert live_calls(trace(resumed)) == [("box", ["True"])]  # only the in-flight call ran


def test_two_kernels_running_against_one_store_at_once_do_not_corrupt_it(tmp_path):
    path = tmp_path / "store.sqlite"
    cell = textwrap.dedent(
        """\
        %%orchestrate --quiet --in base
        total = 0
        for i in range(40):
            total += step(base + i)
            total += await quick(base + i)
        total
        """
    )
    kernels = [started(path, delay=0) for _ in range(2)]
    try:
        for base, k in zip((1000, 2000), kernels, strict=True):
            k.ok(f"base = {base}")
        with ThreadPoolExecutor(2) as pool:
            values = [r.value for r in pool.map(lambda k: k.ok(cell, timeout=300), kernels)]
    finally:
        for k in kernels:
            k.close()
    assert values == [str(20 * sum(b + i for i in range(40))) for b in (1000, 2000)]
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    store = Store(path)
    runs = store.runs()
    assert len(runs) == 2 and {r.status for r in runs} == {"ok"}
    bases = set()
    for info in runs:
        run = store.run(info.run_id)  # every sealed blob verifies
        calls = [run.calls[i] for i in range(80)]
        base = calls[0]["args"][0]
        bases.add(base)
        assert [(c["tool"], c["args"], c["status"]) for c in calls] == [
            (tool, (base + i,), "ok") for i in range(40) for tool in ("step", "quick")
        ]
    assert bases == {1000, 2000}
    assert counted(path) == Counter(
        f"{tool} {b + i}" for b in (1000, 2000) for i in range(40) for tool in ("step", "quick")
    )


GATED_CELL = """%%orchestrate
step({n})
try:
    done = remove({name!r})
except PermissionError as e:
    done = "refused: " + str(e)
done
"""


def test_paused_runs_are_approved_and_rejected_from_a_second_kernel(tmp_path):
    path = tmp_path / "store.sqlite"
    store = Store(path)
    first = started(path, delay=0)
    second = None
    try:
        ids = {}  # the name each paused run asks to remove -> its run id
        for n, name in ((1, "a"), (2, "b")):
            paused = first.ok(GATED_CELL.format(n=n, name=name))
            assert paused.value is None  # a paused run has no value yet: it does not raise
            record = trace(paused)
            assert record["status"] == "paused"
            assert [(c["tool"], c["args"]) for c in record["pending"]] == [("remove", [repr(name)])]
            ids[name] = record["run_id"]
        assert {store.run(i).status for i in ids.values()} == {"paused"}

        second = started(path, delay=0)  # the first one is still running
        listed = second.ok("%orchestrate_pending").text
        assert ids["a"] in listed and ids["b"] in listed and "remove('a')" in listed
        approved = second.ok(f"%orchestrate_approve {ids['a']}")
        assert approved.value == "'removed a'"
        rejected = second.ok(f"%orchestrate_reject {ids['b']} not today")
        assert rejected.value == "'refused: not today'"
        # the first kernel sees the answers: nothing is paused any more
        assert "no paused runs" in first.ok("%orchestrate_pending").text
        again = second.ok(f"%orchestrate_approve {ids['a']}")  # answered: said, not raised
        assert f"run {ids['a']} already answered in cell [" in again.text
    finally:
        first.close()
        if second is not None:
            second.close()
    assert {store.run(i).status for i in ids.values()} == {"ok"}
    # the code before the gate ran once per run, in the first kernel; only 'a' was removed
    assert counted(path) == {"step 1": 1, "step 2": 1, "remove a": 1}


def test_a_fork_takes_a_quoted_json_value_with_spaces(tmp_path):
    path = tmp_path / "store.sqlite"
    k = started(path, delay=0)
    try:
        k.ok("%%orchestrate --quiet\nstep(1)")
        run_id = Store(path).runs()[0].run_id
        forked = k.ok(f"""%orchestrate_fork {run_id} 0 --value '{{"rows": [1, 2]}}'""")
    finally:
        k.close()
    assert forked.value == "{'rows': [1, 2]}"
