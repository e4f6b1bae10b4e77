"""jupyter-sandbox: run untrusted code from a notebook.

Two engines, usable with or without IPython:

- `orchestrate` runs Python in Monty, a sandboxed interpreter that can call only registered
  tools (``%%orchestrate`` in a notebook);
- `create` defines a disposable Docker sandbox with typed inputs and outputs (``%%sandbox``).

`CodeModeAgent` builds on `orchestrate`: a model writes the orchestration code, failures go
back to it until the code works (``%%codemode``).

``%load_ext jupyter_sandbox`` registers the cell magics. Every exception we raise is in
`jupyter_sandbox.errors` (documented there as one tree).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _errors as errors
from ._errors import (
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
    OutputLimitExceeded,
    SandboxCancelled,
    SandboxConfigError,
    SandboxError,
    SandboxTimeout,
    ToolError,
    TypeCheckError,
    UnusableImage,
)
from ._events import ToolCall
from .codemode import AgentResult, CodeModeAgent, system_prompt
from .orchestrate import (
    OrchestrationResult,
    Tool,
    orchestrate,
    orchestrate_async,
    orchestrate_local,
    tool,
)
from .sandbox import Dir, File, Resources, Sandbox, SandboxRun, create

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

__version__ = "0.1.0"

__all__ = [
    "AgentResult",
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
    "LimitExceeded",
    "MissingOutput",
    "NonZeroExit",
    "OrchestrationError",
    "OrchestrationResult",
    "OutOfMemory",
    "OutputLimitExceeded",
    "Resources",
    "Sandbox",
    "SandboxCancelled",
    "SandboxConfigError",
    "SandboxError",
    "SandboxRun",
    "SandboxTimeout",
    "Tool",
    "ToolCall",
    "ToolError",
    "TypeCheckError",
    "UnusableImage",
    "__version__",
    "create",
    "errors",
    "load_ipython_extension",
    "orchestrate",
    "orchestrate_async",
    "orchestrate_local",
    "system_prompt",
    "tool",
    "unload_ipython_extension",
]


def load_ipython_extension(ipython: InteractiveShell) -> None:
    """``%load_ext jupyter_sandbox``: register the magics (imported lazily: IPython is optional).

    A no-op when they are already live (the sandbox kernel loads them at start): registering
    them again would drop their state (the ``--resume`` journals, the ``--cache`` results).
    """
    from .magics import load
    from .magics._orchestrate import OrchestrateMagics

    live = ipython.magics_manager.magics["cell"].get("orchestrate")
    if isinstance(getattr(live, "__self__", None), OrchestrateMagics):
        return
    load(ipython)


def unload_ipython_extension(ipython: InteractiveShell) -> None:
    from .magics import unload

    unload(ipython)
