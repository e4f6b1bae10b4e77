"""`create()` and `Sandbox`: the public face of the Docker engine.

`create` validates everything it can up front (types, names, packages, modes) so mistakes
surface before an image builds. `Sandbox.execute` is the one code path every entry point takes
(``run``, ``run_async``, ``%%sandbox``, a callable defined by ``--name``): build or reuse the
image, stage inputs, run with retries, collect outputs, keep a record. Where the run goes, how
it reaches the network and whether the cache answers it are chosen once, by `_plan.plan`; the
loop (`_execute`, `_attempts`) calls those strategies and never asks which they are.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

from .._shared import _defaults as default
from .._shared._checks import bounded, check_timeout
from .._shared._errors import (
    ContainerError,
    DockerUnavailable,
    NonZeroExit,
    OutOfMemory,
    OutputLimitExceeded,
    SandboxCancelled,
    SandboxConfigError,
    SandboxTimeout,
    UnusableImage,
)
from .._shared._events import EventCallback, RunFinished, RunStarted, ignore
from .._shared._secrets import hide_values, mask_error
from .._shared._text import unindented
from .._shared._threads import in_thread
from . import _displays, _pool
from ._allowlist import Destination, allow_list
from ._client import client, engine_error_message, is_engine_error
from ._container import RawRun
from ._hostcfg import UNTRUSTED, read_ca_bundle, untrusted_advice
from ._image import default_base_image
from ._inject import Injection, Secret, injection, placeholders, split
from ._inject import trust as _inject_trust
from ._io import CA_FILE, collect_outputs, output_entries, program_command
from ._isolation import Isolation, isolation_level
from ._otel import traced
from ._plan import Attempt, Plan, container_setup, plan, refuse
from ._pool import ContainerSetup
from ._record import SandboxRun
from ._scripts import WRAPPER
from ._spec import (
    CA_VARS,
    CacheMode,
    ImageSpec,
    Mode,
    Network,
    Resources,
    check_image,
    check_names,
    normalise_types,
    parse_size,
)
from ._staging import Staged, bind, check, stage
from ._warm import START_ENV

if TYPE_CHECKING:
    from distributed import Client

DEFAULT_TIMEOUT = default.SANDBOX_TIMEOUT
"""Seconds a run may take when ``timeout`` is None: every run has a wall-clock limit."""
DEFAULT_NAME = "sandbox"
"""A sandbox's name when ``create()`` is given none: Flyte's fallback."""
RETRIES_CEILING = 100
"""Re-runs one run may ask for: past that, retrying is a loop, not a remedy."""
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_STDERR_TAIL = 20


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class Sandbox:
    """A defined sandbox: call `run` (or `execute` for the full `SandboxRun`) once per input set.

    Made by `create`, which checked every field: frozen, so a definition that passed the
    checks stays the one that runs (a ``--name`` callable, a tool's stub and a cache key all
    describe it). Two definitions are two sandboxes even when alike (``eq=False``)."""

    name: str
    mode: Mode
    code: str | None
    command: list[str]
    """The program and its arguments (``code`` runs through the mode's runner)."""
    inputs: dict[str, str | None]
    """Name -> type tag (None: inferred from the value at each run)."""
    outputs: dict[str, str | None]
    image_spec: ImageSpec
    image: str | None
    """A prebuilt image run as is; None builds ``image_spec``."""
    resources: Resources
    retries: int
    timeout: float
    env_vars: dict[str, str]
    secrets: tuple[str, ...]
    """Names of host environment variables passed in at run time (values never stored)."""
    cache: CacheMode
    network: Network | tuple[Destination, ...]
    """``none``, ``bridge``, or the destinations of an allow-list (`_egress`)."""
    isolation: Isolation = "container"
    """The runtime the container runs under (`_isolation`): runc, or gVisor's runsc."""
    cluster: str | Client | None = None
    """Where runs go: a Dask cluster (`_cluster`), or None for the local engine."""
    injected: tuple[Secret, ...] = ()
    """Secrets the allow-list's proxy adds to requests to their hosts (`_inject`): the
    container holds a placeholder under each one's name, never the value."""
    ca_bundle: Path | None = None
    """A PEM file of the CAs the code's HTTPS trusts (and a build's, beside the host's): read
    at each run, so a bundle the host renews is the one used."""

    def __repr__(self) -> str:
        ins = ", ".join(self.inputs)
        outs = ", ".join(self.outputs)
        return f"<Sandbox {self.name!r} ({ins}) -> ({outs}), {self.mode} mode>"

    def __call__(self, **inputs: Any) -> Any:
        return self.run(**inputs)

    def run(self, **inputs: Any) -> Any:
        """Run once: None, the single output, or a tuple of outputs in declaration order."""
        return self.execute(inputs).value

    async def run_async(self, **inputs: Any) -> Any:
        return (await self.execute_async(inputs)).value

    async def execute_async(
        self, inputs: Mapping[str, Any], *, on_event: EventCallback | None = None
    ) -> SandboxRun:
        """`execute` on a worker thread. Cancelling the awaiting task stops the container (and
        waits until it is removed) before `asyncio.CancelledError` propagates."""
        import asyncio  # only async callers pay for the import

        cancel = threading.Event()
        work = asyncio.ensure_future(
            in_thread(self.execute, inputs, on_event=on_event, cancel=cancel)
        )
        try:
            return await asyncio.shield(work)
        except asyncio.CancelledError:
            cancel.set()
            with contextlib.suppress(Exception):
                await work
            raise

    def execute(
        self,
        inputs: Mapping[str, Any],
        *,
        on_event: EventCallback | None = None,
        cancel: threading.Event | None = None,
    ) -> SandboxRun:
        """Run once and return the full record. A `ContainerError` carries ``.record``.

        Setting ``cancel`` (from another thread) stops a running container: `SandboxCancelled`;
        so does Ctrl-C (``KeyboardInterrupt``), and its record's status is ``interrupted``.
        """
        start = time.monotonic()  # when the run was asked for: `_pool.acquire`
        tags = bind(self.name, self.inputs, inputs)
        env = self._environment()  # read once: the values run are the values masked
        injection = self._injection()
        trust = self._trust()
        run = SandboxRun(
            name=self.name,
            image=self.image or self.image_spec.base,
            inputs=dict(inputs),
            input_types=dict(tags),
            output_types=dict(self.outputs),
            secrets=tuple(env[name] for name in self.secrets if env[name])
            + (injection.values() if injection is not None else ()),
        )
        try:
            try:
                with traced(run, on_event or ignore) as emit:  # its spans, if on (`_otel`)
                    chosen = plan(self, injection=injection)  # the backend, network and cache, once
                    with chosen.backend.hold():
                        self._execute(chosen, run, tags, env, emit, cancel, start, trust)
            except ContainerError:
                raise
            except KeyboardInterrupt:
                # Ctrl-C: `run_container` has removed the container on its way out, and the
                # engine stops a build whose stream is dropped. One line and a record, not a
                # traceback through our files.
                run.interrupted = True
                raise SandboxCancelled(self._interrupted(run)) from None
            except Exception as exc:
                if not is_engine_error(exc):
                    raise
                # the engine failed us mid-way: still ours to report, with the record
                raise ContainerError(engine_error_message(exc)) from exc
        except DockerUnavailable:
            raise  # nothing ran: the one-line message is the whole story
        except ContainerError as err:
            mask_error(err, run.secrets)
            run.seal()
            run.error = str(err)
            run.duration = time.monotonic() - start
            err.record = run.to_record()
            raise
        run.seal()
        run.duration = time.monotonic() - start
        return run

    def _interrupted(self, run: SandboxRun) -> str:
        """Where Ctrl-C stopped the run, in the words the cell shows."""
        if run.attempts:
            return "interrupted: container stopped and removed"
        if self.image is None and self.image_spec.needs_build and run.build is None:
            return "interrupted: image build stopped; the code did not run"
        return "interrupted before the code ran"

    def check(self, inputs: Mapping[str, Any]) -> None:
        """Raise `SandboxConfigError` for inputs or secrets a run would refuse, without Docker:
        lets a caller report bad input before it shows any progress."""
        check(bind(self.name, self.inputs, inputs), inputs)
        self._environment()
        self._injection()
        self._trust()

    def _trust(self) -> bytes | None:
        """The certificates of `ca_bundle`, read now (None: none given)."""
        return None if self.ca_bundle is None else read_ca_bundle(self.ca_bundle)

    def _execute(
        self,
        chosen: Plan,
        run: SandboxRun,
        tags: dict[str, str],
        env: dict[str, str],
        emit: EventCallback,
        cancel: threading.Event | None,
        asked: float,
        trust: bytes | None = None,
    ) -> None:
        """Ready the image, stage the inputs, answer from the cache or run the attempts."""
        image = chosen.backend.prepare(run, emit)
        if self.injected:  # its proxy's CA too, beside the bundle it trusts (`_inject`)
            trust = _inject_trust(client(), trust, emit)
        with _pool.scratch() as work:
            staged = stage(
                work,
                tags,
                run.inputs,
                mode=self.mode,
                code=self.code,
                outputs=self.outputs,
                ca_bundle=trust,
                fingerprint=chosen.cache.fingerprints,
            )
            secrets = {name: env[name] for name in self.secrets}
            program = self._fingerprint(tags, chosen.network.fingerprint)
            key = chosen.cache.key(image, program, staged, secrets)
            if chosen.cache.replay(run, key, emit):
                return
            self._attempts(chosen, run, staged, work, env, emit, cancel, asked, key)

    def _attempts(
        self,
        chosen: Plan,
        run: SandboxRun,
        staged: Staged,
        work: Path,
        env: dict[str, str],
        emit: EventCallback,
        cancel: threading.Event | None,
        asked: float,
        key: str | None,
    ) -> None:
        """Run the container until an attempt succeeds or the retries are spent; keep the
        result in the cache (``key``) unless it holds a secret."""
        route = chosen.backend.join(emit)
        env = {**env, **route.environment}
        # auto-IO: the cell's displays come back with the outputs, declared or not
        displays = self.mode == "auto" and _displays.possible(self.code or "")
        for attempt in range(1, self.retries + 2):
            began = time.time()
            run.attempts = attempt
            emit(RunStarted(self.name, run.image, attempt, run.described_inputs()))
            archive = work / f"outputs-{attempt}" if self.outputs or displays else None
            raw = chosen.backend.run(
                run,
                Attempt(
                    image=run.image,
                    command=self.command,
                    env=env,
                    inputs_dir=staged.inputs,
                    program_dir=staged.program,
                    outputs_dir=archive,
                    output_names=output_entries(self.mode, self.outputs),
                    limits=self._limits(route.network),
                    on_event=emit,
                    scrub=run.secrets,
                    cancel=cancel,
                    asked=asked,
                ),
            )
            run.stdout, run.stderr, run.exit_code = raw.stdout, raw.stderr, raw.exit_code
            sent = route.requests(began, time.time(), raw.address, run.secrets)
            run.log_requests(sent)  # what the attempt sent out, from its proxy's log
            try:
                refused, lost = partial(route.refused, sent), partial(route.lost, began)
                self._check(raw, run.image, refused, lost)
                run.outputs = collect_outputs(archive, self.outputs, memory=self.resources.memory)
                run.displays = _displays.collect(
                    archive, limit=parse_size(self.resources.output), secrets=run.secrets
                )
            except ContainerError as err:
                mask_error(err, run.secrets)
                emit(RunFinished(self.name, raw.exit_code, raw.seconds, error=str(err)))
                if attempt > self.retries or isinstance(err, UnusableImage):
                    raise
                continue
            shown = hide_values(run.outputs, run.secrets)
            emit(RunFinished(self.name, raw.exit_code, raw.seconds, outputs=shown))
            chosen.cache.keep(run, key)
            return

    def _limits(self, network: str | None = None) -> ContainerSetup:
        """What each container of a run is started with (a spare's key, with the image) on
        the engine ``network`` (an allow-list's proxy network), by default its own."""
        name = network or self.network
        assert isinstance(name, str)
        return container_setup(self, name)

    def _environment(self) -> dict[str, str]:
        """Only what was asked for: env_vars, and secrets read from the host right now, after
        what every run starts with (`START_ENV`: a spare's interpreter starts with it)."""
        env = {**START_ENV, **self.env_vars}
        if self.ca_bundle is not None or self.injected:  # staged beside the program
            env.update(dict.fromkeys((*CA_VARS, "NODE_EXTRA_CA_CERTS"), CA_FILE))
        for secret in self.secrets:
            if secret not in os.environ:
                raise SandboxConfigError(f"secret {secret!r} is not set in the host environment")
            if not _passable(os.environ[secret]):  # named, never shown
                raise SandboxConfigError(
                    f"secret {secret!r}: its value must be UTF-8 text of at most 128 KiB"
                    " (what Linux and the engine can pass to a program)"
                )
            env[secret] = os.environ[secret]
        return {**env, **placeholders(self.injected)}

    def _injection(self) -> Injection | None:
        """The proxy's rules for `injected`, their values read from the host now."""
        return injection(self.injected, os.environ) if self.injected else None

    def _fingerprint(self, tags: dict[str, str], network: str) -> dict[str, Any]:
        """What, besides the image and the input files, decides the outputs (secret names only:
        their values enter the cache key through an HMAC, never in clear)."""
        return {
            "mode": self.mode,
            "code": self.code,
            "command": self.command,
            "inputs": tags,
            "outputs": self.outputs,
            "env": self.env_vars,
            "secrets": list(self.secrets),
            "network": network,
        }

    def _check(
        self,
        raw: RawRun,
        image: str,
        refused: Callable[[], list[str]] | None = None,
        lost: Callable[[], bool] | None = None,
    ) -> None:
        """Raise the run's error, if any; ``refused`` lists what an allow-list's proxy
        refused during it (asked only for a failed run: it reads the proxy's log), ``lost``
        says whether that proxy stopped serving meanwhile (its requests failed for that)."""
        cannot = _cannot_start(raw)
        if cannot is not None:
            program, reason = cannot
            if self.mode != "command":
                raise UnusableImage(
                    f"image {image} cannot start {program} ({reason}): use an image with "
                    "python3 on its PATH, or command=[...] for a shell script",
                    program=program,
                    parameter="command",
                    hint="command=[...]",
                )
            raise UnusableImage(
                f"image {image} cannot start {program} ({reason}): use an image that has {program}",
                program=program,
            )
        if raw.timed_out:
            raise SandboxTimeout(
                f"timed out after {self.timeout:g} s (raise it with create(timeout=...))",
                parameter="timeout",
                hint="create(timeout=...)",
            )
        if raw.flooded:
            raise OutputLimitExceeded(
                f"output passed the {self.resources.output} cap; the run was stopped"
            )
        if raw.oom_killed:
            raise OutOfMemory(
                f"out of memory: killed at the {self.resources.memory} limit"
                " (raise it with resources=Resources(memory=...))",
                parameter="memory",
                hint="resources=Resources(memory=...)",
            )
        if raw.outputs_error is not None:
            raise raw.outputs_error
        if raw.exit_code != 0:
            tail = "\n".join(raw.stderr.rstrip().splitlines()[-_STDERR_TAIL:])
            last = tail.splitlines()[-1] if tail else "(no stderr)"
            if lost is not None and lost():
                advice, parameter, hint = _LOST_PROXY, "", ""
            else:
                advice, parameter, hint = self._advice(tail, refused() if refused else [])
            raise NonZeroExit(
                f"exited with code {raw.exit_code}: {last}{advice}",
                exit_code=raw.exit_code if raw.exit_code is not None else -1,
                stderr_tail=tail,
                parameter=parameter,
                hint=hint,
                advice=advice.removeprefix("; "),
            )

    def _advice(self, stderr: str, refused: Sequence[str] = ()) -> tuple[str, str, str]:
        """For a failure a parameter fixes, one sentence naming it, the parameter and how the
        sentence spells it (`SandboxError.hint`); empty strings otherwise. ``refused``: what an
        allow-list's proxy refused during the run (parameter ``allow_net``: the magic's
        ``--allow-net``, where ``network`` would read ``--network bridge``)."""
        if refused:
            shown = ", ".join(refused[:3]) + (", ..." if len(refused) > 3 else "")
            hint = "network=[...]"
            return f"; the network allow-list refused {shown}: add it to {hint}", "allow_net", hint
        if self.network == "none" and _OFFLINE.search(stderr):
            hint = "network=['HOST'] (or network='bridge', the whole internet)"
            return f"; the sandbox has no network: allow a host with {hint}", "network", hint
        if UNTRUSTED.search(stderr):
            return untrusted_advice(self.ca_bundle, "the code")
        missing = _NO_MODULE.search(stderr)
        if missing:
            hint = "packages=[...]"
            sentence = f"; install the package that provides {missing.group(1)!r} with {hint}"
            return sentence, "packages", hint
        return "", "", ""


_LOST_PROXY = (
    "; the network allow-list's proxy stopped during the run, so its requests failed:"
    " run it again (a new proxy serves the next run)"
)
_OFFLINE = re.compile(
    r"Temporary failure in name resolution|Name or service not known|Network is unreachable"
    r"|No address associated with hostname|Connection refused|No route to host"
)
_NO_MODULE = re.compile(r"ModuleNotFoundError: No module named '([^'.]+)")

_CANNOT_START = (
    re.compile(r'exec: "([^"\n]+)": ([^:\n]+)'),  # runc (Docker): exec: "python3": not found
    re.compile(r"executable file `([^`\n]+)` (not found[^:\n]*)"),  # crun (Podman)
    # runsc (gVisor): error finding executable "python3" in PATH [...]: no such file or ...
    re.compile(r'error finding executable "([^"\n]+)" in PATH [^\n]*: (no such file or directory)'),
    re.compile(r"failed to load ([^:\n]+): (no such file or directory)"),  # runsc, a path
    # the run's script (`_scripts`) or a spare's waiter (`_warm`), as sh says it
    re.compile(
        rf"^{re.escape(WRAPPER)}: \d+: exec: ([^\n]+): (not found|Permission denied)$", re.MULTILINE
    ),
)


def _cannot_start(raw: RawRun) -> tuple[str, str] | None:
    """(program, why) when the runtime could not start the program at all. The runtime says so
    with exit 126/127 and its own line in the run's output, where otherwise a bare
    "NonZeroExit 126" blamed the code for an image without python3."""
    if raw.exit_code not in (126, 127):
        return None
    for pattern in _CANNOT_START:
        found = pattern.search(raw.stdout[:4096]) or pattern.search(raw.stderr[:4096])
        if found:
            return found.group(1), found.group(2).strip()
    return None


_EXEC_STRING_BYTES = 128 * 1024
"""Bytes Linux accepts in one argument or environment string (``MAX_ARG_STRLEN``)."""


def _check_exec_strings(values: Iterable[str], what: str) -> None:
    """What the kernel's ``execve`` would refuse (a NUL byte, a string over 128 KiB), refused
    here: in the container it failed as a bare "exited with code 126" that blamed the code."""
    for value in values:
        if not _passable(value):
            shown = value[:40] + ("..." if len(value) > 40 else "")
            raise SandboxConfigError(
                f"{what} value {shown!r}: UTF-8 text, no NUL bytes and at most 128 KiB per"
                " string (what Linux and the engine can pass to a program)",
                parameter=what,
            )


def _passable(value: str) -> bool:
    """Whether ``value`` can reach a program's argv or environment: the engine takes UTF-8
    JSON, so a lone surrogate (what ``os.environ`` makes of an undecodable byte) was a raw
    `UnicodeEncodeError` from the client; ``execve`` refuses NUL and strings over 128 KiB."""
    try:
        data = value.encode()
    except UnicodeEncodeError:
        return False
    return b"\x00" not in data and len(data) <= _EXEC_STRING_BYTES


def _names(declared: Mapping[str, Any] | Iterable[str] | None) -> dict[str, Any]:
    if declared is None or isinstance(declared, Mapping):
        return dict(declared or {})
    if isinstance(declared, str):
        raise SandboxConfigError("inputs/outputs: give a dict of name -> type, or a list of names")
    return dict.fromkeys(declared)


def _strings(value: Sequence[str] | None, what: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str) or not all(isinstance(v, str) for v in value):
        raise SandboxConfigError(f"{what} must be a list of strings")
    return list(value)


def _mode(*, code: str | None, command: object, arguments: object, auto_io: bool) -> Mode:
    """The run's mode, from the one of ``code`` and ``command`` given (and ``auto_io``)."""
    if code is not None and command is not None:
        raise SandboxConfigError("code= and command= are mutually exclusive: give one of them")
    if code is None and command is None:
        # Flyte runs the image's ENTRYPOINT here; our runner needs the program it runs
        raise SandboxConfigError("give code= (Python) or command= (a program and its arguments)")
    if code is not None and not isinstance(code, str):
        raise SandboxConfigError(f"code= takes Python as a str, got {type(code).__name__}")
    if arguments is not None and command is None:
        raise SandboxConfigError("arguments= only goes with command=")
    return "command" if command is not None else "auto" if auto_io else "verbatim"


def _declared(
    declared: Mapping[str, Any] | Iterable[str] | None, *, mode: Mode, what: str
) -> dict[str, str | None]:
    """Inputs or outputs as name -> type tag, names usable in ``mode``."""
    types = normalise_types(_names(declared), what)
    check_names(types, mode=mode, what=what)
    return types


def _check_prebuilt(image: str | None, base_image: str | None, *build: object) -> None:
    """``image`` runs as is: nothing may ask to build on it. Both references well-formed."""
    if image is not None and (any(build) or base_image):
        raise SandboxConfigError(
            "image= is prebuilt and never built on: drop packages/system_packages/"
            "additional_commands/base_image, or use base_image= to build on it"
        )
    for what, reference in (("image", image), ("base_image", base_image)):
        if reference is not None:
            check_image(reference, what)


def _check_choice(value: object, choices: Any, what: str) -> None:
    """``value`` one of the ``Literal`` ``choices``."""
    if value not in get_args(choices):
        raise SandboxConfigError(f"{what} must be one of {get_args(choices)}, not {value!r}")


def _network(network: object) -> Network | tuple[Destination, ...]:
    """``"none"``, ``"bridge"``, or the checked destinations of an allow-list."""
    if isinstance(network, str):
        if network not in get_args(Network):
            raise SandboxConfigError(
                f"network must be 'none', 'bridge' or a list of hosts such as [{network!r}],"
                f" not {network!r}",
                parameter="network",
            )
        return network  # type: ignore[return-value]
    return allow_list(network)


def _environment(
    env_vars: Mapping[str, str] | None, secrets: Sequence[str] | None
) -> tuple[dict[str, str], tuple[str, ...]]:
    """``env_vars`` and the secret names, as a container's environment can hold them."""
    env = dict(env_vars or {})
    secret_names = tuple(_strings(secrets, "secrets"))
    for key in (*env, *secret_names):
        if not _ENV_NAME.match(key):
            raise SandboxConfigError(f"bad environment variable name {key!r}")
    if not all(isinstance(v, str) for v in env.values()):
        raise SandboxConfigError("env_vars values must be strings")
    _check_exec_strings(env.values(), "env_vars")
    return env, secret_names


def _run_command(
    mode: Mode, command: Sequence[str] | None, arguments: Sequence[str] | None
) -> list[str]:
    """The program the container runs: ``command`` + ``arguments``, or the mode's runner."""
    run_command = (
        _strings(command, "command") + _strings(arguments, "arguments")
        if command is not None
        else program_command(mode)
    )
    _check_exec_strings(run_command, "command")
    if not run_command:
        raise SandboxConfigError("command= is empty")
    return run_command


def create(
    name: str | None = None,
    *,
    code: str | None = None,
    inputs: Mapping[str, Any] | Iterable[str] | None = None,
    outputs: Mapping[str, Any] | Iterable[str] | None = None,
    command: Sequence[str] | None = None,
    arguments: Sequence[str] | None = None,
    packages: Sequence[str] | None = None,
    system_packages: Sequence[str] | None = None,
    additional_commands: Sequence[str] | None = None,
    resources: Resources | Mapping[str, Any] | None = None,
    image: str | None = None,
    auto_io: bool = True,
    retries: int = default.RETRIES,
    timeout: float | None = None,
    env_vars: Mapping[str, str] | None = None,
    secrets: Sequence[str | Secret] | None = None,
    cache: CacheMode = "disable",
    base_image: str | None = None,
    network: Network | Sequence[str] = default.NETWORK,
    cluster: str | Client | None = None,
    isolation: Isolation | None = None,
    ca_bundle: str | os.PathLike[str] | None = None,
) -> Sandbox:
    """Define a disposable Docker sandbox (parameters as Flyte's ``flyte.sandbox.create``:
    ``name``, default `DEFAULT_NAME`, then keywords only).

    ``code`` indented as a whole (a triple-quoted string inside a function) runs unindented,
    as Flyte runs it; ``code`` and ``command`` are mutually exclusive, and one is needed
    (Flyte would run a prebuilt image's ENTRYPOINT: here ``command=`` names the program).

    Modes: auto-IO (default: inputs are variables, outputs are read from variables),
    verbatim (``auto_io=False``: the script reads ``/var/inputs/<name>`` and writes
    ``/var/outputs/<name>``) and command (``command`` + ``arguments``, any program).
    Extras of ours: ``base_image`` (default ``$JUPYTER_SANDBOX_BASE_IMAGE`` or the local
    base), ``network`` (``"none"``, ``"bridge"``, or an allow-list such as
    ``["pypi.org", "api.example.com:443", "10.0.0.0/8"]``: the code reaches those destinations
    through a filtering proxy and nothing else, `_egress`) and ``cluster`` (a ``distributed.Client``
    or a scheduler address: each run goes to a Dask worker, which uses its own engine).
    ``isolation``: ``"container"`` (the engine's runtime, runc; the default unless
    ``$JUPYTER_SANDBOX_ISOLATION`` says otherwise) or ``"gvisor"`` (the same image under
    gVisor's ``runsc``, which serves the code's system calls itself).
    ``ca_bundle``: a PEM file of CA certificates on the host (behind a TLS-inspecting proxy,
    the host's own bundle holds its CA) that the code's HTTPS trusts instead of the image's:
    each run gets a read-only copy, named by ``SSL_CERT_FILE``, ``REQUESTS_CA_BUNDLE``,
    ``PIP_CERT`` and ``CURL_CA_BUNDLE``; a build's installs trust it beside the host's bundle
    (on a ``cluster``, the worker's build trusts its own host's).
    Raises `SandboxConfigError` (or `InvalidPackageError` for a malformed package) at once.
    """
    if name is None:
        name = DEFAULT_NAME
    if not isinstance(name, str) or not name.strip():
        raise SandboxConfigError("a sandbox's name= must be a non-empty str")
    mode = _mode(code=code, command=command, arguments=arguments, auto_io=auto_io)
    in_types = _declared(inputs, mode=mode, what="input")
    out_types = _declared(outputs, mode=mode, what="output")
    _check_prebuilt(image, base_image, packages, system_packages, additional_commands)
    _check_choice(cache, CacheMode, "cache")
    chosen = _network(network)
    level = isolation_level(isolation)
    refuse(chosen, level, cluster)  # what no backend keeps (`_plan`)
    if cluster is not None:  # Dask's side (`_cluster`): loaded only when a cluster is named
        from ._cluster import check_cluster

        check_cluster(cluster)
    bounded(retries, "retries", low=0, high=RETRIES_CEILING, integer=True)
    if timeout is not None:
        check_timeout(timeout)
    plain, injected = split(secrets, chosen)
    env, secret_names = _environment(env_vars, plain)
    _environment(None, [s.env_name for s in injected])  # a placeholder's name: checked too
    if ca_bundle is not None:
        read_ca_bundle(ca_bundle)  # a bad path fails here, before anything runs
    return Sandbox(
        name=name,
        mode=mode,
        code=None if code is None else unindented(code),
        command=_run_command(mode, command, arguments),
        inputs=in_types,
        outputs=out_types,
        image_spec=ImageSpec.normalise(
            base_image or default_base_image(),
            packages=_strings(packages, "packages"),
            system_packages=_strings(system_packages, "system_packages"),
            commands=_strings(additional_commands, "additional_commands"),
        ),
        image=image,
        resources=Resources.coerce(resources),
        retries=retries,
        timeout=float(timeout) if timeout is not None else DEFAULT_TIMEOUT,
        env_vars=env,
        secrets=secret_names,
        injected=injected,
        cache=cache,
        network=chosen,
        cluster=cluster,
        isolation=level,
        ca_bundle=None if ca_bundle is None else Path(ca_bundle).expanduser(),
    )
