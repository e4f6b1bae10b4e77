"""Line magics of durable code mode: sessions, and runs kept in the store.

``%orchestrate_sessions`` / ``%orchestrate_reset NAME`` list and drop the sessions of this
notebook (``%%orchestrate --session NAME``). ``%orchestrate_pending`` lists the paused runs in
the store; ``%orchestrate_approve RUN_ID [--expect DIGEST]``, ``%orchestrate_reject RUN_ID
[REASON]`` and ``%orchestrate_fork RUN_ID N --value JSON`` continue a stored run, in this
kernel or a later one, and show it as a cell shows its run. The store is ``%config
OrchestrateMagics.store``. What a person must have seen before approving, and the digest that
seals it, is the engine's (`orchestration._approval`, `orchestration._paused`): the magics only
say it.

None of them lets IPython expand its line (`no_var_expand`): their lines come from people and
from buttons built from saved (untrusted) records, and IPython's expansion would run any code
between braces. The one thing expanded is a run id written ``$name``: the value of the notebook
variable ``name``, looked up, never evaluated (`_run_id`), so a notebook that keeps a run id in
a variable says ``%orchestrate_approve $run_id``. Run ids are checked against the store's
grammar (`_grammar`) before a lookup.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import json
import re
import time
from collections.abc import Callable
from html import escape
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic import line_magic, magics_class, no_var_expand
from IPython.core.magic_arguments import argument, magic_arguments

from .._shared._errors import OrchestrationError, SandboxConfigError, StoreError
from .._shared._grammar import (
    JSON_OPTION,
    check_run_id,
    is_digest,
    is_run_id,
    parse_reject,
    shown,
    unquote,
)
from .._shared._grammar import shown as refused_text
from .._shared._preview import preview
from ..orchestration import answered, full_repr, mcp_outcomes
from ._cell_view import notebook_scope, show_run
from ._common import (
    CellMagics,
    help_option,
    in_options,
    parse_options,
    print_help,
    usage_error,
)

if TYPE_CHECKING:  # the durable names are imported where a magic needs them: %load_ext
    # loads no store, no SQLite (a cell that runs with a store loads them)
    from ..orchestration import CallNow, PausedRun, Store
    from ._orchestrate import OrchestrateMagics

_ARGUMENTS = 60
"""Characters of a pending call's arguments `%orchestrate_pending` shows."""


