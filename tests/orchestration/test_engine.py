"""The orchestration engine against real Monty workers (no IPython)."""

from __future__ import annotations

import asyncio
import os
import signal
import threading

import pytest

from jupyter_sandbox import (
    Interrupted,
    LimitExceeded,
    Limits,
    OrchestrationError,
    SandboxConfigError,
    Tool,
    ToolError,
    TypeCheckError,
    orchestrate,
    orchestrate_async,
    orchestrate_local,
)
from jupyter_sandbox.events import CallFinished, CallStarted, Output
from jupyter_sandbox.orchestration import (
    Journal,
    ToolCache,
    ToolRegistry,
    build_stubs,
    registry,
    tool,
)


def add(x: int, y: int) -> int:
    return x + y


def fail(message: str) -> int:
    raise ValueError(message)


async def slow(x: int) -> int:
    await asyncio.sleep(0.2)
    return x


class Frame:
    """Stands in for a DataFrame: any object Monty cannot hold as data."""

    def __init__(self, rows: int) -> None:
        self.rows = rows
        self.secret = "do not read"


def load(rows: int) -> Frame:
    return Frame(rows)


def count(frame: Frame) -> int:
    return frame.rows


TOOLS = [add, fail, slow, load, count]


def run(code: str, **kwargs):
    return orchestrate(code, tools=kwargs.pop("tools", TOOLS), **kwargs)


def test_last_expression_is_the_value_and_inputs_are_bound():
    result = run("add(x, y) * 2", inputs={"x": 1, "y": 2})
    assert result.value == 6
    assert [c.tool for c in result.trace] == ["add"]
    assert result.trace[0].args == (1, 2)
    assert result.trace[0].result == 3


def test_cell_ending_in_a_statement_gives_none():
    assert run("z = add(1, 2)").value is None


def test_print_goes_to_stdout_and_streams_as_events():
    events = []
    result = run("print('a')\nprint('b', add(1, 1))", on_event=events.append)
    assert result.stdout == "a\nb 2\n"
    outputs = "".join(e.text for e in events if isinstance(e, Output))
    assert outputs == "a\nb 2\n"
    kinds = [type(e) for e in events if not isinstance(e, Output)]
    assert kinds == [CallStarted, CallFinished]


def test_unknown_function_is_a_name_error_listing_the_tools():
    with pytest.raises(OrchestrationError, match="NameError") as info:
        run("launch_missiles()", type_check=False)
    assert "add, count, fail, load, slow" in str(info.value)


def test_only_the_given_tools_are_callable():
    with pytest.raises(OrchestrationError, match="the tools this cell can call are: add"):
        run("fail('x')", tools=[add], type_check=False)


def test_a_tool_referenced_by_name_can_be_called_later():
    result = run("f = add\nf(2, 3)", type_check=False)
    assert result.value == 5
    assert result.trace[0].tool == "add"


def test_async_tools_run_concurrently_under_gather():
    result = run("import asyncio\nawait asyncio.gather(slow(1), slow(2), slow(3))")
    assert result.value == [1, 2, 3]
    calls = sorted(result.trace, key=lambda c: c.start)
    # Overlap, read from the trace: every call started before the first one ended.
    assert all(c.start < calls[0].end for c in calls)


def test_an_awaited_async_tool_returns_its_value():
    assert run("r = await slow(7)\nr + 1").value == 8


def test_tool_exception_can_be_caught_in_the_sandbox():
    code = "try:\n    fail('nope')\nexcept ValueError as e:\n    r = 'caught ' + str(e)\nr"
    result = run(code)
    assert result.value == "caught nope"
    assert result.trace[0].error == "ValueError: nope"


