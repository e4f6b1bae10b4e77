"""What a `%%sandbox` cell displays, piece by piece: the display files a run
brings back read as hostile data (`_displays.collect`), their bundles made safe to show
(`display_bundle`), and the in-container shim (`jsbx_display`) run by a real interpreter
against a folder of its own. The whole path through a real container, real matplotlib and
pandas, JupyterLab and an HTML export is in tests/e2e/test_sandbox_rich.py."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import pytest
from _display_samples import RUNS_CODE, SCRIPT_LINKS, attribute_values, loading_markup
from _paths import ROOT

from jupyter_sandbox._shared import _defaults
from jupyter_sandbox.display import display_bundle
from jupyter_sandbox.records import DISPLAY_MIME
from jupyter_sandbox.sandbox import _displays

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16
SECRET = "s3cr<t&token"


def _folder(tmp_path: Path, *displays: Any, raw: bytes | None = None) -> Path:
    root = tmp_path / "out"
    (root / _displays.FOLDER).mkdir(parents=True)
    for number, display in enumerate(displays, 1):
        (root / _displays.FOLDER / f"{number:06d}.json").write_text(json.dumps(display))
    if raw is not None:
        (root / _displays.FOLDER / "999999.json").write_bytes(raw)
    return root


def test_only_showable_types_of_the_right_kind_are_kept(tmp_path: Path) -> None:
    good = base64.b64encode(PNG).decode()
    root = _folder(
        tmp_path,
        {
            "data": {
                "text/plain": "fig",
                "image/png": good,
                "application/javascript": "alert(1)",
                "text/html": 42,  # not text: dropped
            }
        },
        {"data": {"image/png": base64.b64encode(b"GIF89a").decode()}},  # not a PNG
        {"data": {"image/jpeg": "%%%not base64"}},
        {"data": "not a bundle"},
        raw=b"{broken json",
    )
    assert _displays.collect(root, limit=1 << 20, secrets=()) == [
        {"text/plain": "fig", "image/png": good}
    ]


def test_secrets_are_masked_in_every_text_and_an_image_holding_one_is_dropped(
    tmp_path: Path,
) -> None:
    escaped = SECRET.replace("&", "&amp;").replace("<", "&lt;")
    root = _folder(
        tmp_path,
        {
            "data": {
                "text/plain": f"token={SECRET}",
                "text/html": f"<td>{escaped}</td>",  # as pandas writes it
                "application/json": {"k": [SECRET]},
                "image/png": base64.b64encode(PNG + f"tEXt{SECRET}".encode()).decode(),
            }
        },
    )
    (shown,) = _displays.collect(root, limit=1 << 20, secrets=(SECRET,))
    assert SECRET not in json.dumps(shown) and escaped not in json.dumps(shown)
    assert shown["text/plain"] == "token=***"
    assert shown["text/html"] == "<td>***</td>"
    assert shown["application/json"] == {"k": ["***"]}
    assert "image/png" not in shown


def test_displays_past_the_output_limit_are_left_out_and_counted(tmp_path: Path) -> None:
    root = _folder(tmp_path, *({"data": {"text/plain": "x" * 400}} for _ in range(5)))
    shown = _displays.collect(root, limit=1000, secrets=())
    assert len(shown) == 3  # two of ~420 bytes fit, then the note
    assert shown[-1]["text/plain"].startswith("3 displays not shown: the run's displays passed")


def test_a_run_shows_at_most_so_many_displays_and_says_how_many_it_left_out(
    tmp_path: Path,
) -> None:
    cap = _defaults.DISPLAYS_CEILING
    root = _folder(tmp_path, *({"data": {"text/plain": str(n)}} for n in range(cap + 7)))
    shown = _displays.collect(root, limit=1 << 20, secrets=())
    assert [d["text/plain"] for d in shown[:cap]] == [str(n) for n in range(cap)]
    assert shown[cap:] == [
        {"text/plain": f"7 displays not shown: a run shows at most {cap} displays"}
    ]


def test_a_link_or_a_folder_where_a_display_should_be_is_skipped(tmp_path: Path) -> None:
    root = _folder(tmp_path, {"data": {"text/plain": "kept"}})
    (root / _displays.FOLDER / "000002.json").mkdir()
    (root / _displays.FOLDER / "000003.json").symlink_to("/etc/passwd")
    assert _displays.collect(root, limit=1 << 20, secrets=()) == [{"text/plain": "kept"}]
    assert _displays.collect(None, limit=1, secrets=()) == []


@pytest.mark.parametrize(
    "markup",
    [
        "<script>alert(1)</script><b>x</b>",
        '<img src=x onerror="alert(1)"><b>x</b>',
        '<a href="javascript:alert(1)"><b>x</b></a>',
        "<style>body{display:none}</style><b>x</b>",
        '<iframe src="https://example.com"></iframe><b>x</b>',
    ],
)
def test_the_html_fallback_runs_nothing(markup: str) -> None:
    shown = display_bundle({"text/html": markup, "text/plain": "t"})
    assert "<b>x</b>" in shown["text/html"]
    for bad in ("script", "onerror", "javascript:", "style", "iframe", "alert"):
        assert bad not in shown["text/html"]
    assert shown[DISPLAY_MIME]["data"]["text/html"] == markup  # JupyterLab's sanitiser's job


def test_an_svg_is_only_an_image() -> None:
    svg = '<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"><script>1</script></svg>'
    shown = display_bundle({"image/svg+xml": svg})
    assert "image/svg+xml" not in shown  # nbconvert would inline it, scripts and all
    assert shown["text/html"].startswith('<img alt="SVG image" src="data:image/svg+xml;base64,')
    assert shown["text/plain"] == "<display: image/svg+xml>"


def test_markdown_is_drawn_as_sanitised_html() -> None:
    markup = "# T\n\n<img src=x onerror=alert(1)> `a<b` [x](https://example.com)"
    shown = display_bundle({"text/markdown": markup})
    assert "text/markdown" not in shown  # an export would render it unchecked
    assert shown["text/html"] == (
        '<h1>T</h1>\n<p><img> <code>a&lt;b</code> <a href="https://example.com" '
        'rel="noopener noreferrer">x</a></p>\n'
    )
    assert shown[DISPLAY_MIME]["data"]["text/markdown"] == markup  # JupyterLab's to draw


@pytest.mark.parametrize("markdown", SCRIPT_LINKS)
def test_no_markdown_link_runs_code_however_it_is_spelled(markdown: str) -> None:
    html = display_bundle({"text/markdown": markdown})["text/html"]
    found = attribute_values(html)
    assert not [v for v in found if v.startswith(RUNS_CODE)]


@pytest.mark.parametrize("mime", ["text/html", "text/markdown"])
def test_the_fallbacks_load_nothing_but_their_own_images(mime: str) -> None:
    own = "data:image/png;base64," + base64.b64encode(PNG).decode()
    markup = loading_markup("http://127.0.0.1:9") + f'<img src="{own}">'
    html = display_bundle({mime: markup})["text/html"]
    assert not [v for v in attribute_values(html) if "127.0.0.1" in v]
    for element in ("<style", "<link", "<meta", "<iframe", "<object"):
        assert element not in html
    assert f'<img src="{own}">' in html  # the display's own image is shown


# -- the in-container shim, run by a real interpreter --------------------------------------

SHIM = ROOT / "jupyter_sandbox" / "sandbox" / "_display_shim.py"


def _run_shim(tmp_path: Path, cell: str, *, site: bool = True) -> tuple[list[dict[str, Any]], str]:
    """Run ``cell`` as the runner does (``jsbx_display.run``), displays written under
    ``tmp_path``; the displays and the names of the modules the cell's run loaded (the last
    line of stderr). ``site=False``: without site-packages, so without IPython."""
    tmp_path = Path(tempfile.mkdtemp(dir=tmp_path))  # a folder of this run's own
    (tmp_path / "jsbx_display.py").write_text(SHIM.read_text())
    folder = tmp_path / "displays"
    driver = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        import jsbx_display
        del sys.path[0]
        jsbx_display.DISPLAYS = {str(folder)!r}
        jsbx_display.install()
        before = set(sys.modules)
        jsbx_display.run(sys.stdin.read(), "<cell>", {{"__name__": "__main__"}})
        print(" ".join(sorted(set(sys.modules) - before)), file=sys.stderr)
        """
    )
    done = subprocess.run(
        [sys.executable, "-I", *([] if site else ["-S"]), "-c", driver],
        input=cell,
        capture_output=True,
        text=True,
        check=True,
    )
    files = sorted(folder.glob("*.json")) if folder.is_dir() else []
    return [json.loads(f.read_text())["data"] for f in files], done.stderr.splitlines()[-1]


