"""Sandbox runs on a Dask cluster: the kernel's half (the worker's is `_on_worker`).

``create(..., cluster=Client | "tcp://host:8786")`` sends each run to a worker as a `Job`
(spec, staged files as tar bytes) and turns what comes back into the `RawRun` a local run
gives, so `Sandbox.execute` keeps one path: retries, checks, outputs and records are the same.
The outputs come back as tar bytes and are unpacked here by `extract_outputs`, the same
hostile-data checks as a local run, into the kernel's own folders.

Stopping is real: on cancel or Ctrl-C this sets the run's stop ``Event``, which the task
watches; it stops and removes its container and only then does this return. A worker that
dies mid-run is a `ContainerError` the sandbox's ``retries`` may re-run (its containers are
removed by that worker's own watchdog); no worker at all is a clear error, not a hang.
``distributed`` is an optional extra, imported only here and only when a cluster is used.
"""

from __future__ import annotations

import contextlib
import functools
import queue
import socket
import threading
import time
import uuid
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._shared import _errors
from .._shared._errors import ContainerError, SandboxCancelled, SandboxConfigError
from .._shared._events import Event, EventCallback
from ._container import RawRun
from ._image import build_error
from ._io import extract_outputs
from ._on_worker import REMOTE_EVENTS, Job, JobResult, pack, run_job
from ._pool import ContainerSetup
from ._record import SandboxRun
from ._spec import ImageSpec, parse_size

if TYPE_CHECKING:
    from distributed import Client

_POLL = 0.05
_STOP_WAIT = 60.0
"""Seconds to wait for a stopped task to report its container removed (it polls every 0.5 s)."""
_EVENTS_WAIT = 10.0
"""Seconds to wait for a finished task's last events (they travel apart from its result)."""
_NO_WORKERS = 30.0
"""Seconds a run may wait with no worker in the cluster before it fails (never a hang)."""
_INSTALL = "pip install 'jupyter-sandbox[cluster]'"

_lock = threading.Lock()
_clients: dict[str, Client] = {}
_routes: dict[str, queue.Queue[list[Any]]] = {}
"""Run id -> its event queue: one topic per client carries every run's events (the scheduler
keeps a bounded log per topic, so per-run topics would grow it without end)."""
_subscribed: set[str] = set()


def check_cluster(cluster: object) -> None:
    """``cluster=`` is None, a scheduler address, or a ``distributed.Client``."""
    if cluster is None:
        return
    if isinstance(cluster, str):
        if not cluster.strip() or any(c.isspace() for c in cluster):
            raise SandboxConfigError(
                f"cluster={cluster!r}: give a scheduler address such as 'tcp://host:8786'",
                parameter="cluster",
            )
        return
    try:
        from distributed import Client
    except ImportError:
        raise SandboxConfigError(
            f"cluster= needs the distributed package: {_INSTALL}", parameter="cluster"
        ) from None
    if not isinstance(cluster, Client):
        raise SandboxConfigError(
            f"cluster= takes a distributed.Client or a scheduler address, not"
            f" {type(cluster).__name__}",
            parameter="cluster",
        )


def _connect(cluster: str | Client) -> Client:
    """The client for ``cluster``: one per address for the life of the process."""
    try:
        from distributed import Client
    except ImportError:
        raise SandboxConfigError(
            f"cluster= needs the distributed package: {_INSTALL}", parameter="cluster"
        ) from None
    if not isinstance(cluster, str):
        return cluster
    with _lock:
        found = _clients.get(cluster)
        if found is None or found.status not in ("running", "connecting"):
            try:
                _reachable(cluster)
                found = Client(cluster, set_as_default=False, timeout="10s")
            except OSError as exc:
                raise ContainerError(
                    f"Dask scheduler at {cluster} not reachable ({exc}): check the address"
                ) from None
            except (ValueError, TypeError) as exc:
                raise SandboxConfigError(
                    f"cluster={cluster!r} is no scheduler address ({exc}): give one such as"
                    " 'tcp://host:8786'",
                    parameter="cluster",
                ) from None
            _clients[cluster] = found
        return found


