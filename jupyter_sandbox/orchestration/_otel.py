"""A run's OpenTelemetry span and its tool calls' spans, made from the run's events.

`traced` wraps one `orchestrate` / `orchestrate_async` call: when tracing is on (`_otel.active`)
it opens the run's span, current on the calling thread (the driver's thread gets
that context, so Monty's own spans nest under it), and hands the driver options whose
``on_event`` goes through `_Calls` first and whose ``approver`` marks its answers as span events.
Each `CallStarted` opens a child span for the call (the tool, its arguments' previews masked by
the run's secrets), registered in `_otel.calls` so `Tool.invoke` runs the tool with it current;
each `CallFinished` ends it with the call's status, replayed/cancelled flags and queued time.
A call the run left open (a paused, gated call) ends with the run. When tracing is off,
`traced` changes nothing and the run takes its usual paths.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any

from .._shared import _otel
from .._shared._events import CallFinished, CallStarted, Event, EventCallback, ToolCall, ignore
from .._shared._preview import preview
from .._shared._scrub import Scrub, known
from .._shared._secrets import mask
from ._result import OrchestrationResult
from ._spec import Fork, RunSpec, TakeUp

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span

ARGS_CHARS = 1000
"""The most of a call's arguments' previews one span keeps."""


class _Calls:
    """The listener: a span per tool call, children of the run's (see the module)."""

    def __init__(self, parent: Context, then: EventCallback) -> None:
        self.parent = parent
        self.then = then
        self.scrub: Scrub | None = None
        """The run's secrets (set once its driver exists): masked in the arguments' previews."""
        self.open: dict[int, tuple[ToolCall, Span]] = {}
        self.tracer = _otel.tracer()

    def __call__(self, event: Event) -> None:
        if type(event) is CallStarted:
            self.started(event.call)
        elif type(event) is CallFinished:
            self.finished(event.call)
        self.then(event)

    def started(self, call: ToolCall) -> None:
        from opentelemetry import trace

        shown = [preview(a, 200) for a in call.args]
        shown += [f"{k}={preview(v, 200)}" for k, v in call.kwargs.items()]
        secrets = (self.scrub.secrets if self.scrub is not None else ()) + known()
        span = self.tracer.start_span(
            f"execute_tool {call.tool}",
            context=self.parent,
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": call.tool,
                "gen_ai.tool.call.id": str(call.call_id),
                **_otel.attributes(
                    {
                        "tool": call.tool,
                        "call.id": call.call_id,
                        "call.line": call.line,
                        "call.arguments": mask(", ".join(shown), secrets)[:ARGS_CHARS],
                    }
                ),
            },
        )
        self.open[id(call)] = (call, span)
        _otel.calls[id(call)] = trace.set_span_in_context(span, self.parent)

    def finished(self, call: ToolCall) -> None:
        opened = self.open.pop(id(call), None)
        _otel.calls.pop(id(call), None)
        if opened is None:
            return
        span = opened[1]
        span.set_attributes(
            _otel.attributes(
                {
                    "call.status": call.status,
                    "call.replayed": call.replayed,
                    "call.cancelled": call.cancelled,
                    "call.queued_s": call.queued,
                    "call.duration_s": call.duration,
                }
            )
        )
        secrets = (self.scrub.secrets if self.scrub is not None else ()) + known()
        _otel.failed(span, None if call.error is None else mask(call.error, secrets))
        span.end()

    def event(self, call: ToolCall, name: str, **values: Any) -> None:
        """Add event ``name`` to ``call``'s span (an approval asked, answered, pending)."""
        opened = self.open.get(id(call))
        if opened is not None:
            opened[1].add_event(name, _otel.attributes(values))

    def close(self, result: OrchestrationResult | None) -> None:
        """End the spans of the calls the run left open: a paused call waits for a person."""
        pending = {id(call) for call in result.pending} if result is not None else set()
        for key, (call, span) in list(self.open.items()):
            if key in pending:
                self.event(call, "approval.pending", run_id=result and result.run_id)
                span.set_attribute(_otel.PREFIX + "call.status", "pending")
            self.open.pop(key, None)
            _otel.calls.pop(key, None)
            span.end()


