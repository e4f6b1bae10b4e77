"""JupyterLab in Debian's Chromium: the live view and the saved record drawn by our MIME
renderer, magic-cell highlighting, keyboard sorting and contrast, the saved notebook reopened by
a fresh server that starts no kernel, and the notebook's HTML export.

Screenshots go to artifacts/screenshots/ (light and dark). Needs chromium, Docker and the base
image.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest
from _jupyterlab import (
    THEMES,
    Lab,
    assert_contrast,
    notebook_js,
    run_cell,
    save,
    set_theme,
    wait_all_executed,
    wait_cell_done,
    wait_kernel_ready,
)
from _paths import SCREENSHOTS

from jupyter_sandbox.display import RUN_MIME, TRACE_MIME

playwright = pytest.importorskip("playwright.sync_api")
pytestmark = [pytest.mark.browser, pytest.mark.docker]

PACKAGE = "six"
"""Installed by the %%sandbox cell; its image is removed first so the build really runs."""


CELLS = [
    """%load_ext jupyter_sandbox
import asyncio
from jupyter_sandbox import tool

@tool
def add(x: int, y: int) -> int:
    return x + y

@tool
async def slow(x: int) -> int:
    await asyncio.sleep(1.5)
    return x

@tool
def fail(reason: str) -> int:
    raise ValueError(reason)

n = 21""",
    """%%orchestrate
import asyncio
a = add(1, 2)
try:
    fail("boom from the tool")
except ValueError:
    pass
b, c = await asyncio.gather(slow(10), slow(20))
a + b + c""",
    f"""%%sandbox --packages {PACKAGE} --in n --out total:int
import six, time
print("six", six.__version__, flush=True)
time.sleep(4)  # the live view, just before the cell finishes
total = n * 2""",
    """%%sandbox --command
echo "hello from bash in $(uname -s)\"""",
]
"""The orchestrate cell fails a call before its slow calls, so its live view shows every kind
of row; the sandbox cell waits after printing, so its live view can be seen before it ends."""


def forget_image(package: str) -> None:
    from jupyter_sandbox.sandbox._client import client

    docker = client()
    for image in docker.images.list(filters={"label": f"jupyter-sandbox.packages={package}"}):
        for container in docker.containers.list(all=True, filters={"ancestor": image.id}):
            container.remove(force=True)  # a run whose background removal is still pending
        docker.images.remove(image.id, force=True)


@pytest.fixture
def workspace(tmp_home: Path, docker_engine) -> Path:
    root = tmp_home / "root"
    root.mkdir()
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in CELLS]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, root / "demo.ipynb")
    forget_image(PACKAGE)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return root


