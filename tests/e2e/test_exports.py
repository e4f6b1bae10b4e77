"""What a headless run saves: notebooks executed by nbclient (as ``nbconvert --execute`` and
papermill do), with no help from the caller, in a real kernel with real Monty workers and a real
Docker engine.

- streamed output is a few stream outputs per stream, not one per chunk, and still live;
- the code's stdout is stored once (as stream outputs), not again in the record;
- a very long trace keeps a bounded record with a per-tool summary over every call.
"""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path
from typing import Any

import nbformat
import pytest
from _paths import SCREENSHOTS
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

from jupyter_sandbox._shared._bounds import KEEP_EDGE, STREAM_TAIL
from jupyter_sandbox.display import RUN_MIME, TRACE_MIME

LOAD = "%load_ext jupyter_sandbox"

TOOLS = """
import os, time
from jupyter_sandbox import tool

@tool
def add(x: int, y: int) -> int:
    return x + y

@tool
def wait_for(path: str) -> bool:
    \"\"\"Block until ``path`` exists (False after 120 s, so a broken test ends).\"\"\"
    deadline = time.monotonic() + 120
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True
"""

ORCHESTRATE_300 = """%%orchestrate
for chunk in range(10):
    for i in range(30):
        print(f"orchestrate line {chunk * 30 + i}")
    add(chunk, 1)
"""
"""Monty hands over what was printed at each tool call: 10 chunks of 30 lines, written as they
come (each was a stream output of its own when every write was flushed)."""

SANDBOX_300 = """%%sandbox
import sys
for i in range(300):
    print(f"sandbox line {i}")
    print(f"sandbox error {i}", file=sys.stderr)
"""


class _CountingClient(NotebookClient):
    """nbclient as is, counting each cell's display messages (the live view's updates)."""

    displays: dict[int, int]

    def process_message(self, msg: dict[str, Any], cell: Any, cell_index: int) -> Any:
        if msg["msg_type"] in ("display_data", "update_display_data"):
            self.displays[cell_index] = self.displays.get(cell_index, 0) + 1
        return super().process_message(msg, cell, cell_index)


