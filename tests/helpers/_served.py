"""A folder served over HTTP on loopback, every request it answers written down: a page a
test opens from it is a site's page (Chromium downloads nothing from ``file:``), and a test
can prove that nothing on that page asked the server for anything else."""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


@dataclass
class Served:
    """The folder served, where (``url``, no trailing slash) and the paths asked for."""

    folder: Path
    url: str
    paths: list[str] = field(default_factory=list)


class _Handler(SimpleHTTPRequestHandler):
    def __init__(self, *args: Any, served: Served, **kwargs: Any) -> None:
        self.served = served
        super().__init__(*args, **kwargs)

    def do_GET(self) -> None:
        self.served.paths.append(self.path)
        super().do_GET()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the paths are the log."""


@contextmanager
def served(folder: Path) -> Iterator[Served]:
    """``folder`` served on a free loopback port until the block ends."""
    record = Served(folder, "")
    handler = functools.partial(_Handler, directory=str(folder), served=record)
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    record.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield record
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
