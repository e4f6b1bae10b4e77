"""What the agent says to the model: the system prompt, and the feedback after a failure.

The system prompt is assembled from three measured sources, never from prose that can drift:
the stubs the type checker will enforce (so the model sees exactly the signatures its code is
checked against), the tools' docstrings, and the capability table of the installed Monty.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._shared._errors import OrchestrationError
from .._shared._preview import preview
from ..orchestration import Tool, Tools, is_plain, resolve_tools, stubs
from ._capabilities import Capabilities, Verdict, capabilities

_STDOUT_TAIL = 2000

_RULES = """\
You write Python that runs in a sandboxed interpreter (Monty) to carry out the user's task.
Your code does the control flow; the tools below do the work. Nothing else can touch the world.

How your code runs:
- Reply with exactly one ```python block holding the complete program. Only that block runs.
- The value of the last expression is the result: end with an expression, e.g. `total` or
  `{"best": best, "scores": scores}`, made of plain data (numbers, strings, lists, dicts).
- Call tools as plain functions. `async def` tools must be awaited (top-level `await` works);
  run several at once with `await asyncio.gather(...)` after `import asyncio`.
- A tool's exception is raised in your code; catch it with try/except when you can recover.
- The code is type-checked against the signatures below before anything runs.
- print() shows progress to the user, and its output comes back to you if the code fails.
- If the code fails you get the error and traceback; reply with the whole corrected program."""

NO_CODE = "Your reply held no Python code. Reply with the complete program in one ```python block."


def system_prompt(tools: Tools, inputs: Mapping[str, Any] | None = None) -> str:
    """The system prompt for code that may call ``tools`` and reads ``inputs`` as globals.

    ``tools`` takes what `orchestrate` takes: functions, `Tool` objects, a name->function
    mapping, or None for every tool registered with ``@tool``.
    """
    resolved = resolve_tools(tools)
    inputs = inputs or {}
    sections = [_RULES, _tools_section(resolved, inputs)]
    if inputs:
        sections.append(_inputs_section(resolved, inputs))
    sections.append(_capabilities_section(capabilities()))
    return "\n\n".join(sections) + "\n"


def feedback(error: OrchestrationError) -> str:
    """The next user message after a failed attempt: what failed, where, and what printed.

    A tool's host traceback stays out: the model cannot change the tool, only how it calls
    it, and host paths and internals are not the model's business. The error line already
    names the tool and its exception.
    """
    parts = ["The code failed."]
    if error.sandbox_traceback:
        parts.append(error.sandbox_traceback.rstrip())
    parts.append(f"{type(error).__name__}: {error}")
    stdout = error.result.stdout if error.result is not None else ""
    if stdout:
        tail = stdout[-_STDOUT_TAIL:]
        parts.append(f"Output printed before the failure:\n{tail.rstrip()}")
    parts.append("Fix it and reply with the complete corrected program in one ```python block.")
    return "\n\n".join(parts)


def _tools_section(tools: Mapping[str, Tool], inputs: Mapping[str, Any]) -> str:
    if not tools:
        return "There are no tools: the code can only compute with its inputs."
    declared = stubs(tools, inputs)
    handles = declared.classes
    functions = [_with_doc(line, tools[name]) for name, line in declared.functions.items()]
    text = "Tools (call only these):\n```python\n" + "\n\n".join(functions) + "\n```"
    if handles:
        text += (
            "\n\nOpaque handle types: values of these types can be passed to tools and "
            "returned, but not read, compared or called:\n" + "\n".join(handles)
        )
    return text


def _inputs_section(tools: Mapping[str, Tool], inputs: Mapping[str, Any]) -> str:
    declared = stubs(tools, inputs).inputs
    lines = [
        f"{declared[name]}  # {preview(value, 80) if is_plain(value) else 'opaque handle'}"
        for name, value in inputs.items()
    ]
    return "Inputs, already defined as global variables:\n```python\n" + "\n".join(lines) + "\n```"


def _with_doc(stub_line: str, tool: Tool) -> str:
    doc = tool.doc.replace('"""', r"\"\"\"")
    if not doc:
        return stub_line
    head = stub_line.removesuffix(" ...")
    if "\n" not in doc:
        return f'{head}\n    """{doc}"""'
    body = "\n".join(f"    {line}" if line else "" for line in doc.splitlines())
    return f'{head}\n    """\n{body}\n    """'


def _capabilities_section(caps: Capabilities) -> str:
    works = caps.select("language", True)
    fails = caps.select("language", False)
    lines = [
        f"Python in this sandbox (measured on pydantic-monty {caps.monty_version}):",
        "- Works:",
        *(f"  - {v.probe.label}" for v in works),
    ]
    if fails:
        lines.append("- Does not work here (do not use):")
        lines += [f"  - {_failure(v)}" for v in fails]
    lines.append("- Modules you can import: " + _names(caps.select("module", True)) + ".")
    missing = caps.select("module", False)
    if missing:
        lines.append("- Modules that do not exist here: " + _names(missing) + ".")
    blocked = caps.select("sandbox", False)
    if blocked:
        lines.append(
            "- No files, environment variables, network or processes. These fail: "
            + "; ".join(f"{v.probe.label} ({_how_it_fails(v)})" for v in blocked)
            + "."
        )
    return "\n".join(lines)


def _failure(verdict: Verdict) -> str:
    text = f"{verdict.probe.label} ({verdict.detail})"
    return f"{text}; instead: {verdict.probe.instead}" if verdict.probe.instead else text


def _names(verdicts: list[Verdict]) -> str:
    return ", ".join(v.probe.label for v in verdicts)


def _how_it_fails(verdict: Verdict) -> str:
    """The exception class, or the type checker: the short answer to "what stops it"."""
    kind = verdict.detail.split(":", 1)[0]
    return "rejected by the type checker" if kind == "type check" else kind
