"""Which Docker-API engine runs the sandboxes, and what it can enforce.

Two engines speak the Docker API: Docker's ``dockerd`` and Podman's ``podman system service``
(rootless: run by the user, on ``$XDG_RUNTIME_DIR/podman/podman.sock``; for people who cannot
be in the ``docker`` group). ``$JUPYTER_SANDBOX_ENGINE`` (or ``%config SandboxMagics.engine``)
chooses: ``docker``, ``podman``, or ``auto`` (the default: Docker's socket, or
``$DOCKER_HOST``, else Podman's). Podman's socket is ``$CONTAINER_HOST`` when set (Podman's own
variable), else the user's (root: the system service's).

What each engine enforces differs, and a container's limits are its confinement: rootless
Podman on a cgroup v1 host (or on v2 without the controllers delegated to the user) accepts a
memory, pids or CPU limit and silently drops it ("Resource limits are not supported and
ignored on cgroups V1 rootless systems", in the service's log only). `require_limits` refuses
to start a container there, naming each limit that would not hold and how to get it, unless
``$JUPYTER_SANDBOX_UNENFORCED_LIMITS`` lists every such limit (an explicit, logged
acceptance: then each run warns).

Podman's Docker API differs from Docker's in ways the engine designs around (podman 4.3, Debian
12, measured): an import ignores its ``tag`` (`tag_import` tags it), a tmpfs takes ``U`` (owned
by the container's user) and refuses ``uid=``/``gid=``, ``Ulimits`` are dropped, its ``info``
does not say rootless (its ``libpod/info`` does), it knows runtimes by name it cannot run
rootless (gVisor: refused, `supports_gvisor`), it answers 500 for a container that is gone
(`_client` makes that the 404 callers handle), its events answer nothing for a fractional
``since``/``until`` or an ``event`` filter (`_death`), and its builds write ``STEP n/m:``
(`_build`). The tests' ``podman`` variant runs every container-side test on it.
"""

from __future__ import annotations

import os
import stat
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast, get_args

from .._shared._errors import IsolationUnavailable, SandboxConfigError

if TYPE_CHECKING:
    from docker import DockerClient

EngineName = Literal["docker", "podman"]
Choice = Literal["auto", "docker", "podman"]
ENGINE_ENV = "JUPYTER_SANDBOX_ENGINE"
UNENFORCED_ENV = "JUPYTER_SANDBOX_UNENFORCED_LIMITS"
LIMITS = ("memory", "pids", "cpu")
"""The limits every container is started with (`_pool.Pool._create`)."""
DOCKER_SOCKET = "unix:///var/run/docker.sock"
PODMAN_ROOT_SOCKET = "unix:///run/podman/podman.sock"

_chosen: str | None = None
"""Set by ``%config SandboxMagics.engine`` (`choose`); wins over the environment."""


def choose(name: str | None) -> None:
    """Make ``name`` (``auto``, ``docker``, ``podman``; empty: the environment's) the engine of
    every later sandbox in this process, and of the kernels and watchdog it starts."""
    global _chosen
    if name:
        engine_choice(name)  # checked
        os.environ[ENGINE_ENV] = name
    _chosen = name or None


def engine_choice(name: str | None = None) -> Choice:
    """``name``, else the `choose` one, else ``$JUPYTER_SANDBOX_ENGINE``, else ``auto``."""
    chosen = name or _chosen or os.environ.get(ENGINE_ENV) or "auto"
    if chosen not in get_args(Choice):
        where = f" (from ${ENGINE_ENV})" if chosen == os.environ.get(ENGINE_ENV) else ""
        raise SandboxConfigError(
            f"the engine must be one of {get_args(Choice)}, not {chosen!r}{where}",
            parameter="engine",
        )
    return cast(Choice, chosen)


def podman_socket() -> str:
    """Podman's Docker-API socket for this user: ``$CONTAINER_HOST``, else the rootless
    service's (``$XDG_RUNTIME_DIR/podman/podman.sock``), root's being the system one."""
    if os.environ.get("CONTAINER_HOST"):
        return os.environ["CONTAINER_HOST"]
    if os.geteuid() == 0 and not os.environ.get("XDG_RUNTIME_DIR"):
        return PODMAN_ROOT_SOCKET
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{os.geteuid()}"
    return f"unix://{runtime_dir}/podman/podman.sock"


def candidates(choice: Choice) -> list[str]:
    """The engine URLs to try, in order, for ``choice``."""
    docker = os.environ.get("DOCKER_HOST") or DOCKER_SOCKET
    if choice == "docker":
        return [docker]
    if choice == "podman":
        return [podman_socket()]
    if os.environ.get("DOCKER_HOST"):  # set on purpose: that engine, whichever it is
        return [docker]
    return [docker, podman_socket()]


def how_to_start(choice: Choice) -> str:
    """What to run when no engine of ``choice`` answers."""
    podman = (
        f"start rootless Podman's service: `podman system service --time=0 &` (as you; it"
        f" listens on {podman_socket()}; Debian: `apt-get install podman uidmap slirp4netns`)"
    )
    docker = "start Docker: `bash scripts/bootstrap.sh` (or `dockerd &`)"
    return {"docker": docker, "podman": podman, "auto": f"{docker}, or {podman}"}[choice]


