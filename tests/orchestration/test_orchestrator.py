"""Reusable orchestrators: ``@orchestrator`` and `orchestrator_from_str`, run with
real Monty workers. The seed documents' examples run with only Flyte's names swapped for ours;
the adversarial tests try what a body must not do."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import linecache
import os
import pydoc
import re
import signal
import textwrap
import threading
import time
from typing import Any

import pytest
from _kernels import kernel

from jupyter_sandbox import (
    CodeModeAgent,
    Interrupted,
    LimitExceeded,
    Limits,
    OrchestrationError,
    Orchestrator,
    SandboxConfigError,
    ScriptedLLM,
    ToolError,
    TypeCheckError,
    orchestrate,
    orchestrator,
    orchestrator_from_str,
    tool,
)
from jupyter_sandbox.display._html import render
from jupyter_sandbox.orchestration import NESTING_CEILING
from jupyter_sandbox.records import TRACE_MIME

# -- the seed documents' examples ----------------------------------------------------------

SEED_WORKERS = '''
import flyte
env = flyte.TaskEnvironment(name="sandboxed-demo")
# Worker tasks — run in their own containers
@env.task
def add(x: int, y: int) -> int:
    return x + y
@env.task
def multiply(x: int, y: int) -> int:
    return x * y
@env.task
def fib(n: int) -> int:
    """Compute the nth Fibonacci number iteratively."""
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a
'''
"""The worker tasks of "Workflow sandboxing" (indentation as the page renders it)."""

SEED_EXAMPLES = '''
# Sandboxed orchestrator — pure Python control flow
@env.sandbox.orchestrator
def pipeline(n: int) -> dict[str, int]:
    fib_result = fib(n)
    linear_result = add(multiply(n, 2), 5)
    total = add(fib_result, linear_result)
    return {
        "fib": fib_result,
        "linear": linear_result,
        "total": total,
    }

# Create a reusable task from a code string
compute_pipeline = flyte.sandbox.orchestrator_from_str(
    """
partial = add(x, y)
multiply(partial, scale)
""",
    inputs={"x": int, "y": int, "scale": int},
    output=int,
    tasks=[add, multiply],
    name="compute-pipeline",
)

def make_reducer(operation: str) -> flyte.sandbox.CodeTaskTemplate:
    """Create a sandboxed task that reduces a list using the given operation."""
    if operation == "sum":
        body = """
acc = 0
for v in values:
    acc = acc + v
acc
"""
    elif operation == "product":
        body = """
acc = 1
for v in values:
    acc = acc * v
acc
"""
    else:
        raise ValueError(f"Unknown operation: {operation}")
    return flyte.sandbox.orchestrator_from_str(
        body,
        inputs={"values": list},
        output=int,
        name=f"reduce-{operation}",
    )

sum_task = make_reducer("sum")
product_task = make_reducer("product")

@env.sandbox.orchestrator
def calculate_total(price: float, quantity: int) -> float:
    return price * quantity

t = env.sandbox.orchestrator(
    "x + y",
    inputs={"x": int, "y": int},
    output=int,
    name="dynamic_add"
)

@env.sandbox.orchestrator(
    timeout_ms=5000,
    max_memory=10 * 1024 * 1024 # 10 MB
)
def lightweight_task(x: int) -> int:
    return x + 1
'''
"""The orchestrator examples of "Workflow sandboxing" (``pipeline``, ``compute-pipeline``,
``make_reducer``) and "Sandboxed Python Tasks" (``calculate_total``, the code-string form,
``lightweight_task``), as written there."""

SWAPS = [
    (
        "import flyte\n",
        "from jupyter_sandbox import Orchestrator, orchestrator, orchestrator_from_str, tool\n",
    ),
    ('env = flyte.TaskEnvironment(name="sandboxed-demo")\n', ""),
    ("@env.task", "@tool"),
    ("flyte.sandbox.CodeTaskTemplate", "Orchestrator"),
    ("flyte.sandbox.orchestrator_from_str", "orchestrator_from_str"),
    ("env.sandbox.orchestrator", "orchestrator"),
]
"""The whole port: Flyte's imports and environment for ours, ``@env.task`` workers as tools,
and ``flyte.sandbox.X`` / ``env.sandbox.X`` as our ``X`` (``CodeTaskTemplate`` is our
`Orchestrator`). The README's porting table lists the same."""


