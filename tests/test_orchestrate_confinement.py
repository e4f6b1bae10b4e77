"""The Monty workers are confined by the OS too, not only by the interpreter."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jupyter_sandbox import orchestrate
from jupyter_sandbox.orchestrate._confine import NOBODY
from jupyter_sandbox.orchestrate._runtime import confinement, pool


def worker_pid() -> int:
    with pool().checkout() as session:
        pid = session.worker_pid
        assert pid is not None
        session.feed_run("1")  # the worker is alive and serving
        return pid


def status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return dict(line.split(":\t", 1) for line in lines if ":\t" in line)


@pytest.mark.skipif(os.geteuid() != 0, reason="the nobody+netns level needs a root host")
def test_workers_run_as_nobody_without_capabilities_in_their_own_network_namespace():
    assert confinement().level == "nobody+netns"
    pid = worker_pid()
    fields = status(pid)
    assert fields["Uid"].split()[0] == str(NOBODY)
    assert fields["CapEff"].strip() == "0000000000000000"
    assert fields["CapBnd"].strip() == "0000000000000000"
    assert fields["NoNewPrivs"].strip() == "1"
    assert os.readlink(f"/proc/{pid}/ns/net") != os.readlink("/proc/self/ns/net")


def test_confined_workers_still_run_cells_with_tools_and_type_checks():
    def add(x: int, y: int) -> int:
        return x + y

    assert orchestrate("add(20, 1) * 2", tools=[add]).value == 42
    assert confinement().level != "none"
