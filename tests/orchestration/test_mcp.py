"""MCP servers' tools in code mode: servers written with the official ``mcp``
SDK run as real processes (stdio and streamable HTTP, `_mcp_servers.py`), their tools called
from real Monty code: typed stubs the type check enforces, structured results as data,
``gather`` concurrency, a tool's error and a dying server caught by the code, a lying server's
result refused, approval gates, the trace."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _paths import HELPERS

from jupyter_sandbox import orchestrate, resume_run, tools_from_mcp
from jupyter_sandbox._shared import _defaults
from jupyter_sandbox.errors import SandboxConfigError, ToolError, TypeCheckError
from jupyter_sandbox.orchestration import MCPTools, Store, Tool, build_stubs, registry

SERVERS = str(HELPERS / "_mcp_servers.py")
FAMILY = str(HELPERS / "_mcp_family.py")


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


def server_processes() -> set[int]:
    """Live processes of the tests' servers (and the family server's child): their command
    lines name the servers' files."""
    return {
        int(p.name)
        for p in Path("/proc").iterdir()
        if p.name.isdigit()
        and any(f in cmdline(p) for f in (SERVERS, FAMILY))
        and alive(int(p.name))
    }


@pytest.fixture(autouse=True)
def no_server_left() -> Iterator[None]:
    """Every test leaves no server process, nor any process a server started, behind."""
    before = server_processes()
    yield
    left = [pid for pid in server_processes() - before if not gone_within(pid)]
    assert not left, f"MCP server processes still running: {left}"


def declared(*tools: dict[str, object], **options: Any) -> MCPTools:
    """A server that lists ``tools`` (types.Tool fields), its tools as `tools_from_mcp` makes
    them (not registered)."""
    argv = [sys.executable, SERVERS, "tools", json.dumps(list(tools))]
    return tools_from_mcp(argv, register=False, **options)


@pytest.mark.parametrize(
    ("key", "prefix"),
    [("delete_repo", ""), ("gh_delete_repo", "gh_"), ("delete_repo", "gh_"), ("delete-repo", "")],
)
def test_approve_takes_the_name_the_code_calls_or_the_servers(key, prefix):
    asked: list[str] = []
    gated = declared(
        {"name": "delete-repo"}, {"name": "list-repos"}, approve={key: True}, prefix=prefix
    )
    with gated:
        code = (
            f"try:\n    said = await {prefix}delete_repo()\n"
            "except PermissionError:\n    said = 'refused'\n"
            f"(said, await {prefix}list_repos())"
        )
        result = orchestrate(code, tools=gated, approver=lambda c: asked.append(c.tool) or False)
    assert result.value == ("refused", "list-repos ran")
    assert asked == [f"{prefix}delete_repo"]


def test_an_approve_key_that_names_no_tool_is_refused_with_the_tools_it_could_be():
    with pytest.raises(SandboxConfigError, match=r"no tool 'delete_rep'; it could be delete_repo"):
        declared({"name": "delete-repo"}, {"name": "list-repos"}, approve={"delete_rep": True})
    with pytest.raises(SandboxConfigError, match=r"no tool 'zzz'; it could be delete_repo, list_"):
        declared({"name": "delete-repo"}, {"name": "list-repos"}, approve={"zzz": True})
    with pytest.raises(SandboxConfigError, match=r"names one tool twice: 'delete-repo' and 'de"):
        declared({"name": "delete-repo"}, approve={"delete-repo": True, "delete_repo": False})


@pytest.mark.parametrize(
    ("first", "second", "called"),
    [("delete", "\uff44elete", "delete"), ("a-b", "a_b", "a_b"), ("same", "same", "same")],
)
def test_two_tools_the_code_would_call_by_one_name_are_refused(first, second, called):
    """Python reads identifiers NFKC-normalised: a fullwidth ``d`` is a ``d`` to the code, so
    one tool would replace the other (a gated one by an ungated one)."""
    with pytest.raises(SandboxConfigError) as refused:
        declared({"name": first}, {"name": second}, approve={first: True})
    message = str(refused.value)
    assert f"two tools the code would call {called}: {first!r} and {second!r}" in message
    assert "\n" not in message
    with declared({"name": second}, {"name": "other"}, only=[second]) as kept:  # only= keeps one
        assert list(kept) == [called]
        assert orchestrate(f"await {second}()", tools=kept).value == f"{second} ran"


def test_tools_named_as_builtins_are_renamed_and_unrelated_code_still_checks():
    """A stub ``async def print(...)`` is the checker's ``print`` for the whole cell (Monty
    still calls its own), and ``len`` likewise: the code's own ``print(len(x))`` failed."""
    with declared(
        {"name": "print"}, {"name": "len"}, {"name": "list"}, approve={"len": True}
    ) as named:
        assert list(named) == ["print_", "len_", "list_"]
        assert "(Named print_: print is a Python builtin.)" in named["print_"].doc
        code = "x = [1, 2]\nprint(len(x))\n(await print_(), await list_())"
        result = orchestrate(code, tools=named)
        assert (result.stdout, result.value) == ("2\n", ("print ran", "list ran"))
        assert named["len_"].approve is True


HOSTILE = {
    "type": "object",
    "properties": {"x": {"$ref": "#/$defs/a"}},
    "$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}] * 7}},
}
"""An ``anyOf`` of seven ``$ref`` s to itself: 7 ** 8 parts at the depth bound."""


