"""Code written for Flyte 2's ``flyte.sandbox`` runs on ours with the import swapped.

Flyte's signatures are recorded here as data, from its source (``src/flyte/sandbox/`` of
flyteorg/flyte-sdk) and documentation: Flyte need not be installed. Every difference is listed
with its reason; a new one fails until it is listed (and the porting table in
docs/reference/sandbox.md says why). Below them, the behaviours Flyte's own sandbox tests check
(``orchestrate_local``, ``flyte_map``, ``orchestrator_from_str``, ``@env.sandbox.orchestrator``,
``create()``'s validation), written as Flyte's users write them, run on real Monty workers and,
for a sandbox, a real Docker engine.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import inspect
import threading
import time
from inspect import Parameter
from typing import Any, Optional

import pytest

from jupyter_sandbox import (
    Dir,
    File,
    LimitExceeded,
    OrchestrationError,
    SandboxConfigError,
    Tool,
    ToolError,
    create,
    orchestrate,
    orchestrate_local,
    orchestrator,
    orchestrator_from_str,
)

P, K = Parameter.POSITIONAL_OR_KEYWORD, Parameter.KEYWORD_ONLY
REQUIRED = Parameter.empty

FLYTE_CREATE: list[tuple[str, Any, Any]] = [
    ("name", P, None),
    ("code", K, None),
    ("inputs", K, None),
    ("outputs", K, None),
    ("command", K, None),
    ("arguments", K, None),
    ("packages", K, None),
    ("system_packages", K, None),
    ("additional_commands", K, None),
    ("resources", K, None),
    ("image_config", K, None),
    ("image_name", K, None),
    ("image", K, None),
    ("auto_io", K, True),
    ("retries", K, 0),
    ("timeout", K, None),
    ("env_vars", K, None),
    ("secrets", K, None),
    ("cache", K, "auto"),
]
"""``flyte.sandbox.create``: ``name``, then keyword-only parameters."""

FLYTE_ORCHESTRATE_LOCAL: list[tuple[str, Any, Any]] = [
    ("source", P, REQUIRED),
    ("inputs", K, REQUIRED),
    ("tasks", K, None),
    ("timeout_ms", K, 30_000),
]
"""``flyte.sandbox.orchestrate_local(source, *, inputs, tasks=None, timeout_ms=30_000)``."""

FLYTE_ORCHESTRATOR_FROM_STR: list[tuple[str, Any, Any]] = [
    ("source", P, REQUIRED),
    ("inputs", K, REQUIRED),
    ("output", K, type(None)),
    ("tasks", K, None),
    ("name", K, "sandboxed-code"),
    ("timeout_ms", K, 30_000),
    ("cache", K, "disable"),
    ("retries", K, 0),
    ("image", K, None),
]
"""``flyte.sandbox.orchestrator_from_str``: ``source``, then keyword-only parameters."""

FROM_STR_DIFFERENCES = {
    "output": "default None: the last expression's value, of any type (Flyte's NoneType drops it)",
    "cache": "absent: each call runs the body; orchestrate(cache=ToolCache()) caches tool calls",
    "image": "absent: the body runs in this process's Monty, in no container image",
}
FROM_STR_EXTRAS = {"tools", "max_memory", "max_stack_depth", "type_check", "limits", "show"}
"""Keywords of ours: Flyte's other sandbox limits (its `SandboxedConfig`) and our own."""

CREATE_DIFFERENCES = {
    "image_config": "absent: registries and Python versions are Flyte's image builder's",
    "image_name": "absent: images are named by their content hash, never pushed",
    "cache": "default 'disable': a notebook re-runs a cell to run it again",
}
"""Flyte parameters we lack or default otherwise (the README's table gives the same reasons)."""
OUR_EXTRAS = {"base_image", "network", "cluster", "isolation", "ca_bundle"}
"""Keyword-only parameters of ours that Flyte lacks."""


def shape(function: Any) -> dict[str, tuple[Any, Any]]:
    return {name: (p.kind, p.default) for name, p in inspect.signature(function).parameters.items()}


