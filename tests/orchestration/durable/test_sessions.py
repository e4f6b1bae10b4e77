"""Sessions across cells, with real Monty workers and real kernels: a
session keeps variables, functions and classes; the type check knows them; limits stay the
cell's own; a failed cell leaves the session as it was; the magics list and drop sessions."""

from __future__ import annotations

import uuid

import pytest
from _kernels import kernel

from jupyter_sandbox.errors import LimitExceeded, OrchestrationError, TypeCheckError
from jupyter_sandbox.orchestration import Limits, orchestrate
from jupyter_sandbox.orchestration.durable import _cbor
from jupyter_sandbox.orchestration.durable._sessions import _TRACKER, sessions


def add(x: int, y: int) -> int:
    return x + y


def run(code: str, name: str, inputs: dict | None = None, **limits):
    """``code`` as a cell of session ``name``, under ``limits`` (fields of `Limits`)."""
    return orchestrate(
        code, tools=[add], session=name, scope="tests", inputs=inputs, limits=Limits(**limits)
    )


@pytest.fixture
def name():
    """A fresh session name, dropped after the test."""
    fresh = f"s{uuid.uuid4().hex[:8]}"
    yield fresh
    sessions.drop("tests", fresh)


def test_variables_functions_and_classes_carry_over_and_inputs_stay(name):
    first = (
        "n = add(1, 2)\n"
        "def tenfold(a: int) -> int:\n    return a * 10\n"
        "class Box:\n    def __init__(self, v: int):\n        self.v = v\n"
        "box = Box(4)\n"
        "alias = add\n"
        "n"
    )
    assert run(first, name, inputs={"z": 5}).value == 3
    assert run("alias(tenfold(n), box.v) + z", name).value == 39
    state = sessions.listed("tests")[name]
    assert state.names == {
        "z": "int",
        "n": "int",
        "tenfold": "function",
        "Box": "type",
        "box": "Box",
        "alias": "function",
    }
    assert state.size == len(state.dump) > 0


def test_without_a_session_every_run_is_fresh(name):
    run("kept = 1", name)
    with pytest.raises(OrchestrationError, match="kept"):
        orchestrate("kept", tools=[add])


def test_the_type_check_knows_the_sessions_names_and_types(name):
    run("s = 'text'\ndef tenfold(a: int) -> int:\n    return a * 10\nn = 2", name)
    for wrong, found in (("add(s, 1)", "found `str`"), ("add(tenfold('x'), 1)", "x")):
        with pytest.raises(TypeCheckError) as raised:
            run(wrong, name)
        assert found in str(raised.value)
    assert run("add(tenfold(n), len(s))", name).value == 24
    # this cell's input wins over an earlier cell's declaration of the same name
    run("q = 1", name, inputs={"w": 1})
    with pytest.raises(TypeCheckError):
        run("add(w, 1)", name, inputs={"w": "now text"})


def test_a_cell_may_rebind_a_session_name_to_another_type(name):
    run("n = 1\ndef f(a: int) -> int:\n    return a", name)
    # a name the cell binds is Any to the checker: n = n + 1 and n = "one" both pass
    assert run("n = n + 1\nn", name).value == 2
    assert run("n = 'one'\ndef f(a: str) -> str:\n    return a + '!'\nf(n)", name).value == "one!"
    with pytest.raises(TypeCheckError):  # the next cell knows the new types
        run("add(n, 1)", name)
    with pytest.raises(TypeCheckError):
        run("add(f('x'), 1)", name)


def test_limits_are_each_cells_own(name):
    run("small = 1", name, max_memory=1, timeout=0.5)
    # a later cell gets its own, larger limits (a dump would restore the first cell's)
    assert run("big = [0] * 10**6\nlen(big)", name, max_memory=200, timeout=20).value == 10**6
    with pytest.raises(OrchestrationError, match="memory limit"):  # the worker may be killed
        run("bigger = [0] * 10**6", name, max_memory=1)
    with pytest.raises(LimitExceeded, match="time"):
        run("i = 0\nwhile True:\n    i += 1", name, timeout=0.5)
    assert run("small + len(big)", name).value == 10**6 + 1


def test_limits_are_found_past_a_value_that_looks_like_them(name):
    """The limits are looked for from the end of the dump (`_limits`); a value holding their
    bytes must not be taken for them."""
    look_alike = _TRACKER + _cbor.encode({"max_memory": 10**9})
    run("trap = x", name, inputs={"x": look_alike * 3})
    with pytest.raises(OrchestrationError, match="memory limit"):
        run("more = [0] * 10**6", name, max_memory=1)
    assert run("more = [0] * 10**6\nlen(trap)", name, max_memory=100).value == 3 * len(look_alike)


def test_a_failed_cell_leaves_the_session_as_it_was(name):
    run("x = 1", name)
    with pytest.raises(OrchestrationError, match="ZeroDivisionError"):
        run("x = 5\ny = 1 / 0", name)
    assert run("x", name).value == 1
    assert set(sessions.listed("tests")[name].names) == {"x"}


def test_sessions_are_kept_apart_by_name_and_scope(name):
    run("v = 'a'", name)
    run("v = 'b'", name + "x")
    try:
        assert run("v", name).value == "a"
        with pytest.raises(OrchestrationError, match="'v'"):
            orchestrate("v", session=name, scope="elsewhere")
    finally:
        sessions.drop("tests", name + "x")


def test_magics_keep_list_and_reset_sessions_in_a_real_kernel(tmp_path):
    with kernel(tmp_path / "store.sqlite") as k:
        k.ok("%%orchestrate --session work --quiet\ntotal = add(1, 2)\nnames = ['a']")
        k.ok("%%orchestrate --session work --quiet\nnames.append('b')\ntotal = add(total, 10)")
        third = k.ok("%%orchestrate --session work --quiet\n(total, names)")
        assert third.value == "(13, ['a', 'b'])"
        # the type check knows `total` is an int and `names` a list
        wrong = k.run("%%orchestrate --session work --quiet\nadd(names, 1)")
        assert wrong.status == "error" and "TypeCheckError" in wrong.text
        # no --session: a fresh cell
        fresh = k.run("%%orchestrate --quiet\ntotal")
        assert fresh.status == "error" and "total" in fresh.text
        k.ok("%%orchestrate --session other --quiet\nflag = True")
        listed = k.ok("%orchestrate_sessions").text
        assert "work" in listed and "total: int" in listed and "names: list" in listed
        assert "other" in listed and "flag: bool" in listed
        k.ok("%orchestrate_reset work")
        listed = k.ok("%orchestrate_sessions").text
        assert "work" not in listed and "other" in listed
        gone = k.run("%%orchestrate --session work --quiet\ntotal")
        assert gone.status == "error" and "total" in gone.text
        unknown = k.run("%orchestrate_reset nothing")
        assert unknown.status == "error"
        assert "no session 'nothing' in this notebook; %orchestrate_sessions lists them" in (
            unknown.text
        )
