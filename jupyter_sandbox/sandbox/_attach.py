"""A created container's own process, attached: its stdin written, its output as it comes.

Every run's program is its container's own process or a child of it (`_container`, `_warm`), so its
output comes through the engine's attach endpoint (no run takes an exec). Attaching before the
start sees it from the first byte, with the engine's logging off (nothing of the run is written
to the engine's disk). The same connection carries what the script reads: the host writes it
and closes stdin, so the environment (secrets included) never enters the container's
configuration, which the engine keeps on disk and shows to ``docker inspect``. A spare's
connection stays open while it waits: its waiter answers on it (`line`) before the run.
"""

from __future__ import annotations

import contextlib
import select
import socket
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from docker import DockerClient

_LINE_MAX = 4096
"""Bytes a line the waiter writes may take (`line`)."""


class Attached:
    """The hijacked connection of ``docker attach`` (stdin, stdout, stderr) to a container
    not started yet. Iterating yields ``(stdout, stderr)`` chunks, one side None (the
    engine's demultiplexed frames), until the container's output ends or `close`."""

    def __init__(self, client: DockerClient, container_id: str) -> None:
        params = {"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
        self._io: Any = client.api.attach_socket(container_id, params=params)
        self._socket: Any = getattr(self._io, "_sock", self._io)
        """The socket under the SDK's reader (a TLS connection is one already)."""
        self._pending: list[bytes] = []
        """Stdout read past a `line`, for the iteration."""
        self.ended = False
        """Whether the stream ended (or broke) during a `line`."""

    def write(self, data: bytes) -> None:
        """Write ``data`` on the process' stdin."""
        self._socket.sendall(data)

    def send(self, data: bytes) -> None:
        """Write ``data`` on the process' stdin and close it (the container is created with
        ``StdinOnce``, so the engine closes the process' end then)."""
        self.write(data)
        self._socket.shutdown(socket.SHUT_WR)

    def quiet(self) -> bool:
        """Whether nothing came since the last `line` and the stream has not ended: a waiting
        spare writes nothing, and its end (the container died) makes the socket readable."""
        if self._pending or self.ended:
            return False
        try:
            readable, _, _ = select.select([self._socket], [], [], 0)
        except (OSError, ValueError):  # closed
            return False
        return not readable

    def line(self, deadline: float) -> bytes | None:
        """The next line on stdout, newline included, if it comes whole by ``deadline``
        (`time.monotonic`); None if the stream ends or breaks first (`ended`), or stderr or
        more than `_LINE_MAX` bytes come before it. What followed it is kept for iteration."""
        from docker.utils.socket import STDOUT, SocketError, next_frame_header, read_exactly

        data = b""
        while b"\n" not in data:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or len(data) > _LINE_MAX:
                return None
            try:
                if not select.select([self._socket], [], [], remaining)[0]:
                    return None
                stream, size = next_frame_header(self._io)
                if stream < 0:
                    self.ended = True
                    return None
                payload = read_exactly(self._io, size)
            except (OSError, ValueError, SocketError):
                self.ended = True
                return None
            if stream != STDOUT:
                return None
            data += payload
        line, _, rest = data.partition(b"\n")
        if rest:
            self._pending.append(rest)
        return line + b"\n"

    def __iter__(self) -> Iterator[tuple[bytes | None, bytes | None]]:
        from docker.utils.socket import STDOUT, frames_iter

        while self._pending:
            yield self._pending.pop(0), None
        for stream, data in frames_iter(self._io, tty=False):
            yield (data, None) if stream == STDOUT else (None, data)

    def close(self) -> None:
        """Hang up: a reader blocked on the connection sees its end."""
        with contextlib.suppress(OSError):
            self._socket.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._io.close()
            self._socket.close()
