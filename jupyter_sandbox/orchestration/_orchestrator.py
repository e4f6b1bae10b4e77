"""Reusable orchestrators: ``@orchestrator`` and `orchestrator_from_str`, Flyte's
``@env.sandbox.orchestrator`` and ``flyte.sandbox.orchestrator_from_str``.

``orchestrate(code)`` runs a string once. An orchestrator is defined once (a function whose
body runs in Monty, or a code string with typed inputs) and called many times like a function,
and it is itself a `Tool`: other orchestrations and `CodeModeAgent` may call it.

Where the work happens, and why:

- **At definition** the body is type-checked against its tools' stubs and its own annotations
  (`_stubs`, Monty's checker, `_typecheck`'s cache): a wrong tool call fails the cell that
  defines the orchestrator, not the first call an hour later.
- **At each call** the arguments are bound as the function would bind them (defaults,
  keywords) and checked against the annotations on the host (`_conforms`), the body runs as
  one `Driver` run, and the value is checked against the return annotation. The body is not
  type-checked again: what the checker reads has not changed, and the arguments are checked.
- **Work that is the same at each call is done once**: the run's `RunSpec` is checked when
  the orchestrator is made and each call adds only its inputs (`RunSpec.called`); arguments
  all passed by position bind without `inspect`. Each call is still a run of its own (a fresh
  Monty session, its own limits, prints, approvals and Ctrl-C, as in any run), on a kept
  thread (`_run_thread.start`).

Each call outside an orchestration shows itself through `presenter` (the notebook's live view
and saved record, set by ``%load_ext``; see `jupyter_sandbox.magics`); a call made as a tool
nests its run's record in the calling run's trace, as a sandbox tool nests its container run.
No IPython here.
"""

from __future__ import annotations

import ast
import asyncio
import functools
import inspect
import re
import sys
import textwrap
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from typing import Any, Protocol, overload

import pydantic_monty as pm

from .._shared import _defaults as default
from .._shared._checks import bounded
from .._shared._errors import OrchestrationError, SandboxConfigError, ToolError
from .._shared._events import Event, Output, ToolCall
from .._shared._preview import preview
from .._shared._text import unindented
from . import _typecheck
from ._conforms import conforms
from ._driver import _CHECKED_STUB, _SCRIPT, Driver, _running, check_apart, parent_loop
from ._failures import translate
from ._limits import Limits, megabytes_from_bytes, seconds_from_ms
from ._plan import plan
from ._registry import Tools, resolve_tools
from ._registry import current as current_registry
from ._result import OrchestrationResult, result_of
from ._run_thread import start, wait
from ._spec import RunSpec
from ._stubs import _StubWriter, stubs
from ._tool import Tool
from ._values import type_name
from ._workers import current, tool_loop

__all__ = [
    "Orchestrator",
    "Presenter",
    "Shown",
    "orchestrator",
    "orchestrator_from_str",
    "presenter",
]

CALL_RETRIES_CEILING = 100
"""Re-runs one call may ask for (``retries=``): past that, retrying is a loop, not a remedy."""


class Shown(Protocol):
    """One call's view: it receives the run's events, then the result once (`Presenter`)."""

    def on_event(self, event: Event) -> None: ...
    def finish(self, result: OrchestrationResult, *, raised: bool) -> None: ...


class Presenter(Protocol):
    """What shows an orchestrator's call in a notebook: the view for one call of it, given
    the call as a person reads it (``sum_squares(1)``), which its record is titled by."""

    def __call__(self, orchestrator: Orchestrator, call: str) -> Shown: ...


class _Quiet:
    """The view of a call nested in an orchestration: the calling run shows it."""

    def on_event(self, event: Event) -> None:
        return None

    def finish(self, result: OrchestrationResult, *, raised: bool) -> None:
        return None


_QUIET = _Quiet()


class _Printed(_Quiet):
    """The view of a call where no notebook is: what the body prints goes to this process's
    stdout and stderr as it happens, as the function's own prints would."""

    def on_event(self, event: Event) -> None:
        if isinstance(event, Output):
            stream = sys.stderr if event.stream == "stderr" else sys.stdout
            stream.write(event.text)


_PRINTED = _Printed()


class _Presenters:
    """The presenter in place (one per process: the notebook's kernel sets it)."""

    current: Presenter | None = None


