"""OpenTelemetry traces of runs, tool calls and containers: off by default, free when off.

Tracing is a consumer of the engines' events (`_events`), not a part of their loops: a traced
run's ``on_event`` goes through a listener that turns `CallStarted`/`CallFinished` into a span
per tool call (`orchestration._otel`), and a sandbox run's events into spans for its image build
and container attempts (`sandbox._otel`). The one thing events cannot do is make a call's span
*current* where its tool runs, so that what the tool does (a sandbox run, a nested
``orchestrate``, the tool's own instrumented code) nests under the call: `Tool.invoke` asks
`within` for that, which costs one dict lookup when nothing is traced.

The switch (`active`): `configure` (``%config OrchestrateMagics.otel``) says on or off; left at
None, the standard environment decides: on when ``OTEL_TRACES_EXPORTER`` names an exporter
(not ``none``) or ``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is
set, unless ``OTEL_SDK_DISABLED=true``. Nothing imports ``opentelemetry`` until a traced run
starts (the ``[otel]`` extra).

The spans go to the process's tracer provider when one was set (``logfire.configure()``, an SDK
``TracerProvider`` of the notebook's own); else to one made here from the environment (OTLP over
HTTP by default, ``console``, or ``none``) and set as the process's, so tools' own spans join
the same trace. Monty's own spans (pydantic-monty's ``instrument_telemetry``) go there too.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from ._scrub import known

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer

T = TypeVar("T")
PREFIX = "jupyter_sandbox."
"""Our span attributes' namespace."""
_switch: bool | None = None
_tracer: Tracer | None = None
_lock = threading.Lock()
calls: dict[int, Context] = {}
"""The context holding each traced call's span, by ``id(call)`` while the call runs: what
`within` makes current where its tool runs. Empty (and so skipped) when nothing is traced."""
current: contextvars.ContextVar[Span | None] = contextvars.ContextVar(
    "jupyter_sandbox_otel_span", default=None
)
"""Our span of the work running here (a container attempt), for `annotate`: never a span of
someone else's, whatever their code made current."""


def configure(on: bool | None) -> None:
    """Turn tracing on (True), off (False), or leave it to the environment (None)."""
    global _switch
    _switch = on


def active() -> bool:
    """Whether runs started now are traced (see the module's docstring)."""
    if _switch is not None:
        return _switch
    env = os.environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(
        env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )


def tracer() -> Tracer:
    """Our tracer, made on first use with the provider it reports to (module docstring)."""
    global _tracer
    with _lock:
        if _tracer is None:
            try:
                from opentelemetry import trace
            except ImportError:
                raise ImportError(
                    "tracing is on (%config OrchestrateMagics.otel or OTEL_* variables) but "
                    "OpenTelemetry is not installed: pip install 'jupyter-sandbox[otel]'"
                ) from None
            provider = trace.get_tracer_provider()
            if isinstance(provider, trace.ProxyTracerProvider):  # nobody set one: ours
                provider = _own_provider()
                trace.set_tracer_provider(provider)
            from importlib.metadata import version

            _tracer = provider.get_tracer("jupyter_sandbox", version("jupyter-sandbox"))
            _instrument_monty(provider)
        return _tracer


def _own_provider() -> Any:
    """A `TracerProvider` exporting as ``OTEL_TRACES_EXPORTER`` says (``otlp``, the default,
    over HTTP to ``OTEL_EXPORTER_OTLP_*``; ``console``; ``none``), named by
    ``OTEL_SERVICE_NAME`` (default ``jupyter-sandbox``)."""
    from opentelemetry.sdk.resources import OTELResourceDetector, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    resource = Resource.create({"service.name": "jupyter-sandbox"}).merge(
        OTELResourceDetector().detect()
    )
    if os.environ.get("OTEL_SERVICE_NAME"):
        resource = resource.merge(Resource({"service.name": os.environ["OTEL_SERVICE_NAME"]}))
    provider = TracerProvider(resource=resource)
    kind = os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() or "otlp"
    if kind == "console":
        provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    elif kind != "none":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider


def _instrument_monty(provider: Any) -> None:
    """Hand Monty a tracer of the same provider: its spans (a feed, a host call) nest under
    the run's, which is current on the run's thread when the code is fed. Process-wide, once;
    a pydantic-monty without it, or instrumented already by the notebook, is left as it is."""
    try:
        import pydantic_monty

        monty = _Masking(provider.get_tracer("pydantic_monty"))
        pydantic_monty.instrument_telemetry(tracer=monty)
    except Exception:  # older Monty, or instrumented before: its spans go where they went
        return


def _masked(values: Any) -> Any:
    """Attributes with every secret a sandbox tool returned (`_scrub.known`) masked."""
    secrets = known()
    if not secrets or not isinstance(values, Mapping):
        return values
    from ._secrets import mask

    return {k: mask(v, secrets) if isinstance(v, str) else v for k, v in values.items()}


