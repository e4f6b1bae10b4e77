"""What an MCP tool call costs in a run: a cell awaiting an async ``@tool`` that adds two
numbers (the baseline), against the same cell awaiting the ``add`` tool of an MCP server
(the official SDK's, `tests/helpers/_mcp_servers.py`) over stdio and over streamable HTTP on
loopback; then 20 calls one after another and 20 under ``asyncio.gather``. Medians of
interleaved rounds, the server started once per transport (a call, not a start-up).

    .venv/bin/python benchmarks/bench_mcp.py [--rounds 15]
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import subprocess
import sys
import time
from pathlib import Path

from _timing import measure, print_table

from jupyter_sandbox import orchestrate, tools_from_mcp
from jupyter_sandbox.orchestration import Tool

SERVERS = str(Path(__file__).resolve().parent.parent / "tests" / "helpers" / "_mcp_servers.py")
CELLS = {
    "one call": "await add(1)",
    "20 calls in turn": "t = 0\nfor i in range(20):\n    t += await add(i)\nt",
    "20 calls, gather": "import asyncio\nawait asyncio.gather(*[add(i) for i in range(20)])",
}


async def add(a: int, b: int = 2) -> int:
    return a + b


def http_server() -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, SERVERS, "demo", "--http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(300):
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            break
        time.sleep(0.1)
    return process, f"http://127.0.0.1:{port}/mcp"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    local = {"add": Tool(add)}
    stdio = tools_from_mcp([sys.executable, SERVERS, "demo"], only=["add"], register=False)
    process, url = http_server()
    http = tools_from_mcp(url=url, only=["add"], register=False)
    try:
        for title, code in CELLS.items():
            rows = [
                (f"async @tool (baseline), {title}", lambda c=code: orchestrate(c, tools=local)),
                (f"MCP over stdio, {title}", lambda c=code: orchestrate(c, tools=stdio)),
                (f"MCP over HTTP, {title}", lambda c=code: orchestrate(c, tools=http)),
            ]
            print_table(f"{title} (median of {args.rounds})", measure(rows, args.rounds), unit="ms")
    finally:
        stdio.close()
        http.close()
        process.terminate()
        process.wait(10)


if __name__ == "__main__":
    main()