@dataclass(frozen=True)
class Engine:
    """What answered at ``url`` and what it enforces."""

    name: EngineName
    url: str
    version: str
    rootless: bool
    cgroup_version: str
    enforced: frozenset[str]
    """Of `LIMITS`, those a container's settings actually bound."""
    owner_uid: int | None = None
    """Who owns the engine's local socket (a rootless service's user), when it is a socket."""

    @property
    def unenforced(self) -> tuple[str, ...]:
        return tuple(limit for limit in LIMITS if limit not in self.enforced)

    def describe(self) -> str:
        """One line: ``Podman 4.3.1 (rootless, cgroup v1) at unix://...: enforces ...``."""
        kind = "Podman" if self.name == "podman" else "Docker"
        mode = "rootless" if self.rootless else "rootful"
        enforces = ", ".join(self.enforced) or "no limit"
        where = f"({mode}, cgroup v{self.cgroup_version}) at {self.url}"
        return f"{kind} {self.version} {where}: enforces {enforces}"


def _socket_owner(url: str) -> int | None:
    if not url.startswith("unix://"):
        return None
    try:
        status = os.stat(url.removeprefix("unix://"))
    except OSError:
        return None
    return status.st_uid if stat.S_ISSOCK(status.st_mode) else None


def identify(client: DockerClient, url: str) -> Engine:
    """Ask the engine at ``url`` what it is (two calls; `_client` keeps the answer)."""
    api = client.api
    return engine_from(
        url,
        client.version(),
        client.info,
        lambda: api._result(api._get(api._url("/libpod/info")), json=True),
    )


def engine_from(
    url: str,
    version: dict[str, Any],
    info: Callable[[], dict[str, Any]],
    libpod_info: Callable[[], dict[str, Any]],
) -> Engine:
    """The `Engine` that gave ``version`` (its ``/version``), asking ``info`` (``/info``) or,
    for Podman, ``libpod_info`` (``/libpod/info``: its ``/info`` does not say rootless) for
    the rest. Apart from the asking, so the doctor (which asks with its own bounded requests)
    judges an engine as every run does."""
    components = {c.get("Name", "") for c in version.get("Components") or []}
    owner = _socket_owner(url)
    if "Podman Engine" in components:
        host = libpod_info().get("host") or {}
        rootless = bool((host.get("security") or {}).get("rootless"))
        cgroup = str(host.get("cgroupVersion") or "").removeprefix("v") or "?"
        controllers = set(host.get("cgroupControllers") or [])
        if not rootless:
            enforced = frozenset(LIMITS)
        elif cgroup == "2":  # rootless v2: the controllers delegated to the user
            enforced = frozenset(limit for limit in LIMITS if limit in controllers)
        else:  # rootless v1: podman drops every resource limit
            enforced = frozenset()
        return Engine("podman", url, str(version.get("Version")), rootless, cgroup, enforced, owner)
    answered = info()
    options = answered.get("SecurityOptions") or []
    rootless = any(o.startswith("name=rootless") for o in options)
    flags = {"memory": "MemoryLimit", "pids": "PidsLimit", "cpu": "CpuCfsQuota"}
    enforced = frozenset(limit for limit, flag in flags.items() if answered.get(flag, True))
    cgroup = str(answered.get("CgroupVersion") or "?")
    return Engine("docker", url, str(version.get("Version")), rootless, cgroup, enforced, owner)


def _accepted() -> set[str]:
    return {w.strip() for w in os.environ.get(UNENFORCED_ENV, "").split(",") if w.strip()}


def limits_accepted(engine: Engine) -> bool:
    """Whether ``$JUPYTER_SANDBOX_UNENFORCED_LIMITS`` accepts every limit ``engine`` drops."""
    return set(engine.unenforced) <= _accepted()


def limits_fix(engine: Engine) -> str:
    """What gets ``engine``'s dropped limits enforced, or accepts running without them."""
    fix = (
        "use a cgroup v2 host with the memory, pids and cpu controllers delegated to the user"
        " (systemd: Delegate=yes, the default for user@.service), or Docker"
        if engine.name == "podman" and engine.rootless
        else "enable those cgroup controllers on the engine's host"
    )
    return f"{fix}; or accept running without them: {UNENFORCED_ENV}={','.join(engine.unenforced)}"


def require_limits(engine: Engine) -> None:
    """Refuse (`IsolationUnavailable`) to start a container whose limits ``engine`` would
    drop, unless ``$JUPYTER_SANDBOX_UNENFORCED_LIMITS`` accepts each of them (then warn)."""
    missing = engine.unenforced
    if not missing:
        return
    names = ",".join(missing)
    if limits_accepted(engine):
        warnings.warn(
            f"sandbox limits not enforced by {engine.describe()}: {names} (accepted by"
            f" ${UNENFORCED_ENV})",
            RuntimeWarning,
            stacklevel=2,
        )
        return
    raise IsolationUnavailable(
        f"{engine.describe()}: it would silently drop the {names} limit(s), so nothing ran;"
        f" {limits_fix(engine)}"
    )


def supports_gvisor(engine: Engine) -> bool:
    """gVisor runs under Docker (registered as ``runsc``); not under rootless Podman here."""
    return not (engine.name == "podman" and engine.rootless)


def tmpfs_owner(engine: Engine, uid: int) -> str:
    """The tmpfs option that makes a mount the container user's (``uid``)."""
    return "U" if engine.name == "podman" else f"uid={uid},gid={uid}"