@magics_class
class DurableMagics(CellMagics):
    """The line magics above; the store and the scope are those of ``%%orchestrate``."""

    def __init__(self, shell: InteractiveShell, cells: OrchestrateMagics) -> None:
        super().__init__(shell=shell)
        self.cells = cells

    @magic_arguments()
    @help_option
    @line_magic
    @no_var_expand
    def orchestrate_sessions(self, line: str) -> None:
        """List this notebook's sessions: name, variables (with their types) and size."""
        from ..orchestration import sessions

        if parse_options(self.orchestrate_sessions, line) is None:
            return
        scope = notebook_scope(self.shell)
        listed: dict[str, tuple[dict[str, str], int]] = {}
        store = self.cells.open_store()
        if store is not None:
            for info in _stored(lambda: store.sessions(scope)):
                listed[info.name] = (info.names, info.size)
        for name, state in sessions.listed(scope).items():
            listed[name] = (state.names, state.size)
        if not listed:
            print("no sessions in this notebook; %%orchestrate --session NAME starts one")
            return
        for name, (names, size) in sorted(listed.items()):
            variables = ", ".join(f"{n}: {t}" for n, t in sorted(names.items())) or "(none)"
            print(f"{name}  {size:,} bytes  {variables}")

    @magic_arguments()
    @help_option
    @argument(
        "name", metavar="NAME", help="the session to drop (%%orchestrate_sessions lists them)"
    )
    @line_magic
    @no_var_expand
    def orchestrate_reset(self, line: str) -> None:
        """Drop the session NAME of this notebook (here and in the store)."""
        from ..orchestration import sessions

        args = parse_options(self.orchestrate_reset, line)
        if args is None:
            return
        name = args.name
        store = self.cells.open_store()
        if not _stored(lambda: sessions.drop(notebook_scope(self.shell), name, store)):
            raise UsageError(
                f"%orchestrate_reset: no session {name!r} in this notebook; "
                "%orchestrate_sessions lists them"
            )
        print(f"session {name!r} dropped")

    @magic_arguments()
    @help_option
    @argument("--full", action="store_true", help="each call's arguments whole, not cut")
    @argument(
        "run_id",
        metavar="RUN_ID",
        nargs="?",
        help="only this paused run (its view names it when it cut an argument)",
    )
    @line_magic
    @no_var_expand
    def orchestrate_pending(self, line: str) -> None:
        """List the paused runs in the store (or only ``RUN_ID``): run id, cell, pending tool
        and arguments (cut to one line; ``--full``: whole, as the call will get them), age."""
        from ..orchestration import call_now, paused_runs, read_whole

        args = parse_options(self.orchestrate_pending, line)
        if args is None:
            return
        whole = args.full
        only = None if args.run_id is None else _checked(args.run_id)
        store = self._store("%orchestrate_pending")
        paused = [run for run in _stored(lambda: paused_runs(store)) if only in (None, run.run_id)]
        if not paused:
            which = "no paused runs" if only is None else f"no paused run {only}"
            print(f"{which} in {store.path}")
            return
        here = notebook_scope(self.shell)
        cut = False
        lines: list[tuple[str, str | None]] = []  # (text, the cell it names: a link in HTML)
        for run in paused:
            call, notes = "(its call was not stored: paused by an older version)", []
            if run.refused is not None:
                call = f"(refused: {run.refused})"
            elif run.tool is not None:
                if whole:  # an argument over the store's size: from the run's snapshot
                    run = _stored(functools.partial(read_whole, store, run))
                now = call_now(run, self._given(store, run.run_id))
                call = _call_line(run, now, whole=whole)
                cut = cut or call != _call_line(run, now, whole=True)
                notes = _notes(run, now)
            where = "" if run.scope == here else f" of {run.scope}"
            age = _age(time.time() - run.since)
            cell = self._cell_name(store, run.run_id)
            lines.append((f"{run.run_id}  ", None))
            lines.append((cell, run.cell if run.scope == here else None))
            lines.append((f"{where}  {call}  paused {age} ago\n", None))
            lines += [(f"    {note}\n", None) for note in notes]
        if cut:  # a person must be able to see everything they approve
            lines.append(("(arguments cut: %orchestrate_pending --full shows them whole)\n", None))
        self._show_listing(lines)

    def _show_listing(self, parts: list[tuple[str, str | None]]) -> None:
        """Print the listing; in a kernel, also as HTML where each cell of this notebook is a
        link the JupyterLab extension follows to that cell (``data-jsb-cell``: the
        frontend's cell id the run was keyed by; a link to no cell there does nothing)."""
        text = "".join(part for part, _ in parts)
        if getattr(self.shell, "kernel", None) is None:
            print(text, end="")
            return
        from IPython.display import display

        html = "".join(
            escape(part)
            if cell is None
            else f'<a class="jsb-cell-link" tabindex="0" data-jsb-cell="{escape(cell)}" '
            f'title="go to this cell">{escape(part)}</a>'
            for part, cell in parts
        )
        display({"text/plain": text, "text/html": f"<pre>{html}</pre>"}, raw=True)

    @magic_arguments()
    @help_option
    @argument("run_id", metavar="RUN_ID", help="the paused run (%%orchestrate_pending lists them)")
    @argument(
        "--expect",
        metavar="DIGEST",
        help="the call's digest as its panel or %%orchestrate_pending shows it: the call is "
        "made only if it is still that call",
    )
    @line_magic
    @no_var_expand
    def orchestrate_approve(self, line: str) -> Any:
        """Approve the pending call of a paused run and continue it here."""
        args = parse_options(self.orchestrate_approve, line)
        if args is None:
            return None
        run_id = _checked(self._run_id(args.run_id))
        return self._continue(run_id, approve=True, reason=None, expect=args.expect)

    @magic_arguments()
    @help_option
    @argument(
        JSON_OPTION,
        action="store_true",
        help="REASON is one JSON string (what the Reject button writes: any text, byte for byte)",
    )
    @argument("run_id", metavar="RUN_ID", help="the paused run (%%orchestrate_pending lists them)")
    @argument(
        "reason",
        nargs="*",
        metavar="REASON",
        help="what the code's PermissionError says: the rest of the line as written, one pair "
        "of outer quotes dropped",
    )
    @line_magic
    @no_var_expand
    def orchestrate_reject(self, line: str) -> Any:
        """Reject the pending call of a paused run: the code sees PermissionError(REASON)."""
        if line.split()[:1] in (["-h"], ["--help"]):  # only first: a reason may say "-h"
            print_help(self.orchestrate_reject)
            return None
        try:
            run_id, reason = parse_reject(_NAMED.sub(lambda m: m[1] + self._run_id(m[2]), line, 1))
        except SandboxConfigError as exc:
            raise usage_error(exc, _WORDS) from None
        return self._continue(run_id, approve=False, reason=reason)

    @magic_arguments()
    @help_option
    @argument("run_id", metavar="RUN_ID", help="the stored run to fork")
    @argument(
        "call", metavar="N", type=int, help="the call whose result is replaced: its # in the trace"
    )
    @argument(
        "--value",
        required=True,
        nargs="+",
        metavar="JSON",
        help="call N's result: JSON, or a Python literal; one pair of quotes around it is "
        "dropped, as a shell would ({name} is not expanded: fork_run(RUN_ID, N, value=name) "
        "takes a notebook variable)",
    )
    @line_magic
    @no_var_expand
    def orchestrate_fork(self, line: str) -> Any:
        """Run a stored run again with call N answered by --value: the calls before it are
        answered from the store, the later ones are made."""
        from ..orchestration import fork_run, unkept_inputs

        args = parse_options(self.orchestrate_fork, line)
        if args is None:
            return None
        run_id = _checked(self._run_id(args.run_id))
        value = fork_value(" ".join(args.value))
        store = self._store("%orchestrate_fork")
        run = _stored(lambda: store.run(run_id))  # an unknown run: one line, before a view
        try:
            return show_run(
                lambda on_event: fork_run(
                    run_id,
                    args.call,
                    value=value,
                    store=store,
                    inputs=unkept_inputs(run, self.shell.user_ns),
                    on_event=on_event,
                )
            ).value
        except SandboxConfigError as exc:  # N out of range
            raise usage_error(exc, {"call_index": "N"}) from None

    def run_state(self, comm: Any, opened: dict[str, Any]) -> None:
        """The comm target `RUN_STATE` (the JupyterLab extension opens one per unanswered paused
        record it shows): reply ``{"run_id", "status"}`` from this kernel's store (status None:
        unknown here) and close. Only a checked run id is looked up; nothing is run.

        Any frontend may open it with anything (a hostile notebook's own extension, any
        client of the kernel): a message of another shape is asked about no run, and the
        reply names the run only when it is a run id, so it never sends back what it was
        sent (a megabyte string, markup) nor leaves a traceback on the kernel's stderr."""
        from ..orchestration import run_status

        content = opened.get("content") if isinstance(opened, dict) else None
        data = content.get("data") if isinstance(content, dict) else None
        asked = data.get("run_id") if isinstance(data, dict) else None
        run_id = asked if is_run_id(asked) else None
        status = None
        if run_id is not None:
            with contextlib.suppress(StoreError, SandboxConfigError, UsageError):
                store = self.cells.open_store()
                status = None if store is None else run_status(store, run_id)
        comm.send({"run_id": run_id, "status": status})
        comm.close()

    def _continue(
        self, run_id: str, *, approve: bool, reason: str | None, expect: str | None = None
    ) -> Any:
        from ..orchestration import resume_run, unkept_inputs, unseen

        store = self._store("%orchestrate_approve" if approve else "%orchestrate_reject")
        run = _stored(lambda: store.run(run_id))
        answered_in = store.answered_in(run_id)
        if run.status in ("ok", "error") and answered_in is not None:  # run again (Run All)
            print(_already(store, run_id, run.scope, run.cell, answered_in))
            return None
        if run.status != "paused":  # e.g. interrupted while its approved call ran
            then = (
                "%orchestrate_pending lists paused runs"
                if run.status == "ok"
                else f"jupyter_sandbox.resume_run({run_id!r}) continues it (a gated call it "
                "has not made waits for an answer again)"
            )
            raise UsageError(
                f"run {run_id} is {run.status}, not paused: nothing to approve or reject; {then}"
            )
        given = unkept_inputs(run, self.shell.user_ns)  # its handles, bound again
        if approve and expect is None:
            blind = _stored(lambda: unseen(store, run_id, given, _cut))
            if blind is not None:
                why, digest = blind
                raise UsageError(
                    f"{why}; see it whole with %orchestrate_pending --full, then "
                    f"%orchestrate_approve {run_id} --expect {digest}"
                )
        elif expect is not None and not is_digest(expect):
            raise UsageError(
                f"%orchestrate_approve --expect: {refused_text(expect)!r} is not a digest (16 hex "
                "digits, as the run's panel or %orchestrate_pending shows it)"
            )
        from ..display import shown_pause

        shown = shown_pause(run_id)  # before the run goes on (it may pause again)
        done = False
        try:
            result = show_run(
                lambda on_event: resume_run(
                    run_id,
                    approve=approve,
                    reason=reason,
                    store=store,
                    inputs=given,
                    on_event=on_event,
                    expect=expect,
                )
            )
            if result.refused is not None:  # nothing made; the record shows the call now
                raise UsageError(result.refused)
            done = True
            mcp_outcomes.remember(run_id, result)  # an MCP client may ask (`%mcp_serve`)
            return result.value
        except OrchestrationError as exc:
            done = exc.result is not None  # it ran (and failed): the pause was answered
            mcp_outcomes.remember(run_id, exc)
            raise
        finally:
            if done:
                with contextlib.suppress(StoreError):  # a number said later, not the answer
                    store.note_answer(run_id, self.prompt_number())
            if shown is not None and done:  # the paused cell above says so, buttons gone
                shown.answer(answered(approve, reason, self.prompt_number()))
            elif shown is not None:
                shown.keep()

    def _run_id(self, word: str) -> str:
        """``word``, or for ``$name`` the run id the notebook variable ``name`` holds (a
        string the store's grammar accepts). Only a name is looked up, nothing is
        evaluated: ``{...}`` and ``$name.attr`` stay as written, and fail the grammar."""
        name = word.strip()[1:]
        if not word.strip().startswith("$") or not name.isidentifier():
            return word
        if name not in self.shell.user_ns:
            raise UsageError(f"RUN_ID ${name}: no notebook variable {name} holds a run id")
        value = self.shell.user_ns[name]
        if not isinstance(value, str):
            raise UsageError(
                f"RUN_ID ${name}: {name} is a {type(value).__name__}, not a run id (a str such"
                " as '3f2a9c1d0b7e')"
            )
        return _checked(value)

    def _cell_name(self, store: Store, run_id: str) -> str:
        """The cell a paused run was started in, as a person finds it: its prompt number (this
        kernel's, else the one the store kept: the saved notebook's) and its first line
        (``cell [5] `data = fetch(url)` ``); the store's cell key meant nothing to anyone."""
        try:
            number = self.cells.prompts.get(run_id) or store.prompt(run_id)
            code = store.run(run_id).code
        except (StoreError, SandboxConfigError):
            number, code = self.cells.prompts.get(run_id), None
        prompt = f"cell [{number}]" if number is not None else "cell"
        return prompt if code is None else f"{prompt} `{first_line(code)}`"

    def _given(self, store: Store, run_id: str) -> dict[str, Any]:
        """The notebook variables stored run ``run_id`` needs again (`unkept_inputs`)."""
        from ..orchestration import unkept_inputs

        return unkept_inputs(_stored(lambda: store.run(run_id)), self.shell.user_ns)

    def _store(self, magic: str) -> Store:
        store = self.cells.open_store()
        if store is None:
            raise UsageError(
                f"{magic}: no store (%config OrchestrateMagics.store is empty); set it to the "
                "store's path"
            )
        return store


