"""Resource limits of one orchestration, validated before anything runs."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .._errors import SandboxConfigError


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
        if not (isinstance(self.timeout, int | float) and 0 < self.timeout < math.inf):
            raise SandboxConfigError(
                f"timeout must be a positive number of seconds, got {self.timeout!r}"
            )
        for name in ("max_memory", "max_calls", "max_result", "max_output"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise SandboxConfigError(f"{name} must be a positive integer, got {value!r}")
