"""Image builds that report as they go.

The low-level ``api.build(..., decode=True)`` stream is the only way to see a build while it
runs (the high-level ``images.build`` returns at the end); each ``Step n/m`` line becomes a
`BuildStep` so a view can show step n of m, every other line a `BuildLog`.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._events import BuildFinished, BuildLog, BuildStarted, BuildStep, EventCallback

if TYPE_CHECKING:
    from docker import DockerClient

_STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)$")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
"""The classic builder colours a step's stderr; views and logs want plain text."""


@dataclass
class BuildInfo:
    """What a view or a record needs to know about how an image came to be."""

    tag: str
    cached: bool
    seconds: float = 0.0
    steps: list[str] = field(default_factory=list)
    log: str = ""
    error: str | None = None

    def to_record(self) -> dict[str, Any]:
        return {
            "tag": self.tag,
            "cached": self.cached,
            "seconds": round(self.seconds, 3),
            "steps": list(self.steps),
            "log": self.log,
            "error": self.error,
        }


def image_exists(client: DockerClient, tag: str) -> bool:
    from docker.errors import ImageNotFound

    try:
        client.images.get(tag)
    except ImageNotFound:
        return False
    return True


def step_count(dockerfile: str) -> int:
    """How many ``Step n/m`` the classic builder will report, our ``LABEL`` step included."""
    return _instructions(dockerfile) + 1


def _instructions(dockerfile: str) -> int:
    count, continued = 0, False
    for line in dockerfile.splitlines():
        if line.strip() and not line.lstrip().startswith("#") and not continued:
            count += 1
        continued = line.rstrip().endswith("\\")
    return count


def build_image(
    client: DockerClient,
    context: Path,
    dockerfile: str,
    *,
    tag: str,
    on_event: EventCallback,
    labels: dict[str, str],
    buildargs: dict[str, str] | None = None,
    network_mode: str = "default",
) -> BuildInfo:
    """Build ``dockerfile`` in ``context`` as ``tag``, streaming progress to ``on_event``.

    Labels go in as one ``LABEL`` instruction (the API's ``labels`` adds one step per label),
    so `BuildStarted.total_steps` is exactly the number of ``Step n/m`` lines to come.

    A failed build is returned with ``error`` set to the failing step's log (the caller knows
    the spec, so it decides between `ImageBuildError` and `InvalidPackageError`).
    """
    label_line = "LABEL " + " ".join(f"{k}={json.dumps(v)}" for k, v in sorted(labels.items()))
    on_event(BuildStarted(tag=tag, total_steps=step_count(dockerfile)))
    (context / "Dockerfile").write_text(f"{dockerfile.rstrip()}\n{label_line}\n")
    info = BuildInfo(tag=tag, cached=False)
    start = time.monotonic()
    lines: list[str] = []
    step_start = 0
    stream = client.api.build(
        path=str(context),
        tag=tag,
        buildargs=buildargs or {},
        decode=True,
        rm=True,
        forcerm=True,
        pull=False,
        network_mode=network_mode,
    )
    for chunk in stream:
        if "error" in chunk:
            info.error = str(chunk["error"]).strip()
            break
        for line in _ANSI.sub("", str(chunk.get("stream", ""))).splitlines():
            if not line.strip():
                continue
            lines.append(line)
            step = _STEP.match(line)
            if step:
                step_start = len(lines) - 1
                info.steps.append(step.group(3))
                on_event(BuildStep(int(step.group(1)), int(step.group(2)), step.group(3)))
            else:
                on_event(BuildLog(line))
    info.seconds = time.monotonic() - start
    info.log = "\n".join(lines)
    if info.error is not None:
        info.error = "\n".join([*lines[step_start:], info.error])
    on_event(BuildFinished(tag, cached=False, seconds=info.seconds, error=info.error))
    return info
