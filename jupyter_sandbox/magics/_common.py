"""Pieces both magics share: reading notebook variables and showing our errors readably."""

from __future__ import annotations

import argparse
import difflib
import keyword
import math
import re
from collections.abc import Mapping
from typing import Any, ClassVar

from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic import Magics
from IPython.core.magic_arguments import argument
from IPython.utils.process import arg_split  # type: ignore[attr-defined]
from traitlets import TraitError, TraitType

from .._shared._errors import (
    CodeModeError,
    Interrupted,
    NonZeroExit,
    SandboxCancelled,
    SandboxConfigError,
    SandboxError,
)
from .._shared._grammar import encode_reject
from ..orchestration import MB, Tool, registry
from ..sandbox import parse_size
from . import CELL_MAGICS
from ._cells import cell_frames

_MISSING = object()

# Options the Monty magics share, declared once.
inputs_option = argument(
    "--in",
    dest="inputs",
    nargs="+",
    action="extend",
    metavar="NAMES",
    help="notebook variables bound as inputs (comma- or space-separated, repeatable)",
)
out_option = argument("--out", metavar="NAME", help="store the result in this notebook variable")
tools_option = argument(
    "--tools",
    nargs="+",
    action="extend",
    metavar="NAMES",
    help="only these registered tools (comma- or space-separated); default: all",
)
help_option = argument(
    "-h", "--help", action="store_true", help="show these options and run nothing"
)
"""Every cell magic's first option. IPython's parsers have no ``--help`` of their own."""


LINE_CEILING = 100_000
"""Characters of a magic's options line `parse_options` reads. IPython's ``arg_split`` is
quadratic in the line (300,000 characters: 1.7 s; 3 MB: minutes with the kernel busy), and
no option needs more; a larger value goes through Python (``fork_run(..., value=x)``)."""


def parse_options(magic: Any, line: str) -> argparse.Namespace | None:
    """The options of ``magic`` (a cell magic decorated with ``@magic_arguments``) on ``line``;
    None after printing its help when ``-h``/``--help`` is among them, whatever else the line
    holds: a person asking for help gets it, not an error about another option."""
    if len(line) > LINE_CEILING:  # before IPython's splitting, which is quadratic in the line
        raise UsageError(
            f"{magic_name(magic)}: its line is {len(line):,} characters, more than any option "
            f"needs ({LINE_CEILING:,}); a large value goes through Python (fork_run(..., value=x))"
        )
    if {"-h", "--help"} & set(line.split()):
        print_help(magic)
        return None
    parser: argparse.ArgumentParser = magic.parser
    try:
        argv = arg_split(line, strict=True)
    except ValueError as exc:  # shlex: an unbalanced quote ("No closing quotation")
        raise UsageError(f"{magic_name(magic)}: {exc} in {line.strip()[:60]!r}") from None
    try:
        _, extra = parser.parse_known_args(argv)
        unknown = next((word for word in extra if word.startswith("-")), None)
        if unknown is not None:
            raise UsageError(unknown_option(magic, unknown.partition("=")[0]))
        args: argparse.Namespace = parser.parse_args(argv)
    except UsageError as exc:  # argparse's "argument --x: why": the option first, as ours
        raise UsageError(str(exc).removeprefix("argument ")) from None
    return args


def unknown_option(magic: Any, word: str) -> str:
    """One line for an option ``magic`` does not have: the closest one it has, else where
    the list is (argparse's own error is its whole usage text, in which the typo is lost)."""
    known = [option for option in magic.parser._option_string_actions if option[1:2] == "-"]
    close = difflib.get_close_matches(word, known, n=1, cutoff=0.8)
    if close:
        return f"unknown option {word}: did you mean {close[0]}?"
    return f"unknown option {word}: {magic_name(magic)} --help lists its options"


def print_help(magic: Any) -> None:
    """Print ``magic``'s options, as ``-h`` asks."""
    print(magic.parser.format_help().removeprefix("::\n\n").rstrip())


def magic_name(magic: Any) -> str:
    """``%%sandbox``, ``%orchestrate_approve``: the magic as a person types it."""
    name = str(magic.__name__)
    return ("%%" if name in CELL_MAGICS else "%") + name


def help_alone(lines: list[str]) -> list[str]:
    """An IPython input transformer: ``%%sandbox --help`` alone in a cell gets an empty comment
    as its body. IPython refuses a cell magic with no body ("the cell body is empty") before
    the magic sees its options, and a person asking for help writes no code first."""
    first, rest = (lines[0], lines[1:]) if lines else ("", [])
    name, _, options = first.removeprefix("%%").partition(" ")
    asks = first.startswith("%%") and {"-h", "--help"} & set(options.split())
    if asks and name in CELL_MAGICS and not "".join(rest).strip():
        return [first.rstrip("\n") + "\n", "#\n"]
    return lines


