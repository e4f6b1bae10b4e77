"""Rate-limiting widget updates: every event marks the view dirty, a timer renders it.

A 100k-call orchestration produces 200k events; sending a comm message for each would make the
UI, not the tools, the bottleneck. Views keep plain-Python state (cheap to update from any
thread) and a `Throttle` renders it at most once per interval, always including the last change.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

UPDATE_INTERVAL = 0.2
"""Seconds between widget renders: smooth to the eye, negligible next to the run."""


class Throttle:
    """Calls ``action`` at most once per ``interval``, trailing edge included."""

    def __init__(self, action: Callable[[], None], interval: float = UPDATE_INTERVAL) -> None:
        self._action = action
        self._interval = interval
        self._lock = threading.Lock()
        self._render_lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._last = 0.0

    def request(self) -> None:
        """Something changed: make sure a render happens soon (cheap when one is pending)."""
        if self._timer is not None:
            return
        with self._lock:
            if self._timer is not None:
                return
            delay = max(0.0, self._last + self._interval - time.monotonic())
            self._timer = threading.Timer(delay, self._fire)
            self._timer.daemon = True
            self._timer.start()

    def flush(self) -> None:
        """Render now and cancel any pending render (the final state must not wait)."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        self._run()

    def _fire(self) -> None:
        with self._lock:
            self._timer = None
        self._run()

    def _run(self) -> None:
        with self._render_lock:
            self._last = time.monotonic()
            self._action()
