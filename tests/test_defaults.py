"""Defaults in one place: `jupyter_sandbox._shared._defaults` holds every default;
the classes, functions, magics and their help texts read it; the store's default follows one
rule for every entry point. Real Monty, a real SQLite store, a real IPython shell."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

import pytest

import jupyter_sandbox
from jupyter_sandbox import (
    CodeModeAgent,
    Limits,
    Resources,
    ScriptedLLM,
    Tool,
    create,
    orchestrate,
)
from jupyter_sandbox._shared import _defaults as default
from jupyter_sandbox.magics._codemode import CodeModeMagics
from jupyter_sandbox.magics._sandbox import SandboxMagics
from jupyter_sandbox.orchestration import Keep, _sandbox_tool, default_store_path
from jupyter_sandbox.sandbox import _pool, _sandbox

PACKAGE = Path(jupyter_sandbox.__file__).parent


def test_the_classes_defaults_are_the_modules() -> None:
    assert Limits() == Limits(
        timeout=default.TIMEOUT,
        max_memory=default.MAX_MEMORY,
        max_calls=default.MAX_CALLS,
        max_result=default.MAX_RESULT,
        max_output=default.MAX_OUTPUT,
        max_stack_depth=default.MAX_STACK_DEPTH,
        max_transfer=default.MAX_TRANSFER,
    )
    assert dataclasses.astuple(Keep()) == (
        default.KEEP_VALUE,
        default.KEEP_RUN,
        default.KEEP_KERNEL,
        default.STORE_RUN,
        default.STORE_CELL,
        default.STORE_TOTAL,
    )
    resources = Resources()
    assert (resources.cpu, resources.memory, resources.pids, resources.disk, resources.output) == (
        default.CPU,
        default.MEMORY,
        default.PIDS,
        default.DISK,
        default.OUTPUT,
    )


def test_create_the_pool_and_the_agent_read_theirs_here() -> None:
    signature = inspect.signature(create).parameters
    assert signature["retries"].default == default.RETRIES
    assert signature["network"].default == default.NETWORK
    box = create("defaults", code="pass")
    assert (box.timeout, box.resources, box.network) == (
        default.SANDBOX_TIMEOUT,
        Resources(),
        default.NETWORK,
    )
    assert _sandbox.DEFAULT_TIMEOUT == default.SANDBOX_TIMEOUT
    assert (_pool._IDLE, _pool.Pool().max_spares) == (default.SPARE_IDLE, default.MAX_SPARES)
    assert _sandbox_tool.DEFAULT_CONCURRENCY == default.TOOL_CONCURRENCY
    agent = inspect.signature(CodeModeAgent).parameters
    assert agent["max_attempts"].default == default.MAX_ATTEMPTS


def test_the_magics_settings_and_help_say_the_same_defaults() -> None:
    traits = SandboxMagics.class_traits()
    assert traits["cpus"].default_value == default.CPU
    assert traits["memory"].default_value == default.MEMORY
    assert CodeModeMagics.class_traits()["max_attempts"].default_value == default.MAX_ATTEMPTS
    shown = SandboxMagics.sandbox.__doc__ or ""
    for said in (
        f"CPUs (default {default.CPU:g})",
        f"(default {default.MEMORY})",
        f"(default {default.SANDBOX_TIMEOUT:g})",
        f"(default {default.NETWORK})",
        f"(default {default.RETRIES})",
    ):
        assert said in " ".join(shown.split()), said


def _literals(path: Path) -> list[tuple[int, object]]:
    """The constants of a module's code, its docstrings left out."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and id(node) not in docstrings
    ]


@pytest.mark.parametrize("value", [default.MEMORY, default.DISK, default.OUTPUT, 600.0])
def test_no_module_spells_a_container_default_again(value: object) -> None:
    """A default written twice drifts: "1g", "256m", "4m" and the 600 s timeout are written in
    `_defaults` alone (its docstrings aside)."""
    found = [
        f"{path.relative_to(PACKAGE)}:{line}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "_defaults.py"
        for line, constant in _literals(path)
        if constant == value and type(constant) is type(value)
    ]
    assert found == []


