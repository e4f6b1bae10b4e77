"""A sandbox run's OpenTelemetry spans, made from its events: off unless tracing is on.

`traced` opens the run's span (a child of whatever span is current: a tool call's, when the
sandbox runs as an orchestration's tool) and hands `Sandbox.execute` an ``on_event`` that turns
`BuildStarted`/`BuildFinished` into the image build's span and each `RunStarted`/`RunFinished`
into a container attempt's span; while an attempt runs it is `_otel.current`, so the run loop
adds the container's id, exit code and OOM kill to it (`_otel.annotate`). An allow-listed run's
requests are events on the run's span (`_requests`). Secrets are masked in what the spans say,
as in the run's record.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from .._shared import _otel
from .._shared._events import (
    BuildFinished,
    BuildStarted,
    Event,
    EventCallback,
    RunFinished,
    RunStarted,
)
from .._shared._secrets import mask
from ._record import SandboxRun

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span

    from ._requests import RequestLog


class _Events:
    """The run's ``on_event``: spans for its build and attempts, then ``then``'s turn."""

    def __init__(self, parent: Context, then: EventCallback, secrets: tuple[str, ...]) -> None:
        self.parent = parent
        self.then = then
        self.secrets = secrets
        self.build: Span | None = None
        self.attempt: Span | None = None

    def __call__(self, event: Event) -> None:
        if isinstance(event, RunFinished):
            self._ended(event)
        elif isinstance(event, BuildStarted | BuildFinished | RunStarted):
            self._opened(event)
        self.then(event)

    def _opened(self, event: Event) -> None:
        tracer = _otel.tracer()
        if isinstance(event, BuildStarted):
            self.build = tracer.start_span(
                "image build",
                context=self.parent,
                attributes={"container.image.name": event.tag},
            )
        elif isinstance(event, BuildFinished):
            span, self.build = self.build, None
            if span is None:  # found in the cache: no step ran, no BuildStarted came
                start = time.time_ns() - int(event.seconds * 1e9)
                span = tracer.start_span("image build", context=self.parent, start_time=start)
            span.set_attributes(
                {
                    "container.image.name": event.tag,
                    **_otel.attributes({"build.cached": event.cached}),
                }
            )
            _otel.failed(span, None if event.error is None else mask(event.error, self.secrets))
            span.end()
        elif isinstance(event, RunStarted):
            self.close_attempt()
            self.attempt = tracer.start_span(
                f"container run {event.attempt}",
                context=self.parent,
                attributes={
                    "container.image.name": event.image,
                    **_otel.attributes({"attempt": event.attempt}),
                },
            )
            _otel.current.set(self.attempt)

    def _ended(self, event: RunFinished) -> None:
        span = self.attempt
        if span is None:
            return
        exit_code = {} if event.exit_code is None else {"container.exit_code": event.exit_code}
        span.set_attributes({**exit_code, **_otel.attributes({"cached": event.cached})})
        _otel.failed(span, None if event.error is None else mask(event.error, self.secrets))
        self.close_attempt()

    def close_attempt(self) -> None:
        """End the attempt's span (the run stopped before its `RunFinished`: it ends too)."""
        span, self.attempt = self.attempt, None
        _otel.current.set(None)
        if span is not None:
            span.end()

    def close(self) -> None:
        self.close_attempt()
        if self.build is not None:  # a build the run stopped (Ctrl-C)
            self.build.end()
            self.build = None


@contextlib.contextmanager
def traced(run: SandboxRun, emit: EventCallback) -> Iterator[EventCallback]:
    """The run's span around its work, when tracing is on: yields the ``on_event`` the run
    reports to (``emit`` itself when tracing is off)."""
    if not _otel.active():
        yield emit
        return
    from opentelemetry import trace

    span = _otel.tracer().start_span(
        f"sandbox {run.name}", attributes=_otel.attributes({"sandbox.name": run.name})
    )
    run.trace_id = _otel.trace_id(span)  # its record shows it
    events = _Events(trace.set_span_in_context(span), emit, run.secrets)
    error: str | None = None
    try:
        yield events
    except BaseException as exc:
        error = mask(f"{type(exc).__name__}: {exc}", run.secrets)
        raise
    finally:
        events.close()
        span.set_attributes(
            {
                "container.image.name": run.image,
                **({} if run.exit_code is None else {"container.exit_code": run.exit_code}),
                **_otel.attributes(
                    {"sandbox.attempts": run.attempts, "sandbox.cached": run.cached}
                ),
            }
        )
        if run.requests is not None:
            _requested(span, run.requests)
        _otel.failed(span, error)
        span.end()


def _requested(span: Span, log: RequestLog) -> None:
    """An allow-listed run's requests on its span: the counts, and an event per row kept, in
    OpenTelemetry's HTTP words (already masked: `_requests`)."""
    span.set_attributes(
        _otel.attributes(
            {
                "sandbox.requests": log.total,
                "sandbox.requests.allowed": log.allowed,
                "sandbox.requests.refused": log.refused,
            }
        )
    )
    for row in log.rows:
        span.add_event(
            "http request",
            attributes={
                "http.request.method": row.method,
                "server.address": row.host,
                "server.port": row.port,
                "url.path": row.path,
                "http.response.status_code": row.status,
                **_otel.attributes(
                    {
                        "request.allowed": row.allowed,
                        "request.why": row.why,
                        "request.sent": row.sent,
                        "request.received": row.received,
                    }
                ),
            },
            timestamp=int(row.time * 1e9),
        )
