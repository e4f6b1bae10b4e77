"""IPython magics: thin shells that parse arguments, read notebook variables, call an engine,
hand its events to a view and store results. Logic that grows here belongs in an engine."""

from __future__ import annotations

import contextlib
import sys
from typing import TYPE_CHECKING, Any, TypeVar
from weakref import WeakKeyDictionary

from IPython.core.magic import Magics
from traitlets import TraitError

from .._shared._errors import SandboxError

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

CELL_MAGICS = ("orchestrate", "sandbox", "codemode", "codegen")
RUN_STATE = "jupyter_sandbox.run_state"
"""The comm target the JupyterLab extension asks a paused run's state through (answer.ts)."""
LINE_MAGICS = (
    "orchestrate_sessions",
    "orchestrate_reset",
    "orchestrate_pending",
    "orchestrate_approve",
    "orchestrate_reject",
    "orchestrate_fork",
    "sandbox_doctor",
    "sandbox_sessions",
    "sandbox_snapshot",
    "sandbox_stop",
    "mcp_serve",
)

_previous_handlers: WeakKeyDictionary[InteractiveShell, tuple[tuple[type, ...], Any]] = (
    WeakKeyDictionary()
)
"""Each shell's custom-exception handler from before `load` set ours (IPython keeps one):
`unload` puts it back instead of leaving the shell with none."""


M = TypeVar("M", bound=Magics)


def load(ipython: InteractiveShell) -> None:
    """Register the magics, unless they are live already (the sandbox kernel loads them at
    start): registering them again would drop their state (the ``--resume`` journals, the
    ``--cache`` results)."""
    from ..orchestration import presenter
    from ._cell_view import OrchestratorViews
    from ._codegen import CodeGenMagics
    from ._codemode import CodeModeMagics
    from ._common import help_alone, reject_as_typed, show_error
    from ._doctor import DoctorMagics
    from ._durable import DurableMagics
    from ._mcp import MCPMagics
    from ._orchestrate import OrchestrateMagics
    from ._sandbox import SandboxMagics
    from ._sessions import SessionMagics

    live = ipython.magics_manager.magics["cell"].get("orchestrate")
    if isinstance(getattr(live, "__self__", None), OrchestrateMagics):
        return
    cells = _configured(OrchestrateMagics, ipython)
    ipython.register_magics(cells)
    durable = DurableMagics(ipython, cells)
    ipython.register_magics(durable)
    if getattr(ipython, "kernel", None) is not None:  # a frontend may ask how runs stand
        import comm

        comm.get_comm_manager().register_target(RUN_STATE, durable.run_state)
    sandbox = _configured(SandboxMagics, ipython)
    ipython.register_magics(sandbox)
    ipython.register_magics(CodeModeMagics(ipython, cells))
    ipython.register_magics(_configured(CodeGenMagics, ipython))
    ipython.register_magics(DoctorMagics(ipython, cells, sandbox))
    ipython.register_magics(MCPMagics(ipython, cells))
    ipython.register_magics(SessionMagics(ipython))
    views = OrchestratorViews(ipython)  # each orchestrator call's view
    presenter.current = views
    ipython.events.register("post_execute", views.cell_ended)
    for transformer in (help_alone, reject_as_typed):
        if transformer not in ipython.input_transformers_cleanup:
            ipython.input_transformers_cleanup.append(transformer)
    _reap_in_background()
    _previous_handlers.setdefault(ipython, (ipython.custom_exceptions, ipython.CustomTB))
    ipython.set_custom_exc((SandboxError,), show_error)


def _configured(cls: type[M], ipython: InteractiveShell) -> M:
    """``cls(shell=ipython)``, even when the shell's config holds a value of ours its
    validator refused: IPython's ``%config`` merges a value into the shell's config before
    the trait refuses it, so the refused value stayed there and every later ``%load_ext``
    raised TraitError, leaving no magics. That class's settings are dropped, said in one
    line."""
    try:
        return cls(shell=ipython)
    except TraitError as error:
        dropped = ipython.config.pop(cls.__name__, None)
        print(
            f"jupyter-sandbox: %config {cls.__name__} settings {dict(dropped or {})!r} were "
            f"dropped ({error}); set the ones you need again",
            file=sys.stderr,
        )
        return cls(shell=ipython)


def _reap_in_background() -> None:
    """Remove containers and temp folders of dead kernels without slowing ``%load_ext``
    (folders need no Docker)."""
    import threading

    def reap() -> None:
        from ..sandbox import reap_folders, reap_orphans

        try:
            reap_folders()
            reap_orphans()
        except Exception:  # no engine, or it went away: nothing to reap then
            return

    threading.Thread(target=reap, name="jupyter-sandbox-reaper", daemon=True).start()


def unload(ipython: InteractiveShell) -> None:
    from ..orchestration import presenter
    from ._cell_view import OrchestratorViews
    from ._common import help_alone, reject_as_typed

    views = presenter.current
    if isinstance(views, OrchestratorViews):
        with contextlib.suppress(ValueError):  # registered by this module's load only
            ipython.events.unregister("post_execute", views.cell_ended)
    presenter.current = None
    serving = getattr(ipython.magics_manager.magics["line"].get("mcp_serve"), "__self__", None)
    if serving is not None:  # the served notebook is going: so is its server
        serving.stop()
    for transformer in (help_alone, reject_as_typed):
        if transformer in ipython.input_transformers_cleanup:
            ipython.input_transformers_cleanup.remove(transformer)
    sessions = sys.modules.get("jupyter_sandbox.sandbox._session")
    if sessions is not None:  # %unload_ext: the kernel's sessions go (kept ones stay)
        sessions.close_sessions()
    for name in CELL_MAGICS:
        ipython.magics_manager.magics["cell"].pop(name, None)
    for name in LINE_MAGICS:
        ipython.magics_manager.magics["line"].pop(name, None)
    if getattr(ipython, "kernel", None) is not None:
        import comm

        comm.get_comm_manager().targets.pop(RUN_STATE, None)
    previous = _previous_handlers.pop(ipython, None)
    if previous is not None:
        ipython.custom_exceptions, ipython.CustomTB = previous
