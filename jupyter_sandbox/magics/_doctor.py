"""``%sandbox_doctor``: the CLI's ``doctor`` from a notebook, with this kernel's settings.

The checks are the engine's (`jupyter_sandbox._doctor`); this only reads the settings the magics
run with (``%config SandboxMagics.base_image``/``isolation``, ``OrchestrateMagics.store``) so
the answer is about this kernel, not the defaults, and prints the report.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic import line_magic, magics_class, no_var_expand
from IPython.core.magic_arguments import magic_arguments

from .._doctor import report, run_checks
from ._common import CellMagics, help_option, parse_options

if TYPE_CHECKING:
    from ._orchestrate import OrchestrateMagics
    from ._sandbox import SandboxMagics


@magics_class
class DoctorMagics(CellMagics):
    """``%sandbox_doctor``; reads the settings of the two cell magics it is given."""

    def __init__(
        self, shell: InteractiveShell, cells: OrchestrateMagics, sandbox: SandboxMagics
    ) -> None:
        super().__init__(shell=shell)
        self.cells = cells
        self.sandbox = sandbox

    @magic_arguments()
    @help_option
    @line_magic
    @no_var_expand
    def sandbox_doctor(self, line: str) -> None:
        """Check this machine's setup for both magics: the engine, the base image, gVisor, the
        store, Monty, the JupyterLab extension and the kernelspec, one line each, with the fix
        for each problem (FAIL: a magic cannot work; warn: optional or weaker). Its line is
        taken as written (`no_var_expand`), as the ``%orchestrate_*`` magics take theirs:
        IPython would otherwise run the code between ``{...}`` on it."""
        if parse_options(self.sandbox_doctor, line) is None:
            return
        checks = run_checks(
            base_image=self.sandbox.base_image or None,
            isolation=self.sandbox.isolation or None,
            store=self.cells.store,
        )
        print("\n".join(report(checks)))
