"""The type-check cache against real Monty workers: an unchanged cell with unchanged
tools is checked once; a change to anything the checker reads (a tool's signature, an input's
type, a session variable's type, the code, Monty's version) is checked again, so a type error
is still reported after a cached success of another version. The stubs kept by what they are
written from (`_stubs.kept`) are written again when a tool changes in place (its annotations,
code, defaults, a name its string annotations read, its wrapped function, its signature): each
such change gives the stubs written from nothing, and Monty rejects the cell."""

from __future__ import annotations

import functools
import gc
import inspect
import uuid
import weakref
from collections.abc import Callable
from typing import Annotated, Any

import pytest

from jupyter_sandbox.errors import OrchestrationError, TypeCheckError
from jupyter_sandbox.orchestration import Tool, _stubs, _typecheck, build_stubs, orchestrate
from jupyter_sandbox.orchestration._driver import Driver
from jupyter_sandbox.orchestration.durable._sessions import sessions


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


# -- the stubs kept by what they are written from (`_stubs.kept`, `_stub_key`) -----------------


def _defined(source: str, future: bool = True) -> dict[str, Any]:
    """A module's namespace, as a notebook cell or an imported module would define it."""
    namespace: dict[str, Any] = {"__name__": "tools_module"}
    header = "from __future__ import annotations\n" if future else ""
    exec(compile(header + source, "<tools>", "exec", dont_inherit=True), namespace)
    return namespace


def _edit_annotations() -> tuple[Tool, Callable[[], None]]:
    act = _defined("def act(x: int) -> int:\n    return x\n", future=False)["act"]
    return Tool(act), lambda: act.__annotations__.__setitem__("x", str)


def _replace_code() -> tuple[Tool, Callable[[], None]]:
    def act(x: int) -> int:
        return x

    def two(x: int, y: int) -> int:
        return x + y

    return Tool(act), lambda: setattr(act, "__code__", two.__code__)


def _drop_default() -> tuple[Tool, Callable[[], None]]:
    def act(x: int, y: int = 0) -> int:
        return x + y

    return Tool(act), lambda: setattr(act, "__defaults__", None)


def _drop_keyword_default() -> tuple[Tool, Callable[[], None]]:
    def act(x: int, *, y: int = 0) -> int:
        return x + y

    return Tool(act), lambda: setattr(act, "__kwdefaults__", None)


def _rebind_string_annotation() -> tuple[Tool, Callable[[], None]]:
    module = _defined("Num = int\ndef act(x: Num) -> int:\n    return 0\n")
    return Tool(module["act"]), lambda: module.__setitem__("Num", str)


def _rebind_alias_of_alias() -> tuple[Tool, Callable[[], None]]:
    module = _defined('Inner = int\nNum = "Inner"\ndef act(x: Num) -> int:\n    return 0\n')
    return Tool(module["act"]), lambda: module.__setitem__("Inner", str)


def _rebind_string_in_generic() -> tuple[Tool, Callable[[], None]]:
    module = _defined('Item = int\ndef act(x: list["Item"]) -> int:\n    return 0\n', False)
    return Tool(module["act"]), lambda: module.__setitem__("Item", str)


def _rebind_string_in_string() -> tuple[Tool, Callable[[], None]]:
    module = _defined('Item = int\ndef act(x: list["Item"]) -> int:\n    return 0\n')
    return Tool(module["act"]), lambda: module.__setitem__("Item", str)


def _edit_method() -> tuple[Tool, Callable[[], None]]:
    class Client:
        def act(self, x: int) -> int:
            return x

    return Tool(Client().act), lambda: Client.act.__annotations__.__setitem__("x", "str")


def _change_wrapped() -> tuple[Tool, Callable[[], None]]:
    def act(x: int, y: int = 0) -> int:
        return x + y

    @functools.wraps(act)
    def logged(*args: Any, **kwargs: Any) -> Any:
        return act(*args, **kwargs)

    return Tool(logged), lambda: setattr(act, "__defaults__", None)


def _replace_signature() -> tuple[Tool, Callable[[], None]]:
    def act(*args: Any) -> int:
        return 0

    def signature(*names: str) -> inspect.Signature:
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
        return inspect.Signature([inspect.Parameter(n, kind) for n in names])

    act.__signature__ = signature("x")  # type: ignore[attr-defined]
    return Tool(act), lambda: setattr(act, "__signature__", signature("x", "y"))