@pytest.mark.parametrize(
    ("function", "flyte", "differences", "extras"),
    [
        (create, FLYTE_CREATE, CREATE_DIFFERENCES, OUR_EXTRAS),
        (orchestrate_local, FLYTE_ORCHESTRATE_LOCAL, {}, set()),
        (orchestrator_from_str, FLYTE_ORCHESTRATOR_FROM_STR, FROM_STR_DIFFERENCES, FROM_STR_EXTRAS),
    ],
    ids=["create", "orchestrate_local", "orchestrator_from_str"],
)
def test_flyte_names_kinds_and_defaults_hold(
    function: Any,
    flyte: list[tuple[str, Any, Any]],
    differences: dict[str, str],
    extras: set[str],
) -> None:
    ours = shape(function)
    differ = set()
    for name, kind, default in flyte:
        if name not in ours:
            differ.add(name)
            continue
        assert ours[name][0] == kind, name  # a kind that differs breaks callers: never listed
        if ours[name][1] != default:
            differ.add(name)
    assert differ == set(differences)
    flyte_names = [name for name, _, _ in flyte if name in ours]
    assert [n for n in ours if n in flyte_names] == flyte_names  # same order
    assert set(ours) - {name for name, _, _ in flyte} == extras
    assert all(ours[name][0] == K for name in extras)


def add(x: int, y: int) -> int:
    return x + y


def test_flytes_orchestrate_local_example_runs() -> None:
    """The example on Flyte's "Workflow sandboxing" page, as written there."""
    result = asyncio.run(
        orchestrate_local("add(x, y) * 2", inputs={"x": 1, "y": 2}, tasks=[Tool(add, name="add")])
    )
    assert result == 6


def test_timeout_ms_is_milliseconds_and_a_bad_one_is_named() -> None:
    slow = "n = 0\nwhile True:\n    n += 1"
    with pytest.raises(LimitExceeded, match=r"time limit exceeded.* 0\.2 s"):
        asyncio.run(orchestrate_local(slow, inputs={}, timeout_ms=200))
    with pytest.raises(SandboxConfigError, match=r"^timeout_ms must be .* got -5$"):
        asyncio.run(orchestrate_local("1", inputs={}, timeout_ms=-5))


def test_create_takes_only_the_name_positionally() -> None:
    with pytest.raises(TypeError):
        create("s", "print(1)")  # type: ignore[call-arg]
    assert create(code="pass").name == "sandbox"  # Flyte's name when none is given


def test_a_sandbox_definition_is_frozen() -> None:
    sandbox = create("s", code="y = x", inputs={"x": int}, outputs={"y": int})
    assert dataclasses.is_dataclass(sandbox)
    with pytest.raises(dataclasses.FrozenInstanceError):
        sandbox.timeout = 1  # type: ignore[misc]


# -- orchestrate_local, as Flyte's tests call it -------------------------------------------


def local(source: str, **inputs: Any) -> Any:
    return asyncio.run(orchestrate_local(source, inputs=inputs))


@pytest.mark.parametrize(
    ("source", "inputs", "value"),
    [
        ("x + y", {"x": 1, "y": 2}, 3),
        ("name + ' world'", {"name": "hello"}, "hello world"),
        ("[x, y, x + y]", {"x": 1, "y": 2}, [1, 2, 3]),
        ("", {}, None),
        ("   \n  \n  ", {}, None),
        (
            """
            a = x + 1
            b = y + 2
            a * b
            """,
            {"x": 2, "y": 3},
            15,
        ),
        (
            """
            def classify(x):
                if x > 0:
                    return "positive"
                else:
                    return "non-positive"
            classify(x)
            """,
            {"x": 5},
            "positive",
        ),
    ],
    ids=["expression", "string", "list", "empty", "blank", "indented", "indented-def"],
)
def test_orchestrate_local_returns_the_last_expression(
    source: str, inputs: dict[str, Any], value: Any
) -> None:
    assert local(source, **inputs) == value


