"""Image builds that report as they go, in whole lines.

The low-level ``api.build(..., decode=True)`` stream is the only way to see a build while it
runs (the high-level ``images.build`` returns at the end). Its chunks are cut wherever the
engine's reads happen to end (``"Resolved "`` then ``"1 package in 283ms\\n"``), so a
`LineSplitter` joins them back into lines before anything is reported. Each ``Step n/m`` line
becomes a `BuildStep` carrying Docker's own ``n/m`` and the step's description (what it does, not
the instruction with our proxy plumbing in it); each line a step prints becomes a `BuildLog`.
Docker's bookkeeping lines (``---> Running in``, ``Removing intermediate container``...) stay in
the full log only.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .._shared._events import BuildFinished, BuildLog, BuildStarted, BuildStep, EventCallback
from .._shared._text import ANSI
from ..records import BuildRecord

if TYPE_CHECKING:
    from docker import DockerClient

_STEP = re.compile(r"^(?:Step (\d+)/(\d+) :|STEP (\d+)/(\d+):) (.*)$")
"""Docker's classic builder writes ``Step 1/5 : FROM x``; Podman's (buildah) ``STEP 1/5: FROM x``.
The classic builder colours a step's stderr; views and logs want plain text."""
_BOOKKEEPING = re.compile(
    r"^(?: ---> |Removing intermediate container |Successfully (?:built|tagged) |--> |COMMIT "
    r"|[0-9a-f]{64}$)"
)
_EXIT_CODE = re.compile(r"returned a non-zero code: (\d+)|while running runtime: exit status (\d+)")
LABEL_STEP = "labelling the image"
"""Description of the ``LABEL`` step `build_image` appends to every Dockerfile."""


class LineSplitter:
    """Joins stream chunks into whole lines: text after the last newline waits for the next
    chunk (or `flush`). A carriage return rewrites its line, as on a terminal, so a progress
    bar redrawn in place yields its last state only. ANSI colours go; blank lines are dropped.
    """

    def __init__(self) -> None:
        self._pending = ""

    def feed(self, text: str) -> list[str]:
        """The lines ``text`` completes, in order."""
        *complete, self._pending = (self._pending + text).split("\n")
        return [line for raw in complete if (line := _clean(raw))]

    def flush(self) -> list[str]:
        """The last line, when the stream ended without a newline."""
        rest, self._pending = _clean(self._pending), ""
        return [rest] if rest else []


def _clean(raw: str) -> str:
    line = ANSI.sub("", raw).rstrip("\r")
    line = line.rsplit("\r", 1)[-1] if "\r" in line else line
    return line.rstrip() if line.strip() else ""


@dataclass
class BuildInfo:
    """What a view or a record needs to know about how an image came to be.

    ``steps`` are the descriptions of the steps the build reached and ``total_steps`` Docker's
    own count (the ``m`` of ``Step n/m``; 0 for an image found in the cache). ``log`` is the
    whole build output in lines; ``error`` is one line, set when the build failed.
    """

    tag: str
    cached: bool
    seconds: float = 0.0
    steps: list[str] = field(default_factory=list)
    total_steps: int = 0
    log: str = ""
    error: str | None = None
    failed_log: str = ""
    """The failing step's part of ``log`` (its ``Step`` line to the engine's error)."""
    failure: str = ""
    """Where and why the build stopped: ``step 4 of 5 (installing x (uv)): <last line> (exit
    code 1)``. ``error`` says it, unless the caller's ``explain`` knew better."""

    def to_record(self) -> BuildRecord:
        return {
            "tag": self.tag,
            "cached": self.cached,
            "seconds": round(self.seconds, 3),
            "steps": list(self.steps),
            "total_steps": self.total_steps,
            "log": self.log,
            "error": self.error,
        }


def image_exists(client: DockerClient, tag: str) -> bool:
    return local_id(client, tag) is not None


def local_id(client: DockerClient, tag: str) -> str | None:
    """The id of the local image ``tag``, None if there is none (nothing is pulled)."""
    from docker.errors import ImageNotFound

    try:
        return str(client.api.inspect_image(tag)["Id"])
    except ImageNotFound:
        return None


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


