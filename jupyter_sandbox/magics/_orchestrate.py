"""``%%orchestrate``: run the cell in Monty, calling only registered tools."""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib.util
import sys
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic import cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments
from traitlets import Bool, Float, Int, TraitError, Unicode, observe, validate

from .._shared import _defaults as default
from .._shared import _otel
from .._shared._errors import OrchestrationError, SandboxConfigError, StoreError
from .._shared._events import EventCallback
from .._shared._scrub import shown_value
from .._shared._text import unindented
from ..orchestration import (
    MB,
    Journals,
    Keep,
    Limits,
    OrchestrationResult,
    ToolCache,
    orchestrate,
    result_of,
)
from ._cell_view import notebook_scope, show_run
from ._common import (
    CellMagics,
    check_out,
    help_option,
    in_options,
    inputs_option,
    lookup,
    megabytes_option,
    megabytes_setting,
    out_option,
    parse_options,
    select_tools,
    split_names,
    tools_option,
)

if TYPE_CHECKING:  # the store is imported when a cell first opens one (`open_store`)
    from ..orchestration import Store

_DEFAULTS = Limits()
"""Where the ``%config`` settings and the options' help read their defaults."""
PROMPTS = 1000
"""Runs whose cell's prompt number a kernel remembers (`OrchestrateMagics.prompts`)."""
_KEEP = Keep()
"""Where the ``%config`` settings of what is kept read their defaults (MB each)."""


