"""Views outside a kernel: text fallbacks, quiet mode, the live record, update throttling."""

from __future__ import annotations

import threading
import time

import pytest
from _display_samples import bare, run_record, trace_record
from _display_samples import call as call_record
from _shown import Shown

from jupyter_sandbox.display import RUN_MIME, TRACE_MIME, OrchestrateView, SandboxView
from jupyter_sandbox.display._throttle import Throttle
from jupyter_sandbox.events import (
    BuildFinished,
    BuildLog,
    BuildStarted,
    BuildStep,
    CallFinished,
    CallStarted,
    Output,
    RunFinished,
    RunStarted,
    ToolCall,
)


def build_events(error: str | None = None):
    yield BuildStarted("jupyter-sandbox:abc123", 2)
    yield BuildStep(1, 2, "starting from base")
    yield BuildStep(2, 2, "installing numpy (uv)")
    yield BuildLog("Collecting numpy")
    yield BuildLog("No matching distribution found for numpy" if error else "Installed numpy")
    yield BuildFinished("jupyter-sandbox:abc123", cached=False, seconds=12.5, error=error)


def test_text_mode_streams_output_and_prints_the_record(capsys):
    view = OrchestrateView()
    view.on_event(Output("stdout", "hello\n"))
    view.on_event(Output("stderr", "careful\n"))
    view.finish(trace_record())
    out, err = capsys.readouterr()
    assert out.startswith("hello\n")
    assert "orchestrate ok in 400 ms: 3 tool calls, 1 failed" in out
    assert err == "careful\n"


def test_text_mode_reports_build_progress_on_stderr(capsys):
    view = SandboxView()
    for event in build_events():
        view.on_event(event)
    view.finish(run_record())
    out, err = capsys.readouterr()
    assert "[sandbox] step 2/2: installing numpy (uv)" in err
    assert "[sandbox] image jupyter-sandbox:abc123: built in 12.50 s" in err
    assert "sandbox 'train' ok" in out


@pytest.mark.parametrize("view_class", [OrchestrateView, SandboxView])
def test_quiet_shows_only_the_codes_own_output(capsys, view_class):
    view = view_class(quiet=True, live=True)
    for event in build_events():
        view.on_event(event)
    view.on_event(Output("stdout", "just this\n"))
    view.finish(trace_record())
    out, err = capsys.readouterr()
    assert (out, err) == ("just this\n", "")


def test_live_trace_is_the_record_growing_then_the_record():
    view = OrchestrateView(live=True)
    shown = Shown(view)
    first = ToolCall(1, "add", (1, 2), {}, start=0.0)
    second = ToolCall(2, "fetch", ("<page>",), {"retries": 3}, start=0.01)
    for call in (first, second):
        view.on_event(CallStarted(call))
    first.end, first.result = 0.05, 3
    view.on_event(CallFinished(first))
    view._throttle.flush()
    live = shown.last(TRACE_MIME)
    assert live["status"] == "running"
    assert "2 tool calls (1 running)" in live["live"]["summary"]
    assert [c["tool"] for c in live["calls"]] == ["add", "fetch"]
    html = shown.last("text/html")
    assert html.count('class="jsb-call ') == 2
    assert "fetch(&#x27;&lt;page&gt;&#x27;, retries=3)" in html
    assert 'class="jsb-call jsb-running"' in html
    assert 'aria-label="starts at 10 ms, still running"' in html
    assert "2 tool calls (1 running" in shown.last("text/plain")

    second.end, second.error, second.host_traceback = 0.2, "KeyError: 'x'", "Traceback: ..."
    view.on_event(CallFinished(second))
    view.finish(trace_record())
    assert shown.sent[0][0] == "show"
    assert {kind for kind, _ in shown.sent[1:]} == {"update"}  # one display, updated in place
    assert bare(shown.last(TRACE_MIME)) == trace_record()
    view.on_event(CallStarted(ToolCall(3, "late", (), {}, start=0.5)))  # an abandoned thread
    view._throttle.flush()
    assert bare(shown.last(TRACE_MIME)) == trace_record()


