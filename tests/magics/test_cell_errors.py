"""Errors and interrupts as a person meets them in the cell.

Interrupts live in the kernel, so those tests run a real kernel (jupyter_client) and read its
iopub messages: the error output, and the final display that replaces the live widget.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable, Iterator
from html import escape as html_escape
from typing import Any

import pytest
from jupyter_client.manager import start_new_kernel

RUN_MIME = "application/vnd.jupyter-sandbox.run+json"
TRACE_MIME = "application/vnd.jupyter-sandbox.trace+json"


# -- a real kernel --------------------------------------------------------------------------


@pytest.fixture
def kernel() -> Iterator[tuple[Any, Any]]:
    manager, client = start_new_kernel(kernel_name="python3")
    client.execute_interactive("%load_ext jupyter_sandbox", timeout=60)
    try:
        yield manager, client
    finally:
        manager.shutdown_kernel(now=True)
        client.stop_channels()


def _until(client: Any, msg_id: str, predicate: Callable[[dict[str, Any]], bool]) -> list[dict]:
    """iopub messages of one request, up to the first for which ``predicate`` holds."""
    seen = []
    while True:
        msg = client.get_iopub_msg(timeout=300)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        seen.append(msg)
        if predicate(msg):
            return seen
        assert not _idle(msg), f"the cell ended first: {seen}"


def _idle(msg: dict[str, Any]) -> bool:
    return msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle"


def _interrupted(manager: Any, client: Any, msg_id: str) -> tuple[list[str], dict[str, Any] | None]:
    """Interrupt the kernel; the cell's error lines and the last record it displayed (None:
    it displayed none)."""
    manager.interrupt_kernel()
    rest = _until(client, msg_id, _idle)
    errors = [m["content"]["traceback"] for m in rest if m["msg_type"] == "error"]
    assert len(errors) == 1, errors
    records = [
        data[mime]
        for m in rest
        if m["msg_type"] in ("display_data", "update_display_data")
        for data in [m["content"]["data"]]
        for mime in (RUN_MIME, TRACE_MIME)
        if mime in data
    ]
    return errors[0], records[-1] if records else None


def _ours(docker_engine: Any, manager: Any) -> list[Any]:
    labels = [
        "jupyter-sandbox.kind=run",
        f"jupyter-sandbox.owner-pid={manager.provisioner.process.pid}",
    ]
    return docker_engine.containers.list(all=True, filters={"label": labels}, sparse=True)


@pytest.mark.docker
def test_interrupting_a_sandbox_run(kernel, docker_engine) -> None:
    manager, client = kernel
    msg_id = client.execute('%%sandbox --timeout 300\nprint("first", flush=True)\nimport time\n'
                            "time.sleep(300)\n")  # fmt: skip
    _until(client, msg_id, lambda m: "first" in m["content"].get("text", ""))
    running = {c.id for c in _ours(docker_engine, manager) if _runs_code(docker_engine, c.id)}
    assert running
    error, record = _interrupted(manager, client, msg_id)
    assert error == ["interrupted: container stopped and removed"]
    assert record is not None and record["status"] == "interrupted"
    assert not running & {c.id for c in _ours(docker_engine, manager)}  # before the error
    outputs = _execute(client, "%%sandbox --out x\nx = 2")  # the kernel goes on
    assert not [m for m in outputs if m["msg_type"] == "error"]


def _runs_code(docker_engine: Any, container_id: str) -> bool:
    """Whether the container runs a cell (a spare started for the next run only waits)."""
    processes = docker_engine.api.top(container_id)["Processes"] or []
    return any("runner.py" in " ".join(p) for p in processes)


def _build_containers(docker_engine: Any, nonce: str) -> list[Any]:
    """Build-step containers of the build whose packages carry ``nonce``."""
    every = docker_engine.api.containers(all=True)
    return [c for c in every if nonce in (c.get("Command") or "")]


@pytest.mark.docker
def test_interrupting_a_sandbox_build(kernel, docker_engine) -> None:
    manager, client = kernel
    nonce = str(uuid.uuid4().int % 10**9)
    msg_id = client.execute(f"%%sandbox --packages six!=0.0.{nonce}\nprint(1)")
    step = re.compile(r"step \d+ of \d+: installing six")
    _until(client, msg_id, lambda m: bool(step.search(json.dumps(m["content"]))))
    error, record = _interrupted(manager, client, msg_id)
    assert error == ["interrupted: image build stopped; the code did not run"]
    assert record is not None and record["status"] == "interrupted"
    assert record["attempts"] == 0
    assert not _ours(docker_engine, manager)
    for _ in range(200):  # the engine removes the stopped step's container (forcerm)
        if not _build_containers(docker_engine, nonce):
            break
        time.sleep(0.1)
    assert not _build_containers(docker_engine, nonce)
    images = docker_engine.images.list(filters={"label": "jupyter-sandbox.kind=env"})
    assert not [i for i in images if nonce in json.dumps(i.labels)]  # the build did not finish


BLOCKED_TOOL = """
import threading
from jupyter_sandbox import tool
release = threading.Event()

