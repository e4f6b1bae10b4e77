"""A spare container that died while it waited never yields a wrong answer.

Runs take a container started ahead of need (a spare), whose interpreter waits for its program
on the attach stream the host holds (`_warm`). The attacks below kill that spare from outside
the process (``docker rm -f``, ``docker kill``, a restart of the engine itself) between two
runs, tamper with it (a file left in ``/tmp``, a process started in it, its waiter killed or
stopped), or break its attach stream; the next run must still see its inputs and its program,
in a container nobody touched, or fail with a clear error.
The engine restart uses a ``dockerd`` of this test's own (its own data root, exec root, pid file
and socket, no bridge, no iptables), so the shared engine and the host network are untouched.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
from _second_engine import _Engine

from jupyter_sandbox import ContainerError, create
from jupyter_sandbox.sandbox import _client, _pool, default_base_image

BASE_IMAGE = default_base_image()
"""Seconds a wait below may take before the test fails: only there to prevent a hang."""


def _spares(engine) -> list[str]:
    """This process' running sandbox containers, found from outside by their labels."""
    labels = [f"{_client.KIND}=run", f"{_client.OWNER_PID}={os.getpid()}"]
    return [c["Id"] for c in engine.api.containers(filters={"label": labels})]


def _waiting_spares(engine) -> list[str]:
    """The spares waiting after a run (background starts and removals are done): at least
    one, and exactly the pool's own, so no used container is left running beside them.

    How many follows the caller's rhythm (`_pool._Demand`): a run called within 0.25 s of
    the previous one's return continues its row, and a row of two leaves two spares. Killing
    only one of two ("the" spare) then let the next run take the live one, unattacked; and
    the count came out 1 or 2 with the machine's load. The attacks below take them all."""
    _pool.quiesce()
    found = _spares(engine)
    pooled = {slot.container.id for slots in _pool.current().spares.values() for slot in slots}
    assert found and set(found) == pooled, f"expected the pool's spares {pooled}, found {found}"
    return found


def _command_sandbox():
    return create("cmd", command=["cat", "/var/inputs/x"], inputs={"x": int}, image=BASE_IMAGE)


def _auto_sandbox():
    return create("auto", code="y = x + 1", inputs={"x": int}, outputs={"y": int}, image=BASE_IMAGE)


@pytest.mark.parametrize("how", [["rm", "-f"], ["kill"]], ids=["rm-f", "kill"])
def test_a_spare_removed_from_outside_never_gives_a_wrong_answer(
    how, request, no_leaked_containers, isolation
):
    """Command mode read its input from the dead spare's mounts (exit 1, not 42); auto mode
    could not open its runner. Each run after the kill must see everything staged."""
    command, auto = _command_sandbox(), _auto_sandbox()
    engine = _client.client()  # Docker's, or rootless Podman's (the isolation fixture's variant)
    cli = ["docker"]
    if _client.engine_of(engine).name == "podman":  # its user's own CLI, through its service
        cli = request.getfixturevalue("podman_engine").command("podman", "--remote")
    command.run(x=1)  # leaves a spare for the next run with the same limits
    subprocess.run([*cli, *how, *_waiting_spares(engine)], check=True, capture_output=True, cwd="/")
    assert command.execute({"x": 42}).stdout == "42"
    subprocess.run([*cli, *how, *_waiting_spares(engine)], check=True, capture_output=True, cwd="/")
    assert auto.run(x=41) == 42


_TMP_AND_PROCESSES = (
    "import os\n"
    "left = sorted(os.listdir('/tmp') + os.listdir('/dev/shm'))\n"
    "comms = sorted(open(f'/proc/{p}/cmdline', 'rb').read().decode(errors='replace')"
    " for p in os.listdir('/proc') if p.isdigit())\n"
    "print(left, [c for c in comms if 'intruder' in c])\n"
    "y = x + 1\n"
)
"""A run that shows what it finds of an intruder: files in ``/tmp`` or ``/dev/shm``, and a
process whose command line says ``intruder``."""

_TAMPER = {
    "file-in-tmp": "echo left > /tmp/left",
    "file-in-shm": "echo left > /dev/shm/left",
    # dash has no `exec -a`: the process names itself in its argv
    "process": "exec python3 -c 'import time; time.sleep(600)' intruder",
    "waiter-killed": (
        'for p in /proc/[0-9]*; do [ "$(cat $p/comm)" = python3 ] && kill -KILL ${p#/proc/}; done'
    ),
    "waiter-stopped": (
        'for p in /proc/[0-9]*; do [ "$(cat $p/comm)" = python3 ] && kill -STOP ${p#/proc/}; done'
    ),
}


