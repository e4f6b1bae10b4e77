"""A `%%sandbox` cell shows what a notebook cell would, end to end: a real
image built with matplotlib and pandas, a real kernel run by nbclient (what a saved notebook
keeps), the notebook's HTML export, and the saved notebook reopened in JupyterLab in Chromium
(our renderer, JupyterLab's sanitiser; screenshots light and dark in artifacts/screenshots/).
"""

from __future__ import annotations

import base64
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from _paths import SCREENSHOTS
from _served import Served, served
from nbclient import NotebookClient

from jupyter_sandbox.records import DISPLAY_MIME, RUN_MIME

pytestmark = [pytest.mark.docker]

TOKEN = "tok-7f3a9c21e5"
"""A secret the sandbox displays: shown masked, or not at all."""

CELLS = [
    # the token is put together in the kernel, so the notebook's source does not hold it
    "%load_ext jupyter_sandbox\nimport os\n"
    f'os.environ["RICH_TOKEN"] = "{TOKEN[:4]}" + "{TOKEN[4:]}"',
    """%%sandbox --packages matplotlib pandas
import matplotlib.pyplot as plt
import pandas as pd
df = pd.DataFrame({"city": ["Paris", "Oslo", "Rome"], "celsius": [11.5, 4.2, 15.8]})
fig, ax = plt.subplots(figsize=(4, 2.5))
ax.bar(df.city, df.celsius, color="tab:orange")
ax.set_title("celsius by city")
plt.show()
print("after the figure")
display(df)
df.describe()""",
    """%%sandbox --packages matplotlib pandas
import matplotlib.pyplot as plt
fig = plt.figure(figsize=(3, 2))
plt.plot([1, 3, 2])
fig""",
    """%%sandbox --secret RICH_TOKEN
import os
from IPython.display import HTML, JSON, SVG, Markdown, display
token = os.environ["RICH_TOKEN"]
display(HTML(f"<b id='tok'>token {token}</b><script>window.pwned = 1</script>"
             "<img src=x onerror='window.pwned = 2'>"))
display(Markdown("## Markdown *heading*\\n\\n[a link](javascript:window.pwned=3)"))
display(SVG('<svg xmlns="http://www.w3.org/2000/svg" width="120" height="40">'
            '<script>window.pwned = 4</script><rect width="120" height="40" fill="teal"/></svg>'))
JSON({"answer": 42})""",
    "%%sandbox\nprint(42)",
]


