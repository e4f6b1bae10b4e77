"""Details a person meets in a cell: previews that read like ``Out[]`` (issue 9, item 14),
``%%codemode`` attempts as code and ``--insert`` that does not stack copies (item 15), and
containers that never outlive their kernel or their documented life (item 17)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest
from _jupyterlab import CHROMIUM, Lab, notebook_js

from jupyter_sandbox import orchestrate
from jupyter_sandbox._preview import ELLIPSIS, preview
from jupyter_sandbox.display import RUN_MIME, TRACE_MIME, _html
from jupyter_sandbox.sandbox._record import _describe

playwright = pytest.importorskip("playwright.sync_api")

SCREENSHOTS = Path(__file__).resolve().parent.parent / "artifacts" / "screenshots"
SPACED = "two  spaces,   three and\ta tab"
"""A string whose runs of spaces HTML would collapse unless told not to."""


def unsorted() -> dict[str, object]:
    """Keys and set members out of sorted order: a sorting preview would reorder them."""
    return {"zeta": 1, "alpha": {"y": 2, "b": 3}, "mid": {30, 2, 100}, "text": SPACED}


# --- item 14: previews are repr ---------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        unsorted(),
        {3, 1, 2},
        frozenset({"b", "a", "c"}),
        [{"z": 1, "a": 2}, ({"y": 0, "x": 1},)],
        SPACED,
        {},
        set(),
    ],
)
def test_a_short_preview_is_exactly_repr(value: object) -> None:
    assert preview(value) == repr(value)


def test_a_long_preview_is_cut_with_an_ellipsis_and_keeps_order() -> None:
    value = {f"key{n:03d}": n for n in range(500, 0, -1)}  # descending: sorting would show key001
    shown = preview(value)
    assert shown.startswith("{'key500': 500, 'key499': 499, ")
    assert ELLIPSIS in shown and len(shown) <= 200
    assert preview(list(range(1000)), 20) == "[0, 1, 2, 3, 4, 5, " + ELLIPSIS


def test_the_value_line_of_a_run_reads_like_out() -> None:
    """The record's ``value:`` is what ``Out[]`` shows for the cell's value (a real Monty run)."""

    def fetch() -> dict[str, object]:
        return unsorted()

    result = orchestrate("fetch()", tools=[fetch])
    assert result.value == unsorted()
    assert result.to_record()["value"] == repr(unsorted())
    assert list(result.value) == ["zeta", "alpha", "mid", "text"]


def records() -> tuple[dict[str, object], dict[str, object]]:
    """A trace record from a real run and a run record's value table, both holding `SPACED`."""

    def echo(text: str) -> str:
        return text

    trace = orchestrate(f"echo({SPACED!r})\n{{'b': echo('b  b'), 'a': 1}}", tools=[echo])
    run = {
        "version": 1,
        "kind": "sandbox",
        "name": "demo",
        "image": "jupyter-sandbox/base:bookworm",
        "status": "ok",
        "inputs": _describe({"text": SPACED}, {}, set()),
        "outputs": _describe({"mapping": unsorted()}, {}, set()),
        "duration": 0.5,
        "stdout": "",
        "stderr": "",
    }
    return trace.to_record(), run


@pytest.fixture
def browser() -> Iterator[object]:
    with playwright.sync_playwright() as p:
        instance = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield instance
        instance.close()


def test_the_html_export_keeps_spaces_and_order(browser) -> None:
    """What a browser shows of the static export (nbconvert's HTML): ``innerText`` applies the
    page's CSS, so collapsed spaces would show here."""
    trace, run = records()
    page = browser.new_page()
    page.set_content(_html.render(trace) + _html.render(run))
    assert page.locator(".jsb code").first.inner_text() == "{'b': 'b  b', 'a': 1}"
    shown = page.locator(".jsb td code").all_inner_texts()
    assert repr(SPACED) in shown and repr(unsorted()) in shown
    assert "echo('two  spaces,   three and\\ta tab')" in page.locator(".jsb-calls").inner_text()


def test_jupyterlab_renders_previews_as_repr(browser) -> None:
    """The saved records in JupyterLab (our MIME renderer, no kernel): the value line and the
    value tables show repr's spaces and order, light and dark."""
    trace, run = records()
    with tempfile.TemporaryDirectory(prefix="jupyter-sandbox-lab-") as tmp:
        root = Path(tmp) / "root"
        root.mkdir()
        nb = nbformat.v4.new_notebook()
        nb.cells = [
            nbformat.v4.new_code_cell(
                "%%orchestrate\n...",
                outputs=[nbformat.v4.new_output("display_data", data={TRACE_MIME: trace})],
            ),
            nbformat.v4.new_code_cell(
                "%%sandbox\n...",
                outputs=[nbformat.v4.new_output("display_data", data={RUN_MIME: run})],
            ),
        ]
        nbformat.write(nb, root / "previews.ipynb")
        lab = Lab(root, Path(tmp) / "home", starts_kernel=False)
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 700})
            lab.open(page, "previews.ipynb")
            page.wait_for_selector(".jsb-run .jsb-preview", timeout=60_000)
            assert page.locator(".jsb-value code").inner_text() == "{'b': 'b  b', 'a': 1}"
            shown = page.locator(".jsb-run .jsb-preview").all_inner_texts()
            assert shown == [repr(SPACED), repr(unsorted())]
            assert repr(SPACED) in page.locator(".jsb-trace .jsb-signature").first.inner_text()
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            for theme, name in (("JupyterLab Light", "light"), ("JupyterLab Dark", "dark")):
                notebook_js(
                    page,
                    "return app.commands.execute('apputils:change-theme', arg);",
                    {"theme": theme},
                )
                page.wait_for_function(
                    "(t) => document.body.dataset.jpThemeName === t", arg=theme, timeout=30_000
                )
                page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=60_000)
                page.screenshot(path=SCREENSHOTS / f"lab-previews-{name}.png")
        finally:
            lab.stop()