@tool
def block(x: int) -> int:
    print("blocked", flush=True)
    release.wait()
    return x
"""


def test_interrupting_orchestrate_in_a_sync_tool(kernel) -> None:
    manager, client = kernel
    client.execute_interactive(BLOCKED_TOOL, timeout=60)
    msg_id = client.execute("%%orchestrate\ny = block(1)\ny + 1")
    _until(client, msg_id, lambda m: "blocked" in m["content"].get("text", ""))
    error, record = _interrupted(manager, client, msg_id)
    (line,) = error  # one sentence, naming the abandoned call
    assert line.startswith("interrupted: ")
    assert "the call to block(), still running on the host, was abandoned" in line
    assert record is not None and record["status"] == "interrupted"
    (call,) = record["calls"]
    assert call["end"] is not None
    assert call["error"].startswith("Abandoned:")
    client.execute_interactive("release.set()", timeout=60)
    outputs = _execute(client, "%%orchestrate\nblock(2)")  # the kernel goes on
    assert not [m for m in outputs if m["msg_type"] == "error"]


def test_interrupting_orchestrate_while_the_code_computes(kernel) -> None:
    manager, client = kernel
    msg_id = client.execute('%%orchestrate --timeout 300\nprint("looping")\nwhile True:\n    pass')
    _until(client, msg_id, lambda m: "looping" in m["content"].get("text", ""))
    error, record = _interrupted(manager, client, msg_id)
    (line,) = error
    assert line.startswith("interrupted: ") and line.endswith(" was stopped")
    assert record is None  # no tool call: the error line says it all, no "0 tool calls"


def test_a_tools_frame_names_its_cell_in_a_real_kernel(kernel) -> None:
    # ipykernel's cells are files like /tmp/ipykernel_10169/3594171636.py
    _, client = kernel
    defined = _execute(
        client, "from jupyter_sandbox import tool\n@tool\ndef bad(x: int) -> int:\n    1 / 0"
    )
    (count,) = [
        m["content"]["execution_count"] for m in defined if m["msg_type"] == "execute_input"
    ]
    outputs = _execute(client, "%%orchestrate\nbad(1)")
    (error,) = [m["content"]["traceback"] for m in outputs if m["msg_type"] == "error"]
    shown = "\n".join(error)
    assert f"  Cell In[{count}], line 4, in bad\n" in shown
    assert "ipykernel_" not in shown
    (record,) = [
        m["content"]["data"][TRACE_MIME]
        for m in outputs
        if m["msg_type"] in ("display_data", "update_display_data")
        and TRACE_MIME in m["content"].get("data", {})
    ][-1:]
    assert f"Cell In[{count}], line 4, in bad" in record["calls"][0]["host_traceback"]


def _execute(client: Any, code: str) -> list[dict[str, Any]]:
    msg_id = client.execute(code)
    return _until(client, msg_id, _idle)


# -- %%sandbox errors through the real shell ------------------------------------------------


def _run(shell: Any, capsys: Any, cell: str) -> tuple[BaseException | None, str]:
    """Run a cell; its exception and everything the cell showed (stdout and stderr)."""
    result = shell.run_cell(cell)
    shown = capsys.readouterr()
    return result.error_in_exec, shown.out + shown.err


@pytest.mark.docker
def test_sandbox_traceback_shows_the_users_line_not_the_runner(shell, capsys) -> None:
    error, shown = _run(shell, capsys, "%%sandbox\nx = 1\nprint(y)")
    assert 'File "<cell>", line 3, in <module>\n    print(y)\n' in shown  # the editor's line 3
    assert "runner.py" not in shown
    assert "NameError: name 'y' is not defined" in str(error)
    assert shown.count("exited with code 1") == 1  # the error output's; the record has none


@pytest.mark.docker
def test_sandbox_without_network_says_which_option(shell, capsys) -> None:
    cell = '%%sandbox\nimport urllib.request\nurllib.request.urlopen("http://example.com")'
    error, shown = _run(shell, capsys, cell)
    assert str(error).endswith(
        "the sandbox has no network: allow a host with network=['HOST']"
        " (or network='bridge', the whole internet)"
    )
    assert "network='bridge'" not in shown  # the cell says the option
    # the cell: the traceback (its stderr) says the URLError once, the error output the exit
    # code, and the advice on a line of its own
    said = shown[shown.index("NonZeroExit") :].splitlines()[:2]
    assert said == [
        "NonZeroExit: exited with code 1 (its stderr above says why)",
        "the sandbox has no network: allow a host with --allow-net HOST"
        " (or --network bridge, the whole internet)",
    ]
    assert "name resolution" not in "".join(line for line in shown.splitlines() if "Exit" in line)
    start = shown.index("Traceback")
    traceback = shown[start : shown.index("URLError", start)]
    assert "urllib/request.py" not in traceback  # the cell's own line only
    assert 'line 3, in <module>\n    urllib.request.urlopen("http://example.com")' in traceback


@pytest.mark.docker
def test_sandbox_out_of_memory_says_what_to_raise(shell, capsys) -> None:
    cell = "%%sandbox --memory 64m\nx = []\nwhile True:\n    x.append(bytearray(10**7))"
    error, shown = _run(shell, capsys, cell)
    assert str(error).endswith("(raise it with resources=Resources(memory=...))")
    assert "OutOfMemory: out of memory: killed at the 64m limit" in shown
    assert "(raise it with --memory, e.g. --memory 2g)" in shown
    assert "Resources(" not in shown


@pytest.mark.docker
def test_sandbox_timeout_says_which_option(shell, capsys) -> None:
    error, shown = _run(shell, capsys, "%%sandbox --timeout 1\nimport time\ntime.sleep(60)")
    assert str(error) == "timed out after 1 s (raise it with create(timeout=...))"  # the engine's
    assert "SandboxTimeout: timed out after 1 s (raise it with --timeout)" in shown


@pytest.mark.docker
def test_sandbox_missing_module_says_which_option(shell, capsys) -> None:
    error, shown = _run(shell, capsys, "%%sandbox\nimport yaml")
    assert str(error).endswith("install the package that provides 'yaml' with packages=[...]")
    assert "install the package that provides 'yaml' with --packages" in shown


# -- %%orchestrate errors through the real shell: each once, at the editor's line -----------

TOOLS = """
from jupyter_sandbox import tool

