"""Resource limits of one orchestration, validated before anything runs."""

from __future__ import annotations

from dataclasses import dataclass

from .._checks import bounded, check_timeout, machine_megabytes

MAX_CALLS = 10**9
"""Tool calls a cell may be allowed: at ~40 us a call, hours of calls; Monty's own suspension
counter (set to twice the limit) stays far inside 64 bits."""


@dataclass(frozen=True)
class Limits:
    """Per-cell limits. Exceeding one raises `LimitExceeded` naming it; the kernel survives."""

    timeout: float = 30.0
    """Seconds of sandbox compute time (time spent inside tools does not count), and also the
    most the cell may sleep in total."""
    max_memory: int = 256
    """Megabytes of sandbox heap."""
    max_calls: int = 100_000
    """Tool calls per cell."""
    max_result: int = 16
    """Megabytes the cell's value may take once written out (its repr, a display message),
    counting a shared reference each time it appears: ``b = [[s] * 1000] * 1000`` is small
    in the sandbox and a gigabyte on screen. 16 MB is far more than a notebook can show."""
    max_output: int = 8
    """Megabytes of text the cell may print (stdout and stderr together, in characters): the
    run stops when it prints more, instead of streaming without bound into the notebook."""

    def __post_init__(self) -> None:
        """Each limit finite and within what Monty and this machine can honour: ``--timeout
        1e308`` or ``--max-calls 1e19`` would otherwise overflow inside Monty with a raw error."""
        check_timeout(self.timeout)
        ram = machine_megabytes()
        for name in ("max_memory", "max_result", "max_output"):
            bounded(
                getattr(self, name),
                name,
                low=1,
                high=ram,
                integer=True,
                unit="MB",
                why_high="this machine's memory",
            )
        bounded(
            self.max_calls,
            "max_calls",
            low=1,
            high=MAX_CALLS,
            integer=True,
            why_high="Monty counts twice that in 64 bits",
        )
