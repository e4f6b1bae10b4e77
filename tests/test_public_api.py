"""The contracts users import and catch: public homes, the error tree, the version."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

import jupyter_sandbox
from jupyter_sandbox import errors, events

ROOT = Path(__file__).resolve().parent.parent


def public_classes() -> list[tuple[str, type]]:
    found = []
    for module in (jupyter_sandbox, errors, events):
        for name in module.__all__:
            value = getattr(module, name)
            if isinstance(value, type):
                found.append((f"{module.__name__}.{name}", value))
    return found


@pytest.mark.parametrize(("where", "cls"), public_classes(), ids=lambda v: str(v))
def test_every_public_class_names_a_public_module_that_exports_it(where: str, cls: type) -> None:
    home = cls.__module__
    assert not any(part.startswith("_") for part in home.split(".")), where
    module = {m.__name__: m for m in (jupyter_sandbox, errors, events)}[home]
    assert getattr(module, cls.__qualname__) is cls  # pickle and tracebacks find it there


def test_a_traceback_names_the_public_module() -> None:
    assert repr(errors.ToolError) == "<class 'jupyter_sandbox.errors.ToolError'>"
    assert events.ToolCall.__module__ == "jupyter_sandbox.events"


def test_every_exception_is_in_errors_and_nothing_else_is() -> None:
    exported = {getattr(errors, name) for name in errors.__all__}
    top = {v for v in vars(jupyter_sandbox).values() if isinstance(v, type)}
    assert {c for c in top if issubclass(c, BaseException)} <= exported
    assert all(issubclass(c, errors.SandboxError) for c in exported)


def docstring_tree() -> dict[str, str | None]:
    """``{class: parent}`` as the tree in `jupyter_sandbox.errors`' docstring draws it."""
    doc = errors.__doc__ or ""
    drawing = doc.split("```")[1]
    parents: dict[str, str | None] = {}
    stack: list[str] = []
    for line in drawing.strip("\n").splitlines():
        found = re.match(r"^([│├└─ ]*)(\w+)", line)
        assert found, line
        depth = len(found.group(1)) // 4
        stack[depth:] = [found.group(2)]
        parents[found.group(2)] = stack[depth - 1] if depth else None
    return parents


def test_the_docstring_tree_is_the_class_hierarchy() -> None:
    drawn = docstring_tree()
    assert set(drawn) == set(errors.__all__)
    for name, parent in drawn.items():
        cls = getattr(errors, name)
        ours = [b for b in cls.__bases__ if b.__module__ == errors.__name__]
        assert [b.__name__ for b in ours] == ([parent] if parent else []), name


def test_errors_are_grouped_by_cause() -> None:
    assert not issubclass(errors.Interrupted, errors.LimitExceeded)
    assert not issubclass(errors.InvalidOutput, errors.MissingOutput)
    invalid = errors.InvalidOutput("output 'n' is not a valid int", name="n")
    assert isinstance(invalid, errors.OutputError)
    assert invalid.name == "n"


