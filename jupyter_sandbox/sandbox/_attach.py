"""A created container's own process, attached: its stdin written once, its output as it comes.

When no spare waits, the run's script is the container's own process (`_run`), so its output
comes through the engine's attach endpoint, not an exec's stream. Attaching before the start
sees it from the first byte, with the engine's logging off (nothing of the run is written to
the engine's disk). The same connection carries what the script reads first: the host writes
it before the start and closes stdin, so the environment (secrets included) never enters the
container's configuration, which the engine keeps on disk and shows to ``docker inspect``.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from docker import DockerClient


class Attached:
    """The hijacked connection of ``docker attach`` (stdin, stdout, stderr) to a container
    not started yet. Iterating yields ``(stdout, stderr)`` chunks, one side None, as an exec's
    demultiplexed stream does, until the container's output ends or `close`."""

    def __init__(self, client: DockerClient, container_id: str) -> None:
        params = {"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
        self._io: Any = client.api.attach_socket(container_id, params=params)
        self._socket: Any = getattr(self._io, "_sock", self._io)
        """The socket under the SDK's reader (a TLS connection is one already)."""

    def send(self, data: bytes) -> None:
        """Write ``data`` on the process' stdin and close it (the container is created with
        ``StdinOnce``, so the engine closes the process' end then)."""
        self._socket.sendall(data)
        self._socket.shutdown(socket.SHUT_WR)

    def __iter__(self) -> Iterator[tuple[bytes | None, bytes | None]]:
        from docker.utils.socket import STDOUT, frames_iter

        for stream, data in frames_iter(self._io, tty=False):
            yield (data, None) if stream == STDOUT else (None, data)

    def close(self) -> None:
        """Hang up: a reader blocked on the connection sees its end."""
        with contextlib.suppress(OSError):
            self._socket.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._io.close()
            self._socket.close()
