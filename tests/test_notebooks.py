"""The teaching notebooks run top to bottom with real Monty (and real Docker where they use
%%sandbox), and their key cells show what the prose says they show.

Cells expected to fail carry the ``raises-exception`` tag (nbclient then continues); cells whose
output is checked carry a ``check-*`` tag.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"


def _runner() -> Any:
    spec = importlib.util.spec_from_file_location(
        "run_notebooks", ROOT / "scripts/run_notebooks.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def execute(name: str, out_dir: Path) -> dict[str, dict[str, Any]]:
    """Run ``notebooks/<name>``; return each tagged cell's outputs by tag, and check that only
    the cells tagged ``raises-exception`` failed."""
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
            by_tag[tag] = _collect(cell.outputs)
    return by_tag


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
    assert cells["check-no-env-back"]["result"] is None  # nothing displayed: the value is None
    assert "fork refused after" in cells["check-fork"]["stdout"]
    assert cells["check-alive"]["result"] == "'still here'"
    nb = nbformat.read(tmp_path / "05-what-the-sandboxes-stop.ipynb", as_version=4)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert "sk-this-must-not-leak" not in str(outputs)