def _reachable(address: str) -> None:
    """Refuse a malformed address (ValueError) or a TCP scheduler nobody listens at (OSError)
    before a `Client` is made: a client that failed to connect spends 20 s closing itself when
    it is collected (at kernel exit, say)."""
    from distributed.comm.addressing import parse_address, parse_host_port

    scheme, location = parse_address(address)
    if scheme == "tcp":
        host, port = parse_host_port(location)
        socket.create_connection((host, port), timeout=10).close()


def _topic(client: Client) -> str:
    """This client's event topic, subscribed once."""
    topic = f"jupyter-sandbox-{client.id}"
    with _lock:
        if topic not in _subscribed:
            client.subscribe_topic(topic, _route)
            _subscribed.add(topic)
    return topic


def _route(event: tuple[float, list[Any]]) -> None:
    """On the client's loop: hand a worker's message to its run (the kernel thread emits)."""
    _, (run_id, *message) = event
    with _lock:
        target = _routes.get(run_id)
    if target is not None:
        target.put(message)


def runner(
    cluster: str | Client, spec: ImageSpec, image: str | None, run: SandboxRun
) -> Callable[..., RawRun]:
    """A stand-in for `run_container` that runs on ``cluster`` (same keywords, client
    ignored); it fills ``run.image``, ``run.build`` and ``run.worker``."""
    return functools.partial(_run_remote, _connect(cluster), spec, image, run)


def restore(portable: tuple[str, str, dict[str, Any]], where: str = "") -> ContainerError:
    """The error a worker sent (`_on_worker.portable`), as its own class when it is ours;
    ``where`` goes before its message (an engine missing on a worker says which worker)."""
    name, message, attributes = portable
    message = where + message
    cls = getattr(_errors, name, ContainerError)
    if not (isinstance(cls, type) and issubclass(cls, ContainerError)):
        cls = ContainerError
    err = cls.__new__(cls)
    Exception.__init__(err, message)
    err.record = None
    err.__dict__.update(attributes)
    return err


def _run_remote(
    client: Client,
    spec: ImageSpec,
    prebuilt: str | None,
    run: SandboxRun,
    _docker: object,
    *,
    image: str,
    command: list[str],
    env: Mapping[str, str],
    inputs_dir: Path,
    program_dir: Path,
    outputs_dir: Path | None,
    limits: ContainerSetup,
    on_event: EventCallback,
    scrub: tuple[str, ...] = (),
    cancel: threading.Event | None = None,
    output_names: Collection[str] = (),
    asked: float | None = None,  # `run_container`'s; each worker's own pool counts demand
) -> RawRun:
    job = Job(
        run_id=f"jupyter-sandbox-{uuid.uuid4().hex}",
        topic=_topic(client),
        spec=spec,
        image=prebuilt,
        command=list(command),
        env=dict(env),
        inputs=pack(inputs_dir),
        program=pack(program_dir),
        output_names=tuple(output_names),
        want_outputs=outputs_dir is not None,
        limits=limits,
        scrub=scrub,
    )
    events: queue.Queue[list[Any]] = queue.Queue()
    run.worker = None  # this attempt's worker, once it starts
    with _lock:
        _routes[job.run_id] = events
    try:
        future = client.submit(run_job, job, key=job.run_id, pure=False, retries=0)
        try:
            result, received = _wait(client, future, job, events, on_event, cancel, run)
        except BaseException:  # Ctrl-C, or our own stop: the container goes first
            _stop(client, future, job, started=run.worker is not None)
            raise
        _drain(events, on_event, result.events - received)
    finally:
        with _lock:
            _routes.pop(job.run_id, None)
        _forget(client, job)
    return _outcome(result, run, spec, outputs_dir, output_names, limits)