@magics_class
class OrchestrateMagics(CellMagics):
    """Defaults are configurable: ``%config OrchestrateMagics.timeout = 60``."""

    timeout = Float(_DEFAULTS.timeout, help="Seconds of Monty compute time per cell.").tag(
        config=True
    )
    max_calls = Int(_DEFAULTS.max_calls, help="Tool calls per cell.").tag(config=True)
    max_stack_depth = Int(
        _DEFAULTS.max_stack_depth, help="Function calls nested at once in a cell's code."
    ).tag(config=True)
    max_memory = megabytes_setting(_DEFAULTS.max_memory, "Monty heap per cell")
    max_result = megabytes_setting(
        _DEFAULTS.max_result, "What the cell's value may take written out"
    )
    max_output = megabytes_setting(_DEFAULTS.max_output, "Text a cell may print")
    max_transfer = megabytes_setting(
        _DEFAULTS.max_transfer, "Tool arguments a cell's calls may copy to the host"
    )
    keep_value = megabytes_setting(_KEEP.value, "One tool value kept whole (else a summary)")
    keep_run = megabytes_setting(_KEEP.run, "Tool values one run's trace and journal keep")
    keep_kernel = megabytes_setting(_KEEP.kernel, "Tool values the kernel's journals keep")
    store_run = megabytes_setting(_KEEP.store_run, "What one run may write to the store")
    store_cell = megabytes_setting(_KEEP.store_cell, "What the store keeps of one cell's runs")
    store_total = megabytes_setting(_KEEP.store_total, "What the store keeps in all")
    type_check = Bool(True, help="Type-check cells against the tools' signatures.").tag(config=True)
    store = Unicode(
        None,
        allow_none=True,
        help="Path of the durable store (SQLite) every cell's run is kept in, so it can be "
        f"resumed, approved or forked after a restart. None: ${default.STORE_ENV}, else "
        f"{default.STORE_PATH}; empty: no store.",
    ).tag(config=True)

    otel = Bool(
        None,
        allow_none=True,
        help="Trace each run, tool call and container with OpenTelemetry: True on, False off, "
        "None: on when the OTEL_* environment names an exporter or an OTLP endpoint.",
    ).tag(config=True)

    @validate("otel")
    def _otel_installed(self, proposal: dict[str, Any]) -> bool | None:
        on: bool | None = proposal["value"]
        if on and importlib.util.find_spec("opentelemetry.sdk") is None:
            raise TraitError(
                "OrchestrateMagics.otel = True needs OpenTelemetry: "
                "pip install 'jupyter-sandbox[otel]', then restart the kernel"
            )
        return on

    @observe("otel")
    def _otel_switched(self, change: dict[str, Any]) -> None:
        _otel.configure(change["new"])  # kernel-wide: %%sandbox cells are traced too

    def __init__(self, shell: InteractiveShell) -> None:
        super().__init__(shell=shell)
        self._journals = Journals()
        self.tool_cache = ToolCache()
        """What ``--cache`` reads and fills; ``.clear()`` it to start over."""
        self.prompts: dict[str, int] = {}
        """The prompt number (``In [n]``) of the cell each stored run of this kernel ran in:
        how ``%orchestrate_pending`` names a cell a person can find (the newest `PROMPTS`)."""

    @magic_arguments("%orchestrate")  # usage and help show %%orchestrate
    @help_option
    @inputs_option
    @out_option
    @tools_option
    @argument(
        "--timeout",
        type=float,
        metavar="S",
        help=f"seconds of Monty compute time (default {_DEFAULTS.timeout:g})",
    )
    @argument(
        "--max-memory",
        type=megabytes_option,
        metavar="SIZE",
        help=f"Monty heap (a size, e.g. 2g, or MB; default {_DEFAULTS.max_memory})",
    )
    @argument(
        "--max-calls",
        type=int,
        metavar="N",
        help=f"tool calls per cell (default {_DEFAULTS.max_calls})",
    )
    @argument(
        "--max-result",
        type=megabytes_option,
        metavar="SIZE",
        help=f"value size written out (a size, e.g. 2g, or MB; default {_DEFAULTS.max_result})",
    )
    @argument(
        "--max-output",
        type=megabytes_option,
        metavar="SIZE",
        help=f"printed text (a size, e.g. 2g, or MB; default {_DEFAULTS.max_output})",
    )
    @argument(
        "--max-stack-depth",
        type=int,
        metavar="N",
        help=f"function calls nested at once (default {_DEFAULTS.max_stack_depth})",
    )
    @argument(
        "--max-transfer",
        type=megabytes_option,
        metavar="SIZE",
        help="tool arguments copied to the host (a size, e.g. 2g, or MB;"
        f" default {_DEFAULTS.max_transfer})",
    )
    @argument("--no-type-check", action="store_true", help="skip the type check")
    @argument("--quiet", action="store_true", help="no trace display (prints still show)")
    @argument(
        "--resume",
        action="store_true",
        help="continue this cell's last unfinished run from its snapshot in the store (code"
        " before it does not run again), else answer the calls completed by this cell's last"
        " run (or the last failed run of the same code) from the journal",
    )
    @argument(
        "--cache",
        action="store_true",
        help="reuse tool results across cells, keyed by tool and arguments",
    )
    @argument(
        "--session",
        metavar="NAME",
        help="keep the cell's variables, functions and classes for the next cell of this session",
    )
    @argument("--no-store", action="store_true", help="keep this cell's run out of the store")
    @cell_magic
    def orchestrate(self, line: str, cell: str) -> Any:
        """Run the cell in the Monty sandbox; it can call only tools registered with @tool.

        The value of the last expression is the cell's result. Example:

            %%orchestrate --in x,y --out total
            add(x, y) * 2
        """  # fmt: skip
        shell = self.shell
        args = parse_options(self.orchestrate, line)
        if args is None:  # --help: printed, nothing runs
            return None
        check_out(args.out)
        inputs = {name: lookup(shell, name, "--in") for name in split_names(args.inputs)}
        tools = select_tools(args.tools)
        cell_key, scope = self._cell_key(cell), notebook_scope(shell)
        store = None if args.no_store else self.open_store()
        journal, resumable = self._journals.start(cell_key, cell, resume=args.resume)
        if args.resume and not resumable and not _unfinished(store, scope, cell_key):
            _warn(
                "--resume: no earlier run of this cell, nor a failed run of the same code, "
                "completed a tool call; running every call"
            )
        try:  # a bad option or %config value: one usage line naming the option
            limits = self.limits(
                timeout=args.timeout,
                max_memory=args.max_memory,
                max_calls=args.max_calls,
                max_result=args.max_result,
                max_output=args.max_output,
                max_stack_depth=args.max_stack_depth,
                max_transfer=args.max_transfer,
            )
            keep = Keep(
                value=self.keep_value,
                run=self.keep_run,
                kernel=self.keep_kernel,
                store_run=self.store_run,
                store_cell=self.store_cell,
                store_total=self.store_total,
            )
        except SandboxConfigError as exc:
            raise self.usage_error(exc) from None
        self._journals.budget = self.tool_cache.budget = keep.kernel * MB
        if store is not None:
            store.caps = keep

        def run(on_event: EventCallback) -> OrchestrationResult:
            return orchestrate(
                # a leading newline: errors count lines as the editor does (%% is line 1)
                "\n" + _with_out_value(unindented(cell), args.out),
                tools=tools,
                inputs=inputs,
                limits=limits,
                type_check=self.type_check and not args.no_type_check,
                on_event=on_event,
                journal=journal,
                resume=args.resume,
                cache=self.tool_cache if args.cache else None,
                session=args.session,
                scope=scope,
                store=store,
                cell=cell_key,
                keep=keep,
            )

        try:
            result = show_run(run, quiet=args.quiet, code=cell, resumable=True)
        except OrchestrationError as exc:
            self._remember(result_of(exc), store)
            raise
        except SandboxConfigError as exc:
            raise self.usage_error(exc) from None
        except StoreError as exc:  # --resume of a run live elsewhere, a refused dump: one line
            raise UsageError(in_options(exc)) from None
        finally:
            self._journals.finished(cell, journal)
        self._remember(result, store)
        if args.out:
            shell.user_ns[args.out] = result.value
        return shown_value(result.value, result.secrets)  # a sandbox tool's secret: hidden

    def _remember(self, result: OrchestrationResult | None, store: Store | None) -> None:
        """Note the prompt number of a stored run's cell (see ``prompts``); a paused run's in
        the store too, where a later kernel (after a restart) finds it to name the cell as the
        saved notebook does (only paused runs are listed: a write per cell would cost)."""
        if result is not None and result.run_id is not None:
            self.prompts[result.run_id] = self.prompt_number()
            while len(self.prompts) > PROMPTS:
                del self.prompts[next(iter(self.prompts))]
            if store is not None and result.pending:
                with contextlib.suppress(StoreError):  # a name's detail: never the cell's error
                    store.note_prompt(result.run_id, self.prompt_number())

    def limits(self, **given: float | None) -> Limits:
        """The configured limits (``%config OrchestrateMagics.timeout`` ...), each of
        ``given`` that is not None (a cell's ``--timeout`` ...) winning over its setting, as
        an option on the command line wins over a configured default; raises
        `SandboxConfigError` for a bad value."""
        fields: dict[str, Any] = {
            "timeout": self.timeout,
            "max_memory": self.max_memory,
            "max_calls": self.max_calls,
            "max_result": self.max_result,
            "max_output": self.max_output,
            "max_stack_depth": self.max_stack_depth,
            "max_transfer": self.max_transfer,
        }
        fields.update((name, value) for name, value in given.items() if value is not None)
        return Limits(**fields)

    def open_store(self) -> Store | None:
        """The store runs and sessions are kept in (``%config OrchestrateMagics.store``; one
        per path and process); None when that setting is empty."""
        from ..orchestration import open_store  # the durable subsystem: loaded here, once

        path = default.store_or_default(self.store, needed=True)  # a cell is resumable
        if path is None:
            return None
        try:
            return open_store(path)
        except (StoreError, SandboxConfigError) as exc:
            raise UsageError(f"%config OrchestrateMagics.store: {exc}") from None

    def _cell_key(self, cell: str) -> str:
        """The notebook's id for this cell when the frontend sends one (JupyterLab does), so an
        edited cell keeps its journal; else the code itself."""
        return self.frontend_cell_id() or hashlib.sha256(cell.encode()).hexdigest()


