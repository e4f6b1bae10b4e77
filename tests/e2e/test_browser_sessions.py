"""Sandbox session cells run in JupyterLab in Chromium (a real kernel, a real session
container, our renderer), light and dark: each cell's record says which session ran it and its
cell count, live and once the saved notebook is reopened without a kernel; a later cell sees an
earlier cell's variable. Screenshots go to artifacts/screenshots/session-*.png."""

from __future__ import annotations

from pathlib import Path

import pytest
from _jupyterlab import opened, run_all, save, shoot_themes, wait_all_executed, write_notebook
from _paths import SCREENSHOTS

pytestmark = [pytest.mark.browser, pytest.mark.docker]


CELLS = [
    "%load_ext jupyter_sandbox",
    "%%sandbox --session explore\nrows = [n * n for n in range(10)]\nprint(len(rows), 'rows')",
    "%%sandbox --session explore\nsum(rows)",
    "%sandbox_stop explore",
]


def check(page) -> None:
    """What the two session cells show, live or saved."""
    first = page.locator(".jp-Cell").nth(1).locator(".jp-OutputArea")
    second = page.locator(".jp-Cell").nth(2).locator(".jp-OutputArea")
    first.locator(".jsb-run .jsb-summary").wait_for(timeout=60_000)
    second.locator(".jsb-run .jsb-summary").wait_for(timeout=60_000)
    assert first.locator(".jsb-summary").inner_text().startswith("session explore · cell 1 ok")
    assert second.locator(".jsb-summary").inner_text().startswith("session explore · cell 2 ok")
    assert "10 rows" in first.inner_text()
    assert "285" in second.inner_text()  # the first cell's rows, summed in the second


def shoot(page, name: str) -> None:
    shoot_themes(page, page.locator(".jp-Cell").nth(2), SCREENSHOTS / f"session-{name}")


def test_session_cells_say_their_session_and_count_in_jupyterlab(tmp_home: Path, browser) -> None:
    root, home = tmp_home / "root", tmp_home / "home"
    write_notebook(root / "session.ipynb", CELLS)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with opened(browser, root, home, "session.ipynb") as (_, page):
        run_all(page)
        wait_all_executed(page, 180_000)
        check(page)
        shoot(page, "live")
        save(page)
    with opened(browser, root, home / "again", "session.ipynb", starts_kernel=False) as (_, page):
        check(page)
        shoot(page, "saved")
