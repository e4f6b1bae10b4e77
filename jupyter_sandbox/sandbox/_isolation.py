"""Isolation levels: which runtime a sandbox container runs under.

- ``"container"`` (the default): the engine's default runtime (runc under Docker). The code's
  system calls go straight to the host's kernel, filtered by Docker's seccomp profile, inside
  namespaces and cgroups, with every capability dropped: a bug in the host kernel reachable
  through an allowed call is reachable from the code.
- ``"gvisor"``: the same container, image and confinement under gVisor's ``runsc``. The code's
  system calls are served by gVisor's own kernel (the Sentry, a user-space program), which
  itself makes a small, seccomp-filtered set of calls to the host: the host kernel's surface
  the code can reach shrinks to what the Sentry uses. Costs a slower start and slower execs
  (`benchmarks/bench_isolation.py`).

The image, and so the cache key, is the same at every level: only the runtime differs.
``$JUPYTER_SANDBOX_ISOLATION`` sets the level of every sandbox that names none (an admin can
make gVisor the default; the test suite runs its container-side attacks under both).

gVisor behaves otherwise in three ways the engine must design around (measured here, Debian 12's
2022 build): the whole sandbox (the Sentry with the code) lives in the container's memory
cgroup, so a memory bomb kills the sandbox, not just a process, and the run's stream may never
end (`_container` notices the container is gone and asks the engine's events why: `OutOfMemory`);
a start that fails after ``runsc`` made its sandbox (an image without ``sh``) leaves that
sandbox running where the engine no longer lists it (`purge` deletes it); and the host counts
the Sentry's own threads, and a stub process per process of the code, against the container's
pids limit, so the limit a run asks for gets `GVISOR_OWN_PIDS` more (`pids_limit`) and a program
that reaches it ends the sandbox rather than seeing a fork fail.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Literal, cast, get_args

from .._shared._errors import IsolationUnavailable, SandboxConfigError

if TYPE_CHECKING:
    from docker import DockerClient

Isolation = Literal["container", "gvisor"]
ISOLATION_ENV = "JUPYTER_SANDBOX_ISOLATION"
RUNTIMES: dict[Isolation, str | None] = {"container": None, "gvisor": "runsc"}
"""The engine runtime of each level (None: the engine's default)."""
STATE_ROOTS = ("/var/run/docker",)
"""Docker's exec roots: runsc keeps each sandbox's state in ``runtime-*/moby`` below one (Docker
20.10 passes ``runtime-runc/moby`` to every runtime; later versions name it after the runtime).
Only root can read them: for another user `purge` finds nothing to do."""
_PURGE_TIMEOUT = 30.0
GVISOR_OWN_PIDS = 128
"""Host tasks gVisor's runtime needs beside the code's processes (the Sentry's Go threads and the
gofer: 69 in a sandbox at rest on this 2-core machine), added to a run's pids limit under
gVisor: without them a limit of 64 stops the runtime before the program starts."""
GVISOR_STOPPED = 2
"""The exit code of a gVisor sandbox whose runtime could not go on (the Go runtime's fatal error
when the host refuses it a thread: the pids limit, most often)."""

REGISTER = (
    'register gVisor with the Docker engine as the runtime "runsc": as root, `apt-get install'
    ' runsc`, add "runtimes": {"runsc": {"path": "/usr/bin/runsc", "runtimeArgs":'
    ' ["--network=none"]}} to /etc/docker/daemon.json and reload dockerd'
    " (`kill -HUP $(cat /var/run/docker.pid)`); `scripts/bootstrap.sh` in a checkout does all"
    " three"
)


def isolation_level(level: str | None) -> Isolation:
    """``level``, else ``$JUPYTER_SANDBOX_ISOLATION``, else ``"container"``; checked."""
    chosen = level or os.environ.get(ISOLATION_ENV) or "container"
    if chosen not in get_args(Isolation):
        where = f"${ISOLATION_ENV}" if not level else "isolation"
        raise SandboxConfigError(
            f"{where} must be one of {get_args(Isolation)}, not {chosen!r}", parameter="isolation"
        )
    return cast(Isolation, chosen)


def runtime(client: DockerClient, level: Isolation) -> str | None:
    """The runtime to create a container of ``level`` with; `IsolationUnavailable` (one line:
    what to run) when the engine has no such runtime. Asked once per engine while it has it."""
    from ._client import engine_of
    from ._engine import supports_gvisor

    name = RUNTIMES[level]
    engine = engine_of(client)
    if name is not None and not supports_gvisor(engine):
        raise IsolationUnavailable(
            f"isolation {level!r} needs Docker: {engine.describe()} cannot run {name}"
            " (choose the Docker engine: JUPYTER_SANDBOX_ENGINE=docker)"
        )
    if name is not None and not _has_runtime(client, name):
        _has_runtime.cache_clear()  # asked again next time: it may be registered meanwhile
        raise IsolationUnavailable(f"isolation {level!r} needs {name}: {REGISTER}")
    return name


def pids_limit(pids: int, level: Isolation) -> int:
    """The engine's pids limit for a run that asks for ``pids`` at ``level``."""
    return pids + GVISOR_OWN_PIDS if level == "gvisor" else pids


@cache
def _has_runtime(client: DockerClient, name: str) -> bool:
    return name in (client.info().get("Runtimes") or {})


def _state_files(container_id: str) -> list[Path]:
    """What runsc keeps for ``container_id``'s sandbox: ``<id>_sandbox:<id>.state``/``.lock``."""
    found: list[Path] = []
    for root in STATE_ROOTS:
        with contextlib.suppress(OSError):
            found += Path(root).glob(f"runtime-*/moby/{container_id}_sandbox:{container_id}.*")
    return found


def purge(container_id: str) -> None:
    """Delete what runsc left of the container ``container_id`` once the engine removed it.

    After a normal removal there is nothing (a glob finds no file). After a failed start runsc
    may keep the sandbox running, unseen by ``docker ps``: ``runsc delete -force`` stops it.
    Best effort: needs root and the ``runsc`` binary on this host (a remote engine's sandboxes
    are its own host's to clean)."""
    files = _state_files(container_id)
    runsc = shutil.which("runsc")
    if runsc is not None:
        for state in (f for f in files if f.suffix == ".state"):
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                subprocess.run(
                    [runsc, "--root", str(state.parent), "delete", "-force", container_id],
                    capture_output=True,
                    timeout=_PURGE_TIMEOUT,
                    check=False,
                    env={},  # runsc needs none; ours may hold more than execve takes
                )
    for lock in (f for f in files if f.suffix == ".lock"):  # failed creates leave these
        with contextlib.suppress(OSError):
            lock.unlink()