class Traced:
    """One traced run: ``on_event`` and ``approver`` are what its driver gets; the span is
    current on this thread inside the ``with`` and ends with it (`done` hands it the result)."""

    def __init__(
        self,
        on_event: EventCallback | None,
        approver: Callable[[ToolCall], bool] | None,
        values: dict[str, Any],
    ) -> None:
        from opentelemetry import trace

        self.span: Span = _otel.tracer().start_span(
            "orchestrate", attributes=_otel.attributes(values)
        )
        self.trace_id = _otel.trace_id(self.span)
        self._result: OrchestrationResult | None = None
        self._parent = trace.set_span_in_context(self.span)
        self._token: object = None
        self.calls = _Calls(self._parent, on_event or ignore)
        self.on_event: EventCallback = self.calls
        self.approver = None if approver is None else self._approving(approver)

    def spec(self, spec: RunSpec) -> RunSpec:
        """``spec`` with this run's ``on_event`` and ``approver``."""
        return dataclasses.replace(spec, on_event=self.on_event, approver=self.approver)

    def _approving(self, approver: Callable[[ToolCall], bool]) -> Callable[[ToolCall], bool]:
        def approve(call: ToolCall) -> bool:
            self.calls.event(call, "approval.requested")
            try:
                answer = bool(approver(call))
            except BaseException:
                self.calls.event(call, "approval.failed")
                raise
            self.calls.event(call, "approval.answered", approved=answer)
            return answer

        return approve

    def scrubbing(self, scrub: Scrub) -> None:
        """The run's secrets, once its driver holds them."""
        self.calls.scrub = scrub

    def done(self, result: OrchestrationResult) -> OrchestrationResult:
        """The run's result, with its trace id (the span ends when the ``with`` does)."""
        self._result = result
        result.trace_id = self.trace_id
        return result

    def __enter__(self) -> Traced:
        from opentelemetry import context as otel_context

        self._token = otel_context.attach(self._parent)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        from opentelemetry import context as otel_context

        result = getattr(exc, "result", None)
        if not isinstance(result, OrchestrationResult):
            result = None if exc is not None else self._result
        if result is not None:
            result.trace_id = self.trace_id  # the record shows it, failed or not
        self.calls.close(result)
        span = self.span
        if result is not None:
            span.set_attributes(
                _otel.attributes(
                    {
                        "run.status": result.status,
                        "run.id": result.run_id,
                        "run.calls": len(result.trace),
                    }
                )
            )
            _otel.failed(span, result.error)
        elif exc is not None:
            _otel.failed(span, f"{type(exc).__name__}: {exc}")
        otel_context.detach(self._token)  # type: ignore[arg-type]
        span.end()


class Untraced:
    """`traced` when tracing is off: the driver gets what it was given, nothing else."""

    def __init__(
        self, on_event: EventCallback | None, approver: Callable[[ToolCall], bool] | None
    ) -> None:
        self.on_event = on_event
        self.approver = approver

    def spec(self, spec: RunSpec) -> RunSpec:
        return spec

    def scrubbing(self, scrub: Scrub) -> None:
        pass

    def done(self, result: OrchestrationResult) -> OrchestrationResult:
        return result

    def __enter__(self) -> Untraced:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def traced(
    on_event: EventCallback | None,
    approver: Callable[[ToolCall], bool] | None,
    **values: Any,
) -> Traced | Untraced:
    """A run's span, when tracing is on (`_otel.active`), ``values`` its first attributes;
    see the module."""
    if not _otel.active():
        return Untraced(on_event, approver)
    return Traced(on_event, approver, values)


def traced_spec(spec: RunSpec) -> Traced | Untraced:
    """`traced` for one run's spec (every door's): use ``run.spec(spec)``. A stored run
    continued says whether it was approved; a fork, what it forked."""
    how = spec.resume
    values: dict[str, Any]
    if isinstance(how, TakeUp):
        values = {"run.resume": True, "run.approved": how.approve}
    elif isinstance(how, Fork):
        values = {"run.forked_from": how.run_id, "run.fork_call": how.call_index}
    else:
        values = {
            "run.lines": spec.code.count("\n") + 1,
            "run.session": spec.session,
            "run.scope": spec.scope,
            "run.resume": how,
        }
    return traced(spec.on_event, spec.approver, **values)
