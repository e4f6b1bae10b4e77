"""What the installed Monty runs, measured: the facts the system prompt states.

Measuring runs every probe in `_probes` through `orchestrate`, type checker included, exactly
as model code runs. That takes seconds (the checker costs tens of ms per snippet), too slow
for the first ``%%codemode`` cell of every kernel, and the answer only changes with Monty's
version. So the measurement is checked in (``capabilities.json``, stamped with the
pydantic-monty version it was taken on) and `capabilities` uses it when the installed version
matches, which it does because the dependency is pinned exactly. On any other version it
measures once per process instead: the prompt never states facts about a different Monty.
A test re-measures and fails when the table drifts from the installed Monty.

Regenerate the table: ``python -m jupyter_sandbox.codemode._capabilities --write``.
"""

from __future__ import annotations

import functools
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pydantic_monty

from .._shared._errors import OrchestrationError, TypeCheckError
from .._shared._preview import preview
from ..orchestration import Limits, orchestrate
from ._probes import PROBES, Kind, Probe

TABLE = Path(__file__).with_name("capabilities.json")
_PROBE_TOOL = "probe"


@dataclass(frozen=True)
class Verdict:
    probe: Probe
    works: bool
    detail: str = ""
    """Why it does not work: the error's first line, or the wrong value it produced."""


@dataclass(frozen=True)
class Capabilities:
    monty_version: str
    verdicts: tuple[Verdict, ...]

    def select(self, kind: Kind, works: bool) -> list[Verdict]:
        return [v for v in self.verdicts if v.probe.kind == kind and v.works is works]

    def to_json(self) -> dict[str, Any]:
        return {
            "monty_version": self.monty_version,
            "verdicts": {
                v.probe.key: {"works": v.works, "detail": v.detail} for v in self.verdicts
            },
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Capabilities | None:
        """The table's verdicts, or None when it was taken with a different set of probes."""
        verdicts = data["verdicts"]
        if set(verdicts) != {p.key for p in PROBES}:
            return None
        return cls(
            data["monty_version"],
            tuple(Verdict(p, **verdicts[p.key]) for p in PROBES),
        )


def installed_version() -> str:
    return str(pydantic_monty.__version__)


def measure() -> Capabilities:
    """Run every probe in real Monty now."""
    return Capabilities(installed_version(), tuple(_verdict(p) for p in PROBES))


def load_table() -> Capabilities | None:
    return Capabilities.from_json(json.loads(TABLE.read_text())) if TABLE.exists() else None


@functools.cache
def capabilities() -> Capabilities:
    """The checked-in table if it describes the installed Monty, else a fresh measurement."""
    table = load_table()
    if table is not None and table.monty_version == installed_version():
        return table
    return measure()


def _noop() -> None:
    """Called first by every probe, so the type checker runs as it does on model code."""


def _verdict(probe: Probe) -> Verdict:
    try:
        result = orchestrate(
            f"{_PROBE_TOOL}()\n{probe.code}",
            tools={_PROBE_TOOL: _noop},
            limits=Limits(timeout=5.0, max_memory=64),
        )
    except OrchestrationError as exc:
        return Verdict(probe, False, _summary(exc))
    if result.value != probe.expect:
        return Verdict(
            probe, False, f"returned {preview(result.value)}, expected {preview(probe.expect)}"
        )
    return Verdict(probe, True)


def _summary(exc: OrchestrationError) -> str:
    """One line: the first diagnostic of a type-check failure, else the error message."""
    if isinstance(exc, TypeCheckError) and exc.diagnostics:
        return "type check: " + exc.diagnostics[0]
    lines = str(exc).splitlines()
    return lines[0] if lines else type(exc).__name__


def main(argv: list[str]) -> int:
    started = time.perf_counter()
    measured = measure()
    seconds = time.perf_counter() - started
    for v in measured.verdicts:
        print(f"{v.probe.kind:8} {v.probe.key:22} {'ok' if v.works else v.detail}")
    version = measured.monty_version
    print(f"measured {len(PROBES)} probes on pydantic-monty {version} in {seconds:.2f} s")
    if "--write" in argv:
        TABLE.write_text(json.dumps(measured.to_json(), indent=1, sort_keys=True) + "\n")
        print(f"wrote {TABLE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