def test_a_plain_cell_displays_nothing_and_imports_nothing(tmp_path: Path) -> None:
    displays, loaded = _run_shim(tmp_path, "x = 1\nprint(x)")
    assert displays == []
    assert loaded == ""


def test_the_last_expression_is_displayed_unless_none_or_silenced(tmp_path: Path) -> None:
    assert _run_shim(tmp_path, "x = 20\nx + 1")[0] == [{"text/plain": "21"}]
    assert _run_shim(tmp_path, "x = 20\nx + 1;")[0] == []
    assert _run_shim(tmp_path, "print(1)")[0] == []
    assert _run_shim(tmp_path, "for i in range(2):\n    i")[0] == []  # not an expression


@pytest.mark.parametrize("ipython", [True, False], ids=["IPython's display", "the stand-in"])
def test_display_uses_rich_reprs_with_or_without_ipython(tmp_path: Path, ipython: bool) -> None:
    cell = textwrap.dedent(
        """
        from IPython.display import HTML, JSON, Image, Markdown, display
        class Table:
            def _repr_html_(self):
                return "<table><tr><td>1</td></tr></table>"
            def __repr__(self):
                return "Table()"
        class Broken:
            def _repr_html_(self):
                raise ValueError("no")
        display(Table(), Markdown("# hi"), JSON({"a": 1}), Broken())
        display({"text/plain": "raw"}, raw=True)
        display(Image(data=b"\\x89PNG\\r\\n\\x1a\\nxx"))
        HTML("<b>last</b>")
        """
    )
    displays, loaded = _run_shim(tmp_path, cell, site=ipython)
    assert ("IPython.core.display_functions" in loaded.split()) is ipython
    table = {"text/html": "<table><tr><td>1</td></tr></table>", "text/plain": "Table()"}
    assert displays[0] == table
    assert displays[1]["text/markdown"] == "# hi"
    assert displays[2]["application/json"] == {"a": 1}
    assert set(displays[3]) == {"text/plain"}  # its broken repr said so on stderr
    assert displays[4] == {"text/plain": "raw"}
    assert base64.b64decode(displays[5]["image/png"]) == b"\x89PNG\r\n\x1a\nxx"
    assert displays[6]["text/html"] == "<b>last</b>"
    assert len(displays) == 7


@pytest.mark.parametrize(
    ("code", "possible"),
    [
        ("print(42)", False),
        ("x = 1\nprint(x)", False),
        ("x = 1", False),
        ("def (", False),  # fails to run anyway
        ("x = 1\nx", True),
        ("import math\nprint(math.pi)", True),  # pandas or matplotlib may display
        ("from IPython.display import HTML", True),
        ("display(1)", True),
        ("m = __import__('matplotlib')", True),
    ],
)
def test_only_a_cell_that_could_display_pays_for_collecting(code: str, possible: bool) -> None:
    assert _displays.possible(code) is possible
