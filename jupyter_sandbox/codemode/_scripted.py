"""A stand-in model for tests, demos and teaching notebooks: no network, no API key."""

from __future__ import annotations

from collections.abc import Iterable

from ._result import Message


class ScriptedLLM:
    """Returns prepared replies in order and records every request it was sent.

    ``requests[i]`` is the conversation the agent sent for attempt ``i + 1``, so a test or a
    notebook can show exactly what went back to the model after a failure.
    """

    def __init__(self, replies: Iterable[str]) -> None:
        self.replies = list(replies)
        self.requests: list[list[Message]] = []

    def __call__(self, messages: list[Message]) -> str:
        self.requests.append(messages)
        if len(self.requests) > len(self.replies):
            raise IndexError(f"ScriptedLLM has only {len(self.replies)} prepared replies")
        return self.replies[len(self.requests) - 1]
