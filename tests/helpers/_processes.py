"""Processes as ``/proc`` shows them: a process's state and parent, the watchdog a process
started (`jupyter_sandbox.sandbox._watchdog`)."""

from __future__ import annotations

from pathlib import Path


def stat_fields(pid: int) -> list[str] | None:
    """``/proc/<pid>/stat`` after the command's name (state, parent, ...); None if there is no
    such process. The name may hold spaces and parentheses: split after the last ")"."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw.rsplit(")", 1)[1].split()


def descends_from(pid: int, ancestor: int) -> bool:
    """Whether ``pid`` is ``ancestor`` or one of its descendants (parent by parent)."""
    while pid > 1:
        if pid == ancestor:
            return True
        fields = stat_fields(pid)
        if fields is None:
            return False
        pid = int(fields[1])
    return False


def watchdog_of(pid: int) -> int | None:
    """The pid of the running watchdog that guards process ``pid``; None if there is none."""
    for entry in Path("/proc").iterdir():
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        fields = stat_fields(int(entry.name)) if entry.name.isdigit() else None
        if fields is None:
            continue
        state = fields[0]
        ours = any(b"jupyter_sandbox.sandbox._watchdog" in a for a in args) and (
            str(pid).encode() in args
        )
        if ours and state != "Z":  # a zombie watchdog has ended: its parent has not waited yet
            return int(entry.name)
    return None
