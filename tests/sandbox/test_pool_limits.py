"""A run whose limits no spare has is served by a waiting spare set to its limits (`_pool.retune`).

Everything here is real: the engine, the spares, the cgroup files read from inside the run.
The promise under test is that the limits in force inside are the run's, never the spare's,
and that a spare the engine cannot set is never used.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from jupyter_sandbox import OutOfMemory, create
from jupyter_sandbox.sandbox import _pool

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("no_leaked_containers")]

_LIMITS_INSIDE = """\
import json, os, socket

def first(*paths):
    for path in paths:
        if os.path.exists(path):
            return open(path).read().split()
    return None

print(json.dumps({
    "host": socket.gethostname(),
    "memory": first("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"),
    "cpu": first("/sys/fs/cgroup/cpu.max", "/sys/fs/cgroup/cpu/cpu.cfs_quota_us"),
    "pids": first("/sys/fs/cgroup/pids.max", "/sys/fs/cgroup/pids/pids.max"),
}))
"""
"""The cgroup limits the run's own processes are under (cgroup v2's files, else v1's)."""


def _inside(resources: dict[str, Any] | None = None, timeout: float = 600) -> dict[str, Any]:
    sandbox = create(
        "limits", code=_LIMITS_INSIDE, auto_io=False, resources=resources, timeout=timeout
    )
    seen: dict[str, Any] = json.loads(sandbox.execute({}).stdout)
    return seen


def _waiting(pool: _pool.Pool) -> set[str]:
    return {slot.container.id[:12] for slots in pool.spares.values() for slot in slots}


def _cpu_quota(cpu: list[str]) -> float:
    """CPUs a cgroup allows: v2's ``max`` line ("50000 100000"), v1's quota over 100 ms."""
    return int(cpu[0]) / (int(cpu[1]) if len(cpu) > 1 else 100_000)


def test_a_run_with_new_limits_takes_a_spare_set_to_them(sandbox_pool):
    """After a run with the defaults a spare waits; a run asking for other memory, CPUs, pids
    and timeout is served by it (its hostname is the spare's), and inside, the memory, CPU
    quota and pids limits are the run's own. The next run with the defaults again gets the
    defaults, not the limits the spare before it was given."""
    default = _inside()
    _pool.quiesce()
    waiting = _waiting(sandbox_pool)
    assert waiting
    changed = _inside({"memory": "300m", "cpu": 0.5, "pids": 77}, timeout=120)
    assert changed["host"] in waiting  # a warm run, not a cold start
    assert int(changed["memory"][0]) == 300 * 2**20
    assert _cpu_quota(changed["cpu"]) == 0.5
    assert changed["pids"] == ["77"]
    _pool.quiesce()
    again = _inside()
    assert {k: again[k] for k in ("memory", "cpu", "pids")} == {
        k: default[k] for k in ("memory", "cpu", "pids")
    }


def test_a_spare_the_engine_cannot_set_is_never_used(sandbox_pool):
    """gVisor's runsc cannot change a running container's limits: the engine refuses the
    update, the spare is removed unused and the run starts cold, with its own limits (its
    own memory limit stops a bomb that the spare's would let through). The pool remembers
    the runtime, so its next runs of other limits go cold at once."""
    gvisor = {"isolation": "gvisor", "auto_io": False}
    create("gvisor", code="print(1)", **gvisor).run()
    _pool.quiesce()
    before = _waiting(sandbox_pool)
    assert before
    bomb = create(
        "bomb",
        code="x = bytearray(200 * 2**20)\nprint('held')",
        resources={"memory": "64m"},
        **gvisor,
    )
    with pytest.raises(OutOfMemory):
        bomb.run()
    assert not before & _waiting(sandbox_pool)  # the spare it was offered is gone, unused
    assert any(isolation == "gvisor" for _, isolation in sandbox_pool.fixed)


def test_a_longer_timeout_than_the_spare_outlives_is_a_cold_start(sandbox_pool):
    """A spare's own clock ends it its idle time plus its timeout after its start; a run whose
    timeout would outlast that is not given it (the clock would kill the run early)."""
    _inside(timeout=1)
    _pool.quiesce()
    waiting = _waiting(sandbox_pool)
    assert waiting
    long = _inside(timeout=3600)
    assert long["host"] not in waiting


def test_only_what_the_engine_can_change_is_changed(docker_engine):
    """`_pool._retunable` matches spares that differ in memory, CPUs, pids, timeout and output
    cap only: another tmpfs size or network is never retuned."""
    from jupyter_sandbox.sandbox._spec import Resources

    base = _pool.ContainerSetup(timeout=60, resources=Resources())
    pool = _pool.Pool()
    slot: Any = type("Slot", (), {"born": 0.0})()
    pool.spares[("img", base)] = [slot]
    other = _pool.ContainerSetup(
        timeout=30, resources=Resources(memory="2g", cpu=0.5, pids=10, output="1m")
    )
    assert _pool._retunable(pool.spares, "img", other, now=1.0) == (("img", base), slot)
    assert _pool._retunable(pool.spares, "other", other, now=1.0) is None
    disk = _pool.ContainerSetup(timeout=30, resources=Resources(disk="1g"))
    assert _pool._retunable(pool.spares, "img", disk, now=1.0) is None
    bridge = _pool.ContainerSetup(timeout=30, resources=Resources(), network="bridge")
    assert _pool._retunable(pool.spares, "img", bridge, now=1.0) is None