def test_code_indented_as_a_whole_runs_at_every_door() -> None:
    indented = """
        total = 0
        for n in items:
            total = total + n
        total
    """
    assert orchestrate(indented, inputs={"items": [1, 2, 3]}).value == 6
    summed = orchestrator_from_str(indented, inputs={"items": list[int]}, output=int)
    assert summed([4, 5]) == 9
    with pytest.raises(OrchestrationError, match="missing_name") as raised:
        orchestrate("\n    x = 1\n    y = 2\n\n    missing_name\n")
    assert "line 5" in raised.value.sandbox_traceback  # the lines as written


def test_code_with_a_line_at_the_margin_is_left_as_written() -> None:
    """Only code that could not run is unindented: a string literal keeps its spaces."""
    code = 'text = """\n    kept\n"""\ntext'
    assert orchestrate(code).value == "\n    kept\n"


def double(x: int) -> int:
    return x * 2


def plus(x: int, y: int) -> int:
    return x + y


def test_tasks_are_orchestrators_or_plain_functions_called_in_loops() -> None:
    doubler = orchestrator(double)
    looped = """
        doubled = []
        for item in items:
            doubled.append(double(item))
        plus(doubled[0], doubled[1])
    """
    value = asyncio.run(orchestrate_local(looped, inputs={"items": [3, 7]}, tasks=[doubler, plus]))
    assert value == 20


def test_two_tasks_under_one_name_are_refused_and_one_listed_twice_is_one() -> None:
    def other(x: int) -> int:
        return x

    other.__name__ = "double"
    with pytest.raises(ValueError, match=r"^duplicate tool name 'double' in tools="):
        asyncio.run(orchestrate_local("double(1)", inputs={}, tasks=[double, other]))
    assert asyncio.run(orchestrate_local("double(1)", inputs={}, tasks=[double, double])) == 2


# -- flyte_map -----------------------------------------------------------------------------


def mapped(source: str, tasks: list[Any], **inputs: Any) -> Any:
    return asyncio.run(orchestrate_local(source, inputs=inputs, tasks=tasks))


@pytest.mark.parametrize(
    ("source", "inputs", "value"),
    [
        ('list(flyte_map("double", items))', {"items": [1, 2, 3]}, [2, 4, 6]),
        ('flyte_map("double", items)', {"items": []}, []),
        ('flyte_map("plus", xs, ys)', {"xs": [1, 2, 3], "ys": [10, 20, 30]}, [11, 22, 33]),
        (
            'flyte_map("double", items, concurrency=2, group_name="batch")',
            {"items": [1, 2]},
            [2, 4],
        ),
        (
            """
            total = 0
            for r in flyte_map("double", items):
                total = total + r
            plus(total, 1)
            """,
            {"items": [1, 2, 3]},
            13,
        ),
    ],
    ids=["one-list", "empty", "zipped", "keywords", "with-other-calls"],
)
def test_flyte_map_maps_a_task_by_name(source: str, inputs: dict[str, Any], value: Any) -> None:
    assert mapped(source, [orchestrator(double), plus], **inputs) == value


def test_flyte_map_puts_each_failure_in_its_place_or_raises_it() -> None:
    def maybe_fail(x: int) -> int:
        if x == 2:
            raise ValueError("bad value")
        return x * 10

    first, failed, last = mapped('flyte_map("maybe_fail", items)', [maybe_fail], items=[1, 2, 3])
    assert (first, last) == (10, 30)
    assert isinstance(failed, ValueError) and str(failed) == "bad value"
    with pytest.raises(ToolError, match="bad value"):
        mapped('flyte_map("maybe_fail", [2], return_exceptions=False)', [maybe_fail])
    with pytest.raises(ToolError, match=r"unknown task 'nonexistent'; the tasks are: maybe_fail"):
        mapped('flyte_map("nonexistent", [1])', [maybe_fail])


def test_flyte_map_runs_at_most_concurrency_calls_at_once() -> None:
    lock, running, most = threading.Lock(), [0], [0]

    def slow(x: int) -> int:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        return x

    assert mapped('flyte_map("slow", items, concurrency=2)', [slow], items=list(range(6))) == [
        *range(6)
    ]
    assert most[0] == 2
    assert mapped('flyte_map("slow", items)', [slow], items=list(range(4))) == [0, 1, 2, 3]
    assert most[0] == 4  # concurrency=0, Flyte's default: all at once


