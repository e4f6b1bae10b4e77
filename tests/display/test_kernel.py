"""Views inside a real kernel: the live record updated in place, final bundles, output routing."""

from __future__ import annotations

import json

import nbformat
from _display_samples import bare, run_record, trace_record
from nbclient import NotebookClient

from jupyter_sandbox.display import RUN_MIME, TRACE_MIME

SETUP = """
import json, threading
from jupyter_sandbox.events import *
from jupyter_sandbox.display import OrchestrateView, SandboxView
"""

ORCHESTRATE = """
view = OrchestrateView()
def work():  # the orchestrate driver feeds Monty off the main thread
    view.on_event(Output("stdout", "from worker\\n"))
    call = ToolCall(1, "add", (1, 2), {}, start=0.0)
    view.on_event(CallStarted(call))
    call.end, call.result = 0.01, 3
    view.on_event(CallFinished(call))
worker = threading.Thread(target=work)
worker.start(); worker.join()
view.finish(json.loads(%r))
"""

SANDBOX = """
view = SandboxView()
view.on_event(BuildStarted("jupyter-sandbox:abc123", 2))
view.on_event(BuildStep(1, 2, "FROM base"))
view.on_event(BuildStep(2, 2, "RUN pip install numpy"))
view.on_event(BuildFinished("jupyter-sandbox:abc123", cached=False, seconds=12.5))
view.on_event(Output("stderr", "warming up\\n"))
view.finish(json.loads(%r))
"""

NO_EVENTS = """
OrchestrateView().finish(json.loads(%r))
"""

LATE_START = """
release, done = threading.Event(), threading.Event()
late_view = OrchestrateView(quiet=True)
def late():
    release.wait()
    late_view.on_event(Output("stdout", "late output\\n"))
    done.set()
threading.Thread(target=late).start()
"""

LATE_END = """
release.set(); done.wait()
print("next cell")
"""


def run(*sources: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(SETUP)] + [nbformat.v4.new_code_cell(s) for s in sources]
    NotebookClient(nb, timeout=120, kernel_name="python3", store_widget_state=True).execute()
    return nb


def test_the_live_display_is_replaced_in_place_by_the_record():
    nb = run(
        ORCHESTRATE % json.dumps(trace_record()),
        SANDBOX % json.dumps(run_record()),
        NO_EVENTS % json.dumps(trace_record()),
    )
    trace_cell, sandbox_cell, quick_cell = nb.cells[1], nb.cells[2], nb.cells[3]

    streams = [o for o in trace_cell.outputs if o.output_type == "stream"]
    assert [(o.name, o.text) for o in streams] == [("stdout", "from worker\n")]
    (final,) = [o for o in trace_cell.outputs if o.output_type == "display_data"]
    assert bare(final.data[TRACE_MIME]) == trace_record()
    assert set(final.data) == {TRACE_MIME, "text/html", "text/plain"}

    (final,) = [o for o in sandbox_cell.outputs if o.output_type == "display_data"]
    assert bare(final.data[RUN_MIME]) == run_record()
    assert any(o.get("name") == "stderr" for o in sandbox_cell.outputs)

    (only,) = quick_cell.outputs  # no events: nothing live was ever shown, just the record
    assert set(only.data) == {TRACE_MIME, "text/html", "text/plain"}
    assert "widgets" not in nb.metadata  # no widget state to save, none to load


def test_a_frontend_receives_the_live_record_then_its_update_and_no_comms():
    """What JupyterLab is sent: a display of the running record under a display id, updates
    of that id (the last one the final record), and no widget comm at all."""
    from jupyter_client.manager import start_new_kernel

    manager, client = start_new_kernel(kernel_name="python3")
    try:
        client.execute_interactive(SETUP, timeout=60)
        messages: list[dict] = []
        code = SANDBOX % json.dumps(run_record())
        reply = client.execute_interactive(code, output_hook=messages.append, timeout=60)
        assert reply["content"]["status"] == "ok"
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=False)
    displays = [m for m in messages if m["msg_type"] in ("display_data", "update_display_data")]
    first, *updates = displays
    assert first["msg_type"] == "display_data"
    live = first["content"]["data"][RUN_MIME]
    assert live["status"] == "running" and live["build"]["tag"] == "jupyter-sandbox:abc123"
    display_id = first["content"]["transient"]["display_id"]
    assert updates and {m["msg_type"] for m in updates} == {"update_display_data"}
    assert {m["content"]["transient"]["display_id"] for m in updates} == {display_id}
    assert bare(updates[-1]["content"]["data"][RUN_MIME]) == run_record()
    assert not [m for m in messages if m["msg_type"].startswith("comm_")]


def test_output_from_a_thread_stays_with_the_cell_that_started_it():
    nb = run(LATE_START, LATE_END)
    texts = [o.get("text", "") for o in nb.cells[2].outputs]
    assert texts == ["next cell\n"]
