"""Any model through pydantic-ai: ``CodeModeAgent(llm=...)`` and ``%%codemode
--llm`` take pydantic-ai model names and ``Model`` objects, tested offline with pydantic-ai's own
`FunctionModel` and `TestModel` against real Monty (what the model is sent, what it answers)."""

from __future__ import annotations

import asyncio

import pytest
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from jupyter_sandbox import CodeModeAgent, CodeModeError, SandboxConfigError


def price(item: str) -> float:
    """Unit price of ``item`` in EUR."""
    return {"apple": 0.5, "pear": 0.75}[item]


def fence(code: str) -> str:
    return f"Here you go:\n```python\n{code}\n```"


BROKEN = fence("price(1)")
GOOD = fence("total = 0\nfor item in basket:\n    total += price(item)\ntotal")


def replying(*replies: str) -> tuple[FunctionModel, list[list[ModelMessage]]]:
    """A `FunctionModel` answering ``replies`` in turn, and the histories it was sent."""
    seen: list[list[ModelMessage]] = []

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        return ModelResponse(parts=[TextPart(replies[len(seen) - 1])])

    return FunctionModel(answer), seen


def parts(message: ModelMessage) -> list[tuple[str, str]]:
    return [(type(p).__name__, str(p.content)) for p in message.parts]  # type: ignore[union-attr]


def test_a_function_model_is_asked_again_with_the_failure_and_its_fix_runs():
    model, seen = replying(BROKEN, GOOD)
    agent = CodeModeAgent(model, [price], inputs={"basket": ["apple", "pear"]})
    result = agent.run("What does the basket cost?")
    assert result.value == 1.25
    assert len(result.attempts) == 2
    first, second = seen
    assert [type(m) for m in first] == [ModelRequest]
    assert parts(first[0]) == [
        ("SystemPromptPart", agent.system_prompt),
        ("UserPromptPart", "What does the basket cost?"),
    ]
    assert [type(m) for m in second] == [ModelRequest, ModelResponse, ModelRequest]
    assert parts(second[1]) == [("TextPart", BROKEN)]
    assert parts(second[2]) == [("UserPromptPart", result.attempts[0].feedback)]
    assert "price" in agent.system_prompt  # the stubs the model writes against


def test_a_test_model_object_and_a_model_name():
    agent = CodeModeAgent(TestModel(custom_output_text=fence("price('pear') * 2")), [price])
    assert agent.run("two pears").value == 1.5
    named = CodeModeAgent("test", [price], max_attempts=2)  # pydantic-ai's name for TestModel
    with pytest.raises(CodeModeError, match="no working code after 2"):
        named.run("anything")  # its canned reply holds no code: it goes back as feedback


def test_it_works_where_an_event_loop_already_runs():
    """A notebook cell runs on a thread whose event loop is running: the request runs beside it."""

    async def in_a_cell() -> object:
        model, _ = replying(GOOD)
        agent = CodeModeAgent(model, [price], inputs={"basket": ["apple"]})
        return agent.run("cost").value

    assert asyncio.run(in_a_cell()) == 0.5


def test_a_providers_error_is_not_the_models_to_fix():
    def down(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise ConnectionError("provider unreachable")

    with pytest.raises(ConnectionError, match="provider unreachable"):
        CodeModeAgent(FunctionModel(down), [price]).run("x")


def test_a_bad_name_is_refused_before_any_attempt(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(SandboxConfigError, match=r"llm='nope:x': Unknown model"):
        CodeModeAgent("nope:x", [price])
    # the slim package has no OpenAI client (or, installed, no key here): said at once
    with pytest.raises(SandboxConfigError, match=r"llm='openai:gpt-4o': "):
        CodeModeAgent("openai:gpt-4o", [price])


SETUP = """
from jupyter_sandbox import tool

@tool
def price(item: str) -> float:
    return {"apple": 0.5, "pear": 0.75}[item]

basket = ["apple", "pear"]
"""


def test_the_magic_takes_a_model_variable_and_a_model_name(shell, capsys):
    assert shell.run_cell(SETUP).success
    model, seen = replying(GOOD)
    shell.user_ns["model"] = model
    ran = shell.run_cell("%%codemode --llm model --in basket --out total --quiet\nthe cost")
    assert ran.success
    assert shell.user_ns["total"] == 1.25
    assert len(seen) == 1
    failed = shell.run_cell("%%codemode --llm nope:x\nthe cost")
    assert not failed.success
    err = capsys.readouterr().err
    assert err.startswith("UsageError: --llm='nope:x': Unknown model")
    assert err.strip().count("\n") == 0
