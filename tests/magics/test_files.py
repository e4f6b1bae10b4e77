"""A ``%%sandbox`` cell's `File`/`Dir` outputs as files a person can open:
linked into ``sandbox-outputs/`` beside the notebook, drawn as a link with the name and size.

The linking step alone on the host first (outputs are untrusted: links, special files, sizes,
a ``sandbox-outputs`` that is not ours), then real runs: the magic in a real shell and in a
real kernel, the link followed in a real JupyterLab in Chromium (screenshots light and dark
in artifacts/screenshots/), and an nbconvert HTML export's download link.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Any

import nbformat
import pytest
from _paths import SCREENSHOTS

from jupyter_sandbox import Dir, File
from jupyter_sandbox.magics._files import FOLDER, link_outputs
from jupyter_sandbox.records import RUN_MIME

PNG = b"\x89PNG\r\n\x1a\n" + bytes(40)


@pytest.fixture
def made(tmp_path: Path) -> Path:
    """Where a run's outputs came back (the temp folder `collect_outputs` keeps)."""
    folder = tmp_path / "out"
    folder.mkdir()
    return folder


@pytest.fixture
def nb_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "notebooks"
    folder.mkdir()
    return folder


def test_a_file_is_copied_into_a_private_folder_named_for_its_content(made, nb_dir):
    (made / "report").write_text("hello\n")
    (made / "chart").write_bytes(PNG)
    outputs = {"report": File(made / "report"), "chart": File(made / "chart"), "n": 3}
    links = link_outputs(outputs, root=nb_dir, cell=7, limit=2**20)
    assert set(links) == {"report", "chart"}  # only File/Dir
    report, chart = links["report"], links["chart"]
    assert not isinstance(report, str) and not isinstance(chart, str)
    assert report["name"] == "report.txt" and report["size"] == 6 and report["kind"] == "file"
    assert chart["name"] == "chart.png"
    assert report["path"].startswith(f"{FOLDER}/cell7-")
    linked = nb_dir / report["path"]
    assert linked.read_text() == "hello\n"
    linked.write_text("edited in JupyterLab")  # Jupyter saves in place: a copy of its own
    assert (made / "report").read_text() == "hello\n"  # the run's File (and a cache) unchanged
    assert stat.S_IMODE((nb_dir / FOLDER).stat().st_mode) == 0o700
    assert stat.S_IMODE(linked.parent.stat().st_mode) == 0o700


