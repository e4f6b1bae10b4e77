"""One default instance of a process-wide object, which a test can replace.

The engines share a few objects for the life of the process (the Monty worker pools, the
durable state). Each is one instance of its class held by a `Default`: the engine asks
`Default.get` each time, so a test that `install`s a fresh instance (a fixture in
tests/conftest.py) gets every run on it, with no module global to poke.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Default(Generic[T]):
    """The instance of ``T`` the process uses: made by ``make`` on first `get`."""

    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        self._value: T | None = None
        self._lock = threading.Lock()

    def get(self) -> T:
        """The current instance (made now if none is yet)."""
        value = self._value
        if value is None:
            with self._lock:
                if self._value is None:
                    self._value = self._make()
                value = self._value
        return value

    def install(self, value: T) -> T:
        """Make ``value`` the current instance; returns the one it replaces."""
        previous = self.get()
        with self._lock:
            self._value = value
        return previous
