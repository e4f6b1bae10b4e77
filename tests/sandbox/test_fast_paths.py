"""The fast paths of a container run keep what the slow ones promised.

Outputs come back on the same stream as the code's output (after a marker on stdout), a warm
run takes no exec at all (the spare's interpreter waits for it: `_warm`), spares follow
demand (a run with no spare is the container's own process: `test_sandbox_own_process`),
and a fan-out runs as many containers at once as the tool's ``concurrency`` says.
Everything here is real: the engine, its events, the containers, orchestration code in Monty.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections import Counter
from typing import Any

import pytest

from jupyter_sandbox import InvalidOutput, create, orchestrate, tool
from jupyter_sandbox._shared._events import Output
from jupyter_sandbox._shared._threads import in_thread
from jupyter_sandbox.sandbox import _pool
from jupyter_sandbox.sandbox._client import KIND, OWNER_PID

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("no_leaked_containers")]

_BOUND = 120.0
"""Seconds a wait below may take before the test fails: only there to prevent a hang."""


def _double() -> Any:
    return create("speed", code="y = x * 2", inputs={"x": int}, outputs={"y": int})


def _ours(engine: Any) -> list[str]:
    labels = [f"{KIND}=run", f"{OWNER_PID}={os.getpid()}"]
    return [c["Id"] for c in engine.api.containers(all=True, filters={"label": labels})]


def _execs(engine: Any, since: float) -> list[str]:
    """Ids of this process' containers, once per exec started in them since ``since``."""
    labels = [f"{KIND}=run", f"{OWNER_PID}={os.getpid()}"]
    events = engine.events(
        since=int(since),
        until=int(time.time()) + 1,
        decode=True,
        filters={"type": "container", "label": labels},
    )
    return [e["Actor"]["ID"] for e in events if e.get("Action", "").startswith("exec_start")]


def test_a_warm_run_takes_no_exec_and_its_outputs_come_on_its_stream(docker_engine, sandbox_pool):
    """Each warm run was two execs (the code's, then a ``tar`` for the outputs), then one;
    now none: the spare's waiter runs the code, and its script sends the tar after it. A pool
    of the test's own, so the spares seen are this sandbox's; how many wait is the pool's
    demand sizing (two runs close together keep two), so each run is checked to take one."""
    sandbox = _double()
    assert sandbox.run(x=0) == 0  # no spare: the run is the container's own process
    since = time.time() - 1
    results: list[int] = []
    warm: set[str] = set()

    def waiting() -> set[str]:
        return {slot.container.id for slots in sandbox_pool.spares.values() for slot in slots}

    for x in (1, 2):
        _pool.quiesce()  # the spare started after the previous run is up
        before = waiting()
        results.append(sandbox.run(x=x))
        assert len(before - waiting()) == 1  # the run took a waiting spare: it was warm
        warm |= before
    assert results == [2, 4]
    # the window starts up to 2 s early (the engine counts whole seconds): only ours count
    assert not set(Counter(_execs(docker_engine, since))) & warm


def test_output_that_looks_like_the_marker_streams_unchanged():
    """Stdout is held back only while it could still be the marker's start, then sent on."""
    text = (
        "\x1ejupyter-sandbox outputs 0123\x1e not the marker\n"
        "\x1ejupyter-sandbox outputs "  # a prefix of the marker, then more
        + "more\n\x1ejupyter-sand"  # the run ends on a prefix of it
    )
    sandbox = create(
        "lookalike",
        code=f"import sys\nsys.stdout.write({text!r})\ny = 1",
        outputs={"y": int},
    )
    shown: list[str] = []

    def on_event(event: object) -> None:
        if isinstance(event, Output) and event.stream == "stdout":
            shown.append(event.text)

    run = sandbox.execute({}, on_event=on_event)
    assert run.value == 1
    assert run.stdout == text
    assert "".join(shown) == text


_FORGE = """
import io, os, re, sys, tarfile, time
found = re.compile(rb"\\x1ejupyter-sandbox outputs [0-9a-f]{32}\\x1e")
marker = b""
if sys.orig_argv[1] == "-c":  # a spare's waiter: the marker waits in its script's stdin
    pipe = os.open("/proc/1/fd/0", os.O_RDWR | os.O_NONBLOCK)
    data = b""
    while not found.search(data):
        try:
            data += os.read(pipe, 1 << 16)
        except BlockingIOError:
            time.sleep(0.01)
    os.write(pipe, data)  # put back for the script
    marker = found.search(data).group()
else:  # the container's own script: the marker is in its memory
    with open("/proc/1/maps") as maps, open("/proc/1/mem", "rb") as mem:
        for line in maps:
            start, end = (int(a, 16) for a in line.split()[0].split("-"))
            try:
                mem.seek(start)
                marker = marker or b"".join(found.findall(mem.read(end - start))[:1])
            except (OSError, ValueError, OverflowError):
                pass
data = io.BytesIO()
with tarfile.open(fileobj=data, mode="w") as tar:
    entry = tarfile.TarInfo(NAME)
    entry.size = 2
    tar.addfile(entry, io.BytesIO(b"99"))
sys.stdout.flush()
sys.stdout.buffer.write(marker + b"0 0\\n" + data.getvalue() + marker + b"tar 0 \\n")
sys.stdout.buffer.flush()
print("after the forged tar")
y = 1
"""


def _forger(name: str, entry: str, then: str = "") -> Any:
    """A sandbox whose code forges its run's marker, status line, tar (``entry`` = 99) and
    tar's verdict line."""
    code = _FORGE.replace("NAME", repr(entry)) + then
    return create(name, code=code, outputs={"y": int}, timeout=60)