def reject_as_typed(lines: list[str]) -> list[str]:
    """An IPython input transformer: a typed ``%orchestrate_reject`` line whose reason ends in
    ``?`` is kept from IPython's help syntax (`encode_reject`)."""
    return [encode_reject(line) for line in lines]


def check_variable(name: str, option: str) -> None:
    """A name the magic will bind in the notebook: an identifier and no keyword. ``class``
    would be stored where no code can read it; soft keywords (``match``, ``type``) are names."""
    if not name.isidentifier() or keyword.iskeyword(name):
        why = "a Python keyword" if keyword.iskeyword(name) else "not a valid Python variable name"
        raise UsageError(f"{option} {name}: {why}; pick another name")


def check_out(name: str | None) -> None:
    if name is not None:
        check_variable(name, "--out")


ADVICE: Mapping[str, str] = {
    "timeout": "--timeout",
    "max_memory": "--max-memory",
    "max_calls": "--max-calls",
    "max_result": "--max-result",
    "max_output": "--max-output",
    "max_stack_depth": "--max-stack-depth",
    "max_transfer": "--max-transfer",
    "type_check": "--no-type-check",
    "resume": "without --resume",
    "inputs": "--in",
    "store": "%config OrchestrateMagics.store",
    "memory": "--memory, e.g. --memory 2g",
    "network": "--allow-net HOST (or --network bridge, the whole internet)",
    "allow_net": "--allow-net",
    "ca_bundle": "--ca-bundle PATH (or %config SandboxMagics.ca_bundle)",
    "packages": "--packages",
    "command": "--command",
    "runs": "%orchestrate_pending lists paused runs",
}
"""The one table of the magics' words for an engine error's advice: `SandboxError.parameter`
(a parameter; ``runs``: the `Store.runs` method) -> what a cell says in place of the
message's Python phrase (`SandboxError.hint`):
``Limits(max_calls=...)`` -> ``--max-calls``, ``network='bridge'`` -> ``--network bridge``.
The engines speak Python (`orchestrate`, `create` callers and a code-mode model read their
words); a cell's reader gets the option they would type. A test checks every parameter an
engine names is here."""


def in_options(exc: BaseException) -> str:
    """``exc``'s message in the magics' words: its Python advice (`SandboxError.hint`) as the
    option `ADVICE` names for its `SandboxError.parameter`; unchanged when it has none."""
    message = str(exc)
    hint, parameter = getattr(exc, "hint", ""), getattr(exc, "parameter", "")
    if hint and parameter in ADVICE:
        return message.replace(hint, ADVICE[parameter])
    return message


def usage_error(exc: SandboxConfigError, options: Mapping[str, str]) -> UsageError:
    """An engine's config error as the magic's one-line `UsageError`, naming the magic's own
    option (``options`` maps an engine parameter to it: ``{"cpu": "--cpus"}``); parameters
    not in ``options`` are spelled as options (``max_memory`` -> ``--max-memory``)."""
    message = in_options(exc)
    if exc.parameter and message.startswith(exc.parameter):
        option = options.get(exc.parameter, "--" + exc.parameter.replace("_", "-"))
        message = option + message.removeprefix(exc.parameter)
    return UsageError(message)


class CellMagics(Magics):
    """What our cell magics share: the shell they are registered in, and engine config errors
    as one-line usage errors naming the magic's own options."""

    options: ClassVar[Mapping[str, str]] = {}
    """Engine parameters this magic's options spell otherwise (``{"cpu": "--cpus"}``)."""
    _shell: InteractiveShell | None = None

    @property
    def shell(self) -> InteractiveShell:
        """The shell: a registered magic always has one (IPython types it optional)."""
        assert self._shell is not None, "a cell magic runs only in the shell it is registered in"
        return self._shell

    @shell.setter
    def shell(self, shell: InteractiveShell | None) -> None:
        self._shell = shell

    def usage_error(self, exc: SandboxConfigError) -> UsageError:
        """`usage_error` naming this magic's `options`: raise it ``from None``."""
        return usage_error(exc, self.options)

    def prompt_number(self) -> int:
        """The running cell's prompt number (``In [n]``): IPython counts the cell before it
        runs, so ``execution_count`` is already the next one's."""
        return int(self.shell.execution_count) - 1

    def frontend_cell_id(self) -> str | None:
        """The notebook's id for the running cell when the frontend sends one (JupyterLab and
        Notebook 7 do, in the request's metadata); None elsewhere (a terminal, nbclient)."""
        kernel = getattr(self.shell, "kernel", None)
        parent = kernel.get_parent() if kernel is not None else {}
        cell_id = parent.get("metadata", {}).get("cellId") if isinstance(parent, dict) else None
        return str(cell_id) if cell_id else None