def ported(source: str) -> str:
    for flyte, ours in SWAPS:
        source = source.replace(flyte, ours)
    assert "flyte" not in source and "env." not in source
    return source


@pytest.fixture(scope="module")
def seed() -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "seed_examples"}
    code = ported(SEED_WORKERS + SEED_EXAMPLES)
    # inspect.getsource reads a def's lines: give the exec'd text some, as IPython does a cell
    filename = "<seed-examples>"
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    exec(compile(code, filename, "exec"), namespace)
    return namespace


def test_the_seed_examples_run_as_written(seed: dict[str, Any]) -> None:
    assert seed["pipeline"](10) == {"fib": 55, "linear": 25, "total": 80}
    assert seed["compute_pipeline"](x=2, y=3, scale=4) == 20  # flyte.run(...) → 20
    assert seed["sum_task"](values=[1, 2, 3, 4]) == 10
    assert seed["product_task"]([1, 2, 3, 4]) == 24
    assert seed["calculate_total"](2.5, 4) == 10.0
    assert seed["t"](x=1, y=2) == 3
    assert seed["lightweight_task"](41) == 42
    with pytest.raises(ValueError, match="Unknown operation"):
        seed["make_reducer"]("max")


def test_the_seed_limits_are_flytes(seed: dict[str, Any]) -> None:
    light, pipeline = seed["lightweight_task"], seed["pipeline"]
    assert (light.limits.timeout, light.limits.max_memory) == (5.0, 10)  # 10 MB in bytes
    assert (pipeline.limits.timeout, pipeline.limits.max_memory) == (30.0, 50)
    assert pipeline.limits.max_stack_depth == 256
    assert set(pipeline.tools) == {"add", "fib", "multiply"}  # found from the body
    assert seed["compute_pipeline"].name == "compute-pipeline"  # Flyte's, as given
    assert seed["compute_pipeline"].key == "compute_pipeline"  # called by this name
    assert isinstance(seed["sum_task"], Orchestrator)


def test_the_seed_keywords_and_defaults_hold() -> None:
    """Flyte's ``SandboxedConfig`` parameters ("Sandboxed Python Tasks"), on both factories."""
    flyte = {"timeout_ms": 30_000, "max_memory": 50 * 1024 * 1024, "max_stack_depth": 256}
    flyte["type_check"] = True
    for factory in (orchestrator, orchestrator_from_str):
        parameters = inspect.signature(factory).parameters
        for name, default in flyte.items():
            assert parameters[name].default == default, (factory, name)
            assert parameters[name].kind is inspect.Parameter.KEYWORD_ONLY
    shape = inspect.signature(orchestrator_from_str).parameters
    assert list(shape)[:6] == ["source", "inputs", "output", "tools", "tasks", "name"]


# -- defined once, called like the function -------------------------------------------------

calls: list[tuple[int, int]] = []


@tool
def add(x: int, y: int) -> int:
    calls.append((x, y))
    return x + y


@tool
def loose(x: Any) -> Any:
    """Typed Any: the checker lets anything through, the boundary check does not."""
    return x


@tool
def fails(x: int) -> int:
    raise ValueError(f"no {x}")


def plain_helper(x: int) -> int:
    """A notebook function that is not a tool: orchestrations must not reach it."""
    calls.append((x, -1))
    return x


SECRET = "the notebook's own variable"


@orchestrator
def scaled(x: int, factor: int = 2, *, offset: int = 0) -> int:
    """Scale then offset, with a tool."""
    return add(x * factor, offset)


