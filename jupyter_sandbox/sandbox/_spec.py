"""A sandbox's definition, normalised and validated before anything runs.

Normalising is what makes images content-addressed: the image tag is a hash of the base image's
id, the sorted packages, the system packages and the extra commands, so the same environment
never builds twice whatever the order it was written in, and code and inputs (never part of the
image) can change freely without a rebuild.
"""

from __future__ import annotations

import hashlib
import json
import keyword
import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

from .._shared import _defaults as default
from .._shared._checks import bounded, machine_cpus, machine_megabytes
from .._shared._errors import InvalidPackageError, SandboxConfigError
from ._types import type_tag

Mode = Literal["auto", "verbatim", "command"]
CacheMode = Literal["auto", "override", "disable"]
Network = Literal["none", "bridge"]
Installer = Literal["uv", "pip"]

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)
_PIP_REQ = re.compile(
    r"^(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)"
    r"(?P<extras>\[[A-Za-z0-9._,-]+\])?"
    r"(?P<spec>\s*(?:[<>=!~]=?|===)\s*[A-Za-z0-9.*+!_-]+"
    r"(?:\s*,\s*(?:[<>=!~]=?|===)\s*[A-Za-z0-9.*+!_-]+)*)?$"
)
_APT_PKG = re.compile(r"^[a-z0-9][a-z0-9+.-]+(?:=[A-Za-z0-9.+~:-]+)?$")
_RECIPE = 3
"""Version of `ImageSpec.dockerfile`'s output: bump it when the template changes."""
CA_VARS = ("SSL_CERT_FILE", "PIP_CERT", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")
"""What Python's ``ssl``, pip, uv, requests and curl read for the CA bundle to trust."""
_FILE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_MIN_MEMORY_MB = 6
"""The Docker engine's smallest memory limit: below it, container creation fails."""
_PIDS_CEILING = 4_194_304
"""Linux's highest possible ``pid_max``: more processes than that can never exist."""
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_HOST = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_IMAGE_REF = re.compile(
    rf"^(?:{_HOST}(?:\.{_HOST})*(?::[0-9]+)?/)?{_COMPONENT}(?:/{_COMPONENT})*"
    r"(?::\w[\w.-]{0,127})?"  # tag
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$"  # digest
)
"""Docker's image reference grammar (``[host[:port]/]path[:tag][@digest]``; an image id is a
path): checked up front, so ``--image ''`` is our one line, not the engine's 400."""


def parse_size(size: str | int) -> int:
    """Bytes in ``"1g"``, ``"512Mi"``, ``"8Gi"``, ``"100m"`` or an int (binary units)."""
    if isinstance(size, int) and not isinstance(size, bool):
        return size
    if not isinstance(size, str):
        raise SandboxConfigError(f"bad size {size!r}: use e.g. 512m, 1g, 8Gi")
    match = _SIZE.match(size)
    if not match:
        raise SandboxConfigError(f"bad size {size!r}: use e.g. 512m, 1g, 8Gi")
    scale = 1024 ** " kmgt".index(match.group(2).lower() or " ")
    return int(float(match.group(1)) * scale)


@dataclass(frozen=True)
class Resources:
    """Limits of one run. ``cpu`` and ``memory`` as in Flyte's ``Resources``; the rest are ours:
    ``pids`` (fork bombs), ``disk`` (size of each tmpfs: ``/tmp`` and ``/var/outputs``) and
    ``output`` (stdout+stderr kept before the run is stopped)."""

    cpu: float | str = default.CPU
    """CPUs: a number, or Kubernetes-style text as Flyte accepts (``"2"``, ``"500m"``)."""
    memory: str | int = default.MEMORY
    pids: int = default.PIDS
    disk: str | int = default.DISK
    output: str | int = default.OUTPUT

    def __post_init__(self) -> None:
        if isinstance(self.cpu, str):
            text = self.cpu.strip()
            try:
                cpu = float(text[:-1]) / 1000 if text.endswith("m") else float(text)
            except ValueError:
                raise SandboxConfigError(f"bad cpu {self.cpu!r}: use e.g. 2, 0.5 or 500m") from None
            object.__setattr__(self, "cpu", cpu)
        cpus = machine_cpus()
        bounded(self.cpu, "cpu", low=0.01, high=cpus, why_high=f"the host has {cpus} CPUs")
        bounded(self.pids, "pids", low=1, high=_PIDS_CEILING, integer=True)
        ram = machine_megabytes()
        for name, low in (("memory", _MIN_MEMORY_MB), ("disk", 1), ("output", 0)):
            size = getattr(self, name)
            bounded(
                parse_size(size) / 2**20,
                name,
                low=low,
                strict_low=not low,
                high=ram,
                unit="MB",
                why_high="the host's memory",
                given=size,
            )

    @classmethod
    def coerce(cls, value: Resources | Mapping[str, Any] | None) -> Resources:
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, Mapping):
            known = {f.name for f in fields(cls)}
            unknown = set(value) - known
            if unknown:
                raise SandboxConfigError(
                    f"unknown resources {sorted(unknown)}; known: {sorted(known)}"
                )
            return cls(**value)
        raise SandboxConfigError(f"resources must be Resources or a dict, not {value!r}")


def _canonical_requirement(requirement: str) -> str:
    text = requirement.strip()
    match = _PIP_REQ.match(text)
    if not match:
        raise InvalidPackageError(f"invalid pip requirement {text!r}", package=text)
    name = re.sub(r"[-_.]+", "-", match.group("name")).lower()
    return name + (match.group("extras") or "") + re.sub(r"\s+", "", match.group("spec") or "")