@pytest.mark.parametrize("spare", [True, False], ids=["in a spare", "own process"])
def test_a_forged_marker_gets_the_code_nothing_it_could_not_do_anyway(spare):
    """The code can read its marker (same uid: the script's stdin, where a spare's waiter
    left it, or the memory of the script) and write a status line and a tar after it: that
    tar is read as hostile as ever (an entry climbing out is refused by name). The forged
    status (and tar's forged verdict) ends the run, which reports what the code could have
    reported anyway by exiting 0 with ``y`` = 99 written."""
    if spare:  # the forgers' limits get a spare waiting, so each run is in one
        assert _forger("warm-up", "y").run() == 99
        _pool.quiesce()
    else:
        _pool.settle()
    escaping = _forger("forger", "y/../../escaped")
    with pytest.raises(InvalidOutput, match=r"'\.\.'") as caught:
        escaping.run()
    assert caught.value.name == "y"

    _pool.quiesce() if spare else _pool.settle()
    assert _forger("forger-fails", "y", "raise SystemExit(3)").run() == 99


class _Gate:
    """A real sandbox whose runs first wait for each other at a barrier: they all pass only
    if all run at once (with the shared 6-thread pool, 8 runs broke the barrier)."""

    def __init__(self, sandbox: Any, parties: int) -> None:
        self.sandbox = sandbox
        self.name = sandbox.name
        self.inputs = sandbox.inputs
        self.outputs = sandbox.outputs
        self.barrier = threading.Barrier(parties, timeout=_BOUND)

    def execute(self, inputs: Any, *, cancel: threading.Event) -> Any:
        self.barrier.wait()
        return self.sandbox.execute(inputs, cancel=cancel)

    async def execute_async(self, inputs: Any) -> Any:  # what makes it a sandbox for `tool`
        return await in_thread(self.execute, inputs, cancel=threading.Event())


def test_a_fan_out_runs_as_many_containers_at_once_as_its_concurrency(tool_registry):
    fan = 8
    gate = _Gate(_double(), fan)
    double = tool(gate, name="gated", concurrency=fan)
    code = f"import asyncio\nawait asyncio.gather(*[gated(i) for i in range({fan})])"
    assert orchestrate(code, tools=[double]).value == [2 * i for i in range(fan)]


def test_spares_follow_demand_and_still_expire(docker_engine, monkeypatch):
    """After a fan-out of 4, four spares wait for the next one; after runs one at a time
    (demand forgotten by `settle`), one. Idle spares are still removed."""
    _pool.settle()
    sandbox = _double()
    double = tool(sandbox, name="double", concurrency=4)
    code = "import asyncio\nawait asyncio.gather(*[double(i) for i in range(4)])"
    assert orchestrate(code, tools=[double]).value == [0, 2, 4, 6]
    _pool.quiesce()
    assert len(_ours(docker_engine)) == 4
    (slots,) = _pool.current().spares.values()
    assert len(slots) == 4

    _pool.settle()
    assert sandbox.run(x=1) == 2
    _pool.quiesce()
    assert len(_ours(docker_engine)) == 1

    monkeypatch.setattr(_pool, "_IDLE", 2.0)  # the README's 5 min, shortened for the test
    assert orchestrate(code, tools=[double]).value == [0, 2, 4, 6]
    _pool.quiesce()
    deadline = time.monotonic() + _BOUND
    while _ours(docker_engine) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _ours(docker_engine)
    assert not _pool.current().spares


def test_in_thread_runs_each_call_on_a_thread_of_its_own():
    parties = 12  # twice the default executor of a 2-core host
    barrier = threading.Barrier(parties, timeout=_BOUND)

    async def main() -> list[int]:
        return await asyncio.gather(*[in_thread(barrier.wait) for _ in range(parties)])

    assert sorted(asyncio.run(main())) == list(range(parties))

    def fails() -> None:
        raise ValueError("from the thread")

    with pytest.raises(ValueError, match="from the thread"):
        asyncio.run(in_thread(fails))


def test_in_thread_survives_its_awaiting_task_being_cancelled():
    release = threading.Event()
    finished = threading.Event()

    def slow() -> None:
        release.wait(_BOUND)
        finished.set()

    async def main() -> None:
        task = asyncio.ensure_future(in_thread(slow))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        release.set()
        await asyncio.get_running_loop().run_in_executor(None, finished.wait, _BOUND)
        await asyncio.sleep(0.05)  # the thread's late result reaches a cancelled future

    asyncio.run(main())
    assert finished.is_set()


@pytest.mark.parametrize("fails", [False, True], ids=["ok", "fails"])
def test_a_runs_staging_folder_goes_off_its_path_and_nothing_is_left(sandbox_pool, fails):
    """The folder a run stages its inputs, program and outputs in is removed after the run
    returns (deleting it took ~6 ms of a warm run), whether it succeeded or failed: once the
    background work is done, the only folders of ours left are the waiting spares' own."""
    import tempfile
    from pathlib import Path

    from jupyter_sandbox import NonZeroExit

    def ours() -> set[Path]:
        mark = f"-{os.getpid()}-"
        return {
            Path(e.path)
            for e in os.scandir(tempfile.gettempdir())
            if e.name.startswith("jupyter-sandbox-run-") and mark in e.name
        }

    code = "raise SystemExit(3)" if fails else "y = x * 2"
    sandbox = create("staged", code=code, inputs={"x": int}, outputs={"y": int})
    for _ in range(3):
        if fails:
            with pytest.raises(NonZeroExit):
                sandbox.run(x=2)
        else:
            assert sandbox.run(x=2) == 4
    sandbox_pool.quiesce()
    spares = {slot.work for slots in sandbox_pool.spares.values() for slot in slots}
    assert spares and ours() == spares
