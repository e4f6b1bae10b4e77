"""jupyter-sandbox: run untrusted code from a notebook.

Two engines, usable with or without IPython:

- `orchestrate` runs Python in Monty, a sandboxed interpreter that can call only registered
  tools (``%%orchestrate`` in a notebook);
- `create` defines a disposable Docker sandbox with typed inputs and outputs (``%%sandbox``).

`CodeModeAgent` builds on `orchestrate`: a model writes the orchestration code, failures go
back to it until the code works (``%%codemode``). `AutoCoderAgent` builds on `create`: a
model writes a program and its tests, the sandbox runs them until they pass (``%%codegen``).

``%load_ext jupyter_sandbox`` registers the cell magics. Every exception we raise is in
`jupyter_sandbox.errors` (documented there as one tree), every ``on_event`` event in
`jupyter_sandbox.events`; every other public name is here (and its ``__module__`` says so).
"""

from __future__ import annotations

from importlib.metadata import version
from typing import TYPE_CHECKING

from . import errors, events
from ._shared._public import TOP_LEVEL, lazy, publish
from .errors import (
    CodeModeError,
    ContainerError,
    DockerUnavailable,
    ImageBuildError,
    Interrupted,
    InvalidOutput,
    InvalidPackageError,
    LimitExceeded,
    MissingOutput,
    NonZeroExit,
    OrchestrationError,
    OutOfMemory,
    OutputError,
    OutputLimitExceeded,
    SandboxCancelled,
    SandboxConfigError,
    SandboxError,
    SandboxTimeout,
    SessionCellError,
    SessionLost,
    ToolError,
    TypeCheckError,
    UnusableImage,
)
from .events import ToolCall

if TYPE_CHECKING:  # what __getattr__ imports on first use (_public.TOP_LEVEL)
    from IPython.core.interactiveshell import InteractiveShell

    from .codegen import AutoCoderAgent, CodeGenEvalResult
    from .codemode import AgentResult, CodeModeAgent, ScriptedLLM, system_prompt
    from .orchestration import (
        Journal,
        Keep,
        Limits,
        OrchestrationResult,
        Orchestrator,
        Store,
        Tool,
        ToolCache,
        fork_run,
        orchestrate,
        orchestrate_async,
        orchestrate_local,
        orchestrator,
        orchestrator_from_str,
        resume_run,
        tool,
        tools_from_mcp,
    )
    from .sandbox import (
        Dir,
        File,
        Resources,
        Sandbox,
        SandboxRun,
        SandboxSession,
        Secret,
        create,
        create_session,
    )

__version__ = version("jupyter-sandbox")
"""From the installed package's metadata, which the build reads from the labextension's
``package.json``: the one place the version is written."""

__all__ = [
    "AgentResult",
    "AutoCoderAgent",
    "CodeGenEvalResult",
    "CodeModeAgent",
    "CodeModeError",
    "ContainerError",
    "Dir",
    "DockerUnavailable",
    "File",
    "ImageBuildError",
    "Interrupted",
    "InvalidOutput",
    "InvalidPackageError",
    "Journal",
    "Keep",
    "LimitExceeded",
    "Limits",
    "MissingOutput",
    "NonZeroExit",
    "OrchestrationError",
    "OrchestrationResult",
    "Orchestrator",
    "OutOfMemory",
    "OutputError",
    "OutputLimitExceeded",
    "Resources",
    "Sandbox",
    "SandboxCancelled",
    "SandboxConfigError",
    "SandboxError",
    "SandboxRun",
    "SandboxSession",
    "SandboxTimeout",
    "ScriptedLLM",
    "Secret",
    "SessionCellError",
    "SessionLost",
    "Store",
    "Tool",
    "ToolCache",
    "ToolCall",
    "ToolError",
    "TypeCheckError",
    "UnusableImage",
    "__version__",
    "create",
    "create_session",
    "errors",
    "events",
    "fork_run",
    "load_ipython_extension",
    "orchestrate",
    "orchestrate_async",
    "orchestrate_local",
    "orchestrator",
    "orchestrator_from_str",
    "resume_run",
    "system_prompt",
    "tool",
    "tools_from_mcp",
    "unload_ipython_extension",
]


def load_ipython_extension(ipython: InteractiveShell) -> None:
    """``%load_ext jupyter_sandbox``: register the magics (imported lazily: IPython is optional).

    A no-op when they are already live (the sandbox kernel loads them at start): registering
    them again would drop their state (the ``--resume`` journals, the ``--cache`` results).
    """
    from .magics import load

    load(ipython)


def unload_ipython_extension(ipython: InteractiveShell) -> None:
    from .magics import unload

    unload(ipython)


__getattr__, __dir__ = lazy(__name__, globals(), TOP_LEVEL)
"""An engine's name on first use (PEP 562): ``import jupyter_sandbox`` alone loads neither
Monty's driver and store nor the Docker side (`_public.TOP_LEVEL` says which is where)."""

publish(__name__, globals(), [name for name in __all__ if name in globals()])