def _unfinished(store: Store | None, scope: str, cell: str) -> bool:
    """Whether ``store`` holds a run of this cell that did not end ok (``--resume`` takes it
    up, in this kernel or after a restart)."""
    last = store.last_run(scope, cell) if store is not None else None
    return last is not None and last.status != "ok"


def _with_out_value(code: str, out: str | None) -> str:
    """The code to run for ``--out NAME``. A cell whose last statement assigns ``NAME``
    (``m = f(x)``) means that value, as ``%%sandbox --out m`` reads ``m``: an expression
    ``NAME`` is appended (after the last line, so line numbers stay the editor's). A cell
    ending in another statement has no value to store: one line says so, the cell still runs
    (and stores None)."""
    if out is None:
        return code
    try:
        body = ast.parse(code).body
    except SyntaxError:  # Monty reports it, with its own line numbers
        return code
    last = body[-1] if body else None
    if last is None or isinstance(last, ast.Expr):
        return code
    if out in _assigned(last):
        return f"{code}\n{out}"
    _warn(
        f"--out {out}: the cell ends in a statement that does not assign {out}, so its value "
        f"is None; end it with an expression or with {out} = ..."
    )
    return code


def _assigned(statement: ast.stmt) -> set[str]:
    """Names a top-level assignment statement binds (``a = b = 1``, ``a, b = ...``,
    ``a: int = 1``, ``a += 1``)."""
    if isinstance(statement, ast.Assign):
        targets = statement.targets
    elif isinstance(statement, ast.AugAssign) or (
        isinstance(statement, ast.AnnAssign) and statement.value is not None
    ):
        targets = [statement.target]
    else:
        return set()
    return {
        node.id
        for target in targets
        for node in ast.walk(target)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)
    }


def _warn(message: str) -> None:
    """One line on the cell's stderr: the cell goes on."""
    print(message, file=sys.stderr)