@pytest.mark.parametrize(
    "change",
    [
        _edit_annotations,
        _replace_code,
        _drop_default,
        _drop_keyword_default,
        _rebind_string_annotation,
        _rebind_alias_of_alias,
        _rebind_string_in_generic,
        _rebind_string_in_string,
        _edit_method,
        _change_wrapped,
        _replace_signature,
    ],
)
def test_a_tool_changed_in_place_is_written_and_checked_again(checks, change):
    """The same `Tool` object, its function changed after a cell passed: the stubs are
    written again (equal to stubs written from nothing) and Monty rejects the cell."""
    tool, edit = change()
    code = (
        "act([1])" if change in (_rebind_string_in_generic, _rebind_string_in_string) else "act(1)"
    )
    assert orchestrate(code, tools=[tool]).error is None
    assert orchestrate(code, tools=[tool]).error is None
    edit()
    kept_stubs = build_stubs({"act": tool}, {})
    _stubs.kept.clear()
    assert kept_stubs == build_stubs({"act": tool}, {})
    with pytest.raises(TypeCheckError):
        orchestrate(code, tools=[tool])
    assert len(checks) == 2


def test_an_input_held_as_a_handle_has_other_stubs_than_data():
    tools = {"add": Tool(add)}
    data, handles = build_stubs(tools, {"x": [1]}), build_stubs(tools, {"x": [object()]})
    assert data != handles
    _stubs.kept.clear()
    assert (data, handles) == (
        build_stubs(tools, {"x": [1]}),
        build_stubs(tools, {"x": [object()]}),
    )


def test_a_tool_renamed_bound_or_made_async_has_its_own_stubs():
    class Client:
        def act(self, x: int) -> int:
            return x

    assert "def act(self: Any, x: int)" in build_stubs({"act": Tool(Client.act)}, {})
    assert "def act(x: int)" in build_stubs({"act": Tool(Client().act)}, {})
    assert "def plus(x: int, y: int)" in build_stubs({"plus": Tool(add, "plus")}, {})
    assert "\ndef add(x: int, y: int)" in build_stubs({"add": Tool(add)}, {})
    swapped = Tool(add)
    swapped.is_async = True
    assert "async def add(x: int, y: int)" in build_stubs({"add": swapped}, {})


def test_a_freed_objects_id_reused_is_not_mistaken_for_it():
    """Keys name objects by id and keep them alive: a function freed and another made in
    its place (often at its address) never gets the stubs of the first."""
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    for i in range(50):
        name = "x" * (1 + i % 2)  # all that differs: the signature object's parameter

        def act(*args):
            return 0

        act.__signature__ = inspect.Signature([inspect.Parameter(name, kind)])
        assert f"def act({name}: Any) -> Any" in build_stubs({"act": Tool(act)}, {})
        del act


def test_a_freed_class_id_reused_is_not_mistaken_for_it():
    """The same for an input's class, which the kept stubs hold weakly: a class freed and
    another made in its place is declared under its own name."""
    tools = {"add": Tool(add)}
    for i in range(50):
        name = "A" * (1 + i % 2)
        handle = type(name, (), {})()
        assert f"\nx: {name}\n" in build_stubs(tools, {"x": handle})
        del handle
        gc.collect()


def test_a_tool_with_an_unhashable_annotation_is_written_each_time(checks):
    def act(x: Annotated[int, {"unit": "m"}]) -> int:
        return x

    assert "def act(x: int) -> int" in build_stubs({"act": Tool(act)}, {})
    assert orchestrate("act(1)", tools=[act]).value == 1
    with pytest.raises(TypeCheckError):
        orchestrate("act('1')", tools=[act])


def test_a_tool_without_a_key_is_written_each_time():
    """A callable object has no key (`_stub_key`): its stubs follow its class as it changes."""

    class Counter:
        def __call__(self, x):
            return x

    tools = {"count": Tool(Counter(), "count")}
    assert "def count(x: Any) -> Any" in build_stubs(tools, {})
    Counter.__call__ = lambda self, x, y: x + y  # type: ignore[method-assign]
    assert "def count(x: Any, y: Any) -> Any" in build_stubs(tools, {})


def test_kept_stubs_do_not_keep_a_replaced_tool_alive():
    """A tool redefined in a notebook frees the old function and what its closure holds,
    although the stubs written from it are still kept."""

    class Big:
        pass

    def define() -> tuple[Tool, weakref.ref[Big]]:
        held = Big()

        def act(x: int) -> int:
            return x if held else 0

        return Tool(act), weakref.ref(held)

    tool, held = define()
    build_stubs({"act": tool}, {"big": Big()})
    del tool
    gc.collect()
    assert held() is None
