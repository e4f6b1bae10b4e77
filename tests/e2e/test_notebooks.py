"""The teaching notebooks run top to bottom with real Monty (and real Docker where they use
%%sandbox), and their key cells show what the prose says they show.

Cells expected to fail carry the ``raises-exception`` tag (nbclient then continues); cells whose
output is checked carry a ``check-*`` tag. Before a cell tagged ``restart-kernel-before`` the
kernel is shut down and a new one started, which first runs the cells tagged
``rerun-after-restart`` again: what the notebook asks its reader to do. A cell tagged
``stop-for-restart`` is where Run All stops and tells the reader to restart: the harness, which
restarts by itself, skips it.
"""

from __future__ import annotations

import importlib.util
import shutil
import tempfile
from pathlib import Path
from typing import Any

import nbformat
import pytest
from _paths import ROOT
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

ROOT = ROOT
NOTEBOOKS = ROOT / "notebooks"


def _runner() -> Any:
    spec = importlib.util.spec_from_file_location(
        "run_notebooks", ROOT / "scripts/run_notebooks.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RESTART = "restart-kernel-before"
RERUN = "rerun-after-restart"
STOP = "stop-for-restart"


def execute(name: str, out_dir: Path) -> dict[str, dict[str, Any]]:
    """Run ``notebooks/<name>``; return each tagged cell's outputs by tag, and check that only
    the cells tagged ``raises-exception`` failed."""
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    if any(RESTART in cell.metadata.get("tags", []) for cell in nb.cells):
        path = _run_with_restarts(NOTEBOOKS / name, out_dir)
    else:
        path = _runner().run_notebook(NOTEBOOKS / name, out_dir)
    nb = nbformat.read(path, as_version=4)
    by_tag: dict[str, dict[str, Any]] = {}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        tags = cell.metadata.get("tags", [])
        errors = [o for o in cell.outputs if o.output_type == "error"]
        assert bool(errors) == ("raises-exception" in tags), (cell.source, errors)
        for tag in tags:
            by_tag[tag] = {**_collect(cell.outputs), "execution_count": cell.execution_count}
    return by_tag


def _run_with_restarts(path: Path, out_dir: Path) -> Path:
    """`run_notebook` with a real kernel restart (a new kernel process) before each cell tagged
    `RESTART`; the new kernel first runs the earlier cells tagged `RERUN` again."""
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    starts = [i for i, cell in enumerate(nb.cells) if RESTART in cell.metadata.get("tags", [])]
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        for start, end in zip([0, *starts], [*starts, len(nb.cells)], strict=True):
            with client.setup_kernel():  # shuts the kernel down on leaving
                again = [i for i in range(start) if RERUN in nb.cells[i].metadata.get("tags", [])]
                for index in [*again, *range(start, end)]:
                    if STOP not in nb.cells[index].metadata.get("tags", []):
                        client.execute_cell(nb.cells[index], index)
    finally:  # a failed run is kept too: it is what you need to see
        nbformat.write(nb, out_dir / path.name)
    return out_dir / path.name


def _collect(outputs: list[Any]) -> dict[str, Any]:
    text, result, mimes = [], None, {}
    for out in outputs:
        if out.output_type == "stream":
            text.append(out.text)
        elif out.output_type == "execute_result":
            result = out.data.get("text/plain")
        elif out.output_type == "display_data":
            mimes.update(out.data)
        elif out.output_type == "error":
            mimes["error"] = f"{out.ename}: {out.evalue}"
    return {"stdout": "".join(text), "result": result, **mimes}


TRACE = "application/vnd.jupyter-sandbox.trace+json"


def test_orchestrate_notebook(tmp_path):
    cells = execute("01-orchestrate.ipynb", tmp_path)
    report = cells["check-report"]
    assert "'Lima': {'celsius': 19.1, 'fahrenheit': 66.4}" in report["result"]
    assert "checked 3 cities" in report["stdout"]
    assert [c["tool"] for c in report[TRACE]["calls"]][:2] == ["temperature", "to_fahrenheit"]
    gather = cells["check-gather"][TRACE]["calls"]
    assert all(call["start"] < min(c["end"] for c in gather) for call in gather)  # overlapped
    assert cells["check-except"]["result"] == "\"unknown city: 'Atlantis'\""
    assert "warmest: Lima" in cells["check-handle"]["stdout"]
    resumed = cells["check-resume"][TRACE]["calls"]
    assert [c["replayed"] for c in resumed] == [True, True, False]
    # What the notebook's comment says: step(0) and step(1) ran once, step(2) twice.
    assert cells["check-resumed-attempts"]["result"] == "[0, 1, 2, 2]"
    assert cells["check-api"]["result"].startswith("(39.56, [('temperature', ('Oslo',), 4.2)")


@pytest.mark.parametrize("name", sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")))
def test_every_notebook_is_valid_and_has_no_stored_outputs(name):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbformat.validate(nb)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")


def test_agent_loop_notebook(tmp_path):
    cells = execute("04-agent-loop.ipynb", tmp_path)
    assert "def price(isbn: str) -> float:" in cells["check-prompt"]["stdout"]
    assert "measured on pydantic-monty" in cells["check-prompt"]["stdout"]
    assert cells["check-agent"]["result"] == (
        "{'total_eur': 87.5, 'copies': {'978-1492056355': 3, '978-1098125974': 0}}"
    )
    attempts = cells["check-attempts"]["stdout"].splitlines()
    assert attempts[0] == "attempt 1: ToolError, calls: [\"price('Fluent Python',)\"]"
    assert attempts[1].startswith("attempt 2: ok, calls: [\"search('python',)\"")
    feedback = cells["check-feedback"]["stdout"]
    assert 'File "<cell>", line 1' in feedback
    assert "ToolError: tool 'price' raised KeyError: 'Fluent Python'" in feedback
    assert cells["check-out"]["result"] == "['978-1492056355', '978-1098125974']"
    assert "['ToolError', 'ToolError']" in cells["check-exhausted"]["stdout"]

    # The %%codemode cell shows both attempts: code, trace, and why the first one failed.
    nb = nbformat.read(tmp_path / "04-agent-loop.ipynb", as_version=4)
    magic = next(c for c in nb.cells if "check-magic" in c.metadata.get("tags", []))
    shown = [o.data for o in magic.outputs if o.output_type == "display_data"]
    codes = [d["text/markdown"] for d in shown if "text/markdown" in d]
    assert codes[0].startswith("**Attempt 1 of 3**\n\n```python\n[isbn for isbn in search(3)")
    assert codes[1].startswith("**Attempt 2 of 3**\n\n```python\naffordable = []")
    traces = [d[TRACE] for d in shown if TRACE in d]
    assert [t["status"] for t in traces] == ["error", "ok"]
    assert traces[0]["error"].startswith("TypeCheckError") and traces[0]["calls"] == []
    assert "Attempt 1 of 3 failed (TypeCheckError)" in str(shown)


def test_durable_notebook(tmp_path):
    """A session over cells, a gated deletion approved in a new kernel (the
    code before the gate not run again), and a fork with an edited result."""
    demo = Path(tempfile.gettempdir()) / "jupyter-sandbox-durable-demo"  # the notebook's folder
    try:
        cells = execute("06-durable.ipynb", tmp_path)
    finally:
        shutil.rmtree(demo, ignore_errors=True)  # the notebook's last cell did, unless it failed
    assert cells["check-session-1"]["stdout"] == "3 files\n"
    assert cells["check-session-2"]["result"] == "['draft-1.tmp', 'draft-2.tmp']"
    listed = cells["check-sessions"]["stdout"]
    assert "cleanup" in listed and "names: list" in listed and "old: list" in listed

    paused = cells["check-paused"]
    assert paused["stdout"] == "looked at 3 files\n"
    record = paused[TRACE]
    assert record["status"] == "paused"
    assert [(c["tool"], c["args"]) for c in record["pending"]] == [
        ("delete_files", ["['draft-1.tmp', 'draft-2.tmp']"])  # previews
    ]
    run_id = record["run_id"]
    assert cells["check-not-yet"]["result"] == "['draft-1.tmp', 'draft-2.tmp', 'notes.txt']"

    assert cells["check-pending"]["execution_count"] == 2  # a new kernel: setup, then this
    listing = cells["check-pending"]["text/plain"]  # in a kernel: text, and HTML with links
    assert run_id in listing
    assert "delete_files(['draft-1.tmp', 'draft-2.tmp'])" in listing
    assert cells["check-session-after-restart"]["result"] == "['draft-1.tmp', 'draft-2.tmp']"
    approved = cells["check-approved"]
    assert approved["stdout"] == "removed 2 files\n"  # not "looked at": that ran before the gate
    assert approved["result"] == "2"
    assert (approved[TRACE]["status"], approved[TRACE]["run_id"]) == ("ok", run_id)
    assert cells["check-gone"]["result"] == "['notes.txt']"
    assert cells["check-log"]["stdout"] == (
        "list_files()\nlist_files()\ndelete_files(['draft-1.tmp', 'draft-2.tmp'])\n\n"
    )

    assert cells["check-usage"]["result"] == "'nothing to do'"
    usage_run = cells["check-usage"][TRACE]["run_id"]
    fork = cells["check-fork"]
    assert (fork["stdout"], fork["result"]) == ("disk 95% full\n", "'clean up now'")
    assert fork[TRACE]["forked_from"] == {"run_id": usage_run, "call": 0}
    assert cells["check-log-after-fork"]["stdout"].count("disk_usage()") == 1


def test_run_all_on_the_durable_notebook_stops_where_the_restart_belongs(tmp_path):
    """Run All (nbclient, like JupyterLab, stops at the first error) does not run on past the
    restart: it stops at the ``stop-for-restart`` cell with one line saying what to do, with the
    approval still pending, and no later cell ran."""
    demo = Path(tempfile.gettempdir()) / "jupyter-sandbox-durable-demo"
    nb = nbformat.read(NOTEBOOKS / "06-durable.ipynb", as_version=4)
    client = NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}
    )
    try:
        with pytest.raises(CellExecutionError):
            client.execute()
    finally:
        shutil.rmtree(demo, ignore_errors=True)
    stop = next(i for i, c in enumerate(nb.cells) if STOP in c.metadata.get("tags", []))
    (said,) = nb.cells[stop].outputs  # IPython shows a UsageError as one line, no traceback
    assert (said.output_type, said.name) == ("stream", "stderr")
    assert said.text.startswith("UsageError: restart the kernel now (Kernel > Restart Kernel)")
    assert said.text.count("\n") == 1
    ran = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.execution_count]
    assert max(ran) == stop  # nothing after it ran: not the approval, not the tidy-up
    (paused,) = (c for c in nb.cells if "check-paused" in c.metadata.get("tags", []))
    assert _collect(paused.outputs)[TRACE]["status"] == "paused"  # the approval still pending


