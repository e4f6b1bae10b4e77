"""From an `ImageSpec` to a local image: reuse, pull a prebuilt one, or build with events.

A failed install is mapped back to the package the user asked for, so the error names it
(`InvalidPackageError`) instead of leaving them to read a resolver's log.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from .._shared._errors import ImageBuildError, InvalidPackageError
from .._shared._events import BuildFinished, EventCallback
from .._shared._owner import temp_prefix
from ._baseimage import DEFAULT_BASE_IMAGE
from ._build import BuildInfo, build_image, local_id
from ._client import KIND, LABEL
from ._hostcfg import UNTRUSTED, ca_bundle, index_settings, read_ca_bundle, untrusted_advice
from ._spec import ImageSpec

if TYPE_CHECKING:
    from docker import DockerClient

BASE_IMAGE_ENV = "JUPYTER_SANDBOX_BASE_IMAGE"
"""The environment variable naming the base image when none is given (else `DEFAULT_BASE_IMAGE`)."""
_MISSING_PACKAGE = (
    re.compile(r"Unable to locate package (\S+)"),
    re.compile(r"Package '?([^'\s]+)'? has no installation candidate"),
    re.compile(r"Because (\S+) was not found in the package registry"),
    re.compile(r"there is no version of ([A-Za-z0-9._-]+)"),
    re.compile(r"No matching distribution found for ([A-Za-z0-9._-]+)"),
)


def default_base_image() -> str:
    """``$JUPYTER_SANDBOX_BASE_IMAGE``, else the locally built base."""
    return os.environ.get(BASE_IMAGE_ENV) or DEFAULT_BASE_IMAGE


def image_id(client: DockerClient, name: str) -> str:
    """The id of a local image, pulling it if the engine can; never builds a base."""
    from docker.errors import DockerException, ImageNotFound

    try:
        return str(client.api.inspect_image(name)["Id"])
    except ImageNotFound:
        pass
    try:
        return str(client.images.pull(name).id)
    except DockerException as exc:
        hint = (
            "build it with `python -m jupyter_sandbox base-image`"
            if name == DEFAULT_BASE_IMAGE
            else "build or load it locally (no registry is reachable)"
        )
        raise ImageBuildError(f"image {name} is not available: {hint}", log=str(exc)) from None


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def build_error(spec: ImageSpec, info: BuildInfo, trusted: Path | None = None) -> ImageBuildError:
    """What a failed build raises, in one line: `InvalidPackageError` naming the requested
    package when the installer says it does not exist, else `ImageBuildError` saying where the
    build stopped, and how to pass the network's CA when an install did not trust a server's
    certificate (``trusted``: the sandbox's ``ca_bundle``, if it has one). ``.log`` holds the
    failing step's log (the whole log is in the record)."""
    log = info.failed_log or info.log
    pip = {_canonical(re.split(r"[\[<>=!~ ]", p)[0]): p for p in spec.packages}
    apt = {p.split("=")[0]: p for p in spec.system_packages}
    for pattern in _MISSING_PACKAGE:
        for match in pattern.finditer(log):
            found = match.group(1).strip("'\"")
            if found in apt:
                message = f"system package {apt[found]!r} does not exist in the Debian archive"
                return InvalidPackageError(
                    f"{message}: check its name", package=apt[found], log=log
                )
            if _canonical(found) in pip:
                package = pip[_canonical(found)]
                return InvalidPackageError(
                    f"package {package!r} does not exist on the package index, or no version"
                    " matches: check its name and version",
                    package=package,
                    log=log,
                )
    stopped = f"image build failed at {info.failure or 'its start'}"
    if UNTRUSTED.search(log):
        advice, parameter, hint = untrusted_advice(trusted, "the build")
        return ImageBuildError(
            stopped + advice.replace(";", ":", 1), log=log, parameter=parameter, hint=hint
        )
    return ImageBuildError(stopped, log=log)


class Ensured(NamedTuple):
    """What `ensure_image` found or built."""

    image: str
    """The name to run: the base's, or the environment image's tag."""
    id: str
    """Its id (a run's cache key names it): read on the way, so a run asks the engine no
    more than it must (each question is ~1 ms of a ~20 ms warm run)."""
    build: BuildInfo | None
    """How it came to be; None: the base itself, no build needed."""


def ensure_image(
    client: DockerClient,
    spec: ImageSpec,
    on_event: EventCallback,
    network: Callable[[], tuple[str, dict[str, str]]] | None = None,
    trusted: Path | None = None,
) -> Ensured:
    """The image to run, its id and how it came to be (`Ensured`).

    ``network``, called only when a build runs, gives the network the build's steps join and
    the variables they get (an allow-list's index-only proxy, `_egress.for_build`); without
    it, the engine's default network. ``trusted``: the sandbox's ``ca_bundle``, whose
    certificates are trusted by the build's steps beside the host's bundle (more trust than
    either alone, so a bundle given for the runs never breaks a build that worked).

    A failed build comes back with ``info.error`` set: the caller records it, then raises
    `build_error` (so the error still carries the build log in its record).
    """
    base_id = image_id(client, spec.base)
    if not spec.needs_build:
        return Ensured(spec.base, base_id, None)
    tag = spec.tag(base_id)
    found = local_id(client, tag)
    if found is not None:
        on_event(BuildFinished(tag, cached=True, seconds=0.0))  # no steps to count: none ran
        return Ensured(tag, found, BuildInfo(tag=tag, cached=True))
    host = ca_bundle()
    given = read_ca_bundle(trusted) if trusted is not None else b""
    bundle = (host.read_bytes() if host is not None else b"") + b"\n" + given
    ca = bool(bundle.strip())
    args = index_settings() if spec.packages else {}
    mode, proxy = network() if network is not None else ("default", {})
    dockerfile = spec.dockerfile(with_ca=ca, build_args=args)
    with tempfile.TemporaryDirectory(prefix=temp_prefix("build")) as tmp:
        context = Path(tmp)
        if ca:
            (context / "host-ca.crt").write_bytes(bundle)
        info = build_image(
            client,
            context,
            dockerfile,
            tag=tag,
            on_event=on_event,
            labels=_labels(spec),
            descriptions=[d for _, d in spec.build_steps(with_ca=ca, build_args=args)],
            explain=lambda failed: str(build_error(spec, failed, trusted)),
            buildargs={**args, **proxy},  # the proxy's: predefined, never in the image
            network_mode=mode,
        )
    return Ensured(tag, "" if info.error is not None else image_id(client, tag), info)


def _labels(spec: ImageSpec) -> dict[str, Any]:
    return {
        LABEL: "1",
        KIND: "env",
        f"{LABEL}.base": spec.base,
        f"{LABEL}.packages": " ".join(spec.packages),
        f"{LABEL}.system-packages": " ".join(spec.system_packages),
    }