class _Progress:
    """Turns the build's lines into events, remembering where the current step began and the
    last line it printed (what a failure's one line quotes)."""

    def __init__(
        self, info: BuildInfo, descriptions: Sequence[str], on_event: EventCallback
    ) -> None:
        self.info = info
        self.descriptions = [*descriptions, LABEL_STEP] if descriptions else []
        self.on_event = on_event
        self.lines: list[str] = []
        self.step_start = 0
        self.last_output = ""

    def line(self, line: str) -> None:
        self.lines.append(line)
        step = _STEP.match(line)
        if step:
            numbers = step.group(1, 2) if step.group(1) else step.group(3, 4)
            index, total = int(numbers[0]), int(numbers[1])
            described = index <= len(self.descriptions)
            text = self.descriptions[index - 1] if described else step.group(5)
            self.step_start, self.last_output = len(self.lines) - 1, ""
            self.info.steps.append(text)
            self.info.total_steps = total
            self.on_event(BuildStep(index, total, text))
        elif not _BOOKKEEPING.match(line):
            self.last_output = line.strip()
            self.on_event(BuildLog(line))

    def fail(self, engine_error: str) -> None:
        """Add the engine's error to the log; set ``failure`` and the failing step's log."""
        error_lines = [line for raw in engine_error.splitlines() if (line := _clean(raw))]
        self.lines += error_lines
        code = _EXIT_CODE.search(engine_error)
        failed = (error_lines or ["failed"])[0]
        reason = f"exit code {code.group(1) or code.group(2)}" if code else failed
        last = self.last_output
        where = (
            f"step {len(self.info.steps)} of {self.info.total_steps} ({self.info.steps[-1]})"
            if self.info.steps
            else "the start"
        )
        self.info.failure = f"{where}: {last} ({reason})" if last else f"{where}: {reason}"
        self.info.failed_log = "\n".join(self.lines[self.step_start :])


def build_image(
    client: DockerClient,
    context: Path,
    dockerfile: str,
    *,
    tag: str,
    on_event: EventCallback,
    labels: dict[str, str],
    descriptions: Sequence[str] = (),
    explain: Callable[[BuildInfo], str] | None = None,
    buildargs: dict[str, str] | None = None,
    network_mode: str = "default",
) -> BuildInfo:
    """Build ``dockerfile`` in ``context`` as ``tag``, streaming progress to ``on_event``.

    Labels go in as one ``LABEL`` instruction (the API's ``labels`` adds one step per label),
    so `BuildStarted.total_steps` is exactly the number of ``Step n/m`` lines to come.
    ``descriptions`` name the Dockerfile's instructions in order for the `BuildStep` events
    (without them, a step is named by its instruction).

    A failed build is returned with ``error`` set to one line: ``explain(info)`` when given (the
    caller knows the spec, so it can name a missing package), else ``info.failure``.
    `BuildFinished` carries that same line.
    """
    label_line = "LABEL " + " ".join(f"{k}={json.dumps(v)}" for k, v in sorted(labels.items()))
    on_event(BuildStarted(tag=tag, total_steps=step_count(dockerfile)))
    (context / "Dockerfile").write_text(f"{dockerfile.rstrip()}\n{label_line}\n")
    info = BuildInfo(tag=tag, cached=False)
    progress = _Progress(info, descriptions, on_event)
    splitter = LineSplitter()
    start = time.monotonic()
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
    engine_error = None
    for chunk in stream:
        if "error" in chunk:
            engine_error = str(chunk["error"])
            break
        for line in splitter.feed(str(chunk.get("stream", ""))):
            progress.line(line)
    for line in splitter.flush():
        progress.line(line)
    if engine_error is not None:
        progress.fail(engine_error)
    info.seconds = time.monotonic() - start
    info.log = "\n".join(progress.lines)
    if engine_error is not None:
        info.error = explain(info) if explain is not None else info.failure
    on_event(BuildFinished(tag, cached=False, seconds=info.seconds, error=info.error))
    return info
