"""IPython magics: thin shells that parse arguments, read notebook variables, call an engine,
hand its events to a view and store results. Logic that grows here belongs in an engine."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._errors import SandboxError

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

CELL_MAGICS = ("orchestrate",)


def load(ipython: InteractiveShell) -> None:
    from ._common import show_error
    from ._orchestrate import OrchestrateMagics

    ipython.register_magics(OrchestrateMagics(shell=ipython))
    ipython.set_custom_exc((SandboxError,), show_error)


def unload(ipython: InteractiveShell) -> None:
    for name in CELL_MAGICS:
        ipython.magics_manager.magics["cell"].pop(name, None)
    ipython.set_custom_exc((), None)