def execute(*sources: str) -> nbformat.NotebookNode:
    """Run the cells as nbconvert --execute does: nbclient's defaults, no stream coalescing.
    ``nb.metadata.displays`` counts each cell's display messages."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in (LOAD, TOOLS, *sources)]
    client = _CountingClient(nb, timeout=300, kernel_name="python3")
    client.displays = {}
    client.execute()
    nb.metadata["displays"] = client.displays
    return nb


def streams(cell: Any, name: str) -> list[str]:
    return [o.text for o in cell.outputs if o.output_type == "stream" and o.name == name]


def record(cell: Any, mime: str) -> dict[str, Any]:
    (data,) = [o.data[mime] for o in cell.outputs if mime in o.get("data", {})]
    return dict(data)


@pytest.mark.docker
def test_printed_lines_are_saved_as_a_few_stream_outputs(docker_engine):
    """A burst of prints is one stream output, cut only where the live view sends an update
    (ipykernel sends pending output before any display, to keep their order): at most one more
    output than the cell's display messages, however fast or slow the machine, where a flush
    per write made one output per chunk (10 here for %%orchestrate, 7-22 for %%sandbox)."""
    nb = execute(ORCHESTRATE_300, SANDBOX_300)
    orchestrate, sandbox = nb.cells[2], nb.cells[3]
    displays = nb.metadata["displays"]

    out = streams(orchestrate, "stdout")
    assert 1 <= len(out) <= 1 + displays[2], (len(out), displays[2])
    assert "".join(out) == "".join(f"orchestrate line {i}\n" for i in range(300))

    for name, word in (("stdout", "line"), ("stderr", "error")):
        out = streams(sandbox, name)
        assert 1 <= len(out) <= 1 + displays[3], (name, len(out), displays[3])
        assert "".join(out) == "".join(f"sandbox {word} {i}\n" for i in range(300))
    # the record is still shown, once, after the streamed output that came before it
    assert record(orchestrate, TRACE_MIME)["status"] == "ok"
    assert record(sandbox, RUN_MIME)["status"] == "ok"


def test_a_print_reaches_the_frontend_while_the_cell_still_runs(tmp_path: Path):
    """The cell prints, then a tool waits for a file the test writes only once the print has
    arrived on iopub: the cell can end (with True) only if its output was sent live."""
    flag = tmp_path / "seen"
    km = KernelManager(kernel_name="python3")
    km.start_kernel()
    client = km.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=60)
        for code in (LOAD, TOOLS):
            client.execute_interactive(code, timeout=60)
        msg_id = client.execute(f'%%orchestrate\nprint("before the wait")\nwait_for({str(flag)!r})')
        seen = ""
        while "before the wait" not in seen:
            msg = client.get_iopub_msg(timeout=60)  # the tool gives up at 120 s: fails here
            if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "stream":
                seen += msg["content"]["text"]
        flag.touch()
        reply = client.get_shell_msg(timeout=60)
        assert reply["content"]["status"] == "ok"
        data: list[dict[str, Any]] = []
        while True:
            msg = client.get_iopub_msg(timeout=60)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                break
            if msg["msg_type"] in ("display_data", "update_display_data"):
                data.append(msg["content"]["data"])
        final = [d[TRACE_MIME] for d in data if TRACE_MIME in d][-1]  # live records, then this
        assert final["status"] == "ok"
        assert final["value"] == "True"  # the tool saw the file: the cell outlived the print
    finally:
        client.stop_channels()
        km.shutdown_kernel(now=True)


PRINTING = """%%orchestrate
print("loading 3 files")
add(1, 2)
print("between the calls")
add(3, 4)
print("all done")
"""


def test_an_export_shows_the_header_first_and_prints_where_they_happened(tmp_path: Path):
    """The notebook nbconvert --execute saves, read back and exported to HTML: the trace's
    header before any output, each print above the call it came before, nothing about line
    numbers or "after the last call", then the cell's output in the order it was printed."""
    from nbconvert import HTMLExporter

    path = tmp_path / "printing.ipynb"
    nbformat.write(execute(PRINTING), path)
    cell = nbformat.read(path, as_version=4).cells[2]
    kinds = [o.output_type for o in cell.outputs]
    assert kinds[0] == "display_data" and set(kinds[1:]) == {"stream"}, kinds
    assert "".join(streams(cell, "stdout")) == "loading 3 files\nbetween the calls\nall done\n"
    html, _ = HTMLExporter().from_notebook_node(nbformat.read(path, as_version=4))
    body = html[html.index('<div class="jsb">') :]
    order = ["orchestrate ok", "printed: loading 3 files", "add(1, 2)", "printed: between"]
    order += ["add(3, 4)", "</table>", "loading 3 files", "between the calls", "all done"]
    cursor = 0
    for words in order:  # each after the one before
        cursor = body.find(words, cursor)
        assert cursor >= 0, (words, body)
    trace = body[: body.index("</table>")]
    assert "output line" not in trace and "after the last call" not in trace
    assert "all done" not in trace  # after the last call: the output right below says it


ORCHESTRATE_3000 = """%%orchestrate
add(1, 2)
for i in range(3000):
    print(f"orchestrate stdout {i:05} " + "x" * 150)
"""

SANDBOX_3000 = """%%sandbox
import sys
for i in range(3000):
    print(f"sandbox stdout {i:05} " + "x" * 150)
    print(f"sandbox stderr {i:05}", file=sys.stderr)
"""


