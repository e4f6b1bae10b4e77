"""Cells of a gated run for kernel and notebook tests: tools whose ``delete`` needs approval,
a cell that pauses at it, and how to read what the kernel showed and did."""

from __future__ import annotations

from _kernels import Kernel

from jupyter_sandbox.records import TRACE_MIME

GATED = """
from jupyter_sandbox import tool
made = []

@tool
def count(n: int) -> int:
    made.append(("count", n))
    return n

@tool(approve=True)
def delete(path: str) -> str:
    made.append(("delete", path))
    return "deleted " + path
"""


CELL = """%%orchestrate
n = count(2)
try:
    said = delete("/data/old")
except PermissionError as e:
    said = "refused: " + str(e)
print(said)
(n, said)"""


def paused_run(ran) -> str:
    """The run id of the paused record a cell showed."""
    records = ran.records(TRACE_MIME)
    assert records, ran.text
    last = records[-1]
    assert last["status"] == "paused", last
    assert [call["tool"] for call in last["pending"]] == ["delete"]
    return str(last["run_id"])


def made(k: Kernel) -> str:
    return k.ok("made").value or ""


GATED_NOTEBOOK = [
    """%load_ext jupyter_sandbox
from jupyter_sandbox import tool

deleted = []

@tool(approve=True)
def delete(paths: list[str]) -> int:
    deleted.extend(paths)
    return len(paths)""",
    """%%orchestrate
try:
    n = delete(['a.txt', 'b.txt'])
except PermissionError as e:
    n = f"refused: {e}"
n""",
    "deleted",
]
"""A gated tool, a cell that pauses at it (rejected, the code reports the reason), and what
the tool really deleted on the host."""
