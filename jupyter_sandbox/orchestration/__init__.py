"""The orchestration engine: Python run in Monty that can call only registered tools.

No IPython here: the magic is a thin shell over `orchestrate`. Each call checks out a fresh
Monty session (no state leaks between cells), drives it on a worker thread and waits on the
calling thread, which therefore stays interruptible.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._shared._public import lazy, publish_top_level

# The front door for the other packages (not public API: not in __all__).
from ._approval import full_repr as full_repr
from ._confine import ACCOUNT_FILES as ACCOUNT_FILES
from ._confine import ids_taken as ids_taken
from ._confine import launcher_works as launcher_works
from ._doors import fork_run, orchestrate, orchestrate_async, orchestrate_local, resume_run
from ._driver import NESTING_CEILING
from ._keep import MB as MB
from ._keep import Keep
from ._limits import Limits
from ._mcp import MCPTool, MCPTools, tools_from_mcp
from ._mcp_serve import Serving as Serving
from ._mcp_serve import mcp_cell as mcp_cell
from ._mcp_serve import mcp_outcomes as mcp_outcomes
from ._mcp_serve import serve_mcp as serve_mcp
from ._memo import Journal, ToolCache
from ._memo import Journals as Journals
from ._orchestrator import Orchestrator, orchestrator, orchestrator_from_str
from ._orchestrator import presenter as presenter
from ._orchestrator import with_flyte_map as with_flyte_map
from ._registry import Tool, ToolRegistry, registry, tool
from ._registry import Tools as Tools  # codemode reads it here
from ._registry import resolve_tools as resolve_tools
from ._result import OrchestrationResult
from ._result import answered as answered
from ._result import result_of as result_of
from ._sandbox_tool import bind_inputs as bind_inputs
from ._spec import refuse_flat as refuse_flat
from ._stubs import build_stubs
from ._stubs import stubs as stubs
from ._values import is_plain as is_plain
from ._workers import confinement as confinement

_DURABLE = (
    "KEY_BYTES",
    "CallNow",
    "PausedRun",
    "Store",
    "call_now",
    "check_private_file",
    "check_private_folder",
    "default_store_path",
    "open_store",
    "paused_runs",
    "read_whole",
    "run_status",
    "sessions",
    "unkept_inputs",
    "unseen",
)
"""The durable subsystem's names handed on here, imported on first use (`__getattr__`): a
run without a store, and ``%load_ext``, load neither it nor SQLite."""

if TYPE_CHECKING:  # what __getattr__ imports on first use (_DURABLE)
    from .durable import KEY_BYTES as KEY_BYTES
    from .durable import CallNow as CallNow
    from .durable import PausedRun as PausedRun
    from .durable import Store as Store
    from .durable import call_now as call_now
    from .durable import check_private_file as check_private_file
    from .durable import check_private_folder as check_private_folder
    from .durable import default_store_path as default_store_path
    from .durable import open_store as open_store
    from .durable import paused_runs as paused_runs
    from .durable import read_whole as read_whole
    from .durable import run_status as run_status
    from .durable import sessions as sessions
    from .durable import unkept_inputs as unkept_inputs
    from .durable import unseen as unseen

__all__ = [
    "NESTING_CEILING",
    "Journal",
    "Keep",
    "Limits",
    "MCPTool",
    "MCPTools",
    "OrchestrationResult",
    "Orchestrator",
    "Store",
    "Tool",
    "ToolCache",
    "ToolRegistry",
    "build_stubs",
    "default_store_path",
    "fork_run",
    "orchestrate",
    "orchestrate_async",
    "orchestrate_local",
    "orchestrator",
    "orchestrator_from_str",
    "registry",
    "resume_run",
    "tool",
    "tools_from_mcp",
]


__getattr__, __dir__ = lazy(__name__, globals(), {"durable": _DURABLE})
publish_top_level(__name__, globals())