RUN = "application/vnd.jupyter-sandbox.run+json"


@pytest.mark.docker
@pytest.mark.usefixtures("no_leaked_containers")
def test_demo_notebook(tmp_path):
    """The README's main job."""
    cells = execute("demo.ipynb", tmp_path)
    assert "rendered 3 rows inside the container" in cells["check-table"]["stdout"]
    assert cells["check-table"][RUN]["build"]["tag"].startswith("jupyter-sandbox/env:")
    assert "Lima         19.1" in cells["check-table-print"]["stdout"]
    assert cells["check-score"][RUN]["outputs"]["longest"]["preview"] == "'quick'"
    assert cells["check-score-again"]["result"] == "(5, 'sandboxes')"
    summary = cells["check-summary"]
    assert "2: {'words': 4, 'longest': 'dependencies'}" in summary["result"]
    scores = [c for c in summary[TRACE]["calls"] if c["tool"] == "score"]
    assert all(call["children"][0]["status"] == "ok" for call in scores)
    assert all(call["start"] < min(c["end"] for c in scores) for call in scores)  # side by side


@pytest.mark.docker
@pytest.mark.usefixtures("no_leaked_containers")
def test_sandbox_notebook(tmp_path):
    cells = execute("02-sandbox.ipynb", tmp_path)
    assert cells["check-types-back"]["result"] == (
        "(datetime.datetime(2024, 1, 31, 12, 30),\n True,\n {'n': 8, 'max': 9, 'mean': 3.875})"
    )
    assert "  7    6" in cells["check-packages-print"]["stdout"]
    assert cells["check-files-back"]["stdout"].startswith("ada\n   ada #########\n")
    assert cells["check-timeout"]["error"] == (
        "SandboxTimeout: timed out after 2 s (raise it with --timeout)"
    )
    assert cells["check-oom"]["error"].startswith("OutOfMemory: out of memory")
    assert cells["check-modes-back"]["result"] == "(31, '4\\n')"
    assert cells["check-env-back"]["result"] == (
        "{'MODE': 'demo', 'token_length': 16, 'HOST_ONLY': None}"
    )
    assert cells["check-cache-2"][RUN]["cached"]  # the first may hit an earlier run's entry
    assert cells["check-api"]["result"] == "42"


