"""Nothing left behind: what a killed kernel leaves is reaped on the next load, and nothing a
live kernel still uses; widget models do not pile up cell after cell.

Killed kernels are real child processes that ran a real sandbox (and a real Monty worker) and
got SIGKILL. Their parent (this test) does not wait for them, so they stay zombies: the state a
kernel is in until the Jupyter server that started it notices.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker.errors
import pytest
from _processes import stat_fields, watchdog_of

from jupyter_sandbox._shared._owner import Owner, me, temp_prefix
from jupyter_sandbox.sandbox import _client, reap_orphans
from jupyter_sandbox.sandbox._manage import reap_folders

BASE = "jupyter-sandbox/base:bookworm"

KERNEL = """
import json, os, sys, tempfile, threading
from jupyter_sandbox import File, create, orchestrate
from jupyter_sandbox.sandbox._client import client
from jupyter_sandbox.sandbox._pool import quiesce

print(orchestrate("1 + 1").value, flush=True)  # a Monty worker: its launcher folder
kept = create("f", code="open('/var/outputs/f', 'w').write('mine')", outputs={"f": File},
              auto_io=False).run()  # a returned File: its output folder
quiesce()  # the used container is gone, a spare waits
# its program's own process: a spare's waiter is a python3 too, so only this one tells that the
# sleeper's container was taken, and its refill started, before `quiesce` below
sleeper = create("sleeper", code="import subprocess; subprocess.run(['sleep', '601'])", timeout=900)
threading.Thread(target=sleeper.run, daemon=True).start()
mine = {"label": ["jupyter-sandbox.kind=run", f"jupyter-sandbox.owner-pid={os.getpid()}"]}

def running() -> bool:  # the sleeper's program runs in one of our containers
    for row in client().api.containers(filters={**mine, "status": "running"}):
        if '"sleep 601"' in json.dumps(client().api.top(row["Id"])):
            return True
    return False

while not running():
    threading.Event().wait(0.05)
quiesce()  # the spare replacing the one the sleeper took is up: no create is in flight
folders = [e.path for e in os.scandir(tempfile.gettempdir())
           if e.name.startswith("jupyter-sandbox-") and f"-{os.getpid()}-" in e.name]
ids = [row["Id"] for row in client().api.containers(all=True, filters=mine)]
print(json.dumps({"file": str(kept.path), "folders": folders, "containers": ids}), flush=True)
threading.Event().wait()
"""


def _state(pid: int) -> str:
    fields = stat_fields(pid)
    assert fields is not None, f"process {pid} is gone"
    return fields[0]


def _containers_of(engine: Any, pid: int) -> list[str]:
    """Containers labelled with ``pid`` (one being removed already does not count)."""
    labels = ["jupyter-sandbox.kind=run", f"jupyter-sandbox.owner-pid={pid}"]
    rows = engine.api.containers(all=True, filters={"label": labels})
    return [row["Id"] for row in rows if row["State"] != "removing"]


@pytest.fixture
def zombie_kernel(docker_engine: Any) -> Iterator[tuple[int, dict[str, Any]]]:
    """A kernel that ran a Monty cell, returned a File and is running a sandbox, then got
    SIGKILL and was not waited for: (its pid, what it reported)."""
    child = subprocess.Popen(
        [sys.executable, "-c", KERNEL], stdout=subprocess.PIPE, text=True, cwd=tempfile.gettempdir()
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "2"
        made = json.loads(child.stdout.readline())
        # as a host crash would: the reaper is under test here, not the kernel's watchdog
        watchdog = watchdog_of(child.pid)
        assert watchdog is not None, "the kernel's first container started no watchdog"
        os.kill(watchdog, signal.SIGKILL)
        child.send_signal(signal.SIGKILL)
        # killed, not waited: a zombie until we wait below. The leader is a zombie before its
        # other threads are gone: one still finishing a spare's start made its folder again
        # after the reaper removed it (1 run in 6)
        while _state(child.pid) != "Z" or len(os.listdir(f"/proc/{child.pid}/task")) > 1:
            os.sched_yield()
        yield child.pid, made
    finally:
        child.kill()
        child.wait()
        for container_id in _containers_of(docker_engine, child.pid):  # a failed test's leftovers
            with contextlib.suppress(docker.errors.APIError):  # gone, or going, meanwhile
                docker_engine.api.remove_container(container_id, force=True)


def test_a_zombie_kernels_sandbox_container_is_reaped_on_next_load(
    docker_engine, no_leaked_containers, zombie_kernel
):
    pid, made = zombie_kernel
    assert made["containers"], "the killed kernel was running a sandbox"

    reap_orphans()  # (another kernel loading meanwhile may reap them first: same result)

    assert _containers_of(docker_engine, pid) == []


def test_a_killed_kernels_temp_folders_are_reaped_but_its_returned_files_kept(zombie_kernel):
    _, made = zombie_kernel
    folders = [Path(p) for p in made["folders"]]
    kinds = {p.name.split("-")[2] for p in folders}
    assert {"run", "monty", "out"} <= kinds, folders
    returned = Path(str(made["file"]))

    reap_folders()

    assert [f for f in folders if f.exists()] == [returned.parent]
    assert returned.read_text() == "mine"  # the user's result outlives the kernel, as at exit
    returned.unlink()
    returned.parent.rmdir()


def _folder_of(owner: Owner, kind: str = "run") -> Path:
    return Path(tempfile.mkdtemp(prefix=f"jupyter-sandbox-{kind}-{owner.pid}-{owner.token}-"))


def test_a_live_kernels_folders_and_containers_are_never_reaped(docker_engine):
    folder = Path(tempfile.mkdtemp(prefix=temp_prefix("run")))
    container = docker_engine.containers.create(
        BASE,
        command=["sleep", "60"],
        labels={"jupyter-sandbox.kind": "run", **_client.owner_labels()},
    )
    try:
        assert str(folder) not in reap_folders() and folder.is_dir()
        assert container.id not in reap_orphans()
    finally:
        container.remove(force=True)
        folder.rmdir()


def test_a_pid_reused_by_another_process_does_not_keep_orphans(docker_engine):
    """Our own (live) pid with another start time: the kernel that had this pid is dead."""
    now = me()
    earlier = Owner(now.pid, now.start - 1, now.boot, now.ns)
    other_boot = Owner(now.pid, now.start, "0" * len(now.boot), now.ns)
    folders = [_folder_of(earlier), _folder_of(other_boot)]
    container = docker_engine.containers.create(
        BASE,
        command=["sleep", "60"],
        labels={
            "jupyter-sandbox.kind": "run",
            **_client.owner_labels(),
            _client.OWNER_START: earlier.token,
        },
    )
    try:
        reaped = reap_folders()
        assert {str(f) for f in folders} <= set(reaped)
        assert not any(f.exists() for f in folders)
        assert container.id in reap_orphans()
    finally:
        if container.id in _containers_of(docker_engine, now.pid):
            container.remove(force=True)


def test_the_folder_reaper_follows_no_link_and_spares_other_users_folders(tmp_path):
    dead = Owner(999_999_999, 1, me().boot, me().ns)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious").write_text("keep")
    link = Path(tempfile.gettempdir()) / f"jupyter-sandbox-run-{dead.pid}-{dead.token}-link1"
    link.symlink_to(victim, target_is_directory=True)
    holder = _folder_of(dead)
    (holder / "escape").symlink_to(victim, target_is_directory=True)
    (holder / "file").symlink_to(victim / "precious")
    foreign = _folder_of(dead, "build")
    os.chown(foreign, 65534, 65534)
    try:
        reaped = reap_folders()
        assert str(holder) in reaped and not holder.exists()
        assert str(link) not in reaped and link.is_symlink()
        assert str(foreign) not in reaped and foreign.is_dir()
        assert (victim / "precious").read_text() == "keep"
    finally:
        link.unlink()
        foreign.rmdir()


def test_a_dead_kernels_folder_nested_past_the_recursion_limit_is_reaped():
    """A dead kernel may leave a copy of a hostile, very deep ``Dir``: the reaper runs on
    ``%load_ext`` and must remove it rather than fail the load with a RecursionError."""
    dead = Owner(999_999_998, 1, me().boot, me().ns)
    holder = _folder_of(dead)
    fd = os.open(holder, os.O_RDONLY)
    try:
        for _ in range(1500):  # deeper than rmtree can recurse; PATH_MAX forbids a full path
            os.mkdir("d", dir_fd=fd)
            inner = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
    finally:
        os.close(fd)
    assert str(holder) in reap_folders()
    assert not holder.exists()


SETUP = """
%load_ext jupyter_sandbox
import os
import ipywidgets.widgets.widget as _widget_module
from jupyter_sandbox import tool

