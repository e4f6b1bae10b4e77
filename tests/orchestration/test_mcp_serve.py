"""The notebook as an MCP server: ``%mcp_serve`` in a real IPython shell,
asked by the official ``mcp`` client over real HTTP on loopback: a run, a gated call paused
then approved in the notebook, one rejected, a limit, a bad token, and stop (no thread or
port left)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import select
import socket
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx2
import mcp
import pytest
from _kernels import TOOLS, kernel
from _paths import HELPERS
from mcp.client.streamable_http import streamable_http_client

SETUP = """
from jupyter_sandbox import tool

@tool
def add(x: int, y: int) -> int:
    \"\"\"Adds two numbers.\"\"\"
    return x + y

@tool(approve=True)
def delete(path: str) -> str:
    return "deleted " + path
"""


def serving_of(shell) -> Any:
    return shell.magics_manager.magics["line"]["mcp_serve"].__self__.serving


def token_file_in(shown: str) -> Path:
    """The token file ``%mcp_serve`` names in what it printed."""
    return Path(re.search(r"token is in (\S+) \(", shown).group(1))


@pytest.fixture
def served(shell, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    assert shell.run_cell(SETUP).success
    assert shell.run_line_magic("mcp_serve", "") is None
    printed = capsys.readouterr().out
    serving = serving_of(shell)
    assert serving.url in printed
    assert serving.token not in printed  # the cell's output is kept in the notebook
    path = token_file_in(printed)
    assert path == serving.token_file and path.parent == tmp_path / "runtime"
    assert path.read_text() == serving.token
    assert path.stat().st_mode & 0o777 == 0o600
    yield serving
    if serving_of(shell) is not None:
        shell.run_line_magic("mcp_serve", "stop")


def ask(serving, arguments: dict[str, Any], token: str | None = None) -> Any:
    """One ``run_code`` call with the official client; the result, and the tools listed."""

    async def main() -> Any:
        headers = {"Authorization": f"Bearer {token or serving.token}"}
        async with (
            httpx2.AsyncClient(headers=headers) as http,
            mcp.Client(streamable_http_client(serving.url, http_client=http)) as client,
        ):
            listed = await client.list_tools()
            return listed.tools, await client.call_tool("run_code", arguments)

    return asyncio.run(main())


def test_run_code_runs_against_the_notebooks_tools(served):
    tools, result = ask(served, {"code": "print('hi')\nadd(1, 2) * 2"})
    assert [t.name for t in tools] == ["run_code"]
    assert "def add(x: int, y: int) -> int: ..." in tools[0].description  # the stubs
    assert not result.is_error
    assert result.structured_content["value"] == 6
    assert result.structured_content["stdout"] == "hi\n"
    _, checked = ask(served, {"code": "add('a', 2)"})  # the type check, as in a cell
    assert checked.is_error
    assert "TypeCheckError" in checked.content[0].text


HOLDERS = """
from dataclasses import dataclass
from jupyter_sandbox import tool

@dataclass
class Settings:
    url: str
    api_key: str

class Config(dict):
    pass

@tool
def settings() -> Settings:
    return Settings("https://api.example", "sk-live-0123456789")

@tool
def config() -> Config:
    return Config(api_key="sk-live-0123456789")
"""


def test_a_handle_reaches_the_client_as_the_code_sees_it(served, shell):
    """A tool's object crosses into the code as an opaque handle (``Settings()``): what the
    client gets is what the code could see, as the value, nested in it, in what the code
    printed and in its errors, never the object's host repr with its key."""
    assert shell.run_cell(HOLDERS).success
    code = "s = settings()\nprint(s, [s], {'k': s})\n[s, {'k': s, 'c': config()}, (1, s), type(s)]"
    answers = [ask(served, {"code": code})[1]]
    assert answers[0].structured_content["value"] == [
        "Settings()",
        {"k": "Settings()", "c": "Config()"},
        [1, "Settings()"],
        "<class 'Settings'>",
    ]
    assert answers[0].structured_content["stdout"] == "Settings() [Settings()] {'k': Settings()}\n"
    for failing in ("settings().api_key", "x = settings()\nassert False, [x]"):
        answers.append(ask(served, {"code": failing})[1])
        assert answers[-1].is_error
    for answered in answers:
        assert "sk-live" not in answered.content[0].text
        assert "sk-live" not in json.dumps(answered.structured_content)


