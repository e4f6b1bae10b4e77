"""`RunSpec` and `plan`: a run asked for as one validated value, and the one place its driver
is made. Real Monty workers and a real store; `plan` itself is never replaced: each door is
shown to reach it by what its runs do."""

from __future__ import annotations

import ast
import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

import jupyter_sandbox
from jupyter_sandbox import (
    CodeModeAgent,
    LimitExceeded,
    Limits,
    ScriptedLLM,
    Store,
    Tool,
    fork_run,
    orchestrate,
    orchestrate_async,
    orchestrator_from_str,
    resume_run,
)
from jupyter_sandbox.errors import SandboxConfigError
from jupyter_sandbox.orchestration._spec import Fork, RunSpec, TakeUp

PACKAGE = Path(jupyter_sandbox.__file__).parent


def step(x: int) -> int:
    return x


def wipe(path: str) -> str:
    return f"wiped {path}"


STEP = Tool(step, name="step")
THREE_CALLS = "step(1) + step(2) + step(3)"


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"code": 3}, "code"),
        ({"tools": [STEP]}, "tools"),
        ({"tools": {"step": step}}, "tools"),
        ({"inputs": [("x", 1)]}, "inputs"),
        ({"inputs": {1: 2}}, "inputs"),
        ({"limits": {"timeout": 5}}, "limits"),
        ({"keep": 10}, "keep"),
        ({"type_check": "yes"}, "type_check"),
        ({"on_event": 3}, "on_event"),
        ({"approver": "always"}, "approver"),
        ({"store": 3}, "store"),
        ({"session": 7}, "session"),
        ({"scope": None}, "scope"),
        ({"resume": "yes"}, "resume"),
        ({"resume": TakeUp("r1")}, "store"),
    ],
)
def test_the_spec_refuses_an_odd_value_naming_its_field(fields: dict[str, Any], named: str):
    given = {"code": "1", "tools": {}, "inputs": {}, **fields}
    with pytest.raises(SandboxConfigError) as caught:
        RunSpec(**given)
    assert caught.value.parameter == named
    assert str(caught.value).startswith(named) and "\n" not in str(caught.value)


@pytest.mark.parametrize("field", ["timeout", "max_memory", "max_calls", "max_stack_depth"])
def test_a_negative_limit_is_refused_before_anything_runs(field: str):
    with pytest.raises(SandboxConfigError, match=field):
        orchestrate("1", limits=Limits(**{field: -1}))


def test_unknown_keys_are_refused_by_the_spec_and_the_doors():
    with pytest.raises(TypeError, match="bogus"):
        RunSpec(code="1", tools={}, inputs={}, bogus=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="bogus"):
        orchestrate("1", bogus=1)
    with pytest.raises(TypeError, match=re.escape("limits=Limits(timeout=...)")):
        orchestrate("1", timeout=3)
    with pytest.raises(TypeError, match=re.escape("limits=Limits(max_calls=...)")):
        CodeModeAgent(ScriptedLLM([]), max_calls=3)


def test_a_spec_is_frozen_and_its_resume_choices_validate_themselves():
    spec = RunSpec(code="1", tools={}, inputs={})
    with pytest.raises(AttributeError):
        spec.code = "2"  # type: ignore[misc]
    with pytest.raises(SandboxConfigError, match="approve"):
        TakeUp("r1", approve="yes")  # type: ignore[arg-type]
    with pytest.raises(SandboxConfigError, match="run_id"):
        Fork(3, 0)  # type: ignore[arg-type]


def test_a_driver_is_assembled_in_the_plan_alone():
    makers = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            called = [node.func, *node.args] if isinstance(node, ast.Call) else []
            if any(getattr(part, "id", None) == "Driver" for part in called):  # or partial()
                makers.append(path.relative_to(PACKAGE).as_posix())
    assert makers == ["orchestration/_plan.py"]


def test_limits_given_to_each_door_reach_the_loop():
    two = Limits(max_calls=2)
    with pytest.raises(LimitExceeded) as caught:
        orchestrate(THREE_CALLS, tools=[STEP], limits=two)
    assert caught.value.limit == "calls"
    with pytest.raises(LimitExceeded):
        asyncio.run(orchestrate_async(THREE_CALLS, tools=[STEP], limits=two))
    pipeline = orchestrator_from_str(THREE_CALLS, inputs={}, tools=[STEP], limits=two)
    with pytest.raises(LimitExceeded):
        pipeline()
    reply = f"```python\n{THREE_CALLS}\n```"
    agent = CodeModeAgent(ScriptedLLM([reply]), [STEP], max_attempts=1, limits=two)
    with pytest.raises(jupyter_sandbox.CodeModeError) as failed:
        agent.run("add three numbers", on_event=None)
    assert isinstance(failed.value.attempts[0].error, LimitExceeded)


def test_a_store_given_to_a_door_keeps_the_run_and_forking_it_keeps_its_limits(tmp_path: Path):
    store = Store(tmp_path / "runs.sqlite")
    done = orchestrate(THREE_CALLS, tools=[STEP], store=store)
    assert done.value == 6 and done.run_id is not None
    assert store.run(done.run_id).status == "ok"
    forked = fork_run(done.run_id, done.trace[0].call_id, value=10, store=store, tools=[STEP])
    assert forked.value == 15 and forked.forked_from == (done.run_id, done.trace[0].call_id)
    with pytest.raises(LimitExceeded):
        fork_run(done.run_id, 0, value=1, store=store, tools=[STEP], limits=Limits(max_calls=1))


def test_an_approver_given_to_a_door_answers_its_gated_calls(tmp_path: Path):
    gated = Tool(wipe, approve=True)
    code = "try:\n    r = wipe('/data')\nexcept PermissionError:\n    r = 'refused'\nr"
    asked: list[str] = []

    def refuse(call: Any) -> bool:
        asked.append(call.tool)
        return False

    assert orchestrate(code, tools=[gated], approver=refuse).value == "refused"
    assert asked == ["wipe"]
    store = Store(tmp_path / "runs.sqlite")
    paused = orchestrate(code, tools=[gated], store=store)
    assert paused.status == "paused"
    resumed = resume_run(paused.run_id, approve=True, store=store, tools=[gated])
    assert resumed.value == "wiped /data" and resumed.run_id == paused.run_id


def test_the_magics_option_and_setting_reach_the_loop(shell: Any, tool_registry: Any) -> None:
    tool_registry.register(STEP)
    failed = shell.run_cell(f"%%orchestrate --max-calls 2\n{THREE_CALLS}\n")
    assert isinstance(failed.error_in_exec, LimitExceeded)
    shell.run_line_magic("config", "OrchestrateMagics.max_calls = 2")
    try:
        configured = shell.run_cell(f"%%orchestrate\n{THREE_CALLS}\n")
        assert isinstance(configured.error_in_exec, LimitExceeded)
        assert shell.run_cell(f"%%orchestrate --max-calls 3\n{THREE_CALLS}\n").success
    finally:
        shell.run_line_magic("config", f"OrchestrateMagics.max_calls = {Limits().max_calls}")
