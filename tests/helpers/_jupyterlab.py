"""A real JupyterLab server for browser tests: fresh root and config, token, no announcements.

Follows the recipe that held on this machine (see DESIGN.md): the app object is exposed in the
page so tests drive JupyterLab through its commands instead of racing the keyboard.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import nbformat
import pytest
from playwright.sync_api import Browser, Page

CHROMIUM = "/usr/bin/chromium"
DISABLED = {"@jupyterlab/apputils-extension:announcements": True}
KERNELSPEC = {"name": "python3", "display_name": "Python 3", "language": "python"}
"""The kernel a written notebook names, so JupyterLab starts it without asking."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Lab:
    """One `jupyter lab` process serving ``root``; ``starts_kernel=False`` opens without kernels."""

    def __init__(self, root: Path, home: Path, *, starts_kernel: bool = True) -> None:
        self.root = root
        self.token = secrets.token_hex(16)
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = home / "config"
        (config / "labconfig").mkdir(parents=True, exist_ok=True)
        (config / "labconfig" / "page_config.json").write_text(
            json.dumps({"disabledExtensions": DISABLED})
        )
        env = {
            **os.environ,
            "JUPYTER_CONFIG_DIR": str(config),
            "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
            "JUPYTERLAB_SETTINGS_DIR": str(home / "settings"),
            "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
        }
        self._log = (home / f"lab-{self.port}.log").open("w")
        self._process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jupyterlab",
                "--allow-root",
                "--no-browser",
                "--ip=127.0.0.1",
                f"--port={self.port}",
                f"--IdentityProvider.token={self.token}",
                f"--ServerApp.root_dir={root}",
                "--LabApp.expose_app_in_browser=True",
                f"--LabApp.notebook_starts_kernel={starts_kernel}",
            ],
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 90
        while True:
            try:
                self.api("status")
                break
            except OSError:
                if self._process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"jupyter lab did not start; see {self._log.name}") from None
                time.sleep(0.5)

    def api(self, path: str) -> Any:
        request = urllib.request.Request(
            f"{self.url}/api/{path}", headers={"Authorization": f"token {self.token}"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    def stop(self) -> None:
        """Stop the server (and with it every kernel it started)."""
        self._process.terminate()
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._log.close()

    def open(self, page: Page, path: str) -> None:
        """Open a notebook and wait until JupyterLab has drawn its cells.

        A stray dialog (on a loaded machine, "Error Loading Theme") is dismissed whenever it
        blocks an action, instead of failing the test on something we do not test.
        """
        page.add_locator_handler(page.locator(".jp-Dialog"), lambda: page.keyboard.press("Escape"))
        page.goto(f"{self.url}/lab/tree/{path}?reset&token={self.token}")
        page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=90_000)
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)


def notebook_js(page: Page, body: str, arg: Any = None) -> Any:
    """Evaluate ``body`` with ``panel`` bound to the current notebook panel."""
    return page.evaluate(
        f"(arg) => {{ const app = window.jupyterapp; const panel = app.shell.currentWidget; "
        f"{body} }}",
        arg,
    )


def wait_kernel_ready(page: Page) -> None:
    """The kernel is started and idle: before this, executed cells can be dropped."""
    page.wait_for_function(
        "() => { const p = window.jupyterapp.shell.currentWidget;"
        " const k = p && p.sessionContext && p.sessionContext.session"
        " && p.sessionContext.session.kernel;"
        " return p.sessionContext.isReady && k && k.status === 'idle'; }",
        timeout=120_000,
    )


def run_all(page: Page) -> None:
    """Start running every cell; returns at once (the command's promise ends with the run)."""
    notebook_js(page, "void app.commands.execute('notebook:run-all-cells');")


def wait_all_executed(page: Page, timeout_ms: int) -> None:
    page.wait_for_function(
        "() => { const p = window.jupyterapp.shell.currentWidget;"
        " return p.content.widgets.every(c => c.model.type !== 'code'"
        " || (c.model.executionCount !== null && c.promptNode.textContent.indexOf('*') < 0)); }",
        timeout=timeout_ms,
    )


def save(page: Page) -> None:
    notebook_js(page, "return app.commands.execute('docmanager:save');")
    page.wait_for_function(
        "() => !window.jupyterapp.shell.currentWidget.context.model.dirty", timeout=30_000
    )


def wait_executed(page: Page, index: int, timeout_ms: int = 120_000) -> None:
    """Cell ``index`` has run: it has a count and its prompt no longer shows ``*``."""
    page.wait_for_function(
        "(i) => { const c = window.jupyterapp.shell.currentWidget.content.widgets[i];"
        " return c && c.model.executionCount !== null"
        " && c.promptNode.textContent.indexOf('*') < 0; }",
        arg=index,
        timeout=timeout_ms,
    )


def write_notebook(path: Path, cells: Iterable[str | nbformat.NotebookNode]) -> Path:
    """Write ``cells`` (sources, or cells built with their outputs) as a notebook that names
    the python3 kernel, creating the folder; returns ``path``."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) if isinstance(c, str) else c for c in cells]
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def kernels_load_the_extension(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Kernels started from now on load jupyter_sandbox at start, as a user's IPython profile
    would, so a magic a button inserts gets the extension's answer."""
    profile = home / "ipython" / "profile_default"
    profile.mkdir(parents=True)
    (profile / "ipython_config.py").write_text(
        'c.InteractiveShellApp.extensions = ["jupyter_sandbox"]\n'
    )
    monkeypatch.setenv("IPYTHONDIR", str(home / "ipython"))