class _Masking:
    """The tracer Monty gets. Its spans carry the code, each call's arguments and return
    value: a secret a sandbox tool returned is masked there as in our records (`_scrub`).
    Monty's instrumentation cannot be undone: once tracing is off, its spans are dropped."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def start_span(self, name: str, *args: Any, attributes: Any = None, **kwargs: Any) -> Any:
        if not active():  # switched off since: Monty stays instrumented, its spans go nowhere
            from opentelemetry.trace import INVALID_SPAN

            return INVALID_SPAN
        span = self._inner.start_span(name, *args, attributes=_masked(attributes), **kwargs)
        return _masked_span()(span)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@functools.cache
def _masked_span() -> type[Any]:
    """A span class masking what `_Masking` masks; an OpenTelemetry ``Span`` subclass, made on
    first use (the API looks a parent up by ``isinstance``)."""
    from opentelemetry import trace

    class MaskedSpan(trace.Span):
        def __init__(self, inner: Span) -> None:
            self._inner = inner

        def set_attributes(self, attributes: Any) -> None:
            self._inner.set_attributes(_masked(attributes))

        def set_attribute(self, key: str, value: Any) -> None:
            self._inner.set_attributes(_masked({key: value}))

        def add_event(self, name: str, attributes: Any = None, timestamp: Any = None) -> None:
            self._inner.add_event(name, _masked(attributes), timestamp)

        def end(self, end_time: int | None = None) -> None:
            self._inner.end(end_time)

        def get_span_context(self) -> Any:
            return self._inner.get_span_context()

        def is_recording(self) -> bool:
            return self._inner.is_recording()

        def record_exception(self, *args: Any, **kwargs: Any) -> None:
            self._inner.record_exception(*args, **kwargs)

        def set_status(self, *args: Any, **kwargs: Any) -> None:
            self._inner.set_status(*args, **kwargs)

        def update_name(self, name: str) -> None:
            self._inner.update_name(name)

    return MaskedSpan


def flush(timeout_ms: int = 5000) -> None:
    """Export the spans ended so far now (a test, or a kernel about to exit)."""
    from opentelemetry import trace

    force = getattr(trace.get_tracer_provider(), "force_flush", None)
    if force is not None:
        force(timeout_ms)


def trace_id(span: Span) -> str:
    """The span's trace id as backends write it (32 lowercase hex digits)."""
    return format(span.get_span_context().trace_id, "032x")


def attributes(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` as span attributes under `PREFIX`: None dropped (OTel refuses it)."""
    return {PREFIX + key: value for key, value in values.items() if value is not None}


def within(call: object, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` with ``call``'s span current; a coroutine it returns (an async
    tool) runs with it current too, in whichever task awaits it. An untraced call just runs."""
    context = calls.get(id(call))
    if context is None:
        return fn(*args, **kwargs)
    from opentelemetry import context as otel_context

    token = otel_context.attach(context)
    try:
        value = fn(*args, **kwargs)
    finally:
        otel_context.detach(token)
    if hasattr(value, "__await__") and hasattr(value, "send"):  # a coroutine
        return _bound(context, value)
    return value


async def _bound(context: Context, coro: Any) -> Any:
    from opentelemetry import context as otel_context

    token = otel_context.attach(context)
    try:
        return await coro
    finally:
        otel_context.detach(token)


def carried(fn: Callable[[], T]) -> Callable[[], T]:
    """``fn``, to be run on another thread with this thread's OpenTelemetry context current
    there (a run's thread: Monty's spans nest under the run's); ``fn`` itself when tracing is
    off. Only OpenTelemetry's context crosses: the thread's other context variables (the
    kernel's parent header, ours) stay as they were."""
    if not active():
        return fn
    from opentelemetry import context as otel_context

    context = otel_context.get_current()

    def run() -> T:
        token = otel_context.attach(context)
        try:
            return fn()
        finally:
            otel_context.detach(token)

    return run


def annotate(values: Mapping[str, Any]) -> None:
    """Set attributes (full names) on our span of the work running here (`current`), if
    any; None values dropped."""
    span = current.get()
    if span is not None:
        span.set_attributes({key: value for key, value in values.items() if value is not None})


@contextlib.contextmanager
def made_current(span: Span) -> Iterator[None]:
    """``span`` current (for OpenTelemetry and `annotate`) while the body runs."""
    from opentelemetry import context as otel_context
    from opentelemetry import trace

    token = otel_context.attach(trace.set_span_in_context(span))
    mine = current.set(span)
    try:
        yield
    finally:
        current.reset(mine)
        otel_context.detach(token)


def failed(span: Span, error: str | None) -> None:
    """Mark ``span`` failed with one line saying why (None: it succeeded)."""
    from opentelemetry.trace import Status, StatusCode

    if error is not None:
        span.set_status(Status(StatusCode.ERROR, error[:1000]))
        span.set_attribute("error.type", error.split(":", 1)[0][:100])