@pytest.mark.docker
def test_printed_output_is_stored_once(docker_engine):
    """The stream outputs are the copy a person reads; the record keeps a short tail and the
    size, and neither its HTML nor its text repeats the output."""
    nb = execute(ORCHESTRATE_3000, SANDBOX_3000)
    saved = nbformat.writes(nb)
    for line in ("orchestrate stdout 01500", "sandbox stdout 01500", "sandbox stderr 01500"):
        assert saved.count(line) == 1, line  # only in the stream outputs

    orchestrate = record(nb.cells[2], TRACE_MIME)
    assert orchestrate["stdout_chars"] == 3000 * len("orchestrate stdout 00000 " + "x" * 150 + "\n")
    assert orchestrate["stdout"].startswith("orchestrate stdout ")  # whole lines
    assert orchestrate["stdout"].endswith("orchestrate stdout 02999 " + "x" * 150 + "\n")
    assert len(orchestrate["stdout"]) <= STREAM_TAIL

    run = record(nb.cells[3], RUN_MIME)
    assert run["stderr_chars"] == 3000 * len("sandbox stderr 00000\n")
    assert run["stderr"].endswith("sandbox stderr 02999\n")
    assert len(run["stdout"]) <= STREAM_TAIL and len(run["stderr"]) <= STREAM_TAIL
    for cell in nb.cells[2:]:
        (shown,) = [o for o in cell.outputs if o.output_type == "display_data"]
        assert "02999" not in shown.data["text/html"] + shown.data["text/plain"]
    # what the records add to the notebook is small beside the 1.1 MB printed (once)
    streams_only = copy.deepcopy(nb)
    for cell in streams_only.cells:
        cell.outputs = [o for o in cell.outputs if o.output_type == "stream"]
    added = len(saved) - len(nbformat.writes(streams_only))
    assert added < 40_000, added


LONG_TRACE = """%%orchestrate
for i in range(5000):
    try:
        add(i, 1) if i % 1000 != 500 else fail(i)
    except ValueError:
        pass
"""

FAIL = """
@tool
def fail(i: int) -> int:
    raise ValueError(f"call {i} failed")
"""


def test_a_long_trace_keeps_a_bounded_record_with_a_summary_of_every_call():
    nb = execute(FAIL, LONG_TRACE)
    cell = nb.cells[3]
    trace = record(cell, TRACE_MIME)
    ids = [call["call_id"] for call in trace["calls"]]
    failed = [call["call_id"] for call in trace["calls"] if call["error"]]
    assert len(ids) == 2 * KEEP_EDGE + 5  # the two ends and the five failures between them
    assert ids[:KEEP_EDGE] == sorted(ids[:KEEP_EDGE]) and trace["dropped"] == 5000 - len(ids)
    assert len(failed) == 5 and all("failed" in c["error"] for c in trace["calls"] if c["error"])
    assert max(ids) == ids[-1] and ids == sorted(ids)

    tools = {row["tool"]: row for row in trace["tools"]}
    assert (tools["add"]["calls"], tools["add"]["errors"]) == (4995, 0)
    assert (tools["fail"]["calls"], tools["fail"]["errors"]) == (5, 5)
    for row in tools.values():
        assert 0 < row["p50"] <= row["p95"] <= row["total"]

    (shown,) = [o for o in cell.outputs if o.output_type == "display_data"]
    text, html = shown.data["text/plain"], shown.data["text/html"]
    assert text.splitlines()[0].endswith("5,000 tool calls, 5 failed")
    assert "4,995" in text and "4,995" in html  # the summary counts what the record dropped
    assert f"showing {len(ids)} of 5,000 calls: the first {KEEP_EDGE}" in text
    assert "every failure" in text
    assert "jsb-scroll" not in html and "max-height:400px" not in html  # no box in a box
    assert len(nbformat.writes(nb)) < 400_000


# --- what a person sees of a long trace: contained, summarised, live and saved ------------------


def long_trace(n_calls: int) -> dict[str, Any]:
    """A real run's record: ``n_calls`` calls of two tools, every 100th call failing."""
    from jupyter_sandbox import Limits, orchestrate

    def add(x: int, y: int) -> int:
        return x + y

    def check(i: int) -> int:
        if i % 100 == 50:
            raise ValueError(f"call {i} failed")
        return i

    code = (
        f"for i in range({n_calls // 2}):\n"
        "    add(i, 1)\n"
        "    try:\n"
        "        check(i)\n"
        "    except ValueError:\n"
        "        pass\n"
    )
    return orchestrate(code, tools=[add, check], limits=Limits(max_calls=n_calls)).to_record()


