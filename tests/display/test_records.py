"""The final MIME bundle: the record itself plus HTML and text that say the same thing."""

from __future__ import annotations

from _display_samples import run_record, trace_record

from jupyter_sandbox.display import RUN_MIME, TRACE_MIME, bundle
from jupyter_sandbox.display._format import ROWS_SHOWN


def test_trace_bundle_carries_the_record_and_fallbacks():
    record = trace_record()
    data = bundle(record)
    assert set(data) == {TRACE_MIME, "text/html", "text/plain"}
    assert data[TRACE_MIME] == {**record, "summary": data[TRACE_MIME]["summary"]}
    text = data["text/plain"]
    assert "3 tool calls, 1 failed" in text
    assert "add(1, 2) -> 3" in text
    assert "ValueError: no such page" in text


def test_trace_html_has_rows_timeline_and_expandable_errors():
    html = bundle(trace_record())["text/html"]
    assert html.count('class="jsb-call ') == 3
    assert html.count('class="jsb-bar ') == 3
    assert "<details><summary>" in html
    assert "most recent call last" in html  # the host traceback, behind the summary
    assert "<script>" not in html  # previews are escaped
    assert "&#x27;&lt;script&gt;&#x27;" in html


def test_long_traces_are_capped_in_fallbacks_but_not_in_the_record():
    record = trace_record(ROWS_SHOWN + 50)
    data = bundle(record)
    assert len(data[TRACE_MIME]["calls"]) == ROWS_SHOWN + 50
    assert data["text/html"].count('class="jsb-call ') == ROWS_SHOWN
    assert "50 more calls in the JSON record" in data["text/html"]
    assert "50 more calls in the JSON record" in data["text/plain"]


def test_nested_records_render_inside_their_call():
    record = trace_record(1)
    record["calls"][0]["children"] = [run_record()]
    html = bundle(record)["text/html"]
    assert "sandbox record of call 1</summary>" in html
    assert "built in 12.50 s" in html


def test_run_bundle_shows_build_outputs_and_status():
    record = run_record()
    data = bundle(record)
    assert set(data) == {RUN_MIME, "text/html", "text/plain"}
    assert data[RUN_MIME] == {**record, "summary": data[RUN_MIME]["summary"]}
    text = data["text/plain"]
    assert "sandbox 'train' ok in 3.50 s\nimage jupyter-sandbox:abc123: built" in text
    assert "built in 12.50 s (2 steps)" in text
    assert "output score: float = 0.93" in text
    html = data["text/html"]
    assert '<progress max="2" value="2">' in html
    assert "installing numpy (uv)" in html


def test_failed_build_shows_the_failing_log():
    data = bundle(run_record(build_error="ERROR: No matching distribution for nump"))
    assert "failed after 12.50 s" in data["text/plain"]
    assert "No matching distribution" in data["text/plain"]
    assert '<progress max="2" value="1">' in data["text/html"]


def test_ansi_colours_are_stripped_from_logs():
    record = run_record(build_error="\x1b[91mERROR: boom\x1b[0m")
    data = bundle(record)
    assert "\x1b" not in data["text/plain"]
    assert "\x1b" not in data["text/html"]
    assert "ERROR: boom" in data["text/plain"]


def test_a_queued_or_cancelled_call_says_so_and_its_duration_is_the_tools_own():
    """A sandbox tool's call that waited 2 s for a slot ran for 1 s: every view says 1 s, and a
    call still waiting or cancelled is neither "running" nor an "error"."""
    from jupyter_sandbox.display._format import call_duration, call_status

    record = trace_record()
    waited, waiting, stopped = (dict(record["calls"][0]) for _ in range(3))
    waited.update(start=0.0, queued=2.0, end=3.0, error=None, call_id=7)
    waiting.update(start=0.0, queued=None, end=None, error=None, call_id=8)
    stopped.update(start=0.0, queued=0.0, end=0.5, error="cancelled", cancelled=True, call_id=9)
    assert [call_status(c) for c in (waited, waiting, stopped)] == ["ok", "queued", "abandoned"]
    assert call_duration(waited) == 1.0
    record["calls"] = [waited, waiting, stopped]
    html, text = bundle(record)["text/html"], bundle(record)["text/plain"]
    assert "queued 2.00 s, starts at 2.00 s, takes 1.00 s" in html
    assert "waiting for a slot" in html
    assert "abandoned" in text and "queued" in text


def test_the_live_count_tells_queued_calls_from_running_ones():
    from jupyter_sandbox.display._live import LiveTrace
    from jupyter_sandbox.events import CallStarted, ToolCall

    live = LiveTrace()
    for call_id, queued in enumerate([0.0, None, None]):
        call = ToolCall(call_id, "double", (call_id,), {}, start=0.0, queued=queued)
        live.on_event(CallStarted(call))
    summary = live.record()["live"]
    assert (summary["running"], summary["queued"]) == (1, 2)
    assert "1 running, 2 queued" in summary["summary"]


def test_a_call_under_a_millisecond_reads_in_microseconds():
    record = trace_record()
    record["calls"][0]["end"] = record["calls"][0]["start"] + 0.00085
    data = bundle(record)
    assert "850 µs" in data["text/plain"]
    assert "<td>850 µs</td>" in data["text/html"]
    assert " us" not in data["text/plain"]