def _wait(
    client: Client,
    future: Any,
    job: Job,
    events: queue.Queue[list[Any]],
    on_event: EventCallback,
    cancel: threading.Event | None,
    run: SandboxRun,
) -> tuple[JobResult, int]:
    """Emit the run's events until its task ends; (its result, events emitted). The worker
    that starts the run is ``run.worker`` from then on: a death is then told by name."""
    received = 0
    idle_since: float | None = None
    next_check = time.monotonic()
    while not future.done():
        if cancel is not None and cancel.is_set():
            raise SandboxCancelled("the run was cancelled; its container was removed")
        with contextlib.suppress(queue.Empty):
            message = events.get(timeout=_POLL)
            if message[0] == "started":
                run.worker = message[1]
            else:
                received += 1
                on_event(_decode(message))
        if run.worker is None and time.monotonic() >= next_check:
            next_check = time.monotonic() + 2.0
            info = client.scheduler_info(n_workers=1)
            if info["workers"]:
                idle_since = None
            elif idle_since is None:
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since > _NO_WORKERS:
                raise ContainerError(
                    f"no Dask worker joined {info['address']} in {_NO_WORKERS:g} s:"
                    " start workers (`dask worker ADDRESS`), then run again"
                )
    from distributed import KilledWorker

    try:
        return future.result(), received
    except KilledWorker:  # every worker that tried it died (Dask's own re-runs included)
        return JobResult(worker="", events=0, lost=True), received
    except ImportError as exc:
        raise ContainerError(
            f"a Dask worker cannot run sandboxes ({exc}): install jupyter-sandbox, the same"
            " version as here, in the workers' environment"
        ) from None
    except Exception as exc:  # the scheduler went away, the task was cancelled elsewhere...
        text = str(exc).strip().splitlines()
        raise ContainerError(
            f"the Dask task of the run failed: {type(exc).__name__}"
            + (f": {text[0]}" if text else "")
        ) from None


def _drain(events: queue.Queue[list[Any]], on_event: EventCallback, missing: int) -> None:
    """Emit the events still on their way when the result came (bounded: never a hang)."""
    deadline = time.monotonic() + _EVENTS_WAIT
    while missing > 0 and time.monotonic() < deadline:
        with contextlib.suppress(queue.Empty):
            message = events.get(timeout=_POLL)
            if message[0] != "started":
                missing -= 1
                on_event(_decode(message))


def _decode(message: list[Any]) -> Event:
    event: Event = REMOTE_EVENTS[message[0]](*message[1:])
    return event


def _stop(client: Client, future: Any, job: Job, started: bool) -> None:
    """Tell the task to stop, and wait (bounded) until it has removed its container. A task
    that has not started is dropped (and would stop at once if it started meanwhile)."""
    from distributed import Event as Flag

    with contextlib.suppress(Exception):
        Flag(job.stop_name, client=client).set()
        if not started:
            future.cancel()
        deadline = time.monotonic() + _STOP_WAIT
        while not future.done() and time.monotonic() < deadline:
            time.sleep(_POLL)
    with contextlib.suppress(Exception):
        future.cancel()


def _forget(client: Client, job: Job) -> None:
    """Drop the run's names from the scheduler, and the log it keeps of the topic's events
    (up to 100,000 messages of output per kernel otherwise; they reached us already). The log
    lives in the scheduler's internals: a scheduler without them keeps it, nothing breaks."""
    from distributed import Event as Flag

    topic = job.topic
    with contextlib.suppress(Exception):
        Flag(job.started_name, client=client).clear()
        Flag(job.stop_name, client=client).clear()
        client.run_on_scheduler(lambda dask_scheduler: dask_scheduler._broker.truncate(topic))


def _outcome(
    result: JobResult,
    run: SandboxRun,
    spec: ImageSpec,
    outputs_dir: Path | None,
    output_names: Collection[str],
    limits: ContainerSetup,
) -> RawRun:
    """The `RawRun` a local run would have given; the worker's outputs unpacked here."""
    if result.lost:
        # outputs_error: `Sandbox._check` raises it, so the `retries` rule applies
        return RawRun(
            outputs_error=ContainerError(
                f"the Dask worker {run.worker or '(unknown)'} died during the run; its"
                " container is removed by that worker's watchdog"
            )
        )
    run.worker = result.worker
    if result.image:
        run.image = result.image
    run.build = result.build or run.build
    if result.build is not None and result.build.error is not None:
        raise build_error(spec, result.build)
    if result.raw is None:
        where = f"on Dask worker {result.worker}: "
        raise restore(result.error, where) if result.error else ContainerError(where + "no run")
    raw = result.raw
    if result.error is not None:
        raw.outputs_error = restore(result.error)
    elif result.outputs is not None and outputs_dir is not None:
        try:
            extract_outputs(
                iter([result.outputs]),
                outputs_dir,
                output_names,
                limit=parse_size(limits.resources.disk),
                deadline=time.monotonic() + limits.timeout,
            )
        except ContainerError as err:
            raw.outputs_error = err
    return raw