def test_a_gated_call_pauses_until_approved_in_the_notebook(served, shell, capsys):
    _, paused = ask(served, {"code": "delete('/data/old')"})
    found = paused.structured_content
    assert found["status"] == "paused"
    run_id = found["run_id"]
    assert f"paused, run id {run_id}" in paused.content[0].text
    _, still = ask(served, {"run_id": run_id})
    assert still.structured_content["status"] == "paused"
    # no panel in the notebook showed the call: it is approved with the digest the
    # listing shows beside it, not blind
    capsys.readouterr()
    assert not shell.run_cell(f"%orchestrate_approve {run_id}").success
    err = capsys.readouterr().err
    assert "MCP client's run_code paused it" in err and err.count("\n") == 1
    shell.run_line_magic("orchestrate_pending", "")
    digest = re.search(r"digest ([0-9a-f]{16})", capsys.readouterr().out).group(1)
    assert f"--expect {digest}" in err
    shell.run_line_magic("orchestrate_approve", f"{run_id} --expect {digest}")
    _, ended = ask(served, {"run_id": run_id})
    assert ended.structured_content == {
        "status": "ok",
        "run_id": run_id,
        "value": "deleted /data/old",
        "stdout": "",
    }


def test_a_gated_call_made_through_an_orchestrator_is_refused_not_made(served, shell):
    """The run is durable and would pause for a person; the orchestrator's nested run
    cannot, so its gated call is refused (one line saying it needs approval), not made."""
    assert shell.run_cell(
        "from jupyter_sandbox import orchestrator\nwiped = []\n"
        "@tool(approve=True)\ndef wipe(path: str) -> str:\n    wiped.append(path)\n"
        "    return 'wiped ' + path\n"
        "@tool\n@orchestrator\ndef cleanup(path: str) -> str:\n    return wipe(path)\n"
    ).success
    _, result = ask(served, {"code": "cleanup('/data')"})
    assert result.is_error
    assert "wipe() needs approval" in result.structured_content["error"]
    assert "cannot pause" in result.structured_content["error"]
    assert shell.user_ns["wiped"] == []


def test_a_rejected_call_fails_the_run_the_client_asks_about(served, shell):
    _, paused = ask(served, {"code": "delete('/etc')"})
    run_id = paused.structured_content["run_id"]
    assert not shell.run_cell(f"%orchestrate_reject {run_id} not that one").success
    _, ended = ask(served, {"run_id": run_id})
    assert ended.is_error
    assert ended.structured_content["status"] == "failed"
    assert "not that one" in ended.structured_content["error"]


def test_the_notebooks_limits_apply(served, shell):
    shell.run_line_magic("config", "OrchestrateMagics.max_calls = 2")
    try:
        _, result = ask(served, {"code": "add(1, 1)\nadd(1, 1)\nadd(1, 1)"})
    finally:
        shell.run_line_magic("config", "OrchestrateMagics.max_calls = 1000")
    assert result.is_error
    assert "LimitExceeded" in result.content[0].text


def test_a_bad_token_is_refused_before_mcp(served):
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": served.token}):
        answer = httpx2.post(served.url, headers=headers, json={})
        assert answer.status_code == 401
    with pytest.raises(Exception):  # noqa: B017, PT011  # the SDK's own error for a 401
        ask(served, {"code": "add(1, 2)"}, token="wrong")


