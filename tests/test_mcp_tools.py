"""MCP servers' tools in code mode (issue 23 item 3): servers written with the official ``mcp``
SDK run as real processes (stdio and streamable HTTP, `_mcp_servers.py`), their tools called
from real Monty code: typed stubs the type check enforces, structured results as data,
``gather`` concurrency, a tool's error and a dying server caught by the code, a lying server's
result refused, approval gates, the trace."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_sandbox import orchestrate, resume_run, tools_from_mcp
from jupyter_sandbox.errors import SandboxConfigError, ToolError, TypeCheckError
from jupyter_sandbox.orchestration import Store, Tool, build_stubs, registry

SERVERS = str(Path(__file__).with_name("_mcp_servers.py"))


def alive(pid: int) -> bool:
    """Whether ``pid`` is a process that has not ended (a zombie has ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def gone_within(pid: int, seconds: float = 15) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


@pytest.fixture
def demo() -> Iterator[object]:
    tools = tools_from_mcp([sys.executable, SERVERS, "demo"], register=False)
    yield tools
    tools.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def http_server() -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, SERVERS, "demo", "--http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            assert process.poll() is None and time.monotonic() < deadline, "server did not start"
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(10)


def test_stubs_are_written_from_the_schemas(demo):
    stubs = build_stubs(dict(demo), {})
    assert "async def add(a: int, *, b: int = ...) -> int: ..." in stubs
    assert "async def point(x: int, y: int) -> dict[str, Any]: ..." in stubs
    # a name Python cannot spell is made one; Optional stays a union
    assert "async def split_words(text: str, *, limit: int | None = ...) -> list[str]: ..." in stubs
    assert demo["add"].doc == "Add two numbers."


def test_structured_results_come_back_as_data_and_calls_are_traced(demo):
    result = orchestrate(
        "(await add(1), await add(1, b=5), await point(3, 4), await split_words('a b c', limit=2))",
        tools=demo,
    )
    assert result.value == (3, 6, {"x": 3, "y": 4}, ["a", "b"])
    assert [(c.tool, c.args, c.kwargs, c.result) for c in result.trace][:2] == [
        ("add", (1,), {}, 3),
        ("add", (1,), {"b": 5}, 6),
    ]
    assert all(c.error is None for c in result.trace)


def test_the_type_check_enforces_the_schemas(demo):
    for code in ("await add('x')", "await point(1)", "(await add(1)).upper()"):
        with pytest.raises(TypeCheckError):
            orchestrate(code, tools=demo)


def test_calls_run_concurrently_under_gather(demo):
    """The server answers each `meet(4)` only once four calls are in flight at once: made one
    after another, the first would wait its 20 s out and report 1."""
    result = orchestrate(
        "import asyncio\nawait asyncio.gather(*[meet(4) for _ in range(4)])", tools=demo
    )
    assert result.value == [4, 4, 4, 4]


def test_a_tools_error_is_catchable_and_uncaught_is_a_tool_error(demo):
    code = "try:\n    await fail('boom')\nexcept RuntimeError as e:\n    said = str(e)\nsaid"
    assert "fail() failed on" in orchestrate(code, tools=demo).value
    with pytest.raises(ToolError, match="fail"):
        orchestrate("await fail('boom')", tools=demo)
    # the connection is fine afterwards
    assert orchestrate("await add(40)", tools=demo).value == 42


def test_a_server_that_dies_mid_call_is_a_catchable_error_and_its_process_is_reaped(demo):
    pid = orchestrate("await pid()", tools=demo).value
    assert alive(pid)
    code = (
        "try:\n    await die()\n    said = 'no error'\n"
        "except OSError as e:\n    said = str(e)\nsaid"
    )
    said = orchestrate(code, tools=demo).value
    assert "ConnectionError" in said
    assert "server is gone" in said
    assert gone_within(pid)
    with pytest.raises(ToolError, match="server is gone"):  # and every later call, at once
        orchestrate("await add(1)", tools=demo)
    assert "gone" in repr(demo)


def test_a_server_killed_while_calls_wait_fails_them_all(demo):
    """Calls in flight (one that never answers, one waiting for company) fail when the
    process is killed under them; nothing hangs."""
    pid = orchestrate("await pid()", tools=demo).value

    async def kill() -> str:
        await asyncio.sleep(0.3)  # the two calls are on the wire by then (else they fail at once)
        os.kill(pid, signal.SIGKILL)
        return "killed"

    code = (
        "import asyncio\n"
        "async def caught(call):\n"
        "    try:\n        return await call\n"
        "    except OSError as e:\n        return str(e)\n"
        "await asyncio.gather(caught(hang()), caught(meet(99)), kill())"
    )
    value = orchestrate(code, tools=[*demo.values(), Tool(kill)]).value
    assert [("server is gone" in v) for v in value[:2]] == [True, True]
    assert value[2] == "killed"
    assert gone_within(pid)


def test_a_server_that_lies_about_its_result_schema_is_refused():
    with tools_from_mcp([sys.executable, SERVERS, "liar"], register=False) as liar:
        assert "async def count(x: int) -> int: ..." in build_stubs(dict(liar), {})
        assert orchestrate("await honest(1)", tools=liar).value == 2
        with pytest.raises(ToolError, match="Invalid structured content returned by tool count"):
            orchestrate("await count(1)", tools=liar)
        # a property Python cannot spell: any keywords, sent as given
        assert "async def echo(**arguments: Any) -> Any: ..." in build_stubs(dict(liar), {})
        sent = orchestrate("await echo(**{'from': 1, 'to': 2})", tools=liar).value
        assert sent == {"from": 1, "to": 2}


def test_streamable_http(http_server):
    with tools_from_mcp(url=http_server, register=False) as remote:
        result = orchestrate(
            "import asyncio\n(await add(2), await asyncio.gather(*[meet(3) for _ in range(3)]))",
            tools=remote,
        )
        assert result.value == (4, [3, 3, 3])


def test_approval_gates_per_tool(demo, tmp_path):
    demo.close()
    gated = tools_from_mcp([sys.executable, SERVERS, "demo"], approve={"add": True}, register=False)
    asked = []
    try:
        code = (
            "p = await point(1, 2)\n"
            "try:\n    n = await add(1)\nexcept PermissionError as e:\n    n = 'refused'\n(p, n)"
        )
        no = orchestrate(code, tools=gated, approver=lambda call: asked.append(call.tool) or False)
        assert no.value == ({"x": 1, "y": 2}, "refused")
        assert asked == ["add"]  # point is not gated
        store = Store(tmp_path / "store.sqlite")
        paused = orchestrate("await add(5)", tools=gated, store=store)
        assert paused.status == "paused"
        assert paused.pending[0].tool == "add"
        done = resume_run(paused.run_id, approve=True, store=store, tools=gated)
        assert (done.status, done.value) == ("ok", 7)
    finally:
        gated.close()


def test_registering_and_closing(demo):
    with tools_from_mcp([sys.executable, SERVERS, "demo"], only=["add"], prefix="m_") as some:
        assert list(some) == ["m_add"]
        assert registry["m_add"] is some["m_add"]
        assert orchestrate("await m_add(1)").value == 3  # found in the notebook's tools
    assert "m_add" not in registry


def test_bad_arguments_are_one_line_errors(tmp_path):
    with pytest.raises(SandboxConfigError, match="one of them"):
        tools_from_mcp()
    with pytest.raises(SandboxConfigError, match="could not start"):
        tools_from_mcp(str(tmp_path / "no-such-server"))
    with pytest.raises(SandboxConfigError, match="http"):
        tools_from_mcp(url="ftp://example.org")
    with pytest.raises(SandboxConfigError, match="has no tool nope"):
        tools_from_mcp([sys.executable, SERVERS, "demo"], only=["nope"], register=False)


def test_a_handle_argument_is_refused_in_the_callers_words(demo):
    code, inputs = "await split_words(thing)", {"thing": object()}
    with pytest.raises(TypeCheckError):
        orchestrate(code, tools=demo, inputs=inputs)
    with pytest.raises(ToolError, match="is not JSON data"):  # unchecked, the call refuses it
        orchestrate(code, tools=demo, inputs=inputs, type_check=False)


def test_the_engines_import_neither_extra():
    """``mcp`` and ``pydantic_ai`` are optional extras: loaded on first use, never before."""
    code = (
        "import sys, jupyter_sandbox, jupyter_sandbox.orchestration, jupyter_sandbox.codemode\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'pydantic_ai')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_a_server_that_never_answers_times_out_and_is_stopped():
    code = "import time; time.sleep(600)"  # starts, and never speaks MCP
    before = {p.name for p in Path("/proc").iterdir() if p.name.isdigit()}
    with pytest.raises(SandboxConfigError, match=r"no tool list after 1 s"):
        tools_from_mcp([sys.executable, "-c", code], timeout=1, register=False)
    started = [
        int(p.name)
        for p in Path("/proc").iterdir()
        if p.name.isdigit() and p.name not in before and "time.sleep(600)" in cmdline(p)
    ]
    assert all(gone_within(pid) for pid in started)


def cmdline(proc: Path) -> str:
    try:
        return (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@pytest.mark.parametrize(
    ("schema", "stub"),
    [
        ({"type": "integer"}, "int"),
        ({"type": ["string", "null"]}, "str | None"),
        ({"enum": ["a", "b"]}, "Literal['a', 'b']"),
        ({"enum": [1.5, 2.5]}, "float"),
        ({"type": "array", "items": {"type": "number"}}, "list[float]"),
        ({"type": "object", "additionalProperties": {"type": "boolean"}}, "dict[str, bool]"),
        ({"anyOf": [{"type": "integer"}, {}]}, "Any"),
        ({"$ref": "#/$defs/n", "$defs": {"n": {"type": "integer"}}}, "int"),
        ({"$ref": "#/$defs/loop", "$defs": {"loop": {"$ref": "#/$defs/loop"}}}, "Any"),
        ({"$ref": "https://elsewhere/schema.json"}, "Any"),
        ({"type": "array", "items": [{"type": "string"}]}, "list[Any]"),
        ({"type": 7}, "Any"),
        ("not a schema", "Any"),
        ({"enum": list(range(100))}, "int"),
    ],
)
def test_a_schema_becomes_an_annotation_whatever_the_server_wrote(schema, stub):
    from jupyter_sandbox.orchestration._json_schema import annotation
    from jupyter_sandbox.orchestration._stubs import _StubWriter

    assert _StubWriter().render(annotation(schema)) == stub


def test_an_input_schema_python_cannot_spell_takes_any_keywords():
    from jupyter_sandbox.orchestration._json_schema import signature

    assert signature({"properties": {"class": {}, "ok": {}}}) is None
    assert signature({"properties": {"a-b": {}}}) is None
    assert signature({"properties": [1, 2]}) is None
    found = signature({"properties": {"b": {}, "a": {}}, "required": ["a"]})
    assert str(found) == "(a: Any, *, b: Any = <not sent>)"


def test_code_mode_and_orchestrate_async_use_them_as_any_tool(demo):
    from jupyter_sandbox import CodeModeAgent, orchestrate_async
    from jupyter_sandbox.codemode import ScriptedLLM

    agent = CodeModeAgent(ScriptedLLM(["```python\nawait add(1, b=10)\n```"]), demo)
    assert "async def add(a: int, *, b: int = ...) -> int:" in agent.system_prompt
    assert "Add two numbers." in agent.system_prompt
    assert agent.run("add 1 and 10").value == 11
    # on the caller's own event loop, as a notebook's await of orchestrate_async does
    assert asyncio.run(orchestrate_async("await add(2)", tools=demo)).value == 4


def test_a_cancelled_run_cancels_its_call_and_the_connection_stays_usable(demo):
    from jupyter_sandbox import orchestrate_async

    async def main() -> object:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(orchestrate_async("await hang()", tools=demo), 1)
        return (await orchestrate_async("await add(5)", tools=demo)).value

    assert asyncio.run(main()) == 7