presenter = _Presenters()
"""``presenter.current`` shows each call made outside an orchestration; ``%load_ext
jupyter_sandbox`` sets it (the live view), unloading clears it; None prints the body's
output to stdout, as the function would."""


class Orchestrator(Tool):
    """A reusable sandboxed orchestration: call it like the function it was made from.

    Made by `orchestrator` (from a function) or `orchestrator_from_str` (from code and typed
    inputs). Its body runs in Monty and can call only ``tools``; ``limits`` bound each call,
    and a call whose run fails in a tool (`ToolError`) runs again up to ``retries`` times.
    ``show`` says which calls in a notebook cell show the live view and record: None (the
    default) the first call of each cell (a loop of calls prints, but shows one record),
    True every call, False none. A `Tool`: ``tool(o)``, or passing it in ``tools=``, lets
    other orchestrations and `CodeModeAgent` call it (its run's record nests in the call)."""

    def __init__(
        self,
        *,
        code: str,
        call: str,
        name: str,
        signature: inspect.Signature,
        hints: Mapping[str, Any],
        tools: Mapping[str, Tool],
        limits: Limits,
        retries: int,
        type_check: bool,
        show: bool | None,
        is_async: bool,
        wrapped: Callable[..., Any] | None,
        doc: str | None,
        declared: Mapping[str, Any],
    ) -> None:
        """Made by `orchestrator` and `orchestrator_from_str`, which work these out: ``code``
        the body as it runs (a ``def``, or the code string), ``call`` the line that calls a
        ``def`` ("" for a string), ``hints`` the annotations to check, ``declared`` the
        globals the type check must know (a string's inputs), ``wrapped`` the function
        whose signature and docstring the orchestrator shows (else ``signature``, ``doc``)."""
        self.tools = dict(tools)
        self.limits = limits
        self.retries = int(
            bounded(retries, "retries", low=0, high=CALL_RETRIES_CEILING, integer=True)
        )
        self.type_check = type_check
        self.show = show
        self.hints = dict(hints)
        """Parameter name (and ``"return"``) -> annotation: what `_conforms` checks."""
        self.__signature__ = signature
        if type_check:  # before anything else: a wrong body never becomes a tool
            value = None if call else self.hints.get("return")  # a string's last expression
            _check_definition(code, self.tools, declared, self.hints.values(), value, limits)
        self.code = f"{code}\n{call}\n" if call else code
        """What runs at each call: the body, then (a function's) the line that calls it."""
        self._spec = RunSpec(
            code=self.code, tools=self.tools, inputs={}, limits=limits, type_check=False
        )
        """Each call's run but its inputs and view, checked once here (`RunSpec.called`)."""
        self._positional = _positional(signature)
        """The parameters' names when every one may be passed by position and none has a
        default or is variadic: a call giving each by position binds without `inspect`."""
        self._function = wrapped
        runner = self._runner(is_async)
        if wrapped is not None:
            functools.update_wrapper(runner, wrapped)
        else:
            runner.__name__ = runner.__qualname__ = _tool_name(name)
            runner.__doc__ = doc
            runner.__annotations__ = dict(hints)
            runner.__signature__ = signature  # type: ignore[attr-defined]
        super().__init__(runner, _tool_name(name))
        self.name = name  # Flyte's, as given: ``t.name == "sandboxed-code"``

    def _runner(self, is_async: bool) -> Callable[..., Any]:
        """The function behind the tool: a run of the body in Monty, never the body on the host
        (whatever calls ``func`` directly, as the driver's plain path does, stays sandboxed)."""
        if is_async:

            async def run_async(*args: Any, **kwargs: Any) -> Any:
                return await self._call_async(None, args, kwargs)

            return run_async

        def run(*args: Any, **kwargs: Any) -> Any:
            return self._call(None, args, kwargs)

        return run

    def invoke(self, call: ToolCall, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A call from orchestration code: its run's record nests in ``call``."""
        if self.is_async:
            return self._call_async(call, args, kwargs)
        return self._call(call, args, kwargs)

    def __repr__(self) -> str:
        kind = "async orchestrator" if self.is_async else "orchestrator"
        return f"<{kind} {self.name}{self.__signature__}>"

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Flyte's ``forward``: the function itself, run as plain Python on the host, outside
        the sandbox (its tools called as functions), to test its logic without Monty; the
        same function ``__wrapped__`` holds. An orchestrator from a code string has no
        function: ``NotImplementedError``."""
        if self._function is None:
            raise NotImplementedError(
                f"{self.name}: an orchestrator from a code string does not support forward():"
                " there is no Python function to call; call the orchestrator itself"
            )
        return self._function(*args, **kwargs)

    # -- a call --------------------------------------------------------------------------

    def _call(self, call: ToolCall | None, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        inputs = self._inputs(args, kwargs)
        shown = self._shown(call, args, kwargs)
        attempt = 0
        while True:
            driver = self._driver(inputs, shown, tool_loop(parent_loop()))
            try:
                result = wait(driver)
                break
            except OrchestrationError as exc:
                attempt += 1
                if not self._again(exc, attempt, shown):
                    self._finish(call, shown, result_of(exc), raised=True)
                    raise
        self._finish(call, shown, result, raised=False)
        return self._output(result.value)

    async def _call_async(
        self, call: ToolCall | None, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        inputs = self._inputs(args, kwargs)
        shown = self._shown(call, args, kwargs)
        attempt = 0
        while True:
            driver = self._driver(inputs, shown, asyncio.get_running_loop())
            try:
                result = await asyncio.wrap_future(start(driver))
                break
            except asyncio.CancelledError:  # as `orchestrate_async`: cancelling stops it
                driver.stop()
                raise
            except OrchestrationError as exc:
                attempt += 1
                if not self._again(exc, attempt, shown):
                    self._finish(call, shown, result_of(exc), raised=True)
                    raise
        self._finish(call, shown, result, raised=False)
        return self._output(result.value)

    def _again(self, exc: OrchestrationError, attempt: int, shown: Shown) -> bool:
        """Whether a call whose ``attempt``-th run failed with ``exc`` runs again, saying so
        on stderr. Only a tool's failure: the body is deterministic given its tools' answers,
        so any other failure (its own error, a limit, Ctrl-C) would only happen again."""
        if not isinstance(exc, ToolError) or attempt > self.retries:
            return False
        why = str(exc).partition("\n")[0]
        line = f"{self.name}: retry {attempt} of {self.retries} after {why:.200}\n"
        shown.on_event(Output("stderr", line))
        return True

    def _driver(
        self, inputs: dict[str, Any], shown: Shown, loop: asyncio.AbstractEventLoop
    ) -> Driver:
        """One run of the body, as `orchestrate` plans it without a store, journal or session;
        the type check was done when the orchestrator was defined. Its gated calls are asked
        to the run it is nested in (`_approval`): with none, they fail it."""
        return plan(self._spec.called(inputs, shown.on_event), loop)

    def _inputs(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The call's arguments by parameter name, as Python binds them (defaults filled in),
        each checked against its annotation: a ``TypeError`` before anything runs."""
        names = self._positional
        if names is not None and not kwargs and len(args) == len(names):
            # what `inspect.Signature.bind` gives such a call, without its general machinery
            inputs = dict(zip(names, args, strict=True))
            if self.type_check:
                hints = self.hints
                for name, value in inputs.items():
                    _expect(value, hints.get(name, Any), f"{self.name}() argument {name!r}")
            return inputs
        try:
            bound = self.__signature__.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{self.name}(): {exc}") from None
        bound.apply_defaults()
        if self.type_check:
            for name, value in bound.arguments.items():
                kind = self.__signature__.parameters[name].kind
                values = (
                    value
                    if kind is inspect.Parameter.VAR_POSITIONAL
                    else value.values()
                    if kind is inspect.Parameter.VAR_KEYWORD
                    else (value,)
                )
                for item in values:
                    _expect(item, self.hints.get(name, Any), f"{self.name}() argument {name!r}")
        return dict(bound.arguments)

    def _output(self, value: Any) -> Any:
        if self.type_check:
            _expect(value, self.hints.get("return", Any), f"{self.name}() returned a value that")
        return value

    def _shown(self, call: ToolCall | None, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Shown:
        """Where this call shows: nowhere of its own inside an orchestration (the calling
        run's trace holds it), else the notebook's view (`presenter`), else stdout."""
        if call is not None or _running.get() is not None:
            return _QUIET
        current = presenter.current
        return _PRINTED if current is None else current(self, self._written(args, kwargs))

    def _written(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        """The call as a person reads it, ``sum_squares(1)``: what its record is titled by,
        so a cell calling several orchestrators (or one several times) says which it shows."""
        parts = [preview(value, _ARGUMENT) for value in args]
        parts += [f"{key}={preview(value, _ARGUMENT)}" for key, value in kwargs.items()]
        return f"{self.name}({', '.join(parts)})"

    @staticmethod
    def _finish(
        call: ToolCall | None, shown: Shown, result: OrchestrationResult | None, *, raised: bool
    ) -> None:
        if result is None:
            return
        shown.finish(result, raised=raised)
        if call is not None:
            call.children.append(result.to_record())


def _positional(signature: inspect.Signature) -> tuple[str, ...] | None:
    """The names of ``signature``'s parameters when each is positional-or-keyword (or
    positional-only) with no default, else None (`Orchestrator._inputs`' general path)."""
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    parameters = signature.parameters.values()
    if all(p.kind in kinds and p.default is inspect.Parameter.empty for p in parameters):
        return tuple(signature.parameters)
    return None


_ARGUMENT = 40
"""Characters of each argument a call's title shows (its record's calls show more)."""


def _expect(value: object, annotation: Any, what: str) -> None:
    """A ``TypeError`` saying ``what`` when ``value`` does not fit ``annotation``, which it
    names as the stubs write it (``dict[str, int]``)."""
    if not conforms(value, annotation):
        expected = _StubWriter().render(annotation)
        raise TypeError(f"{what} must be {expected}, got {type_name(value)}: {value!r:.80}")


# -- the type check at definition -----------------------------------------------------------


def _check_definition(
    code: str,
    tools: Mapping[str, Tool],
    declared: Mapping[str, Any],
    annotations: Iterable[Any],
    value: Any,
    limits: Limits,
) -> None:
    """Type-check ``code`` against ``tools`` (their stubs) and ``declared`` (name ->
    annotation: the inputs of a code string) before any of it runs; the classes its own
    annotations name are declared as opaque, as a tool's are, and ``value`` (a code string's
    output) is what its last expression must be. Raises `TypeCheckError` (or the code's
    syntax error) with the code's own lines. A pass is remembered (`_typecheck`): re-running
    the defining cell unchanged costs no check."""
    writer = _StubWriter()
    written = stubs(tools, {})
    code = _typed_value(code, value, writer)
    lines = [f"{name}: {writer.render(annotation)}" for name, annotation in declared.items()]
    for annotation in annotations:
        writer.render(annotation)
    own = [f"class {name}: ..." for name in writer.classes]
    own = [line for line in own if line not in written.classes]
    source = "\n".join([written.source, *own, *lines, _CHECKED_STUB])
    token = object()
    parent = _running.get()
    runtime = current()
    level = runtime.hold_level(token, None if parent is None else parent.level)
    try:
        with runtime.pool(level).checkout(
            script_name=_SCRIPT,
            limits={"max_feed_duration_secs": limits.timeout},
            type_check=True,
            type_check_stubs=source,
            type_check_format="json",
        ) as session:
            if _typecheck.checked(source, code, (), lambda: check_apart(session, code)):
                return
            try:  # fed again alone, so the errors name the code's own lines (it stops there)
                session.feed_start(code)
            except pm.MontyError as exc:
                raise translate(
                    exc, code=code, limits=limits, interrupted=False, last_tool_error=None
                ) from None
    except pm.MontyError as exc:  # a syntax error, or a feature Monty lacks (yield)
        raise translate(
            exc, code=code, limits=limits, interrupted=False, last_tool_error=None
        ) from None
    finally:
        runtime.release_level(token, level)


_VALUE = "jupyter_sandbox_value"
"""The name the type check assigns a code string's last expression to, annotated with its
``output`` (a ``def``'s return annotation is checked by the checker itself)."""


def _typed_value(code: str, value: Any, writer: _StubWriter) -> str:
    """``code`` with its last expression assigned to `_VALUE` annotated as ``value``, for the
    checker alone (the code that runs is unchanged): the expression starts on its own line, so
    a diagnostic names the lines as written. Unchanged when there is no output to check or no
    trailing expression (or the code does not parse: the check reports that)."""
    if value is None or value is Any:
        return code
    try:
        body = ast.parse(code).body
    except SyntaxError:
        return code
    last = body[-1] if body else None
    if not isinstance(last, ast.Expr) or last.end_lineno is None:
        return code
    lines = code.splitlines(keepends=True)
    segment = ast.get_source_segment(code, last) or ast.unparse(last)
    typed = f"{_VALUE}: {writer.render(value)} = ({segment})\n"
    return "".join([*lines[: last.lineno - 1], typed, *lines[last.end_lineno :]])


# -- making one ----------------------------------------------------------------------------


def _limits(
    limits: Limits | None, timeout_ms: int, max_memory: int, max_stack_depth: int
) -> Limits:
    """``limits`` (default `Limits()`) with Flyte's three keywords in place: they always set
    theirs, ``limits`` the rest (``max_calls``, ``max_result``, ``max_output``)."""
    return replace(
        limits or Limits(),
        timeout=seconds_from_ms(timeout_ms),
        max_memory=megabytes_from_bytes(max_memory),
        max_stack_depth=max_stack_depth,
    )


_FLYTE_MAP = re.compile(r"\bflyte_map\b")


def with_flyte_map(tools: Mapping[str, Tool], code: str) -> dict[str, Tool]:
    """``tools``, plus Flyte's built-in ``flyte_map`` over them (`_flyte_map`) when ``code``
    names it and no tool has its name: what Flyte's doors (`orchestrate_local`, an
    orchestrator) give ported code, and no other run."""
    chosen = dict(tools)
    if "flyte_map" not in chosen and isinstance(code, str) and _FLYTE_MAP.search(code):
        from ._flyte_map import NAME, flyte_map_over  # loaded by the first code that needs it

        chosen[NAME] = flyte_map_over(tools)
    return chosen


def _tool_name(name: str) -> str:
    """Flyte names tasks ``compute-pipeline``; a tool's name is what code calls it by."""
    return name.replace("-", "_")


def _tools(tools: Tools, tasks: Tools) -> Tools:
    if tools is not None and tasks is not None:
        raise SandboxConfigError("pass tools= or tasks= (Flyte's name for it), not both")
    return tasks if tools is None else tools


@overload
def orchestrator(func: Callable[..., Any], /) -> Orchestrator: ...
@overload
def orchestrator(
    func: str,
    /,
    *,
    inputs: Mapping[str, Any],
    output: Any = None,
    tools: Tools = None,
    tasks: Tools = None,
    name: str = default.ORCHESTRATOR_NAME,
    timeout_ms: int = default.ORCHESTRATOR_TIMEOUT_MS,
    max_memory: int = default.ORCHESTRATOR_MAX_MEMORY_BYTES,
    max_stack_depth: int = default.ORCHESTRATOR_MAX_STACK_DEPTH,
    retries: int = default.RETRIES,
    type_check: bool = True,
    limits: Limits | None = None,
    show: bool | None = None,
) -> Orchestrator: ...
@overload
def orchestrator(
    *,
    tools: Tools = None,
    tasks: Tools = None,
    name: str | None = None,
    timeout_ms: int = default.ORCHESTRATOR_TIMEOUT_MS,
    max_memory: int = default.ORCHESTRATOR_MAX_MEMORY_BYTES,
    max_stack_depth: int = default.ORCHESTRATOR_MAX_STACK_DEPTH,
    retries: int = default.RETRIES,
    type_check: bool = True,
    limits: Limits | None = None,
    show: bool | None = None,
) -> Callable[[Callable[..., Any]], Orchestrator]: ...
def orchestrator(
    func: Callable[..., Any] | str | None = None,
    /,
    *,
    inputs: Mapping[str, Any] | None = None,
    output: Any = None,
    tools: Tools = None,
    tasks: Tools = None,
    name: str | None = None,
    timeout_ms: int = default.ORCHESTRATOR_TIMEOUT_MS,
    max_memory: int = default.ORCHESTRATOR_MAX_MEMORY_BYTES,
    max_stack_depth: int = default.ORCHESTRATOR_MAX_STACK_DEPTH,
    retries: int = default.RETRIES,
    type_check: bool = True,
    limits: Limits | None = None,
    show: bool | None = None,
) -> Orchestrator | Callable[[Callable[..., Any]], Orchestrator]:
    """Make a function's body run in the Monty sandbox, calling only tools: Flyte's
    ``@env.sandbox.orchestrator``. Use as ``@orchestrator``, ``@orchestrator(timeout_ms=5000)``
    or, with a code string, as `orchestrator_from_str` (``orchestrator("x + y", inputs=...)``).

    The result is called like the function (positional, keyword, default arguments; an
    ``async def`` body is awaited) and is a `Tool` other orchestrations may call. Its tools are
    ``tools`` (``tasks``, Flyte's spelling), else the tools the body names: the `Tool` s (and
    orchestrators) its free names are bound to, or registered with ``@tool`` under those
    names. The body is type-checked against them and its annotations now, so a wrong tool call
    fails here; each call checks its arguments and value against the annotations
    (``type_check=False`` skips all three). Everything else the body names must be defined
    in it: it runs in Monty, which has no access to the notebook's variables.

    Limits, per call: ``timeout_ms`` (Monty compute time), ``max_memory`` (bytes of heap,
    rounded up to whole MB), ``max_stack_depth`` (nested calls), Flyte's defaults; ``limits``
    sets the others (`Limits`). ``retries`` (Flyte's) runs a call again when its run fails in a
    tool (`ToolError`). ``show`` decides which calls show a record in a notebook (see
    `Orchestrator`). `Orchestrator.forward` runs the function itself, outside the sandbox."""
    if isinstance(func, str):
        if inputs is None:
            raise SandboxConfigError("orchestrator(code, ...) needs inputs= (name -> type)")
        return orchestrator_from_str(
            func,
            inputs=inputs,
            output=output,
            tools=tools,
            tasks=tasks,
            name=name or default.ORCHESTRATOR_NAME,
            timeout_ms=timeout_ms,
            max_memory=max_memory,
            max_stack_depth=max_stack_depth,
            retries=retries,
            type_check=type_check,
            limits=limits,
            show=show,
        )
    if inputs is not None or output is not None:
        raise SandboxConfigError(
            "inputs= and output= describe a code string; a function's annotations say them"
        )
    resolved = _limits(limits, timeout_ms, max_memory, max_stack_depth)
    chosen = _tools(tools, tasks)

    def make(function: Callable[..., Any]) -> Orchestrator:
        return _from_function(
            function,
            tools=chosen,
            name=name,
            limits=resolved,
            retries=retries,
            type_check=type_check,
            show=show,
        )

    return make if func is None else make(func)


def orchestrator_from_str(
    source: str,
    *,
    inputs: Mapping[str, Any],
    output: Any = None,
    tools: Tools = None,
    tasks: Tools = None,
    name: str = default.ORCHESTRATOR_NAME,
    timeout_ms: int = default.ORCHESTRATOR_TIMEOUT_MS,
    max_memory: int = default.ORCHESTRATOR_MAX_MEMORY_BYTES,
    max_stack_depth: int = default.ORCHESTRATOR_MAX_STACK_DEPTH,
    retries: int = default.RETRIES,
    type_check: bool = True,
    limits: Limits | None = None,
    show: bool | None = None,
) -> Orchestrator:
    """A reusable orchestrator from a code string: Flyte's ``flyte.sandbox.orchestrator_from_str``.

    ``inputs`` (name -> type) are its parameters, in that order (by position or by name);
    the value of the code's last expression is its result, of type ``output`` (None: not
    declared, any value). ``tools`` (or ``tasks``) are what it may call (None: every
    registered tool); ``name`` (default Flyte's ``sandboxed-code``) is its ``name``, as
    Flyte's, and other code calls it by its ``key``, the name with each ``-`` an ``_``.
    ``source`` indented as a whole (a triple-quoted string inside a function) is unindented,
    as Flyte does. Type-checked now, checked at each
    call, limited and retried as `orchestrator` says."""
    if not isinstance(source, str):
        raise SandboxConfigError(
            f"orchestrator_from_str() needs source code as a str, got {type(source).__name__}"
        )
    if not isinstance(inputs, Mapping) or not all(
        isinstance(key, str) and key.isidentifier() for key in inputs
    ):
        raise SandboxConfigError("inputs= takes a mapping of identifier -> type")
    parameters = [
        inspect.Parameter(key, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=kind)
        for key, kind in inputs.items()
    ]
    returns = Any if output is None else output
    hints = {**inputs, "return": returns}
    body = unindented(source)
    return Orchestrator(
        code=body,
        call="",
        name=name,
        signature=inspect.Signature(parameters, return_annotation=returns),
        hints=hints,
        tools=with_flyte_map(resolve_tools(_tools(tools, tasks)), body),
        limits=_limits(limits, timeout_ms, max_memory, max_stack_depth),
        retries=retries,
        type_check=type_check,
        show=show,
        is_async=False,
        wrapped=None,
        doc=f"Runs in the Monty sandbox:\n\n{textwrap.indent(body.strip(), '    ')}",
        declared=inputs,
    )


def _from_function(
    func: Callable[..., Any],
    *,
    tools: Tools,
    name: str | None,
    limits: Limits,
    retries: int,
    type_check: bool,
    show: bool | None,
) -> Orchestrator:
    if isinstance(func, Tool) or not inspect.isfunction(func):
        raise SandboxConfigError(
            f"@orchestrator takes a function defined with def, got {type(func).__name__}"
        )
    if inspect.isgeneratorfunction(func) or inspect.isasyncgenfunction(func):
        kind = "async generators" if inspect.isasyncgenfunction(func) else "generators"
        raise SandboxConfigError(
            f"orchestrators cannot be {kind}: {func.__qualname__}() yields; return a list"
        )
    code, defined = _definition(func)
    signature = inspect.signature(func)
    if defined in signature.parameters:
        raise SandboxConfigError(f"{defined}() has a parameter named {defined!r} as well")
    try:
        hints = typing.get_type_hints(func)
    except Exception:  # an annotation Python cannot resolve: checked as Any
        hints = {}
    call = f"{defined}({', '.join(_arguments(signature))})"
    is_async = inspect.iscoroutinefunction(func)
    return Orchestrator(
        code=code,
        call=f"await {call}" if is_async else call,
        name=name or defined,
        signature=signature,
        hints=hints,
        tools=with_flyte_map(_named_tools(func) if tools is None else resolve_tools(tools), code),
        limits=limits,
        retries=retries,
        type_check=type_check,
        show=show,
        is_async=is_async,
        wrapped=func,
        doc=None,
        declared={},
    )


def _definition(func: Callable[..., Any]) -> tuple[str, str]:
    """The function's ``def`` as the code to run, and the name it defines. Its decorators
    become comments (they are host code: ``@orchestrator`` itself), so the code's lines are
    the lines as written, from the first decorator, and a traceback's line numbers match."""
    try:
        source = unindented(inspect.getsource(func))
    except (OSError, TypeError):
        raise SandboxConfigError(
            f"@orchestrator needs the source of {func.__qualname__}(): define it in a file or "
            "a notebook cell (not exec or a lambda), or use orchestrator_from_str"
        ) from None
    tree = ast.parse(source)
    node = tree.body[0]
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        raise SandboxConfigError(f"@orchestrator takes a def, not {type(node).__name__}")
    lines = source.splitlines()
    for index in range(node.lineno - 1):
        lines[index] = f"# {lines[index]}"
    return "\n".join(lines) + "\n", node.name


def _arguments(signature: inspect.Signature) -> Iterator[str]:
    """The call of the body with each parameter bound to the input of the same name."""
    for name, parameter in signature.parameters.items():
        if parameter.kind is parameter.POSITIONAL_ONLY:
            yield name
        elif parameter.kind is parameter.VAR_POSITIONAL:
            yield f"*{name}"
        elif parameter.kind is parameter.VAR_KEYWORD:
            yield f"**{name}"
        else:
            yield f"{name}={name}"


def _named_tools(func: Callable[..., Any]) -> dict[str, Tool]:
    """The tools the body names: its free names (globals, closure variables; nested
    functions' too) bound to a `Tool`, else registered as a tool under that name. A name bound
    to anything else is not a tool: Monty cannot see it, and the type check says so."""
    scope: dict[str, Any] = dict(func.__globals__)
    closure = func.__closure__ or ()
    scope.update(
        (name, cell.cell_contents)
        for name, cell in zip(func.__code__.co_freevars, closure, strict=True)
        if _filled(cell)
    )
    found: dict[str, Tool] = {}
    for name in sorted(_free_names(func.__code__)):
        value = scope.get(name, current_registry().get(name))
        if isinstance(value, Tool):
            found[name] = resolve_tools({name: value})[name]
    return found


def _filled(cell: types.CellType) -> bool:
    try:
        cell.cell_contents  # noqa: B018  # an empty cell raises
    except ValueError:
        return False
    return True


def _free_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names) | set(code.co_freevars)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _free_names(const)
    return names