def test_the_url_answers_as_soon_as_it_is_printed(shell, capsys):
    """A client that connects the moment ``%mcp_serve`` has printed its URL is answered: the
    port listens (and the server answers) before the URL is shown."""
    assert shell.run_cell(SETUP).success
    for _ in range(5):
        shell.run_line_magic("mcp_serve", "")
        port = serving_of(shell).port
        try:
            with socket.create_connection(("127.0.0.1", port), 10) as conn:
                conn.sendall(b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
                assert conn.recv(64).startswith(b"HTTP/1.1 401 ")
        finally:
            shell.run_line_magic("mcp_serve", "stop")
    assert "Serving this notebook's tools" in capsys.readouterr().out


def closed_by_server(conns: list[socket.socket], count: int, trickles: list[socket.socket]) -> int:
    """How many of ``conns`` the server closed, waiting until ``count`` are (or until well
    past the header deadline); each of ``trickles`` sends a few more bytes each round."""
    from jupyter_sandbox.orchestration._mcp_serve import HEADER_SECONDS

    poller, closed = select.poll(), set()
    by_fd = {conn.fileno(): conn for conn in conns}
    for fd in by_fd:
        poller.register(fd, select.POLLIN)
    bound = time.monotonic() + HEADER_SECONDS * 3
    while len(closed) < count and time.monotonic() < bound:
        for trickle in trickles:
            with contextlib.suppress(OSError):  # it may be closed already
                trickle.sendall(b"X-Slow: 1\r\n")
        for fd, _ in poller.poll(500):
            try:
                ended = by_fd[fd].recv(4096) == b""
            except ConnectionResetError:
                ended = True
            if ended:
                closed.add(fd)
                poller.unregister(fd)
    return len(closed)


def test_a_flood_of_half_open_connections_holds_few_and_not_for_long(served):
    """300 connections that never finish their request's headers, one that trickles them
    and one that trickles the body of a refused request hold at most `CONNECTIONS_CEILING` of
    the kernel's sockets and none past the header deadline; the notebook's own client is
    served in the middle of the flood."""
    from jupyter_sandbox.orchestration._mcp_serve import CONNECTIONS_CEILING

    address = ("127.0.0.1", served.port)
    with contextlib.ExitStack() as opened:
        flood = [opened.enter_context(socket.create_connection(address, 10)) for _ in range(300)]
        for conn in flood:
            conn.sendall(b"POST /mcp HTTP/1.1\r\nHost: x\r\n")  # and no more
        slow = [opened.enter_context(socket.create_connection(address, 10)) for _ in range(2)]
        slow[0].sendall(b"POST /mcp HTTP/1.1\r\n")
        slow[1].sendall(b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Length: 99999\r\n\r\n")
        assert closed_by_server(flood, 300 - CONNECTIONS_CEILING, slow) >= 300 - CONNECTIONS_CEILING
        _, result = ask(served, {"code": "add(1, 2)"})
        assert result.structured_content["value"] == 3
        assert closed_by_server([*flood, *slow], 302, slow) == 302


def test_stop_leaves_no_thread_nor_port(shell, served, capsys):
    port = served.port
    shell.run_line_magic("mcp_serve", "stop")
    assert "stopped" in capsys.readouterr().out
    assert not served.running
    assert not served.token_file.exists()
    assert not any(t.name.startswith("mcp-serve:") for t in threading.enumerate())
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), 2):
        pass
    shell.run_line_magic("mcp_serve", f"--port {port}")  # the port is free again
    assert serving_of(shell).port == port


def test_bad_use_is_a_one_line_usage_error(shell, served, capsys):
    for line, message in (
        ("", "already serving at"),
        ("--port 99999", "--port must be 0-65535"),
    ):
        if line.startswith("--port"):
            shell.run_line_magic("mcp_serve", "stop")
        result = shell.run_cell(f"%mcp_serve {line}")
        assert not result.success
        err = capsys.readouterr().err
        assert err.startswith("UsageError: ")
        assert message in err
    result = shell.run_cell("%mcp_serve stop")
    assert "not serving" in capsys.readouterr().err
    # the line is taken as written: IPython would run the code between braces
    shell.user_ns["ran"] = []
    result = shell.run_cell("%mcp_serve --port {ran.append(1) or 80}")
    assert not result.success
    assert shell.user_ns["ran"] == []
    assert "invalid int value" in capsys.readouterr().err


def test_in_a_real_kernel_both_ways(tmp_path):
    """A real Jupyter kernel: a cell takes an MCP server's tools (a real stdio server) and a
    ``%%orchestrate`` cell awaits them; ``%mcp_serve`` then serves the notebook, and the
    official client in this process runs code against both kinds of tool over HTTP."""
    servers = HELPERS / "_mcp_servers.py"
    with kernel(tmp_path / "store.sqlite") as nb:
        nb.ok(TOOLS)
        command = [sys.executable, str(servers), "demo"]
        nb.ok("from jupyter_sandbox import tools_from_mcp")
        nb.ok(f"t = tools_from_mcp({command!r}, only=['point'])")  # `add` is the notebook's
        assert "{'x': 3, 'y': 3}" in nb.ok("%%orchestrate\nawait point(3, add(1, 3) - 1)").text
        shown = nb.ok("%mcp_serve").text
        url = re.search(r"at (http://127\.0\.0\.1:\d+/mcp)", shown).group(1)
        serving = SimpleNamespace(url=url, token=token_file_in(shown).read_text())
        tools, result = ask(serving, {"code": "await point(add(1, 1), 5)"})
        assert "async def point(x: int, y: int) -> dict[str, Any]: ..." in tools[0].description
        assert result.structured_content["value"] == {"x": 2, "y": 5}
        assert "stopped" in nb.ok("%mcp_serve stop").text
        nb.ok("t.close()")


