"""``%%codemode``: the cell is a task in plain words; a model writes the code, Monty runs it.

``--insert`` puts the final code into a new ``%%orchestrate`` cell below, whose second line
marks where it came from (``# inserted by %%codemode, cell 3f2a9c1d``). A kernel can neither see
nor edit other cells (Jupyter's ``set_next_input`` only inserts below, or replaces the running
cell itself), so re-running cannot replace the earlier copy from here. Within one kernel
session, a re-run whose code is the one already inserted inserts nothing and says so in one
line (a person's edits to that cell stay). New code is inserted below; our JupyterLab extension
(JupyterLab, Notebook 7) then deletes the older copy with the same mark (``insert.ts``), and
one line names that mark for frontends without it.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic import cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments
from traitlets import Int, Unicode

from .._shared import _defaults as default
from .._shared._errors import CodeModeError, SandboxConfigError
from ._common import (
    CellMagics,
    check_out,
    help_option,
    inputs_option,
    lookup,
    out_option,
    parse_options,
    select_tools,
    split_names,
    tools_option,
)

if TYPE_CHECKING:
    from ._orchestrate import OrchestrateMagics

INSERT_MARK = "# inserted by %%codemode, cell"
"""The second line of an inserted cell, before a short hash of the source cell's id."""


@magics_class
class CodeModeMagics(CellMagics):
    """Defaults are configurable: ``%config CodeModeMagics.llm = 'my_llm'``."""

    llm = Unicode(
        "",
        help="Notebook variable holding the model (messages -> text, or a pydantic-ai Model), "
        "or a pydantic-ai model name such as 'openai:gpt-4o'.",
    ).tag(config=True)
    max_attempts = Int(default.MAX_ATTEMPTS, help="Model replies to try before giving up.").tag(
        config=True
    )

    def __init__(self, shell: InteractiveShell, cells: OrchestrateMagics, **kwargs: Any) -> None:
        super().__init__(shell=shell, **kwargs)
        self.cells = cells
        """``%%orchestrate``'s magics: their store (``%config OrchestrateMagics.store``) keeps
        the model's runs too."""
        self._inserted: dict[str, str] = {}
        """The cell ``--insert`` put below each source cell this session, by its mark."""

    @magic_arguments("%codemode")  # usage and help show %%codemode
    @help_option
    @argument(
        "--llm",
        metavar="NAME",
        help="notebook variable holding the model, or a pydantic-ai model (provider:model)",
    )
    @tools_option
    @inputs_option
    @out_option
    @argument("--max-attempts", type=int, metavar="N", help="model replies to try (default 3)")
    @argument(
        "--insert",
        action="store_true",
        help="insert the final code as a new %%%%orchestrate cell below",
    )
    @argument("--quiet", action="store_true", help="no code or trace display (prints still show)")
    @cell_magic
    def codemode(self, line: str, cell: str) -> Any:
        """Ask a model for orchestration code that does the task in the cell, and run it.

        Failures (type errors, tool exceptions, tracebacks) go back to the model until the
        code works or the attempts run out. Example:

            %%codemode --llm my_llm --in cities --out report
            Fetch the temperature of each city and return the warmest.
        """  # fmt: skip
        shell = self.shell
        args = parse_options(self.codemode, line)
        if args is None:  # --help: printed, nothing runs
            return None
        task = cell.strip()
        if not task:
            raise UsageError("%%codemode: the cell is the task; describe it in plain words")
        check_out(args.out)
        llm_name = args.llm or self.llm
        if not llm_name:
            raise UsageError("no model: pass --llm NAME or %config CodeModeMagics.llm = 'NAME'")
        # provider:model is a pydantic-ai model name, anything else a notebook variable
        llm = llm_name if ":" in llm_name else lookup(shell, llm_name, "--llm")
        input_names = split_names(args.inputs)
        inputs = {name: lookup(shell, name, "--in") for name in input_names}
        store = self.cells.open_store()  # None: the setting is empty, no store
        from ..codemode import CodeModeAgent  # code mode and its view: loaded at first use
        from ..display import CodeModeView

        try:
            agent = CodeModeAgent(
                llm,
                select_tools(args.tools),
                inputs=inputs,
                max_attempts=self.max_attempts if args.max_attempts is None else args.max_attempts,
                store="" if store is None else store,
            )
        except SandboxConfigError as exc:
            raise self.usage_error(exc) from None
        try:
            result = agent.run(task, on_event=CodeModeView(quiet=args.quiet).on_event)
        except CodeModeError as exc:
            self._insert(args, exc.attempts[-1].code, line, cell)  # the last try, to fix by hand
            exc.shown = not args.quiet  # the view showed each attempt's error: not again
            raise
        self._insert(args, result.code, line, cell)
        if args.out:
            shell.user_ns[args.out] = result.value
        return result.value

    def _insert(self, args: Any, code: str | None, line: str, cell: str) -> None:
        """``--insert``: the code as a new ``%%orchestrate`` cell that runs as this one did,
        marked with its source cell; not again if this session inserted the same already."""
        if not args.insert or code is None:
            return
        source = self.frontend_cell_id() or f"{line}\n{cell}"
        mark = f"{INSERT_MARK} {hashlib.sha256(source.encode()).hexdigest()[:8]}"
        options = [
            f"--{option} {','.join(split_names(values))}"
            for option, values in (("in", args.inputs), ("tools", args.tools))
            if values
        ]
        if args.out:
            options.append(f"--out {args.out}")
        text = " ".join(["%%orchestrate", *options]) + f"\n{mark}\n{code}"
        earlier = self._inserted.get(mark)
        if earlier == text:
            print(
                f"--insert: not inserted again: the cell below marked `{mark}` has this code "
                "(if you deleted it, copy the code from the last attempt above)"
            )
            return
        self.shell.set_next_input(text)
        self._inserted[mark] = text
        if earlier is not None:
            print(
                f"--insert: new code inserted below, in place of the older cell marked `{mark}` "
                "(JupyterLab removes that one; elsewhere, delete it)"
            )
