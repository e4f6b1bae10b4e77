"""No container outlives its run: Ctrl-C, normal interpreter exit, and a kernel killed outright
(its watchdog removes its containers; should the watchdog be killed too, the next load reaps
them)."""

from __future__ import annotations

import _thread
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any

import pytest
from _processes import watchdog_of

from jupyter_sandbox import SandboxCancelled, create
from jupyter_sandbox.sandbox import reap_orphans
from jupyter_sandbox.sandbox._pool import settle

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("no_leaked_containers")]


@pytest.fixture
def docker_engine(request) -> Any:
    """The engine of the test's variant (the ``isolation`` fixture's: Docker's, or rootless
    Podman's), where the test looks at its containers from outside."""
    if "isolation" in request.fixturenames:
        request.getfixturevalue("isolation")
    from jupyter_sandbox.sandbox import _client

    return _client.client()


LONG_RUN = textwrap.dedent(
    """
    import sys, threading, time
    from jupyter_sandbox import create
    box = create("long", code="import time\\nprint('started', flush=True)\\ntime.sleep(120)")
    threading.Thread(target=box.run, daemon=True).start()
    print("launched", flush=True)
    time.sleep(float(sys.argv[1]))
    """
)


def _containers_of(docker_engine, pid):
    labels = ["jupyter-sandbox.kind=run", f"jupyter-sandbox.owner-pid={pid}"]
    return docker_engine.containers.list(all=True, filters={"label": labels}, sparse=True)


def _wait_for_container(docker_engine, pid):
    for _ in range(200):
        if _containers_of(docker_engine, pid):
            return
        time.sleep(0.1)
    raise AssertionError("the child never started its container")


def _kill_watchdog(pid):
    """SIGKILL the watchdog of process ``pid`` (see `sandbox._watchdog`), as a host crash would."""
    watchdog = watchdog_of(pid)
    assert watchdog is not None, f"process {pid} has no watchdog"
    os.kill(watchdog, signal.SIGKILL)


def test_ctrl_c_removes_the_container(docker_engine, isolation):
    sandbox = create("interrupted", code="import time\ntime.sleep(120)")

    def interrupt_when_running():
        _wait_for_container(docker_engine, os.getpid())
        time.sleep(0.5)
        _thread.interrupt_main()

    threading.Thread(target=interrupt_when_running, daemon=True).start()
    with pytest.raises(SandboxCancelled, match="interrupted: container stopped and removed"):
        sandbox.run()
    settle()  # only the spare started for a next run may remain: remove it
    assert not _containers_of(docker_engine, os.getpid())


def test_interpreter_exit_removes_running_containers(docker_engine, isolation):
    child = subprocess.Popen([sys.executable, "-c", LONG_RUN, "3"], stdout=subprocess.PIPE)
    _wait_for_container(docker_engine, child.pid)
    assert child.wait(timeout=60) == 0
    assert not _containers_of(docker_engine, child.pid)


def test_killed_kernel_leaves_an_orphan_that_load_reaps(docker_engine, isolation):
    child = subprocess.Popen([sys.executable, "-c", LONG_RUN, "120"], stdout=subprocess.PIPE)
    _wait_for_container(docker_engine, child.pid)
    _kill_watchdog(child.pid)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    orphans = _containers_of(docker_engine, child.pid)
    assert orphans  # SIGKILL runs no atexit handler
    reaped = reap_orphans()
    assert {c.id for c in orphans} <= set(reaped)
    assert not _containers_of(docker_engine, child.pid)


def test_load_ext_reaps_in_the_background(docker_engine, shell, isolation):
    child = subprocess.Popen([sys.executable, "-c", LONG_RUN, "120"], stdout=subprocess.PIPE)
    _wait_for_container(docker_engine, child.pid)
    _kill_watchdog(child.pid)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    shell.run_line_magic("reload_ext", "jupyter_sandbox")
    for _ in range(100):
        if not _containers_of(docker_engine, child.pid):
            break
        time.sleep(0.1)
    assert not _containers_of(docker_engine, child.pid)


def test_cancelling_the_awaiting_task_removes_the_container(docker_engine, isolation):
    import asyncio

    sandbox = create("cancelled", code="import time\ntime.sleep(120)")

    async def cancel_when_running():
        task = asyncio.ensure_future(sandbox.run_async())
        while not _containers_of(docker_engine, os.getpid()):
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_when_running())
    settle()  # only the spare started for a next run may remain: remove it
    assert not _containers_of(docker_engine, os.getpid())