def test_called_like_the_function_with_its_signature_and_help() -> None:
    assert scaled(3) == 6
    assert scaled(3, 3) == 9
    assert scaled(x=3, offset=1) == 7
    assert inspect.signature(scaled) == inspect.signature(scaled.__wrapped__)
    written = str(inspect.signature(scaled.__wrapped__))  # this file's annotations are strings
    assert f"<orchestrator scaled{written}>" == repr(scaled)
    text = pydoc.render_doc(scaled, renderer=pydoc.plaintext)
    assert "Scale then offset, with a tool." in text
    assert written in text
    with pytest.raises(TypeError, match=r"scaled\(\): missing a required argument: 'x'"):
        scaled()
    with pytest.raises(TypeError, match="too many positional"):
        scaled(1, 2, 3)


def test_an_async_body_is_awaited() -> None:
    @tool
    async def fetch(n: int) -> int:
        await asyncio.sleep(0)
        return n * 10

    @orchestrator
    async def gathered(n: int) -> list[int]:
        import asyncio  # Monty's own: the body sees none of the notebook's imports

        return list(await asyncio.gather(fetch(n), fetch(n + 1)))

    assert gathered.is_async and inspect.iscoroutinefunction(gathered.func)
    assert asyncio.run(gathered(1)) == [10, 20]


def test_a_code_string_takes_its_inputs_by_position_or_name() -> None:
    total = orchestrator_from_str(
        "s = add(a, b)\ns * 2", inputs={"a": int, "b": int}, output=int, tools=[add]
    )
    assert total(1, 2) == total(a=1, b=2) == 6
    assert str(inspect.signature(total)) == "(a: int, b: int) -> int"
    with pytest.raises(SandboxConfigError, match="not both"):
        orchestrator_from_str("1", inputs={}, tools=[add], tasks=[add])


def test_calls_in_a_loop_run_on_kept_threads() -> None:
    @orchestrator
    def pure(n: int) -> int:
        total = 0
        for i in range(n):
            total = total + i
        return total

    assert pure.tools == {}
    seen: list[str] = []
    original = threading.Thread.start

    def spy(self: threading.Thread) -> None:
        seen.append(self.name)
        original(self)

    for _ in range(10):  # the kept threads the calls need (one, and one finishing its run)
        assert pure(10) == 45
    threading.Thread.start = spy  # type: ignore[method-assign]
    try:
        for _ in range(30):
            assert pure(10) == 45
    finally:
        threading.Thread.start = original  # type: ignore[method-assign]
    # one more at most, when a run's thread is still winding down as the next call starts
    assert len([name for name in seen if name == "jupyter-sandbox-driver"]) <= 2


def test_each_call_starts_in_a_fresh_session_with_nothing_carried_over() -> None:
    count = orchestrator_from_str(
        "try:\n    seen = seen + [n]\nexcept NameError:\n    seen = [n]\nseen",
        inputs={"n": int},
        output=list,
        type_check=False,
    )
    assert [count(i) for i in range(8)] == [[i] for i in range(8)]
    assert [count(n=i) for i in range(3)] == [[i] for i in range(3)]


def test_a_context_variable_a_tool_sets_does_not_reach_the_next_call() -> None:
    mark: contextvars.ContextVar[str] = contextvars.ContextVar("mark", default="unset")

    @tool
    def swap(value: str) -> str:
        before = mark.get()
        mark.set(value)
        return before

    @orchestrator
    def once(value: str) -> str:
        return swap(value)

    assert [once(f"call {i}") for i in range(6)] == ["unset"] * 6


# -- checks at definition and at each call ---------------------------------------------------


