"""The layers and front doors of ARCHITECTURE.md hold: `lint-imports` (run by scripts/test.sh)
checks them with import-linter; here its contracts are run and the project's own contract type
is shown catching what it forbids."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from private_contract import owner, reaches  # noqa: E402


def test_the_contracts_hold() -> None:
    done = subprocess.run(
        [str(Path(sys.executable).parent / "lint-imports")],
        cwd=ROOT,
        env={"PYTHONPATH": f"{ROOT / 'scripts'}:{ROOT}", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "6 kept, 0 broken" in done.stdout


def test_the_contracts_count_imports_made_only_for_type_checking() -> None:
    """An import under ``if TYPE_CHECKING:`` is an import a reader and mypy follow: the
    contracts see it, so a shared module cannot name an engine's class even for a hint."""
    linter = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    assert linter.get("exclude_type_checking_imports", False) is False


def test_the_errors_reach_no_engine_even_for_type_hints() -> None:
    """The error tree types the run it carries (``.result``, ``.attempts``) by protocols of its
    own, so no chain of imports, type-only ones included, leads from it up to an engine."""
    graph = grimp.build_graph(
        "jupyter_sandbox", cache_dir=None, exclude_type_checking_imports=False
    )
    for engine in ("orchestration", "codemode", "sandbox", "display", "magics"):
        chain = graph.find_shortest_chain(
            "jupyter_sandbox._shared._errors", f"jupyter_sandbox.{engine}", as_packages=True
        )
        assert chain is None, chain


def test_the_orchestrate_magic_shows_its_run_without_the_durable_magics() -> None:
    """The cell's view is a module of its own (``magics._cell_view``), which both magics
    import: ``%%orchestrate`` imports no durable magic, so the two form no circle."""
    graph = grimp.build_graph(
        "jupyter_sandbox", cache_dir=None, exclude_type_checking_imports=False
    )
    magics = "jupyter_sandbox.magics"
    assert not graph.direct_import_exists(
        importer=f"{magics}._orchestrate", imported=f"{magics}._durable"
    )
    assert graph.find_shortest_chain(f"{magics}._cell_view", f"{magics}._orchestrate") is None


@pytest.mark.parametrize(
    ("module", "home"),
    [
        ("pkg.engine._store", "pkg.engine"),
        ("pkg._errors", "pkg"),
        ("pkg.engine", None),
        ("pkg.engine.__init__", None),
        ("pkg.engine._inner.deep", "pkg.engine"),
    ],
)
def test_a_private_module_belongs_to_the_package_above_it(module: str, home: str | None) -> None:
    assert owner(module) == home


def test_a_reach_into_another_packages_private_module_is_caught(tmp_path, monkeypatch) -> None:
    """A planted package: ``b.y`` imports ``a._x`` (caught), ``a.z`` imports its own ``a._x``
    and ``b.y`` the root's shared ``_shared`` (both allowed)."""
    files = {
        "__init__.py": "",
        "_shared.py": "",
        "a/__init__.py": "from . import _x\n",
        "a/_x.py": "",
        "a/z.py": "from ._x import *\n",
        "b/__init__.py": "",
        "b/y.py": "from .._shared import *\nfrom ..a._x import *\n",
    }
    for name, text in files.items():
        path = tmp_path / "planted" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    graph = grimp.build_graph("planted", cache_dir=None)
    assert reaches(graph, "planted") == [("planted.b.y", "planted.a._x", [2])]


_SVG = "{http://www.w3.org/2000/svg}"
_APP = {
    "jupyter_sandbox",
    "jupyter_sandbox.__main__",
    "jupyter_sandbox._doctor",
    "jupyter_sandbox._kernelspec",
}
"""Modules of the top layer that are not in a package: drawn as part of the magics' box."""