def test_run_save_and_reopen_without_kernel(workspace: Path, tmp_home: Path, browser) -> None:
    lab = Lab(workspace, tmp_home / "home-live")
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 1100})
        lab.open(page, "demo.ipynb")
        wait_kernel_ready(page)
        mimetypes = notebook_js(page, "return panel.content.widgets.map(c => c.model.mimeType);")
        assert mimetypes[1:] == ["text/x-python", "text/x-python", "text/x-sh"]

        run_cell(page, 0)
        watch_live_builds(page)
        live = see_live_views(page, "light")
        run_cell(page, 3)
        wait_all_executed(page, timeout_ms=300_000)
        assert_live_build_seen(page)
        page.screenshot(path=SCREENSHOTS / "lab-finished.png", full_page=True)
        assert_rendered(page)
        assert_same_look(live, look(page))
        assert page.locator(".jupyter-widgets").count() == 0  # no widget, live or saved
        save(page)
        shutil.copy(workspace / "demo.ipynb", workspace / "saved.ipynb")

        set_theme(page, "JupyterLab Dark")  # the live views once more, dark, built again
        forget_image(PACKAGE)
        dark = see_live_views(page, "dark")
        assert_same_look(dark, look(page))
    finally:
        lab.stop()

    saved = nbformat.read(workspace / "saved.ipynb", as_version=4)
    (trace,) = records(saved.cells[1], TRACE_MIME)
    assert [c["tool"] for c in trace["calls"]] == ["add", "fail", "slow", "slow"]
    (run,) = records(saved.cells[2], RUN_MIME)
    assert run["build"]["cached"] is False
    assert run["outputs"]["total"]["preview"] == "42"
    for cell, record in ((saved.cells[1], trace), (saved.cells[2], run)):
        # the live display was replaced in place: one display, the final record
        assert [o.output_type for o in cell.outputs].count("display_data") == 1
        assert record["status"] == "ok" and "live" not in record
    assert "widgets" not in saved.metadata

    lab = Lab(workspace, tmp_home / "home-reopen", starts_kernel=False)
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 1100})
        lab.open(page, "saved.ipynb")
        page.wait_for_selector(".jsb-trace .jsb-call", timeout=60_000)
        assert lab.api("kernels") == []
        assert_rendered(page)
        assert_same_look(live, look(page))
        sort_with_the_keyboard_and_expand_error(page)
        assert_bars_have_text(page)
        for theme, name in THEMES:
            set_theme(page, theme)
            assert_contrast(page)
            page.screenshot(path=SCREENSHOTS / f"lab-reopened-no-kernel-{name}.png", full_page=True)
            for index, what in ((1, "trace"), (2, "run")):
                cell = page.locator(".jp-Cell").nth(index).locator(".jp-OutputArea")
                cell.screenshot(path=SCREENSHOTS / f"lab-saved-{what}-{name}.png")
    finally:
        lab.stop()


def test_html_export_keeps_its_layout(tmp_home: Path, browser) -> None:
    """nbconvert's table CSS (right-aligned, striped, centred) does not reach our tables."""
    from _display_samples import run_record, trace_record
    from nbconvert import HTMLExporter

    from jupyter_sandbox.display import bundle

    nb = nbformat.v4.new_notebook()
    for record in (trace_record(6), run_record()):
        cell = nbformat.v4.new_code_cell("%%orchestrate")
        cell.outputs = [nbformat.v4.new_output("display_data", data=bundle(record))]
        nb.cells.append(cell)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for theme, name in (("light", "light"), ("dark", "dark")):
        html, _ = HTMLExporter(theme=theme).from_notebook_node(nb)
        path = tmp_home / f"export-{name}.html"
        path.write_text(html)
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.goto(path.as_uri())
        cells = page.locator(".jsb-calls td")
        assert cells.count() == 6 * 7
        styles = page.evaluate(
            """() => Array.from(document.querySelectorAll('.jsb tr')).map(tr => [
                getComputedStyle(tr).backgroundColor,
                ...Array.from(tr.children).map(c => getComputedStyle(c).textAlign)])"""
        )
        assert {row[0] for row in styles} == {"rgba(0, 0, 0, 0)"}  # no stripes
        assert {align for row in styles for align in row[1:]} == {"left"}
        table = page.locator(".jsb-calls").bounding_box()
        output = page.locator(".jsb").first.bounding_box()
        assert table["x"] == output["x"]  # not centred
        assert_contrast(page)
        page.screenshot(path=SCREENSHOTS / f"export-{name}.png", full_page=True)
        page.close()


def records(cell, mime: str) -> list[dict]:
    return [o.data[mime] for o in cell.outputs if mime in o.get("data", {})]


WATCH_JS = """() => {
    window.jsbBuilds = [];
    new MutationObserver(() => {
        for (const run of document.querySelectorAll('.jsb-run.jsb-status-running')) {
            const step = run.querySelector('.jsb-build-step');
            const bar = run.querySelector('.jsb-build-progress');
            if (!step || !bar) continue;
            const seen = [step.textContent, bar.value, bar.max,
                run.querySelector('.jsb-build-line').textContent];
            const last = window.jsbBuilds[window.jsbBuilds.length - 1];
            if (!last || last.join() !== seen.join()) window.jsbBuilds.push(seen);
        }
    }).observe(document.body, {subtree: true, childList: true, characterData: true});
}"""