_NAMED = re.compile(rf"^(\s*(?:{re.escape(JSON_OPTION)}\s+)?)(\$\w+)(?=\s|$)")
"""``%orchestrate_reject``'s run id when written ``$name`` (after ``--json``, if given)."""
_WORDS = {"run_id": "RUN_ID", "reason": "REASON"}
"""The engine's parameters as the line magics' usage names them."""


def _checked(run_id: str) -> str:
    """``run_id`` if it is one the store issues, else the magic's one-line `UsageError`."""
    try:
        return check_run_id(run_id)
    except SandboxConfigError as exc:
        raise usage_error(exc, _WORDS) from None


def _already(store: Store, run_id: str, scope: str, key: str, cell: int) -> str:
    """What an answer to run ``run_id`` (of cell ``key`` in ``scope``), which a magic already
    answered in cell [``cell``], says instead of failing: where, and the run of the same cell
    that waits now (the one a Run All just paused above it), so a Run All goes on to the
    cells after it."""
    waiting = [
        other.run_id for other in store.runs(scope=scope, status="paused") if other.cell == key
    ]
    now = f"; run {waiting[0]} above is waiting now" if waiting else ""
    return f"run {run_id} already answered in cell [{cell}]{now}"


def fork_value(text: str) -> Any:
    """``--value``'s text as a value. IPython splits a magic's line without shell rules (the
    quotes around ``'{"rows": [1, 2]}'`` stay, and an unquoted value with spaces arrives in
    pieces, joined again here; the magic expands no ``{name}``). So: one pair of outer quotes
    is dropped, then the text is read as JSON, else as a Python literal; only if neither reads
    it is the text read as written. Too deep a nesting is neither (json's RecursionError)."""
    for candidate in dict.fromkeys([unquote(text), text]):
        with contextlib.suppress(ValueError, RecursionError):  # JSONDecodeError is a ValueError
            return json.loads(candidate)
        with contextlib.suppress(ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return ast.literal_eval(candidate)
    raise UsageError(
        f"%orchestrate_fork --value: not JSON nor a Python literal: {shown(text)}; e.g. "
        "--value '{\"rows\": 3}', --value 3 or --value '\"text\"'"
    )


def _stored(read: Callable[[], Any]) -> Any:
    """``read()``, a store's `StoreError` (an unknown run id, a tampered blob) as the magic's
    one-line `UsageError`."""
    try:
        return read()
    except (StoreError, SandboxConfigError) as exc:
        raise UsageError(in_options(exc)) from None


def _notes(run: PausedRun, now: CallNow) -> list[str]:
    """The lines under a paused run's call: its digest now, the variables it binds, what
    cannot be known here."""
    notes = [f"digest {now.digest or run.digest}"]
    if now.digest is not None and run.digest is not None and now.digest != run.digest:
        notes[0] += f" (it paused as {run.digest}: an object it binds is not the one it had)"
    notes += [
        f"binds notebook variable `{name}`, now {preview(value)}" for name, value in now.bindings
    ]
    if now.problem is not None:
        notes.append(now.problem)
    return notes


def _cut(run: PausedRun, now: CallNow) -> str | None:
    """Why ``%orchestrate_pending``'s one line did not show ``run``'s call whole (None: it
    did): approving it then takes the digest, as a call too big for its panel does."""
    if _call_line(run, now) == _call_line(run, now, whole=True):
        return None
    return "its arguments are longer than %orchestrate_pending's line shows"


def _call_line(run: PausedRun, now: CallNow, *, whole: bool = False) -> str:
    """``#2 delete('/data/x', force=True)`` (the number the run's trace shows), the arguments
    (as approving now makes the call) cut to `_ARGUMENTS` characters, or ``whole`` (each one's
    full repr)."""
    show = full_repr if whole else preview
    shown = ", ".join(
        [show(a) for a in now.args] + [f"{k}={show(v)}" for k, v in now.kwargs.items()]
    )
    if len(shown) > _ARGUMENTS and not whole:
        shown = shown[: _ARGUMENTS - 3] + "..."
    return f"#{run.call_id} {run.tool}({shown})"


FIRST_LINE = 40
"""Characters of a cell's first line `%orchestrate_pending` shows."""


def first_line(code: str) -> str:
    """The first line of a cell's code that says something (not the magic, a blank or a
    comment), cut to `FIRST_LINE` characters."""
    for line in code.splitlines():
        text = line.strip()
        if text and not text.startswith(("%%", "#")):
            return text if len(text) <= FIRST_LINE else text[: FIRST_LINE - 1] + "\u2026"
    return "(empty)"


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds:.0f} s"
