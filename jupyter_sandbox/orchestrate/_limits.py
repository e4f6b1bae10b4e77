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

    def __post_init__(self) -> None:
        if not (isinstance(self.timeout, int | float) and 0 < self.timeout < math.inf):
            raise SandboxConfigError(
                f"timeout must be a positive number of seconds, got {self.timeout!r}"
            )
        for name in ("max_memory", "max_calls"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise SandboxConfigError(f"{name} must be a positive integer, got {value!r}")