@tool
def add(a: int, b: int) -> int:
    return a + b

@tool
async def stats(xs: list[float]) -> tuple[float, int]:
    return (sum(xs), len(xs))

@tool
def boom(x: int) -> int:
    raise ValueError(f"bad {x}")

@tool
async def fetch_page(n: int) -> str:
    return "a b"

@tool
def word_count(text: str) -> int:
    return len(text.split())
"""


@pytest.fixture
def tools(shell: Any) -> Any:
    assert shell.run_cell(TOOLS).success
    return shell


def test_type_check_error_once_with_caret_at_the_editors_line(tools, capsys) -> None:
    error, shown = _run(tools, capsys, '%%orchestrate\nx = 1\ny = add("a", 2)\ny')
    assert error is not None
    block = '  File "<cell>", line 3\n    y = add("a", 2)\n            ^^^\n'
    assert shown.count(block) == 1  # %%orchestrate is line 1, as in the editor
    assert shown.count("Argument to function `add` is incorrect") == 1
    assert "cell.py" not in shown


def test_async_tool_called_without_await_says_so(tools, capsys) -> None:
    _, shown = _run(tools, capsys, "%%orchestrate\nstats([1.0, 2.0])\n1")
    assert shown.count("`stats(...)` is async: write `await stats(...)`") == 1
    assert "CoroutineType" not in shown


def test_a_variable_holding_an_unawaited_call_names_the_call_and_its_line(tools, capsys) -> None:
    # the caret goes under the call (where `await` goes), not the variable
    code = "%%orchestrate\nn = 1\ntext = fetch_page(2)\nalias = text\nword_count(alias)"
    error, shown = _run(tools, capsys, code)
    assert error is not None
    block = '  File "<cell>", line 3\n    text = fetch_page(2)\n           ^^^^^^^^^^^^^\n'
    assert shown.count(block) == 1
    assert (
        shown.count(
            "`fetch_page(...)` is async: write `await fetch_page(2)`"
            " (`alias` holds the call, not its result; line 5 uses it)"
        )
        == 1
    )
    assert "CoroutineType" not in shown
    assert "was not awaited" not in shown


def test_tool_error_is_one_traceback_through_the_tool(tools, capsys) -> None:
    _, shown = _run(tools, capsys, "%%orchestrate\nx = 1\nboom(x)")
    assert shown.count('raise ValueError(f"bad {x}")') == 1
    cell_frame = shown.index('File "<cell>", line 3, in <module>\n    boom(x)')
    assert cell_frame < shown.index(", in boom\n")  # the cell's frame, then the tool's
    assert shown.count("ValueError: bad 1") == 2  # the trace's row and the error's last line
    assert shown.rstrip().endswith("ToolError: tool 'boom' raised ValueError: bad 1")
    # the tool's frame names the cell it was defined in, as IPython does
    defined_in = tools.compile.format_code_name(boom_file(tools))
    assert defined_in is not None
    assert f"  {' '.join(defined_in)}, line 13, in boom\n" in shown
    assert boom_file(tools) not in shown


def boom_file(shell: Any) -> str:
    """The file IPython made up for the cell that defined the tool ``boom``."""
    return shell.user_ns["boom"].func.__code__.co_filename


def test_the_record_of_a_failed_call_names_the_cell_too(tools) -> None:
    result = tools.run_cell("%%orchestrate\nboom(2)")
    record = result.error_in_exec.result.to_record()
    (call,) = record["calls"]
    label = " ".join(tools.compile.format_code_name(boom_file(tools)))
    assert f"{label}, line 13, in boom" in call["host_traceback"]
    assert boom_file(tools) not in call["host_traceback"]


@pytest.mark.parametrize(
    ("options", "body", "option"),
    [
        ("--max-calls 2", "for i in range(5):\n    add(i, i)", "--max-calls"),
        ("--max-output 1", "s = 'x' * 1000\nfor i in range(2000):\n    print(s)", "--max-output"),
        ("--max-result 1", "'x' * 2000000", "--max-result"),
    ],
)
def test_limit_errors_name_their_option(tools, capsys, options, body, option) -> None:
    error, shown = _run(tools, capsys, f"%%orchestrate {options}\n{body}")
    assert f"raise it with {option}" in shown
    assert "=" not in shown.split("raise it with")[1]  # the option, not "Limits(max_calls=...)"
    assert "raise it with Limits(" in str(error)  # the engine's own words, kept on the error


def test_the_tool_call_limit_does_not_advise_resuming(tools, capsys) -> None:
    """A resumed run answers the calls it made again and stops at the same limit: the way
    on is the limit's own option, not ``--resume``."""
    _, shown = _run(tools, capsys, "%%orchestrate --max-calls 2\nfor i in range(5):\n    add(i, i)")
    assert "raise it with --max-calls" in shown
    assert "--resume" not in shown
    _, shown = _run(tools, capsys, "%%orchestrate\nadd(1, 2)\nboom(3)")
    assert "run this cell again with %%orchestrate --resume" in shown  # other errors still do


