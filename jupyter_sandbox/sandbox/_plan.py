"""A sandbox run's strategies, chosen once by `plan` before anything runs.

- The **backend**, a place a program runs (`Backend`): `Engine`, this machine's Docker or
  Podman engine with its warm pool (`_container.run_container`, `_pool`), or `DaskWorker`, a worker
  of a Dask cluster (`_cluster`, which uses that worker's engine). The protocol is what the
  attempt loop needs of any place, and no more. An interactive session asks less of a place
  (`SessionBackend`: the image and the route, no `Backend.run`) and gets its plan from
  `session_plan`, which is `plan` with the session's refusals.
- The **network** (`Network`): `Plain` (the engine's ``none`` or ``bridge``) or `AllowList`
  (its destinations, reached through the proxy `_egress` starts, and the secrets that proxy
  adds to their hosts' requests, `_inject`).
- The **cache** (`Cache`): whether the result cache replays a run and keeps its result
  (``cache="auto"`` both, ``"override"`` only keeps, ``"disable"``: `NO_CACHE`).

Choices that cannot hold are refused here in one line each (`refuse`: an allow-list needs
runc and this machine's engine; `AllowList.check`: it needs Docker). `Sandbox._execute` and
`Sandbox._attempts`, the loop, then call the three without asking which they are.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from .._shared._errors import SandboxConfigError
from .._shared._events import EventCallback, Output, RunFinished, RunStarted
from .._shared._secrets import hide_values
from . import _cache, _pool
from ._allowlist import Destination, describe, require_docker
from ._client import client, engine_of
from ._container import RawRun, run_container
from ._image import build_error, ensure_image, image_id
from ._isolation import Isolation
from ._pool import ContainerSetup
from ._record import SandboxRun
from ._spec import CacheMode, ImageSpec, Resources
from ._spec import Network as NetworkName
from ._staging import Staged

if TYPE_CHECKING:
    from distributed import Client
    from docker import DockerClient

    from ._egress import Egress
    from ._inject import Injection
    from ._requests import Request


class Definition(Protocol):
    """What `plan` reads of a defined sandbox (`Sandbox`)."""

    @property
    def network(self) -> NetworkName | tuple[Destination, ...]: ...
    @property
    def isolation(self) -> Isolation: ...
    @property
    def cluster(self) -> str | Client | None: ...
    @property
    def cache(self) -> CacheMode: ...
    @property
    def image_spec(self) -> ImageSpec: ...
    @property
    def image(self) -> str | None: ...
    @property
    def ca_bundle(self) -> Path | None: ...
    @property
    def timeout(self) -> float: ...
    @property
    def resources(self) -> Resources: ...


def container_setup(sandbox: Definition, network: str) -> ContainerSetup:
    """What each container of ``sandbox``'s runs starts with on the engine ``network`` (a
    spare's key, with the image)."""
    return ContainerSetup(sandbox.timeout, sandbox.resources, network, sandbox.isolation)


@dataclass(frozen=True)
class Attempt:
    """One try of a run, as a backend receives it: what `_container.run_container` is called
    with."""

    image: str
    command: list[str]
    env: Mapping[str, str]
    inputs_dir: Path
    program_dir: Path
    outputs_dir: Path | None
    """Where the outputs' tar is unpacked; None when the run has none to collect."""
    output_names: Collection[str]
    limits: ContainerSetup
    on_event: EventCallback
    scrub: tuple[str, ...]
    """The secrets' values, masked in what the run prints."""
    cancel: threading.Event | None
    asked: float
    """When the caller asked for the run (`_pool.acquire` counts demand from it)."""

    def keywords(self) -> dict[str, Any]:
        """The fields as keywords (shallow: the objects themselves)."""
        return {spec.name: getattr(self, spec.name) for spec in fields(self)}


# -- the network ------------------------------------------------------------------------