@contextmanager
def opened(
    browser: Browser,
    root: Path,
    home: Path,
    notebook: str,
    *,
    starts_kernel: bool = True,
    viewport: tuple[int, int] = (1300, 900),
) -> Iterator[tuple[Lab, Page]]:
    """A Lab serving ``root`` with ``notebook`` open in a new page (its kernel ready when it
    starts one); the server and its kernels stop when the block ends, however it ends."""
    lab = Lab(root, home, starts_kernel=starts_kernel)
    try:
        width, height = viewport
        page = browser.new_page(viewport={"width": width, "height": height})
        lab.open(page, notebook)
        if starts_kernel:
            wait_kernel_ready(page)
        yield lab, page
    finally:
        lab.stop()


def shoot_themes(page: Page, target: Any, path: Path) -> None:
    """Screenshots of ``target`` (a locator) in JupyterLab's light and dark themes, as
    ``<path>-light.png`` and ``<path>-dark.png``."""
    for theme, short in (("JupyterLab Light", "light"), ("JupyterLab Dark", "dark")):
        page.evaluate(
            "(t) => window.jupyterapp.commands.execute('apputils:change-theme', {theme: t})",
            theme,
        )
        page.wait_for_function("(t) => document.body.dataset.jpThemeName === t", arg=theme)
        page.wait_for_timeout(500)
        target.screenshot(path=path.with_name(f"{path.name}-{short}.png"))


THEMES = (("JupyterLab Light", "light"), ("JupyterLab Dark", "dark"))


def set_theme(page: Page, theme: str) -> None:
    notebook_js(
        page, "return app.commands.execute('apputils:change-theme', arg);", {"theme": theme}
    )
    page.wait_for_function(
        "(t) => document.body.dataset.jpThemeName === t", arg=theme, timeout=30_000
    )


def run_cell(page: Page, index: int) -> None:
    """Start running one cell; returns at once."""
    notebook_js(
        page,
        "panel.content.activeCellIndex = arg; void app.commands.execute('notebook:run-cell');",
        index,
    )


def wait_cell_done(page: Page, index: int) -> None:
    page.wait_for_function(
        "(i) => { const c = window.jupyterapp.shell.currentWidget.content.widgets[i];"
        " return c.model.executionCount !== null && c.promptNode !== null"
        " && c.promptNode.textContent.indexOf('*') < 0; }",  # not drawn yet (windowing): no node
        arg=index,
        timeout=300_000,
    )


CONTRAST_JS = """() => {
    const rgb = c => c.match(/[\\d.]+/g).map(Number);
    const background = n => {
        for (; n; n = n.parentElement) {
            const c = rgb(getComputedStyle(n).backgroundColor);
            if (c.length < 4 || c[3] > 0) return c.slice(0, 3);
        }
        return [255, 255, 255];
    };
    const pick = ['.jsb td', 'tr.jsb-error td', '.jsb-error > summary', '.jsb-summary',
        '.jsb-sort', '.jsb-build-current', '.jsb-muted', '.jsb-approval button',
        '.jsb-approval input', '.jsb-approval label', '.jsb-answer', '.jsb-arg-text',
        '.jsb-arg-name', '.jsb-cut', '.jsb-digest', '.jsb-signature', '.jsb-heading'].join(', ');
    return Array.from(document.querySelectorAll(pick)).filter(n => n.offsetParent).map(n => {
        const fg = rgb(getComputedStyle(n).color);
        const bg = background(n);
        const alpha = fg.length > 3 ? fg[3] : 1;  // a translucent colour drawn over its background
        const shown = fg.slice(0, 3).map((c, i) => c * alpha + bg[i] * (1 - alpha));
        return [n.className, n.closest('.jsb-error') !== null, shown, bg];
    });
}"""


def wcag_ratio(fg: list[float], bg: list[float]) -> float:
    """WCAG 2 contrast ratio of two sRGB colours (0-255 channels)."""

    def luminance(rgb: list[float]) -> float:
        linear = [
            c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4
            for c in (v / 255 for v in rgb)
        ]
        return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]

    light, dark = sorted((luminance(fg), luminance(bg)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def assert_contrast(page: Page, *, errors: bool = True) -> list[str]:
    """Text we colour (error rows and summaries, titles, headers, a paused run's buttons and
    reason field) is >= 4.5:1 on what it is drawn over, measured from the rendered colours.
    ``errors``: the page shows error text, which must be among what was measured. Returns the
    classes measured."""
    measured = page.evaluate(CONTRAST_JS)
    assert not errors or any(error for _, error, _, _ in measured)
    ratios = [(name, fg, bg, wcag_ratio(fg, bg)) for name, _, fg, bg in measured]
    assert [item for item in ratios if item[3] < 4.5] == []
    return [name for name, _, _, _ in measured]


def run_cell_waiting(page: Page, index: int) -> None:
    """Run cell ``index`` in place and wait for its reply (the prompt's new count)."""
    before = notebook_js(page, "return panel.content.widgets[arg].model.executionCount;", index)
    notebook_js(
        page,
        "panel.content.activeCellIndex = arg; void app.commands.execute('notebook:run-cell');",
        index,
    )
    page.wait_for_function(
        "([i, before]) => { const c = window.jupyterapp.shell.currentWidget.content.widgets[i];"
        " return c.model.executionCount !== before"
        " && c.promptNode.textContent.indexOf('*') < 0; }",
        arg=[index, before],
        timeout=120_000,
    )


def sources(page: Page) -> list[str]:
    return notebook_js(page, "return panel.content.widgets.map(c => c.model.sharedModel.source);")