def split_names(values: list[str] | None) -> list[str]:
    """``--in a,b c --in d`` -> ["a", "b", "c", "d"]: every list option takes its items
    comma- or space-separated, and repeated."""
    return split_list(values, _ANYTHING)


_ANYTHING = re.compile("")
_REQUIREMENT = re.compile(r"\s*[A-Za-z0-9]")
"""What starts a pip requirement (its name); a version specifier starts with an operator."""
_VARIABLE = re.compile(r"\s*[A-Za-z_][A-Za-z0-9_]*=")
"""What starts an environment variable's ``KEY=VALUE``."""


def split_requirements(values: list[str] | None) -> list[str] | None:
    """``--packages matplotlib,pandas>=2,<3 'numpy[a,b]'`` -> ["matplotlib", "pandas>=2,<3",
    "numpy[a,b]"]: a comma is never part of a requirement's name, but one inside its version
    specifiers (``>=2,<3``) or extras (``[a,b]``) is part of it, so a comma splits only where
    the next piece starts a new name. None when the option is absent."""
    if values is None:
        return None
    return [item for item in (i.strip(", ") for i in split_list(values, _REQUIREMENT)) if item]


def split_env(values: list[str] | None) -> list[str]:
    """``--env A=1,B=x,y C=2`` -> ["A=1", "B=x,y", "C=2"]: a value may hold commas, so a
    comma splits only where the next piece starts a ``KEY=``."""
    return split_list(values, _VARIABLE)


def split_list(values: list[str] | None, starts: re.Pattern[str]) -> list[str]:
    """The items of a list option given as words (``nargs="+"``, repeatable), each split at
    every comma outside brackets where what follows matches ``starts``; empty items dropped."""
    items: list[str] = []
    for value in values or []:
        depth, begin = 0, 0
        for at, char in enumerate(value):
            depth += {"[": 1, "]": -1}.get(char, 0)
            if char == "," and depth <= 0 and starts.match(value, at + 1):
                items.append(value[begin:at])
                begin = at + 1
        items.append(value[begin:])
    return [item.strip() for item in items if item.strip()]


SIZES = "a size with its unit (256m, 2g) or a bare number of MB"
"""How every size option and setting of the magics is written, said once."""


def megabytes(size: str | int) -> int:
    """A size option or setting the engine takes in MB (``Limits.max_memory``, ``Keep``):
    a bare number is MB, as these always took; a size with its unit is rounded up to whole
    MB (``512k`` -> 1). Raises `SandboxConfigError` saying how to write one."""
    text = size_text(size)
    return math.ceil(parse_size(text) / MB)


def size_text(size: str | int) -> str:
    """A size option or setting as the engine's size text: a bare number is MB (``512`` ->
    ``"512m"``), so no size of the magics means bytes in one place and MB in another."""
    text = str(size).strip() if isinstance(size, str | int) else ""
    if isinstance(size, bool) or not text:
        raise SandboxConfigError(f"bad size {size!r}: use {SIZES}")
    text = text + "m" if text.replace(".", "", 1).isdigit() else text
    try:
        parse_size(text)
    except SandboxConfigError:
        raise SandboxConfigError(f"bad size {size!r}: use {SIZES}") from None
    return text


def megabytes_option(text: str) -> int:
    """argparse ``type=`` of a size option in MB (`megabytes`): its error is argparse's
    line, ``--max-memory: bad size '2x': use ...`` (`parse_options`)."""
    try:
        return megabytes(text)
    except SandboxConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def size_option(text: str) -> str:
    """argparse ``type=`` of a size option in the engine's size text (`size_text`)."""
    try:
        return size_text(text)
    except SandboxConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


class Megabytes(TraitType[int, int | str]):
    """A ``%config`` size the engine takes in MB: ``= 512`` (MB, as always) or ``= '2g'``;
    it reads back as whole MB. A bad value fails the ``%config`` line and changes nothing."""

    info_text = SIZES
    convert: staticmethod[[Any], Any] = staticmethod(megabytes)

    def validate(self, obj: Any, value: Any) -> Any:
        try:
            return self.convert(value)
        except SandboxConfigError as exc:
            raise TraitError(str(exc)) from None


class Size(Megabytes):
    """A ``%config`` size the engine takes as size text: ``= '2g'``, or a bare number of MB
    (``= 512`` reads back as ``'512m'``). A bad value fails the ``%config`` line."""

    convert = staticmethod(size_text)


