"""A run with no spare waiting is its container's own process (the cold row).

The script that runs the code is the container's process; the host attaches before the start,
writes the marker and the environment on its stdin, and returns once the script's status line
(and the outputs' tar) came, without waiting for the engine to report the exit. These tests
check what that path keeps of the exec path's promises: no exec at all, exact values, the
environment never in the engine's configuration or logs, the engine's word when the script
dies, and the script's own lifetime bound. Real engine, real containers, both runtimes.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_sandbox import (
    NonZeroExit,
    OutputLimitExceeded,
    SandboxCancelled,
    UnusableImage,
    create,
)
from jupyter_sandbox._shared._events import Output, ignore
from jupyter_sandbox.sandbox import _container, _pool
from jupyter_sandbox.sandbox._client import KIND, OWNER_PID
from jupyter_sandbox.sandbox._image import default_base_image
from jupyter_sandbox.sandbox._spec import Resources

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("no_leaked_containers")]


@pytest.fixture
def docker_engine(request) -> Any:
    """The engine of the test's variant (the ``isolation`` fixture's: Docker's, or rootless
    Podman's), where the test looks at its containers from outside."""
    if "isolation" in request.fixturenames:
        request.getfixturevalue("isolation")
    from jupyter_sandbox.sandbox import _client

    return _client.client()


_BOUND = 60.0
"""Seconds a wait below may take before the test fails: only there to prevent a hang."""
SECRET = "it's a\nsecret $HOME `id` \\n ✓\n"
"""Quotes, a newline (also the last character), what a shell would expand, non-ASCII."""
ENV = {"n": "5", "IFS": ",", "m": "", "e": "x'y", "l": "a\nb", "PS4": "+"}
"""Names the script uses itself, or the shell reads: the program gets them as given."""


def _labels() -> list[str]:
    return [f"{KIND}=run", f"{OWNER_PID}={os.getpid()}"]


def _events(engine: Any, since: float, action: str) -> list[str]:
    """Ids of this process' containers with an event ``action`` (prefix) since ``since``."""
    events = engine.events(
        since=int(since),
        until=int(time.time()) + 1,
        decode=True,
        filters={"type": "container", "label": _labels()},
    )
    return [e["Actor"]["ID"] for e in events if e.get("Action", "").startswith(action)]


def test_a_run_with_no_spare_runs_no_exec_and_returns_what_the_code_did(docker_engine, isolation):
    _pool.settle()
    since = time.time() - 1
    sandbox = create(
        "own",
        code="import sys\nprint('out')\nprint('err', file=sys.stderr)\ny = x * 2",
        inputs={"x": int},
        outputs={"y": int},
    )
    shown: list[object] = []
    run = sandbox.execute({"x": 21}, on_event=shown.append)
    assert (run.value, run.exit_code, run.stdout, run.stderr) == (42, 0, "out\n", "err\n")
    live = [e.text for e in shown if isinstance(e, Output) and e.stream == "stdout"]
    assert "".join(live) == "out\n"
    _pool.quiesce()
    created = set(_events(docker_engine, since, "create"))
    assert created  # the run's container (and the spare started after it)
    assert not set(_events(docker_engine, since, "exec_start")) & created


@pytest.mark.parametrize("outputs", [{"y": int}, None], ids=["outputs", "no outputs"])
def test_the_environment_reaches_the_program_exactly(monkeypatch, isolation, outputs):
    monkeypatch.setenv("JSBX_OWN_SECRET", SECRET)
    expected = {**ENV, "JSBX_OWN_SECRET": SECRET}
    code = (
        "import os\n"
        f"print(sorted(k for k, v in {expected!r}.items() if os.environ.get(k) != v))\n"
        "y = 1\n"
    )
    sandbox = create("env", code=code, env_vars=ENV, secrets=["JSBX_OWN_SECRET"], outputs=outputs)
    _pool.settle()
    assert sandbox.execute({}).stdout == "[]\n"


def _running(engine: Any, started: threading.Event) -> str:
    """The id of this process' container once its run has printed (``started``)."""
    assert started.wait(_BOUND), "the run never printed"
    (found,) = engine.api.containers(filters={"label": _labels()})
    return str(found["Id"])


def _set_on_output(started: threading.Event, event: object) -> None:
    if isinstance(event, Output):
        started.set()


