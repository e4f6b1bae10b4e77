"""The test suite is laid out so a newcomer finds a module's tests by its name: unit tests in a
folder that mirrors the package, end-to-end tests in `tests/e2e/`, shared fixtures and helpers
in `tests/helpers/` (never another test module), and no history in names or docstrings: git
and the CHANGELOG keep that (the changelog is not searched)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
PACKAGE = ROOT / "jupyter_sandbox"
BY_USE = {"e2e", "helpers"}  # folders named for how they test, not for a package folder

# "issue 12", "issue 20 item 3", "(item 7)", "item 14: ...": the forms history took here.
HISTORY = re.compile(
    r"\bissues? #?\d+|\(items? \d[\d ,and-]*\)|\bitems? \d+(?:(?:-|, | and )\d+)*:", re.IGNORECASE
)
HISTORY_SEARCHED = ("jupyter_sandbox", "tests", "benchmarks", "docs", "scripts", "labextension/src")
HISTORY_SUFFIXES = {".py", ".md", ".ts", ".tsx", ".css", ".sh", ".ipynb"}

# The one user page that names tests is left out: the safety page shows each promise beside
# the test that attacks it.
USER_DOCS = [ROOT / "README.md", *sorted((ROOT / "notebooks").glob("*.ipynb"))]
USER_DOCS += [
    p
    for p in sorted((ROOT / "docs").rglob("*.md"))
    if "_build" not in p.parts and p != ROOT / "docs/explanation/safety.md"
]


def _folders() -> list[Path]:
    return sorted(
        p for p in TESTS.rglob("*") if p.is_dir() and p.name != "__pycache__" and not _by_use(p)
    )


def _by_use(folder: Path) -> bool:
    return folder.relative_to(TESTS).parts[0] in BY_USE


@pytest.mark.parametrize("folder", [str(p.relative_to(TESTS)) for p in _folders()])
def test_a_unit_test_folder_mirrors_a_package_folder(folder: str) -> None:
    assert (PACKAGE / folder / "__init__.py").is_file(), f"jupyter_sandbox/{folder} is no package"


def test_every_test_module_sits_in_a_folder_of_the_layout() -> None:
    """Each test module is at the root (the cross-cutting checks), in a folder named for a
    package folder, or in e2e/; helpers/ holds no tests."""
    for path in TESTS.rglob("test_*.py"):
        parts = path.relative_to(TESTS).parts
        assert parts[0] != "helpers", f"{path}: helpers/ holds helpers, not tests"
        if len(parts) > 1 and parts[0] != "e2e":
            assert (PACKAGE.joinpath(*parts[:-1]) / "__init__.py").is_file(), path


def test_no_test_module_imports_another() -> None:
    """A fixture two test modules share lives in conftest.py or tests/helpers/."""
    modules = {p.stem for p in TESTS.rglob("test_*.py")}
    for path in TESTS.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            for name in names:
                assert name.split(".")[-1] not in modules, f"{path}:{node.lineno} imports {name}"


def _history_files() -> list[Path]:
    found = []
    for top in HISTORY_SEARCHED:
        for path in (ROOT / top).rglob("*"):
            if path.suffix in HISTORY_SUFFIXES and "_build" not in path.parts:
                found.append(path)
    return sorted(found)


def test_no_issue_number_is_left_in_code_tests_docs_or_benchmarks() -> None:
    """History lives in git and the CHANGELOG; a docstring says what a thing is and why."""
    found = []
    for path in _history_files():
        if path == Path(__file__).resolve():
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if HISTORY.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:80]}")
    assert not found, "\n".join(found)


def test_the_history_pattern_catches_the_forms_history_took() -> None:
    for line in ("(issue 22 item 11)", "Issue 8, item 12: a", "the store (item 7)", "item 14: a"):
        assert HISTORY.search(line), line
    for line in ("10 items 3 levels deep", "max_items=5", "an item 5-tuple", "(items)"):
        assert not HISTORY.search(line), line


@pytest.mark.parametrize("page", [str(p.relative_to(ROOT)) for p in USER_DOCS])
def test_a_user_page_names_no_test_file(page: str) -> None:
    """Tests are for the people who change the code (CONTRIBUTING.md); a person reading the
    docs meets them only on the safety page, beside the promise each one attacks."""
    assert not re.search(r"test_\w+\.py|\btests/", (ROOT / page).read_text())
