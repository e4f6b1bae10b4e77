"""One `Limits`: the single source of the orchestration defaults and the one way to give a run
its limits (real Monty workers; nothing mocked)."""

from __future__ import annotations

import dataclasses
import re

import pytest

from jupyter_sandbox import CodeModeAgent, LimitExceeded, Limits, ScriptedLLM, Tool, orchestrate
from jupyter_sandbox.magics._orchestrate import OrchestrateMagics

THREE_CALLS = "step(1) + step(2) + step(3)"


def step(x: int) -> int:
    return x


TOOLS = [Tool(step, name="step")]


def test_limits_given_whole_bound_the_run() -> None:
    with pytest.raises(LimitExceeded) as caught:
        orchestrate(THREE_CALLS, tools=TOOLS, limits=Limits(max_calls=2))
    assert caught.value.limit == "calls"


@pytest.mark.parametrize("door", [orchestrate, CodeModeAgent])
@pytest.mark.parametrize("flat", ["timeout", "max_memory", "max_calls", "max_result", "max_output"])
def test_a_limit_given_as_its_own_keyword_is_refused_naming_limits(door, flat) -> None:
    first = ScriptedLLM([]) if door is CodeModeAgent else THREE_CALLS
    with pytest.raises(TypeError, match=re.escape(f"limits=Limits({flat}=...)")):
        door(first, tools=TOOLS, **{flat: 3})


def test_the_magic_settings_and_option_help_default_to_limits() -> None:
    defaults = Limits()
    traits = OrchestrateMagics.class_traits()
    options = OrchestrateMagics.orchestrate.__doc__ or ""
    for field in dataclasses.fields(Limits):
        assert traits[field.name].default_value == getattr(defaults, field.name), field.name
        option = "--" + field.name.replace("_", "-")
        assert option in options, option
    assert f"(default {defaults.max_calls})" in options


def test_the_agent_takes_its_limits_whole() -> None:
    agent = CodeModeAgent(ScriptedLLM([]), limits=Limits(timeout=5, max_calls=7))
    assert agent.limits == Limits(timeout=5, max_calls=7)
