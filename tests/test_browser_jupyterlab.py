"""JupyterLab in Debian's Chromium: live widgets, our MIME renderer, magic-cell highlighting,
and the saved notebook reopened by a fresh server that starts no kernel.

Screenshots go to artifacts/screenshots/. Needs chromium, Docker and the base image.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest
from _jupyterlab import (
    CHROMIUM,
    Lab,
    notebook_js,
    run_all,
    save,
    wait_all_executed,
    wait_kernel_ready,
)

from jupyter_sandbox.display import RUN_MIME, TRACE_MIME

playwright = pytest.importorskip("playwright.sync_api")
pytestmark = [pytest.mark.browser, pytest.mark.docker]

SCREENSHOTS = Path(__file__).resolve().parent.parent / "artifacts" / "screenshots"
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
    await asyncio.sleep(0.3)
    return x

@tool
def fail(reason: str) -> int:
    raise ValueError(reason)

n = 21""",
    """%%orchestrate
import asyncio
a = add(1, 2)
b, c = await asyncio.gather(slow(10), slow(20))
try:
    fail("boom from the tool")
except ValueError:
    pass
a + b + c""",
    f"""%%sandbox --packages {PACKAGE} --in n --out total:int
import six
print("six", six.__version__)
total = n * 2""",
    """%%sandbox --command
echo "hello from bash in $(uname -s)\"""",
]


def forget_image(package: str) -> None:
    from jupyter_sandbox.sandbox._client import client

    docker = client()
    for image in docker.images.list(filters={"label": f"jupyter-sandbox.packages={package}"}):
        for container in docker.containers.list(all=True, filters={"ancestor": image.id}):
            container.remove(force=True)  # a run whose background removal is still pending
        docker.images.remove(image.id, force=True)


@pytest.fixture
def tmp_home() -> Iterator[Path]:
    """Not tmp_path: concurrent pytest sessions rotate it away during this long test."""
    with tempfile.TemporaryDirectory(prefix="jupyter-sandbox-lab-") as tmp:
        yield Path(tmp)


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


@pytest.fixture
def browser() -> Iterator[object]:
    with playwright.sync_playwright() as p:
        instance = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield instance
        instance.close()


def test_run_save_and_reopen_without_kernel(workspace: Path, tmp_home: Path, browser) -> None:
    lab = Lab(workspace, tmp_home / "home-live")
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 1100})
        lab.open(page, "demo.ipynb")
        wait_kernel_ready(page)
        mimetypes = notebook_js(page, "return panel.content.widgets.map(c => c.model.mimeType);")
        assert mimetypes[1:] == ["text/x-python", "text/x-python", "text/x-sh"]

        run_all(page)
        page.wait_for_selector(".jsb-trace .jsb-call", timeout=120_000)
        page.wait_for_selector(".widget-hprogress", timeout=120_000)  # the live build
        page.screenshot(path=SCREENSHOTS / "lab-live-build.png")
        wait_all_executed(page, timeout_ms=300_000)
        page.wait_for_selector(".jsb-run .jsb-build-progress")
        page.screenshot(path=SCREENSHOTS / "lab-finished.png", full_page=True)
        assert_rendered(page)
        save(page)
    finally:
        lab.stop()

    saved = nbformat.read(workspace / "demo.ipynb", as_version=4)
    (trace,) = [
        o.data[TRACE_MIME] for o in saved.cells[1].outputs if TRACE_MIME in o.get("data", {})
    ]
    assert [c["tool"] for c in trace["calls"]] == ["add", "slow", "slow", "fail"]
    (run,) = [o.data[RUN_MIME] for o in saved.cells[2].outputs if RUN_MIME in o.get("data", {})]
    assert run["build"]["cached"] is False
    assert run["outputs"]["total"]["preview"] == "42"

    lab = Lab(workspace, tmp_home / "home-reopen", starts_kernel=False)
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 1100})
        lab.open(page, "demo.ipynb")
        page.wait_for_selector(".jsb-trace .jsb-call", timeout=60_000)
        assert lab.api("kernels") == []
        assert_rendered(page)
        sort_by_duration_and_expand_error(page)
        page.screenshot(path=SCREENSHOTS / "lab-reopened-no-kernel.png", full_page=True)
    finally:
        lab.stop()


def records(cell, mime: str) -> list[dict]:
    return [o.data[mime] for o in cell.outputs if mime in o.get("data", {})]


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


def sort_by_duration_and_expand_error(page) -> None:
    tools = page.locator(".jsb-trace .jsb-call .jsb-tool")
    assert tools.all_inner_texts() == ["add", "slow", "slow", "fail"]
    header = page.locator(".jsb-trace th[data-key='duration']")
    header.click()
    header.click()  # descending: the two slow calls first
    assert tools.all_inner_texts()[:2] == ["slow", "slow"]
    error = page.locator(".jsb-trace .jsb-call.jsb-error details")
    error.locator("summary").click()
    assert "boom from the tool" in error.locator("pre").inner_text()
    assert error.get_attribute("open") is not None
