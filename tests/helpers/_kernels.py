"""Real Jupyter kernels for tests: start one with the extension loaded, run code, read what it
showed. Each kernel gets the store file the test names (``JUPYTER_SANDBOX_STORE``)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_client.manager import KernelManager

TOOLS = """
%load_ext jupyter_sandbox
from jupyter_sandbox import tool

@tool
def add(x: int, y: int) -> int:
    return x + y
"""


@dataclass
class Ran:
    """What one execute request produced."""

    status: str
    outputs: list[dict[str, Any]] = field(default_factory=list)
    execution_count: int | None = None
    """The cell's prompt number (``In [n]``), from the execute reply."""
    payload: list[dict[str, Any]] = field(default_factory=list)
    """The execute reply's payloads (``set_next_input``: the cell a magic inserts below)."""

    @property
    def text(self) -> str:
        """Streams, results and error lines, as a person reads the cell's output."""
        parts = []
        for msg in self.outputs:
            content = msg["content"]
            if msg["msg_type"] == "stream":
                parts.append(content["text"])
            elif msg["msg_type"] in ("execute_result", "display_data"):
                parts.append(content["data"].get("text/plain", ""))
            elif msg["msg_type"] == "error":
                parts.append(f"{content['ename']}: {content['evalue']}")
        return "\n".join(parts)

    @property
    def printed(self) -> str:
        """The streams only: what the cell printed, without the displays (a trace repeats the
        first lines printed before a call above it)."""
        return "".join(m["content"]["text"] for m in self.outputs if m["msg_type"] == "stream")

    @property
    def value(self) -> str | None:
        """The cell's ``Out`` as text."""
        for msg in self.outputs:
            if msg["msg_type"] == "execute_result":
                return str(msg["content"]["data"]["text/plain"])
        return None

    def records(self, mime: str) -> list[dict[str, Any]]:
        """The records of MIME type ``mime`` the cell displayed or updated, last state last.
        An update of another cell's display (a paused record above, redrawn as answered) is
        not this cell's."""
        own: set[str] = set()
        found = []
        for msg in self.outputs:
            kind, content = msg["msg_type"], msg["content"]
            if kind not in ("display_data", "update_display_data", "execute_result"):
                continue
            display_id = content.get("transient", {}).get("display_id")
            if kind == "display_data" and display_id:
                own.add(display_id)
            if kind == "update_display_data" and display_id not in own:
                continue
            if mime in content["data"]:
                found.append(content["data"][mime])
        return found


class Kernel:
    def __init__(self, store: Path, env: dict[str, str] | None = None) -> None:
        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(env={**os.environ, "JUPYTER_SANDBOX_STORE": str(store), **(env or {})})
        self.client = self.km.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=120)

    def run(self, code: str, timeout: float = 120) -> Ran:
        msg_id = self.client.execute(code)
        reply = self.client.get_shell_msg(timeout=timeout)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = self.client.get_shell_msg(timeout=timeout)
        ran = Ran(
            reply["content"]["status"],
            execution_count=reply["content"].get("execution_count"),
            payload=list(reply["content"].get("payload") or []),
        )
        while True:
            msg = self.client.get_iopub_msg(timeout=timeout)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                return ran
            ran.outputs.append(msg)

    def ok(self, code: str, timeout: float = 120) -> Ran:
        """`run`, asserting the cell succeeded."""
        ran = self.run(code, timeout)
        assert ran.status == "ok", ran.text
        return ran

    def start(self, code: str) -> str:
        """Send ``code`` without waiting; its message id."""
        return str(self.client.execute(code))

    def kill(self) -> None:
        """``kill -9`` the kernel process, as a crash or an OOM kill does."""
        os.kill(self.km.provisioner.pid, signal.SIGKILL)  # type: ignore[union-attr]
        self.close()

    def close(self) -> None:
        self.client.stop_channels()
        self.km.shutdown_kernel(now=True)


@contextmanager
def kernel(store: Path, env: dict[str, str] | None = None) -> Iterator[Kernel]:
    """A started kernel with the extension and the ``add`` tool; shut down after."""
    k = Kernel(store, env)
    try:
        k.ok(TOOLS)
        yield k
    finally:
        k.close()
