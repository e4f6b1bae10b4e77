"""IPython magics: thin shells that parse arguments, read notebook variables, call an engine,
hand its events to a view and store results. Logic that grows here belongs in an engine."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell


def load(ipython: InteractiveShell) -> None:
    from ._orchestrate import OrchestrateMagics

    ipython.register_magics(OrchestrateMagics(shell=ipython))


def unload(ipython: InteractiveShell) -> None:
    for name in ("orchestrate",):
        ipython.magics_manager.magics["cell"].pop(name, None)