def test_the_saved_notebook_keeps_no_token(tmp_path, monkeypatch):
    """A notebook run headless (nbclient) and saved while it serves: the token is nowhere in
    the .ipynb, and the file ``%mcp_serve`` names holds it (a client gets in with it); the
    file goes with the kernel."""
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("JUPYTER_SANDBOX_STORE", str(tmp_path / "store.sqlite"))
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(TOOLS), nbformat.v4.new_code_cell("%mcp_serve")]
    client = NotebookClient(nb, timeout=120, kernel_name="python3")
    saved = tmp_path / "served.ipynb"
    with client.setup_kernel():
        for index, cell in enumerate(nb.cells):
            client.execute_cell(cell, index)
        shown = nb.cells[1].outputs[0]["text"]
        url = re.search(r"at (http://127\.0\.0\.1:\d+/mcp)", shown).group(1)
        path = token_file_in(shown)
        token = path.read_text()
        _, result = ask(SimpleNamespace(url=url, token=token), {"code": "add(1, 2)"})
        assert result.structured_content["value"] == 3
        nbformat.write(nb, saved)
    assert len(token) > 30
    assert token not in saved.read_text()
    assert not path.exists()


def test_a_sandbox_tools_secret_never_reaches_the_client():
    """What a run's sandbox tools returned as secrets is masked in the answer, as in a cell
    (the secret's run is faked here: `tests/orchestration/durable/test_secrets.py` makes real
    ones)."""
    from jupyter_sandbox.errors import ToolError
    from jupyter_sandbox.orchestration import OrchestrationResult
    from jupyter_sandbox.orchestration._mcp_serve import answer

    ran = OrchestrationResult(code="token()", value={"key": "tok-s3cret-42"})
    ran.stdout, ran.secrets = "got tok-s3cret-42\n", ("tok-s3cret-42",)
    found = answer(ran)
    assert "tok-s3cret-42" not in json.dumps(found)
    assert found["status"] == "ok"
    failed = ToolError("tool 'token' raised ValueError: tok-s3cret-42 is bad")
    failed.result = ran
    assert "tok-s3cret-42" not in json.dumps(answer(failed))


def test_a_value_json_cannot_carry_is_answered_as_its_repr():
    """A run's value is whatever the code returned: nan, infinities and tuple keys made
    ``json.dumps`` raise, so the client's call failed instead of getting the answer."""
    from jupyter_sandbox.orchestration import OrchestrationResult
    from jupyter_sandbox.orchestration._mcp_serve import answer

    value = [float("nan"), 1.5, {"a": float("-inf"), (1, 2): "pair", 3: {4.0}}]
    found = answer(OrchestrationResult(code="x", value=value))
    assert found["value"] == ["nan", 1.5, {"a": "-inf", "(1, 2)": "pair", "3": "{4.0}"}]
    json.dumps(found, allow_nan=False)  # what the client is sent encodes


def test_what_json_cannot_carry_is_answered_as_the_code_prints_it():
    """Monty's own values (an instance of a class the code defined, a builtin, a set) and a
    tool's named tuple are answered as the code's ``repr`` writes them, whatever they hold."""
    from collections import namedtuple

    from jupyter_sandbox.orchestration import orchestrate
    from jupyter_sandbox.orchestration._mcp_serve import answer

    point = namedtuple("point", "x y")
    code = """
from dataclasses import dataclass

@dataclass
class P:
    x: int
    y: list

items = [P(1, [opaque(), {2.5}]), {1.5}, frozenset({2}), len, P, b"x", point(), type(opaque())]
for item in items:
    print(repr(item))
items
"""
    tools = {"opaque": lambda: object(), "point": lambda: point(1, 2)}
    ran = orchestrate(code, tools=tools, type_check=False)
    found = answer(ran)
    printed = ran.stdout.splitlines()
    assert found["value"].pop(6) == [1, 2]  # data, as JSON carries it
    del printed[6]
    assert found["value"] == printed
