"""Which process owns a container or a temp folder, and whether that process still lives.

A kernel killed with SIGKILL runs no cleanup: its containers keep running and its temp folders
stay. The next kernel to load the extension reaps them, and must never reap what a live kernel
still uses. "Alive" needs more than ``kill(pid, 0)``, which succeeds for

- a *zombie*: killed but not yet waited for by its parent (a Jupyter server that has not
  noticed yet). Its code no longer runs; its containers and folders are orphans.
- a *reused pid*: the kernel died long ago and another process now has its number.

So an owner is named by its pid, its start time (clock ticks after boot, field 22 of
``/proc/<pid>/stat``), the boot id and its PID namespace, and counts as alive only when a
process with that pid, that start time and that boot runs and is not a zombie. An owner in
another PID namespace (a kernel in a container sharing our temp folder) cannot be judged from
here, so it counts as alive: the reaper never removes what it cannot prove dead. Containers
carry the identity in their labels (see `sandbox._client.owner_labels`), temp folders in their
names (`temp_prefix`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import cache

_BOOT_ID = "/proc/sys/kernel/random/boot_id"
_BOOT_CHARS = 8
"""Leading hex digits of the boot id kept in names: enough to tell boots apart."""

_FOLDER = re.compile(
    r"jupyter-sandbox-(?P<kind>[a-z]+)-(?P<pid>\d+)-(?P<start>\d+)-(?P<boot>[0-9a-f]*)-(?P<ns>\d+)-[a-z0-9_]+"
)


@dataclass(frozen=True)
class Owner:
    """A process, named so that neither pid reuse nor a reboot can be mistaken for it."""

    pid: int
    start: int
    """Clock ticks after boot when the process started (0 where there is no ``/proc``)."""
    boot: str
    """The first hex digits of the boot id ("" where there is none)."""
    ns: int
    """The inode of the PID namespace the pid belongs to (0 where unknown)."""

    @property
    def token(self) -> str:
        """``<start>-<boot>-<ns>``: the part of the identity a pid alone does not give."""
        return f"{self.start}-{self.boot}-{self.ns}"

    def alive(self) -> bool:
        """True while this very process runs (a zombie or a reused pid does not count)."""
        if self.ns and _namespace() and self.ns != _namespace():
            return True  # not ours to judge
        if self.boot and self.boot != _boot():
            return False
        stat = _stat(self.pid)
        if stat is None:  # no such process, or no /proc at all
            return not _have_proc() and _signalable(self.pid)
        state, start = stat
        return state not in "ZX" and (not self.start or start == self.start)


def me() -> Owner:
    """This process (asked afresh in a forked child, whose pid differs)."""
    return _owner(os.getpid())


@cache
def _owner(pid: int) -> Owner:
    stat = _stat(pid)
    return Owner(pid, stat[1] if stat else 0, _boot(), _namespace())


def parse_token(pid: str, token: str) -> Owner | None:
    """The owner named by container labels (``token`` may be "" on containers of older
    versions: then only the pid and its zombie state are checked); None if malformed."""
    if not pid.isdigit():
        return None
    if not token:
        return Owner(int(pid), 0, "", 0)
    match = re.fullmatch(r"(\d+)-([0-9a-f]*)-(\d+)", token)
    if match is None:
        return None
    return Owner(int(pid), int(match[1]), match[2], int(match[3]))


def temp_prefix(kind: str) -> str:
    """``jupyter-sandbox-<kind>-<pid>-<start>-<boot>-<ns>-``: a `tempfile` prefix naming its owner,
    so that the reaper can tell a dead kernel's folders from a live one's."""
    owner = me()
    return f"jupyter-sandbox-{kind}-{owner.pid}-{owner.token}-"


def folder_owner(name: str) -> tuple[str, Owner] | None:
    """The kind and owner a `temp_prefix` folder name encodes; None for any other name."""
    match = _FOLDER.fullmatch(name)
    if match is None:
        return None
    owner = Owner(int(match["pid"]), int(match["start"]), match["boot"], int(match["ns"]))
    return match["kind"], owner


@cache
def _boot() -> str:
    try:
        with open(_BOOT_ID) as file:
            return file.read().strip().replace("-", "")[:_BOOT_CHARS]
    except OSError:
        return ""


@cache
def _namespace() -> int:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


@cache
def _have_proc() -> bool:
    return os.path.exists("/proc/self/stat")


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, start time) of a process from ``/proc``; None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            raw = file.read().decode(errors="replace")
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after the last ")"
    fields = raw[raw.rfind(")") + 2 :].split()
    try:
        return fields[0], int(fields[19])
    except (IndexError, ValueError):
        return None


def _signalable(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
