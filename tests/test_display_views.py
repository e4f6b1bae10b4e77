"""Views outside a kernel: text fallbacks, quiet mode, widget state, update throttling."""

from __future__ import annotations

import threading

import pytest
from _display_samples import run_record, trace_record

from jupyter_sandbox.display import OrchestrateView, SandboxView
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
    view = view_class(quiet=True, widgets=True)
    for event in build_events():
        view.on_event(event)
    view.on_event(Output("stdout", "just this\n"))
    view.finish(trace_record())
    out, err = capsys.readouterr()
    assert (out, err) == ("just this\n", "")


def test_trace_widget_fills_in_as_calls_arrive():
    view = OrchestrateView(widgets=True)
    assert view._live is None  # nothing shown before the engine does anything
    first = ToolCall(1, "add", (1, 2), {}, start=0.0)
    second = ToolCall(2, "fetch", ("<page>",), {"retries": 3}, start=0.01)
    for call in (first, second):
        view.on_event(CallStarted(call))
    live = view._live
    first.end, first.result = 0.05, 3
    view.on_event(CallFinished(first))
    live._throttle.flush()
    assert "2 tool calls (1 running, 0 failed)" in live.summary.value
    assert live.table.value.count('class="jsb-call ') == 2
    assert "fetch(&#x27;&lt;page&gt;&#x27;, retries=3)" in live.table.value
    assert 'class="jsb-call jsb-running"' in live.table.value

    second.end, second.error, second.host_traceback = 0.2, "KeyError: 'x'", "Traceback: ..."
    view.on_event(CallFinished(second))
    view.finish(trace_record())
    assert "3 tool calls, 1 failed" in live.summary.value
    assert live.table.value.count('class="jsb-call ') == 3


def test_sandbox_widget_tracks_build_and_run():
    view = SandboxView(widgets=True)
    events = list(build_events())
    for event in events[:4]:
        view.on_event(event)
    live = view._live
    live._throttle.flush()
    assert (live.progress.value, live.progress.max) == (1, 2)
    assert live.step.value == "step 2 of 2: installing numpy (uv)"
    assert live.log_line.value == "Collecting numpy"  # the step's latest output line
    for event in events[4:]:
        view.on_event(event)
    view.on_event(RunStarted("train", "jupyter-sandbox:abc123"))
    view.on_event(RunFinished("train", 0, 3.5, outputs={"score": 0.93}))
    live._throttle.flush()
    assert (live.progress.value, live.progress.bar_style) == (2, "success")
    assert "train finished in 3.50 s (exit 0)" in live.status.value
    assert "<td>score</td><td>float</td>" in live.run.value
    assert "Collecting numpy" in live.log.value
    view.finish(run_record())
    assert "sandbox &#x27;train&#x27; ok" in live.status.value


def test_sandbox_widget_says_a_failed_build_in_one_line_with_its_log_collapsed():
    view = SandboxView(widgets=True)
    error = "package 'numpy' does not exist on the package index"
    for event in build_events(error=error):
        view.on_event(event)
    view.finish(run_record(build_error=error))
    live = view._live
    assert live.progress.bar_style == "danger"
    assert live.log_line.value == error
    assert live.log_box.selected_index is None
    assert live.log.value.count("No matching distribution") == 1
    assert "sandbox &#x27;train&#x27; error" in live.status.value


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
    view = OrchestrateView(widgets=True)

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
    view._live._throttle.flush()
    assert "2000 tool calls (0 running, 0 failed, showing the last 100)" in view._live.summary.value
