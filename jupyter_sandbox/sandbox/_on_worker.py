"""What a Dask worker runs for one sandbox run: the worker's half of `_cluster`.

The worker shares nothing with the kernel but the job: its own Docker engine (``DOCKER_HOST``
of the worker process), its own temp folders, its own image store. So the job carries the
content-addressed `ImageSpec` (the worker builds or reuses the image itself: no registry), the
staged inputs and program as tar bytes, and comes back with the outputs as tar bytes, which the
kernel unpacks through the same hostile-data checks as a local run.

Three things cross while the job runs, all through the scheduler: events (output, build
progress) as ``log_event`` messages on the run's topic; a distributed ``Event`` the kernel sets
to stop the run (Dask's ``Future.cancel`` does not stop a running task, so a thread here
watches it and stops the container as a local cancel does); and a second ``Event`` that marks
the run as started, so a task the scheduler re-runs after its worker died reports that death
instead of silently running the code a second time (the sandbox's ``retries`` decide that).
"""

from __future__ import annotations

import io
import tarfile
import tempfile
import threading
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from .._shared._errors import ContainerError, SandboxCancelled
from .._shared._events import BuildFinished, BuildLog, BuildStarted, BuildStep, Event, Output
from .._shared._owner import temp_prefix
from ._build import BuildInfo
from ._client import client, engine_error_message, is_engine_error
from ._container import RawRun, run_container
from ._image import ensure_image, image_id
from ._pool import ContainerSetup
from ._spec import ImageSpec

REMOTE_EVENTS = {
    cls.__name__: cls for cls in (Output, BuildStarted, BuildStep, BuildLog, BuildFinished)
}
"""The events a worker sends back, by name: the kernel rebuilds only these."""
_WATCH = 0.5
"""Seconds each wait on the stop ``Event`` lasts (one scheduler round trip each)."""


@dataclass(frozen=True)
class Job:
    """Everything one run needs on a worker (the kernel's filesystem is not there)."""

    run_id: str
    topic: str
    """The kernel's event topic (one per client); each message starts with ``run_id``."""
    spec: ImageSpec
    image: str | None
    """A prebuilt image run as is; None builds ``spec``."""
    command: list[str]
    env: dict[str, str]
    inputs: bytes
    program: bytes
    output_names: tuple[str, ...]
    want_outputs: bool
    limits: ContainerSetup
    scrub: tuple[str, ...]

    @property
    def stop_name(self) -> str:
        return f"{self.run_id}-stop"

    @property
    def started_name(self) -> str:
        return f"{self.run_id}-started"


@dataclass
class JobResult:
    """What comes back: picklable plain data (errors as `portable` triples)."""

    worker: str
    events: int
    """How many events were sent: the kernel waits for that many before it returns."""
    image: str = ""
    build: BuildInfo | None = None
    raw: RawRun | None = None
    outputs: bytes | None = None
    error: tuple[str, str, dict[str, Any]] | None = None
    lost: bool = False
    """A worker started this run earlier and died: this task is the scheduler's re-run."""


def pack(folder: Path) -> bytes:
    """``folder``'s contents as an uncompressed tar (links kept as links)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(folder, arcname=".")
    return buffer.getvalue()


def unpack(data: bytes, dest: Path) -> None:
    """Unpack what `pack` made (the kernel's own staging, so trusted; links stay inside)."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
        tar.extractall(dest, filter="tar")


def portable(err: ContainerError) -> tuple[str, str, dict[str, Any]]:
    """An error as (class name, message, attributes): our errors take keyword-only arguments,
    which pickling cannot replay; `_cluster.restore` rebuilds it."""
    return type(err).__name__, str(err), {k: v for k, v in vars(err).items() if k != "record"}


def encode_event(event: object) -> list[Any]:
    return [type(event).__name__, *(getattr(event, f.name) for f in fields(event))]  # type: ignore[arg-type]


def run_job(job: Job) -> JobResult:
    """The Dask task: run ``job`` on this worker's engine and return its outputs as bytes."""
    from distributed import Event as Flag
    from distributed import get_worker

    worker = get_worker()
    sent = 0

    def emit(event: object) -> None:
        nonlocal sent
        sent += 1
        worker.log_event(job.topic, [job.run_id, *encode_event(event)])

    started = Flag(job.started_name)
    if started.is_set():
        return JobResult(worker.address, sent, lost=True)
    started.set()
    stop = Flag(job.stop_name)
    if stop.is_set():  # stopped while it waited for a thread: nothing to run
        return JobResult(worker.address, sent, error=portable(SandboxCancelled("cancelled")))
    worker.log_event(job.topic, [job.run_id, "started", worker.address])
    cancel = threading.Event()
    done = threading.Event()
    watcher = threading.Thread(target=_watch, args=(stop, cancel, done), daemon=True)
    watcher.start()
    result = JobResult(worker.address, 0)
    try:
        _run(job, result, emit, cancel)
    except ContainerError as err:
        result.error = portable(err)
    except Exception as exc:
        if not is_engine_error(exc):
            raise
        result.error = portable(ContainerError(engine_error_message(exc)))
    finally:
        done.set()  # the watcher ends within one wait; the result need not wait for it
    result.events = sent
    return result


def _watch(stop: Any, cancel: threading.Event, done: threading.Event) -> None:
    """Set ``cancel`` once the kernel sets the run's stop ``Event`` (until the run is done)."""
    while not done.is_set():
        try:
            if stop.wait(timeout=_WATCH):
                cancel.set()
                return
        except TimeoutError:
            continue
        except Exception:  # the scheduler left: nobody can stop the run; its timeout will
            return


def _run(job: Job, result: JobResult, emit: Any, cancel: threading.Event) -> None:
    docker = client()
    if job.image is None:

        def building(event: Event) -> None:
            """A stop during the build ends it: dropping the build's stream stops the engine's
            build, as Ctrl-C does locally."""
            if cancel.is_set():
                raise SandboxCancelled("the image build was stopped")
            emit(event)

        result.image, _, result.build = ensure_image(docker, job.spec, building)
        if result.build is not None and result.build.error is not None:
            return  # the kernel raises the build's error from the record
    else:
        image_id(docker, job.image)
        result.image = job.image
    with tempfile.TemporaryDirectory(prefix=temp_prefix("run")) as tmp:
        work = Path(tmp)
        unpack(job.inputs, work / "inputs")
        unpack(job.program, work / "program")
        archive = work / "outputs" if job.want_outputs else None
        raw = run_container(
            docker,
            image=result.image,
            command=job.command,
            env=job.env,
            inputs_dir=work / "inputs",
            program_dir=work / "program",
            outputs_dir=archive,
            output_names=job.output_names,
            limits=job.limits,
            on_event=emit,
            scrub=job.scrub,
            cancel=cancel,
        )
        if raw.outputs_error is not None:
            result.error = portable(raw.outputs_error)
            raw.outputs_error = None
        if archive is not None and archive.is_dir():
            result.outputs = pack(archive)
        result.raw = raw
