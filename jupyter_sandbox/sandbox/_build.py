"""Image builds that report as they go.

The low-level ``api.build(..., decode=True)`` stream is the only way to see a build while it
runs (the high-level ``images.build`` returns at the end); each ``Step n/m`` line becomes a
`BuildStep` so a view can show step n of m, every other line a `BuildLog`.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._events import BuildFinished, BuildLog, BuildStarted, BuildStep, EventCallback

if TYPE_CHECKING:
    from docker import DockerClient

_STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)$")


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


def build_image(
    client: DockerClient,
    context: Path,
    *,
    tag: str,
    total_steps: int,
    on_event: EventCallback,
    labels: dict[str, str] | None = None,
    buildargs: dict[str, str] | None = None,
    network_mode: str = "default",
) -> BuildInfo:
    """Build ``context`` (holding a Dockerfile) as ``tag``, streaming progress to ``on_event``.

    A failed build is returned with ``error`` set to the failing step's log (the caller knows
    the spec, so it decides between `ImageBuildError` and `InvalidPackageError`).
    """
    on_event(BuildStarted(tag=tag, total_steps=total_steps))
    info = BuildInfo(tag=tag, cached=False)
    start = time.monotonic()
    lines: list[str] = []
    step_start = 0
    stream = client.api.build(
        path=str(context),
        tag=tag,
        labels=labels or {},
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
        for line in str(chunk.get("stream", "")).splitlines():
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
