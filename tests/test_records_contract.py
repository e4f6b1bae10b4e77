"""The record contract: the TypedDicts of `jupyter_sandbox.records`, the TypeScript interfaces
of the JupyterLab renderer (labextension/src/records.ts) and the records the engines really
build all have the same keys, and the same keys optional."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, get_args, get_type_hints

import pytest
from _record_shapes import check, check_record

from jupyter_sandbox import ToolError, create, orchestrate, records, tool
from jupyter_sandbox.display._live import LiveRun, LiveTrace
from jupyter_sandbox.errors import NonZeroExit
from jupyter_sandbox.events import (
    BuildFinished,
    BuildLog,
    BuildStarted,
    BuildStep,
    RunFinished,
    RunStarted,
)
from jupyter_sandbox.sandbox import BuildInfo

RECORDS_TS = Path(__file__).parent.parent / "labextension" / "src" / "records.ts"

INTERFACES = {
    "ILive": records.LiveInfo,
    "ICallRecord": records.CallRecord,
    "IToolRow": records.ToolRow,
    "IForkedFrom": records.ForkedFrom,
    "ICaller": records.Caller,
    "IBinding": records.Binding,
    "IAnswered": records.Answered,
    "ITraceRecord": records.TraceRecord,
    "IBuildRecord": records.BuildRecord,
    "IFileLink": records.FileLink,
    "ITypedValue": records.TypedValue,
    "IRunRecord": records.RunRecord,
    "ITraceSummary": records.TraceSummary,
    "IRunSummary": records.RunSummary,
    "IDisplayRecord": records.DisplayRecord,
    "IRequestRow": records.RequestRow,
    "IRequestLogRecord": records.RequestLogRecord,
}
"""Each TypeScript record interface and the TypedDict it mirrors."""

_INTERFACE = re.compile(r"export interface (\w+) \{(.*?)\n\}", re.DOTALL)
_FIELD = re.compile(r"^\s*(\w+)(\??):\s*(.+?);\s*$", re.MULTILINE)
_COMMENT = re.compile(r"/\*.*?\*/", re.DOTALL)


def ts_interfaces() -> dict[str, dict[str, tuple[bool, str]]]:
    """``{interface: {key: (optional, ts type)}}`` of every interface in records.ts."""
    source = RECORDS_TS.read_text()
    return {
        name: {
            key: (opt == "?", ts_type)
            for key, opt, ts_type in _FIELD.findall(_COMMENT.sub("", body))
        }
        for name, body in _INTERFACE.findall(source)
    }


def test_records_ts_parses():
    parsed = ts_interfaces()
    assert set(parsed) == set(INTERFACES), "a record interface without its TypedDict, or back"
    assert parsed["ITraceRecord"]["kind"] == (False, "'orchestrate'")
    assert parsed["ICallRecord"]["queued"] == (True, "number | null")


@pytest.mark.parametrize("interface", sorted(INTERFACES))
def test_python_and_typescript_declare_the_same_keys(interface):
    typed = INTERFACES[interface]
    ts = ts_interfaces()[interface]
    assert set(typed.__annotations__) == set(ts), interface
    optional_ts = {key for key, (optional, _) in ts.items() if optional}
    assert typed.__optional_keys__ == optional_ts, interface
    assert typed.__required_keys__ == set(ts) - optional_ts, interface


@pytest.mark.parametrize("interface", ["ITraceRecord", "IRunRecord"])
def test_kind_and_status_literals_agree(interface):
    typed = INTERFACES[interface]
    ts = ts_interfaces()[interface]
    hints = get_type_hints(typed)
    for key in ("kind", "status"):
        ts_values = {v.strip().strip("'") for v in ts[key][1].split("|")}
        assert set(get_args(hints[key])) == ts_values, (interface, key)


def test_mime_types_and_version_match_the_renderer():
    mime_ts = (RECORDS_TS.parent / "mime.ts").read_text()
    assert f"TRACE_MIME = '{records.TRACE_MIME}'" in mime_ts
    assert f"RUN_MIME = '{records.RUN_MIME}'" in mime_ts
    from jupyter_sandbox import display, sandbox

    assert display.RUN_MIME is sandbox.MIME_TYPE is records.RUN_MIME
    assert display.TRACE_MIME is records.TRACE_MIME


# --- records the engines build have exactly the declared keys -------------------------------


def add(x: int, y: int) -> int:
    return x + y


def fail(message: str) -> int:
    raise ValueError(message)


def test_the_checker_catches_a_missing_and_an_undeclared_key():
    result = orchestrate("add(1, 2)", tools=[add])
    record: Any = result.to_record()
    with pytest.raises(AssertionError, match="undeclared"):
        check_record({**record, "extra": 1})
    del record["calls"][0]["tool"]
    with pytest.raises(AssertionError, match=r"calls\[0\] \(CallRecord\) lacks \['tool'\]"):
        check_record(record)


def test_orchestration_records_have_exactly_the_declared_keys():
    code = (
        "print('hello')\n"
        "try:\n    fail('nope')\nexcept ValueError:\n    pass\n"
        "[add(i, 1) for i in range(12)]"
    )
    live = LiveTrace()
    result = orchestrate(code, tools=[add, fail], on_event=live.on_event)
    record = result.to_record()
    assert {c["error"] is None for c in record["calls"]} == {True, False}
    assert "tools" in record and "stdout_chars" in record
    check_record(record)
    check_record(live.record())
    assert "live" in live.record()

    with pytest.raises(ToolError) as info:
        orchestrate("add(1, 2)\nfail('boom')", tools=[add, fail])
    assert info.value.result is not None
    failed = info.value.result.to_record()
    assert failed["status"] == "error" and failed["calls"][-1]["host_traceback"]
    check_record(failed)
    check_record({**failed, "raised": True})  # as the magic shows a raised error


def test_build_and_live_run_records_have_exactly_the_declared_keys():
    info = BuildInfo(tag="jupyter-sandbox:x", cached=False, seconds=1.5, steps=["a", "b"])
    info.total_steps, info.log, info.error = 2, "Step 1/2 : FROM base\n", "boom"
    check(info.to_record(), records.BuildRecord)
    live = LiveRun()
    check_record(live.record())  # before any event
    events = [
        BuildStarted("jupyter-sandbox:x", total_steps=2),
        BuildStep(1, 2, "starting from base"),
        BuildLog("Collecting six"),
    ]
    for event in events:
        live.on_event(event)
    building = live.record()
    assert building["build"] is not None and building["build"].get("running") is True
    check_record(building)
    live.on_event(BuildFinished("jupyter-sandbox:x", cached=False, seconds=2.0))
    live.on_event(
        RunStarted("job", "jupyter-sandbox:x", inputs={"x": {"type": "int", "preview": "1"}})
    )
    live.on_event(RunFinished("job", exit_code=0, seconds=0.5, outputs={"y": 2}))
    check_record(live.record())


def test_the_hand_written_samples_are_records():
    """The renderer tests' samples (older records: no summary, no stream sizes) fit too."""
    from _display_samples import requests_record, run_record, trace_record

    check_record(trace_record())
    check_record(run_record())
    check_record(run_record(build_error="ERROR: no such package"))
    check_record(requests_record())


@pytest.mark.docker
@pytest.mark.usefixtures("no_leaked_containers")
def test_sandbox_run_records_have_exactly_the_declared_keys():
    sandbox = create("rec", code="y = x + 1", inputs={"x": int}, outputs={"y": int})
    live = LiveRun()
    run = sandbox.execute({"x": 1}, on_event=live.on_event)
    check_record(run.to_record())
    check_record(live.record())
    assert live.record()["inputs"] == run.to_record()["inputs"]

    with pytest.raises(NonZeroExit) as info:
        create("fails", code="raise SystemExit(3)").execute({})
    assert info.value.record is not None and info.value.record["status"] == "error"
    check_record(info.value.record)

    # a sandbox used as a tool: its run record nested in the call that ran it
    double = tool(create("double", code="y = x * 2", inputs={"x": int}, outputs={"y": int}))
    nested = orchestrate("await double(2)", tools=[double]).to_record()
    ((child,),) = [call["children"] for call in nested["calls"]]
    assert child["kind"] == "sandbox"
    check_record(nested)