@contextlib.contextmanager
def _in_a_thread(
    sandbox: Any, cancel: threading.Event, started: threading.Event
) -> Iterator[list[BaseException]]:
    """A run of ``sandbox`` going on in a thread until the block ends (then cancelled);
    what it raised."""
    ended: list[BaseException] = []

    def run() -> None:
        try:
            sandbox.execute({}, on_event=lambda e: _set_on_output(started, e), cancel=cancel)
        except BaseException as exc:
            ended.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    try:
        yield ended
    finally:
        cancel.set()
        worker.join(_BOUND)
    assert not worker.is_alive()


def test_neither_the_environment_nor_the_output_enters_the_engines_records(
    docker_engine, monkeypatch, isolation
):
    """While the run goes on: the container's configuration (what ``docker inspect`` shows
    and the engine keeps on its disk) holds no secret, no variable and no marker, and the
    engine logs nothing of the run's output (logging is off)."""
    monkeypatch.setenv("JSBX_OWN_SECRET", SECRET)
    sandbox = create(
        "quiet",
        command=["sh", "-c", 'echo "$JSBX_KEPT $JSBX_OWN_SECRET"; sleep 30'],
        env_vars={"JSBX_KEPT": "kept-value"},
        secrets=["JSBX_OWN_SECRET"],
    )
    _pool.settle()
    cancel, started = threading.Event(), threading.Event()
    with _in_a_thread(sandbox, cancel, started) as ended:
        container = _running(docker_engine, started)
        attrs = docker_engine.api.inspect_container(container)
        shown = json.dumps(attrs)
        assert "kept-value" not in shown and json.dumps(SECRET)[1:-1] not in shown
        assert "jupyter-sandbox outputs" not in shown  # the marker
        assert attrs["HostConfig"]["LogConfig"]["Type"] == "none"
        folder = Path(docker_engine.info()["DockerRootDir"]) / "containers" / container
        for path in folder.rglob("*"):
            if path.is_file():
                data = path.read_bytes()
                assert b"kept-value" not in data and SECRET.encode() not in data, path
    assert [type(e) for e in ended] == [SandboxCancelled]


def test_a_script_killed_from_outside_reports_the_engines_exit_code(docker_engine, isolation):
    """No status line came: the engine's events say how the container ended (137)."""
    sandbox = create("killed", command=["sh", "-c", "echo up; sleep 30"], timeout=_BOUND)
    _pool.settle()
    cancel, started = threading.Event(), threading.Event()
    with _in_a_thread(sandbox, cancel, started) as ended:
        docker_engine.api.kill(_running(docker_engine, started))
        deadline = time.monotonic() + _BOUND
        while not ended and time.monotonic() < deadline:
            time.sleep(0.1)
    assert [type(e) for e in ended] == [NonZeroExit]
    assert ended[0].exit_code == 137  # type: ignore[attr-defined]


def test_the_script_ends_a_run_nobody_removes_at_its_lifetime(
    docker_engine, monkeypatch, isolation
):
    """The kernel and its watchdog gone, nothing removes the container: the script's own
    ``sleep`` kills the run at `_pool.lifetime` (here the timeout: no grace), and the script
    still says so on its status line."""
    monkeypatch.setattr(_pool, "_GRACE", 0.0)
    limits = _pool.ContainerSetup(1.0, Resources(), isolation=isolation)
    image = default_base_image()
    command = _container.own_command(["sleep", "30"], (), limits)
    slot = _pool.acquire(docker_engine, image, limits, command)
    assert slot.own
    try:
        marker = b"\x1emarker\x1e"
        stdin = _container.script_input(marker, {})
        stream = _container._start_own(docker_engine, slot, stdin, (slot.inputs, slot.program))
        reader = _container._Reader(stream, ignore, 1 << 20, (), marker)
        reader.start()
        assert reader.collected.wait(_BOUND)
        stream.close()
        assert reader.status == (137, 0)
    finally:
        _pool.release(docker_engine, slot, now=True)


def test_the_last_stderr_is_not_cut_off_by_the_status_line(isolation):
    """stdout and stderr are two pipes: the script's status line (stdout) can arrive before
    the program's last stderr, here sh's ``exec: no-such-program: not found`` written
    microseconds before it. Cut off, the run is not known as an unusable image and is run
    again (6 of 30 under load before the run waited for the marker on stderr too; CI saw
    it)."""
    for i in range(12):  # a tmpfs no spare has (fixed at creation): each run its container's own
        sandbox = create(
            "t", command=["no-such-program"], retries=1, resources={"disk": f"{300 + i}m"}
        )
        with pytest.raises(UnusableImage, match="cannot start no-such-program") as caught:
            sandbox.run()
        assert caught.value.record is not None
        assert caught.value.record["attempts"] == 1


