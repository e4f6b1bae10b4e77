"""Public classes name their public home, not the private module that defines them; and which
subpackage each name the top-level package hands on comes from (it imports them on first use)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from importlib import import_module

TOP_LEVEL: dict[str, tuple[str, ...]] = {
    "codegen": ("AutoCoderAgent", "CodeGenEvalResult"),
    "codemode": (
        "AgentResult",
        "CodeModeAgent",
        "ScriptedLLM",
        "system_prompt",
    ),
    "orchestration": (
        "Journal",
        "Keep",
        "Limits",
        "OrchestrationResult",
        "Orchestrator",
        "Store",
        "Tool",
        "ToolCache",
        "fork_run",
        "orchestrate",
        "orchestrate_async",
        "orchestrate_local",
        "orchestrator",
        "orchestrator_from_str",
        "resume_run",
        "tool",
        "tools_from_mcp",
    ),
    "sandbox": (
        "Dir",
        "File",
        "Resources",
        "Sandbox",
        "SandboxRun",
        "SandboxSession",
        "Secret",
        "create",
        "create_session",
    ),
}
"""``jupyter_sandbox.NAME`` is ``jupyter_sandbox.<subpackage>.NAME``, imported on first use."""


def publish(module: str, namespace: Mapping[str, object], names: Iterable[str]) -> None:
    """Set ``__module__`` to ``module`` on each class in ``names`` still defined privately.

    A traceback, ``repr`` or ``help()`` then reads ``jupyter_sandbox.errors.ToolError``, which
    is what users import and catch, not ``jupyter_sandbox._shared._errors.ToolError`` (httpx
    does the same). A class a more specific public module already claimed keeps that home.
    Pickle still works: ``module`` exports each name.
    """
    for name in names:
        obj = namespace[name]
        if isinstance(obj, type) and _private(obj.__module__):
            obj.__module__ = module


def publish_top_level(package: str, namespace: Mapping[str, object]) -> None:
    """Called last in each engine's ``__init__`` (and in a subpackage whose names it hands on
    lazily, `lazy`): its names the top level hands on get ``jupyter_sandbox`` as their home,
    however they were first imported."""
    names = TOP_LEVEL.get(package.rpartition(".")[2], ())
    publish("jupyter_sandbox", namespace, [name for name in names if name in namespace])


def lazy(
    package: str, namespace: dict[str, object], where: Mapping[str, Iterable[str]]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """A package's ``__getattr__`` and ``__dir__`` (PEP 562) for names imported on first use:
    ``where`` maps a submodule (relative to ``package``) to the names it gives. A name loaded
    is kept in ``namespace`` (the next lookup is a plain one); the submodule publishes its
    own names (`publish_top_level`) when it loads.
    """
    homes = {name: module for module, names in where.items() for name in names}

    def __getattr__(name: str) -> object:
        module = homes.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(f".{module}", package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(homes))

    return __getattr__, __dir__


def _private(module: str) -> bool:
    return any(part.startswith("_") for part in module.split("."))