@dataclass(frozen=True)
class Route:
    """How a run's containers reach the network: the engine network they join, what their
    environment adds (a proxy's variables), and what an allow-list's proxy says of each
    attempt (what it sent out; for a failed one, what was refused and whether the proxy
    stopped)."""

    network: str
    environment: Mapping[str, str] = field(default_factory=dict)
    egress: Egress | None = None

    def requests(
        self, since: float, until: float, address: str | None, secrets: tuple[str, ...]
    ) -> list[Request] | None:
        """What an attempt's container at ``address`` sent out between ``since`` and
        ``until`` (epoch seconds), its ``secrets`` masked, from the proxy's log; None without
        a proxy (nothing to account for)."""
        if self.egress is None:
            return None
        return self.egress.requests(since, until, address, secrets)

    def refused(self, sent: list[Request] | None) -> list[str]:
        """``host:port`` of each destination the proxy refused of ``sent``: none without."""
        return self.egress.refused(sent) if self.egress is not None and sent is not None else []

    def lost(self, since: float) -> bool:
        """Whether the proxy stopped serving since ``since``: never without one."""
        return self.egress.lost(since) if self.egress is not None else False


class Network(Protocol):
    """A sandbox's network as its runs and its build reach it."""

    @property
    def fingerprint(self) -> str:
        """What the cache key says of it (a run's outputs may depend on what it reaches)."""
        ...

    @property
    def spare_network(self) -> str | None:
        """The engine network a spare of a fresh image starts on; None when none is known
        before the first run (an allow-list's proxy network)."""
        ...

    def check(self, engine: str, url: str) -> None:
        """Refuse an engine (`_engine.Engine`'s name, its URL) that cannot keep it."""
        ...

    def for_build(
        self, docker: DockerClient, spec: ImageSpec, emit: EventCallback
    ) -> Callable[[], tuple[str, dict[str, str]]] | None:
        """What `ensure_image` calls for the network of a build's steps (None: the default)."""
        ...

    def join(self, docker: DockerClient | None, emit: EventCallback) -> Route:
        """The route of this run's containers, made ready (once per run)."""
        ...


@dataclass(frozen=True)
class Plain:
    """``none`` or ``bridge``: the engine's own network, joined as is."""

    name: NetworkName

    @property
    def fingerprint(self) -> str:
        return self.name

    @property
    def spare_network(self) -> str | None:
        return self.name

    def check(self, engine: str, url: str) -> None:
        return None

    def for_build(
        self, docker: DockerClient, spec: ImageSpec, emit: EventCallback
    ) -> Callable[[], tuple[str, dict[str, str]]] | None:
        return None

    def join(self, docker: DockerClient | None, emit: EventCallback) -> Route:
        return Route(self.name)


@dataclass(frozen=True)
class AllowList:
    """Only ``destinations``, through a filtering proxy on an internal network (`_egress`,
    loaded here only: a sandbox without an allow-list never imports it)."""

    destinations: tuple[Destination, ...]
    injection: Injection | None = None
    """The secrets its proxy adds to their hosts' requests (`_inject`): a proxy of its own."""

    @property
    def fingerprint(self) -> str:
        return describe(self.destinations)

    @property
    def spare_network(self) -> str | None:
        return None  # the proxy's network: the first run starts it (`join`)

    def check(self, engine: str, url: str) -> None:
        require_docker(engine, url)

    def for_build(
        self, docker: DockerClient, spec: ImageSpec, emit: EventCallback
    ) -> Callable[[], tuple[str, dict[str, str]]] | None:
        from . import _egress

        return _egress.for_build(docker, spec, emit)

    def join(self, docker: DockerClient | None, emit: EventCallback) -> Route:
        from . import _egress

        assert docker is not None  # `refuse`: an allow-list runs on this machine's engine
        egress = _egress.ensure(docker, self.destinations, emit, self.injection)
        return Route(egress.network, egress.environment(), egress)


# -- the cache --------------------------------------------------------------------------