def test_type_check_error_names_the_option_that_skips_it(tools, capsys) -> None:
    error, shown = _run(tools, capsys, '%%orchestrate\nadd("a", 2)')
    assert "(--no-type-check skips the check)" in shown
    assert "type_check=False" not in shown
    assert "(type_check=False skips the check)" in str(error)


def test_saved_notebook_shows_each_error_once() -> None:
    """A notebook run headless (nbclient) and saved: the failed cell's record and its error
    output do not repeat each other, and the error output has the caret at the editor's line."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext jupyter_sandbox\n" + TOOLS),
        nbformat.v4.new_code_cell('%%orchestrate\nx = 1\ny = add("a", 2)'),
        nbformat.v4.new_code_cell("%%orchestrate\nx = 1\nboom(x)"),
    ]
    NotebookClient(nb, kernel_name="python3", allow_errors=True, timeout=120).execute()
    for cell, said in ((nb.cells[1], "Argument to function `add`"), (nb.cells[2], "bad {x}")):
        (error,) = [o for o in cell.outputs if o.output_type == "error"]
        records = [o for o in cell.outputs if TRACE_MIME in o.get("data", {})]
        if cell is nb.cells[1]:  # a type error before any call: the error alone, no record
            assert records == []
            assert "\n".join(error.traceback).count(said) == 1
            continue
        assert records and records[-1].data[TRACE_MIME]["raised"] is True
        assert said not in records[-1].data["text/plain"]  # the record leaves it to the error
        html = records[-1].data["text/html"]
        # in HTML only a failed call's own host traceback, collapsed in its row (a caught tool
        # error has no error output: the row is its home)
        for found in re.finditer(re.escape(html_escape(said)), html):
            opened = html.rfind("<details", 0, found.start())
            assert opened > html.rfind("</details>", 0, found.start())
            assert not html[opened:].startswith("<details open")
        assert "\n".join(error.traceback).count(said) == 1
    (typed,) = [o for o in nb.cells[1].outputs if o.output_type == "error"]
    assert '  File "<cell>", line 3\n    y = add("a", 2)\n            ^^^' in "\n".join(
        typed.traceback
    )