def test_uncaught_tool_exception_names_cell_line_and_keeps_host_traceback():
    with pytest.raises(ToolError) as info:
        run("x = 1\n\nfail('boom')")
    err = info.value
    assert err.tool == "fail"
    assert 'File "<cell>", line 3' in err.sandbox_traceback
    assert "raise ValueError(message)" in err.host_traceback
    assert "_driver.py" not in err.host_traceback  # starts in the tool, not in our loop
    assert err.result is not None
    assert err.result.trace[0].host_traceback == err.host_traceback


def test_custom_exception_classes_keep_their_name_and_base():
    class QuotaExceeded(ValueError):
        pass

    def limited() -> int:
        raise QuotaExceeded("try later")

    code = "try:\n    limited()\nexcept ValueError as e:\n    r = str(e)\nr"
    assert orchestrate(code, tools=[limited]).value == "QuotaExceeded: try later"


def test_type_check_rejects_bad_call_before_any_tool_runs():
    calls = []

    def record(x: int) -> int:
        calls.append(x)
        return x

    with pytest.raises(TypeCheckError) as info:
        orchestrate('record(1)\nrecord("a")', tools=[record])
    assert calls == []
    assert 'File "<cell>", line 2\n    record("a")\n           ^^^\n' in str(info.value)
    assert "record" in str(info.value)


def test_type_check_knows_input_types_and_can_be_skipped():
    with pytest.raises(TypeCheckError):
        run("add(x, 1)", inputs={"x": "text"})
    with pytest.raises(OrchestrationError, match="TypeError"):
        run("add(x, 1)", inputs={"x": "text"}, type_check=False)


def test_type_check_understands_opaque_classes_and_async_tools():
    assert run("f = load(3)\ncount(f)").value == 3
    with pytest.raises(TypeCheckError):
        run("count(3)")


def test_opaque_handles_round_trip_and_cannot_be_read():
    frame = Frame(5)
    result = run("count(frame)", inputs={"frame": frame})
    assert result.value == 5
    assert run("frame", inputs={"frame": frame}).value is frame
    got = run("f = load(2)\nf")
    assert isinstance(got.value, Frame)
    assert got.value.rows == 2
    with pytest.raises(OrchestrationError, match="AttributeError"):
        run("frame.secret", inputs={"frame": frame}, type_check=False)


def test_mixed_containers_keep_data_readable_and_objects_opaque():
    frame = Frame(1)
    result = run("box['n'] + count(box['frame'])", inputs={"box": {"n": 41, "frame": frame}})
    assert result.value == 42


@pytest.mark.parametrize(
    ("code", "limit", "options"),
    [
        ("while True:\n    pass", "time", {"timeout": 1}),
        ("a = []\nwhile True:\n    a.append('x' * 10000)", "memory", {"max_memory": 16}),
        ("for i in range(100):\n    add(i, i)", "calls", {"max_calls": 10}),
        ("import time\ntime.sleep(5)", "time", {"timeout": 1}),
    ],
)
def test_limits_raise_a_clear_error_and_the_next_run_works(code, limit, options):
    with pytest.raises(LimitExceeded) as info:
        run(code, limits=Limits(**options))
    assert info.value.limit == limit
    assert limit in str(info.value)
    assert run("add(1, 2)").value == 3


def test_call_limit_cannot_be_caught_by_the_code():
    code = "for i in range(50):\n    try:\n        add(i, i)\n    except Exception:\n        pass"
    with pytest.raises(LimitExceeded):
        run(code, limits=Limits(max_calls=10))


def test_short_sleeps_work():
    assert (
        run("import time\ntime.sleep(0.05)\nimport asyncio\nawait asyncio.sleep(0.05)\n1").value
        == 1
    )


@pytest.mark.parametrize("options", [{"timeout": 0}, {"max_memory": -1}, {"max_calls": 1.5}])
def test_bad_limit_values_are_config_errors(options):
    with pytest.raises(SandboxConfigError):
        run("1", limits=Limits(**options))


def test_ctrl_c_stops_a_running_cell_and_the_next_one_works():
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    with pytest.raises(Interrupted) as info:
        run("while True:\n    pass", limits=Limits(timeout=60))
    assert not isinstance(info.value, LimitExceeded)  # Ctrl-C stopped it, not the 60 s limit
    assert run("add(2, 2)").value == 4


