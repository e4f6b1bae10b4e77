"""Tracing on for one test, into this process's one in-memory exporter (OpenTelemetry's
tracer provider can be set only once a process)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from jupyter_sandbox._shared import _otel

_EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Tracing on, into the in-memory exporter (the process's provider, set once)."""
    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    _EXPORTER.clear()
    _otel.configure(True)
    try:
        yield _EXPORTER
    finally:
        _otel.configure(None)
        assert not _otel.calls  # every call's span was ended and forgotten