def test_without_copy_file_range_it_is_copied_all_the_same(made, nb_dir, monkeypatch):
    (made / "data").write_bytes(b"\x00\xff" * 10)

    def cross_device(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")  # older kernels, across mounts

    monkeypatch.setattr(os, "copy_file_range", cross_device)
    link = link_outputs({"data": File(made / "data")}, root=nb_dir, cell=1, limit=2**20)["data"]
    assert not isinstance(link, str)
    assert link["name"] == "data"  # binary: no extension guessed
    assert (nb_dir / link["path"]).read_bytes() == b"\x00\xff" * 10


def test_two_runs_of_the_same_name_keep_both_and_no_user_file_is_touched(made, nb_dir):
    (nb_dir / FOLDER).mkdir()
    mine = nb_dir / FOLDER / "report.txt"
    mine.write_text("my own notes")
    paths = []
    for text in ("first", "second"):
        (made / "report").unlink(missing_ok=True)
        (made / "report").write_text(text)
        link = link_outputs({"report": File(made / "report")}, root=nb_dir, cell=3, limit=100)
        assert not isinstance(link["report"], str)
        paths.append(link["report"]["path"])
        os.unlink(made / "report")  # the next run's output is a new file
    assert paths[0] != paths[1]
    assert [(nb_dir / p).read_text() for p in paths] == ["first", "second"]
    assert mine.read_text() == "my own notes"


def test_over_the_limit_it_stays_where_it_is_with_a_one_line_note(made, nb_dir):
    big = made / "big"
    with big.open("wb") as file:
        file.truncate(200 * 2**20)  # sparse: 200 MiB apparent
    (made / "small").write_text("ok")
    outputs = {"big": File(big), "small": File(made / "small")}
    links = link_outputs(outputs, root=nb_dir, cell=2, limit=100 * 2**20)
    note = links["big"]
    assert isinstance(note, str) and "\n" not in note
    assert "200.0 MB" in note and "100.0 MB" in note and "link_limit" in note and str(big) in note
    assert not isinstance(links["small"], str)  # the next one still fits
    assert not list((nb_dir / FOLDER).rglob("big*"))
    assert link_outputs(outputs, root=nb_dir, cell=3, limit=0) == {}  # 0: link nothing


def test_a_sandbox_outputs_link_is_never_written_through(made, nb_dir, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (nb_dir / FOLDER).symlink_to(elsewhere)
    (made / "report").write_text("x")
    note = link_outputs({"report": File(made / "report")}, root=nb_dir, cell=1, limit=100)
    assert isinstance(note["report"], str) and "not a folder of this user" in note["report"]
    assert list(elsewhere.iterdir()) == []


def test_a_dir_keeps_its_inner_links_and_refuses_special_files(made, nb_dir):
    tree = made / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "a.txt").write_text("a")
    (tree / "to-a").symlink_to("sub/a.txt")
    link = link_outputs({"tree": Dir(tree)}, root=nb_dir, cell=4, limit=100)["tree"]
    assert not isinstance(link, str)
    assert link["kind"] == "dir" and link["size"] == 1 and link["name"] == "tree"
    copied = nb_dir / link["path"]
    assert os.readlink(copied / "to-a") == "sub/a.txt"
    assert (copied / "to-a").read_text() == "a"
    os.mkfifo(tree / "pipe")
    note = link_outputs({"tree": Dir(tree)}, root=nb_dir, cell=5, limit=100)["tree"]
    assert isinstance(note, str) and "'pipe'" in note and "not a file, folder or link" in note


def test_a_file_output_that_is_a_link_is_refused(made, nb_dir, tmp_path):
    (tmp_path / "secret").write_text("host file")
    (made / "report").symlink_to(tmp_path / "secret")
    note = link_outputs({"report": File(made / "report")}, root=nb_dir, cell=1, limit=100)
    assert isinstance(note["report"], str) and "not a regular file" in note["report"]
    assert not list((nb_dir / FOLDER).rglob("report*"))


def _record(link: dict[str, Any]) -> dict[str, Any]:
    return {
        "version": 1,
        "kind": "sandbox",
        "name": "sandbox",
        "image": "i",
        "status": "ok",
        "error": None,
        "duration": 0.5,
        "exit_code": 0,
        "attempts": 1,
        "cached": False,
        "build": None,
        "stdout": "",
        "stderr": "",
        "inputs": {},
        "outputs": {"report": {"type": "file", "preview": link["path"], "link": link}},
    }


def test_the_fallbacks_link_relatively_and_a_crafted_path_stays_relative():
    from jupyter_sandbox.display import bundle

    link = {"path": "sandbox-outputs/cell2-ab/report.txt", "name": "report.txt", "size": 2048}
    shown = bundle(_record({**link, "kind": "file"}))
    html, text = shown["text/html"], shown["text/plain"]
    assert '<a class="jsb-file" href="sandbox-outputs/cell2-ab/report.txt"' in html
    assert 'download="report.txt"' in html and "2.0 KB" in html
    assert "report.txt (2.0 KB) at sandbox-outputs/cell2-ab/report.txt" in text
    crafted = bundle(
        _record({**link, "path": "javascript:alert(1)", "name": "<b>x</b>", "size": "big"})
    )
    assert 'href="javascript%3Aalert%281%29"' in crafted["text/html"]
    assert "<b>x</b>" not in crafted["text/html"]


# ---- real runs ----------------------------------------------------------------------------

CHART = (
    "iVBORw0KGgoAAAANSUhEUgAAADAAAAAYCAIAAAAzn+mLAAAALElEQVR42u3OAQkAAAgDsCcxpxGNZQ3BwQIs1XNKhI"
    "SEhISEhISEhISEfoUWl8gnWxiqodsAAAAASUVORK5CYII="
)
"""A real 48x24 PNG (a blue band), so JupyterLab's image viewer has something to draw."""
WRITE = f"""%%sandbox --out report:File --out chart:File --out tree:Dir
CHART = "{CHART}"
import os
open("/var/outputs/report", "w").write("total: 42\\n")
import base64
open("/var/outputs/chart", "wb").write(base64.b64decode(CHART))
os.makedirs("/var/outputs/tree/sub")
open("/var/outputs/tree/sub/a.txt", "w").write("a")
os.symlink("sub/a.txt", "/var/outputs/tree/to-a")"""


@pytest.mark.docker
def test_the_magic_links_them_and_the_python_api_does_not(shell, docker_engine, capsys):
    from jupyter_sandbox import create

    assert shell.run_cell(WRITE).success
    linked = sorted(p.as_posix() for p in Path(FOLDER).rglob("*"))
    assert any(p.endswith("/report.txt") for p in linked)
    assert any(p.endswith("/chart.png") for p in linked)
    assert any(p.endswith("/tree/to-a") for p in linked)
    out = capsys.readouterr().out
    assert "report.txt (10 B) at sandbox-outputs/cell" in out
    # twice the same names: a second folder, the first untouched
    assert shell.run_cell(WRITE).success
    assert len(list(Path(FOLDER).iterdir())) == 2
    before = set(Path(FOLDER).iterdir())
    run = create("api", code="open('/var/outputs/f', 'w').write('x')", outputs={"f": File}).run()
    assert isinstance(run, File) and set(Path(FOLDER).iterdir()) == before


@pytest.mark.docker
def test_the_variable_is_the_file_the_link_opens(shell, docker_engine, capsys):
    """Reading the ``--out`` variable and opening the record's link agree, an edit saved in
    JupyterLab (the link's copy, written in place) included; a ``--cache`` replay's file is
    not written through by that edit, and its variable is the new run's own copy."""
    cell = "%%sandbox --cache --out report:File --out tree:Dir\n"
    cell += "import os\nopen('/var/outputs/report', 'w').write('total: 42\\n')\n"
    cell += "os.makedirs('/var/outputs/tree')\nopen('/var/outputs/tree/a.txt', 'w').write('a')"
    assert shell.run_cell(cell).success
    out = capsys.readouterr().out
    report, tree = shell.user_ns["report"], shell.user_ns["tree"]
    assert isinstance(report, File) and isinstance(tree, Dir)
    opened = report.path.relative_to(Path.cwd()).as_posix()
    assert opened.startswith(f"{FOLDER}/cell") and opened.endswith("/report.txt")
    assert f"report.txt (10 B) at {opened}" in out  # the record's link is the variable's file
    assert (tree.path / "a.txt").read_text() == "a" and FOLDER in tree.path.parts
    report.path.write_text("edited in JupyterLab\n")  # the contents API saves in place
    assert report.read_text() == "edited in JupyterLab\n"
    assert shell.run_cell(cell).success  # replayed from the cache: the run's file, unedited
    again = shell.user_ns["report"]
    assert again.path != report.path and FOLDER in again.path.parts
    assert again.read_text() == "total: 42\n"
    assert "result cached" in capsys.readouterr().out


@pytest.mark.docker
def test_a_huge_file_stays_with_a_note_and_bad_names_are_refused(shell, docker_engine, capsys):
    shell.run_line_magic("config", "SandboxMagics.link_limit = '1m'")
    try:
        cell = "%%sandbox --out big:File\nopen('/var/outputs/big', 'wb').truncate(2 * 2**20)"
        assert shell.run_cell(cell).success
        out = capsys.readouterr().out
        assert "big is 2.0 MB, over the 1.0 MB a run links beside the notebook" in out
        assert os.path.getsize(shell.user_ns["big"]) == 2 * 2**20
        assert not list(Path(FOLDER).rglob("big*"))
    finally:
        shell.run_line_magic("config", "SandboxMagics.link_limit = '100m'")
    # the file's name is the --out variable's, never the container's: no '../' can be one
    assert not shell.run_cell("%%sandbox --out ../x:File\npass").success
    assert "--out ../x: not a valid Python variable name" in capsys.readouterr().err
    # a link out of a Dir output never comes back at all (the outputs' own check)
    escape = "%%sandbox --out tree:Dir\nimport os\nos.makedirs('/var/outputs/tree')\n"
    escape += "os.symlink('../../etc/passwd', '/var/outputs/tree/pw')"
    assert not shell.run_cell(escape).success
    assert "leads out of the output" in capsys.readouterr().out
    assert not Path(FOLDER).exists() or list(Path(FOLDER).rglob("*")) == []


def _link_rows(ran: Any) -> dict[str, Any]:
    (record,) = ran.records(RUN_MIME)[-1:]
    return {name: row["link"] for name, row in record["outputs"].items() if "link" in row}


@pytest.mark.docker
def test_in_a_real_kernel_the_link_is_beside_the_notebook(tmp_path, docker_engine):
    from _kernels import kernel

    with kernel(tmp_path / "store.json") as k:
        k.ok(f"%cd {tmp_path}")
        links = _link_rows(k.ok(WRITE, timeout=300))
    assert links["report"]["name"] == "report.txt" and links["report"]["size"] == 10
    assert (tmp_path / links["report"]["path"]).read_text() == "total: 42\n"
    assert links["tree"]["kind"] == "dir"


@pytest.fixture(scope="module")
def saved(tmp_path_factory, docker_engine) -> Path:
    """A notebook run by nbclient in a real kernel in its own folder, saved there."""
    from nbclient import NotebookClient

    root = tmp_path_factory.mktemp("files-nb")
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext jupyter_sandbox"),
        *[nbformat.v4.new_code_cell(WRITE)],
    ]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": root}}
    ).execute()
    nbformat.write(nb, root / "files.ipynb")
    return root


