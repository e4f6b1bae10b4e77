"""A process that removes a kernel's containers the moment the kernel dies, however it dies.

A kernel removes its containers when it exits cleanly (``_pool``'s atexit handler). A kernel
killed with SIGKILL, by the OOM killer, or by a Jupyter server that stops waiting for it runs no
handler: its spare and running containers would stay until another kernel loads the extension
(the reaper in ``_manage``) or their own ``sleep`` ends (minutes later).

So the first container a process starts also starts this watchdog: a bare Python running
`WAITER`, which imports nothing until it is needed (~8 MB while it waits, where this package's
imports take ~34 MB). Its stdin is the read end of a pipe whose write end only the kernel holds
(a pipe's ends are not inherited by the programs a kernel runs: Python opens them
close-on-exec). The kernel never writes; when it ends by any means the operating system closes
the write end, the watchdog's read returns end-of-file, and `clean_up` removes the containers
labelled with that kernel's identity (`_client.owner_labels`) and the temp folders of dead
kernels (`_manage.reap_folders`); then the watchdog exits. At a clean exit the atexit handler
has removed everything already and the watchdog finds nothing.

The watchdog runs in a session of its own, so neither a terminal's Ctrl-C nor a server
signalling the kernel's process group reaches it, and it holds no descriptor of the kernel but
that pipe (its stdout and stderr are ``/dev/null``): a server waiting for the kernel's output to
close is never kept waiting by it. A process forked from the kernel without ``exec`` shares the
write end, so the watchdog then waits for that process too.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from . import _egress
from ._client import KIND, OWNER_HOST, OWNER_PID, OWNER_START, owner_labels

SWEEP_AGAIN = 2.0
"""Seconds after the first sweep before a second one: a create the kernel sent just before it
died may complete in the engine after the first sweep listed the containers."""

_lock = threading.Lock()
_started_by: int | None = None
"""The pid that started the running watchdog (a forked child starts its own)."""
_held: list[object] = []
"""The watchdog's `Popen` and the pipe's write end: kept open for the life of the process."""


WAITER = f"""import os, sys
while os.read(0, 4096):
    pass
from {__name__} import clean_up
clean_up(*sys.argv[1:])
"""
"""The watchdog's program: wait for end-of-file on stdin, then import and clean up."""


def command(labels: dict[str, str]) -> list[str]:
    """The watchdog's command line for the owner ``labels`` name (`_client.owner_labels`).
    ``-P``: the kernel's working folder is not put on the watchdog's ``sys.path``, where a
    notebook's own ``docker.py`` would shadow the SDK."""
    owner = (labels[OWNER_PID], labels[OWNER_START], labels[OWNER_HOST])
    return [sys.executable, "-P", "-c", WAITER, *owner]


def _environment() -> dict[str, str]:
    """The kernel's environment (``DOCKER_HOST``, ``TMPDIR``), with this package's folder first
    on ``PYTHONPATH``: a kernel that found us through its own ``sys.path`` edits still has a
    watchdog that imports."""
    root = str(Path(__file__).resolve().parents[2])
    paths = [root, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


def ensure_started() -> None:
    """Start this process' watchdog unless it runs already. Never raises: without a watchdog
    the reaper at the next load and each container's own ``sleep`` still remove containers."""
    global _started_by
    with _lock:
        if _started_by == os.getpid():
            return
        _started_by = os.getpid()
        read, write = os.pipe()
        try:
            process = subprocess.Popen(
                command(owner_labels()),
                stdin=read,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                close_fds=True,
                start_new_session=True,
                env=_environment(),
            )
        except OSError:
            os.close(write)
            return
        finally:
            os.close(read)
        _held[:] = [process, write]


def sweep(pid: str, token: str, host: str) -> list[str]:
    """Remove every container labelled as the owner's, on each engine that answers (the
    kernel may have used Docker and Podman both: `_engine`); their ids."""
    from ._client import connect_all

    engines = connect_all()  # first: it imports the SDK safely
    from docker.errors import APIError

    labels = [f"{KIND}=run", f"{OWNER_PID}={pid}", f"{OWNER_START}={token}", f"{OWNER_HOST}={host}"]
    removed = []
    for engine in engines:
        for row in engine.api.containers(all=True, filters={"label": labels}):
            try:
                engine.api.remove_container(row["Id"], force=True)
            except APIError as exc:  # gone already, or its removal is under way
                if exc.status_code not in (404, 409):
                    raise
            removed.append(str(row["Id"]))
        owner = {OWNER_PID: pid, OWNER_START: token, OWNER_HOST: host}
        removed += _egress.remove_owned(engine, owner)  # allow-lists' proxies and networks
    return removed


def clean_up(pid: str, token: str, host: str) -> None:
    """The kernel has gone: remove its containers, and dead kernels' temp folders."""
    from ._manage import reap_folders

    with contextlib.suppress(Exception):  # nobody to tell: stderr is /dev/null
        sweep(pid, token, host)
        time.sleep(SWEEP_AGAIN)
        sweep(pid, token, host)
    with contextlib.suppress(OSError):
        reap_folders()
