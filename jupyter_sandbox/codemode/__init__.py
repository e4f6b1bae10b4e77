"""Code mode: a model writes orchestration code, Monty runs it, failures go back to the model.

No IPython here (``%%codemode`` is a thin shell over `CodeModeAgent`). Plug in any model as a
function from messages to text::

    from openai import OpenAI
    client = OpenAI()
    def llm(messages):
        return client.chat.completions.create(model="gpt-4o", messages=messages).choices[0].message.content

    agent = CodeModeAgent(llm=llm, tools=[add, fetch])
    result = agent.run("Add the populations of Paris and Rome")
    result.value, result.code, result.attempts

or, with the ``ai`` extra, by its pydantic-ai name or ``Model``:
``CodeModeAgent(llm="openai:gpt-4o", tools=[add, fetch])``.
"""  # noqa: E501

from __future__ import annotations

from .._shared._public import publish_top_level
from ._agent import CodeModeAgent
from ._capabilities import Capabilities, Verdict, capabilities
from ._extract import extract_code
from ._models import LLM
from ._prompt import system_prompt
from ._result import AgentResult, Attempt, Message
from ._scripted import ScriptedLLM

__all__ = [
    "LLM",
    "AgentResult",
    "Attempt",
    "Capabilities",
    "CodeModeAgent",
    "Message",
    "ScriptedLLM",
    "Verdict",
    "capabilities",
    "extract_code",
    "system_prompt",
]

publish_top_level(__name__, globals())
