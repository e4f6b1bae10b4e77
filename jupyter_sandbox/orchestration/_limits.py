"""Resource limits of one orchestration, validated before anything runs."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .._shared import _defaults as default
from .._shared._checks import TIMEOUT_CEILING, bounded, check_timeout, machine_megabytes

CALLS_CEILING = 10**9
"""Tool calls a cell may be allowed: at ~40 us a call, hours of calls; Monty's own suspension
counter (set to twice the limit) stays far inside 64 bits."""

STACK_DEPTH_CEILING = 100_000
"""The deepest ``max_stack_depth`` accepted: far past any orchestration's need (Monty keeps its
frames on the heap: 99,000 nested calls ran in a worker here, bounded by ``max_memory``), and a
bound a typo (``1e12``) cannot pass."""


@dataclass(frozen=True)
class Limits:
    """Limits of one run (a cell's, an ``orchestrate()`` call's). Exceeding one raises
    `LimitExceeded` naming it (``.limit``, ``.parameter``); the kernel survives.

    ``Limits()`` holds the defaults (their values are in `jupyter_sandbox._shared._defaults`, with
    every other default): ``orchestrate``, `CodeModeAgent` and the ``%%orchestrate`` options
    and ``%config`` settings all read theirs from here."""

    timeout: float = default.TIMEOUT
    """Seconds of Monty compute time (time spent inside tools does not count), and also the
    most the code may sleep in total."""
    max_memory: int = default.MAX_MEMORY
    """Megabytes of Monty heap."""
    max_calls: int = default.MAX_CALLS
    """Tool calls per run."""
    max_result: int = default.MAX_RESULT
    """Megabytes the run's value may take once written out (its repr, a display message),
    counting a shared reference each time it appears: ``b = [[s] * 1000] * 1000`` is small
    in Monty and a gigabyte on screen. The default is far more than a notebook can show."""
    max_output: int = default.MAX_OUTPUT
    """Megabytes of text the code may print (stdout and stderr together, in characters): the
    run stops when it prints more, instead of streaming without bound into the notebook."""
    max_stack_depth: int = default.MAX_STACK_DEPTH
    """Function calls nested in the code at once (Monty's own default): runaway recursion
    stops with `LimitExceeded` (``limit="stack"``) instead of using the heap up first. Flyte's
    sandboxed orchestrators default to 256 (`orchestrator` does too)."""
    max_transfer: int = default.MAX_TRANSFER
    """Megabytes of tool arguments the run's calls may copy out of Monty to the host, each
    call's counted (`_keep.crossing_bytes`; a handle crosses as a reference and counts
    nothing): what is kept of them is bounded apart (`_keep.Keep`), this stops a loop that
    copies gigabytes out with one line instead of minutes of copying."""

    def __post_init__(self) -> None:
        """Each limit finite and within what Monty and the host can honour: ``--timeout
        1e308`` or ``--max-calls 1e19`` would otherwise overflow inside Monty with a raw error."""
        check_timeout(self.timeout)
        ram = machine_megabytes()
        for name in ("max_memory", "max_result", "max_output", "max_transfer"):
            bounded(
                getattr(self, name),
                name,
                low=1,
                high=ram,
                integer=True,
                unit="MB",
                why_high="the host's memory",
            )
        bounded(
            self.max_calls,
            "max_calls",
            low=1,
            high=CALLS_CEILING,
            integer=True,
            why_high="Monty counts twice that in 64 bits",
        )
        bounded(
            self.max_stack_depth,
            "max_stack_depth",
            low=1,
            high=STACK_DEPTH_CEILING,
            integer=True,
            why_high="far past any orchestration's need",
        )


def seconds_from_ms(timeout_ms: object) -> float:
    """Flyte's ``timeout_ms`` (``orchestrate_local``, sandboxed orchestrators) as `Limits.timeout`
    seconds, or a `SandboxConfigError` naming ``timeout_ms`` and its bounds."""
    milliseconds = bounded(
        timeout_ms,
        "timeout_ms",
        low=0,
        strict_low=True,
        high=TIMEOUT_CEILING * 1000,
        unit="ms",
        why_high="30 days",
    )
    return milliseconds / 1000


def megabytes_from_bytes(max_memory: object) -> int:
    """Flyte's ``max_memory`` in bytes as `Limits.max_memory` megabytes, rounded up (Monty's
    heap limit is set in whole MB here), or a `SandboxConfigError` naming ``max_memory``."""
    count = bounded(
        max_memory,
        "max_memory",
        low=1,
        high=machine_megabytes() * 2**20,
        integer=True,
        unit="bytes",
        why_high="the host's memory",
    )
    return math.ceil(count / 2**20)
