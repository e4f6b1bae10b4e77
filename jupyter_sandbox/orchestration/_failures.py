"""From Monty's errors to ours, and from a tool's exception to one Monty can raise.

Monty reports a stopped feed as one of a few error types with the real cause inside; the user
should read which limit was hit and which option raises it, or which tool raised and its host
traceback, not a wrapper's name.
"""

from __future__ import annotations

import json
import re

import pydantic_monty as pm

from .._shared._errors import (
    Interrupted,
    LimitExceeded,
    OrchestrationError,
    ToolError,
    TypeCheckError,
)
from .._shared._events import ToolCall
from ._limits import Limits
from ._unawaited import Source, held_call

_MONTY_FILENAME = re.compile(r"<python-input-\d+>")
"""Monty's name for the code of a session's nth feed (the driver's type check is a feed of
its own, so the code may be the second)."""

# Builtin exception types Monty reproduces; a tool's own exception class is sent as its
# nearest ancestor among these, with the class name kept in the message.
_MONTY_EXC_TYPES = frozenset(
    {
        ArithmeticError, AssertionError, AttributeError, FileExistsError, FileNotFoundError,
        ImportError, IndexError, IsADirectoryError, KeyError, LookupError, MemoryError,
        ModuleNotFoundError, NameError, NotADirectoryError, NotImplementedError, OSError,
        OverflowError, PermissionError, RecursionError, RuntimeError, StopIteration,
        TimeoutError, TypeError, UnboundLocalError, UnicodeDecodeError, UnicodeEncodeError,
        ValueError, ZeroDivisionError, Exception,
    }
)  # fmt: skip


def translate(
    exc: pm.MontyError,
    *,
    code: str,
    limits: Limits,
    interrupted: bool,
    last_tool_error: tuple[BaseException, ToolCall] | None,
) -> OrchestrationError:
    """Turn Monty's error into ours, naming the limit or the tool when there is one."""
    if interrupted:
        return Interrupted("interrupted: the interpreter was stopped")
    if isinstance(exc, pm.MontyTypingError):
        return type_check_error(exc.display(), code)
    if isinstance(exc, pm.MontyCrashedError):
        if exc.timed_out:  # one native step (``10**10**8``) outran the feed's own clock
            return LimitExceeded(
                f"time limit exceeded: the code computed for more than {limits.timeout:g} s "
                "(raise it with Limits(timeout=...))",
                limit="time",
                parameter="timeout",
            )
        return OrchestrationError(f"the Monty worker crashed: {exc}")
    if not isinstance(exc, pm.MontyRuntimeError | pm.MontySyntaxError):
        return OrchestrationError(str(exc))
    inner = exc.exception()
    tb = _MONTY_FILENAME.sub("<cell>", exc.display())
    message = str(inner)
    for kind, marker, limit, parameter, explanation in (
        (TimeoutError, "time limit exceeded", "time", "timeout",
         f"time limit exceeded: the code computed for more than {limits.timeout:g} s "
         "(raise it with Limits(timeout=...))"),
        (MemoryError, "memory limit exceeded", "memory", "max_memory",
         f"memory limit exceeded: the code used more than {limits.max_memory} MB "
         "(raise it with Limits(max_memory=...))"),
        (RecursionError, "maximum recursion depth", "stack", "max_stack_depth",
         f"stack depth limit exceeded: calls nested more than {limits.max_stack_depth} deep "
         "(raise it with Limits(max_stack_depth=...))"),
        (RuntimeError, "suspension limit", "calls", "max_calls",
         "too many host round trips (tool calls, name lookups, OS calls and sleeps): "
         "raise it with Limits(max_calls=...)"),
    ):  # fmt: skip
        if isinstance(inner, kind) and marker in message:
            # Monty gives a limit no frames, only its own line ("feed time limit exceeded:
            # 1.05s > 1s"), which would show above ours saying the same thing in its words.
            frames = tb if tb.lstrip().startswith("Traceback") else ""
            return LimitExceeded(
                explanation, limit=limit, sandbox_traceback=frames, parameter=parameter
            )
    if last_tool_error is not None:
        tool_exc, call = last_tool_error
        if message == str(for_sandbox(tool_exc)):
            return ToolError(
                f"tool {call.tool!r} raised {call.error}",
                sandbox_traceback=tb,
                tool=call.tool,
                host_traceback=call.host_traceback or "",
            )
    return OrchestrationError(f"{type(inner).__name__}: {message}", sandbox_traceback=tb)