def test_a_wrong_tool_call_fails_where_the_orchestrator_is_defined() -> None:
    with pytest.raises(TypeCheckError) as caught:

        @orchestrator
        def wrong(n: int) -> int:
            return add(n, "two")

    assert 'return add(n, "two")' in str(caught.value)  # the body's own line
    with pytest.raises(TypeCheckError, match="Expected `int`"):
        orchestrator_from_str('add(x, "y")', inputs={"x": int}, tools=[add])
    with pytest.raises(TypeCheckError, match=r"(?s)line 2\n.*str\(s\).*`int`"):
        orchestrator_from_str("s = add(x, 1)\nstr(s)", inputs={"x": int}, output=int)
    with pytest.raises(TypeCheckError, match="invalid-return-type"):

        @orchestrator
        def returns_wrong(n: int) -> str:
            return add(n, 1)


def test_a_body_cannot_reach_a_global_that_is_not_a_tool() -> None:
    before = list(calls)
    with pytest.raises(TypeCheckError, match="plain_helper"):

        @orchestrator
        def reaches(n: int) -> int:
            return plain_helper(n)

    with pytest.raises(TypeCheckError, match="SECRET"):

        @orchestrator
        def reads(n: int) -> str:
            return SECRET

    with pytest.raises(TypeCheckError, match="fails"):  # a tool, but not one it was given

        @orchestrator(tools=[add])
        def beyond(n: int) -> int:
            return fails(n)

    @orchestrator(type_check=False)  # unchecked, it fails in the sandbox, not on the host
    def unchecked(n: int) -> int:
        return plain_helper(n)

    assert "plain_helper" not in unchecked.tools
    with pytest.raises(OrchestrationError, match="name 'plain_helper' is not defined"):
        unchecked(1)
    assert calls == before  # the notebook's function never ran


def test_a_wrong_typed_argument_is_refused_before_anything_runs() -> None:
    before = len(calls)
    with pytest.raises(TypeError, match=r"scaled\(\) argument 'x' must be int, got str"):
        scaled("3")
    with pytest.raises(TypeError, match="argument 'offset' must be int"):
        scaled(3, offset=None)
    assert len(calls) == before
    typed = orchestrator_from_str("sum(v)", inputs={"v": list[int]}, output=int)
    with pytest.raises(TypeError, match=r"argument 'v' must be list\[int\]"):
        typed([1, "2"])


def test_a_value_that_breaks_the_return_annotation_is_refused() -> None:
    @orchestrator
    def promised(x: int) -> int:
        return loose(str(x))  # Any to the checker

    with pytest.raises(TypeError, match=r"promised\(\) returned a value that must be int, got str"):
        promised(1)


def test_a_tool_raising_fails_the_call_naming_it() -> None:
    @orchestrator
    def calls_failing(n: int) -> int:
        return fails(n)

    with pytest.raises(ToolError, match="tool 'fails' raised ValueError: no 7") as caught:
        calls_failing(7)
    assert caught.value.result is not None and caught.value.result.trace[0].tool == "fails"


def test_recursion_past_max_stack_depth_is_a_limit() -> None:
    @orchestrator(max_stack_depth=40)
    def deep(n: int) -> int:
        def down(k: int) -> int:
            return 0 if k == 0 else 1 + down(k - 1)

        return down(n)

    assert deep(20) == 20
    with pytest.raises(LimitExceeded, match=r"stack depth limit exceeded.* 40 deep") as caught:
        deep(100)
    assert caught.value.limit == "stack"


def test_timeout_ms_bounds_each_call_and_bad_limits_are_named() -> None:
    @orchestrator(timeout_ms=300)
    def spins(n: int) -> int:
        while True:
            n = n + 1

    started = time.perf_counter()
    with pytest.raises(LimitExceeded, match="time limit exceeded") as caught:
        spins(0)
    assert caught.value.limit == "time" and time.perf_counter() - started < 10
    with pytest.raises(SandboxConfigError, match="timeout_ms"):
        orchestrator(timeout_ms=-1)
    with pytest.raises(SandboxConfigError, match="max_memory"):
        orchestrator(max_memory=0)
    with pytest.raises(SandboxConfigError, match="max_stack_depth"):
        orchestrator(max_stack_depth=0)
    limited = orchestrator(limits=Limits(max_calls=1))(two_calls_body())
    with pytest.raises(LimitExceeded) as too_many:
        limited(1)
    assert too_many.value.limit == "calls"