def megabytes_setting(default: int, what: str) -> Megabytes:
    """A ``%config`` setting in MB (`Megabytes`) whose help says ``what`` and how to write it."""
    trait: Megabytes = Megabytes(default, help=f"{what}: {SIZES}.").tag(config=True)
    return trait


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
    if isinstance(exc, NonZeroExit) and exc.streamed:
        return said_once(exc)
    if isinstance(exc, CodeModeError) and exc.shown:
        return f"CodeModeError: {given_up(exc)}"
    parts: list[str] = []
    sandbox_tb = getattr(exc, "sandbox_traceback", "")
    host_tb = cell_frames(getattr(exc, "host_traceback", ""))
    last = f"{type(exc).__name__}: {in_options(exc)}"
    through = _through_the_tool(sandbox_tb, host_tb, last)
    if through is not None:
        return through
    if sandbox_tb:
        *frames, own = sandbox_tb.rstrip().splitlines()
        if frames and not host_tb and str(exc) == own:  # ours says it: the frames, then ours
            return "\n".join([*frames, last])
        parts.append(sandbox_tb.rstrip())
    if host_tb:
        parts.append(
            f"The tool {getattr(exc, 'tool', '')!r} raised, on the host:\n{host_tb.rstrip()}"
        )
    log = getattr(exc, "log", "")
    if log and getattr(exc, "record", None) is None:  # a record shows the log, once
        parts.append(f"Build log (last lines):\n{log.rstrip()}")
    parts.append(last)
    return "\n\n".join(parts)


def said_once(exc: NonZeroExit) -> str:
    """A failed run whose stderr streamed into the cell (its traceback ends with why): the
    exit code, not that last line again, and the advice on a line of its own, in the magics'
    words (`ADVICE`). An allow-list's refusal comes first: the traceback above it (an
    ``HTTPError 403`` deep in urllib) only says that something refused."""
    said = f"exited with code {exc.exit_code} (its stderr above says why)"
    advice = exc.advice
    if exc.hint and exc.parameter in ADVICE:
        advice = advice.replace(exc.hint, ADVICE[exc.parameter])
    if advice and exc.parameter == "allow_net":  # the refusal is the cause: said first
        return f"NonZeroExit: {advice}\n{said}"
    return f"NonZeroExit: {said}\n{advice}" if advice else f"NonZeroExit: {said}"


def given_up(exc: CodeModeError) -> str:
    """``%%codemode`` out of attempts, its view having shown each attempt's code and error:
    one line that names the last error and the option that tries again, in the magic's
    words (its message repeats the last error whole, in the API's)."""
    tried = len(exc.attempts)
    last = exc.attempts[-1].error if exc.attempts else None
    what = f"the last attempt's {type(last).__name__} is above" if last else "see above"
    return f"no working code after {tried} attempt(s) ({what}); --max-attempts N tries more"


_HEADER = "Traceback (most recent call last):"


def _through_the_tool(sandbox_tb: str, host_tb: str, last: str) -> str | None:
    """A tool's failure as one traceback, the way Python shows a call that raised: the cell's
    frames, then the tool's frames on the host, then our one line (which names the tool's
    exception, so neither side's own exception line is repeated). None when either side is
    not a single plain traceback (a chained host exception keeps both in full)."""
    if not sandbox_tb or not host_tb or host_tb.count(_HEADER) != 1:
        return None
    frames = [_frames(sandbox_tb), _frames(host_tb)]
    if not all(frames):
        return None
    return "\n".join([_HEADER, *frames[0], *frames[1], last])


def _frames(tb: str) -> list[str]:
    """The frame lines of a traceback (indented, between its header and its exception)."""
    lines = tb.strip().splitlines()
    if not lines or lines[0] != _HEADER:
        return []
    frames = []
    for line in lines[1:]:
        if not line.startswith(" "):
            break
        frames.append(line)
    return frames


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
    shown = _as_shown(value)
    if isinstance(value, Interrupted | SandboxCancelled):  # the message says it all
        shell._showtraceback(etype, shown, [str(shown)])
        return
    shell._showtraceback(etype, shown, format_error(value).splitlines())


def _as_shown(exc: SandboxError) -> SandboxError:
    """``exc`` with its message in the magics' words (`in_options`), for the error output's
    ``evalue`` (what a saved notebook and nbconvert show beside the traceback); ``exc``
    itself, the engine's, is what the cell raised and keeps its Python words. Made without
    calling ``__init__`` (ours take keyword-only data), its attributes copied."""
    message = given_up(exc) if isinstance(exc, CodeModeError) and exc.shown else in_options(exc)
    if message == str(exc):
        return exc
    shown = type(exc).__new__(type(exc), message)
    shown.__dict__.update(vars(exc))
    return shown
