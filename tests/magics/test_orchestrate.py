"""``%%orchestrate`` in a real IPython shell with real Monty workers."""

from __future__ import annotations

import pytest

from jupyter_sandbox.orchestration import registry

SETUP = """
from jupyter_sandbox import tool

@tool
def add(x: int, y: int) -> int:
    return x + y

@tool
def explode(reason: str) -> int:
    raise RuntimeError("tool blew up: " + reason)

class Frame:
    rows = 3

x, y, frame = 1, 2, Frame()
"""


@pytest.fixture
def nb(shell):
    assert shell.run_cell(SETUP).success
    return shell


def cell(shell, line, body):
    return shell.run_cell(f"%%orchestrate {line}\n{body}")


def test_result_is_the_output_and_stored_under_out(nb):
    result = cell(nb, "--in x,y --out total", "add(x, y) * 2")
    assert result.success
    assert result.result == 6
    assert nb.user_ns["total"] == 6


def test_cell_ending_in_statement_gives_none(nb):
    result = cell(nb, "--out nothing", "z = add(1, 2)")
    assert result.success
    assert result.result is None
    assert nb.user_ns["nothing"] is None


def test_prints_reach_the_cell(nb, capsys):
    assert cell(nb, "", "print('hello from monty')").success
    assert "hello from monty" in capsys.readouterr().out


def test_opaque_values_pass_through_and_come_back(nb):
    assert cell(nb, "--in frame --out same", "frame").success
    assert nb.user_ns["same"] is nb.user_ns["frame"]


def test_tools_option_restricts_the_callable_tools(nb, capsys):
    assert cell(nb, "--tools add", "add(1, 1)").success
    failed = cell(nb, "--tools add --no-type-check", "explode('x')")
    assert not failed.success
    assert "the tools this cell can call are: add" in capsys.readouterr().out


def test_uncaught_tool_error_is_one_readable_error(nb, capsys):
    failed = cell(nb, "", "a = 1\nexplode('now')")
    assert not failed.success
    out = capsys.readouterr().out
    assert 'File "<cell>", line 3' in out  # the editor's line numbers (%%orchestrate is 1)
    assert 'raise RuntimeError("tool blew up: " + reason)' in out  # the host traceback
    assert "ToolError: tool 'explode' raised RuntimeError: tool blew up: now" in out
    assert "_driver.py" not in out
    assert "interactiveshell.py" not in out


def test_type_error_is_rejected_before_tools_run(nb, capsys):
    failed = cell(nb, "", "add(1, 2)\nadd('a', 2)")
    assert not failed.success
    assert "File \"<cell>\", line 3\n    add('a', 2)\n        ^^^\n" in capsys.readouterr().out


def test_limit_error_names_the_limit_and_next_cell_works(nb, capsys):
    assert not cell(nb, "--timeout 1", "while True:\n    pass").success
    assert "time limit exceeded" in capsys.readouterr().out
    assert not cell(nb, "--max-calls 3", "for i in range(5):\n    add(i, i)").success
    assert "tool-call limit exceeded" in capsys.readouterr().out
    assert not cell(nb, "--max-memory 8", "a = []\nwhile True:\n    a.append('x' * 1000)").success
    assert "memory limit exceeded" in capsys.readouterr().out
    assert cell(nb, "", "add(2, 2)").result == 4


def test_config_sets_defaults(nb, capsys):
    nb.run_line_magic("config", "OrchestrateMagics.timeout = 1.0")
    try:
        assert not cell(nb, "", "while True:\n    pass").success
        assert "more than 1 s" in capsys.readouterr().out
    finally:
        nb.run_line_magic("config", "OrchestrateMagics.timeout = 30.0")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("--bogus", "unknown option --bogus: %%orchestrate --help lists its options"),
        ("--in missing", "--in missing: no variable 'missing' in the notebook; define it first"),
        ("--timeout soon", "invalid float value: 'soon'"),
        ("--timeout -1", "--timeout must be a positive number, at most"),
        ("--max-memory 0", "--max-memory must be a positive whole number, at most"),
        ("--max-calls lots", "invalid int value: 'lots'"),
        ("--tools nope", "--tools: nope not registered"),
        ("--out 2bad", "--out 2bad: not a valid Python variable name"),
    ],
)
def test_bad_input_is_a_one_line_usage_error(nb, capsys, line, message):
    result = cell(nb, line, "add(1, 2)")
    assert not result.success
    err = capsys.readouterr().err
    assert err.startswith("UsageError: ")
    assert message in err
    assert err.strip().count("\n") == 0
    assert "Traceback" not in err


def test_unload_removes_the_magic(shell):
    shell.run_line_magic("unload_ext", "jupyter_sandbox")
    try:
        assert "orchestrate" not in shell.magics_manager.magics["cell"]
    finally:
        shell.run_line_magic("load_ext", "jupyter_sandbox")
    assert "orchestrate" in shell.magics_manager.magics["cell"]


def test_registering_in_a_cell_replaces_the_previous_definition(nb):
    nb.run_cell("@tool\ndef add(x: int, y: int) -> int:\n    return x * y")
    assert cell(nb, "", "add(3, 4)").result == 12
    assert registry["add"](3, 4) == 12


FLAKY = """
made = []
broken = {"now": True}

@tool
def step(n: int) -> int:
    made.append(n)
    if n == 2 and broken["now"]:
        raise RuntimeError("flaky")
    return n
"""


def test_resume_reruns_the_cell_without_repeating_completed_calls(nb, capsys):
    assert nb.run_cell(FLAKY).success
    body = "[step(0), step(1), step(2)]"
    assert not cell(nb, "", body).success
    nb.user_ns["broken"]["now"] = False
    resumed = cell(nb, "--resume", body)
    assert resumed.success and resumed.result == [0, 1, 2]
    assert nb.user_ns["made"] == [0, 1, 2, 2]
    assert "replayed" in capsys.readouterr().out


def test_cache_reuses_results_across_cells_only_when_asked(nb):
    assert nb.run_cell(FLAKY).success
    nb.user_ns["broken"]["now"] = False
    assert cell(nb, "--cache", "step(5)").success
    assert cell(nb, "--cache", "step(5) + step(6)").result == 11
    assert nb.user_ns["made"] == [5, 6]
    assert cell(nb, "", "step(5)").success  # without --cache the tool is called
    assert nb.user_ns["made"] == [5, 6, 5]
