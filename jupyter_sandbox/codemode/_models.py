"""Any model through pydantic-ai: ``CodeModeAgent(llm="openai:gpt-4o")`` or a pydantic-ai
``Model`` object, besides a plain function from messages to text.

pydantic-ai (``pydantic-ai-slim``, the ``ai`` extra; a provider's client comes with its own
extra, ``pydantic-ai-slim[openai]``) is imported only when a model name or object is given.
The agent keeps its conversation as role/content dicts and asks for one reply per attempt;
`ModelLLM` turns that into one direct model request (no pydantic-ai agent, tools or retries
of its own: the code mode loop is the agent). The request runs on a thread of its own with
its own event loop, so it works from a notebook cell, whose thread already runs one.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from .._shared._errors import SandboxConfigError
from ._result import Message

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelMessage
    from pydantic_ai.models import Model

LLM = Callable[[list[Message]], str]
"""A model: takes the conversation (OpenAI-style role/content dicts), returns the reply text."""
_EXTRA = "pip install 'jupyter-sandbox[ai]'"


def as_llm(llm: object) -> LLM:
    """``llm`` as a function from messages to text: a pydantic-ai model name (``str``) or
    ``Model`` wrapped in `ModelLLM`, a callable as it is. A name that pydantic-ai does not
    know, or whose provider's package or API key is missing, is a `SandboxConfigError` here,
    before any attempt."""
    if isinstance(llm, str):
        return ModelLLM(_named(llm))
    if _is_model(llm):
        return ModelLLM(cast("Model", llm))
    if callable(llm):
        return cast(LLM, llm)  # what it answers is checked when it answers (str or not)
    raise SandboxConfigError(
        "llm must be a callable (messages -> text), a pydantic-ai model name such as "
        f"'openai:gpt-4o' or a pydantic-ai Model; got {type(llm).__name__}",
        parameter="llm",
    )


def _is_model(obj: object) -> bool:
    """Whether ``obj`` is a pydantic-ai ``Model`` (only possible once pydantic-ai is loaded)."""
    models = sys.modules.get("pydantic_ai.models")
    return models is not None and isinstance(obj, models.Model)


def _named(name: str) -> Model:
    try:
        from pydantic_ai.models import infer_model
    except ImportError:
        raise SandboxConfigError(
            f"llm={name!r} names a pydantic-ai model: {_EXTRA}", parameter="llm"
        ) from None
    try:
        return infer_model(name)
    except Exception as exc:  # unknown name, the provider's package or its API key missing
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SandboxConfigError(f"llm={name!r}: {message}", parameter="llm") from None


class ModelLLM:
    """A pydantic-ai ``Model`` as code mode's LLM: one request per call, the reply's text.

    ``last_usage`` is the last reply's ``(input, output)`` tokens as the provider reported them,
    for callers that add up what a conversation cost (code generation's totals); a plain
    function as the LLM has no such attribute."""

    def __init__(self, model: Model) -> None:
        self.model = model
        self.last_usage: tuple[int, int] | None = None

    def __call__(self, messages: list[Message]) -> str:
        from pydantic_ai.direct import model_request

        history = _history(messages)
        answer: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def ask() -> None:
            try:
                answer.set_result(asyncio.run(model_request(self.model, history)))
            except BaseException as exc:  # the caller's to see (a provider's error included)
                answer.set_exception(exc)

        threading.Thread(target=ask, name="codemode-model", daemon=True).start()
        response = answer.result()
        usage = response.usage
        self.last_usage = (int(usage.input_tokens or 0), int(usage.output_tokens or 0))
        return response.text or ""

    def __repr__(self) -> str:
        return f"<pydantic-ai model {self.model.system}:{self.model.model_name}>"


def _history(messages: list[Message]) -> list[ModelMessage]:
    """Role/content dicts as pydantic-ai messages: the system prompt and user turns as
    requests (consecutive ones in one), the model's earlier replies as responses."""
    from pydantic_ai.messages import (
        ModelRequest,
        ModelResponse,
        SystemPromptPart,
        TextPart,
        UserPromptPart,
    )

    history: list[ModelMessage] = []
    pending: list[SystemPromptPart | UserPromptPart] = []
    for message in messages:
        role, content = message["role"], message["content"]
        if role == "assistant":
            if pending:
                history.append(ModelRequest(parts=pending))
                pending = []
            history.append(ModelResponse(parts=[TextPart(content)]))
        elif role == "system":
            pending.append(SystemPromptPart(content))
        else:
            pending.append(UserPromptPart(content))
    if pending:
        history.append(ModelRequest(parts=pending))
    return history