def test_live_run_shows_the_build_then_the_run():
    view = SandboxView(live=True)
    shown = Shown(view)
    events = list(build_events())
    for event in events[:4]:
        view.on_event(event)
    view._throttle.flush()
    build = shown.last(RUN_MIME)["build"]
    assert (build["running"], build["steps"], build["total_steps"]) == (
        True,
        ["starting from base", "installing numpy (uv)"],
        2,
    )
    assert build["line"] == "Collecting numpy"  # the step's latest output line
    html = shown.last("text/html")
    assert '<progress max="2" value="1">' in html
    assert "step 2 of 2: installing numpy (uv)" in html
    assert "building: step 2 of 2" in shown.last("text/plain")
    for event in events[4:]:
        view.on_event(event)
    inputs = {"data": {"type": "list[int]", "preview": "[1, 2, 3]"}}
    view.on_event(RunStarted("train", "jupyter-sandbox:abc123", inputs=inputs))
    view._throttle.flush()
    assert shown.last(RUN_MIME)["inputs"] == inputs  # shown from the start, as saved
    view.on_event(RunFinished("train", 0, 3.5, outputs={"score": 0.93}))
    view._throttle.flush()
    live = shown.last(RUN_MIME)
    assert (live["build"]["running"], live["build"]["seconds"]) == (False, 12.5)
    assert '<progress max="2" value="2">' in shown.last("text/html")
    assert "train finished in 3.50 s (exit 0)" in live["live"]["summary"]
    assert live["outputs"] == {"score": {"type": "float", "preview": "0.93"}}
    assert "Collecting numpy" in live["build"]["log"]
    view.finish(run_record())
    assert bare(shown.last(RUN_MIME)) == run_record()


@pytest.mark.parametrize(
    ("attempt", "headline"), [(1, "running train in img"), (2, "running train in img (attempt 2)")]
)
def test_a_live_run_names_its_attempt_only_when_it_is_a_retry(attempt, headline):
    view = SandboxView(live=True)
    shown = Shown(view)
    view.on_event(RunStarted("train", "img", attempt=attempt))
    view._throttle.flush()
    assert shown.last(RUN_MIME)["live"]["summary"] == headline
    assert shown.last("text/plain").splitlines()[0].endswith(headline)


def test_live_run_says_a_failed_build_once_with_its_log_collapsed():
    view = SandboxView(live=True)
    shown = Shown(view)
    error = "package 'numpy' does not exist on the package index"
    for event in build_events(error=error):
        view.on_event(event)
    view._throttle.flush()
    build = shown.last(RUN_MIME)["build"]
    assert (build["error"], build["line"], build["running"]) == (error, "", False)
    html = shown.last("text/html")
    assert html.count("does not exist") == 1
    assert html.count("No matching distribution") == 1
    assert "<details><summary>build log</summary>" in html  # collapsed
    view.finish(run_record(build_error=error))
    assert "sandbox &#x27;train&#x27; error" in shown.last("text/html")


def test_throttle_coalesces_bursts_and_flush_renders_the_last_state():
    renders = []
    state = {"n": 0}
    throttle = Throttle(lambda: renders.append(state["n"]), interval=3600)
    throttle.request()  # the first render is immediate (on the timer thread)
    for n in range(1, 10_001):
        state["n"] = n
        throttle.request()
    throttle.flush()
    assert renders[-1] == 10_000
    assert len(renders) <= 2


