"""From Monty's errors to ours, and from a tool's exception to one Monty can raise.

Monty reports a stopped feed as one of a few error types with the real cause inside; the user
should read which limit was hit and which option raises it, or which tool raised and its host
traceback, not a wrapper's name.
"""

from __future__ import annotations

import pydantic_monty as pm

from .._errors import (
    Interrupted,
    LimitExceeded,
    OrchestrationError,
    ToolError,
    TypeCheckError,
)
from .._events import ToolCall
from ._limits import Limits

_MONTY_FILENAME = "<python-input-0>"

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
    limits: Limits,
    interrupted: bool,
    last_tool_error: tuple[BaseException, ToolCall] | None,
) -> OrchestrationError:
    """Turn Monty's error into ours, naming the limit or the tool when there is one."""
    if interrupted:
        return Interrupted("interrupted: the interpreter was stopped")
    if isinstance(exc, pm.MontyTypingError):
        return TypeCheckError(
            "type check failed (no tool was called; --no-type-check skips it):\n"
            + exc.display().strip()
        )
    if isinstance(exc, pm.MontyCrashedError):
        return OrchestrationError(f"the Monty worker crashed: {exc}")
    if not isinstance(exc, pm.MontyRuntimeError | pm.MontySyntaxError):
        return OrchestrationError(str(exc))
    inner = exc.exception()
    tb = exc.display().replace(_MONTY_FILENAME, "<cell>")
    message = str(inner)
    for kind, marker, limit, explanation in (
        (TimeoutError, "time limit exceeded", "time",
         f"time limit exceeded: the cell computed for more than {limits.timeout:g} s "
         "(raise it with --timeout)"),
        (MemoryError, "memory limit exceeded", "memory",
         f"memory limit exceeded: the cell used more than {limits.max_memory} MB "
         "(raise it with --max-memory)"),
        (RuntimeError, "suspension limit", "calls",
         "too many host round trips (tool calls, name lookups, OS calls and sleeps); "
         "raise --max-calls"),
    ):  # fmt: skip
        if isinstance(inner, kind) and marker in message:
            return LimitExceeded(explanation, limit=limit, sandbox_traceback=tb)
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


def describe(exc: BaseException) -> str:
    """``ExcType: message`` for traces and errors; never raises, even when the exception's own
    ``__str__`` does (a tool's exception is arbitrary code)."""
    try:
        message = str(exc)
    except Exception as failure:
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
