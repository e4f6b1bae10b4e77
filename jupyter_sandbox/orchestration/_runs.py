"""Running a `Driver` from the caller's thread: the runner every run uses.

`start` / `wait` run one driver on a thread of its own and keep the caller's thread
interruptible (Ctrl-C stops the run). Taking a stored run up again (`begin`, `resume_run`,
`fork_run`) is the durable subsystem's: `durable._resume`.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import threading

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

    def target() -> None:
        with contextlib.suppress(concurrent.futures.InvalidStateError):
            try:
                future.set_result(run())
            except BaseException as exc:
                future.set_exception(exc)

    if pooled:
        _plain_threads().submit(target)
    else:
        threading.Thread(target=target, name="jupyter-sandbox-driver", daemon=True).start()
    return future


_kept: list[concurrent.futures.ThreadPoolExecutor] = []
_kept_lock = threading.Lock()


def _plain_threads() -> concurrent.futures.ThreadPoolExecutor:
    """The kept threads runs without tools take (`start`), made on first use: as many as the
    cells' worker pool has workers, so they never wait on each other before the pool."""
    with _kept_lock:
        if not _kept:
            _kept.append(
                concurrent.futures.ThreadPoolExecutor(
                    max_workers=WORKERS, thread_name_prefix="jupyter-sandbox-plain"
                )
            )
        return _kept[0]


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