@pytest.mark.docker
def test_the_html_export_links_the_file_for_download(saved, browser):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    from _served import served

    with served(saved) as site:  # as a site serves an export
        for theme in ("light", "dark"):
            _check_export(saved, site.url, theme, browser)


def _check_export(saved: Path, url: str, theme: str, browser: Any) -> None:
    from nbconvert import HTMLExporter

    html, _ = HTMLExporter(theme=theme).from_filename(str(saved / "files.ipynb"))
    path = saved / f"files-{theme}.html"  # beside the notebook, as nbconvert writes it
    path.write_text(html)
    page = browser.new_page(viewport={"width": 1000, "height": 700})
    page.goto(f"{url}/{path.name}")
    link = page.locator("a.jsb-file[download='report.txt']")
    assert link.count() == 1
    assert (saved / str(link.get_attribute("href"))).read_text() == "total: 42\n"
    with page.expect_download() as download:
        link.click()
    assert Path(download.value.path()).read_text() == "total: 42\n"
    page.screenshot(path=SCREENSHOTS / f"export-sandbox-files-{theme}.png", full_page=True)
    page.close()


@pytest.mark.docker
@pytest.mark.browser
def test_jupyterlab_opens_the_file_in_a_tab(saved, tmp_home, browser):
    from _jupyterlab import notebook_js, opened

    with opened(browser, saved, tmp_home / "home", "files.ipynb", starts_kernel=False) as (
        _lab,
        page,
    ):
        link = page.locator("a.jsb-file", has_text="report.txt")
        link.wait_for(timeout=60_000)
        assert "10 B" in page.locator(".jsb-outputs").inner_text()
        looks = "(a) => [getComputedStyle(a).textDecorationLine, getComputedStyle(a).color]"
        underline, colour = link.evaluate(looks)
        assert underline == "underline"  # it reads as a link, not as the text beside it
        assert colour != page.locator(".jsb-outputs .jsb-name").first.evaluate(
            "(n) => getComputedStyle(n).color"
        )
        for theme, name in (("JupyterLab Light", "light"), ("JupyterLab Dark", "dark")):
            notebook_js(
                page, "return app.commands.execute('apputils:change-theme', arg);", {"theme": theme}
            )
            page.wait_for_function(
                "(t) => document.body.dataset.jpThemeName === t", arg=theme, timeout=30_000
            )
            shot = SCREENSHOTS / f"lab-sandbox-files-{name}.png"
            page.locator(".jsb-outputs").screenshot(path=shot)
        link.click()
        page.wait_for_function(
            "() => window.jupyterapp.shell.currentWidget.title.label === 'report.txt'",
            timeout=30_000,
        )
        page.wait_for_selector(".jp-FileEditor .cm-content:has-text('total: 42')", timeout=30_000)
        notebook_js(page, "return app.commands.execute('docmanager:open', {path: 'files.ipynb'});")
        page.locator("a.jsb-file", has_text="chart.png").click()
        page.wait_for_function(
            "() => window.jupyterapp.shell.currentWidget.title.label === 'chart.png'",
            timeout=30_000,
        )
        page.wait_for_function(
            "() => { const i = document.querySelector('.jp-ImageViewer img');"
            " return i && i.complete && i.naturalWidth === 48; }",
            timeout=30_000,
        )
        notebook_js(page, "return app.commands.execute('docmanager:open', {path: 'files.ipynb'});")
        page.locator("a.jsb-file", has_text="tree").click()  # a Dir: shown in the file browser
        page.wait_for_selector(
            ".jp-FileBrowser .jp-DirListing-item:has-text('to-a')", timeout=30_000
        )
        page.screenshot(path=SCREENSHOTS / "lab-sandbox-files-opened.png")


