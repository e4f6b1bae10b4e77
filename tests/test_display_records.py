"""The final MIME bundle: the record itself plus HTML and text that say the same thing."""

from __future__ import annotations

from _display_samples import run_record, trace_record

from jupyter_sandbox.display import RUN_MIME, TRACE_MIME, bundle
from jupyter_sandbox.display._format import MAX_ROWS


def test_trace_bundle_carries_the_record_and_fallbacks():
    record = trace_record()
    data = bundle(record)
    assert set(data) == {TRACE_MIME, "text/html", "text/plain"}
    assert data[TRACE_MIME] is record
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
    record = trace_record(MAX_ROWS + 50)
    data = bundle(record)
    assert len(data[TRACE_MIME]["calls"]) == MAX_ROWS + 50
    assert data["text/html"].count('class="jsb-call ') == MAX_ROWS
    assert "50 more calls in the JSON record" in data["text/html"]
    assert "50 more calls in the JSON record" in data["text/plain"]


def test_nested_records_render_inside_their_call():
    record = trace_record(1)
    record["calls"][0]["children"] = [run_record()]
    html = bundle(record)["text/html"]
    assert "sandbox record</summary>" in html
    assert "built in 12.50 s" in html


def test_run_bundle_shows_build_outputs_and_status():
    record = run_record()
    data = bundle(record)
    assert set(data) == {RUN_MIME, "text/html", "text/plain"}
    assert data[RUN_MIME] is record
    text = data["text/plain"]
    assert "sandbox 'train' ok in 3.50 s (image jupyter-sandbox:abc123, exit 0)" in text
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
