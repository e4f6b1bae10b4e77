"""Why a container died under a run, after the engine has already removed it.

A run's container normally outlives its program. When the container itself dies (under gVisor a
memory bomb kills the whole sandbox: gVisor's kernel and the code share the memory cgroup;
``docker kill`` from outside does it under any runtime), it removes itself (``auto_remove``)
and its state goes with it, while under gVisor its stream may never even end. The engine's
event log keeps what the state forgot: ``die`` with the exit code, ``kill`` for each signal
the engine sent, and (not always) ``oom``.

The ``oom`` event is not reliable. The engine's shim reports an OOM kill only if the
container's memory cgroup still exists when it reads it, and a gVisor sandbox killed for
memory dies whole, its cgroup deleted as it goes: on a loaded host (two CPU hogs beside the
tests) the deletion won and a memory bomb came back as exit 137 without ``oom``. The cgroup's
own counters (``memory.events`` ``oom_kill`` on cgroup v2, ``memory.oom_control`` on v1) go
with the cgroup, so reading them from the host afterwards loses the same race; only a
notification registered before the kill (v1's ``cgroup.event_control``, root only) or the
kernel log (``CAP_SYSLOG``) would outlive it, and neither is open to a kernel run as a user.
What does outlive it is who sent the SIGKILL: every signal the engine sends (``docker kill``,
``rm -f``, ``stop``, our removals, the watchdog's) is a ``kill`` event, written before the
signal goes. A SIGKILL (exit 137) with no ``kill`` event came from outside the engine, and
to a container under a memory limit that is the kernel's OOM killer (or root's ``kill -9``
of its processes from the host, which this counts as memory too).
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from docker import DockerClient

_SLACK = 2.0
SIGKILLED = 128 + 9
"""The exit code of a process (or a gVisor sandbox) killed by SIGKILL."""
"""Seconds before the container's start from which its events are read (clocks and rounding)."""


def death(client: DockerClient, container_id: str, born: float) -> tuple[int | None, bool]:
    """(exit code, killed for memory) of a container that died; ``born`` is when it was started
    (`time.monotonic`). The exit code is None if the engine recorded none. Killed for memory:
    an ``oom`` event, or a SIGKILL the engine did not send (no ``kill`` event)."""
    from ._client import engine_of

    now = time.time()
    since = now - (time.monotonic() - born) - _SLACK
    if engine_of(client).name == "podman":
        # Podman (4.3) returns nothing for a fractional since/until or an "event" filter:
        # whole seconds around the window, and the actions picked out here
        window: dict[str, object] = {"since": int(since), "until": math.ceil(now) + 1}
        filters: dict[str, object] = {"container": container_id}
    else:
        window = {"since": f"{since:.9f}", "until": f"{now:.9f}"}
        filters = {"container": container_id, "event": ["die", "oom", "kill"]}
    events = client.api.events(**window, filters=filters, decode=True)
    code, oom, signalled = None, False, False
    for event in events:
        action = event.get("Action")
        if action == "oom":
            oom = True
        elif action == "kill":
            signalled = True
        elif action == "die":
            exit_code = (event.get("Actor") or {}).get("Attributes", {}).get("exitCode")
            code = int(exit_code) if exit_code is not None else None
    return code, oom or (code == SIGKILLED and not signalled)
