"""Getting output to the right cell from any thread.

ipykernel routes stream and display messages by the *parent header* of the thread that writes.
Engines call views from worker threads (the orchestrate driver feeds Monty off the main
thread; build streams are read on their own thread), where that header may be missing or
belong to a later cell. A `CellRoute` remembers the cell that was executing when the view was
created and pins every write, display and update to it, whatever thread makes them.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from jupyter_sandbox._shared._events import Stream


def _shell() -> Any:
    """The running IPython shell, or None in plain Python (IPython is imported only if loaded)."""
    ipython = sys.modules.get("IPython")
    return None if ipython is None else ipython.get_ipython()


def kernel_present() -> bool:
    """True inside a Jupyter kernel: a frontend may render widgets (comms exist)."""
    return getattr(_shell(), "kernel", None) is not None


class CellRoute:
    """Pins output to the cell that was running when the route was created."""

    def __init__(self) -> None:
        self._shell = _shell()
        kernel = getattr(self._shell, "kernel", None)
        self._parent: dict[str, Any] | None = None if kernel is None else kernel.get_parent()

    @contextmanager
    def pinned(self) -> Iterator[None]:
        """Within the block, this thread's stdout, stderr and displays go to our cell."""
        if not self._parent:
            yield
            return
        targets: list[Any] = [sys.stdout, sys.stderr, getattr(self._shell, "display_pub", None)]
        tokens = [
            (target, target.set_thread_parent(self._parent))
            for target in targets
            if hasattr(target, "set_thread_parent")
        ]
        try:
            yield
        finally:
            for target, token in reversed(tokens):
                target.reset_thread_parent(token)

    def write(self, stream: Stream, text: str) -> None:
        """Write a chunk of the code's output to our cell.

        In a kernel the chunk is only buffered: ipykernel's stream keeps a buffer per parent
        and sends it every 0.2 s, so the cell still fills in live, but a loop of prints is one
        stream message (and one saved output in nbconvert or papermill), not one per chunk.
        Without a kernel each chunk is flushed at once, as a terminal expects. (ipykernel also
        sends what is buffered before any display or update, so output keeps its place.)
        """
        with self.pinned():
            target = sys.stdout if stream == "stdout" else sys.stderr
            target.write(text)
            if not self._parent:
                target.flush()

    def show(self, data: dict[str, Any], display_id: str | None = None) -> None:
        """Display a raw MIME bundle (printed as text when there is no IPython at all)."""
        with self.pinned():
            if self._shell is None:
                print(data.get("text/plain", ""))
                return
            from IPython.display import display

            display(data, raw=True, display_id=display_id)  # type: ignore[no-untyped-call]

    def replace(self, data: dict[str, Any], display_id: str) -> None:
        """Swap what an earlier `show` under ``display_id`` displayed (the live record) for
        ``data``; without IPython, print it again (a terminal cannot redraw)."""
        with self.pinned():
            if self._shell is None:
                print(data.get("text/plain", ""))
                return
            from IPython.display import update_display

            update_display(data, raw=True, display_id=display_id)  # type: ignore[no-untyped-call]