def test_cancel_event_stops_a_run(docker_engine, isolation):
    from jupyter_sandbox import SandboxCancelled

    cancel = threading.Event()
    sandbox = create("cancel-event", code="import time\ntime.sleep(120)")

    def cancel_when_running():
        _wait_for_container(docker_engine, os.getpid())
        time.sleep(0.5)
        cancel.set()

    threading.Thread(target=cancel_when_running, daemon=True).start()
    with pytest.raises(SandboxCancelled) as info:
        sandbox.execute({}, cancel=cancel)
    assert info.value.record["status"] == "error"


def test_a_spare_waits_per_image_and_limits_and_their_number_is_bounded(
    docker_engine, sandbox_pool
):
    sandbox_pool.max_spares = 3  # the bound, smaller: fewer containers to start
    for seconds in range(100, 100 + sandbox_pool.max_spares + 2):  # a different limit each time
        create("spare", code="", timeout=seconds).run()
    sandbox_pool.quiesce()
    assert len(sandbox_pool.spares) == sandbox_pool.max_spares
    assert all(len(slots) == 1 for slots in sandbox_pool.spares.values())  # one each: no fan-out
    running = _containers_of(docker_engine, os.getpid())
    spares = {s.container.id for slots in sandbox_pool.spares.values() for s in slots}
    assert spares == {c.id for c in running}


def _racing_remove(slot, monkeypatch, *, exit_first: bool, status: int):
    """Make the first force removal of ``slot``'s container answer ``status`` as the engine
    does when its own removal (``auto_remove``) races ours, after (``exit_first``) making the
    container's process exit for real: the race itself cannot be timed from outside. Later
    removals reach the engine."""
    import docker.errors
    import requests

    real = slot.container.remove
    calls = []

    def remove(**kwargs):
        calls.append(kwargs)
        if len(calls) > 1:
            return real(**kwargs)
        if exit_first:
            slot.container.kill()  # the process exits; the engine starts its own removal
        response = requests.Response()
        response.status_code = status
        raise docker.errors.APIError(
            f"Could not kill running container {slot.container.id}, cannot remove - "
            "container is not running",
            response,
        )

    monkeypatch.setattr(slot.container, "remove", remove)
    return calls


def _started_spare(docker_engine):
    from jupyter_sandbox.sandbox import _pool
    from jupyter_sandbox.sandbox._baseimage import DEFAULT_BASE_IMAGE
    from jupyter_sandbox.sandbox._spec import Resources

    limits = _pool.ContainerSetup(5.0, Resources())
    slot = _pool.current()._create(docker_engine, DEFAULT_BASE_IMAGE, limits, None)
    slot.container.start()
    return slot


@pytest.mark.parametrize("status", [500, 409])
def test_removal_racing_the_engines_own_leaves_nothing(docker_engine, monkeypatch, status):
    """The process had just exited when we force-removed (500, seen in CI: the removal thread
    died and the container was left), or the engine was already removing it (409): removal
    waits for the engine's own, and everything of the run is gone when it returns."""
    import docker.errors

    from jupyter_sandbox.sandbox import _pool

    slot = _started_spare(docker_engine)
    calls = _racing_remove(slot, monkeypatch, exit_first=True, status=status)
    _pool.remove(slot)
    assert len(calls) == 1  # the engine's own removal took it: no second removal was needed
    with pytest.raises(docker.errors.NotFound):
        docker_engine.containers.get(slot.container.id)
    assert not slot.work.exists()
    assert slot.container.id not in _pool.current().live


def test_removal_finishes_the_job_when_the_engines_own_never_comes(docker_engine, monkeypatch):
    """An error from the engine with the container still running (so no removal of its own
    is coming): after waiting for one, removal removes the container itself."""
    import docker.errors

    from jupyter_sandbox.sandbox import _pool

    monkeypatch.setattr(_pool, "_GONE_WAIT", 1.0)
    slot = _started_spare(docker_engine)
    calls = _racing_remove(slot, monkeypatch, exit_first=False, status=500)
    _pool.remove(slot)
    assert len(calls) == 2
    with pytest.raises(docker.errors.NotFound):
        docker_engine.containers.get(slot.container.id)
    assert not slot.work.exists()
