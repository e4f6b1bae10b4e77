"""The type-check cache (issue 12) against real Monty workers: an unchanged cell with unchanged
tools is checked once; a change to anything the checker reads (a tool's signature, an input's
type, a session variable's type, the code, Monty's version) is checked again, so a type error
is still reported after a cached success of another version."""

from __future__ import annotations

import uuid

import pytest

from jupyter_sandbox.errors import OrchestrationError, TypeCheckError
from jupyter_sandbox.orchestrate import _typecheck, orchestrate
from jupyter_sandbox.orchestrate._driver import Driver
from jupyter_sandbox.orchestrate._sessions import sessions


def add(x: int, y: int) -> int:
    return x + y


@pytest.fixture
def checks(monkeypatch):
    """How many times Monty's checker ran (the real check, counted), from an empty cache."""
    _typecheck.passed.clear()
    ran = []
    real = Driver._checked_apart

    def counted(self, session):
        ran.append(self.code)
        return real(self, session)

    monkeypatch.setattr(Driver, "_checked_apart", counted)
    yield ran
    _typecheck.passed.clear()


@pytest.fixture
def name():
    fresh = f"t{uuid.uuid4().hex[:8]}"
    yield fresh
    sessions.drop("tests", fresh)


def test_an_unchanged_cell_is_checked_once(checks):
    for _ in range(3):
        assert orchestrate("add(1, 2)", tools=[add]).value == 3
    assert checks == ["add(1, 2)"]
    orchestrate("add(1, 2)", tools=[add], type_check=False)
    assert len(checks) == 1


def test_a_rejected_cell_is_checked_every_time(checks):
    for _ in range(2):
        with pytest.raises(TypeCheckError, match="Expected `int`"):
            orchestrate("add('a', 2)", tools=[add])
    assert len(checks) == 2


def test_a_changed_tool_signature_is_checked_again(checks):
    calls = []

    def act(x: int) -> int:
        calls.append(x)
        return x

    assert orchestrate("act(1)", tools=[act]).value == 1

    def act(x: str) -> int:
        calls.append(x)
        return 0

    with pytest.raises(TypeCheckError):
        orchestrate("act(1)", tools=[act])
    assert calls == [1]  # the rejected run called no tool
    assert len(checks) == 2


def test_a_changed_input_type_is_checked_again(checks):
    assert orchestrate("add(x, 1)", tools=[add], inputs={"x": 1}).value == 2
    assert orchestrate("add(x, 1)", tools=[add], inputs={"x": 5}).value == 6  # same type: hit
    with pytest.raises(TypeCheckError):  # unchecked, it would fail later, as a TypeError
        orchestrate("add(x, 1)", tools=[add], inputs={"x": "text"})
    assert len(checks) == 2


def test_a_changed_session_variable_type_is_checked_again(checks, name):
    def run(code: str):
        return orchestrate(code, tools=[add], session=name, scope="tests")

    run("v = 1")
    assert run("add(v, 1)").value == 2
    run("v = 'text'")
    with pytest.raises(TypeCheckError, match="found `str`"):
        run("add(v, 1)")
    assert checks.count("add(v, 1)") == 2


def test_changed_code_is_checked_again(checks):
    assert orchestrate("add(1, 2)", tools=[add]).value == 3
    with pytest.raises(TypeCheckError):
        orchestrate("add(1, '2')", tools=[add])
    assert len(checks) == 2


def test_the_key_changes_with_each_part(monkeypatch, name):
    base = _typecheck.key("def f(x: int) -> int: ...\n", "f(1)", None)
    assert base == _typecheck.key("def f(x: int) -> int: ...\n", "f(1)", None)
    assert base != _typecheck.key("def f(x: str) -> int: ...\n", "f(1)", None)
    assert base != _typecheck.key("def f(x: int) -> int: ...\n", "f(2)", None)
    # parts are length-prefixed: moving text from the stubs to the code is another key
    assert base != _typecheck.key("def f(x: int) -> int: ...\nf", "(1)", None)
    monkeypatch.setattr(_typecheck, "_VERSION", b"0.0.0")
    assert base != _typecheck.key("def f(x: int) -> int: ...\n", "f(1)", None)


def test_the_cache_keeps_the_most_recently_used():
    kept = _typecheck.Passed(size=2)
    kept.add(b"a")
    kept.add(b"b")
    assert b"a" in kept  # now the most recent
    kept.add(b"c")
    assert b"b" not in kept
    assert b"a" in kept
    assert b"c" in kept


def test_a_cell_the_check_lets_pass_still_fails_at_run_time(checks):
    """The cache skips only the check: a cached cell runs, and its errors are its own."""
    code = "add(1, 2)\nadd(1, [][0])"
    for _ in range(2):
        with pytest.raises(OrchestrationError, match="IndexError"):
            orchestrate(code, tools=[add])
    assert len(checks) == 1
