"""A traced run's trace id in real JupyterLab (Chromium): a saved notebook reopened without a
kernel shows it under the trace's headline and in the sandbox run's summary, in light and dark,
and shows nothing for an id the kernel does not write."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from _display_samples import run_record, trace_record
from _jupyterlab import (
    THEMES,
    assert_contrast,
    notebook_js,
    opened,
    set_theme,
    write_notebook,
)
from _paths import SCREENSHOTS

from jupyter_sandbox.display import bundle

pytestmark = [pytest.mark.browser]

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"


def _cell(record: dict, source: str) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(source)
    cell.outputs = [nbformat.v4.new_output("display_data", data=bundle(record))]
    return cell


def test_a_saved_trace_id_is_shown_and_a_forged_one_is_not(tmp_home: Path, browser) -> None:
    traced, run, forged = trace_record(), run_record(), trace_record()
    traced["trace_id"] = run["trace_id"] = TRACE_ID
    forged["trace_id"] = "<b>not an id</b>"
    root = tmp_home / "root"
    cells = [
        _cell(traced, "%%orchestrate\nadd(1, 2)"),
        _cell(run, "%%sandbox"),
        _cell(forged, "%%orchestrate\nadd(1, 2)"),
    ]
    write_notebook(root / "traced.ipynb", cells)
    with opened(browser, root, tmp_home / "home", "traced.ipynb", starts_kernel=False) as (
        _,
        page,
    ):
        page.wait_for_selector(".jsb-trace .jsb-call", timeout=60_000)
        page.wait_for_selector(".jsb-run", timeout=60_000)
        outputs = page.locator(".jp-Cell .jp-OutputArea")
        note = f"OpenTelemetry trace {TRACE_ID}"
        assert note in outputs.nth(0).inner_text()
        assert note in outputs.nth(1).inner_text()
        assert "OpenTelemetry trace" not in outputs.nth(2).inner_text()
        assert outputs.nth(2).locator("b").count() == 0
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        for theme, name in THEMES:
            set_theme(page, theme)
            assert_contrast(page)
            notebook_js(page, "panel.content.widgets[0].node.scrollIntoView();")
            outputs.nth(0).screenshot(path=SCREENSHOTS / f"otel-trace-{name}.png")
            outputs.nth(1).screenshot(path=SCREENSHOTS / f"otel-run-{name}.png")
