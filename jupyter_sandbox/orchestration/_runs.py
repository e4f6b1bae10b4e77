"""Running a `Driver` from the caller's thread: the runner every run uses.

`start` / `wait` run one driver on a thread of its own and keep the caller's thread
interruptible (Ctrl-C stops the run). Taking a stored run up again (`begin`, `resume_run`,
`fork_run`) is the durable subsystem's: `durable._resume`.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import queue
import threading
from collections.abc import Callable

from .. import _otel
from .._errors import Interrupted
from ._driver import Driver
from ._result import OrchestrationResult
from ._runtime import WORKERS

DRIVER_WAIT = 15.0
"""Seconds an interrupted run waits for its driver to cancel its pending async tool calls
(a sandbox tool stops and removes its container). A driver blocked in a sync tool is not
waited for: it is abandoned at once."""


def start(
    driver: Driver, *, pooled: bool = False
) -> concurrent.futures.Future[OrchestrationResult]:
    """Run the driver on its own thread; its outcome lands in ``driver.future`` (unless
    `Driver.stop` settled it first, abandoning the thread).

    ``pooled`` runs it on a kept thread instead (`_plain_threads`), saving a thread's start
    (a third of a call that runs no tool). Only for a run that has no tool: a run abandoned
    in a sync tool leaves its thread to finish that tool, which a kept thread may never do."""
    future = driver.future
    if pooled and driver.tools:
        raise ValueError("only a run without tools may take a kept thread")

    run = _otel.carried(driver.run)  # a traced run's span current there too (`_otel`)
    driver.hand_later = True  # the outcome first, then the worker back to the pool

    def target() -> None:
        try:
            with contextlib.suppress(concurrent.futures.InvalidStateError):
                try:
                    future.set_result(run())
                except BaseException as exc:
                    future.set_exception(exc)
        finally:
            driver.hand_back()

    if pooled:
        _plain_threads().put(target)
    else:
        threading.Thread(target=target, name="jupyter-sandbox-driver", daemon=True).start()
    return future


_kept: list[queue.SimpleQueue[Callable[[], None]]] = []
_kept_lock = threading.Lock()


def _plain_threads() -> queue.SimpleQueue[Callable[[], None]]:
    """The queue the kept threads runs without tools take (`start`) serve, its threads
    started on first use: as many as the cells' worker pool has workers, so they never wait
    on each other before the pool. A bare queue, not an executor: a run hands its thread one
    function and reads its outcome from ``driver.future``, so an executor's own future, lock
    and thread accounting were work each call paid for nothing."""
    kept = _kept
    if kept:
        return kept[0]
    with _kept_lock:
        if not kept:
            served: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
            for number in range(WORKERS):
                threading.Thread(
                    target=_serve,
                    args=(served,),
                    name=f"jupyter-sandbox-plain_{number}",
                    daemon=True,
                ).start()
            kept.append(served)
        return kept[0]


def _serve(served: queue.SimpleQueue[Callable[[], None]]) -> None:
    """A kept thread: run what `start` hands it, one at a time (each target settles its own
    future and never raises)."""
    while True:
        served.get()()


def wait(driver: Driver, *, pooled: bool = False) -> OrchestrationResult:
    """`start` the driver and wait for its outcome; Ctrl-C stops it (see `orchestrate`), even
    one arriving while the thread starts (its tools may run already)."""
    future = driver.future
    try:
        start(driver, pooled=pooled)
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
