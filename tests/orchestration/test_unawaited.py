"""`_unawaited.held_call`: which un-awaited call a variable holds, read from
the cell's syntax only; anything it cannot read plainly gives None (the checker's span stays).
The message through a real type check is in tests/magics/test_cell_errors.py."""

from __future__ import annotations

import pytest

from jupyter_sandbox.orchestration._unawaited import Source, held_call


def test_the_last_assignment_before_the_use_is_the_one() -> None:
    code = "text = other(1)\ntext = fetch_page(2)\nword_count(text)\ntext = other(3)"
    assert held_call(code, "text", 3) == Source("fetch_page", "fetch_page(2)", 2, 7, 20)


def test_aliases_are_followed_and_a_cycle_ends() -> None:
    assert held_call("a = f(1)\nb = a\nc = b\ng(c)", "c", 4) == Source("f", "f(1)", 1, 4, 8)
    assert held_call("a = b\nb = a\ng(a)", "a", 3) is None


def test_columns_count_characters_not_bytes() -> None:
    found = held_call("été = 1; t = f('é')\ng(t)", "t", 2)
    assert found is not None
    assert (found.column, found.end_column, found.text) == (13, 19, "f('é')")


def test_a_top_level_await_parses() -> None:
    code = "x = await f(1)\ny = f(2)\ng(y)"
    assert held_call(code, "y", 3) == Source("f", "f(2)", 2, 4, 8)


@pytest.mark.parametrize(
    ("code", "name", "row"),
    [
        ("def (:\n", "x", 2),  # not Python
        ("x = 1\ng(x)", "x", 2),  # not a call
        ("x, y = f(1), f(2)\ng(x)", "x", 2),  # a tuple target
        ("for x in f():\n    g(x)", "x", 2),  # a loop target
        ("g(x)\nx = f(1)", "x", 1),  # bound after the use
        ("x = f(\n  1)\ng(x)", "x", 3),  # a call over two lines: no one-line caret
        ("x = await f(1)\ng(x)", "x", 2),  # awaited: not this mistake
    ],
)
def test_anything_else_is_none(code: str, name: str, row: int) -> None:
    assert held_call(code, name, row) is None