def two_calls_body() -> Any:
    def two_calls(n: int) -> int:
        return add(add(n, 1), 1)

    return two_calls


def test_ctrl_c_stops_a_call_and_the_next_one_runs() -> None:
    @orchestrator(timeout_ms=600_000)
    def forever(n: int) -> int:
        print("looping")
        while True:
            n = n + 1

    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))  # the kernel's Ctrl-C
    timer.start()
    started = time.perf_counter()
    with pytest.raises(Interrupted):
        forever(0)
    assert time.perf_counter() - started < 10
    assert scaled(2) == 4


def test_ctrl_c_while_the_body_waits_in_a_tool_abandons_that_call() -> None:
    release = threading.Event()

    @tool
    def block(n: int) -> int:
        release.wait(60)
        return n

    @orchestrator
    def waits(n: int) -> int:
        return block(n) + 1

    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(Interrupted, match=r"the call to block\(\), still running"):
            waits(1)
    finally:
        release.set()
    assert waits(2) == 3


# -- an orchestrator is a tool -------------------------------------------------------------


def test_other_orchestrations_call_it_and_its_run_nests_in_their_record() -> None:
    result = orchestrate("scaled(2) + scaled(1, 5)", tools=[scaled, add])
    assert result.value == 9
    record = result.to_record()
    first = record["calls"][0]
    assert first["tool"] == "scaled"
    (child,) = first["children"]
    assert child["kind"] == "orchestrate" and child["status"] == "ok"
    assert [c["tool"] for c in child["calls"]] == ["add"]
    html = render(record)  # the renderers draw the nested trace inside the call
    assert "orchestrate record" in html and html.count("jsb-call jsb-ok") == 4
    registered = tool(scaled)
    assert registered is scaled
    with pytest.raises(TypeCheckError, match="scaled"):  # stubs carry its signature
        orchestrate('scaled("x")', tools=[scaled])


def test_an_orchestrator_calling_orchestrators_nests_to_the_limit() -> None:
    chain: list[Orchestrator] = [
        orchestrator_from_str("add(n, 1)", inputs={"n": int}, tools=[add], name="l0")
    ]
    for depth in range(1, NESTING_CEILING + 1):
        chain.append(
            orchestrator_from_str(
                f"l{depth - 1}(n) + 1", inputs={"n": int}, tools=[chain[-1]], name=f"l{depth}"
            )
        )
    assert chain[NESTING_CEILING](0) == NESTING_CEILING + 1  # from the notebook: l0 runs 3 deep
    assert orchestrate("l2(0)", tools=[chain[2]]).value == 3
    with pytest.raises(ToolError, match="nested more than"):  # one level more than allowed
        orchestrate(f"l{NESTING_CEILING}(0)", tools=[chain[NESTING_CEILING]])


def test_code_mode_calls_an_orchestrator() -> None:
    reply = "```python\nscaled(4, offset=1)\n```"
    agent = CodeModeAgent(ScriptedLLM([reply]), [scaled])
    assert "def scaled(x: int, factor: int = ..., *, offset: int = ...) -> int" in (
        agent.system_prompt
    )
    result = agent.run("scale 4")
    assert result.value == 9
    (call,) = result.result.trace
    assert call.children and call.children[0]["kind"] == "orchestrate"


def test_it_takes_only_a_def_or_code() -> None:
    with pytest.raises(SandboxConfigError, match="takes a function defined with def"):
        orchestrator(add)
    with pytest.raises(SandboxConfigError, match="needs inputs="):
        orchestrator("1")  # type: ignore[call-overload]
    namespace: dict[str, Any] = {"orchestrator": orchestrator}
    exec(textwrap.dedent("def f(x: int) -> int:\n    return x\n"), namespace)
    with pytest.raises(SandboxConfigError, match="needs the source"):
        orchestrator(namespace["f"])


# -- in a notebook ---------------------------------------------------------------------------

