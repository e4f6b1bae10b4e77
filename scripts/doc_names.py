"""Every name the docs point at exists in the code: modules, functions, classes, attributes.

ARCHITECTURE.md and the docs name code in backticks (`_plug.plug`, `Driver.run`,
`orchestration/_plug.py`, `jupyter_sandbox.fork_run`). A rename that misses one leaves a
newcomer hunting for something that is gone, so `stale()` reads the package's source (its
syntax tree, nothing imported or run) and lists each backticked name it cannot resolve.
Run as a script it prints them and exits 1 when there are any; tests/test_docs.py calls it.

What counts as a name of ours (anything else in backticks, a command line, a literal, a
standard-library name, is not checked):
- a path ending in .py/.ts/.tsx/.ipynb/.sh/.md/.svg/.toml: the end of one of the
  repository's paths (`demo.sh`, `durable/_store.py`, `tests/orchestration/durable/test_store.py`);
- a dotted name whose first part is one of our modules (``_plug``, ``orchestration``,
  ``jupyter_sandbox``), or one of our classes (``Driver.run``): each later part must be defined
  in what the part before it names (a module's top level, or a class's body and its ``self.x``
  assignments, bases followed by name); or a ``jupyter_sandbox.`` name the code writes as
  a string after that prefix (an OpenTelemetry attribute, ``jupyter_sandbox.run.status``).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "jupyter_sandbox"
DOCUMENTS = ("ARCHITECTURE.md", "CONTRIBUTING.md", "README.md", "docs")
SKIPPED = {"changelog.md", "CHANGELOG.md"}  # history names what was, by design
_TICKED = re.compile(r"`([^`\n]+)`")
_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$")
_PATH = re.compile(r"^[\w./-]+\.(py|ts|tsx|ipynb|sh|md|svg|toml)$")


@dataclass
class Scope:
    """What a module or a class defines: names to the scope they open (None: a plain value)."""

    names: dict[str, Scope | None] = field(default_factory=dict)
    bases: list[str] = field(default_factory=list)


def _class(node: ast.ClassDef) -> Scope:
    scope = Scope(bases=[ast.unparse(b).split(".")[-1] for b in node.bases])
    for item in node.body:
        scope.names.update(_defined(item))
        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
            for sub in ast.walk(item):  # attributes an instance gets: self.x = ...
                targets = sub.targets if isinstance(sub, ast.Assign) else []
                if isinstance(sub, ast.AnnAssign | ast.AugAssign):
                    targets = [sub.target]
                for target in targets:
                    if (
                        isinstance(target, ast.Attribute)
                        and isinstance(target.value, ast.Name)
                        and target.value.id == "self"
                    ):
                        scope.names.setdefault(target.attr, None)
    return scope


def _defined(node: ast.stmt) -> dict[str, Scope | None]:
    """The names one top-level (or class-level) statement defines."""
    if isinstance(node, ast.ClassDef):
        return {node.name: _class(node)}
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return {node.name: None}
    if isinstance(node, ast.Assign):
        return {n.id: None for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    if isinstance(node, ast.AnnAssign | ast.AugAssign) and isinstance(node.target, ast.Name):
        return {node.target.id: None}
    if isinstance(node, ast.Import | ast.ImportFrom):
        return {(a.asname or a.name).split(".")[0]: None for a in node.names}
    if isinstance(node, ast.If | ast.Try):
        found: dict[str, Scope | None] = {}
        for part in (node.body, getattr(node, "orelse", []), getattr(node, "finalbody", [])):
            for item in part:
                found.update(_defined(item))
        for handler in getattr(node, "handlers", []):
            for item in handler.body:
                found.update(_defined(item))
        return found
    return {}


class Code:
    """The package's modules and classes, read from source."""

    def __init__(self, package: Path = PACKAGE) -> None:
        self.modules: dict[str, list[Scope]] = {}  # a dotted path and a bare name, each
        self.classes: dict[str, list[Scope]] = {}
        for path in sorted(package.rglob("*.py")):
            parts = path.relative_to(package.parent).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            scope = Scope()
            for node in ast.parse(path.read_text(), str(path)).body:
                scope.names.update(_defined(node))
            for key in {".".join(parts), parts[-1], ".".join(parts[1:])} - {""}:
                self.modules.setdefault(key, []).append(scope)
            for name, inner in scope.names.items():
                if inner is not None:
                    self.classes.setdefault(name, []).append(inner)
        for key, scopes in list(self.modules.items()):  # a package's submodules are its names
            for sub, subscopes in self.modules.items():
                if sub.startswith(key + ".") and "." not in sub[len(key) + 1 :]:
                    for scope in scopes:
                        scope.names.setdefault(sub[len(key) + 1 :], subscopes[0])

    def _has(self, scope: Scope, name: str, seen: frozenset[int] = frozenset()) -> list[Scope]:
        if id(scope) in seen:
            return []
        if name in scope.names:
            inner = scope.names[name]
            return [inner] if inner is not None else [Scope(names={"*": None})]
        found = []
        for base in scope.bases:
            for parent in self.classes.get(base, []):
                found += self._has(parent, name, seen | {id(scope)})
        return found

    def ours(self, dotted: str) -> bool:
        head = dotted.split(".")[0]
        return head in self.modules or head in self.classes

    def resolves(self, dotted: str) -> bool:
        parts = dotted.split(".")
        for cut in range(len(parts), 0, -1):  # the longest module path first
            scopes = self.modules.get(".".join(parts[:cut]))
            if scopes and self._walk(scopes, parts[cut:]):
                return True
        return self._walk(self.classes.get(parts[0], []), parts[1:])

    def _walk(self, scopes: list[Scope], rest: list[str]) -> bool:
        for part in rest:
            if any("*" in s.names for s in scopes):
                return True  # a plain value's attributes are not ours to check
            scopes = [inner for s in scopes for inner in self._has(s, part)]
        return bool(scopes)


