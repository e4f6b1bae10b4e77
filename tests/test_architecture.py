"""The layers and front doors of ARCHITECTURE.md hold: `lint-imports` (run by scripts/test.sh)
checks them with import-linter; here its contracts are run and the project's own contract type
is shown catching what it forbids."""

from __future__ import annotations

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
    assert "5 kept, 0 broken" in done.stdout


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
            "jupyter_sandbox._errors", f"jupyter_sandbox.{engine}", as_packages=True
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
