"""Views inside a real kernel (nbclient): widget state, final bundles, output routing."""

from __future__ import annotations

import json

import nbformat
from _display_samples import run_record, trace_record
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


def widget_models(nb: nbformat.NotebookNode) -> list[dict]:
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    return [model["state"] for model in state.values()]


def test_widgets_fill_in_then_give_way_to_the_record():
    nb = run(
        ORCHESTRATE % json.dumps(trace_record()),
        SANDBOX % json.dumps(run_record()),
        NO_EVENTS % json.dumps(trace_record()),
    )
    trace_cell, sandbox_cell, quick_cell = nb.cells[1], nb.cells[2], nb.cells[3]

    streams = [o for o in trace_cell.outputs if o.output_type == "stream"]
    assert [(o.name, o.text) for o in streams] == [("stdout", "from worker\n")]
    (final,) = [o for o in trace_cell.outputs if o.output_type == "display_data"]
    assert final.data[TRACE_MIME]["calls"][0]["tool"] == "add"
    assert {"text/html", "text/plain"} <= set(final.data)
    assert "application/vnd.jupyter.widget-view+json" not in final.data

    (final,) = [o for o in sandbox_cell.outputs if o.output_type == "display_data"]
    assert final.data[RUN_MIME]["name"] == "train"
    assert any(o.get("name") == "stderr" for o in sandbox_cell.outputs)

    (only,) = quick_cell.outputs  # no events: no widget was ever shown, just the record
    assert set(only.data) == {TRACE_MIME, "text/html", "text/plain"}

    models = widget_models(nb)
    html = [m["value"] for m in models if m["_model_name"] == "HTMLModel"]
    assert any("3 tool calls, 1 failed" in v for v in html)  # the trace's final state
    (bar,) = [m for m in models if m["_model_name"] == "IntProgressModel"]
    assert (bar["value"], bar["max"], bar["bar_style"]) == (2, 2, "success")


def test_output_from_a_thread_stays_with_the_cell_that_started_it():
    nb = run(LATE_START, LATE_END)
    texts = [o.get("text", "") for o in nb.cells[2].outputs]
    assert texts == ["next cell\n"]
