"""Running a `Driver` from the caller's thread: the runner every run uses.

`start` / `wait` run one driver on a thread of its own and keep the caller's thread
interruptible (Ctrl-C stops the run). Taking a stored run up again (`begin`, `resume_run`,
`fork_run`) is the durable subsystem's: `durable._resume`.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import contextvars
import queue
import threading
from collections.abc import Callable

from .._shared import _otel
from .._shared._errors import Interrupted
from ._driver import Driver
from ._result import OrchestrationResult
from ._workers import SPARE_LEVELS, WORKERS

DRIVER_WAIT = 15.0
"""Seconds an interrupted run waits for its driver to cancel its pending async tool calls
(a sandbox tool stops and removes its container). A driver blocked in a sync tool is not
waited for: it is abandoned at once."""


def start(driver: Driver) -> concurrent.futures.Future[OrchestrationResult]:
    """Run the driver on a thread of its own; its outcome lands in ``driver.future`` (unless
    `Driver.stop` settled it first, abandoning the thread).

    The thread is a kept one (`_threads`) when one is idle, else a new one that is kept
    after: starting a thread was a third of a call that runs no tool, and a fresh thread
    beside a busy core waited for one twice as long per tool call as a kept one."""
    future = driver.future
    run = _otel.carried(driver.run)  # a traced run's span current there too (`_otel`)

    def target() -> None:
        with contextlib.suppress(concurrent.futures.InvalidStateError):
            try:
                future.set_result(run())
            except BaseException as exc:
                future.set_exception(exc)

    _threads.run(target)
    return future


class _Threads:
    """Kept threads for runs, each with its own inbox. A run takes an idle thread or starts
    one, never waits for a busy one: a thread abandoned in a sync tool (`Driver.stop`), or
    running a run that waits on a run nested in its tools, holds up no other run. A thread
    rejoins the idle ones when its run is over (up to `KEPT_THREADS`; past that it ends).
    Each run starts in an empty context, as on a new thread: nothing a tool set in a
    context variable reaches the next run."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self._idle: list[queue.SimpleQueue[Callable[[], None]]] = []
        self._lock = threading.Lock()

    def run(self, target: Callable[[], None]) -> None:
        """Run ``target`` on an idle kept thread, else on a new one."""
        with self._lock:
            inbox = self._idle.pop() if self._idle else None
        if inbox is None:
            inbox = queue.SimpleQueue()
            threading.Thread(
                target=self._serve, args=(inbox,), name="jupyter-sandbox-driver", daemon=True
            ).start()
        inbox.put(target)

    def _serve(self, inbox: queue.SimpleQueue[Callable[[], None]]) -> None:
        while True:
            contextvars.Context().run(inbox.get())  # settles its run's future, never raises
            with self._lock:
                if len(self._idle) >= self.keep:
                    return
                self._idle.append(inbox)


KEPT_THREADS = 2 * WORKERS * SPARE_LEVELS
"""Idle threads kept for runs (`_Threads`): as many as runs may hold workers at once, twice
(a thread handing its worker back while the next run starts on another)."""
_threads = _Threads(KEPT_THREADS)


def wait(driver: Driver) -> OrchestrationResult:
    """`start` the driver and wait for its outcome; Ctrl-C stops it (see `orchestrate`), even
    one arriving while the thread starts (its tools may run already)."""
    future = driver.future
    try:
        start(driver)
        return future.result()
    except KeyboardInterrupt:
        # Only the kernel's SIGINT lands here: a tool raising KeyboardInterrupt does so on
        # the driver's thread or the tool loop, where it is that call's failure.
        if not driver.stop():
            # Let the driver cancel what it started (a sandbox tool's container is stopped
            # and removed on cancel).
            with contextlib.suppress(Exception):
                future.result(timeout=DRIVER_WAIT)
        # The driver's own account when it has settled (it names an abandoned call); the
        # record says interrupted either way.
        settled = future.exception() if future.done() else None
        if isinstance(settled, Interrupted):
            raise settled from None
        raise driver._fail(Interrupted("interrupted: the interpreter was stopped")) from None