@pytest.fixture(scope="module")
def notebook(docker_engine: Any) -> nbformat.NotebookNode:
    """The cells run by nbclient in a real kernel (the image is built once if missing)."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in CELLS]
    NotebookClient(nb, timeout=900, kernel_name="python3").execute()
    return nb


def displays(cell: Any) -> list[dict[str, Any]]:
    return [o.data for o in cell.outputs if DISPLAY_MIME in o.get("data", {})]


def test_figures_and_tables_are_saved_in_order_after_the_record(notebook) -> None:
    cell = notebook.cells[1]
    kinds = [
        "record" if RUN_MIME in o.get("data", {}) else
        "display" if DISPLAY_MIME in o.get("data", {}) else
        o.output_type
        for o in cell.outputs
    ]  # fmt: skip
    # the live record first (shown as the run starts), its output, then what it displayed
    assert kinds == ["record", "stream", "display", "display", "display"], kinds
    figure, table, summary = displays(cell)
    assert base64.b64decode(figure["image/png"]).startswith(b"\x89PNG")
    assert figure["text/plain"].startswith("<Figure size 400x250")
    assert "<table" in table["text/html"] and "Oslo" in table["text/html"]
    assert "<style" not in table["text/html"]  # sanitised fallback
    assert "mean" in summary["text/plain"]  # the last expression, as Out[n]
    assert "after the figure" in "".join(o.get("text", "") for o in cell.outputs)


def test_a_figure_as_the_last_expression_shows_once(notebook) -> None:
    (figure,) = displays(notebook.cells[2])
    assert base64.b64decode(figure["image/png"]).startswith(b"\x89PNG")


def test_untrusted_markup_and_a_secret_are_made_safe(notebook) -> None:
    from _display_samples import RUNS_CODE, attribute_values

    html, markdown, svg, value = displays(notebook.cells[3])
    saved = nbformat.writes(notebook)
    assert TOKEN not in saved
    assert "token ***" in html["text/html"]
    for shown in (html["text/html"], markdown["text/html"]):
        assert "<script" not in shown and "onerror" not in shown
        assert not [v for v in attribute_values(shown) if v.startswith(RUNS_CODE)]
    assert "image/svg+xml" not in svg  # only as an <img> of it
    assert svg["text/html"].startswith('<img alt="SVG image" src="data:image/svg+xml;base64,')
    assert value[DISPLAY_MIME]["data"]["application/json"] == {"answer": 42}
    assert value["text/plain"] == '{\n  "answer": 42\n}'  # JupyterLab's viewer would win


def test_a_plain_cell_shows_no_display(notebook) -> None:
    assert displays(notebook.cells[4]) == []


def test_the_html_export_shows_them_and_runs_nothing(notebook, tmp_home: Path, browser) -> None:
    from nbconvert import HTMLExporter

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for theme in ("light", "dark"):
        html, _ = HTMLExporter(theme=theme).from_notebook_node(notebook)
        assert TOKEN not in html
        path = tmp_home / f"rich-{theme}.html"
        path.write_text(html)
        page = browser.new_page(viewport={"width": 1100, "height": 900})
        page.goto(path.as_uri())
        page.wait_for_load_state("load")
        assert page.evaluate("() => window.pwned") is None
        pngs = page.locator("img[src^='data:image/png;base64,']")
        assert pngs.count() == 2
        assert page.locator("table:has-text('Oslo')").count() >= 1
        assert page.locator("img[src^='data:image/svg+xml;base64,']").count() == 1
        page.screenshot(path=SCREENSHOTS / f"export-sandbox-displays-{theme}.png", full_page=True)
        page.close()


@pytest.mark.browser
def test_jupyterlab_draws_them_saved_with_its_sanitiser(notebook, tmp_home: Path, browser):
    from _jupyterlab import Lab, notebook_js

    root = tmp_home / "root"
    root.mkdir()
    nbformat.write(notebook, root / "rich.ipynb")
    lab = Lab(root, tmp_home / "home", starts_kernel=False)
    page = browser.new_page(viewport={"width": 1200, "height": 2800})  # every cell drawn
    try:
        lab.open(page, "rich.ipynb")
        page.wait_for_selector(".jsb-display img.jsb-display-image", timeout=60_000)
        page.wait_for_selector(".jsb-display table", timeout=60_000)
        # JupyterLab draws the cells' outputs one by one: wait for all of them, then count
        page.wait_for_function(
            "() => document.querySelectorAll('.jsb-display').length >= 8", timeout=60_000
        )
        shown = page.locator(".jsb-display")
        assert shown.count() == 8  # 3 + 1 + 4 displays, none from the plain cell
        assert page.locator(".jsb-display script").count() == 0
        assert page.locator(".jsb-display [onerror]").count() == 0
        assert page.locator(".jsb-display a[href*='javascript' i]").count() == 0
        assert page.evaluate("() => window.pwned") is None
        assert "token ***" in page.locator(".jsb-display #tok, .jsb-display b").first.inner_text()
        assert page.locator(".jsb-display h2:has-text('Markdown')").count() == 1
        for theme, name in (("JupyterLab Light", "light"), ("JupyterLab Dark", "dark")):
            notebook_js(
                page, "return app.commands.execute('apputils:change-theme', arg);", {"theme": theme}
            )
            page.wait_for_function(
                "(t) => document.body.dataset.jpThemeName === t", arg=theme, timeout=30_000
            )
            page.screenshot(path=SCREENSHOTS / f"lab-sandbox-displays-{name}.png", full_page=True)
        assert page.evaluate("() => window.pwned") is None
    finally:
        page.close()
        lab.stop()


FIGURE_FRAME = """(img) => {
  const style = getComputedStyle(img);
  const above = img.closest('.jp-OutputArea-child').previousElementSibling;
  const ink = style.backgroundColor.match(/[0-9.]+/g).map(Number);
  return {
    gap: img.getBoundingClientRect().top - above.getBoundingClientRect().bottom,
    radius: parseFloat(style.borderTopLeftRadius),
    light: ink.length === 3 || ink[3] > 0 ? (ink[0] + ink[1] + ink[2]) / 3 : 0,
  };
}"""
"""Where a figure sits and on what: its gap below the output above it (the record's build
line), its corners, and how light its ground is (0 for a transparent one)."""


@pytest.mark.browser
def test_a_figure_stands_off_the_line_above_and_on_a_light_ground_when_dark(
    notebook, tmp_home: Path, browser
) -> None:
    """A matplotlib figure a sandbox displayed is set off from its record's build line, and
    in the dark theme sits on a light ground with rounded corners (a transparent PNG stays
    readable, a white one is not a bare block), as JupyterLab does for its own figures."""
    from _jupyterlab import Lab, notebook_js

    root = tmp_home / "root"
    root.mkdir()
    nbformat.write(notebook, root / "figure.ipynb")
    lab = Lab(root, tmp_home / "home", starts_kernel=False)
    page = browser.new_page(viewport={"width": 1000, "height": 1400})
    try:
        lab.open(page, "figure.ipynb")
        figure = page.locator(".jsb-display img.jsb-display-image").first
        figure.wait_for(timeout=60_000)
        frames = {}
        for theme, name in (("JupyterLab Light", "light"), ("JupyterLab Dark", "dark")):
            notebook_js(
                page, "return app.commands.execute('apputils:change-theme', arg);", {"theme": theme}
            )
            page.wait_for_function(
                "(t) => document.body.dataset.jpThemeName === t", arg=theme, timeout=30_000
            )
            page.wait_for_function(  # the theme's stylesheet applied
                "(l) => document.body.dataset.jpThemeLight === l", arg=str(name == "light").lower()
            )
            frames[name] = figure.evaluate(FIGURE_FRAME)
            box = figure.bounding_box()
            clip = {
                "x": 0,
                "y": max(box["y"] - 80, 0),
                "width": 1000,
                "height": box["height"] + 100,
            }
            page.screenshot(path=SCREENSHOTS / f"lab-sandbox-figure-{name}.png", clip=clip)
        for name, frame in frames.items():
            assert frame["gap"] >= 6, (name, frame)  # not flush against the build line
        dark = frames["dark"]
        assert dark["light"] > 200 and dark["radius"] > 0, dark
    finally:
        page.close()
        lab.stop()


@pytest.mark.browser
def test_jupyterlab_shows_them_live(notebook, tmp_home: Path, browser) -> None:
    """The same cells typed into a live JupyterLab and run there: the figure and the table
    appear in the running notebook (after the build the module fixture did, if needed)."""
    from _jupyterlab import Lab, run_all, wait_all_executed, wait_kernel_ready

    root = tmp_home / "live"
    root.mkdir()
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in CELLS[:2]]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, root / "live.ipynb")
    lab = Lab(root, tmp_home / "home-live")
    page = browser.new_page(viewport={"width": 1200, "height": 1600})
    try:
        lab.open(page, "live.ipynb")
        wait_kernel_ready(page)
        run_all(page)
        wait_all_executed(page, timeout_ms=600_000)
        page.wait_for_selector(".jsb-display img.jsb-display-image", timeout=60_000)
        assert page.locator(".jsb-display table:has-text('Oslo')").count() == 1
        assert page.locator(".jsb-display table:has-text('mean')").count() == 1
        page.screenshot(path=SCREENSHOTS / "lab-sandbox-displays-live.png", full_page=True)
    finally:
        page.close()
        lab.stop()


def test_a_run_shows_at_most_so_many_displays(docker_engine: Any) -> None:
    from jupyter_sandbox import create
    from jupyter_sandbox._shared import _defaults

    cap = _defaults.DISPLAYS_CEILING
    run = create("many", code=f"for i in range({cap + 50}):\n    display(i)").execute({})
    assert len(run.displays) == cap + 1, (run.exit_code, run.stderr[-500:], run.displays[-3:])
    assert [d["text/plain"] for d in run.displays[:cap]] == [str(i) for i in range(cap)]
    assert run.displays[cap:] == [
        {"text/plain": f"50 displays not shown: a run shows at most {cap} displays"}
    ]


def test_a_cached_run_shows_its_displays_again(docker_engine: Any) -> None:
    import uuid

    from jupyter_sandbox import create

    sandbox = create("cached", code=f"# {uuid.uuid4()}\n20 + 22", cache="auto")
    first, again = sandbox.execute({}), sandbox.execute({})
    assert (first.cached, again.cached) == (False, True)
    assert first.displays == again.displays == [{"text/plain": "42"}]


# -- hostile displays: a sandbox without network tries to get its data out through what it
# -- displays, to run a link in the export, and to pass for the notebook


@pytest.fixture(scope="module")
def site() -> Iterator[Served]:
    """A loopback server the hostile displays point at (and the export is served from): every
    request it sees is a display that loaded something."""
    with (
        tempfile.TemporaryDirectory(prefix="jupyter-sandbox-site-") as folder,
        served(Path(folder)) as record,
    ):
        yield record


def _hostile_cells(url: str) -> list[str]:
    """What a sandbox's code displays: each of `LOADERS` (as HTML, the Markdown image as
    Markdown) and all of them again in one Markdown display, each fetching ``url/<name>`` with
    a secret in the query; the links that run code; a fake approval panel."""
    from _display_samples import HOVER_BOX, LOADERS, SCRIPT_LINKS

    return [
        "%load_ext jupyter_sandbox",
        f"""%%sandbox --network none
