"""Handles kept in a ``--session``: an object an earlier cell of the session
was given (``--in df``) or a tool returned reaches the next cell's tools, and its value, as
the object itself, not Monty's stand-in. Real Monty workers; real kernels (killed with
``kill -9``) and a real SQLite store for the reset and restart cases."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from _kernels import TOOLS, Kernel, kernel

from jupyter_sandbox.orchestration import orchestrate
from jupyter_sandbox.orchestration.durable._sessions import sessions


class Frame:
    """An object Monty can only hold as an opaque handle."""

    def __init__(self, label: str) -> None:
        self.label = label


class Calls:
    """Tools that remember what they were given and what they made."""

    def __init__(self) -> None:
        self.seen: list[Any] = []
        self.made: list[Frame] = []

    def tools(self) -> list[Any]:
        def load(label: str) -> Frame:
            frame = Frame(label)
            self.made.append(frame)
            return frame

        def summarize(frame: Any) -> str:
            self.seen.append(frame)
            return str(frame.label)

        return [load, summarize]


@pytest.fixture
def name():
    """A fresh session name, dropped after the test."""
    fresh = f"h{uuid.uuid4().hex[:8]}"
    yield fresh
    sessions.drop("tests", fresh)


def run(code: str, name: str, calls: Calls, **inputs: Any) -> Any:
    return orchestrate(code, tools=calls.tools(), inputs=inputs, session=name, scope="tests")


def test_an_input_handle_reaches_a_tool_in_the_next_cell(name):
    calls, df = Calls(), Frame("data")
    run("d = df\nrows = [df]", name, calls, df=df)
    assert run("summarize(d) + summarize(rows[0])", name, calls).value == "datadata"
    assert calls.seen == [df, df]  # the very object, twice


def test_a_handle_a_tool_returned_reaches_a_tool_in_a_later_cell(name):
    calls = Calls()
    run("f = load('made')", name, calls)
    run("n = 1", name, calls)  # a cell in between dumps the session again
    assert run("summarize(f)", name, calls).value == "made"
    assert calls.seen == calls.made


def test_a_handle_kept_is_a_later_cells_value(name):
    calls, df = Calls(), Frame("data")
    run("f = load('made')\nd = df", name, calls, df=df)
    assert run("f", name, calls).value is calls.made[0]
    assert run("[d, {'f': f}]", name, calls).value == [df, {"f": calls.made[0]}]


def test_an_object_no_longer_held_is_dropped_from_the_session(name):
    calls = Calls()
    for label in "abcde":  # each cell's object replaces the one before
        run(f"f = load({label!r})", name, calls)
    held = sessions.listed("tests")[name].objects
    assert list(held.values()) == [calls.made[-1]]


def test_reset_frees_the_objects_and_a_restart_binds_inputs_by_name(tmp_path):
    store = tmp_path / "store.sqlite"
    setup = (
        "import gc, weakref\n"
        "from jupyter_sandbox import tool\n"
        "class Frame:\n    def __init__(self, label):\n        self.label = label\n"
        "@tool\ndef load(label: str) -> object:\n    return Frame(label)\n"
        "@tool\ndef summarize(frame: object) -> str:\n    return str(frame.label)\n"
    )
    first = Kernel(store)
    try:
        first.ok(TOOLS + setup)
        first.ok("df = Frame('one')")
        # no tool is given `df`: the cell's journal and trace do not hold it, only the session
        first.ok("%%orchestrate --session s --in df --quiet\nd = df\nkept = [df]")
        first.ok("ref = weakref.ref(df)\ndel df\ngc.collect()")
        assert first.ok("ref() is not None").value == "True"  # the session holds it
        first.ok("%%orchestrate --session s --quiet\nn = 1")  # and keeps it past a cell
        assert first.ok("gc.collect()\nref() is not None").value == "True"
        first.ok("%orchestrate_reset s")
        assert first.ok("gc.collect()\nref() is None").value == "True"
        # again, for the restart
        first.ok("df = Frame('one')")
        first.ok("%%orchestrate --session s --in df --quiet\nd = df\nf = load('made')")
        first.kill()
    except BaseException:
        first.close()
        raise
    with kernel(store) as second:
        second.ok(setup)
        missing = second.run("%%orchestrate --session s --quiet\nsummarize(d)")
        assert missing.status == "error"
        assert "notebook variable `df`" in missing.text
        assert "give 'df' to this cell again with --in" in missing.text  # the magic's words
        second.ok("df = Frame('two')")
        rebound = second.ok("%%orchestrate --session s --in df --quiet\nsummarize(d)")
        assert rebound.value == "'two'"  # bound again by name, to the object given now
        lost = second.run("%%orchestrate --session s --quiet\nsummarize(f)")
        assert lost.status == "error" and "load() returned in an earlier cell" in lost.text
        second.ok("df = [3]")
        mistyped = second.run("%%orchestrate --session s --in df --quiet\nsummarize(d)")
        assert mistyped.status == "error" and "`df` to be a __main__.Frame" in mistyped.text
