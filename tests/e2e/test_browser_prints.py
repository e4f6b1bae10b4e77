"""A cell that prints between its tool calls, run in JupyterLab in Chromium (a real kernel,
our renderer), light and dark: the trace's header comes first, each print is shown above the
call it came before, in words (no line numbers, no row about the output after the last call),
and the cell's output follows the trace in the order it was printed; the same once the saved
notebook is reopened without a kernel. Screenshots go to artifacts/screenshots/prints-*.png."""

from __future__ import annotations

from pathlib import Path

import pytest
from _jupyterlab import opened, run_all, save, shoot_themes, wait_all_executed, write_notebook
from _paths import SCREENSHOTS

pytestmark = pytest.mark.browser


CELLS = [
    """%load_ext jupyter_sandbox
from jupyter_sandbox import tool

@tool
def add(x: int, y: int) -> int:
    return x + y""",
    """%%orchestrate
print("loading 3 files")
for name in ("a.csv", "b.csv", "c.csv"):
    print(f"read {name}")
total = add(1, 2)
print("between the calls")
add(total, 4)
print("all done")""",
]

OUTPUTS_JS = """area => Array.from(area.querySelectorAll('.jp-OutputArea-output')).map(o =>
    o.querySelector('.jsb-trace') ? 'trace' : o.textContent)"""


def check(page) -> None:
    """What the printing cell shows, live or saved."""
    area = page.locator(".jp-Cell").nth(1).locator(".jp-OutputArea")
    area.locator(".jsb-trace .jsb-calls").wait_for(timeout=60_000)
    outputs = area.evaluate(OUTPUTS_JS)
    assert outputs[0] == "trace", outputs  # the header first, then what was printed
    printed = "".join(outputs[1:])
    assert (
        printed
        == "loading 3 files\nread a.csv\nread b.csv\nread c.csv\nbetween the calls\nall done\n"
    )
    text = area.locator(".jsb-trace").inner_text()
    order = [
        "orchestrate ok",
        "printed: loading 3 files",
        "read a.csv",
        "2 more lines",
        "add(1, 2)",
    ]
    order += ["printed: between the calls", "add(3, 4)"]
    cursor = 0
    for words in order:  # each after the one before
        cursor = text.find(words, cursor)
        assert cursor >= 0, (words, text)
    assert "output line" not in text and "after the last call" not in text
    assert "all done" not in text  # after the last call: the output right below says it
    rows = area.locator(".jsb-mark")
    assert rows.count() == 2
    first = rows.first.bounding_box()
    assert first["height"] > 2.5 * rows.nth(1).bounding_box()["height"]  # three lines, not one


def shoot(page, name: str) -> None:
    shoot_themes(page, page.locator(".jp-Cell").nth(1), SCREENSHOTS / f"prints-{name}")


def test_a_printing_cell_reads_in_time_order_in_jupyterlab(tmp_home: Path, browser) -> None:
    root, home = tmp_home / "root", tmp_home / "home"
    write_notebook(root / "prints.ipynb", CELLS)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with opened(browser, root, home, "prints.ipynb") as (_, page):
        run_all(page)
        wait_all_executed(page, 120_000)
        check(page)
        shoot(page, "live")
        save(page)
    with opened(browser, root, home / "again", "prints.ipynb", starts_kernel=False) as (_, page):
        check(page)
        shoot(page, "saved")