@dataclass(frozen=True)
class Cache:
    """Whether the result cache (`_cache`) answers a run (``replays``: ``cache="auto"``) and
    keeps what it gave (``keeps``: ``"auto"`` and ``"override"``); `NO_CACHE` for
    ``"disable"``: every run runs, and nothing is digested for a key."""

    replays: bool
    keeps: bool

    @property
    def fingerprints(self) -> bool:
        """Whether staging takes the inputs' digests (`Staged.fingerprint`) for `key`."""
        return self.keeps

    def key(
        self, image: str, program: Mapping[str, Any], staged: Staged, secrets: Mapping[str, str]
    ) -> str | None:
        """The run's cache key (None: no cache)."""
        if not self.keeps:
            return None
        return _cache.cache_key(
            image_id=image, program=program, inputs=staged.fingerprint, secrets=secrets
        )

    def replay(self, run: SandboxRun, key: str | None, emit: EventCallback) -> bool:
        """Fill ``run`` from the cache, as a run's events would: False on a miss."""
        hit = _cache.load(key) if self.replays and key is not None else None
        if hit is None:
            return False
        run.outputs, run.stdout, run.stderr = hit["outputs"], hit["stdout"], hit["stderr"]
        run.displays = hit["displays"]
        run.cached, run.exit_code = True, 0
        emit(RunStarted(run.name, run.image, inputs=run.described_inputs()))
        for stream in ("stdout", "stderr"):  # the cell shows a cached run's output as a run's:
            if hit[stream]:  # streamed (the record keeps only a tail)
                emit(Output(stream, hit[stream]))
        shown = hide_values(run.outputs, run.secrets)
        emit(RunFinished(run.name, 0, 0.0, outputs=shown, cached=True))
        return True

    def keep(self, run: SandboxRun, key: str | None) -> None:
        """Store a run that succeeded, unless it holds a secret (``run.uncached`` says so)."""
        if key is not None and not _cache.store(
            key, run.outputs, run.stdout, run.stderr, run.secrets, run.displays
        ):
            run.uncached = _cache.NOT_KEPT


NO_CACHE = Cache(replays=False, keeps=False)
_CACHES: dict[CacheMode, Cache] = {
    "disable": NO_CACHE,
    "auto": Cache(replays=True, keeps=True),
    "override": Cache(replays=False, keeps=True),
}


# -- the backend ------------------------------------------------------------------------


class Backend(Protocol):
    """A place a program runs: what the attempt loop asks of it, in this order."""

    def hold(self) -> contextlib.AbstractContextManager[None]:
        """Around the whole run, as its caller sees it (the warm pool counts demand by it)."""
        ...

    def prepare(self, run: SandboxRun, emit: EventCallback) -> str:
        """Make the run's image ready (``run.image``, ``run.build``); what names it in the
        cache key."""
        ...

    def join(self, emit: EventCallback) -> Route:
        """The network route of the run's attempts (an allow-list's proxy starts here)."""
        ...

    def run(self, run: SandboxRun, attempt: Attempt) -> RawRun:
        """One attempt, to its end, its container removed."""
        ...


@dataclass(frozen=True)
class Engine:
    """This machine's engine: images built or found here, containers from the warm pool."""

    docker: DockerClient
    network: Network
    spec: ImageSpec
    image: str | None
    """A prebuilt image run as is; None builds ``spec``."""
    ca_bundle: Path | None
    spare: ContainerSetup | None
    """What a fresh image's first spare starts with; None: no spare before the first run."""

    def hold(self) -> contextlib.AbstractContextManager[None]:
        return _pool.call()

    def prepare(self, run: SandboxRun, emit: EventCallback) -> str:
        if self.image is not None:
            return image_id(self.docker, self.image) or repr(self.image)  # or a clear error
        build_network = self.network.for_build(self.docker, self.spec, emit)
        run.image, found, run.build = ensure_image(
            self.docker, self.spec, emit, build_network, self.ca_bundle
        )
        if run.build is not None and run.build.error is not None:
            raise build_error(self.spec, run.build, trusted=self.ca_bundle)
        if run.build is not None and not run.build.cached and self.spare is not None:
            _pool.prestart(self.docker, run.image, self.spare)  # its first spare starts now
        return found or repr(self.spec)

    def join(self, emit: EventCallback) -> Route:
        return self.network.join(self.docker, emit)

    def run(self, run: SandboxRun, attempt: Attempt) -> RawRun:
        return run_container(self.docker, **attempt.keywords())


