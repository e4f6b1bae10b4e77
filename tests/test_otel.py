"""OpenTelemetry traces, with the real SDK and exporter.

Structure is read from the SDK's in-memory exporter (this process's tracer provider, set once
here); export is read by an OTLP/HTTP receiver the test runs on loopback, decoding the protobuf
the real exporter posts, from a fresh interpreter switched on by the ``OTEL_*`` environment and
from a real kernel switched by ``%config OrchestrateMagics.otel``.
"""

from __future__ import annotations

import asyncio
import gzip
import http.server
import json
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from _kernels import kernel
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from jupyter_sandbox._shared import _otel
from jupyter_sandbox.errors import LimitExceeded, ToolError
from jupyter_sandbox.orchestration import Limits, orchestrate


def _named(spans: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in spans.get_finished_spans() if s.name == name]


def _one(spans: InMemorySpanExporter, name: str) -> ReadableSpan:
    (span,) = _named(spans, name)
    return span


def _parent(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def add(a: int, b: int) -> int:
    return a + b


async def later(x: int) -> int:
    with trace.get_tracer("a tool's own").start_as_current_span("inside later"):
        await asyncio.sleep(0.01)
    return x


def boom(x: int) -> int:
    raise ValueError(f"no {x}")


def test_a_run_is_a_span_and_each_call_a_child_with_its_attributes(spans):
    def inner() -> int:  # a sync tool's own spans nest under its call
        with trace.get_tracer("a tool's own").start_as_current_span("inside inner"):
            return 1

    result = orchestrate(
        "import asyncio\nx = add(1, b=2)\ny = await asyncio.gather(later(1), later(2))\n"
        "inner() + x",
        tools=[add, later, inner],
    )
    assert result.value == 4
    run = _one(spans, "orchestrate")
    assert run.parent is None and run.status.status_code is StatusCode.UNSET
    assert run.attributes["jupyter_sandbox.run.status"] == "ok"
    assert run.attributes["jupyter_sandbox.run.calls"] == 4
    trace_id = format(run.context.trace_id, "032x")
    assert result.trace_id == trace_id and result.to_record()["trace_id"] == trace_id

    call = _one(spans, "execute_tool add")
    assert _parent(call) == run.context.span_id
    assert call.attributes["gen_ai.tool.name"] == "add"
    assert call.attributes["jupyter_sandbox.call.arguments"] == "1, b=2"
    assert call.attributes["jupyter_sandbox.call.status"] == "ok"
    assert call.attributes["jupyter_sandbox.call.replayed"] is False
    assert call.attributes["jupyter_sandbox.call.line"] == 2
    assert call.attributes["jupyter_sandbox.call.queued_s"] == 0.0
    # async calls: each its own span, and the tool's own span under it (its task's context)
    laters = _named(spans, "execute_tool later")
    insides = _named(spans, "inside later")
    assert len(laters) == 2 and len(insides) == 2
    assert {_parent(s) for s in insides} == {s.context.span_id for s in laters}
    assert _parent(_one(spans, "inside inner")) == _one(spans, "execute_tool inner").context.span_id
    # Monty's own spans are in the same trace, under the run's
    monty = [
        s for s in spans.get_finished_spans() if s.instrumentation_scope.name == "pydantic_monty"
    ]
    assert monty and all(s.context.trace_id == run.context.trace_id for s in monty)
    by_id = {s.context.span_id: s for s in spans.get_finished_spans()}
    top = [s for s in monty if _parent(s) not in {m.context.span_id for m in monty}]
    assert top and all(by_id[_parent(s)] is run for s in top)


def test_a_failed_call_and_a_failed_run_are_errors_with_the_trace_id_in_the_record(spans):
    result = orchestrate("try:\n    boom(1)\nexcept ValueError:\n    pass\n2", tools=[boom])
    call = _one(spans, "execute_tool boom")
    assert call.status.status_code is StatusCode.ERROR
    assert call.status.description == "ValueError: no 1"
    assert call.attributes["error.type"] == "ValueError"
    assert call.attributes["jupyter_sandbox.call.status"] == "error"
    assert result.value == 2
    spans.clear()
    with pytest.raises(ToolError) as caught:
        orchestrate("boom(2)", tools=[boom])
    run = _one(spans, "orchestrate")
    assert run.status.status_code is StatusCode.ERROR
    assert run.attributes["jupyter_sandbox.run.status"] == "error"
    record = caught.value.result.to_record()
    assert record["status"] == "error"
    assert record["trace_id"] == format(run.context.trace_id, "032x")


def test_a_call_the_run_stopped_is_cancelled_and_the_run_an_error(spans):
    async def forever() -> int:
        await asyncio.sleep(3600)
        return 0

    with pytest.raises(LimitExceeded):
        orchestrate(
            "f = forever()\nwhile True:\n    pass", tools=[forever], limits=Limits(timeout=0.5)
        )
    call = _one(spans, "execute_tool forever")
    assert call.attributes["jupyter_sandbox.call.status"] == "cancelled"
    assert call.attributes["jupyter_sandbox.call.cancelled"] is True
    assert call.status.status_code is StatusCode.ERROR
    run = _one(spans, "orchestrate")
    assert run.status.status_code is StatusCode.ERROR and "time limit" in run.status.description
    assert call.end_time <= run.end_time


def test_approvals_are_events_on_the_gated_call(spans):
    from jupyter_sandbox import tool

    gated = tool(add, name="gated_add", approve=True)
    answers = iter([True, False])
    result = orchestrate(
        "a = gated_add(1, 2)\ntry:\n    gated_add(3, 4)\nexcept PermissionError:\n    pass\na",
        tools=[gated],
        approver=lambda call: next(answers),
    )
    assert result.value == 3
    first, second = sorted(_named(spans, "execute_tool gated_add"), key=lambda s: s.start_time)
    assert [e.name for e in first.events] == ["approval.requested", "approval.answered"]
    assert first.events[1].attributes["jupyter_sandbox.approved"] is True
    assert second.events[1].attributes["jupyter_sandbox.approved"] is False
    assert second.status.status_code is StatusCode.ERROR  # PermissionError in the code


def test_a_run_nested_in_a_tool_is_a_child_of_that_call(spans):
    def outer(n: int) -> int:
        return orchestrate("add(n, 1)", tools=[add], inputs={"n": n}).value

    assert orchestrate("outer(1)", tools=[outer]).value == 2
    runs = sorted(_named(spans, "orchestrate"), key=lambda s: s.start_time)
    assert len(runs) == 2
    call = _one(spans, "execute_tool outer")
    assert _parent(runs[1]) == call.context.span_id
    assert _parent(_one(spans, "execute_tool add")) == runs[1].context.span_id


def test_off_makes_no_span_and_no_trace_id(spans):
    _otel.configure(False)
    result = orchestrate("add(1, 2)", tools=[add])
    assert spans.get_finished_spans() == ()
    assert result.trace_id is None and "trace_id" not in result.to_record()


def test_the_environment_switches_tracing_and_importing_the_package_imports_no_otel():
    def active(**env: str) -> bool:
        code = "from jupyter_sandbox._shared import _otel; print(_otel.active())"
        clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        out = subprocess.run(
            [sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True
        )
        return out.stdout.strip() == "True"

    assert not active()
    assert active(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:4318")
    assert active(OTEL_TRACES_EXPORTER="console")
    assert not active(OTEL_TRACES_EXPORTER="none", OTEL_EXPORTER_OTLP_ENDPOINT="http://x")
    assert not active(OTEL_SDK_DISABLED="true", OTEL_TRACES_EXPORTER="otlp")
    code = "import sys, jupyter_sandbox; print([m for m in sys.modules if 'opentelemetry' in m])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.docker
@pytest.mark.usefixtures("no_leaked_containers")
def test_a_sandbox_tool_nests_its_container_under_its_call_and_secrets_are_masked(
    spans, monkeypatch
):
    from jupyter_sandbox import create, tool

    monkeypatch.setenv("OTEL_TEST_TOKEN", "tok-5ecret-value-91")
    leak = tool(
        create(
            "leak",
            code="import os\nresult = os.environ['OTEL_TEST_TOKEN']",
            outputs={"result": str},
            secrets=["OTEL_TEST_TOKEN"],
        )
    )
    fail = tool(create("fail", code="raise SystemExit(3)", outputs={"result": int}))

    def send(token: str) -> int:
        return len(token)

    code = "t = await leak()\nn = send(t)\ntry:\n    await fail()\nexcept Exception:\n    pass\nn"
    result = orchestrate(code, tools=[leak, send, fail])
    assert result.value == 19
    (record,) = result.trace[0].children  # the container run's record names the trace too
    assert record["trace_id"] == result.trace_id
    finished = spans.get_finished_spans()
    assert not [s for s in finished if "tok-5ecret" in json.dumps(dict(s.attributes))]
    assert _one(spans, "execute_tool send").attributes["jupyter_sandbox.call.arguments"] == "'***'"
    call = _one(spans, "execute_tool leak")
    sandbox = _one(spans, "sandbox leak")
    attempt = [
        s for s in finished if s.name == "container run 1" and _parent(s) == sandbox.context.span_id
    ]
    assert _parent(sandbox) == call.context.span_id and len(attempt) == 1
    assert sandbox.attributes["container.exit_code"] == 0
    assert len(attempt[0].attributes["container.id"]) == 64
    assert attempt[0].attributes["container.oom_killed"] is False
    failed = _one(spans, "sandbox fail")
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.attributes["container.exit_code"] == 3
    assert _one(spans, "execute_tool fail").status.status_code is StatusCode.ERROR


class _Receiver(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP traces endpoint: decodes each protobuf POST into ``server.spans``."""

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for resource in request.resource_spans:
            for scope in resource.scope_spans:
                self.server.spans.extend(scope.spans)  # type: ignore[attr-defined]
        reply = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[http.server.HTTPServer]:
    server = http.server.HTTPServer(("127.0.0.1", 0), _Receiver)
    server.spans = []  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _received(server: http.server.HTTPServer, trace_id: str) -> dict[str, object]:
    return {
        s.name: s
        for s in server.spans
        if s.trace_id.hex() == trace_id  # type: ignore[attr-defined]
    }


def test_the_otlp_http_exporter_sends_the_run_to_a_receiver(receiver, tmp_path):
    script = textwrap.dedent(
        """
        from jupyter_sandbox._shared import _otel
        from jupyter_sandbox.orchestration import orchestrate

        def add(a: int, b: int) -> int:
            return a + b

        print(orchestrate("add(1, 2)", tools=[add]).to_record()["trace_id"])
        _otel.flush()
        """
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env = {
        **clean,
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.server_port}",
        "OTEL_SERVICE_NAME": "otel-test",
    }
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )
    trace_id = out.stdout.strip()
    got = _received(receiver, trace_id)
    assert {"orchestrate", "execute_tool add"} <= set(got)
    assert got["execute_tool add"].parent_span_id == got["orchestrate"].span_id


def test_the_magic_switch_traces_a_cell_in_a_real_kernel(receiver, tmp_path: Path):
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.server_port}"}
    mime = "application/vnd.jupyter-sandbox.trace+json"
    with kernel(tmp_path / "store.sqlite", env=env) as k:
        k.ok("%config OrchestrateMagics.otel = False")  # wins over the environment
        off = k.ok("%%orchestrate --no-store\nadd(1, 2)")
        assert "trace_id" not in off.records(mime)[-1]
        k.ok("%config OrchestrateMagics.otel = True")
        on = k.ok("%%orchestrate --no-store\nadd(2, 3)")
        record = on.records(mime)[-1]
        trace_id = record["trace_id"]
        shown = [  # the text the finished record shows, under its headline
            m["content"]["data"]["text/plain"]
            for m in on.outputs
            if m["msg_type"] in ("display_data", "update_display_data")
            and mime in m["content"].get("data", {})
        ]
        assert f"OpenTelemetry trace {trace_id}" in shown[-1]
        k.ok("from jupyter_sandbox._shared import _otel; _otel.flush()")
    got = _received(receiver, trace_id)
    assert got["execute_tool add"].parent_span_id == got["orchestrate"].span_id


def test_the_record_shows_its_trace_id_and_not_a_forged_one():
    from _display_samples import run_record, trace_record

    from jupyter_sandbox.display import bundle

    record = trace_record()
    record["trace_id"] = "0af7651916cd43dd8448eb211c80319c"
    data = bundle(record)
    assert "OpenTelemetry trace 0af7651916cd43dd8448eb211c80319c" in data["text/plain"]
    assert "OpenTelemetry trace 0af7651916cd43dd8448eb211c80319c" in data["text/html"]
    record["trace_id"] = "<img src=x onerror=alert(1)>" + "0" * 32
    data = bundle(record)
    assert "OpenTelemetry trace" not in data["text/plain"] + data["text/html"]
    run = run_record()
    run["trace_id"] = "0af7651916cd43dd8448eb211c80319c"
    assert "OpenTelemetry trace 0af7651916cd43dd8448eb211c80319c" in bundle(run)["text/plain"]


def test_a_paused_call_waits_as_an_event_and_its_approval_is_a_traced_run(spans, tmp_path):
    from jupyter_sandbox import Store, resume_run, tool

    gated = tool(add, name="gated_add", approve=True)
    store = Store(tmp_path / "store.sqlite")
    paused = orchestrate("gated_add(1, 2) * 10", tools=[gated], store=store)
    assert paused.status == "paused"
    call = _one(spans, "execute_tool gated_add")
    assert call.attributes["jupyter_sandbox.call.status"] == "pending"
    (event,) = call.events
    assert event.name == "approval.pending"
    assert event.attributes["jupyter_sandbox.run_id"] == paused.run_id
    assert paused.to_record()["trace_id"] == format(call.context.trace_id, "032x")
    spans.clear()
    done = resume_run(paused.run_id, approve=True, store=store, tools=[gated])
    assert done.value == 30
    run = _one(spans, "orchestrate")
    assert run.attributes["jupyter_sandbox.run.approved"] is True
    assert run.attributes["jupyter_sandbox.run.id"] == paused.run_id
    assert done.to_record()["trace_id"] == format(run.context.trace_id, "032x")
    assert _parent(_one(spans, "execute_tool gated_add")) == run.context.span_id


def test_an_interrupted_run_ends_the_abandoned_call_and_its_own_span(spans):
    from jupyter_sandbox.orchestration import orchestrate_async

    release = threading.Event()
    entered = threading.Event()

    def stuck() -> int:
        entered.set()
        release.wait(30)
        return 1

    async def cancelled() -> None:
        task = asyncio.ensure_future(orchestrate_async("stuck()", tools=[stuck]))
        while not entered.is_set():
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    try:
        asyncio.run(cancelled())
    finally:
        release.set()
    call = _one(spans, "execute_tool stuck")
    assert call.status.status_code is StatusCode.ERROR
    assert call.status.description.startswith("Abandoned")
    run = _one(spans, "orchestrate")
    assert run.status.status_code is StatusCode.ERROR
    assert _parent(call) == run.context.span_id and call.end_time <= run.end_time


def test_a_call_answered_from_the_cache_is_marked_replayed(spans):
    from jupyter_sandbox.orchestration import ToolCache

    cache = ToolCache()
    orchestrate("add(1, 2)", tools=[add], cache=cache)
    spans.clear()
    assert orchestrate("add(1, 2)", tools=[add], cache=cache).value == 3
    call = _one(spans, "execute_tool add")
    assert call.attributes["jupyter_sandbox.call.replayed"] is True
    assert call.attributes["jupyter_sandbox.call.status"] == "ok"


def test_the_magic_switch_without_opentelemetry_says_what_to_install(shell, monkeypatch, caplog):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name.startswith("opentelemetry") else real(name, *a),
    )
    shell.run_line_magic("config", "OrchestrateMagics.otel = True")
    assert "pip install 'jupyter-sandbox[otel]'" in caplog.text  # what %config shows
    magics = shell.magics_manager.registry["OrchestrateMagics"]
    assert magics.otel is None and not _otel.active()
    monkeypatch.undo()
    shell.run_line_magic("config", "OrchestrateMagics.otel = True")
    try:
        assert magics.otel is True and _otel.active()
    finally:
        shell.run_line_magic("config", "OrchestrateMagics.otel = None")
    assert not _otel.active()


@pytest.mark.docker
@pytest.mark.usefixtures("no_leaked_containers")
def test_a_sandbox_run_of_its_own_is_a_trace_with_its_build_and_container(spans):
    from jupyter_sandbox import create

    sandbox = create(
        "otel_six",
        code="import six\nresult = six.__name__",
        outputs={"result": str},
        packages=["six"],
    )
    run = sandbox.execute({})
    root = _one(spans, "sandbox otel_six")
    assert root.parent is None
    assert run.to_record()["trace_id"] == format(root.context.trace_id, "032x")
    build = _one(spans, "image build")
    assert _parent(build) == root.context.span_id
    assert build.attributes["container.image.name"] == run.image
    assert isinstance(build.attributes["jupyter_sandbox.build.cached"], bool)
    attempt = _one(spans, "container run 1")
    assert _parent(attempt) == root.context.span_id
    assert attempt.attributes["container.exit_code"] == 0
    assert build.end_time <= attempt.start_time