def test_trace_records_arguments_results_errors_times_and_positions():
    result = run("a = add(1, 2)\ntry:\n    fail(message='m')\nexcept ValueError:\n    pass\na")
    first, second = result.trace
    assert (first.tool, first.args, first.result, first.line, first.column) == (
        "add",
        (1, 2),
        3,
        1,
        5,
    )
    assert (second.kwargs, second.error, second.line) == ({"message": "m"}, "ValueError: m", 3)
    assert first.start <= first.end <= second.start <= second.end
    assert first.status == "ok"
    assert second.status == "error"
    record = result.to_record()
    assert record["kind"] == "orchestrate"
    assert record["status"] == "ok"
    assert record["calls"][1]["kwargs"] == {"message": "'m'"}
    assert "raise ValueError" in record["calls"][1]["host_traceback"]


def test_cells_do_not_share_state():
    run("leak = 42")
    with pytest.raises(OrchestrationError, match="NameError"):
        run("leak", type_check=False)


def test_orchestrate_async_runs_async_tools_on_the_callers_loop():
    loops = []

    async def where() -> bool:
        loops.append(asyncio.get_running_loop())
        return True

    async def main():
        result = await orchestrate_async("await where()", tools=[where])
        return result.value, asyncio.get_running_loop()

    value, loop = asyncio.run(main())
    assert value is True
    assert loops == [loop]


def test_orchestrate_local_keeps_flytes_signature():
    assert (
        asyncio.run(orchestrate_local("add(x, y) * 2", inputs={"x": 1, "y": 2}, tasks=[add])) == 6
    )


def test_tool_decorator_registers_and_stays_callable(tool_registry):
    @tool
    def triple(x: int) -> int:
        return 3 * x

    assert isinstance(triple, Tool)
    assert triple(2) == 6
    assert registry["triple"] is triple is tool_registry["triple"]
    assert orchestrate("triple(2)").value == 6  # default: every registered tool


def test_a_fresh_registry_forgets_the_tools_a_test_registered(tool_registry):
    """The fixture's registry is a copy: what a test registers never reaches the process's
    registry, which is back in place after (the next test sees none of it)."""
    from jupyter_sandbox.orchestration import ToolRegistry, _registry, resolve_tools

    @tool
    def only_here(x: int) -> int:
        return x

    assert _registry.current() is tool_registry and orchestrate("only_here(1)").value == 1
    previous = _registry.install(ToolRegistry())
    try:
        assert "only_here" not in registry and resolve_tools(None) == {}
    finally:
        _registry.install(previous)
    assert registry["only_here"] is only_here


def test_tool_names_must_be_identifiers():
    with pytest.raises(SandboxConfigError):
        Tool(add, name="not valid")
    with pytest.raises(SandboxConfigError, match="starts with '_'"):
        Tool(add, name="_private")
    assert "renamed" in ToolRegistry().register(Tool(add, name="renamed")).name


def test_stubs_render_signatures_inputs_and_opaque_classes():
    async def fetch(url: str, *, retries: int = 3) -> dict[str, list[int]] | None:
        return None

    stubs = build_stubs({"fetch": Tool(fetch), "load": Tool(load)}, {"n": 1, "frame": Frame(1)})
    assert (
        "async def fetch(url: str, *, retries: int = ...) -> dict[str, list[int]] | None: ..."
        in stubs
    )
    assert "class Frame: ..." in stubs
    assert "def load(rows: int) -> Frame: ..." in stubs
    assert "n: int" in stubs
    assert "frame: Frame" in stubs


class Flaky:
    """A tool that fails on one argument until fixed, and counts its calls."""

    def __init__(self) -> None:
        self.calls: list[int] = []
        self.broken = True

    def step(self, n: int) -> int:
        self.calls.append(n)
        if n == 3 and self.broken:
            raise RuntimeError("flaky")
        return n * 10