@pytest.mark.docker
@pytest.mark.usefixtures("no_leaked_containers")
def test_sandboxes_as_tools_notebook(tmp_path):
    cells = execute("03-sandboxes-as-tools.ipynb", tmp_path)
    assert cells["check-fanout"]["result"] == "{10: 4, 100: 25, 1000: 168, 10000: 1229}"
    runs = [c for c in cells["check-fanout"][TRACE]["calls"] if c["tool"] == "count_primes"]
    assert len(runs) == 4
    assert all(call["start"] < min(c["end"] for c in runs) for call in runs)  # 4 at once
    assert cells["check-caught"]["result"].startswith("'caught: NonZeroExit: exited with code 3")
    assert cells["check-api"]["result"] == "([25, 168], ['ok', 'ok'])"


@pytest.mark.docker
@pytest.mark.usefixtures("no_leaked_containers")
def test_what_the_sandboxes_stop_notebook(tmp_path):
    cells = execute("05-what-the-sandboxes-stop.ipynb", tmp_path)
    assert cells["check-no-env-back"]["stdout"] == "API_KEY inside the container: None\n"
    assert "fork refused after" in cells["check-fork"]["stdout"]
    assert cells["check-alive"]["result"] == "'still here'"
    nb = nbformat.read(tmp_path / "05-what-the-sandboxes-stop.ipynb", as_version=4)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert "sk-this-must-not-leak" not in str(outputs)