def test_the_live_record_summarises_every_finished_call():
    """The live view shows the latest calls only; its per-tool summary counts all of them."""
    from jupyter_sandbox._shared._events import CallFinished, CallStarted, ToolCall
    from jupyter_sandbox.display import _html, _text
    from jupyter_sandbox.display._live import LIVE_CALLS, LiveTrace

    live = LiveTrace()
    for i in range(3 * LIVE_CALLS):
        call = ToolCall(i + 1, "add" if i % 3 else "fetch", (i,), {}, start=i * 0.01)
        live.on_event(CallStarted(call))
        call.end, call.error = i * 0.01 + 0.005, ("ValueError: no" if i % 30 == 0 else None)
        live.on_event(CallFinished(call))
    record = live.record()
    assert len(record["calls"]) == LIVE_CALLS
    tools = {row["tool"]: (row["calls"], row["errors"]) for row in record["tools"]}
    assert tools == {"add": (200, 0), "fetch": (100, 10)}
    assert "<td>fetch</td><td>100</td><td>10</td>" in _html.render(record)
    assert any(
        line.split()[:3] == ["fetch", "100", "10"] for line in _text.render(record).split("\n")
    )


@pytest.mark.browser
def test_a_long_trace_is_contained_in_jupyterlab_and_the_html_export():
    """800 calls drew 500 rows inline (9,222 px), then a scroll box in the notebook's own
    scroll that hid rows. Now: a tool summary, a one-line note of what the
    record lists, and the first calls with the rest a click away, in the saved view
    (JupyterLab, our renderer, no kernel; light and dark) and in the static HTML export."""
    from _jupyterlab import CHROMIUM, Lab

    from jupyter_sandbox.display import _html
    from jupyter_sandbox.display._mime import bundle

    playwright = pytest.importorskip("playwright.sync_api")
    record_ = long_trace(800)
    assert record_["dropped"] > 0
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with playwright.sync_playwright() as p, tempfile.TemporaryDirectory() as tmp:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.set_content(_html.render(record_))
        assert_contained(page, ".jsb", ".jsb-tools")
        page.screenshot(path=SCREENSHOTS / "export-long-trace.png", full_page=True)

        root = Path(tmp) / "root"
        root.mkdir()
        nb = nbformat.v4.new_notebook()
        output = nbformat.v4.new_output("display_data", data=bundle(record_))
        nb.cells = [nbformat.v4.new_code_cell("%%orchestrate\n...", outputs=[output])]
        nbformat.write(nb, root / "long.ipynb")
        lab = Lab(root, Path(tmp) / "home", starts_kernel=False)
        try:
            lab.open(page, "long.ipynb")
            page.wait_for_selector(".jsb-trace .jsb-tools", timeout=60_000)
            assert_contained(page, ".jsb-trace", ".jsb-tools")
            assert page.locator(".jsb-more").inner_text().startswith("show all (")
            assert "800 tool calls, 4 failed" in page.locator(".jsb-summary").inner_text()
            screenshots(page, "lab-long-trace")
        finally:
            lab.stop()
            browser.close()


LIVE_TRACE = """%%orchestrate --in FLAG
for i in range(300):
    add(i, 1)
wait_for(FLAG)
"""


