"""Limits both engines check the same way: numbers that come from options and ``create()``.

``--cpus nan``, ``--timeout inf`` or ``--max-calls 1e19`` used to pass our checks and
fail deep inside Docker, Monty or a timer with a raw traceback. Each limit is checked here once,
as a finite number within bounds the message names, before anything runs.
"""

from __future__ import annotations

import math
import os

from ._errors import SandboxConfigError

TIMEOUT_CEILING = 30 * 86_400
"""Seconds (30 days): the longest timeout either engine accepts. A run nobody waits 30 days
for is a mistake, and far larger values overflow the timers underneath (``threading``, Monty)."""


def machine_cpus() -> int:
    """CPUs this process may use: what a local Docker engine allows a container."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def machine_megabytes() -> int:
    """Physical memory of the host in MB: a memory or size limit above it limits nothing."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
    except (ValueError, OSError, AttributeError):  # no sysconf: no bound worth guessing
        return 2**44  # what a byte count in 64 bits holds, in MB


def bounded(
    value: object,
    what: str,
    *,
    low: float,
    high: float,
    integer: bool = False,
    strict_low: bool = False,
    unit: str = "",
    why_high: str = "",
    given: object = None,
) -> float:
    """``value`` as a finite number with ``low <= value <= high`` (``low < value`` when
    ``strict_low``), or a `SandboxConfigError` naming ``what``, the bounds and the value.

    Booleans are refused (``True`` is an int to Python, never a meant limit); ``integer``
    refuses non-integers. ``given`` is what the message quotes when ``value`` was derived from
    it (bytes from ``"1g"``). Returns the value as it came (an int stays an int).
    """
    kind = "a whole number" if integer else "a number"
    number_types: tuple[type, ...] = (int,) if integer else (int, float)
    ok = isinstance(value, number_types) and not isinstance(value, bool)
    if ok:
        number = float(value)  # type: ignore[arg-type]  # an int or float, checked above
        ok = math.isfinite(number) and (number > low if strict_low else number >= low)
        ok = ok and number <= high
    if not ok:
        suffix = f" {unit}" if unit else ""
        highest = _show(high) + suffix
        if (strict_low and low == 0) or (integer and low == 1):
            span = f"a positive {kind.removeprefix('a ')}, at most {highest}"
        elif strict_low:
            span = f"{kind} above {_show(low)}{suffix}, at most {highest}"
        else:
            span = f"{kind} from {_show(low)}{suffix} to {highest}"
        reason = f" ({why_high})" if why_high else ""
        raise SandboxConfigError(
            f"{what} must be {span}{reason}, got {value if given is None else given!r}",
            parameter=what,
        )
    return value  # type: ignore[return-value]  # an int or float, checked above


def check_timeout(value: object) -> float:
    """A timeout in seconds, as both engines take it: above 0, at most `TIMEOUT_CEILING`."""
    return bounded(
        value, "timeout", low=0, strict_low=True, high=TIMEOUT_CEILING, unit="s", why_high="30 days"
    )


def _show(number: float) -> str:
    """``2592000``, not ``2.592e+06``; ``0.01`` stays ``0.01``."""
    return str(int(number)) if float(number).is_integer() else f"{number:g}"