DEFINE = """
from jupyter_sandbox import orchestrator

@orchestrator
def double(n: int) -> int:
    print("doubling", n)
    return add(n, n)

@orchestrator(show=True)
def loud(n: int) -> int:
    return add(n, 1)
"""


def shown(ran: Any) -> list[dict[str, Any]]:
    """The records the cell displayed, each in its last state (a live view is one display,
    updated in place under its display id)."""
    final: dict[str, dict[str, Any]] = {}
    for number, msg in enumerate(ran.outputs):
        data = msg["content"].get("data", {})
        if msg["msg_type"] not in ("display_data", "update_display_data") or TRACE_MIME not in data:
            continue
        key = msg["content"].get("transient", {}).get("display_id") or str(number)
        final[key] = data[TRACE_MIME]
    return list(final.values())


def test_a_call_in_a_cell_shows_the_record_a_cell_does_once_per_cell(tmp_path: Any) -> None:
    with kernel(tmp_path / "store.sqlite") as k:
        k.ok(DEFINE)
        ran = k.ok("for i in range(3):\n    double(i)\ndouble(5)")
        (record,) = shown(ran)  # the first call of the cell only
        assert record["status"] == "ok" and [c["tool"] for c in record["calls"]] == ["add"]
        assert "def double(n: int) -> int:" in record["code"]
        assert ran.printed.count("doubling") == 4  # every call's prints
        assert ran.value == "10"
        again = k.ok("double(1)")  # a new cell shows its first call again
        assert len(shown(again)) == 1
        loud = k.ok("loud(1)\nloud(2)")
        assert len(shown(loud)) == 2  # show=True: every call
        failed = k.run("double('x')")
        assert failed.status == "error" and "must be int" in failed.text
        final = k.ok("%orchestrate_sessions")  # the kernel goes on
        assert final.status == "ok"


def test_a_loop_of_calls_shows_one_record_titled_by_its_call_and_counted(tmp_path: Any) -> None:
    """Five calls in one cell show the first call's record, which says it is the first of
    five (not the cell's whole work) in every renderer; each call shown says only itself."""
    with kernel(tmp_path / "store.sqlite") as k:
        k.ok(DEFINE)
        ran = k.ok("for i in range(1, 6):\n    double(i)")
        (record,) = shown(ran)
        headline = record["summary"]["headline"]
        assert re.fullmatch(
            r"double\(1\) ok in \d+ ms: 1 tool call \u00b7 first of 5 calls in this cell "
            r"\(show=True shows each\)",
            headline,
        ), headline
        assert record["caller"] == {"call": "double(1)", "calls": 5}
        final = [m for m in ran.outputs if TRACE_MIME in m["content"].get("data", {})][-1]
        for fallback in ("text/plain", "text/html"):
            assert "first of 5 calls in this cell" in final["content"]["data"][fallback]
        once = shown(k.ok("double(7)"))[0]["summary"]["headline"]
        assert once.startswith("double(7) ok in ") and once.endswith(": 1 tool call")
        each = [r["summary"]["headline"] for r in shown(k.ok("loud(1)\nloud(2)"))]
        assert [h.split(" ok ")[0] for h in each] == ["loud(1)", "loud(2)"]
        assert not any("first of" in h for h in each)  # show=True: each call is its own


def test_the_cell_magic_takes_max_stack_depth(shell: Any) -> None:
    code = "def down(k):\n    return 0 if k == 0 else 1 + down(k - 1)\ndown(50)"
    assert shell.run_cell(f"%%orchestrate --max-stack-depth 100\n{code}").result == 50
    failed = shell.run_cell(f"%%orchestrate --max-stack-depth 20\n{code}")
    assert isinstance(failed.error_in_exec, LimitExceeded)
    assert failed.error_in_exec.limit == "stack"
    refused = shell.run_cell("%%orchestrate --max-stack-depth 0\n1")
    assert "--max-stack-depth must be a positive whole number" in str(refused.error_in_exec)