def type_check_error(diagnostics: str, code: str) -> TypeCheckError:
    """The checker's diagnostics (ty's ``json`` format) as a traceback reads: each one at its
    line of the cell (``<cell>``, the lines a traceback counts), with the excerpt and a caret
    under the span, then what is wrong, said once.

    A variable holding an un-awaited async call (``text = fetch_page(2)``, then
    ``word_count(text)``) is shown at the call, which is where the ``await`` goes, with the
    line that used it in the message (`_unawaited.held_call`)."""
    lines = code.splitlines()
    blocks: list[str] = []
    found_all = json.loads(diagnostics)
    for found in found_all:
        row, col = found["location"]["row"], found["location"]["column"]
        end = found["end_location"]
        source = lines[row - 1] if 0 < row <= len(lines) else ""
        stop = end["column"] if end["row"] == row else len(source) + 1
        span = source[col - 1 : stop - 1]
        message = found["message"]
        if _COROUTINE.search(message):
            message, held = _explain_unawaited(span, code, row)
            if held is not None:
                row, col, stop = held.line, held.column + 1, held.end_column + 1
                source = lines[row - 1]
        indent = len(source) - len(source.lstrip())
        block = (
            f'  File "<cell>", line {row}\n    {source.strip()}\n'
            f"    {' ' * (col - 1 - indent)}{'^' * max(stop - col, 1)}\n"
            f"{message} [{found['code']}]"
        )
        if block not in blocks:  # a call whose result is used twice is one mistake
            blocks.append(block)
    error = TypeCheckError(
        "type check failed; no tool was called (type_check=False skips the check):\n"
        + "\n".join(blocks),
        parameter="type_check",
        hint="type_check=False",
    )
    error.diagnostics = tuple(f"error[{d['code']}] {d['message']}" for d in found_all)
    return error


_COROUTINE = re.compile(r"`CoroutineType\[[^`]*\]`")
_CALL = re.compile(r"^\s*(?:await\s+)?([A-Za-z_][\w.]*)\s*\(")
_NAME = re.compile(r"^[^\W\d]\w*$")


def _explain_unawaited(span: str, code: str, row: int) -> tuple[str, Source | None]:
    """What to say for a ``CoroutineType[...]`` the checker found at ``span`` (a type a person
    never wrote: an async tool called without ``await``), and the call to point at instead
    when ``span`` is a variable holding one."""
    call = _CALL.match(span)
    if call:
        name = call.group(1)
        return f"`{name}(...)` is async: write `await {name}(...)`", None
    held = held_call(code, span, row) if _NAME.match(span) else None
    if held is not None:
        return (
            f"`{held.callee}(...)` is async: write `await {held.text}`"
            f" (`{span}` holds the call, not its result; line {row} uses it)",
            held,
        )
    return (
        f"`{span}` uses the result of an async call that was not awaited:"
        " write `await` before the call"
    ), None


def describe(exc: BaseException) -> str:
    """``ExcType: message`` for traces and errors; never raises, even when the exception's own
    ``__str__`` does (a tool's exception is arbitrary code), ``SystemExit`` included: it runs
    on a run's thread or the tool loop's, where no Ctrl-C arrives, and a raise there would
    escape `orchestrate` raw or stop the tool loop."""
    try:
        message = str(exc)
    except BaseException as failure:  # see above
        message = f"<str() of the exception failed: {type(failure).__name__}>"
    return f"{type(exc).__name__}: {message}"


def for_sandbox(exc: BaseException) -> BaseException:
    """An exception Monty can raise into the code for a tool's ``exc``.

    ``exc`` itself when Monty knows its class and its arguments are plain text or numbers;
    otherwise its nearest ancestor Monty knows, carrying `describe`'s message. A
    `BaseException` that is not an `Exception` (``SystemExit`` from argparse,
    ``KeyboardInterrupt``, ``GeneratorExit``, a custom subclass) arrives as a plain
    ``Exception``: to the code it is that call's failure, caught by ``except Exception``, and
    never an exit or an interrupt of the kernel.
    """
    kind = type(exc)
    if kind in _MONTY_EXC_TYPES and all(type(a) in (str, int, float) for a in exc.args):
        return exc
    base: type[BaseException] = next((c for c in kind.__mro__ if c in _MONTY_EXC_TYPES), Exception)
    return base(describe(exc))