def test_one_version_everywhere() -> None:
    """Written once, in the extension's package.json; the Python package reads it when built."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in pyproject["project"]
    assert pyproject["project"]["dynamic"] == ["version"]
    assert pyproject["tool"]["hatch"]["version"] == {
        "source": "nodejs",
        "path": "labextension/package.json",
    }
    package = json.loads((ROOT / "labextension" / "package.json").read_text())["version"]
    assert jupyter_sandbox.__version__ == package


def test_unload_gives_back_the_exception_handler_it_found(shell: Any) -> None:
    seen: list[BaseException] = []

    def handler(
        shell: Any, etype: Any, value: BaseException, tb: Any, tb_offset: Any = None
    ) -> list[str]:
        seen.append(value)
        return ["handled by the notebook's own handler"]

    shell.run_line_magic("unload_ext", "jupyter_sandbox")
    try:
        shell.set_custom_exc((LookupError,), handler)
        shell.run_line_magic("load_ext", "jupyter_sandbox")
        assert shell.custom_exceptions == (errors.SandboxError,)
        shell.run_line_magic("unload_ext", "jupyter_sandbox")
        assert shell.custom_exceptions == (LookupError,)
        shell.run_cell("{}['missing']")
        assert [type(e) for e in seen] == [KeyError]
    finally:
        shell.set_custom_exc((), None)
        shell.run_line_magic("load_ext", "jupyter_sandbox")


def test_import_loads_no_engine_until_one_of_its_names_is_used() -> None:
    """``import jupyter_sandbox`` loads the shared modules only; the first use of an engine's
    name loads that engine, and a class first imported from its engine still names the top."""
    code = (
        "import sys, jupyter_sandbox\n"
        "print(sorted(m for m in sys.modules if m.startswith(('jupyter_sandbox.', 'pydantic_monty',"
        " 'sqlite3', 'docker'))))\n"
        "from jupyter_sandbox.orchestration import Store\n"
        "print(Store.__module__, jupyter_sandbox.Store is Store)\n"
        "print('jupyter_sandbox.sandbox._container' in sys.modules,"
        " callable(jupyter_sandbox.create))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    first, second, third = done.stdout.splitlines()
    loaded = ast.literal_eval(first)
    engines = ("orchestration", "sandbox", "codemode", "magics", "display", "_doctor")
    heavy = [
        m for m in loaded if not m.startswith("jupyter_sandbox.") or m.split(".")[1] in engines
    ]
    assert not heavy, heavy
    assert second == "jupyter_sandbox True"
    assert third == "False True"


def test_load_ext_loads_no_code_mode_display_cluster_or_store_until_a_cell_needs_them(
    tmp_path: Path,
) -> None:
    """``%load_ext`` registers every magic without loading code mode, the views, the Dask
    side or the durable store, and loads at most `LOAD_EXT_MODULES` of our modules; the first
    ``%%orchestrate`` cell's view loads ``display``, its store the durable subsystem (a real
    IPython shell, real Monty)."""
    code = (
        "import sys\n"
        "from IPython.testing.globalipapp import start_ipython\n"
        "shell = start_ipython()\n"
        "shell.run_line_magic('load_ext', 'jupyter_sandbox')\n"
        "print(sorted(shell.magics_manager.magics['cell']))\n"
        "print(sorted(m for m in sys.modules if m.startswith(('jupyter_sandbox.codemode',"
        " 'jupyter_sandbox.codegen',"
        " 'jupyter_sandbox.display', 'jupyter_sandbox.sandbox._cluster', 'distributed',"
        " 'jupyter_sandbox.orchestration.durable'))))\n"
        "print(sum(m.split('.')[0] == 'jupyter_sandbox' for m in sys.modules))\n"
        "value = shell.run_cell_magic('orchestrate', '', '40 + 2')\n"
        "from jupyter_sandbox.orchestration.durable import _store\n"
        "print(value, 'jupyter_sandbox.display' in sys.modules, _store.Store.__module__)\n"
    )
    env = {**os.environ, "JUPYTER_SANDBOX_STORE": str(tmp_path / "store.sqlite")}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    magics, loaded, count, *_, shown = done.stdout.splitlines()
    assert {"orchestrate", "sandbox", "codemode", "codegen"} <= set(ast.literal_eval(magics))
    assert ast.literal_eval(loaded) == []
    assert int(count) <= LOAD_EXT_MODULES
    assert shown.endswith("42 True jupyter_sandbox")  # loaded by the cell, published as ever
    assert (tmp_path / "store.sqlite").exists()  # the cell's store: opened by the cell


LOAD_EXT_MODULES = 100
"""Our modules ``%load_ext`` loads (benchmarks/bench_import.py), the orchestration engine's
doors, spec and plan (`orchestration._doors`, `_spec`, `_plan`) among them, since every cell's
run goes through them, the sandbox engine's plan and staging (`sandbox._plan`,
`sandbox._staging`), `magics._codegen` (its engine loads at the first ``%%codegen`` cell), and
the sandbox sessions' `magics._sessions`, `sandbox._session` and `sandbox._kept`, and
`sandbox._inject` (`Secret`, which `create` checks). A new module imported at ``%load_ext``
must be worth raising it."""


def test_the_function_orchestrate_is_not_shadowed_by_its_engine() -> None:
    """The engine is ``jupyter_sandbox.orchestration``: importing it never rebinds the name."""
    import jupyter_sandbox.orchestration

    assert callable(jupyter_sandbox.orchestrate)
    assert jupyter_sandbox.orchestrate is jupyter_sandbox.orchestration.orchestrate
    assert set(dir(jupyter_sandbox)) >= set(jupyter_sandbox.__all__)


def test_the_lazy_table_names_each_engine_name_once_and_all_lists_it() -> None:
    """`_public.TOP_LEVEL` (what ``__getattr__`` imports) and the type checkers' imports in
    ``__init__`` are written twice by design (PEP 562): here they must agree with ``__all__``
    and with the engines' own names."""
    import importlib

    from jupyter_sandbox._shared._public import TOP_LEVEL

    lazy = [name for names in TOP_LEVEL.values() for name in names]
    assert len(lazy) == len(set(lazy))
    assert set(lazy) <= set(jupyter_sandbox.__all__)
    for package, names in TOP_LEVEL.items():
        engine = importlib.import_module(f"jupyter_sandbox.{package}")
        assert all(getattr(engine, n) is getattr(jupyter_sandbox, n) for n in names), package
    source = (ROOT / "jupyter_sandbox" / "__init__.py").read_text()
    typed = set(re.findall(r"^        (\w+),$", source, flags=re.M))
    typed |= {
        m
        for line in re.findall(r"^    from \.\w+ import ([\w, ]+)$", source, flags=re.M)
        for m in line.split(", ")
    }
    assert set(lazy) <= typed