@dataclass(frozen=True)
class DaskWorker:
    """A worker of a Dask cluster, which builds or finds the image and runs the container on
    its own engine (`_cluster`, `_on_worker`: loaded only when a cluster is named)."""

    cluster: str | Client
    network: Plain
    spec: ImageSpec
    image: str | None

    def hold(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()  # each worker's own pool counts its demand

    def prepare(self, run: SandboxRun, emit: EventCallback) -> str:
        return repr(self.image or self.spec)  # each worker has its own image ids

    def join(self, emit: EventCallback) -> Route:
        return self.network.join(None, emit)

    def run(self, run: SandboxRun, attempt: Attempt) -> RawRun:
        from ._cluster import runner

        return runner(self.cluster, self.spec, self.image, run)(None, **attempt.keywords())


class SessionBackend(Protocol):
    """What an interactive session (`_session`) asks of a place: a one-shot run's `prepare`
    and `join`, so its image and its route (an allow-list's proxy and network) are a run's by
    construction. It has no `Backend.run`: that is one attempt whose container is removed at
    its end, while a session's cells run one after another in the one container it keeps, over
    that container's attach stream (`_session.SandboxSession.execute`). `Engine` is one; a
    Dask worker is not (the stream is to this machine's engine)."""

    def prepare(self, run: SandboxRun, emit: EventCallback) -> str:
        """As `Backend.prepare`: the image built or found (``run.image``)."""
        ...

    def join(self, emit: EventCallback) -> Route:
        """As `Backend.join`: the route the session's container starts on."""
        ...


# -- the plan ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """The strategies of one run."""

    backend: Backend
    network: Network
    cache: Cache


def refuse(
    network: NetworkName | tuple[Destination, ...],
    isolation: Isolation,
    cluster: object,
) -> None:
    """The combinations no backend can keep, refused in one line each (`create` asks first)."""
    if isolation == "gvisor" and network != "none":
        shown = network if isinstance(network, str) else "an allow-list"
        raise SandboxConfigError(
            f"network {shown!r} needs isolation 'container': gVisor runs with its network off"
            " (runsc --network=none)",
            parameter="network",
        )
    if cluster is not None and isinstance(network, tuple):
        raise SandboxConfigError(
            "an allow-listed network runs on this machine's engine: drop cluster, or use"
            " network='none' on the cluster",
            parameter="network",
        )


def plan(
    sandbox: Definition,
    connect: Callable[[], DockerClient] = client,
    injection: Injection | None = None,
) -> Plan:
    """Choose ``sandbox``'s backend, network and cache for a run; ``connect`` gives the local
    engine's client (`DockerUnavailable` when none answers), asked only for a local run;
    ``injection``: the secrets an allow-list's proxy adds, read for this run."""
    refuse(sandbox.network, sandbox.isolation, sandbox.cluster)
    cache = _CACHES[sandbox.cache]
    chosen = sandbox.network
    network: Network = Plain(chosen) if isinstance(chosen, str) else AllowList(chosen, injection)
    if sandbox.cluster is not None:
        assert isinstance(network, Plain)  # `refuse`: an allow-list runs here
        worker = DaskWorker(sandbox.cluster, network, sandbox.image_spec, sandbox.image)
        return Plan(worker, network, cache)
    docker = connect()
    engine = engine_of(docker)  # asked once per client
    network.check(engine.name, engine.url)
    spare = network.spare_network
    local = Engine(
        docker,
        network,
        sandbox.image_spec,
        sandbox.image,
        sandbox.ca_bundle,
        None if spare is None else container_setup(sandbox, spare),
    )
    return Plan(local, network, cache)


@dataclass(frozen=True)
class SessionPlan:
    """The strategies of one session: its backend and network; no cache (a cell's result
    depends on the session's earlier cells, never on its code alone)."""

    backend: SessionBackend
    network: Network
    docker: DockerClient
    """The engine's client the session's container is made with (the plan's own)."""


def session_plan(sandbox: Definition, connect: Callable[[], DockerClient] = client) -> SessionPlan:
    """`plan` for an interactive session: the same network choice and the same refusals, then
    the session's own: this machine's engine only, and no result cache."""
    if sandbox.cluster is not None:
        raise SandboxConfigError(
            "a session runs on this machine's engine: drop cluster", parameter="cluster"
        )
    if sandbox.cache != "disable":
        raise SandboxConfigError(
            "a session's cells are never cached (each depends on the cells before it): drop cache",
            parameter="cache",
        )
    chosen = plan(sandbox, connect)
    assert isinstance(chosen.backend, Engine)  # no cluster: this machine's engine
    assert chosen.cache is NO_CACHE
    return SessionPlan(chosen.backend, chosen.network, chosen.backend.docker)
