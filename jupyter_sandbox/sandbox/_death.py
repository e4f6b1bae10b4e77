"""Why a container died under a run, after the engine has already removed it.

A run's container normally outlives its exec. When the container itself dies (under gVisor a
memory bomb kills the whole sandbox: gVisor's kernel and the code share the memory cgroup;
``docker kill`` from outside does it under any runtime), it removes itself (``auto_remove``)
and its state goes with it, while under gVisor the exec's stream never even ends. The engine's
event log keeps what the state forgot: an ``oom`` event, and ``die`` with the exit code.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from docker import DockerClient

_SLACK = 2.0
"""Seconds before the container's start from which its events are read (clocks and rounding)."""


def death(client: DockerClient, container_id: str, born: float) -> tuple[int | None, bool]:
    """(exit code, killed for memory) of a container that died; ``born`` is when it was started
    (`time.monotonic`). The exit code is None if the engine recorded none."""
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
        filters = {"container": container_id, "event": ["die", "oom"]}
    events = client.api.events(**window, filters=filters, decode=True)
    code, oom = None, False
    for event in events:
        if event.get("Action") == "oom":
            oom = True
        elif event.get("Action") == "die":
            exit_code = (event.get("Actor") or {}).get("Attributes", {}).get("exitCode")
            code = int(exit_code) if exit_code is not None else None
    return code, oom
