"""Spares follow demand: runs back to back leave as many spares as the row was long.

A refill started a spare as each run took one, but a start takes longer than a warm run, so a
loop of runs outpaced it, and the starts beside the runs slowed them. Now the spares wait for
the whole row, and are started again after it. Everything here is real: the engine, the containers.
"""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

from jupyter_sandbox import create
from jupyter_sandbox.sandbox import _pool
from jupyter_sandbox.sandbox._client import KIND, OWNER_PID

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("no_leaked_containers")]


def _created(engine: Any, since: float, until: float) -> int:
    """Containers this process created between ``since`` and ``until``."""
    labels = [f"{KIND}=run", f"{OWNER_PID}={os.getpid()}"]
    events = engine.events(
        since=f"{since:.9f}",
        until=f"{until:.9f}",
        decode=True,
        filters={"type": "container", "event": ["create"], "label": labels},
    )
    return sum(1 for _ in events)


def _spares() -> int:
    _pool.quiesce()
    (slots,) = _pool.current().spares.values()
    return len(slots)


def test_runs_back_to_back_leave_as_many_spares_as_the_row_was_long(docker_engine):
    sandbox = create("row", code="y = x + 1", inputs={"x": int}, outputs={"y": int}, timeout=62)
    _pool.settle()
    assert [sandbox.run(x=i) for i in range(3)] == [1, 2, 3]
    assert _spares() == 3
    # the next row takes them, and no spare starts beside it (it would slow each run); they
    # are started again once the row is over
    since = time.time()
    assert [sandbox.run(x=i) for i in range(2)] == [1, 2]
    assert _created(docker_engine, since, time.time()) == 0
    assert _spares() == 3
    # a run after a pause (`quiesce` waits for the refill) is no row: the longest stays 3
    # until it expires
    assert sandbox.run(x=0) == 1
    assert _spares() == 3
    _pool.settle()  # a clean slate: one run, one spare
    assert sandbox.run(x=0) == 1
    assert _spares() == 1


def test_a_loop_on_a_loaded_host_is_still_a_row(docker_engine, monkeypatch):
    """The gap that makes runs a row is the caller's, not the host's own work between two
    containers: with two CPU hogs beside the suite, collecting one run's outputs and staging
    the next one's inputs took over `_IN_A_ROW`, and the loop of 3 above left 2 spares (and a
    refill could start a spare beside the next row). Here the host is as slow as that, every
    time: each run's collection and staging take 0.3 s."""
    from jupyter_sandbox.sandbox import _sandbox

    def slowly(work: Any) -> Any:
        def slowed(*args: Any, **kwargs: Any) -> Any:
            time.sleep(0.3)
            return work(*args, **kwargs)

        return slowed

    monkeypatch.setattr(_sandbox, "stage", slowly(_sandbox.stage))
    monkeypatch.setattr(_sandbox, "collect_outputs", slowly(_sandbox.collect_outputs))
    sandbox = create("slow", code="y = x + 1", inputs={"x": int}, outputs={"y": int}, timeout=64)
    _pool.settle()
    assert [sandbox.run(x=i) for i in range(3)] == [1, 2, 3]
    assert _spares() == 3
    since = time.time()  # nor does a spare start beside the next row while a run is staged
    assert [sandbox.run(x=i) for i in range(2)] == [1, 2]
    assert _created(docker_engine, since, time.time()) == 0
    assert _spares() == 3


def test_a_fan_out_filling_the_pool_leaves_the_other_sandbox_its_spare(sandbox_pool):
    """A full pool makes room by taking a spare of the sandbox that has the most, not the
    oldest spare: that was the other sandbox's only one, so every run of it after a fan-out
    was a cold start (bench_isolation's warm rows came out as slow as a ``docker run``)."""
    from concurrent.futures import ThreadPoolExecutor

    sandbox_pool.max_spares = 3
    # tmpfs sizes of their own: a spare of one cannot be set to the other's (`_pool.retune`)
    io = {"inputs": {"x": int}, "outputs": {"y": int}}
    cell = create("cell", code="y = x + 1", resources={"disk": "61m"}, **io)
    wide = create("wide", code="y = x * 2", resources={"disk": "63m"}, **io)
    _pool.settle()
    assert cell.run(x=1) == 2
    _pool.quiesce()
    with ThreadPoolExecutor(3) as threads:  # three runs at once: `wide` wants 3 spares
        assert list(threads.map(lambda i: wide.run(x=i), range(3))) == [0, 2, 4]
    _pool.quiesce()
    spares = {key[1].resources.disk: len(slots) for key, slots in _pool.current().spares.items()}
    assert spares == {"61m": 1, "63m": 2}
