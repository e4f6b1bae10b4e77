"""Features plug into the run loop through one protocol (`orchestration/_hooks.py`): a plain
run has none, `plug` orders them so each keeps its contract, and a feature of one's own sees
every point of a real run in order and can answer a call instead of its tool. Real Monty
workers, no IPython."""

from __future__ import annotations

from typing import Any

import pydantic_monty as pm
import pytest

from jupyter_sandbox import ToolError
from jupyter_sandbox.events import ToolCall
from jupyter_sandbox.orchestration import Journal, Limits, Tool, ToolCache
from jupyter_sandbox.orchestration._approval import Gate
from jupyter_sandbox.orchestration._driver import Driver
from jupyter_sandbox.orchestration._hooks import Answer, Feature
from jupyter_sandbox.orchestration._memo import Journaling
from jupyter_sandbox.orchestration._plug import plug
from jupyter_sandbox.orchestration._replay import Answers, Replay
from jupyter_sandbox.orchestration._run_thread import wait
from jupyter_sandbox.orchestration._workers import tool_loop


def add(x: int, y: int) -> int:
    return x + y


def broken(x: int) -> int:
    raise ValueError(f"no {x}")


class Watch(Feature):
    """Notes each point it is asked at; answers ``add(40, 2)`` itself with 0."""

    def __init__(self) -> None:
        self.seen: list[tuple[Any, ...]] = []

    def attach(self, run: Driver) -> None:
        self.seen.append(("attach",))

    def begin(self, run: Driver, worker: pm.MontySession, stubs: str | None) -> None:
        self.seen.append(("begin",))

    def sent_inputs(self, inputs: Any, sent: Any) -> None:
        self.seen.append(("sent_inputs", dict(inputs)))

    def call_started(
        self, run: Driver, snap: pm.FunctionSnapshot, call: ToolCall, number: int, tool: Tool
    ) -> Answer | None:
        self.seen.append(("call_started", call.tool, number))
        return Answer(0) if call.args == (40, 2) else None

    def call_answered(self, call: ToolCall, value: Any) -> None:
        self.seen.append(("call_answered", call.tool, value))

    def call_finished(self, call: ToolCall, number: int, sent: Any) -> None:
        self.seen.append(("call_finished", call.tool, number, sent, call.error))

    def complete(self, run: Driver, worker: pm.MontySession, value: Any) -> Any:
        self.seen.append(("complete", value))
        return value + 1

    def end(self, run: Driver) -> None:
        self.seen.append(("end", run.result.status))


def _run(code: str, features: list[Feature], tools: list[Any]) -> Any:
    resolved = {t.__name__: Tool(t) for t in tools}
    driver = Driver(
        code,
        resolved,
        {"k": 1},
        Limits(),
        type_check=True,
        on_event=lambda event: None,
        loop=tool_loop(None),
        features=features,
    )
    return wait(driver)


def test_a_plain_run_has_no_features() -> None:
    assert plug({"add": Tool(add)}) == []
    assert plug({"add": Tool(add)}, answers=Answers()) == []  # nothing to replay, no cache


def test_plug_orders_answers_before_gates_and_the_journal_last() -> None:
    journal = Journal()
    features = plug(
        {"add": Tool(add, approve=True)},
        journal=journal,
        answers=Answers(cache=ToolCache()),
        approver=lambda call: True,
    )
    assert [type(f) for f in features] == [Replay, Gate, Journaling]


def test_a_feature_sees_every_point_of_a_run_in_order_and_may_answer_a_call() -> None:
    watch = Watch()
    result = _run("a = add(k, 2)\nb = add(40, 2)\na + b", [watch], [add])
    assert result.value == 4  # 3 + the answer 0, then `complete` added 1
    assert watch.seen == [
        ("attach",),
        ("begin",),
        ("sent_inputs", {"k": 1}),
        ("call_started", "add", 0),
        ("call_answered", "add", 3),
        ("call_finished", "add", 0, 3, None),
        ("call_started", "add", 1),
        ("call_answered", "add", 0),
        ("call_finished", "add", 1, 0, None),
        ("complete", 3),
        ("end", "ok"),
    ]
    assert [c.result for c in result.trace] == [3, 0]


def test_a_failed_call_finishes_with_nothing_sent_and_the_run_still_ends() -> None:
    watch = Watch()
    with pytest.raises(ToolError):
        _run("broken(5)", [watch], [broken])
    finished = [s for s in watch.seen if s[0] == "call_finished"]
    assert finished == [("call_finished", "broken", 0, None, "ValueError: no 5")]
    assert watch.seen[-1] == ("end", "error")


def test_a_test_may_run_on_a_runtime_of_its_own(runtime: Any) -> None:
    """The ``runtime`` fixture installs a fresh `Runtime`: a run draws its worker from that
    runtime's pool, not the process's."""
    from jupyter_sandbox.orchestration import _workers, orchestrate

    assert _workers.current() is runtime
    assert orchestrate("add(1, 2)", tools=[add]).value == 3
    assert list(runtime.pools) == [0]


def test_a_fresh_durable_process_forgets_what_paused_runs_held(
    durable_process: Any, tmp_path: Any
) -> None:
    """The ``durable_process`` fixture is a kernel restart's view: no store open yet, no
    paused run's objects."""
    from jupyter_sandbox.orchestration.durable import _durable, open_store

    assert _durable.current() is durable_process
    store = open_store(tmp_path / "store.sqlite")
    assert open_store(str(tmp_path / "store.sqlite")) is store
    assert list(durable_process.stores) == [str(tmp_path / "store.sqlite")]
    assert durable_process.held == {}


def test_sessions_live_in_the_durable_state(durable_process: Any) -> None:
    """A session's state is the durable state's: a fresh one (a new kernel, no store) has no
    session, and the code there does not see the variable; the old one still has it."""
    from jupyter_sandbox import OrchestrationError
    from jupyter_sandbox.orchestration import orchestrate, sessions
    from jupyter_sandbox.orchestration.durable import _durable

    orchestrate("x = 41", session="s")
    assert orchestrate("x + 1", session="s").value == 42
    assert list(sessions.listed("default")) == ["s"]
    previous = _durable.install(_durable.Process())
    try:
        assert sessions.listed("default") == {}
        with pytest.raises(OrchestrationError, match="x"):
            orchestrate("x + 1", session="s")
    finally:
        _durable.install(previous)
    assert list(sessions.listed("default")) == ["s"]
