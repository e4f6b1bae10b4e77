"""OS-level confinement of the Monty workers: defence in depth under the language-level sandbox.

Monty's interpreter has no file, network or process access to begin with; this makes a bug in
it worth less, and keeps one escaped worker away from every other worker (another cell's inputs
sit in their memory). When the host allows it, each worker starts through a small launcher that
gives it

- its own PID namespace with a fresh ``/proc`` in its own mount namespace: it is PID 1 and sees,
  signals and traces no other process, because it cannot name one;
- on root hosts, a uid and gid of its own, ``UID_BASE`` + the launcher's PID (no two live
  workers share one; the level is skipped if an account file names one), no capabilities and
  ``no_new_privs``: even a process that learnt another worker's PID could not signal, trace
  or read it;
- its own session and process group, so ``kill(0, ...)`` reaches nothing but itself and no
  terminal is its own;
- its own network, IPC and UTS namespaces (no interfaces but a down loopback, no shared SysV
  IPC or abstract sockets).

The launcher ``unshare --fork`` stays the worker's parent outside the namespace, and it is the
process the pool knows (``worker_pid``): killing it (interrupts, the pool's timeouts) kills the
worker through its parent-death signal, which ``setpriv`` sets again after the uid change that
clears it. That death takes two hops, so `kill_worker` waits for the first one.

The strongest level that actually starts a worker here is chosen once per process, by trying
it: a launcher that cannot work on the host (not root, no user namespaces, a container that
forbids mounting ``/proc``, a venv the worker's uid cannot read) falls back to the next, never to
an error. ``Confinement.level`` records which one is in force.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import select
import shlex
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic_monty._binary import find_monty_binary

from .._shared._accounts import account_lines
from .._shared._owner import temp_prefix

UID_BASE = 2_000_000_000
"""Root hosts run each worker as ``UID_BASE + pid``: far above the uids of ``/etc/passwd`` and the
usual subordinate-uid ranges, and PIDs stay below 2**22, so the range ends below 2**31."""

WORKER_IDS = range(UID_BASE, UID_BASE + 2**22)
"""Every uid (and gid) a worker can get: one per possible PID."""

ACCOUNT_FILES = ("/etc/passwd", "/etc/group", "/etc/subuid", "/etc/subgid")

_UID = '"$uid"'
"""The launcher's shell variable holding the worker's uid: a word of the prefix that goes into
the script as it is, where every other word is quoted."""


@dataclass(frozen=True)
class Confinement:
    level: str
    """``own-uid+pidns+netns`` (root hosts), ``userns+pidns+netns``, ``userns+netns``,
    ``no-new-privs`` or ``none``; only the first two keep workers from seeing each other."""
    binary: str
    """What the pool starts: the launcher script, or the plain ``monty`` binary."""
    prefix: tuple[str, ...]
    """The launcher's command before the program it confines (empty at level ``none``); with
    `launcher_script` it confines any program exactly as the workers are confined."""


def _levels(account_files: Sequence[str] = ACCOUNT_FILES) -> list[tuple[str, list[str]]]:
    unshare, setsid, setpriv = (shutil.which(name) for name in ("unshare", "setsid", "setpriv"))
    if not (setsid and setpriv):
        return []
    # The worker is PID 1 of its namespace; its parent (``unshare``) is what the pool kills,
    # and the worker dies with it. (Only there: elsewhere the parent is the kernel's thread
    # that started the worker, and a parent-death signal would fire when that thread ends.)
    pidns = ["--pid", "--kill-child=SIGKILL", "--mount-proc"]
    with_parent = ["--pdeathsig=SIGKILL"]
    # A session of its own: the worker would otherwise share the kernel's process group, and
    # ``kill(0, sig)`` reaches every process of the group its uid may signal (at the userns
    # levels that is the kernel itself), and its terminal, if it has one.
    alone = [setsid, "--", setpriv]
    nnp = ["--no-new-privs", "--"]
    # ``unshare --fork`` ignores SIGTERM while it waits for the worker; in the kernel's process
    # group it would make ipykernel's shutdown wait seconds for it, until jupyter_client
    # SIGTERMs the kernel and our exit handlers never run. Its own session keeps it out.
    # (The launcher is no group leader, so ``setsid`` execs in place: the PID stays the pool's.)
    outside = [setsid, "--"]
    levels: list[tuple[str, list[str]]] = []
    if unshare and os.geteuid() == 0 and not ids_taken(account_files):
        namespaces = [*outside, unshare, *pidns, "--net", "--ipc", "--uts", "--"]
        drop = [
            "--reuid", _UID, "--regid", _UID, "--clear-groups",
            "--inh-caps=-all", "--bounding-set=-all",
        ]  # fmt: skip
        levels.append(("own-uid+pidns+netns", [*namespaces, *alone, *drop, *with_parent, *nnp]))
    if unshare:
        userns = [unshare, "--user", "--net", "--ipc", "--uts"]
        pid_level = [*outside, *userns, *pidns, "--", *alone, *with_parent, *nnp]
        levels.append(("userns+pidns+netns", pid_level))
        levels.append(("userns+netns", [*userns, "--", *alone, *nnp]))
    levels.append(("no-new-privs", [*alone, *nnp]))
    return levels


def ids_taken(files: Sequence[str]) -> list[str]:
    """Lines of these account files (passwd, group, subuid/subgid) that name an id in
    `WORKER_IDS`. A worker with such an id would act as that user or group, or as the
    processes of someone's rootless containers, so the own-uid level is used only when there
    is none. (Accounts from other name services, such as LDAP, are not seen.)"""
    return [
        f"{path}: {line}"
        for path, line, ranges in account_lines(files)
        if any(ids.start < WORKER_IDS.stop and WORKER_IDS.start < ids.stop for ids in ranges)
    ]


def launcher_script(prefix: Sequence[str], program: str) -> str:
    """A ``/bin/sh`` script that runs ``program`` with its arguments under ``prefix``.

    The uid comes from the script's own PID, which is also the PID the pool reports for the
    worker (``exec`` keeps it): unique among live workers without any shared state to allocate
    from, and recognisable from outside.
    """
    words = " ".join(w if w == _UID else shlex.quote(w) for w in [*prefix, program])
    return f'#!/bin/sh\nuid=$(({UID_BASE} + $$))\nexec {words} "$@"\n'


def launcher_works(launcher: str) -> bool:
    try:
        done = subprocess.run(
            [launcher, "-c", "print(1 + 1)"], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and done.stdout.strip() == "2"


def choose() -> Confinement:
    """The strongest confinement that starts a worker on the host."""
    monty = find_monty_binary()
    folder = tempfile.mkdtemp(prefix=temp_prefix("monty"))
    atexit.register(shutil.rmtree, folder, True)
    for level, prefix in _levels():
        launcher = os.path.join(folder, f"monty-{level.replace('+', '-')}")
        with open(launcher, "w") as script:
            script.write(launcher_script(prefix, monty))
        os.chmod(launcher, 0o700)
        if launcher_works(launcher):
            return Confinement(level, launcher, tuple(prefix))
    return Confinement("none", monty, ())


def stop_inheritance() -> None:
    """Mark every descriptor of this process above stderr as not inherited by children.

    The pool starts workers without closing descriptors, so a worker would get every one this
    process holds as inheritable: Python opens none so, but a kernel inherits some from
    whatever started it (here the job runner's pipes), and ``os.dup2`` makes them. Python's own
    ``subprocess`` closes them anyway, so only the pool (and ``os.system``-like calls) change.
    Descriptors made inheritable later still reach workers started later."""
    for name in os.listdir("/dev/fd"):
        if int(name) > 2:
            with contextlib.suppress(OSError):  # the listing's own descriptor, closed by now
                os.set_inheritable(int(name), False)


def kill_worker(pid: int) -> None:
    """SIGKILL the worker the pool knows as ``pid`` and return once that process has exited.

    The pool reuses a worker whose process still runs; a session handed back right after a
    bare ``kill`` could give the next cell a worker that dies under it. Behind a launcher the
    window is wide: the ``monty`` process answered a request after its launcher was killed in
    most of 300 tries here. Once the launcher has exited, the pool sees it dead and starts a
    new worker, and the ``monty`` below already has its SIGKILL.

    Workers are this process's children: a ``pid`` that names anything else is a worker that
    died and was reaped and a number the system gave to another process since, and is left
    alone. (The pidfd pins which process the check and the signal are about.)
    """
    try:
        handle = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        if _parent(pid) != os.getpid():
            return
        signal.pidfd_send_signal(handle, signal.SIGKILL)
        select.select([handle], [], [], 5.0)  # exits at once; the bound only guards a hang
    except ProcessLookupError:
        pass
    finally:
        os.close(handle)


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()  # after "pid (command name)"
    except OSError:
        return None
    return int(fields[1])