def _constants() -> list[tuple[str, str, ast.expr]]:
    """Every module-level ``NAME = value`` of the package: (module, name, value)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            target = (
                node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
            )
            if isinstance(target, ast.Name) and target.id.lstrip("_").isupper() and node.value:
                found.append((str(path.relative_to(PACKAGE)), target.id, node.value))
    return found


def _parameters() -> set[str]:
    """The names of every parameter and dataclass field the package defines."""
    names: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, ast.ClassDef):
                names |= {
                    item.target.id
                    for item in node.body
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                }
    return names


def test_a_max_constant_is_the_default_of_the_parameter_it_names() -> None:
    """``MAX_STACK_DEPTH`` is what ``max_stack_depth`` defaults to, nothing else: the most a
    parameter accepts is its ``*_CEILING``, so no reader takes a ceiling for a default."""
    parameters = _parameters()
    wrong = [
        f"{module}:{name}"
        for module, name, _ in _constants()
        if name.lstrip("_").startswith("MAX_")
        and (module != "_shared/_defaults.py" or name.lower() not in parameters)
    ]
    assert wrong == []


def test_a_public_limit_name_is_bound_in_one_module() -> None:
    """One name, one value: a default or ceiling spelled in two modules would say two things."""
    modules: dict[str, set[str]] = {}
    for module, name, _ in _constants():
        if name.startswith(("MAX_", "DEFAULT_")) or name.endswith("_CEILING"):
            modules.setdefault(name, set()).add(module)
    assert {name: found for name, found in modules.items() if len(found) > 1} == {}


def _counts_bytes(value: ast.expr) -> bool:
    """Whether an expression is a size written in powers of 1024 (``16 * 2**20``, ``1 << 20``)."""
    for node in ast.walk(value):
        if isinstance(node, ast.BinOp) and isinstance(node.right, ast.Constant):
            power = isinstance(node.op, ast.Pow) and node.right.value in (10, 20, 30)
            shift = isinstance(node.op, ast.LShift) and node.right.value in (10, 20, 30)
            if power or shift or node.right.value == 1024:
                return True
    return False


def test_a_size_in_bytes_says_so_in_its_name() -> None:
    """Sizes are megabytes (as the docs give them) unless the name ends in its unit."""
    wrong = [
        f"{module}:{name}"
        for module, name, value in _constants()
        if _counts_bytes(value) and not name.endswith("_BYTES") and name != "MB"
    ]
    assert wrong == []


# -- the store: one rule ------------------------------------------------------------------


def add(a: int, b: int) -> int:
    return a + b


def delete(path: str) -> str:
    return path


def test_the_rule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(default.STORE_ENV, str(tmp_path / "s.sqlite"))
    assert default.store_or_default(None, needed=True) == tmp_path / "s.sqlite"
    assert default.store_or_default(None, needed=False) is None
    assert default.store_or_default("", needed=True) is None  # "no store" everywhere
    assert default.store_or_default("x.sqlite", needed=False) == "x.sqlite"
    monkeypatch.delenv(default.STORE_ENV)
    assert default_store_path() == Path(default.STORE_PATH).expanduser()


def test_orchestrate_writes_no_store_unless_given_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "store.sqlite"
    monkeypatch.setenv(default.STORE_ENV, str(path))
    assert orchestrate("add(1, 2)", tools=[Tool(add, name="add")]).value == 3
    assert not path.exists()
    orchestrate("add(1, 2)", tools=[Tool(add, name="add")], store=path)
    assert path.exists()


def test_the_agent_opens_the_default_store_only_for_a_gated_tool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(default.STORE_ENV, str(tmp_path / "store.sqlite"))
    llm = ScriptedLLM([])
    assert CodeModeAgent(llm, tools=[Tool(add, name="add")]).store is None
    gated = [Tool(delete, name="delete", approve=True)]
    assert CodeModeAgent(llm, tools=gated).store == tmp_path / "store.sqlite"
    assert CodeModeAgent(llm, tools=gated, approver=lambda call: True).store is None
    assert CodeModeAgent(llm, tools=gated, store="").store is None


def test_the_magic_opens_the_default_store(shell, tmp_path: Path, monkeypatch) -> None:
    from jupyter_sandbox.magics._orchestrate import OrchestrateMagics

    monkeypatch.setenv(default.STORE_ENV, str(tmp_path / "store.sqlite"))
    magics = shell.magics_manager.registry[OrchestrateMagics.__name__]
    monkeypatch.setattr(magics, "store", None)
    store = magics.open_store()
    assert store is not None and store.path == tmp_path / "store.sqlite"
    monkeypatch.setattr(magics, "store", "")
    assert magics.open_store() is None
