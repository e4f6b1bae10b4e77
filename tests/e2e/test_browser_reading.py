"""What a person reads in a saved notebook, in real JupyterLab (our renderer, no
kernel) and in an nbconvert HTML export, light and dark: a sandbox record nested in a trace
spans the table's width; output is placed among the calls; an interrupted run abandons its call
in its own words; the way to go on is one line; a record saved before records carried their
words still reads. Screenshots go to artifacts/screenshots/reading-*.png."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat
import pytest
from _display_samples import interrupted_record, requests_record, run_record, trace_record
from _jupyterlab import Lab
from _paths import SCREENSHOTS

from jupyter_sandbox.display import bundle

pytestmark = pytest.mark.browser

ADVICE = "to go on, run this cell again with %%orchestrate --resume"


def nested() -> dict[str, Any]:
    """A trace whose second call ran a sandbox (its record nested), with output printed
    before, between and after the calls."""
    record = trace_record(3)
    record["calls"][1]["children"] = [run_record()]
    for index, printed in enumerate((1, 4, 4)):
        record["calls"][index]["printed"] = printed
    record["calls"][0].update(printed_since=1, printed_first=["loading 3 files"])
    record["calls"][1].update(printed_since=3, printed_first=["file 1", "file 2"])
    record["printed"] = 6
    return record


def worded_before() -> dict[str, Any]:
    """A trace saved before records kept what was printed: its words said line numbers."""
    record = trace_record(2)
    record["calls"][0]["printed"] = 1
    record["printed"] = 2
    record["summary"] = {
        "headline": "orchestrate ok in 400 ms: 2 tool calls, 1 failed",
        "notes": [],
        "kept": None,
        "tools": False,
        "marks": {"1": "printed: output line 1 (above)"},
        "after": "printed after the last call: output line 2 (below)",
    }
    return record


def interrupted() -> dict[str, Any]:
    record = interrupted_record()
    record["advice"] = f"{ADVICE}: the call that finished is answered from the last run"
    return record


def notebook() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    legacy = {"text/plain": "old", "application/vnd.jupyter-sandbox.trace+json": trace_record()}
    worded = {"text/plain": "old", "application/vnd.jupyter-sandbox.trace+json": worded_before()}
    for data in (bundle(nested()), bundle(interrupted()), legacy, worded):
        cell = nbformat.v4.new_code_cell("%%orchestrate\n...")
        cell.outputs = [nbformat.v4.new_output("display_data", data=data)]
        nb.cells.append(cell)
    return nb


def check(page: Any, root: str) -> None:
    """What every view of the notebook must show (``root``: a trace's outermost element)."""
    first, second = page.locator(root).nth(0), page.locator(root).nth(1)
    text = first.inner_text()
    assert text.index("orchestrate ok") < text.index("printed: loading 3 files")
    assert text.index("printed: loading 3 files") < text.index("printed: file 1")
    assert "file 2" in text and "\u2026 1 more line in the cell's output" in text
    assert "output line" not in text and "after the last call" not in text
    assert "value:" not in text
    # the nested sandbox record: a row of its own, as wide as the call table
    child = first.locator(".jsb-child-row").first
    table = first.locator(".jsb-calls").first.bounding_box()
    child.locator("summary").first.click()
    cell = child.locator("td").nth(1).bounding_box()
    assert cell["width"] > 0.8 * table["width"], (cell, table)
    headline = child.get_by_text("sandbox 'train' ok in 3.50 s")
    assert headline.count() >= 1
    assert headline.first.bounding_box()["height"] < 30  # one line, not squeezed into three
    words = second.inner_text()
    assert "orchestrate interrupted after 400 ms: 2 tool calls, 1 abandoned" in words
    assert "failed" not in words and ADVICE in words
    assert second.locator("tr.jsb-abandoned").count() == 1


def test_saved_notebook_reads_in_jupyterlab(tmp_home: Path, browser) -> None:
    root = tmp_home / "root"
    root.mkdir()
    nbformat.write(notebook(), root / "reading.ipynb")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    lab = Lab(root, tmp_home / "home", starts_kernel=False)
    try:
        page = browser.new_page(viewport={"width": 1300, "height": 1400})
        lab.open(page, "reading.ipynb")
        page.wait_for_selector(".jsb-trace .jsb-calls", timeout=60_000)
        check(page, ".jsb-trace")
        legacy = page.locator(".jsb-trace").nth(2).inner_text()
        assert "orchestrate ok in 400 ms: 3 tool calls" in legacy  # worded on the spot
        worded = page.locator(".jsb-trace").nth(3).inner_text()
        assert "2 tool calls, 1 failed" in worded  # its own words, but not its line numbers
        assert "output line" not in worded and "after the last call" not in worded
        for theme, name in (("JupyterLab Light", "light"), ("JupyterLab Dark", "dark")):
            page.evaluate(
                "(t) => window.jupyterapp.commands.execute('apputils:change-theme', {theme: t})",
                theme,
            )
            page.wait_for_function("(t) => document.body.dataset.jpThemeName === t", arg=theme)
            page.wait_for_timeout(500)
            page.screenshot(path=SCREENSHOTS / f"reading-lab-{name}.png", full_page=True)
    finally:
        lab.stop()


def test_html_export_reads_the_same(tmp_home: Path, browser) -> None:
    from nbconvert import HTMLExporter

    nb = notebook()
    nb.cells = nb.cells[:2]
    for theme in ("light", "dark"):
        html, _ = HTMLExporter(theme=theme).from_notebook_node(nb)
        path = tmp_home / f"reading-{theme}.html"
        path.write_text(html)
        page = browser.new_page(viewport={"width": 1300, "height": 1200})
        page.goto(path.as_uri())
        check(page, ".jsb:not(.jsb .jsb)")  # the nested run is a .jsb too
        page.screenshot(path=SCREENSHOTS / f"reading-export-{theme}.png", full_page=True)
        page.close()


REQUESTS_LINE = "3 requests: 2 allowed, 1 refused: evil.example:443 not on the list"


def test_an_allow_listed_runs_requests_read_in_jupyterlab(tmp_home: Path, browser) -> None:
    """A saved ``%%sandbox`` cell lists what the run sent out: one line with the refused
    destination, then (opened) a row per request, the refused one marked."""
    root = tmp_home / "root"
    root.mkdir()
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("%%sandbox --allow-net pypi.org api.example.com\n...")
    cell.outputs = [nbformat.v4.new_output("display_data", data=bundle(requests_record()))]
    nb.cells.append(cell)
    nbformat.write(nb, root / "requests.ipynb")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    lab = Lab(root, tmp_home / "home", starts_kernel=False)
    try:
        page = browser.new_page(viewport={"width": 1300, "height": 700})
        lab.open(page, "requests.ipynb")
        block = page.locator(".jsb-run details.jsb-requests")
        block.wait_for(timeout=60_000)
        assert block.locator("summary").inner_text() == REQUESTS_LINE
        block.locator("summary").click()
        rows = block.locator("tbody tr")
        assert rows.count() == 3
        refused = block.locator("tbody tr.jsb-refused")
        assert refused.count() == 1
        cells = refused.locator("td").all_inner_texts()
        assert cells[2:] == [
            "evil.example:443",
            "",
            "403",
            "122 B",
            "0 B",
            "refused: not on the list",
        ]
        assert "/v1/items?***" in rows.nth(1).inner_text()
        page.screenshot(path=SCREENSHOTS / "reading-requests.png", full_page=True)
    finally:
        lab.stop()


@pytest.mark.docker  # the browser fixture's conftest; no container runs
def test_a_pending_runs_cell_name_takes_you_to_the_cell(
    tmp_home: Path, browser, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``%orchestrate_pending`` at the end of a long notebook: the paused run's cell name is a
    link; following it (click, or Enter) selects that cell far above and scrolls to it."""
    from _durable_cells import GATED_NOTEBOOK as GATED
    from _jupyterlab import notebook_js, opened, run_cell, wait_executed, write_notebook

    monkeypatch.setenv("JUPYTER_SANDBOX_STORE", str(tmp_home / "store.sqlite"))
    root = tmp_home / "root"
    filler = [f"# filler {i}\n" + "\n" * 6 for i in range(12)]
    write_notebook(root / "far.ipynb", [*GATED[:2], *filler, "%orchestrate_pending"])
    last = 2 + len(filler)
    with opened(browser, root, tmp_home / "home", "far.ipynb") as (_, page):
        for index in (0, 1, last):
            run_cell(page, index)
            wait_executed(page, index)
        link = page.locator(".jp-Cell").nth(last).locator("a.jsb-cell-link")
        assert link.inner_text().startswith("cell [2] `try:`"), link.inner_text()
        link.click()
        page.wait_for_function(
            "() => window.jupyterapp.shell.currentWidget.content.activeCellIndex === 1"
        )
        box = page.locator(".jp-Cell").nth(1).bounding_box()
        assert box is not None and 0 <= box["y"] < 900  # scrolled into view
        notebook_js(page, f"panel.content.activeCellIndex = {last};")
        link.focus()
        page.keyboard.press("Enter")
        page.wait_for_function(
            "() => window.jupyterapp.shell.currentWidget.content.activeCellIndex === 1"
        )
        page.screenshot(path=SCREENSHOTS / "reading-pending-link.png")