@pytest.mark.parametrize("how", list(_TAMPER))
def test_a_spare_tampered_with_is_never_used(how, request, no_leaked_containers, isolation):
    """Someone with the engine's socket ``docker exec``s into the waiting spares: leaves a
    file, starts a process (still running at the run: ``-d``), kills or stops the waiter.
    The next run must not run there (its secrets would be the intruder's to read): it finds
    no file and no intruder, gives the right answer, and the tampered spares are removed."""
    sandbox = create(
        "tamper",
        code=_TMP_AND_PROCESSES,
        inputs={"x": int},
        outputs={"y": int},
        image=BASE_IMAGE,
    )
    engine = _client.client()
    cli = ["docker"]
    if _client.engine_of(engine).name == "podman":
        cli = request.getfixturevalue("podman_engine").command("podman", "--remote")
    assert sandbox.execute({"x": 0}).outputs == {"y": 1}
    tampered = _waiting_spares(engine)
    for spare in tampered:
        subprocess.run([*cli, "exec", "-d", spare, "sh", "-c", _TAMPER[how]], check=True, cwd="/")
    time.sleep(0.5)  # `exec -d` returns before its command ran
    run = sandbox.execute({"x": 41})
    assert (run.stdout, run.outputs) == ("[] []\n", {"y": 42})
    _pool.quiesce()
    assert not set(tampered) & set(_spares(engine)), "a tampered spare is still there"


@pytest.mark.parametrize("how", list(_TAMPER))
def test_a_spare_or_ready_session_tampered_with_is_never_used_by_a_session(
    how, request, no_leaked_containers, isolation, tmp_path, monkeypatch
):
    """The same attacks on a session's start: on the waiting spares and on the ready session
    (a container whose session server already runs, waiting for its first hello). The next
    session must start elsewhere: it finds no file and no intruder, and answers right."""
    from jupyter_sandbox.sandbox import _kept, _session

    monkeypatch.setenv(_kept.SESSION_DIR_ENV, str(tmp_path))
    engine = _client.client()
    cli = ["docker"]
    if _client.engine_of(engine).name == "podman":
        cli = request.getfixturevalue("podman_engine").command("podman", "--remote")
    first = _session.create_session("first", image=BASE_IMAGE)
    try:
        assert first.run("x + 1", x=0) == 1
        _session.wait_ready()
        _pool.quiesce()
        (ready,) = [slot.container.id for slot, _, _ in _session._ready.values()]
        spares = [slot.container.id for slots in _pool.current().spares.values() for slot in slots]
        assert spares and ready  # the sessions' containers run beside them: not `_waiting_spares`
        tampered = [*spares, ready]
        for target in tampered:
            subprocess.run(
                [*cli, "exec", "-d", target, "sh", "-c", _TAMPER[how]], check=True, cwd="/"
            )
        time.sleep(0.5)  # `exec -d` returns before its command ran
        with _session.create_session("second", image=BASE_IMAGE) as second:
            assert second.container_id not in tampered
            cell = second.execute(_TMP_AND_PROCESSES, {"x": 41}, outputs=["y"])
            assert (cell.stdout, cell.outputs["y"]["value"]) == ("[] []\n", 42)
    finally:
        first.close()
        _session.close_sessions()
    _pool.quiesce()
    assert not set(tampered) & set(_spares(engine)), "a tampered container is still there"


@pytest.mark.parametrize("how", ["closed", "shut-down"])
def test_a_spare_whose_attach_stream_broke_is_never_used(how, no_leaked_containers, isolation):
    """The host's end of a waiting spare's attach stream breaks (closed, or shut down under
    the SDK's reader): the spare cannot be handed its program, so the run takes another
    container and gives the right answer."""
    command, auto = _command_sandbox(), _auto_sandbox()
    engine = _client.client()
    for sandbox, expected in ((command, "42"), (auto, None)):
        run = sandbox.execute({"x": 1})
        _waiting_spares(engine)
        for slots in list(_pool.current().spares.values()):
            for slot in slots:
                if how == "closed":
                    slot.attached.close()
                else:
                    slot.attached._socket.shutdown(socket.SHUT_RDWR)
        run = sandbox.execute({"x": 42 if expected else 41})
        assert run.stdout == expected if expected else run.outputs == {"y": 42}


class _RestartablePodman:
    """The rootless Podman service (``podman_engine``), stopped and started as `_Engine` is.
    Its containers outlive its service (each has its own ``conmon``): a restart keeps the
    spare, a stop makes the engine unreachable."""

    def __init__(self, service: Any) -> None:
        self.service = service

    def start(self) -> None:
        self.service.start()

    def stop(self) -> None:
        self.service.stop()

    def restart(self) -> None:
        self.stop()
        self.start()