@pytest.mark.docker
@pytest.mark.usefixtures("no_leaked_containers")
def test_codegen_notebook(tmp_path):
    cells = execute("08-codegen.ipynb", tmp_path)
    assert cells["check-generate"]["stdout"].splitlines() == [
        "iteration 1: test_one_row: failed, test_the_samples_total: failed (diagnosis: logic)",
        "iteration 2: test_one_row: passed, test_the_samples_total: passed (diagnosis: -)",
    ]
    assert cells["check-generate"]["result"] == "(True, 2)"
    assert "assert 0.0 == 5.0" in cells["check-feedback"]["stdout"]
    context = cells["check-context"]["stdout"]
    assert "1000 rows" in context and "item-4," in context and "item-5," not in context
    assert cells["check-run"]["result"] == "(3997.0, 3997.0)"
    assert cells["check-out"]["result"] == "3997.0"
    nb = nbformat.read(tmp_path / "08-codegen.ipynb", as_version=4)
    magic = next(c for c in nb.cells if "check-magic" in c.metadata.get("tags", []))
    shown = "\n".join(o.data.get("text/markdown", "") for o in magic.outputs if "data" in o)
    assert "**Iteration 1 of 10**" in shown and "Iteration 2: tests passed" in shown
    assert "Diagnosis: **logic error**" in shown


@pytest.mark.docker
@pytest.mark.usefixtures("no_leaked_containers")
def test_sessions_notebook(tmp_path):
    cells = execute("07-sessions.ipynb", tmp_path)
    assert cells["check-load"]["stdout"].startswith("loaded 20000 rows")
    explored = cells["check-explore"]
    assert explored[RUN]["session"] == "explore" and explored[RUN]["session_cell"] == 2
    assert explored[RUN]["summary"]["headline"].startswith("session explore · cell 2 ok")
    assert float(cells["check-mean"]["result"]) == pytest.approx(50, abs=2)
    assert "(20000, 'item,price')" in str(cells["check-kept"])
    assert "explore@loaded" in cells["check-snapshot"]["stdout"]
    fork, original = cells["check-fork"], cells["check-original"]
    assert int(_shown(fork)) < 20000 and _shown(original) == "20000"
    assert "explore" in cells["check-list"]["stdout"] and "cheap" in cells["check-list"]["stdout"]
    reattached = cells["check-reattach"]
    assert "re-attached" in reattached["stdout"]
    assert _shown(reattached) == "'written before the restart'"
    assert _shown(cells["check-restored"]) == "20000"


RUN = "application/vnd.jupyter-sandbox.run+json"
DISPLAY = "application/vnd.jupyter-sandbox.display+json"


def _shown(cell: dict[str, Any]) -> str:
    """The last value a sandbox cell displayed (its text)."""
    return str(cell[DISPLAY]["data"]["text/plain"])
