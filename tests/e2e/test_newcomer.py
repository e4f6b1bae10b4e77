"""What a person new to the project meets first: help that answers, errors said once.

Found by reading the README and running every notebook as a newcomer would (real IPython
shell, real Monty workers).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from _kernels import Kernel, Ran
from _kernels import kernel as real_kernel
from IPython.core.interactiveshell import InteractiveShell


def _run(shell: InteractiveShell, capsys: pytest.CaptureFixture[str], cell: str) -> str:
    """Run a cell; everything it showed (stdout and stderr)."""
    shell.run_cell(cell)
    shown = capsys.readouterr()
    return shown.out + shown.err


@pytest.mark.parametrize(
    ("cell", "ours", "montys"),
    [
        ("%%orchestrate --timeout 1\nwhile True:\n    pass", "time limit exceeded", "feed time"),
        (
            '%%orchestrate --max-memory 8\nx = []\nwhile True:\n    x.append("a" * 1000)',
            "memory limit exceeded",
            "bytes >",
        ),
    ],
    ids=["timeout", "memory"],
)
def test_a_limit_is_said_once_in_our_words(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str], cell: str, ours: str, montys: str
) -> None:
    """Monty gives a limit no frames, only its own line; shown above ours it said the same
    thing twice, the first time in Monty's words (`feed time limit exceeded: 1.05s > 1s`)."""
    shown = _run(shell, capsys, cell)
    assert shown.count(ours) == 1, shown
    assert montys not in shown, shown


def test_the_codes_own_error_is_said_once_under_its_frames(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    """The cell's traceback ended with `PermissionError: ...` and our line below repeated it
    (`OrchestrationError: PermissionError: ...`): the demo's last cell showed it twice."""
    shown = _run(shell, capsys, '%%orchestrate\nopen("/etc/passwd").read()')
    assert shown.count("Permission denied: '/etc/passwd'") == 1, shown
    frame = 'File "<cell>", line 2, in <module>\n    open("/etc/passwd").read()\n'
    assert frame in shown, shown
    assert "OrchestrationError: PermissionError: Permission denied" in shown, shown


@pytest.mark.parametrize(
    "magic", ["orchestrate_sessions", "orchestrate_pending", "orchestrate_reset"]
)
def test_every_durable_line_magic_takes_help(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str], magic: str
) -> None:
    shown = _run(shell, capsys, f"%{magic} --help")
    assert "UsageError" not in shown, shown
    assert f"%{magic}" in shown, shown


@pytest.mark.docker
@pytest.mark.usefixtures("no_leaked_containers")
def test_a_failed_sandbox_tool_shows_none_of_our_frames() -> None:
    """The trace row of a sandbox tool whose container exited 3 (notebook 03) held a host
    traceback through `_shared/_threads.py` and `sandbox/_sandbox.py`: our code, not the user's."""
    from jupyter_sandbox import create, orchestrate, tool

    flaky = create("flaky", code="raise SystemExit(3)", outputs={"done": bool})
    code = "try:\n    await flaky()\nexcept Exception as e:\n    str(e)"
    result = orchestrate(code, tools=[tool(flaky)])
    (call,) = result.trace
    assert call.error is not None and "exited with code 3" in call.error
    shown = call.host_traceback or ""
    assert "jupyter_sandbox/" not in shown and "File " not in shown, shown
    assert shown.startswith("jupyter_sandbox.errors.NonZeroExit: exited with code 3"), shown


# -- one option syntax, in a real kernel ------------------------------------------------


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[Kernel]:
    with real_kernel(tmp_path / "store.sqlite") as k:
        yield k


def _error(ran: Ran) -> str:
    """What a failed cell showed (a `UsageError` is one line on its stderr)."""
    assert ran.status == "error", ran.text
    return ran.text.strip()


def test_a_mistyped_option_gets_the_option_it_meant(kernel: Kernel) -> None:
    said = _error(kernel.run("%%sandbox --pakages numpy\n1"))
    assert said == "UsageError: unknown option --pakages: did you mean --packages?"
    said = _error(kernel.run("%%orchestrate --max-calsl 3\n1"))
    assert said == "UsageError: unknown option --max-calsl: did you mean --max-calls?"
    said = _error(kernel.run("%%orchestrate --frobnicate\n1"))
    assert said == "UsageError: unknown option --frobnicate: %%orchestrate --help lists its options"


def test_list_options_take_commas_and_spaces_alike(kernel: Kernel) -> None:
    kernel.ok("x, y = 1, 2\n@tool\ndef double(n: int) -> int:\n    return 2 * n")
    assert kernel.ok("%%orchestrate --in x y --tools add double\ndouble(add(x, y))").value == "6"
    assert kernel.ok("%%orchestrate --in x,y --tools add,double\ndouble(add(x, y))").value == "6"
    # a comma splits requirements only where a new name starts: `>=2,<3` and `[a,b]` stay
    said = _error(kernel.run("%%sandbox --packages rich,pandas>=2,<3,numpy[a,b] bad/name\n1"))
    assert said == "InvalidPackageError: invalid pip requirement 'bad/name'", said
    said = _error(kernel.run("%%sandbox --packages matplotlib,pandas>=2,<3,bad/name\n1"))
    assert said == "InvalidPackageError: invalid pip requirement 'bad/name'", said


def test_sizes_take_their_unit_everywhere(kernel: Kernel) -> None:
    assert kernel.ok("%%orchestrate --max-memory 1g --max-output 512k\nadd(1, 2)").value == "3"
    kernel.ok("%config OrchestrateMagics.max_memory = '2g'")
    assert kernel.ok("%config OrchestrateMagics.max_memory").value == "2048"
    kernel.ok("%config OrchestrateMagics.max_memory = 300")  # a bare number: MB, as before
    assert kernel.ok("%config OrchestrateMagics.max_memory").value == "300"
    kernel.ok("%config SandboxMagics.memory = 512")
    assert kernel.ok("%config SandboxMagics.memory").value == "'512m'"
    said = _error(kernel.run("%%orchestrate --max-memory 2x\n1"))
    assert said == (
        "UsageError: --max-memory: bad size '2x': use a size with its unit"
        " (256m, 2g) or a bare number of MB"
    )
