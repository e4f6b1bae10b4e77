"""Finding the watchdog a process started (`jupyter_sandbox.sandbox._watchdog`)."""

from __future__ import annotations

from pathlib import Path


def watchdog_of(pid: int) -> int | None:
    """The pid of the running watchdog that guards process ``pid``; None if there is none."""
    for entry in Path("/proc").iterdir():
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        ours = any(b"jupyter_sandbox.sandbox._watchdog" in a for a in args) and (
            str(pid).encode() in args
        )
        if ours and state != "Z":  # a zombie watchdog has ended: its parent has not waited yet
            return int(entry.name)
    return None
