"""``%mcp_serve [--port N]`` / ``%mcp_serve stop``: the notebook as an MCP server whose one
tool, ``run_code``, runs code against the notebook's tools as ``%%orchestrate`` would (its
limits, store and approval gates; see `orchestration.serve_mcp`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic import line_magic, magics_class, no_var_expand
from IPython.core.magic_arguments import argument, magic_arguments
from jupyter_core.paths import jupyter_runtime_dir

from .._shared._errors import SandboxConfigError
from ..orchestration import (
    OrchestrationResult,
    Serving,
    build_stubs,
    mcp_cell,
    orchestrate,
    registry,
    serve_mcp,
)
from ._cell_view import notebook_scope
from ._common import CellMagics, help_option, parse_options

if TYPE_CHECKING:
    from ._orchestrate import OrchestrateMagics


@magics_class
class MCPMagics(CellMagics):
    options = {"port": "--port"}  # noqa: RUF012  # the base's ClassVar

    def __init__(self, shell: InteractiveShell, cells: OrchestrateMagics, **kwargs: Any) -> None:
        super().__init__(shell=shell, **kwargs)
        self.cells = cells
        self.serving: Serving | None = None

    @magic_arguments()
    @help_option
    @argument("action", nargs="?", choices=["stop"], help="stop serving")
    @argument(
        "--port", type=int, metavar="N", help="loopback port to serve on (default: a free one)"
    )
    @line_magic
    @no_var_expand
    def mcp_serve(self, line: str) -> None:
        """Serve this notebook's tools to MCP clients as one tool, ``run_code``, on loopback.

        Prints the URL and the path of a file holding the bearer token (a new one each time
        it serves), in Jupyter's runtime folder: the token itself is never in the cell's
        output, which the notebook keeps. Each call's code runs as an ``%%orchestrate`` cell
        would, under ``%config OrchestrateMagics`` limits; a gated call pauses the run until
        ``%orchestrate_approve RUN_ID``. The line is taken as written (`no_var_expand`):
        IPython would run code between ``{...}`` on it."""
        args = parse_options(self.mcp_serve, line)
        if args is None:
            return
        if args.action == "stop":
            if self.serving is None:
                raise UsageError("%mcp_serve stop: not serving")
            self.stop()
            print("MCP server stopped; its token is void.")
            return
        if self.serving is not None and self.serving.running:
            raise UsageError(
                f"%mcp_serve: already serving at {self.serving.url}; %mcp_serve stop first"
            )
        self.cells.limits()  # a bad %config value: said now, not to the first client
        self.cells.open_store()
        try:
            self.serving = serve_mcp(
                self._run,
                self._stubs,
                self._status,
                port=args.port or 0,
                token_folder=Path(jupyter_runtime_dir()),
            )
        except SandboxConfigError as exc:
            raise self.usage_error(exc) from None
        print(
            f"Serving this notebook's tools over MCP at {self.serving.url} (loopback only).\n"
            f"Its token is in {self.serving.token_file} (yours only; not shown here, so the "
            "notebook does not keep it; removed when serving stops).\n"
            "Clients send it as 'Authorization: Bearer <token>'. %mcp_serve stop ends it."
        )

    def stop(self) -> None:
        if self.serving is not None:
            self.serving.stop()
            self.serving = None

    def _run(self, code: str) -> OrchestrationResult:
        """One client's code, as a cell of this notebook would run it (on the server's thread)."""
        try:
            limits = self.cells.limits()
            store = self.cells.open_store()
        except UsageError as exc:  # the store setting went bad since
            raise SandboxConfigError(str(exc)) from None
        return orchestrate(
            code,
            tools=dict(registry),
            limits=limits,
            type_check=self.cells.type_check,
            store=store,
            scope=notebook_scope(self.shell),
            cell=mcp_cell(code),  # approving its gated call asks for the digest
        )

    def _stubs(self) -> str:
        return build_stubs(dict(registry), {})

    def _status(self, run_id: str) -> str | None:
        from ..orchestration import run_status

        store = self.cells.open_store()
        return None if store is None else run_status(store, run_id)