def test_resume_answers_completed_calls_from_the_journal():
    flaky, journal = Flaky(), Journal()
    step = Tool(flaky.step, name="step")
    code = "[step(1), step(2), step(3), step(4)]"
    with pytest.raises(ToolError):
        orchestrate(code, tools=[step], journal=journal)
    assert flaky.calls == [1, 2, 3]
    flaky.broken = False
    result = orchestrate(code, tools=[step], journal=journal, resume=True)
    assert result.value == [10, 20, 30, 40]
    assert flaky.calls == [1, 2, 3, 3, 4]  # 1 and 2 came from the journal
    assert [c.replayed for c in result.trace] == [True, True, False, False]
    assert result.to_record()["calls"][0]["replayed"] is True


def test_resume_stops_replaying_where_the_run_takes_another_path():
    flaky, journal = Flaky(), Journal()
    flaky.broken = False
    step = Tool(flaky.step, name="step")
    orchestrate("[step(1), step(2), step(4)]", tools=[step], journal=journal)
    result = orchestrate("[step(1), step(5), step(4)]", tools=[step], journal=journal, resume=True)
    assert [c.replayed for c in result.trace] == [True, False, False]
    assert flaky.calls == [1, 2, 4, 5, 4]


def test_without_resume_the_journal_only_records():
    flaky, journal = Flaky(), Journal()
    flaky.broken = False
    step = Tool(flaky.step, name="step")
    orchestrate("step(1)", tools=[step], journal=journal)
    result = orchestrate("step(1)", tools=[step], journal=journal)
    assert not result.trace[0].replayed
    assert flaky.calls == [1, 1]
    assert len(journal) == 1
    assert journal.calls[0].result == 10


def test_resume_after_a_limit_finishes_the_work():
    flaky, journal = Flaky(), Journal()
    flaky.broken = False
    step = Tool(flaky.step, name="step")
    code = "total = 0\nfor i in range(6):\n    total += step(i)\ntotal"
    with pytest.raises(LimitExceeded):
        orchestrate(code, tools=[step], journal=journal, limits=Limits(max_calls=4))
    result = orchestrate(code, tools=[step], journal=journal, resume=True)
    assert result.value == 150
    assert flaky.calls == [0, 1, 2, 3, 4, 5]  # each call made once across both runs


def test_resume_replays_async_calls_and_handles():
    journal, made = Journal(), []

    async def fetch(n: int) -> int:
        made.append(n)
        return n

    code = "import asyncio\nf = load(2)\nawait asyncio.gather(fetch(count(f)), fetch(1))"
    tools = [fetch, load, count]
    first = orchestrate(code, tools=tools, journal=journal)
    again = orchestrate(code, tools=tools, journal=journal, resume=True)
    assert first.value == again.value == [2, 1]
    assert made == [2, 1]
    assert all(c.replayed for c in again.trace)


def test_cache_answers_same_tool_and_arguments_across_runs():
    flaky, cache = Flaky(), ToolCache()
    flaky.broken = False
    step = Tool(flaky.step, name="step")
    first = orchestrate("[step(1), step(1), step(2)]", tools=[step], cache=cache)
    second = orchestrate("step(2) + step(7)", tools=[step], cache=cache)
    assert first.value == [10, 10, 20]
    assert second.value == 90
    assert flaky.calls == [1, 2, 7]
    assert [c.replayed for c in first.trace + second.trace] == [False, True, False, True, False]


def test_cache_skips_calls_with_object_arguments():
    cache, counted = ToolCache(), []

    def size(frame: Frame) -> int:
        counted.append(frame)
        return frame.rows

    frame = Frame(4)
    orchestrate("size(f) + size(f)", tools=[size], inputs={"f": frame}, cache=cache)
    assert counted == [frame, frame]
    assert len(cache) == 0