class CountedSchema(dict[str, Any]):
    """A schema that counts what is read of it, and stops a reader past ``most`` reads."""

    reads = 0
    most = 200_000

    def get(self, key: str, default: Any = None) -> Any:
        CountedSchema.reads += 1
        assert CountedSchema.reads < CountedSchema.most, "the schema was read without bound"
        return super().get(key, default)


def counted(part: Any) -> Any:
    if isinstance(part, dict):
        return CountedSchema({k: counted(v) for k, v in part.items()})
    return [counted(p) for p in part] if isinstance(part, list) else part


def test_a_schema_that_branches_at_every_level_is_typed_within_a_budget():
    from jupyter_sandbox.orchestration._json_schema import Budget, signature

    CountedSchema.reads = 0
    budget = Budget()
    found = signature(counted(HOSTILE), budget)
    assert str(found) == "(*, x: Any = <not sent>)"
    assert budget.spent
    with declared({"name": "deep", "input_schema": HOSTILE}, {"name": "flat"}) as tools:
        assert "too large to type in full" in tools["deep"].doc
        assert "too large" not in tools["flat"].doc  # each tool has a budget of its own
        assert orchestrate("await deep(x=[1])", tools=tools).value == "deep ran"


def family_pids(pidfile: Path) -> tuple[int, int]:
    """The family server's pid and its child's, once it has written them."""
    deadline = time.monotonic() + 30
    while not (pidfile.exists() and pidfile.read_text()):
        assert time.monotonic() < deadline, "the family server did not start"
        time.sleep(0.05)
    server, child = map(int, pidfile.read_text().split())
    return server, child


@pytest.mark.parametrize("end", ["close", "death"])
def test_what_a_stdio_server_started_dies_with_it(tmp_path, end):
    """The SDK kills a server's process group only when the server did not exit by itself:
    one that exits (its stdin closed, or a crash) left its children running."""
    pidfile = tmp_path / "pids"
    tools = tools_from_mcp([sys.executable, FAMILY, str(pidfile)], register=False)
    server, child = family_pids(pidfile)
    assert alive(child)
    if end == "close":
        tools.close()
    else:
        with pytest.raises(ToolError, match="server is gone"):
            orchestrate("await die()", tools=tools)
    assert gone_within(server)
    assert gone_within(child)
    tools.close()


@pytest.mark.parametrize("interrupt", ["ctrl-c", "timeout"])
def test_a_connect_that_is_interrupted_stops_the_server_and_its_children(tmp_path, interrupt):
    pidfile = tmp_path / "pids"
    argv = [sys.executable, FAMILY, str(pidfile), "mute"]  # never speaks MCP
    if interrupt == "ctrl-c":

        def press_ctrl_c() -> None:
            family_pids(pidfile)
            os.kill(os.getpid(), signal.SIGINT)

        threading.Thread(target=press_ctrl_c, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            tools_from_mcp(argv, register=False, timeout=120)
    else:
        with pytest.raises(SandboxConfigError, match="no tool list after 10 s"):
            tools_from_mcp(argv, register=False, timeout=10)
    server, child = family_pids(pidfile)
    assert gone_within(server)
    assert gone_within(child)


def test_a_call_that_gets_no_answer_fails_after_call_timeout():
    with tools_from_mcp([sys.executable, SERVERS, "demo"], call_timeout=1, register=False) as demo:
        code = "try:\n    await hang()\nexcept TimeoutError as e:\n    said = str(e)\nsaid"
        said = orchestrate(code, tools=demo).value
        assert "no answer from 'hang' in 1 s (tools_from_mcp(call_timeout=...)" in said
        with pytest.raises(ToolError, match="no answer from 'hang' in 1 s"):
            orchestrate("await hang()", tools=demo)
        assert orchestrate("await add(1)", tools=demo).value == 3  # the connection is fine
    default = inspect.signature(tools_from_mcp).parameters["call_timeout"].default
    assert default == _defaults.MCP_CALL_TIMEOUT
    for bad in (0, -1, "5", math.inf, True):
        with pytest.raises(SandboxConfigError, match="call_timeout must be a positive number"):
            tools_from_mcp([sys.executable, SERVERS, "demo"], call_timeout=bad)


def test_the_command_line_never_reaches_the_tools_text(http_server):
    """A command's arguments (``--token ...``) or a URL's query would be in each tool's
    description, that is in a model's prompt: the server is named by its program or host."""
    argv = [sys.executable, SERVERS, "tools", json.dumps([{"name": "bare"}]), "--token", "SECRET-1"]
    with tools_from_mcp(argv, register=False) as tools:
        program = Path(sys.executable).name
        assert tools["bare"].doc == f"The tool 'bare' of {program!r}."
        assert "SECRET" not in repr(tools) + build_stubs(dict(tools), {})
    with tools_from_mcp(argv, name="vault", register=False) as tools:
        assert tools["bare"].doc == "The tool 'bare' of 'vault'."
    with pytest.raises(SandboxConfigError, match="has no tool nope") as refused:
        tools_from_mcp(argv, only=["nope"], register=False)
    assert "SECRET" not in str(refused.value)
    with tools_from_mcp(url=f"{http_server}?key=SECRET-2", register=False) as remote:
        assert "SECRET" not in repr(remote) + remote["add"].doc
        assert repr(remote).startswith("<MCP tools of '127.0.0.1:")