def test_flyte_map_is_there_only_for_code_that_names_it() -> None:
    assert set(orchestrator_from_str("double(x)", inputs={"x": int}, tasks=[double]).tools) == {
        "double"
    }
    named = orchestrator_from_str(
        'flyte_map("double", items)', inputs={"items": list[int]}, tasks=[double]
    )
    assert set(named.tools) == {"double", "flyte_map"}
    assert named([5]) == [10]
    with pytest.raises(OrchestrationError, match="flyte_map"):
        orchestrate('flyte_map("double", [1])', tools=[double])  # our own door: not Flyte's


# -- orchestrator_from_str and @env.sandbox.orchestrator -----------------------------------


def test_orchestrator_from_str_defaults_to_flytes_name_and_binds_like_a_function() -> None:
    pipeline = orchestrator_from_str("x + y", inputs={"x": int, "y": int}, output=int)
    assert pipeline.name == "sandboxed-code"  # Flyte's, as its own tests check
    assert pipeline.key == "sandboxed_code"  # what code calls it by: an identifier
    assert orchestrator_from_str("1", inputs={}, name="my-code").name == "my-code"
    assert pipeline(1, 2) == pipeline(x=1, y=2) == 3
    assert orchestrator("x", inputs={"x": int}).name == "sandboxed-code"
    calling = orchestrate("sandboxed_code(1, 2) * 2", tools=[pipeline])
    assert calling.value == 6 and calling.trace[0].tool == "sandboxed_code"
    assert orchestrator_from_str(source="1 + 1", inputs={})() == 2


def test_retries_run_a_call_again_only_when_a_tool_failed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    calls: list[int] = []

    def flaky(x: int) -> int:
        calls.append(x)
        if len(calls) < 3:
            raise ConnectionError("try again")
        return x

    @orchestrator(tools=[flaky], timeout_ms=5_000, retries=2)
    def fetch(x: int) -> int:
        return flaky(x)

    assert fetch(7) == 7 and len(calls) == 3
    assert (
        "fetch: retry 2 of 2 after tool 'flaky' raised ConnectionError" in capsys.readouterr().err
    )
    calls.clear()
    once = orchestrator_from_str("flaky(x)", inputs={"x": int}, tasks=[flaky], retries=1)
    with pytest.raises(ToolError, match="try again"):
        once(1)
    assert len(calls) == 2
    broken = orchestrator_from_str("x // 0", inputs={"x": int}, retries=5)
    with pytest.raises(OrchestrationError, match="ZeroDivisionError") as raised:
        broken(1)
    assert not isinstance(raised.value, ToolError)  # the body's own error: never run again
    with pytest.raises(SandboxConfigError, match=r"^retries must be"):
        orchestrator_from_str("x", inputs={"x": int}, retries=-1)


def test_forward_runs_the_function_itself_and_a_code_string_has_none() -> None:
    @orchestrator(tools=[double])
    def doubled(x: int) -> int:
        return double(x)

    assert doubled.forward(5) == 10
    with pytest.raises(NotImplementedError, match="does not support forward"):
        orchestrator_from_str("x", inputs={"x": int}).forward(x=1)


def test_what_a_body_does_is_what_the_function_does() -> None:
    @orchestrator
    def noop(x: int) -> None:
        _ = x + 1

    @orchestrator
    def branching(x: int) -> int:
        if x > 0:
            return x
        return -x

    @orchestrator
    async def greet(name: str) -> str:
        return f"hello {name}"

    assert noop(1) is None
    assert (branching(3), branching(-3)) == (3, 3)
    assert asyncio.run(greet("flyte")) == "hello flyte"