def _drawing() -> tuple[dict[str, str], set[tuple[str, str]]]:
    """docs/_static/layers.svg read back: each box (named by the bold name inside it, a
    package or ``shared``) with the notes written in it, and each arrow, as the boxes it
    starts and ends at."""
    import xml.etree.ElementTree as ET

    root = ET.parse(ROOT / "docs/_static/layers.svg").getroot()
    rects = [r for r in root.iter(f"{_SVG}rect") if "box" in r.get("class", "")]
    boxes = {}
    for text in root.iter(f"{_SVG}text"):
        if text.get("class") != "name":
            continue
        x, y = float(text.get("x", 0)), float(text.get("y", 0))
        for r in rects:
            left, top = float(r.get("x", 0)), float(r.get("y", 0))
            right, bottom = left + float(r.get("width", 0)), top + float(r.get("height", 0))
            if left <= x <= right and top <= y <= bottom:
                name = (text.text or "").strip().removesuffix("/").removesuffix(" modules")
                boxes[name] = (left, top, right, bottom)

    def box_at(x: float, y: float, margin: float = 3) -> str:  # an arrow ends by a box
        (name,) = [
            n
            for n, (left, top, right, bottom) in boxes.items()
            if left <= x <= right and top - margin <= y <= bottom + margin
        ]
        return name

    notes = {name: "" for name in boxes}
    for text in root.iter(f"{_SVG}text"):
        x, y = float(text.get("x", 0)), float(text.get("y", 0))
        for name, (left, top, right, bottom) in boxes.items():
            if text.get("class") == "note" and left <= x <= right and top <= y <= bottom:
                notes[name] += " " + (text.text or "")  # an arrow's label is in no box

    arrows = set()
    for path in root.iter(f"{_SVG}path"):
        if "edge" not in path.get("class", "") or "dashed" in path.get("class", ""):
            continue  # a dashed arrow is the TypeScript extension reading records
        points = re.findall(r"(-?[\d.]+) (-?[\d.]+)", path.get("d", ""))
        (x0, y0), (x1, y1) = points[0], points[-1]
        arrows.add((box_at(float(x0), float(y0)), box_at(float(x1), float(y1))))
    return notes, arrows


def test_the_layers_drawing_has_the_arrows_the_imports_have() -> None:
    """docs/_static/layers.svg is drawn by hand, so it is checked against the code: each arrow
    is an import the code makes (type-only imports included), and each import between packages
    runs along the arrows; the boxes are the packages, and the shared modules it names are the
    ones the shared-modules contract keeps from importing any package."""
    boxes, arrows = _drawing()
    packages = {  # _shared/ is the drawing's "shared" box, with the root's own modules
        p.name
        for p in (ROOT / "jupyter_sandbox").iterdir()
        if (p / "__init__.py").exists() and p.name != "_shared"
    }
    assert set(boxes) == packages | {"shared", "labextension"}
    graph = grimp.build_graph(
        "jupyter_sandbox", include_external_packages=False, exclude_type_checking_imports=False
    )

    def box(module: str) -> str:
        part = module.split(".")[1] if "." in module else ""
        if module in _APP:
            return "magics"
        return part if part in packages else "shared"

    imports = {
        (box(m), box(i))
        for m in graph.modules
        for i in graph.find_modules_directly_imported_by(m)
        if box(m) != box(i)
    }
    assert arrows <= imports  # no arrow the code does not have
    reach = set(arrows)
    while True:  # the arrows' closure: where a reader following them can get
        more = {(a, d) for a, b in reach for c, d in reach if b == c} - reach
        if not more:
            break
        reach |= more
    assert imports <= reach, imports - reach
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (shared,) = [c for c in contracts["contracts"] if "shared modules" in c["name"]]
    words = boxes["shared"].split()
    named = [f"jupyter_sandbox.{w.removesuffix('.py')}" for w in words if w.endswith(".py")]
    named += [f"jupyter_sandbox._shared.{w}" for w in words if w.startswith("_") and "/" not in w]
    assert len(named) > 3
    for name in named:
        assert name in shared["source_modules"], name