def test_stderr_is_the_programs_up_to_the_scripts_marker_on_both_paths(isolation):
    """The script ends stderr with the run's marker: what the program wrote before it is
    kept, even text that looks like the marker's start (held back, then released), and what
    a background child writes after the run is not the run's."""
    code = (
        "import subprocess, sys\n"
        "subprocess.Popen(['sh', '-c', 'sleep 0.3; echo late >&2'])\n"
        "sys.stderr.write('last words \\x1ejupyter-sandbox out')\n"
        "y = 1"
    )
    sandbox = create("t", code=code, outputs={"y": int}, resources={"memory": "301m"})
    _pool.settle()
    for _ in range(2):  # cold (the container's own process), then on the spare (an exec)
        run = sandbox.execute({})
        assert run.outputs == {"y": 1}
        assert run.stderr == "last words \x1ejupyter-sandbox out"
        _pool.quiesce()


class _Broken(Exception):
    pass


def test_an_on_event_that_raises_on_output_is_the_runs_error_not_a_lost_stream(isolation):
    """The reader thread once swallowed any exception as "the stream broke": an ``on_event``
    raising on the run's output stopped the output silently and the run failed with "the
    engine's stream of the run ended before its outputs came". The stream breaking is its
    end; anything else the reader raises is the run's error. No container is left."""

    def on_event(event: object) -> None:
        if isinstance(event, Output):
            raise _Broken("the view broke")

    sandbox = create(
        "t", code="print('hi')\ny = 1", outputs={"y": int}, resources={"memory": "302m"}
    )
    _pool.settle()
    for _ in range(2):  # cold, then on the spare
        with pytest.raises(_Broken, match="the view broke"):
            sandbox.execute({}, on_event=on_event)
        _pool.quiesce()


def test_an_on_event_that_raises_ends_a_cold_run_at_once_not_at_the_programs_end(
    docker_engine, isolation
):
    """The reader's failure set ``collected`` without a status line: the cold run took it
    for a script that died and waited for the container to be gone, i.e. for the program to
    finish its 30 s sleep (up to the timeout), before raising. Raised at once, the container
    is removed with the program still running: killed (137), not exited (0)."""
    running: list[str] = []

    def on_event(event: object) -> None:
        if isinstance(event, Output):
            running.extend(cid for cid, slot in _pool.current().live.items() if slot.own)
            raise _Broken("the view broke")

    code = "import time\nprint('hi', flush=True)\ntime.sleep(30)\ny = 1"
    sandbox = create("t", code=code, outputs={"y": int}, timeout=60, resources={"memory": "303m"})
    _pool.settle()
    since = time.time() - 1
    with pytest.raises(_Broken, match="the view broke"):
        sandbox.execute({}, on_event=on_event)
    _pool.quiesce()  # the container is removed
    events = docker_engine.events(
        since=int(since),
        until=int(time.time()) + 1,
        decode=True,
        filters={"type": "container", "label": _labels()},  # Podman: none with an event filter
    )
    died = [
        e["Actor"]["Attributes"]["exitCode"]
        for e in events
        if e["Actor"]["ID"] in running and e.get("Action") == "die"
    ]
    assert len(running) == 1
    assert died == ["137"]


FORGE_AND_FLOOD = """
import os, sys
args = open(f"/proc/{os.getppid()}/cmdline", "rb").read().split(b"\\0")
found = [a for a in args if a.startswith(b"\\x1ejupyter-sandbox outputs ")]
if found:  # an exec on a spare: the script's marker is its argument
    out = os.fdopen(1, "wb", buffering=0)
    out.write(found[0] + b"1 0\\n")  # a forged status line: the host stops reading stdout...
    os.write(2, found[0])  # ...and stderr
    for _ in range(int(sys.argv[1] if len(sys.argv) > 1 else 200)):
        out.write(b"x" * 65536)  # then 12.5 MB on stdout
        os.write(2, b"y" * 65536)  # and on stderr
y = 1
"""


def test_output_after_a_forged_marker_counts_against_the_cap(isolation):
    """A program can read its marker on a spare (its parent's argument) and print it with a
    status line: the host then took what followed as the script's and read it without
    counting, up to the program's end or its timeout (host CPU with no bound). It counts
    now, and past the cap the run is stopped like any flood."""
    sandbox = create(
        "t", code=FORGE_AND_FLOOD, outputs={"y": int}, resources={"memory": "304m", "output": "1m"}
    )
    _pool.settle()
    assert sandbox.run() == 1  # cold: no marker to find, nothing forged
    _pool.quiesce()
    with pytest.raises(OutputLimitExceeded, match="output passed the 1m cap"):
        sandbox.run()  # on the spare