def test_events_from_many_threads_are_all_counted():
    view = OrchestrateView(live=True)
    shown = Shown(view)

    def worker(base: int) -> None:
        for i in range(500):
            call = ToolCall(base + i, "t", (), {}, start=0.0)
            view.on_event(CallStarted(call))
            call.end = 0.001
            view.on_event(CallFinished(call))

    threads = [threading.Thread(target=worker, args=(k * 1000,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    view._throttle.flush()
    live = shown.last(TRACE_MIME)
    assert live["live"]["summary"].endswith("2000 tool calls (0 running, showing the last 100)")
    assert len(live["calls"]) == 100


def test_live_inputs_hide_a_secret_as_the_record_does():
    from jupyter_sandbox.sandbox._record import SandboxRun

    run = SandboxRun(
        name="x",
        image="i",
        inputs={"token": "tok-s3cr3t-1", "n": 2},
        input_types={"token": None, "n": "int"},
        secrets=("s3cr3t",),
    )
    view = SandboxView(live=True)
    shown = Shown(view)
    view.on_event(RunStarted("x", "i", inputs=run.described_inputs()))
    live = shown.last(RUN_MIME)["inputs"]
    assert "s3cr3t" not in repr(shown.sent)
    run.seal()
    assert live == run.to_record()["inputs"]


def test_text_view_keeps_its_columns_when_some_calls_are_replayed() -> None:
    """`(replayed)` after one row's status pushed that row's duration and call right of the
    others'; every row's duration now ends in the same column."""
    from jupyter_sandbox.display._text import render

    record = trace_record(3)
    record["calls"][0]["replayed"] = True
    rows = [line for line in render(record).splitlines() if line.startswith("  #")]
    assert len(rows) == 3 and "(replayed)" in rows[0]
    assert len({row.index("ms  ") for row in rows}) == 1, rows


class Written(Shown):
    """`Shown`, with the cell's output too, in one list in the order the cell got them."""

    def __init__(self, view) -> None:
        super().__init__(view)
        view._route.write = lambda stream, text: self.sent.append((stream, {"text": text}))

    def order(self) -> list[str]:
        return [data["text"] if kind in ("stdout", "stderr") else kind for kind, data in self.sent]


def printing_run(view) -> None:
    """Prints before, between and after two calls (ids 1 and 2, as `trace_record(2)`'s)."""
    view.on_event(Output("stdout", "loading 3 files\n"))
    view.on_event(Output("stdout", "file 1\nfile 2\n"))
    view.on_event(Output("stderr", "careful\n"))
    view.on_event(CallStarted(ToolCall(1, "add", (1, 2), {}, start=0.0)))
    view.on_event(Output("stdout", "between\n"))
    view.on_event(CallStarted(ToolCall(2, "fetch", ("<page>",), {}, start=0.3)))
    view.on_event(Output("stdout", "all read\n"))
    view.finish(trace_record(2))


def test_output_printed_before_the_first_call_comes_after_the_header():
    view = OrchestrateView(live=True)
    cell = Written(view)
    printing_run(view)
    assert cell.order() == [
        "show",  # the header, then the output in the order it was printed
        "loading 3 files\n",
        "file 1\nfile 2\n",
        "careful\n",
        "between\n",
        "all read\n",
        "update",
    ]


def test_the_trace_shows_what_was_printed_above_the_call_it_came_before():
    view = OrchestrateView(live=True)
    cell = Written(view)
    printing_run(view)
    record = cell.last(TRACE_MIME)
    first, second = record["calls"]
    assert (first["printed_since"], first["printed_first"]) == (4, ["loading 3 files", "file 1"])
    assert (second["printed_since"], second["printed_first"]) == (1, ["between"])
    assert record["summary"]["marks"] == {
        "1": "printed: loading 3 files\n"
        "         file 1\n"
        "         \u2026 2 more lines in the cell's output",
        "2": "printed: between",
    }
    assert "after" not in record["summary"]
    text = cell.last("text/plain")
    lines = text.splitlines()
    assert lines[0].startswith("orchestrate ok")  # the header first
    at = lines.index("  printed: loading 3 files")
    assert lines[at + 1 : at + 3] == [
        "           file 1",
        "           \u2026 2 more lines in the cell's output",
    ]
    assert lines[at + 3].startswith("  #1 ") and lines[at + 4] == "  printed: between"
    assert lines[at + 5].startswith("  #2 ")
    html = cell.last("text/html")
    assert html.index("orchestrate ok") < html.index("printed: loading") < html.index(">1<")
    assert html.index("printed: between") < html.index(">2<")
    for said in (text, html):
        assert "all read" not in said  # after the last call: the output right below says it
        assert "output line" not in said and "after the last call" not in said


def test_a_cell_that_calls_nothing_writes_its_output_at_the_end_with_no_trace():
    view = OrchestrateView(live=True)
    cell = Written(view)
    view.on_event(Output("stdout", "hi\n"))
    assert cell.order() == []  # held for a header that may come with a call
    record = trace_record(0)
    record["calls"] = []
    view.finish(record)
    assert cell.order() == ["hi\n"]


def test_output_held_for_the_header_is_written_when_no_call_comes(monkeypatch):
    monkeypatch.setattr("jupyter_sandbox.display._views.HOLD_PRINTS", 0.05)
    view = OrchestrateView(live=True)
    cell = Written(view)
    view.on_event(Output("stdout", "working\n"))
    deadline = time.monotonic() + 5
    while not cell.order() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert cell.order() == ["working\n"]  # a slow first call does not hide what was printed
    view.on_event(CallStarted(ToolCall(1, "add", (1, 2), {}, start=0.0)))
    view.on_event(Output("stdout", "more\n"))
    assert cell.order() == ["working\n", "show", "more\n"]
    assert cell.sent[1][1][TRACE_MIME]["summary"]["marks"] == {"1": "printed: working"}


def test_a_long_stretch_of_output_keeps_two_short_lines():
    view = OrchestrateView(live=True)
    Written(view)
    view.on_event(Output("stdout", "x" * 10_000))  # one line, still open
    view.on_event(Output("stdout", "y" * 10_000 + "\n"))
    for i in range(1000):
        view.on_event(Output("stdout", f"line {i}\n"))
    view.on_event(CallStarted(ToolCall(1, "add", (1, 2), {}, start=0.0)))
    (call,) = view.live_record()["calls"]
    assert call["printed_since"] == 1001
    assert [len(line) for line in call["printed_first"]] == [120, 6]
    assert call["printed_first"][0].endswith("\u2026") and call["printed_first"][1] == "line 0"


def test_a_line_left_open_at_a_call_is_shown_under_the_next_call():
    view = OrchestrateView(live=True)
    Written(view)
    view.on_event(Output("stdout", "count: "))
    view.on_event(CallStarted(ToolCall(1, "add", (1, 2), {}, start=0.0)))
    view.on_event(Output("stdout", "3\nnext\n"))
    view.on_event(CallStarted(ToolCall(2, "add", (1, 2), {}, start=0.1)))
    first, second = view.live_record()["calls"]
    assert first["printed_first"] == ["count:"]
    assert second["printed_first"] == ["3", "next"] and second["printed_since"] == 1


def test_prints_between_many_calls_keep_what_a_long_record_keeps_of_its_calls():
    """A print before each of 1,000 calls: the lines are kept for the first and the latest
    calls (a long trace's record keeps those), not for all 1,000."""
    view = OrchestrateView(live=True)
    Written(view)
    for i in range(1000):
        view.on_event(Output("stdout", f"step {i}\n"))
        view.on_event(CallStarted(ToolCall(i, "add", (i, 1), {}, start=i / 1000)))
    record = trace_record(0)
    record["calls"] = [
        call_record(i, "add", i / 1000, i / 1000 + 0.001) for i in (0, 99, 500, 900, 999)
    ]
    placed = view._state.placed(record)
    assert [c.get("printed_first") for c in placed["calls"]] == [
        ["step 0"],
        ["step 99"],
        None,
        ["step 900"],
        ["step 999"],
    ]
    assert [c["printed"] for c in placed["calls"]] == [1, 100, 501, 901, 1000]