def _apt_package(package: str) -> str:
    text = package.strip()
    if not _APT_PKG.match(text):
        raise InvalidPackageError(f"invalid apt package name {text!r}", package=text)
    return text


@dataclass(frozen=True)
class ImageSpec:
    """What goes into an environment image. Build it only when it adds something to the base."""

    base: str
    packages: tuple[str, ...] = ()
    system_packages: tuple[str, ...] = ()
    commands: tuple[str, ...] = ()
    installer: Installer = "uv"

    @classmethod
    def normalise(
        cls,
        base: str,
        *,
        packages: Iterable[str] | None = None,
        system_packages: Iterable[str] | None = None,
        commands: Iterable[str] | None = None,
        installer: Installer = "uv",
    ) -> ImageSpec:
        return cls(
            base=base,
            packages=tuple(sorted({_canonical_requirement(p) for p in packages or ()})),
            system_packages=tuple(sorted({_apt_package(p) for p in system_packages or ()})),
            commands=tuple(c for c in commands or () if c.strip()),
            installer=installer,
        )

    @property
    def needs_build(self) -> bool:
        return bool(self.packages or self.system_packages or self.commands)

    def tag(self, base_id: str) -> str:
        """``jupyter-sandbox/env:<hash>`` of everything that shapes the image."""
        blob = json.dumps(
            {
                "recipe": _RECIPE,
                "base": base_id,
                "packages": self.packages,
                "system": self.system_packages,
                "commands": self.commands,
                "installer": self.installer,
            },
            sort_keys=True,
        )
        return "jupyter-sandbox/env:" + hashlib.sha256(blob.encode()).hexdigest()[:20]

    def build_steps(self, *, with_ca: bool, build_args: Iterable[str]) -> list[tuple[str, str]]:
        """The Dockerfile as ``(instruction, description)`` pairs: one step per concern, so a
        view can show step n of m and say what it does ("installing six (uv)") instead of the
        instruction with our proxy plumbing in it.

        The host CA bundle is trusted through variables exported inside each ``RUN`` and index
        settings are build ``ARG``s: present while a step runs, absent from the image's
        environment and from every run. ``SSL_CERT_FILE`` is what uv reads for a custom bundle
        (``UV_NATIVE_TLS`` is deprecated and made uv print a warning in every build).
        """
        steps = [
            (f"FROM {self.base}", f"starting from {self.base}"),
            ("USER root", "switching to root to install"),
        ]
        trust = ""
        if with_ca:
            ca = "/etc/jupyter-sandbox/host-ca.crt"
            steps.append((f"COPY host-ca.crt {ca}", "trusting the host's CA bundle"))
            trust = "export" + "".join(f" {var}={ca}" for var in CA_VARS) + "; "
        steps += [(f"ARG {name}", f"using the host's {name}") for name in build_args]
        if self.system_packages:
            apt = " ".join(self.system_packages)
            steps.append(
                (
                    f"RUN {trust}apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get"
                    f" install -y -qq --no-install-recommends {apt} && rm -rf /var/lib/apt/lists/*",
                    f"installing {', '.join(self.system_packages)} (apt)",
                )
            )
        if self.packages:
            reqs = " ".join(shlex.quote(p) for p in self.packages)
            pip = f"python3 -m pip install --no-cache-dir {reqs}"
            if self.installer == "uv":
                uv = f'uv pip install --no-cache --python "$(command -v python3)" {reqs}'
                run = f"RUN {trust}if command -v uv >/dev/null; then {uv}; else {pip}; fi"
            else:
                run = f"RUN {trust}{pip}"
            steps.append((run, f"installing {', '.join(self.packages)} ({self.installer})"))
        steps += [(f"RUN {trust}{command}", f"running {command}") for command in self.commands]
        steps.append(("USER 1000:1000", "switching to the sandbox user"))
        return steps

    def dockerfile(self, *, with_ca: bool, build_args: Iterable[str]) -> str:
        """The Dockerfile of `build_steps`."""
        steps = self.build_steps(with_ca=with_ca, build_args=build_args)
        return "\n".join(instruction for instruction, _ in steps) + "\n"


def check_image(reference: object, what: str) -> None:
    """Refuse what cannot name an image, before any engine call (the engine's 400 is a URL)."""
    if not isinstance(reference, str) or len(reference) > 255 or not _IMAGE_REF.match(reference):
        raise SandboxConfigError(
            f"{what} {reference!r} is not an image reference: use e.g. python:3.12-slim"
            " or registry.local:5000/team/env:1.0",
            parameter=what,
        )


def check_names(names: Iterable[str], *, mode: Mode, what: str) -> None:
    """Names become file names (and variables in auto-IO): refuse anything else up front."""
    for name in names:
        if not _FILE_NAME.match(name) or name in (".", ".."):
            raise SandboxConfigError(f"bad {what} name {name!r}: letters, digits, _ . - only")
        if mode == "auto" and (not name.isidentifier() or keyword.iskeyword(name)):
            raise SandboxConfigError(
                f"{what} {name!r} is not a Python variable name (needed in auto-IO mode)"
            )


def normalise_types(declared: Mapping[str, Any] | None, what: str) -> dict[str, str | None]:
    """Name -> tag, keeping declaration order; None means "infer from the value". An
    unsupported type is refused naming the ``what`` (input, output) it was declared for."""
    tags: dict[str, str | None] = {}
    for name, declared_type in (declared or {}).items():
        try:
            tags[name] = None if declared_type is None else type_tag(declared_type)
        except SandboxConfigError as exc:
            raise SandboxConfigError(f"{what} {name!r}: {exc}") from None
    return tags
