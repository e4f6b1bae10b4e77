"""Behaviour a person meets off the happy path: resuming where a
run failed, calling a named sandbox, asking for help, ``--out`` of an assignment, and what a
call's recorded times mean. Real Monty workers, a real IPython shell, a real kernel (for the
cell ids JupyterLab sends) and the real Docker engine where a sandbox runs."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from IPython.core.error import UsageError
from jupyter_client.manager import KernelManager

from jupyter_sandbox import create, tool
from jupyter_sandbox.errors import ToolError, TypeCheckError
from jupyter_sandbox.events import CallFinished, CallStarted, Event
from jupyter_sandbox.orchestration import Journal, Tool, orchestrate

FLAKY = """
from jupyter_sandbox import tool
attempts = []

@tool
def step(n: int) -> int:
    attempts.append(n)
    if n == 2 and len(attempts) < 4:
        raise RuntimeError("transient failure")
    return n * n
"""

# -- 3. resume --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def kernel() -> Iterator[Any]:
    """A real ipykernel with the extension loaded: the one place a cell id arrives."""
    km = KernelManager(kernel_name="python3")
    km.start_kernel()
    client = km.client()
    client.start_channels()
    client.wait_for_ready(timeout=60)
    run(client, "%load_ext jupyter_sandbox")
    yield client
    client.stop_channels()
    km.shutdown_kernel(now=True)


def run(client: Any, code: str, cell_id: str | None = None) -> dict[str, Any]:
    """Execute ``code`` as JupyterLab does, with the cell's id in the request's metadata;
    return the reply status, the streams and the value shown."""
    content = {"code": code, "silent": False, "store_history": True, "user_expressions": {}}
    metadata = {"cellId": cell_id} if cell_id else {}
    msg = client.session.msg("execute_request", content, metadata=metadata)
    client.shell_channel.send(msg)
    msg_id = msg["header"]["msg_id"]
    reply = client.get_shell_msg(timeout=60)
    while reply["parent_header"].get("msg_id") != msg_id:
        reply = client.get_shell_msg(timeout=60)
    seen: dict[str, Any] = {"status": reply["content"]["status"], "stdout": "", "stderr": ""}
    while True:
        out = client.get_iopub_msg(timeout=60)
        if out["parent_header"].get("msg_id") != msg_id:
            continue
        kind, body = out["msg_type"], out["content"]
        if kind == "status" and body["execution_state"] == "idle":
            return seen
        if kind == "stream":
            seen[body["name"]] += body["text"]
        elif kind == "execute_result":
            seen["value"] = body["data"]["text/plain"]


def test_resume_in_another_cell_answers_from_the_failed_run_of_the_same_code(kernel):
    """The notebook's lesson in JupyterLab: the cell that fails and the cell that resumes are
    two cells (two ids) with the same code."""
    assert run(kernel, FLAKY)["status"] == "ok"
    body = "[step(0), step(1), step(2)]"
    assert run(kernel, "%%orchestrate --quiet\n" + body, cell_id="failing")["status"] == "error"
    resumed = run(kernel, "%%orchestrate --quiet --resume\n" + body, cell_id="resuming")
    assert resumed["status"] == "ok" and resumed["value"] == "[0, 1, 4]"
    assert resumed["stderr"] == ""  # there was something to resume from: no warning
    assert run(kernel, "attempts")["value"] == "[0, 1, 2, 2]"


def test_resume_with_nothing_to_resume_from_says_so_in_one_line_and_runs(kernel):
    assert run(kernel, FLAKY)["status"] == "ok"
    seen = run(kernel, "%%orchestrate --quiet --resume\nstep(7)", cell_id="fresh")
    assert seen["status"] == "ok" and seen["value"] == "49"
    assert seen["stderr"].count("\n") == 1
    assert seen["stderr"].startswith("--resume: no earlier run of this cell")
    assert run(kernel, "attempts")["value"] == "[7]"


def test_resume_prefers_the_cells_own_failed_run(kernel):
    """Each cell resumes its own failure first; a cell without one resumes the latest failed
    run of the same code."""
    tools = (
        "from jupyter_sandbox import tool\nstamps, gate = [], {'open': False}\n"
        "@tool\ndef stamp() -> int:\n    stamps.append(1)\n    return len(stamps)\n"
        "@tool\ndef through() -> int:\n    if not gate['open']:\n        raise OSError('shut')\n"
        "    return 0"
    )
    assert run(kernel, tools)["status"] == "ok"
    body = "[stamp(), through()]"
    first, resume = "%%orchestrate --quiet\n" + body, "%%orchestrate --quiet --resume\n" + body
    assert run(kernel, first, cell_id="mine")["status"] == "error"  # stamp() gave 1
    assert run(kernel, first, cell_id="other")["status"] == "error"  # stamp() gave 2
    run(kernel, "gate['open'] = True")
    assert run(kernel, resume, cell_id="mine")["value"] == "[1, 0]"
    assert run(kernel, resume, cell_id="third")["value"] == "[2, 0]"
    assert run(kernel, "len(stamps)")["value"] == "2"  # neither resumed run called stamp()


def test_gather_resumes_every_completed_call_even_after_the_failed_one():
    """``gather(a, b, c)`` where ``b`` fails after ``c`` finished: resuming makes only ``b``
    again (the replay does not stop at the failed entry)."""
    made: list[str] = []
    broken = {"now": True}
    c_done = asyncio.Event()

    async def a() -> str:
        made.append("a")
        return "A"

    async def b() -> str:
        made.append("b")
        await c_done.wait()  # fail only once c has finished
        if broken["now"]:
            raise RuntimeError("b failed")
        return "B"

    async def c() -> str:
        made.append("c")
        c_done.set()
        return "C"

    code = "import asyncio\nawait asyncio.gather(a(), b(), c())"
    journal = Journal()
    with pytest.raises(ToolError):
        orchestrate(code, tools=[a, b, c], journal=journal)
    assert [call.status for call in journal.calls] == ["ok", "error", "ok"]
    broken["now"] = False
    made.clear()
    result = orchestrate(code, tools=[a, b, c], journal=journal, resume=True)
    assert result.value == ["A", "B", "C"]
    assert made == ["b"]
    assert [call.replayed for call in result.trace] == [True, False, True]


def test_calls_a_stopped_run_leaves_behind_end_as_cancelled():
    release = threading.Event()

    async def slow() -> int:
        await asyncio.to_thread(release.wait, 60)
        return 1

    async def boom() -> int:
        raise ValueError("boom")

    code, journal = "import asyncio\nawait asyncio.gather(slow(), boom())", Journal()
    try:
        with pytest.raises(ToolError) as failed:
            orchestrate(code, tools=[slow, boom], journal=journal)
    finally:
        release.set()
    assert failed.value.result is not None
    slow_call = failed.value.result.trace[0]
    assert slow_call.status == "cancelled"
    assert slow_call.end is not None and slow_call.error is not None
    record = failed.value.result.to_record()["calls"][0]
    assert record["cancelled"] is True and record["end"] is not None
    assert journal.calls[0].status == "cancelled"  # a resumed run makes it again


# -- 9. a named sandbox takes its inputs by position or by name -------------------------------


@pytest.mark.docker
@pytest.mark.usefixtures("no_leaked_containers")
def test_a_named_sandbox_is_called_like_its_tool(shell, docker_engine):
    shell.user_ns.update(a=10.0, b=4.0)
    made = shell.run_cell("%%sandbox --quiet --name diff --in a,b --out d\nd = a - b")
    assert made.success and shell.user_ns["d"] == 6.0
    for call in ("diff(10.0, 4.0)", "diff(b=4.0, a=10.0)", "diff(10.0, b=4.0)"):
        assert shell.run_cell(call).result == 6.0, call
    # Calls that do not fit: one line of ours naming the inputs, and no container.
    for call, problem in (
        ("diff(1.0, 2.0, 3.0)", "3 given by position"),
        ("diff(1.0, a=2.0)", "'a' given twice; 'b' missing"),
        ("diff(1.0)", "'b' missing"),
        ("diff(1.0, 2.0, c=3.0)", "no input named 'c'"),
    ):
        error = shell.run_cell(call).error_in_exec
        assert isinstance(error, UsageError), call
        assert str(error) == (
            f"diff() takes a, b (by position in that order, or by name): {problem}"
        )
    # The same sandbox as a tool, in both ways, and the same line for a call that does not
    # fit (past the type checker, which would stop it first).
    tool(shell.user_ns["diff"])
    gathered = shell.run_cell(
        "%%orchestrate --quiet\nimport asyncio\n"
        "await asyncio.gather(diff(10.0, 4.0), diff(b=1.0, a=3.0))"
    )
    assert gathered.result == [6.0, 2.0]
    wrong = shell.run_cell(
        "%%orchestrate --quiet --no-type-check\n"
        "try:\n    await diff(1.0, 2.0, 3.0)\nexcept TypeError as e:\n    m = str(e)\nm"
    )
    assert wrong.result == (
        "diff() takes a, b (by position in that order, or by name): 3 given by position"
    )


# -- 10. --help --------------------------------------------------------------------------------


@pytest.mark.parametrize("magic", ["orchestrate", "sandbox", "codemode"])
def test_help_prints_the_options_and_runs_nothing(shell, capsys, magic):
    shell.user_ns["ran"] = []
    tool(name="mark")(lambda: shell.user_ns["ran"].append(magic))
    # The body would run a tool, or fail (no container engine is asked, no model is set).
    outcome = shell.run_cell(f"%%{magic} --help --bogus\nmark()")
    assert outcome.success and outcome.result is None
    assert shell.user_ns["ran"] == []
    shown = capsys.readouterr().out
    assert shown.lstrip().startswith(f"%%{magic} [-h]")
    assert "-h, --help" in shown and "show these options and run nothing" in shown
    assert "--quiet" in shown
    shell.run_cell(f"%%{magic}?")  # IPython's own help shows the cell magic, with %%
    assert f"%%{magic} [-h]" in capsys.readouterr().out
    # Alone in a cell, as a person asks (IPython refuses a cell magic without a body).
    assert shell.run_cell(f"%%{magic} -h").success
    assert capsys.readouterr().out.lstrip().startswith(f"%%{magic} [-h]")


@pytest.mark.parametrize("magic", ["orchestrate", "sandbox", "codemode"])
def test_help_shows_its_example_as_plain_words_and_an_indented_cell(shell, capsys, magic):
    """Help is read as text, not reStructuredText: a literal-block ``::`` shows as is."""
    assert shell.run_cell(f"%%{magic} -h").success
    shown = capsys.readouterr().out
    assert "::" not in shown, shown
    assert f"Example:\n\n    %%{magic} --" in shown, shown


# -- 11. --out of a last-line assignment -----------------------------------------------------


@pytest.fixture
def add(shell) -> Tool:
    def add(x: int, y: int) -> int:
        return x + y

    return tool(add)


@pytest.mark.parametrize(
    "last", ["m = add(1, 2)", "a, m = 0, add(1, 2)", "m: int = add(1, 2)", "m = 0\nm += add(1, 2)"]
)
def test_out_stores_what_the_last_line_assigns_to_it(shell, capsys, add, last):
    shell.user_ns.pop("m", None)
    outcome = shell.run_cell(f"%%orchestrate --quiet --out m\n{last}")
    assert outcome.success
    assert shell.user_ns["m"] == 3
    assert capsys.readouterr().err == ""


def test_out_of_a_cell_ending_in_another_statement_warns_in_one_line(shell, capsys, add):
    outcome = shell.run_cell("%%orchestrate --quiet --out m\nfor i in range(2):\n    m = add(i, 1)")
    assert outcome.success and shell.user_ns["m"] is None
    warning = capsys.readouterr().err
    assert warning.count("\n") == 1
    assert warning.startswith("--out m: the cell ends in a statement that does not assign m")


def test_out_keeps_the_record_code_as_written(shell, add):
    shown: list[dict[str, Any]] = []
    shell.display_pub.publish = lambda data, **_: shown.append(data)
    try:
        assert shell.run_cell("%%orchestrate --out m\nm = add(1, 2)").success
    finally:
        del shell.display_pub.publish
    records = [d["application/vnd.jupyter-sandbox.trace+json"] for d in shown if d]
    assert records[-1]["code"].rstrip("\n") == "m = add(1, 2)"  # no line of ours added


# -- 12. what a call's times mean -------------------------------------------------------------


def test_a_calls_start_comes_after_the_views_work_for_it():
    """A slow view (the first render in a fresh kernel imports and draws) is not the tool's
    time: the call is timed from when its event was handled."""
    handled: list[float] = []
    entered: list[float] = []

    def on_event(event: Event) -> None:
        if isinstance(event, CallStarted):
            time.sleep(0.05)
            handled.append(time.perf_counter())

    def probe() -> int:
        entered.append(time.perf_counter())
        return 1

    result = orchestrate("probe()", tools=[probe], on_event=on_event)
    call = result.trace[0]
    assert handled[0] <= call.origin + call.start <= entered[0]


def test_the_type_check_is_not_in_the_trace_and_runs_none_of_the_code():
    """The check has a feed of its own before the run's time origin: the code still runs
    exactly once (its print, its calls) and a rejected cell still names its own line."""
    made: list[int] = []

    def probe(n: int) -> int:
        made.append(n)
        return n

    result = orchestrate("print('once')\nprobe(1)\nprobe(2)", tools=[probe])
    assert result.stdout == "once\n" and made == [1, 2]
    with pytest.raises(TypeCheckError) as rejected:
        orchestrate("probe(1)\nprobe('two')", tools=[probe])
    assert made == [1, 2]
    assert "File \"<cell>\", line 2\n    probe('two')" in str(rejected.value)


@pytest.mark.docker
@pytest.mark.usefixtures("no_leaked_containers")
def test_queue_time_is_recorded_apart_from_the_containers_own_time(docker_engine):
    """Two calls through one slot: the second waits for the first's container, and that wait
    is ``queued``, not its duration; while it waits it is queued, not running."""
    nap = create("nap", code="import time\ntime.sleep(n)\nout = n", inputs={"n": float},
                 outputs={"out": float})  # fmt: skip
    states: list[tuple[int, str]] = []

    def on_event(event: Event) -> None:
        if isinstance(event, CallFinished):
            states.append((event.call.call_id, event.call.status))

    code = "import asyncio\nawait asyncio.gather(nap(0.5), nap(0.5))"
    result = orchestrate(code, tools=[tool(nap, concurrency=1)], on_event=on_event)
    first, second = result.trace
    assert first.queued == 0.0 and second.queued is not None and second.queued > 0
    container = first.children[0]["duration"]
    # The second got its slot only once the first's container had run.
    assert second.start + second.queued >= first.start + container
    assert second.duration == second.end - second.start - second.queued
    assert [s for _, s in states] == ["ok", "ok"]
    record = result.to_record()["calls"]
    assert record[1]["queued"] == second.queued and record[0]["queued"] == 0.0


@pytest.mark.docker
@pytest.mark.usefixtures("no_leaked_containers")
def test_sandbox_calls_resume_and_cancel_with_their_container_records(docker_engine):
    """A finished sandbox call is answered from the journal (with the record of the container
    that answered it); one the failure cancelled ends ``cancelled`` with its container's."""
    box = create("box", code="import time\ntime.sleep(n)\nout = n", inputs={"n": float},
                 outputs={"out": float})  # fmt: skip
    quick_done = threading.Event()

    def on_event(event: Event) -> None:
        if isinstance(event, CallFinished) and event.call.args == (0.0,):
            quick_done.set()

    async def fails() -> int:
        await asyncio.to_thread(quick_done.wait, 120)
        raise RuntimeError("after the quick box")

    tools = [tool(box), fails]
    code = "import asyncio\nawait asyncio.gather(box(0.0), fails(), box(60.0))"
    journal = Journal()
    with pytest.raises(ToolError) as first:
        orchestrate(code, tools=tools, journal=journal, on_event=on_event)
    assert first.value.result is not None
    quick, _, long = first.value.result.trace
    assert quick.status == "ok" and long.status == "cancelled"
    assert len(long.children) == 1 and long.children[0]["status"] != "ok"
    quick_done.clear()
    with pytest.raises(ToolError) as again:
        orchestrate(code, tools=tools, journal=journal, resume=True, on_event=on_event)
    assert again.value.result is not None
    replayed = again.value.result.trace[0]
    assert replayed.replayed and replayed.result == 0.0
    assert replayed.children == quick.children  # no new container: the first run's record
