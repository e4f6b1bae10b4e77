"""The Monty workers are confined by the OS too, not only by the interpreter."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from pathlib import Path

import pydantic_monty
import pytest

from jupyter_sandbox import orchestrate
from jupyter_sandbox.orchestration._confine import (
    ACCOUNT_FILES,
    UID_BASE,
    _levels,
    ids_taken,
    kill_worker,
    stop_inheritance,
)
from jupyter_sandbox.orchestration._workers import confinement, pool

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="the own-uid level needs a root host")


def worker_process(pid: int) -> int:
    """The real ``monty`` process behind the PID the pool reports (the launcher ``unshare``
    that stays its parent outside the worker's PID namespace)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    assert len(children) == 1, children
    return int(children[0])


def status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return dict(line.split(":\t", 1) for line in lines if ":\t" in line)


def namespace(pid: int, kind: str) -> str:
    return os.readlink(f"/proc/{pid}/ns/{kind}")


@root_only
def test_workers_run_under_their_own_uid_without_capabilities_in_their_own_namespaces() -> None:
    assert confinement().level == "own-uid+pidns+netns"
    with pool().checkout() as session:
        reported = session.worker_pid
        assert reported is not None
        session.feed_run("1")  # the worker is alive and serving
        worker = worker_process(reported)
        fields = status(worker)
        assert fields["Uid"].split() == [str(UID_BASE + reported)] * 4
        assert fields["Gid"].split() == [str(UID_BASE + reported)] * 4
        assert fields["Groups"].strip() == ""
        assert fields["CapEff"].strip() == "0000000000000000"
        assert fields["CapBnd"].strip() == "0000000000000000"
        assert fields["NoNewPrivs"].strip() == "1"
        assert fields["NSpid"].split() == [str(worker), "1"]  # PID 1 of a namespace of its own
        for kind in ("pid", "mnt", "net", "ipc", "uts"):
            assert namespace(worker, kind) != namespace(os.getpid(), kind), kind


@root_only
def test_two_workers_at_once_get_different_uids_and_namespaces() -> None:
    with pool().checkout() as first, pool().checkout() as second:
        pids = [first.worker_pid, second.worker_pid]
        assert None not in pids and pids[0] != pids[1]
        workers = [worker_process(pid) for pid in pids if pid is not None]
        uids = {status(worker)["Uid"].split()[0] for worker in workers}
        assert len(uids) == 2
        for kind in ("pid", "mnt", "net", "ipc"):
            assert namespace(workers[0], kind) != namespace(workers[1], kind), kind


def test_killing_the_pid_the_pool_reports_kills_the_worker_and_the_next_cell_runs() -> None:
    """Interrupts kill ``worker_pid``: behind a launcher that is the worker's parent, and the
    monty process must die with it, or an interrupted cell would keep computing; and the pool
    must never hand the dying worker to the next cell (a bare ``kill`` of the launcher let the
    killed worker answer most of 300 requests here, and crashed a later cell now and then)."""
    for _ in range(30):
        with pool().checkout() as session:
            reported = session.worker_pid
            assert reported is not None
            session.feed_run("1")
            watch = os.pidfd_open(real_worker(reported))
            kill_worker(reported)
            with pytest.raises(pydantic_monty.MontyCrashedError):
                session.feed_run("2")
        ready, _, _ = select.select([watch], [], [], 30)  # a hang guard, not a timing check
        os.close(watch)
        assert ready, "the monty worker outlived the launcher the pool killed"
        assert orchestrate("6 * 7", tools=[]).value == 42


def real_worker(reported: int) -> int:
    own_pidns = confinement().level.endswith("pidns+netns")
    return worker_process(reported) if own_pidns else reported


def descriptors(pid: int) -> list[int]:
    return sorted(int(fd) for fd in os.listdir(f"/proc/{pid}/fd"))


def test_workers_inherit_no_descriptor_of_the_kernel_but_their_pipes() -> None:
    """A kernel holds descriptors it inherited (this test process holds its runner's); a
    worker must not get them, nor one the kernel made inheritable before its first cell."""
    with pool().checkout() as session:
        session.feed_run("1")
        assert session.worker_pid is not None
        assert descriptors(real_worker(session.worker_pid)) == [0, 1, 2]
    canary = os.open("/etc/hostname", os.O_RDONLY)
    try:
        os.set_inheritable(canary, True)
        stop_inheritance()  # what the kernel does once, before its first worker starts
        with (
            pydantic_monty.Monty(binary_path=confinement().binary, max_processes=1) as fresh,
            fresh.checkout() as session,
        ):
            session.feed_run("1")
            assert session.worker_pid is not None
            assert descriptors(real_worker(session.worker_pid)) == [0, 1, 2]
    finally:
        os.close(canary)


def test_kill_worker_leaves_alone_a_pid_that_is_not_a_child_of_the_kernel() -> None:
    """A worker's pid, once the worker is gone, may come back as anyone's process."""
    with subprocess.Popen(
        ["/bin/sh", "-c", "sleep 60 & echo $!"], stdout=subprocess.PIPE, text=True
    ) as shell:
        assert shell.stdout is not None
        stranger = int(shell.stdout.readline())
    try:
        # `$!` is known before the forked shell has exec'd `sleep`: wait for it to become one
        for _ in range(600):
            if status(stranger)["Name"].strip() == "sleep":
                break
            time.sleep(0.01)
        kill_worker(stranger)
        assert Path(f"/proc/{stranger}/stat").read_text().split()[2] != "Z"
        assert status(stranger)["Name"].strip() == "sleep"
    finally:
        os.kill(stranger, signal.SIGKILL)


def test_confined_workers_still_run_cells_with_tools_and_type_checks() -> None:
    def add(x: int, y: int) -> int:
        return x + y

    assert orchestrate("add(20, 1) * 2", tools=[add]).value == 42
    assert confinement().level != "none"


def test_the_own_uid_level_is_refused_when_an_account_holds_a_worker_id(tmp_path: Path) -> None:
    """A worker must never act as an existing user, group or rootless container's uid."""
    passwd, group, subuid = tmp_path / "passwd", tmp_path / "group", tmp_path / "subuid"
    passwd.write_text(
        f"mallory:x:{UID_BASE + 5}:100:m:/home/m:/bin/sh\n"
        f"gina:x:1000:{UID_BASE + 100}:g:/home/g:/bin/sh\n"
        "fine:x:1000:1000:f:/home/f:/bin/sh\n"
        "broken:x::\n"
    )
    group.write_text(f"last:x:{UID_BASE + 2**22 - 1}:\npast:x:{UID_BASE + 2**22}:\n")
    subuid.write_text(f"reaches:{UID_BASE - 1000}:1001\nstops:{UID_BASE - 1000}:1000\n")
    taken = ids_taken([str(passwd), str(group), str(subuid), str(tmp_path / "absent")])
    assert [line.split(": ", 1)[1].split(":")[0] for line in taken] == [
        "mallory", "gina", "last", "reaches",
    ]  # fmt: skip
    if confinement().level == "own-uid+pidns+netns":
        assert ids_taken(ACCOUNT_FILES) == []
        assert "own-uid+pidns+netns" not in [level for level, _ in _levels([str(passwd)])]