@pytest.mark.browser
def test_a_long_trace_is_contained_while_it_runs_in_jupyterlab():
    """The live view (the growing record, drawn by our renderer) of a cell that made 300 calls
    and waits on a tool: the per-tool summary counts all 300, the latest calls scroll in their
    box. The test then lets the tool return and sees the final record."""
    from _jupyterlab import CHROMIUM, Lab, run_all, wait_all_executed, wait_kernel_ready

    playwright = pytest.importorskip("playwright.sync_api")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with playwright.sync_playwright() as p, tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "root"
        root.mkdir()
        flag = Path(tmp) / "flag"
        nb = nbformat.v4.new_notebook()
        setup = f"{LOAD}\n{TOOLS}\nFLAG = {str(flag)!r}"
        nb.cells = [nbformat.v4.new_code_cell(setup), nbformat.v4.new_code_cell(LIVE_TRACE)]
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
        nbformat.write(nb, root / "live.ipynb")
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        lab = Lab(root, Path(tmp) / "home")
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            lab.open(page, "live.ipynb")
            wait_kernel_ready(page)
            run_all(page)
            page.wait_for_function(
                "() => [...document.querySelectorAll('.jsb-status-running .jsb-tools tr')]"
                ".some(r => r.innerText.split(/\\s+/).slice(0, 2).join(' ') === 'add 300')",
                timeout=120_000,
            )
            summary = page.locator(".jsb-summary").inner_text()
            assert "301 tool calls (1 running, showing the last 100)" in summary
            assert_no_box_in_a_box(page, ".jsb-trace")
            screenshots(page, "lab-live-long-trace")
            flag.touch()
            wait_all_executed(page, timeout_ms=120_000)
            page.wait_for_selector(".jsb-trace.jsb-status-ok .jsb-tools")
            assert "301 tool calls" in page.locator(".jsb-summary").inner_text()
        finally:
            lab.stop()
            browser.close()


def screenshots(page: Any, name: str) -> None:
    """``artifacts/screenshots/<name>-light.png`` and ``-dark.png`` of the page as it is."""
    from _jupyterlab import notebook_js

    for theme, suffix in (("JupyterLab Light", "light"), ("JupyterLab Dark", "dark")):
        notebook_js(
            page, "return app.commands.execute('apputils:change-theme', arg);", {"theme": theme}
        )
        page.wait_for_function(
            "(t) => document.body.dataset.jpThemeName === t", arg=theme, timeout=30_000
        )
        page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=60_000)
        page.screenshot(path=SCREENSHOTS / f"{name}-{suffix}.png")


def assert_contained(page: Any, root: str, tools: str) -> None:
    """The tool summary lists both tools with every call counted; one line says which calls
    the record lists; the whole trace is a screenful, not thousands of pixels, with no scroll
    box of its own hiding rows."""
    rows = page.locator(f"{tools} tr").all_inner_texts()
    assert any(r.split()[:3] == ["add", "400", "0"] for r in rows), rows
    assert any(r.split()[:3] == ["check", "400", "4"] for r in rows), rows
    assert "calls: the first 100, the last 100" in page.locator(root).first.inner_text()
    assert_no_box_in_a_box(page, root)
    assert page.locator(root).first.bounding_box()["height"] < 900


def assert_no_box_in_a_box(page: Any, root: str) -> None:
    """No element of the trace scrolls vertically inside the notebook's own scroll."""
    boxed = page.locator(root).first.evaluate(
        "(r) => [...r.querySelectorAll('*')].filter(n => n.scrollHeight > n.clientHeight + 1"
        " && ['auto', 'scroll'].includes(getComputedStyle(n).overflowY)).length"
    )
    assert boxed == 0


@pytest.mark.docker
def test_a_sandbox_tools_output_shows_once_in_its_run_record(docker_engine):
    """A sandbox used as a tool does not stream into the cell: its run's record (nested in the
    call) is where its output is, as a tail that says how much it was."""
    from jupyter_sandbox import create, orchestrate, tool
    from jupyter_sandbox.display import _html

    code = "for i in range(3000):\n    print(f'tool line {i:04}')\nresult = x"
    echo = tool(create("echo", code=code, inputs={"x": int}, outputs={"result": int}))
    result = orchestrate("await echo(7)", tools=[echo])
    ((child,),) = [call["children"] for call in result.to_record()["calls"]]
    assert child["stdout_chars"] == 3000 * len("tool line 0000\n")
    assert child["stdout"].endswith("tool line 2999\n") and "tool line 0000" not in child["stdout"]
    html = _html.render(result.to_record())
    assert html.count("tool line 2999") == 1
    assert f"stdout (last {len(child['stdout']):,} of 45,000 characters)" in html
