"""Pieces both magics share: reading notebook variables and showing our errors readably."""

from __future__ import annotations

from typing import Any

from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic_arguments import argument

from .._errors import SandboxError
from ..orchestrate import Tool, registry

_MISSING = object()

# Options the Monty magics share, declared once.
inputs_option = argument(
    "--in",
    dest="inputs",
    action="append",
    metavar="NAMES",
    help="notebook variables bound as inputs (comma-separated, repeatable)",
)
out_option = argument("--out", metavar="NAME", help="store the result in this notebook variable")
tools_option = argument(
    "--tools",
    action="append",
    metavar="NAMES",
    help="only these registered tools (comma-separated); default: all",
)


def check_out(name: str | None) -> None:
    if name is not None and not name.isidentifier():
        raise UsageError(f"--out {name}: not a valid Python variable name")


def split_names(values: list[str] | None) -> list[str]:
    """``--in a,b --in c`` -> ["a", "b", "c"] (repeatable and comma-separated)."""
    return [n.strip() for v in values or [] for n in v.split(",") if n.strip()]


def lookup(shell: InteractiveShell, name: str, option: str) -> Any:
    """A notebook variable by name, or a one-line `UsageError` saying what to do."""
    value = shell.user_ns.get(name, _MISSING)
    if value is _MISSING:
        raise UsageError(f"{option} {name}: no variable {name!r} in the notebook; define it first")
    return value


def select_tools(values: list[str] | None) -> list[Tool]:
    """The ``--tools`` option: these registered tools (all of them when it is absent)."""
    if not values:
        return list(registry.values())
    names = split_names(values)
    unknown = [n for n in names if n not in registry]
    if unknown:
        known = ", ".join(sorted(registry)) or "none (register one with @tool)"
        raise UsageError(f"--tools: {', '.join(unknown)} not registered; registered: {known}")
    return [registry[n] for n in names]


def format_error(exc: SandboxError) -> str:
    """One readable block: what failed, where in the cell, and the host side when it matters."""
    parts: list[str] = []
    sandbox_tb = getattr(exc, "sandbox_traceback", "")
    if sandbox_tb:
        parts.append(sandbox_tb.rstrip())
    host_tb = getattr(exc, "host_traceback", "")
    if host_tb:
        parts.append(
            f"The tool {getattr(exc, 'tool', '')!r} raised, on the host:\n{host_tb.rstrip()}"
        )
    log = getattr(exc, "log", "")
    if log and getattr(exc, "record", None) is None:  # a record shows the log, once
        parts.append(f"Build log (last lines):\n{log.rstrip()}")
    parts.append(f"{type(exc).__name__}: {exc}")
    return "\n\n".join(parts)


def show_error(
    shell: InteractiveShell,
    etype: type[BaseException],
    value: BaseException,
    tb: Any,
    tb_offset: int | None = None,
) -> None:
    """`set_custom_exc` handler: our errors as the text above, not a trace of our internals.

    The cell still fails (an ``error`` output, so "run all" stops and nbclient raises)."""
    if not isinstance(value, SandboxError):
        shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
        return
    shell._showtraceback(etype, value, format_error(value).splitlines())