@pytest.fixture
def on_second_engine(request, isolation) -> Iterator[Any]:
    """Point the sandbox engine client at the private engine for one test, then back; in the
    ``podman`` variant, the rootless Podman service itself is restarted and stopped."""
    if request.node.callspec.params["isolation"] == "podman":
        service = request.getfixturevalue("podman_engine")
        request.getfixturevalue("no_leaked_containers")
        try:
            yield _RestartablePodman(service)
        finally:
            if service.process is None:
                service.start()
        return
    yield from _on_second_engine(
        request.getfixturevalue("second_engine"),
        request.getfixturevalue("no_leaked_containers"),
        request.getfixturevalue("monkeypatch"),
    )


def _on_second_engine(second_engine, no_leaked_containers, monkeypatch) -> Iterator[_Engine]:
    _pool.settle()  # no spare of the main engine may be handed to a run on this one
    monkeypatch.setenv("DOCKER_HOST", second_engine.host)
    _client._connect.cache_clear()
    try:
        yield second_engine
    finally:
        _pool.settle()
        left = second_engine.docker(
            "ps", "-aq", "--filter", f"label={_client.OWNER_PID}={os.getpid()}"
        )
        _client._connect.cache_clear()
        monkeypatch.delenv("DOCKER_HOST")
        assert not left.stdout.split(), f"containers left on the second engine: {left.stdout}"


def test_an_engine_restart_between_runs_never_gives_a_wrong_answer(isolation, on_second_engine):
    """The spare waiting when the engine restarts is gone (or stopped) afterwards: the next
    run gets its right answer from a fresh container with everything staged (the promise
    allows a clear `ContainerError` instead; what we built gives the answer), never exit 1
    for a missing input or a missing runner."""
    command, auto = _command_sandbox(), _auto_sandbox()
    assert command.execute({"x": 1}).stdout == "1"
    _waiting_spares(_client.client())
    on_second_engine.restart()
    assert command.execute({"x": 42}).stdout == "42"
    _waiting_spares(_client.client())
    on_second_engine.restart()
    assert auto.run(x=41) == 42


def test_a_stopped_engine_is_one_line_of_ours_and_its_restart_serves_right_answers(
    isolation, on_second_engine
):
    """With the engine down the run fails as a `ContainerError` of one line (not the HTTP
    layer's raw ConnectionError); once it is back, the next run is right."""
    command = _command_sandbox()
    assert command.execute({"x": 1}).stdout == "1"
    _waiting_spares(_client.client())
    on_second_engine.stop()
    with pytest.raises(ContainerError) as caught:
        command.execute({"x": 42})
    message = str(caught.value)
    assert "stopped answering" in message and "\n" not in message
    assert caught.value.record is not None
    on_second_engine.start()
    assert command.execute({"x": 42}).stdout == "42"


@pytest.mark.parametrize("isolation", ["container", "gvisor"], indirect=True)
def test_an_engine_restart_loses_a_session_by_name_and_its_next_cell_starts_fresh(
    shell, isolation, on_second_engine, tmp_path, monkeypatch
):
    """A session's container goes with its engine's restart: the next cell of it raises
    `SessionLost` naming the session and what went, and the one after starts it afresh,
    without the old state. (Podman's service restart keeps its containers: not a loss.)"""
    from jupyter_sandbox.errors import SessionLost
    from jupyter_sandbox.magics import _sessions
    from jupyter_sandbox.sandbox import _kept, _session

    monkeypatch.setenv(_kept.SESSION_DIR_ENV, str(tmp_path / "sessions"))
    monkeypatch.setattr(_sessions, "_specs", {})  # this engine's image, not a spec of the main's
    options = f"--session restarted --image {BASE_IMAGE}"
    try:
        shell.run_cell_magic("sandbox", options, "x = 41")
        shell.run_cell_magic("sandbox", f"{options} --out y", "y = x + 1")
        assert shell.user_ns["y"] == 42
        lost_container = _session.get_session("restarted").container_id
        on_second_engine.restart()
        with pytest.raises(SessionLost, match=r"session 'restarted' was lost: .*engine restarted"):
            shell.run_cell_magic("sandbox", f"{options} --out y", "y = x + 2")
        shell.run_cell_magic("sandbox", f"{options} --out y", "y = 'x' in globals()")
        assert shell.user_ns["y"] is False  # started afresh: the old namespace is gone
        assert _session.get_session("restarted").container_id != lost_container
    finally:
        _session.close_sessions(kept=True)