@pytest.mark.docker
@pytest.mark.browser
def test_live_in_jupyterlab_a_notebook_in_a_folder_opens_its_own_file(tmp_home, browser):
    """Typed into a live JupyterLab and run there: the kernel runs in the notebook's folder
    (``work/``), the link opens ``work/sandbox-outputs/...``; a crafted saved row whose path
    leaves ``sandbox-outputs/`` (an untrusted notebook) opens nothing."""
    from _jupyterlab import notebook_js, opened, run_all, wait_all_executed, write_notebook

    root = tmp_home / "root"
    (root / "secret.txt").parent.mkdir(parents=True)
    (root / "secret.txt").write_text("not for a crafted link")
    crafted = nbformat.v4.new_code_cell("# saved by someone else")
    link = {"path": "sandbox-outputs/../../secret.txt", "name": "x.txt", "size": 1, "kind": "file"}
    row = {"type": "file", "preview": "x", "link": link}
    forged = {**_record(link), "outputs": {"x": row}, "summary": {"headline": "forged"}}
    crafted.outputs = [nbformat.v4.new_output("display_data", data={RUN_MIME: forged})]
    write_notebook(
        root / "work" / "live.ipynb",
        [
            "%load_ext jupyter_sandbox",
            "%%sandbox --out notes:File\n"
            "open('/var/outputs/notes', 'w').write('written in the sandbox\\n')",
            crafted,
        ],
    )
    with opened(browser, root, tmp_home / "home", "work/live.ipynb") as (_lab, page):
        page.locator("a.jsb-file", has_text="x.txt").click()  # before run-all clears it
        run_all(page)
        wait_all_executed(page, timeout_ms=300_000)
        page.locator("a.jsb-file", has_text="notes.txt").click()
        page.wait_for_function(
            "() => window.jupyterapp.shell.currentWidget.title.label === 'notes.txt'",
            timeout=30_000,
        )
        opened_path = notebook_js(page, "return panel.context.path;")
        assert opened_path.startswith("work/sandbox-outputs/cell2-")
        assert opened_path.endswith("/notes.txt")
        assert (root / opened_path).read_text() == "written in the sandbox\n"
        labels = notebook_js(page, "return [...app.shell.widgets('main')].map(w => w.title.label);")
        assert "secret.txt" not in labels and "x.txt" not in labels
