"""Engines speak Python, magics speak options.

Each engine error whose remedy is a parameter is raised here through the Python API (real
Monty workers, a real Docker engine for the sandbox ones, a real SQLite store): its message
names the Python keyword and no magic option, and carries the parameter as data
(``.parameter``, ``.hint``; ``.limit`` for a `LimitExceeded`). The magics' one table
(`magics._common.ADVICE`) turns each into the option a cell shows; the cells themselves are
tested where the magics are (tests/magics/test_cell_errors.py, tests/orchestration/test_limits.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from jupyter_sandbox import (
    CodeModeAgent,
    Limits,
    ScriptedLLM,
    Tool,
    create,
    orchestrate,
)
from jupyter_sandbox.errors import (
    LimitExceeded,
    NonZeroExit,
    SandboxError,
    SandboxTimeout,
    StoreError,
    TypeCheckError,
)
from jupyter_sandbox.magics._common import ADVICE, in_options
from jupyter_sandbox.orchestration import Store

MAGIC_WORDS = re.compile(r"(?<![\w-])--[a-z]|%config|%%|%orchestrate|Magics\.")
"""What only a notebook user can act on: an option, a ``%config`` setting, a magic."""


def add(a: int, b: int) -> int:
    return a + b


def echo(data: str) -> int:
    return len(data)


TOOLS = [Tool(add, name="add"), Tool(echo, name="echo")]


def _raised(run: Callable[[], object]) -> SandboxError:
    with pytest.raises(SandboxError) as caught:
        run()
    return caught.value


def _speaks_python(error: SandboxError, parameter: str, hint: str) -> None:
    message = str(error)
    assert not MAGIC_WORDS.search(message), message
    assert error.parameter == parameter
    assert error.hint == hint and hint in message, message
    shown = in_options(error)  # what a cell shows instead
    assert ADVICE[parameter] in shown and hint not in shown, shown


PRINTS = "s = 'x' * 1000\nfor i in range(2000):\n    print(s)"
RECURSES = "def f(n):\n    return f(n + 1)\nf(0)"
COPIES = "s = 'x' * 600000\nfor i in range(4):\n    echo(s)"
LIMITS = [
    ("calls", "max_calls", "for i in range(5):\n    add(i, i)", Limits(max_calls=2)),
    ("output", "max_output", PRINTS, Limits(max_output=1)),
    ("result", "max_result", "'x' * 2000000", Limits(max_result=1)),
    ("time", "timeout", "while True:\n    pass", Limits(timeout=0.5)),
    ("time", "timeout", "import asyncio\nawait asyncio.sleep(5)", Limits(timeout=1)),
    ("memory", "max_memory", "x = [0] * (50 * 1000 * 1000)", Limits(max_memory=8)),
    ("stack", "max_stack_depth", RECURSES, Limits(max_stack_depth=50)),
    ("transfer", "max_transfer", COPIES, Limits(max_transfer=1)),
]


@pytest.mark.parametrize(("limit", "parameter", "code", "limits"), LIMITS)
def test_each_limit_names_its_limits_field(
    limit: str, parameter: str, code: str, limits: Limits
) -> None:
    error = _raised(lambda: orchestrate(code, tools=TOOLS, limits=limits))
    assert isinstance(error, LimitExceeded)
    assert error.limit == limit
    _speaks_python(error, parameter, f"Limits({parameter}=...)")


def test_the_type_check_names_the_keyword_that_skips_it() -> None:
    error = _raised(lambda: orchestrate('add("a", 1)', tools=TOOLS))
    assert isinstance(error, TypeCheckError)
    _speaks_python(error, "type_check", "type_check=False")


def test_nesting_names_no_parameter() -> None:
    """No parameter raises the nesting bound: the error carries none, and a cell shows it as
    the engine said it."""
    error = LimitExceeded("nested too deep", limit="nesting")
    assert (error.parameter, error.hint) == ("", "")
    assert in_options(error) == str(error)


def test_the_model_in_code_mode_reads_the_apis_words() -> None:
    """The error a code-mode model is sent back is the engine's own message: Python words."""
    agent = CodeModeAgent(
        ScriptedLLM(["```python\nfor i in range(5):\n    add(i, i)\n```"] * 2),
        tools=TOOLS,
        limits=Limits(max_calls=2),
        max_attempts=2,
    )
    error = _raised(lambda: agent.run("add up"))
    fed_back = error.attempts[0].feedback or ""  # type: ignore[attr-defined]
    assert "Limits(max_calls=...)" in fed_back
    assert not MAGIC_WORDS.search(fed_back), fed_back


def test_an_unusable_store_names_the_store_keyword(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    error = _raised(lambda: Store(tmp_path / "file" / "store.sqlite"))
    assert isinstance(error, StoreError)
    _speaks_python(error, "store", "store=")


def test_an_unknown_run_names_the_method_that_lists_runs(tmp_path: Path) -> None:
    store = Store(tmp_path / "store.sqlite")
    error = _raised(lambda: store.run("f00"))
    _speaks_python(error, "runs", "Store.runs() lists its runs")


@pytest.mark.docker
def test_a_sandbox_timeout_names_create_timeout() -> None:
    box = create("slow", code="import time\ntime.sleep(30)", timeout=1)
    error = _raised(lambda: box.run())
    assert isinstance(error, SandboxTimeout)
    _speaks_python(error, "timeout", "create(timeout=...)")


@pytest.mark.docker
def test_a_sandbox_without_network_names_the_network_keyword() -> None:
    code = 'import urllib.request\nurllib.request.urlopen("http://example.com", timeout=5)'
    error = _raised(lambda: create("offline", code=code).run())
    assert isinstance(error, NonZeroExit)
    _speaks_python(error, "network", "network=['HOST'] (or network='bridge', the whole internet)")


@pytest.mark.docker
def test_a_missing_module_names_the_packages_keyword() -> None:
    error = _raised(lambda: create("bare", code="import yaml").run())
    assert isinstance(error, NonZeroExit)
    _speaks_python(error, "packages", "packages=[...]")


def test_every_parameter_an_engine_names_has_the_magics_words() -> None:
    """Each ``parameter=`` an engine raises with beside a ``hint=`` (or a `LimitExceeded`'s,
    whose hint is made from it) is in `ADVICE`: a new one without the magics' words would
    leave a cell showing the Python phrase. (Those named by a variable are raised above.)"""
    import ast
    from pathlib import Path

    import jupyter_sandbox

    package = Path(jupyter_sandbox.__file__).parent
    named: dict[str, str] = {}
    for path in sorted(package.rglob("*.py")):
        if "magics" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            words = {k.arg: k.value for k in node.keywords}
            callee = getattr(node.func, "id", "")
            if "hint" not in words and callee != "LimitExceeded":
                continue
            given = words.get("parameter")
            if isinstance(given, ast.Constant) and given.value:
                named[str(given.value)] = f"{path.relative_to(package)}:{node.lineno}"
    assert {"max_calls", "max_output", "memory", "command", "store"} <= set(named)
    assert {p: at for p, at in named.items() if p not in ADVICE} == {}