@tool
def add(x: int, y: int) -> int:
    return x + y
"""
ORCHESTRATE_CELL = "%%orchestrate\nadd(1, 2)"
SANDBOX_CELL = "%%sandbox --out y\ny = 1 + 1"
COUNT = "print(len(_widget_module._instances))"


def _execute(client: Any, code: str) -> list[dict[str, Any]]:
    """Run a cell as a frontend would; its iopub messages (an error fails the test)."""
    messages: list[dict[str, Any]] = []
    reply = client.execute_interactive(code, output_hook=messages.append, timeout=300)
    assert reply["content"]["status"] == "ok", reply["content"]
    return messages


def _printed(messages: list[dict[str, Any]]) -> str:
    return "".join(m["content"]["text"] for m in messages if m["msg_type"] == "stream")


@pytest.fixture
def kernel(docker_engine: Any) -> Iterator[Any]:
    """A real IPython kernel (jupyter_client), the extension loaded and one tool registered;
    after its normal shutdown, none of its containers may be left, with no reaping.

    (ipykernel's shutdown waits for the children in its process group; the confined Monty
    workers' launchers ignore SIGTERM, so they start in a session of their own: otherwise
    jupyter_client SIGTERMs the kernel first and its exit handlers never run.)"""
    from jupyter_client.manager import start_new_kernel

    manager, client = start_new_kernel(kernel_name="python3")
    try:
        pid = int(_printed(_execute(client, SETUP + "\nprint(os.getpid())")))
        yield client
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=False)
    assert _containers_of(docker_engine, pid) == []


def test_cells_leave_no_widget_models_open_in_a_real_kernel(kernel):
    _execute(kernel, ORCHESTRATE_CELL)
    _execute(kernel, SANDBOX_CELL)  # first runs: imports, base image, spares
    before = int(_printed(_execute(kernel, COUNT)))

    opened, closed = set(), set()
    for code in [ORCHESTRATE_CELL] * 20 + [SANDBOX_CELL] * 3:
        for message in _execute(kernel, code):
            if message["msg_type"] == "comm_open":
                opened.add(message["content"]["comm_id"])
            elif message["msg_type"] == "comm_close":
                closed.add(message["content"]["comm_id"])

    # the live view is the record's own bundle, updated in place: no widget model to leave open
    assert opened == closed == set()
    assert int(_printed(_execute(kernel, COUNT))) == before
