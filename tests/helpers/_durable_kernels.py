"""Watching durable runs in other processes: poll until something holds, the processes a
kernel started and which still run, the store's newest run, the tools' call counter."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jupyter_sandbox.orchestration.durable._store import Store, StoredRun


def counted(store: Path) -> Counter[str]:
    """The tool calls every kernel made, by line."""
    path = store.parent / "counter"
    return Counter(path.read_text().splitlines() if path.exists() else [])


def wait_for(what: str, check: Callable[[], Any], timeout: float = 300) -> Any:
    """Poll ``check`` until it returns something true; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def descendants(pid: int) -> set[int]:
    """The processes ``pid`` started (its Monty workers), and theirs."""
    found: set[int] = set()
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        for child in map(int, children.read_text().split()):
            found |= {child} | descendants(child)
    return found


def alive(pids: set[int]) -> set[int]:
    """Those of ``pids`` still running (not zombies)."""
    running = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z":
            running.add(pid)
    return running


def the_run(store: Store) -> StoredRun | None:
    """The store's newest run, or None before one is stored."""
    listed = store.runs()
    return store.run(listed[0].run_id) if listed else None
