"""Finding the program in a model's reply.

The prompt asks for exactly one fenced ``python`` block, and models mostly comply, but replies
also arrive with several blocks, with untagged fences, cut off before the closing fence, or as
bare code. The rules, in order:

1. Fenced blocks tagged ``python``/``py``/``python3`` or untagged count; other languages
   (``json``, ``bash``, output samples) never run.
2. With several, the last one wins: a model that revises itself puts the final version last,
   and joining blocks would run a draft too, calling its tools (with their side effects) twice.
3. An opening fence with no closing one (a truncated reply) yields the rest of the reply.
4. No fence at all: the whole reply, if it parses as Python (``ast.parse`` on the host, which
   never executes anything); prose does not, so it is reported as "no code" instead of
   failing in the sandbox with a confusing syntax error.
"""

from __future__ import annotations

import ast
import re

_FENCE = re.compile(
    r"^[ \t]*(?P<fence>`{3,}|~{3,})[ \t]*(?P<lang>[\w+-]*)[^\n]*\n(?P<body>.*?)"
    r"(?:^[ \t]*(?P=fence)[ \t]*$|\Z)",
    re.DOTALL | re.MULTILINE,
)
_PYTHON = {"", "python", "py", "python3"}


def extract_code(reply: str) -> str | None:
    """The program in ``reply``, or None when it holds no Python code."""
    blocks = [m.group("body") for m in _FENCE.finditer(reply) if m.group("lang").lower() in _PYTHON]
    if blocks:
        code = blocks[-1].strip("\n")
        return code if code.strip() else None
    if _FENCE.search(reply) or not reply.strip():
        return None
    try:
        ast.parse(reply)
    except SyntaxError:
        return None
    return reply.strip("\n")