def documents(root: Path = ROOT) -> Iterator[Path]:
    for name in DOCUMENTS:
        path = root / name
        for found in sorted(path.rglob("*.md")) if path.is_dir() else [path] * path.exists():
            if found.name not in SKIPPED:
                yield found


def _files(root: Path) -> list[str]:
    """The repository's files, as paths from its root (the tracked ones where git can tell)."""
    try:
        listed = subprocess.run(
            ["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):  # an unpacked sdist has no .git
        listed = []
    skipped = {".venv", "node_modules", ".git", "lib", "dist", "_build"}
    return listed or [
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_file() and not skipped & set(p.relative_to(root).parts)
    ]


def _path_exists(text: str, files: list[str]) -> bool:
    """A path is the end of one of the repository's paths: `demo.sh`, `durable/_store.py`."""
    text = text.removeprefix("./")
    return any(f == text or f.endswith("/" + text) for f in files)


def stale(root: Path = ROOT) -> list[str]:
    """``file:line: `name``` for each backticked name of ours that the code does not have
    (the documents under ``root``; the names are looked up in this checkout)."""
    code = Code()
    files = _files(ROOT)
    emitted = "\n".join(p.read_text() for p in PACKAGE.rglob("*.py"))
    found = []
    for doc in documents(root):
        for number, line in enumerate(doc.read_text().splitlines(), 1):
            for ticked in _TICKED.findall(line):
                text = ticked.strip().removesuffix("()")
                if _PATH.match(text):
                    bad = not _path_exists(text, files)
                else:
                    bad = (
                        bool(_DOTTED.match(text))
                        and code.ours(text)
                        and not code.resolves(text)
                        # a name the code writes under its prefix: an OpenTelemetry attribute
                        and f'"{text.removeprefix("jupyter_sandbox.")}"' not in emitted
                    )
                if bad:
                    found.append(f"{doc.relative_to(root)}:{number}: `{ticked}`")
    return found


if __name__ == "__main__":
    problems = stale()
    print("\n".join(problems) or "every name the docs give exists")
    sys.exit(1 if problems else 0)