import base64
from IPython.display import HTML, Markdown, display
secret = base64.urlsafe_b64encode(b"what only the sandbox knows").decode()
for name, markup in {LOADERS!r}.items():
    shown = markup.format(u=f"{url}/{{name}}?d={{secret}}")
    display(Markdown(shown) if name.startswith("markdown") else HTML(shown))
display(Markdown("\\n\\n".join(
    m.format(u=f"{url}/markdown-{{n}}?d={{secret}}") for n, m in {LOADERS!r}.items())))""",
        f"""%%sandbox
from IPython.display import Markdown, display
for link in {SCRIPT_LINKS!r}:
    display(Markdown(link))""",
        f"%%sandbox\nfrom IPython.display import HTML\nHTML({HOVER_BOX!r})",
    ]


@pytest.fixture(scope="module")
def hostile(site: Served, docker_engine: Any) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in _hostile_cells(site.url)]
    NotebookClient(nb, timeout=600, kernel_name="python3").execute()
    return nb


def _drawn(page: Any, site: Served, ignored: tuple[str, ...] = ()) -> list[str]:
    """What the page asked ``site`` for (but ``ignored`` paths) since the test cleared
    ``site.paths``, once it has drawn everything: the network idle, then a request of the
    test's own answered (the displays' requests were made before it)."""
    page.wait_for_load_state("networkidle")
    page.evaluate("(u) => fetch(u, {mode: 'no-cors'}).then(() => true)", f"{site.url}/drawn")
    return [p for p in site.paths if p.split("?")[0] not in (*ignored, "/drawn")]


def _export(notebook: nbformat.NotebookNode) -> str:
    from nbconvert import HTMLExporter

    html, _ = HTMLExporter().from_notebook_node(notebook)
    return str(html)


def test_the_html_export_of_a_display_loads_nothing(hostile, site: Served, browser) -> None:
    from _display_samples import attribute_values

    html = _export(hostile)
    assert [v for v in attribute_values(html) if site.url in v] == []
    (site.folder / "hostile.html").write_text(html)
    page = browser.new_page()
    # the template's own scripts (from a CDN) stay off the network: only loopback is reached
    page.route(
        "**/*",
        lambda route: (
            route.continue_()
            if route.request.url.startswith("http://127.0.0.1:")
            else route.abort()
        ),
    )
    site.paths.clear()
    try:
        page.goto(f"{site.url}/hostile.html")
        assert _drawn(page, site, ignored=("/hostile.html",)) == []
    finally:
        page.close()


def test_no_link_in_the_html_export_runs_code(hostile) -> None:
    from _display_samples import RUNS_CODE, SCRIPT_LINKS, attribute_values

    links = [o for o in hostile.cells[2].outputs if DISPLAY_MIME in o.get("data", {})]
    assert len(links) == len(SCRIPT_LINKS)
    found = attribute_values(_export(hostile))
    assert [v for v in found if v.startswith(RUNS_CODE) and not v.startswith("data:image/")] == []


@pytest.mark.browser
def test_jupyterlab_draws_a_display_that_loads_nothing(hostile, site: Served, tmp_home, browser):
    """The saved notebook opened (untrusted, no kernel): our renderer, not the kernel's
    fallbacks, draws each display, so it is the renderer that must load nothing."""
    from _display_samples import LOADERS
    from _jupyterlab import opened

    root = tmp_home / "root"
    root.mkdir()
    nbformat.write(hostile, root / "hostile.ipynb")
    site.paths.clear()
    with opened(browser, root, tmp_home / "home", "hostile.ipynb", starts_kernel=False) as (
        _,
        page,
    ):
        shown = page.locator(".jp-Notebook .jp-Cell").nth(1).locator(".jsb-display")
        page.wait_for_function(
            "(n) => { const c = document.querySelectorAll('.jp-Notebook .jp-Cell')[1];"
            " return !!c && c.querySelectorAll('.jsb-display').length === n; }",
            arg=len(LOADERS) + 1,
            timeout=60_000,
        )
        assert shown.count() == len(LOADERS) + 1
        assert _drawn(page, site) == []


@pytest.mark.browser
def test_a_display_stays_inside_its_output_area(hostile, tmp_home: Path, browser) -> None:
    """A fake approval panel (JupyterLab's ``jp-HoverBox``, ``position: fixed``, a large
    ``z-index``) stays in its own output, in both themes: the cell above it is not covered."""
    from _jupyterlab import notebook_js, opened

    root = tmp_home / "root"
    root.mkdir()
    nbformat.write(hostile, root / "hostile.ipynb")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with opened(browser, root, tmp_home / "home", "hostile.ipynb", starts_kernel=False) as (
        _,
        page,
    ):
        panel = page.locator(".jsb-display div:has(> b:text('Approve this run?'))")
        panel.wait_for(timeout=60_000)
        for theme, name in (("JupyterLab Light", "light"), ("JupyterLab Dark", "dark")):
            notebook_js(
                page, "return app.commands.execute('apputils:change-theme', arg);", {"theme": theme}
            )
            page.wait_for_function(
                "(t) => document.body.dataset.jpThemeName === t", arg=theme, timeout=30_000
            )
            panel.scroll_into_view_if_needed()
            placed = panel.evaluate(
                """(e) => {
                  const box = e.getBoundingClientRect();
                  const area = e.closest('.jp-OutputArea-output').getBoundingClientRect();
                  const covered = (place) => {
                    const r = place.getBoundingClientRect();
                    const at = document.elementFromPoint(r.x + r.width / 2, r.y + r.height / 2);
                    return !!(at && at.closest('.jsb-display'));
                  };
                  const input = e.closest('.jp-Cell').querySelector('.jp-InputArea-editor');
                  const toolbar = document.querySelector('.jp-NotebookPanel-toolbar');
                  const style = getComputedStyle(e);
                  return {
                    inside: box.left >= area.left - 0.5 && box.right <= area.right + 0.5
                      && box.top >= area.top - 0.5 && box.bottom <= area.bottom + 0.5,
                    covers: covered(input) || covered(toolbar),
                    position: style.position,
                    zIndex: style.zIndex,
                    classes: e.className
                  };
                }"""
            )
            page.screenshot(path=SCREENSHOTS / f"lab-sandbox-display-contained-{name}.png")
            assert placed == {
                "inside": True,
                "covers": False,
                "position": "static",
                "zIndex": "auto",
                "classes": "",
            }