def watch_live_builds(page) -> None:
    """Record every live build state the page draws (steps can be shorter than a poll)."""
    page.evaluate(WATCH_JS)


def assert_live_build_seen(page) -> None:
    """The live build, as drawn: the step that installs the package, on a partly filled bar."""
    seen = page.evaluate("() => window.jsbBuilds")
    installing = [s for s in seen if s[0].endswith(": installing six (uv)")]
    assert installing, seen
    for step, value, top, line in installing:
        assert step.startswith(f"step {value + 1} of {top}: ")  # the step running is not done
        assert f"building: step {value + 1} of {top}" in line


def see_live_views(page, name: str) -> dict:
    """Run the trace and the sandbox cell and look at them while they run: drawn by our renderer
    from the live record (class ``jsb-status-running``), the sandbox cell just before it ends."""
    run_cell(page, 1)
    trace = page.locator(".jp-Cell").nth(1).locator(".jp-OutputArea")
    trace.locator(".jsb-trace.jsb-status-running .jsb-call.jsb-running").first.wait_for(
        timeout=120_000
    )
    # the failed call's row, drawn before the gather runs: measured only once it is on screen
    # (under load the first running row was seen while the error row was not yet laid out)
    trace.locator("tr.jsb-error").first.wait_for(timeout=120_000)
    looks = {"trace": look_of(trace)}
    trace.screenshot(path=SCREENSHOTS / f"lab-live-trace-{name}.png")
    assert_contrast(page)  # the live error row, in this theme
    assert "orchestrate running" in trace.locator(".jsb-summary").inner_text()
    wait_cell_done(page, 1)

    run_cell(page, 2)
    run = page.locator(".jp-Cell").nth(2).locator(".jp-OutputArea")
    run.locator(".jsb-run.jsb-status-running .jsb-build-step").wait_for(timeout=300_000)
    run.screenshot(path=SCREENSHOTS / f"lab-live-build-{name}.png")
    assert_contrast(page)  # the live build's current line too
    page.screenshot(path=SCREENSHOTS / f"lab-live-build-page-{name}.png")
    # built, printed, still running: the printed line sits where it will stay
    run.locator(".jp-OutputArea-output", has_text="six 1.").wait_for(timeout=300_000)
    live = run.locator(".jsb-run.jsb-status-running")
    if not live.count():
        pytest.fail("the sandbox cell ended before its live view was seen")
    looks["run"] = look_of(run)
    assert "jsb-inputs" in looks["run"]["classes"]  # the inputs show from the start
    run.screenshot(path=SCREENSHOTS / f"lab-live-run-{name}.png")
    wait_cell_done(page, 2)
    return looks


LOOK_JS = """root => {
    const style = n => { const s = getComputedStyle(n);
        return [s.fontFamily, s.fontSize, s.fontWeight, s.color].join(' '); };
    const classes = new Set();
    root.querySelectorAll('.jsb-output *').forEach(n => n.classList.forEach(c => classes.add(c)));
    const outputs = Array.from(root.querySelectorAll('.jp-OutputArea-output')).map(o =>
        o.querySelector('.jsb-output') ? 'record' : o.getAttribute('data-mime-type'));
    const row = root.querySelector('.jsb-call');
    return {
        classes: Array.from(classes).filter(c => !/^jsb-(status-)?(running|ok|error)$/.test(c)),
        outputs: outputs,
        summary: style(root.querySelector('.jsb-summary')),
        cells: row ? Array.from(row.children).map(c => c.className) : [],
        row: row ? [style(row.querySelector('.jsb-tool')), row.getBoundingClientRect().height] : [],
        build: Array.from(root.querySelectorAll('.jsb-build-line, .jsb-build-progress'))
            .map(n => [n.className, style(n), n.getBoundingClientRect().height]),
    };
}"""


def look_of(output_area) -> dict:
    """What the eye compares: fonts, element classes, row and build-line sizes, and the order
    of the cell's outputs (the record, then the printed text)."""
    return output_area.evaluate(LOOK_JS)