def test_generators_are_refused_when_defined() -> None:
    def numbers(x: int) -> Any:
        yield x

    async def stream(x: int) -> Any:
        yield x

    with pytest.raises(SandboxConfigError, match=r"cannot be generators: .*numbers\(\) yields"):
        orchestrator(numbers)
    with pytest.raises(SandboxConfigError, match="cannot be async generators"):
        orchestrator(stream)
    with pytest.raises(OrchestrationError, match="does not yet support yield"):  # not Monty's own
        orchestrator_from_str("def g():\n    yield 1\nlist(g())", inputs={})


class Opaque:
    """A type Flyte refuses at its task boundary; ours passes it through as a handle."""


@pytest.mark.parametrize(
    ("annotation", "value"),
    [
        (bytes, b"\x00raw"),
        (type(None), None),
        (set[int], {1, 2}),
        (tuple[int, str], (1, "a")),
        (dict[str, list[float]], {"a": [1.5]}),
        (Optional[int], None),  # noqa: UP045  # Flyte's tests spell it so
        (list[dict[str, int]], [{"a": 1}]),
        (Opaque, Opaque()),
    ],
    ids=lambda v: getattr(v, "__name__", None) or str(v)[:20],
)
def test_flytes_boundary_types_pass_through_unchanged(annotation: Any, value: Any) -> None:
    echo = orchestrator_from_str("a", inputs={"a": annotation}, output=annotation)
    assert echo(value) == value if not isinstance(value, Opaque) else echo(value) is value


def test_file_and_dir_are_orchestrator_types() -> None:
    passthrough = orchestrator_from_str("f", inputs={"f": File}, output=File)
    assert passthrough(File("/tmp/x.txt")) == File("/tmp/x.txt")
    assert orchestrator_from_str("d", inputs={"d": Dir}, output=Dir)(Dir("/tmp")) == Dir("/tmp")


# -- create()'s validation -----------------------------------------------------------------


def test_create_refuses_code_with_command_and_a_type_it_cannot_carry() -> None:
    with pytest.raises(ValueError, match="mutually exclusive"):
        create(code="x = 1", command=["echo", "hi"])
    with pytest.raises(SandboxConfigError, match=r"^input 'x': unsupported type"):
        create(name="sb", code="pass", inputs={"x": set})
    with pytest.raises(SandboxConfigError, match=r"^output 'result': unsupported type"):
        create(name="sb", code="pass", outputs={"result": complex})
    with pytest.raises(SandboxConfigError, match=r"^code= takes Python as a str, got int"):
        create(code=5)  # type: ignore[arg-type]
    with pytest.raises(SandboxConfigError, match=r"^give code= .* or command="):
        create(name="sb")  # Flyte would run the image's ENTRYPOINT: ours asks which program


@pytest.mark.parametrize(
    "kind", [int, float, str, bool, datetime.datetime, datetime.timedelta, File, Dir]
)
def test_flytes_documented_types_are_accepted_both_ways(kind: type) -> None:
    create("t", code="pass", inputs={"val": kind}, outputs={"out": kind})


def test_create_keeps_the_settings_it_was_given() -> None:
    sandbox = create("sb", code="x = 1", image="myregistry/myimage:latest", env_vars={"FOO": "bar"})
    assert (sandbox.code, sandbox.image, sandbox.env_vars) == (
        "x = 1",
        "myregistry/myimage:latest",
        {"FOO": "bar"},
    )
    assert [create("s", code="pass", cache=c).cache for c in ("auto", "override", "disable")] == [
        "auto",
        "override",
        "disable",
    ]


@pytest.mark.docker
@pytest.mark.usefixtures("no_leaked_containers")
def test_indented_auto_io_code_runs_in_a_container() -> None:
    doubled = create(
        "double",
        code="""
            result = n * 2
        """,
        inputs={"n": int},
        outputs={"result": int},
    )
    assert doubled.code is not None and "    result" not in doubled.code
    assert doubled.run(n=21) == 42


def test_an_indented_orchestrate_cell_runs_and_stores_its_out(shell: Any) -> None:
    assert shell.run_cell("x = 4").success
    result = shell.run_cell("%%orchestrate --in x --out y\n    z = x * 2\n    y = z + 1\n")
    assert result.success, result.error_in_exec
    assert shell.user_ns["y"] == 9
