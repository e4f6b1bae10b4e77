"""Sandboxes as tools: orchestration code in Monty calls containers on the real Docker engine."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from jupyter_sandbox import (
    Interrupted,
    OrchestrationError,
    ToolError,
    TypeCheckError,
    create,
    orchestrate,
    orchestrator,
    tool,
)
from jupyter_sandbox.orchestration import build_stubs
from jupyter_sandbox.orchestration._sandbox_tool import SandboxTool

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("no_leaked_containers")]

SLOW_DOUBLE = "import time\ntime.sleep(1)\nresult = x * 2"


@pytest.fixture(scope="module")
def double():
    return tool(
        create("double", code=SLOW_DOUBLE, inputs={"x": int}, outputs={"result": int}),
        concurrency=3,
    )


pytestmark = pytest.mark.usefixtures("tool_registry")  # the tools each test registers are its own


def test_a_sandbox_tool_has_the_sandbox_signature_in_its_stub(double):
    assert isinstance(double, SandboxTool) and double.is_async
    assert "async def double(x: int) -> int: ..." in build_stubs({"double": double}, {})
    several = tool(create("pair", code="a = 1\nb = 'x'", outputs={"a": int, "b": str}))
    assert "async def pair() -> tuple[int, str]: ..." in build_stubs({"pair": several}, {})


def test_gather_runs_containers_concurrently_and_the_trace_holds_each_run(double):
    result = orchestrate(
        "import asyncio\nawait asyncio.gather(double(1), double(2), double(x=3))", tools=[double]
    )
    assert result.value == [2, 4, 6]
    calls = result.trace
    assert all(c.start < min(o.end for o in calls) for c in calls)  # all three overlapped
    for call, x in zip(calls, (1, 2, 3), strict=True):
        (run,) = call.children
        assert run["kind"] == "sandbox" and run["status"] == "ok"
        assert run["outputs"]["result"]["preview"] == str(2 * x)
    assert result.to_record()["calls"][0]["children"][0]["name"] == "double"


def test_concurrency_bounds_the_containers_at_once():
    one_at_a_time = tool(
        create("serial", code=SLOW_DOUBLE, inputs={"x": int}, outputs={"result": int}),
        concurrency=1,
    )
    result = orchestrate(
        "import asyncio\nawait asyncio.gather(serial(1), serial(2))", tools=[one_at_a_time]
    )
    first, second = sorted((c.children[0] for c in result.trace), key=lambda r: r["duration"])
    # With one slot, the second run waits for the first: its call lasts about two runs.
    calls = sorted(result.trace, key=lambda c: c.end)
    assert calls[1].end - calls[1].start > first["duration"] + second["duration"] * 0.5


def test_wrong_input_type_is_rejected_before_any_container_starts(double):
    with pytest.raises(TypeCheckError, match="double"):
        orchestrate("await double('a')", tools=[double])


def test_a_failing_container_raises_in_the_sandbox_with_its_record():
    failing = tool(create("failing", code="raise SystemExit(3)", outputs={"y": int}))
    result = orchestrate(
        "try:\n    await failing()\nexcept Exception as e:\n    r = str(e)\nr", tools=[failing]
    )
    assert "exit" in result.value.lower() and "3" in result.value
    (run,) = result.trace[0].children
    assert run["status"] == "error" and run["exit_code"] == 3
    with pytest.raises(ToolError) as info:
        orchestrate("await failing()", tools=[failing])
    assert info.value.tool == "failing"


def test_sandbox_magic_name_then_tool_in_orchestrate(shell):
    assert shell.run_cell("n = 2").success
    made = shell.run_cell(
        "%%sandbox --name triple --in n:int --out tripled:int --quiet\ntripled = n * 3"
    )
    assert made.success
    assert shell.user_ns["tripled"] == 6
    assert shell.run_cell("from jupyter_sandbox import tool\ntool(triple)").success
    done = shell.run_cell("%%orchestrate --quiet\nawait triple(n=5)")
    assert done.success, done.error_in_exec
    assert done.result == 15


def test_a_gated_sandbox_tool_an_orchestrator_calls_asks_the_calling_runs_approver():
    """The orchestrator's nested run asks the approver of the run that called it: refused,
    no container runs (the call holds no run); approved, it runs."""
    triple = tool(
        create("triple", code="result = x * 3", inputs={"x": int}, outputs={"result": int}),
        approve=True,
    )

    @orchestrator(tools=[triple])
    async def tripled(x: int) -> int:
        return await triple(x)

    with pytest.raises(ToolError, match=r"triple\(\) was rejected") as refused:
        orchestrate("await tripled(2)", tools=[tripled], approver=lambda call: False)
    assert refused.value.result is not None
    (outer,) = refused.value.result.trace
    (nested,) = outer.children
    assert [child["children"] for child in nested["calls"]] == [[]]  # no container run
    done = orchestrate("await tripled(2)", tools=[tripled], approver=lambda call: True)
    assert done.value == 6


def test_calling_without_await_is_a_type_error(double):
    with pytest.raises(OrchestrationError, match=r"is async: write `await double\(\.\.\.\)`"):
        orchestrate("double(1)", tools=[double])


def test_interrupting_orchestration_stops_and_removes_running_containers(docker_engine):
    sleepy = tool(create("sleepy", code="import time\ntime.sleep(120)", outputs={"x": int}))
    timer = threading.Timer(3.0, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    with pytest.raises(Interrupted):
        orchestrate("import asyncio\nawait asyncio.gather(sleepy(), sleepy())", tools=[sleepy])
    # Nothing of this run is still running: the fixture then checks nothing is left at all.
    running = docker_engine.containers.list(
        filters={
            "label": ["jupyter-sandbox.name=sleepy", f"jupyter-sandbox.owner-pid={os.getpid()}"]
        }
    )
    assert [c for c in running if c.attrs["State"]["Running"]] == []