def look(page) -> dict:
    cells = page.locator(".jp-Cell")
    return {
        "trace": look_of(cells.nth(1).locator(".jp-OutputArea")),
        "run": look_of(cells.nth(2).locator(".jp-OutputArea")),
    }


def assert_same_look(live: dict, saved: dict) -> None:
    """The live view and the saved record are one renderer's work: the same fonts, row cells and
    sizes, the same build line; the saved one only adds what the end brings (value, outputs)."""
    for what in ("trace", "run"):
        before, after = live[what], saved[what]
        assert before["summary"] == after["summary"], what
        assert set(before["classes"]) <= set(after["classes"]), what
        assert before["cells"] == after["cells"] and before["row"] == after["row"], what
        assert before["outputs"] == after["outputs"][: len(before["outputs"])], what
    assert live["run"]["build"] == saved["run"]["build"]


def assert_rendered(page) -> None:
    """Our MIME renderer drew the trace (rows, timeline, error) and the run (build, outputs)."""
    rows = page.locator(".jsb-trace .jsb-call")
    assert rows.count() == 4
    assert rows.locator(".jsb-timeline .jsb-bar").count() == 4
    assert page.locator(".jsb-trace .jsb-call.jsb-error").count() == 1
    slow_bars = page.locator(".jsb-trace .jsb-call:has(.jsb-tool:text-is('slow')) .jsb-bar")
    first, second = (slow_bars.nth(i).bounding_box() for i in range(2))
    assert first["x"] < second["x"] + second["width"] and second["x"] < first["x"] + first["width"]
    run = page.locator(".jsb-run").first
    assert "built in" in run.locator(".jsb-build-line").inner_text()
    assert run.locator(".jsb-outputs .jsb-type").inner_text() == "int"
    assert "hello from bash" in page.locator(".jp-Cell").nth(3).inner_text()


def sort_with_the_keyboard_and_expand_error(page) -> None:
    """Tab reaches the sortable titles (buttons), Enter sorts, the th says the order."""
    tools = page.locator(".jsb-trace .jsb-call .jsb-tool")
    assert tools.all_inner_texts() == ["add", "fail", "slow", "slow"]
    headers = page.locator(".jsb-trace th[data-key]")
    assert headers.evaluate_all("hs => hs.map(h => h.getAttribute('aria-sort'))") == [
        "ascending",
        "none",
        "none",
        "none",
        "none",
    ]
    page.locator(".jsb-trace th[data-key='call_id'] button").focus()
    focused = [page.evaluate("() => document.activeElement.textContent")]
    for _ in range(2):
        page.keyboard.press("Tab")  # 'call' and 'result' do not sort: Tab skips them
        focused.append(page.evaluate("() => document.activeElement.textContent"))
    assert focused == ["#", "tool", "duration"]
    page.keyboard.press("Enter")
    page.keyboard.press("Enter")  # descending: the two slow calls first
    duration = page.locator(".jsb-trace th[data-key='duration']")
    assert duration.get_attribute("aria-sort") == "descending"
    assert headers.first.get_attribute("aria-sort") == "none"
    assert tools.all_inner_texts()[:2] == ["slow", "slow"]
    assert page.evaluate("() => document.activeElement.textContent") == "duration"
    page.screenshot(path=SCREENSHOTS / "lab-reopened-sorted-by-keyboard.png")
    error = page.locator(".jsb-trace .jsb-call.jsb-error details")
    error.locator("summary").focus()
    page.keyboard.press("Enter")
    assert "boom from the tool" in error.locator("pre").inner_text()
    assert error.get_attribute("open") is not None


def assert_bars_have_text(page) -> None:
    labels = page.locator(".jsb-trace .jsb-bar").evaluate_all(
        "bars => bars.map(b => [b.getAttribute('role'), b.getAttribute('aria-label'), b.title])"
    )
    assert len(labels) == 4
    for role, label, title in labels:
        assert role == "img" and label == title
        assert label.startswith("starts at ") and ", takes " in label
