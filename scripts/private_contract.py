"""An import-linter contract type: no module imports another package's private module.

``jupyter_sandbox.orchestration._store`` is private to ``jupyter_sandbox.orchestration``: its
own modules may import it; every other package imports what it needs from
``jupyter_sandbox.orchestration``, the package's front door. A private module of the root
(``jupyter_sandbox._shared._errors``) is shared by all. ``lint-imports`` runs it
(``[tool.importlinter]`` in pyproject.toml, ``scripts/test.sh`` puts this folder on the path).
"""

from __future__ import annotations

from typing import Any

from importlinter import Contract, ContractCheck, fields, output


def owner(module: str) -> str | None:
    """The package ``module`` is private to: the parent of its first ``_name`` part, if any."""
    parts = module.split(".")
    for i, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:i])
    return None


def reaches(graph: Any, container: str) -> list[tuple[str, str, list[int]]]:
    """(importer, private module, line numbers) for each import from outside its owner."""
    found = []
    for module in sorted(graph.find_descendants(container)):
        home = owner(module)
        if home is None:
            continue
        for importer in sorted(graph.find_modules_that_directly_import(module)):
            if importer != home and not importer.startswith(home + "."):
                details = graph.get_import_details(importer=importer, imported=module)
                found.append((importer, module, [d["line_number"] for d in details]))
    return found


class NoPrivateReach(Contract):
    """Every import of a private module comes from inside the package it is private to."""

    type_name = "no_private_reach"
    containers = fields.ListField(subfield=fields.ModuleField())

    def check(self, graph: Any, verbose: bool) -> ContractCheck:
        found = [r for c in self.containers for r in reaches(graph, c.name)]  # type: ignore[attr-defined]
        return ContractCheck(kept=not found, metadata={"reaches": found})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for importer, module, lines in check.metadata["reaches"]:
            at = ", ".join(f"line {n}" for n in lines)
            home = owner(module)
            output.print_error(f"{importer} imports {module} ({at}): import it from {home}")
        output.new_line()
