"""MCP servers the tests run as real processes, written with the official ``mcp`` SDK.

python tests/helpers/_mcp_servers.py demo            stdio
python tests/helpers/_mcp_servers.py demo --http N   streamable HTTP on 127.0.0.1:N
python tests/helpers/_mcp_servers.py liar            declares schemas its answers break
python tests/helpers/_mcp_servers.py tools JSON ...  lists the tools JSON declares (a list of
                                             types.Tool fields), ignores further arguments
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

import mcp.types as types
from mcp.server import Server
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server
from pydantic import BaseModel

demo = MCPServer("demo", log_level="WARNING")
_in_flight = {"now": 0, "most": 0}


class Point(BaseModel):
    x: int
    y: int


@demo.tool()
def add(a: int, b: int = 2) -> int:
    """Add two numbers."""
    return a + b


@demo.tool()
def point(x: int, y: int) -> Point:
    """A point as an object."""
    return Point(x=x, y=y)


@demo.tool(name="split-words")
def split_words(text: str, limit: int | None = None) -> list[str]:
    """The words of a text."""
    return text.split()[:limit]


@demo.tool()
def fail(message: str) -> str:
    """Always fails with the message."""
    raise ValueError(message)


@demo.tool()
def pid() -> int:
    """This server's process id."""
    return os.getpid()


@demo.tool()
async def meet(n: int) -> int:
    """Waits (up to 20 s) until ``n`` calls of it are in flight at once; the most it saw."""
    _in_flight["now"] += 1
    _in_flight["most"] = max(_in_flight["most"], _in_flight["now"])
    try:
        for _ in range(400):
            if _in_flight["most"] >= n:
                break
            await asyncio.sleep(0.05)
        return _in_flight["most"]
    finally:
        _in_flight["now"] -= 1


@demo.tool()
async def hang() -> str:
    """Never answers."""
    await asyncio.Event().wait()
    return "never"


@demo.tool()
def die() -> str:
    """The process exits in the middle of the call."""
    os._exit(3)


_COUNT_OUT = {
    "type": "object",
    "title": "countOutput",
    "properties": {"result": {"type": "integer"}},
    "required": ["result"],
}


async def _liar_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    number = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
    return types.ListToolsResult(
        tools=[
            types.Tool(name="count", input_schema=number, output_schema=_COUNT_OUT),
            types.Tool(name="honest", input_schema=number, output_schema=_COUNT_OUT),
            types.Tool(name="echo", input_schema={"type": "object", "properties": {"from": {}}}),
        ]
    )


async def _liar_call(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    if params.name == "echo":
        return types.CallToolResult(content=[], structured_content=dict(params.arguments or {}))
    x = (params.arguments or {}).get("x", 0)
    value: Any = x + 1 if params.name == "honest" else "many"  # says integer, answers text
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=str(value))],
        structured_content={"result": value},
    )


liar: Server[Any] = Server("liar", on_list_tools=_liar_tools, on_call_tool=_liar_call)


def _declared(tools: list[dict[str, Any]]) -> Server[Any]:
    """A server listing ``tools`` (each one's input schema an empty object unless given) whose
    every call answers ``"<name> ran"``."""

    async def listing(ctx: Any, params: Any) -> types.ListToolsResult:
        listed = [types.Tool(**{"input_schema": {"type": "object"}, **t}) for t in tools]
        return types.ListToolsResult(tools=listed)

    async def call(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=f"{params.name} ran")]
        )

    return Server("declared", on_list_tools=listing, on_call_tool=call)


async def _serve(server: Server[Any]) -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    which = sys.argv[1]
    if which == "liar":
        asyncio.run(_serve(liar))
    elif which == "tools":
        asyncio.run(_serve(_declared(json.loads(sys.argv[2]))))

    elif len(sys.argv) > 3 and sys.argv[2] == "--http":
        demo.run("streamable-http", port=int(sys.argv[3]))
    else:
        demo.run()
