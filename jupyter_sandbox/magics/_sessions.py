"""``%%sandbox --session NAME``, ``%sandbox_sessions``, ``%sandbox_snapshot``, ``%sandbox_stop``:
thin shells over `jupyter_sandbox.sandbox._session` (the engine does the work)."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from .._shared._errors import SandboxConfigError, SessionCellError

if TYPE_CHECKING:
    from ..sandbox import SandboxSession, SessionSpec
    from ._sandbox import SandboxMagics

_specs: dict[tuple[Any, ...], SessionSpec] = {}
"""Each environment a cell asked for, checked and its image found once per kernel: a
session's later cells cost no image lookup."""


def run_cell(
    magics: SandboxMagics,
    args: Any,
    cell: str,
    values: Mapping[str, Any],
    outputs: list[str],
    *,
    packages: list[str],
    resources: Any,
    network: Any,
    isolation: Any,
    env_vars: dict[str, str] | None = None,
    secrets: list[str] | None = None,
) -> None:
    """Run ``cell`` in the session ``args.session`` (started by its first cell, re-attached
    when kept, or forked ``--from`` a snapshot), then show what it printed and returned."""
    from .. import sandbox as _session
    from ..display import show_displays
    from ._cell_view import notebook_scope

    _session.set_session_notebook(notebook_scope(magics.shell))
    name = args.session
    reach = network if isinstance(network, str) else tuple(network)  # a list: --allow-net
    key = (tuple(packages), resources, reach, isolation, args.image)
    spec = _specs.get(key)
    if spec is None:
        try:
            spec = _specs[key] = _session.session_spec(
                packages=packages,
                resources=resources,
                network=network,
                isolation=isolation,
                image=args.image,
            )
        except SandboxConfigError as exc:
            raise magics.usage_error(exc) from None
    session = _session.get_session(name)
    if session is not None and session.expired():
        session.close()
        print(f"session {name!r} was stopped after {session.idle:g} s idle; starting it afresh")
        session = None
    if session is not None and args.source:
        raise UsageError(
            f"session {name!r} runs already: --from starts a new one (%sandbox_stop {name} first)"
        )
    if session is None:
        try:
            env, masked = _session.session_env(env_vars, secrets)
        except SandboxConfigError as exc:
            raise magics.usage_error(exc) from None
        session = _start(name, spec, args, float(magics.session_idle), env, masked)
    else:
        differs = session.spec.difference(spec)
        if differs is not None:
            raise UsageError(
                f"session {name!r} runs another environment: this cell asks for {differs};"
                f" stop it first (%sandbox_stop {name})"
            )
    started, began = time.monotonic(), time.time()
    try:
        cell_run = session.execute(
            "\n" + cell,
            dict(values),
            outputs=outputs,
            on_stream=_print,
            timeout=args.timeout,
        )
    except SessionCellError as error:
        sys.stderr.write(error.traceback)
        seconds = time.monotonic() - started
        _show_record(session, "error", seconds, str(error), began, quiet=args.quiet)
        raise
    _show_record(session, "ok", cell_run.seconds, None, began, quiet=args.quiet)
    for out in outputs:
        magics.shell.user_ns[out] = _session.session_value(cell_run.outputs.get(out))
    result = cell_run.result
    if result is not None:
        shown: dict[str, Any] = {"text/plain": result.get("repr", "")}
        shown.update(result.get("rich") or {})
        show_displays([shown])


def _start(
    name: str,
    spec: SessionSpec,
    args: Any,
    idle: float,
    env: dict[str, str],
    masked: tuple[str, ...],
) -> SandboxSession:
    from .. import sandbox as _session

    if args.source:
        source, _, tag = args.source.partition("@")
        snap = _session.snapshot_of(source, tag or None)
        if snap is None:
            raise UsageError(
                f"no snapshot {args.source!r}: take one with %sandbox_snapshot {source}"
            )
        session = _session.start_session_from(name, snap, keep=args.keep)
        print(f"session {name!r} started from {snap.name}@{snap.tag}")
        return session
    if args.keep:
        found = _session.reattach_session(name, spec)
        if found is not None:
            print(f"session {name!r} re-attached (kept, cell {found.cells})")
            return found
    why = _session.lost_sessions.pop(name, None)
    if why is not None:
        snap = _session.snapshot_of(name, None)
        if snap is not None and snap.spec == spec:
            session = _session.start_session_from(name, snap, keep=args.keep)
            print(f"session {name!r} was lost ({why}): started again from {name}@{snap.tag}")
            return session
        print(f"session {name!r} was lost ({why}): started afresh")
    return _session.start_session(name, spec, keep=args.keep, idle=idle, env=env, masked=masked)


def _print(stream: str, text: str) -> None:
    (sys.stderr if stream == "stderr" else sys.stdout).write(text)


def _show_record(
    session: SandboxSession,
    status: str,
    seconds: float,
    error: str | None,
    began: float,
    *,
    quiet: bool,
) -> None:
    """The cell's run record, saying which session ran it and its cell count, and for an
    allow-listed session what the cell sent out from ``began`` on (the cell's streams and
    error output show the rest)."""
    if quiet:
        return
    from IPython.display import display

    from ..display import bundle
    from ..records import RECORD_VERSION, RunRecord

    record: RunRecord = {
        "version": RECORD_VERSION,
        "kind": "sandbox",
        "name": session.name,
        "image": session.spec.image,
        "status": "ok" if status == "ok" else "error",
        "error": error,
        "raised": error is not None,
        "duration": round(seconds, 4),
        "exit_code": None,
        "attempts": 1,
        "cached": False,
        "build": None,
        "stdout": "",
        "stderr": "",
        "outputs": {},
        "inputs": {},
        "session": session.name,
        "session_cell": session.cells,
    }
    sent = session.requests_since(began)
    if sent is not None:
        record["requests"] = sent.to_record()
    display(bundle(record), raw=True)


@magics_class
class SessionMagics(Magics):
    """The session line magics: list, snapshot, stop."""

    @line_magic
    def sandbox_sessions(self, line: str = "") -> list[dict[str, Any]]:
        """List this kernel's sessions: name, image, started, last used, memory, variables."""
        from .. import sandbox as _session

        rows = []
        for session in _session.sessions():
            try:
                info = session.info()
            except Exception as error:  # a lost one is listed as lost
                info = {"name": session.name, "image": session.spec.image, "lost": str(error)}
            rows.append(info)
            memory = info.get("memory")
            used = f"{memory / 2**20:.0f} MiB" if isinstance(memory, int) else "?"
            kept = " (kept)" if info.get("kept") else ""
            started = time.strftime("%H:%M:%S", time.localtime(info.get("started", 0)))
            last = time.strftime("%H:%M:%S", time.localtime(info.get("last_used", 0)))
            names = ", ".join(info.get("names") or []) or "-"
            print(
                f"{session.name}{kept}  {info.get('image')}  started {started}  last used"
                f" {last}  {used}  {names}"
            )
        if not rows:
            print("no sandbox sessions")
        return rows

    @magic_arguments()
    @argument("name", help="the session")
    @argument("--tag", help="the snapshot's tag (default: cellN)")
    @line_magic
    def sandbox_snapshot(self, line: str) -> None:
        """Save a session's files and Python state: %sandbox_snapshot NAME [--tag T]."""
        from .. import sandbox as _session

        args = parse_argstring(self.sandbox_snapshot, line)
        session = _session.get_session(args.name)
        if session is None:
            raise UsageError(f"no session {args.name!r}: start it with %%sandbox --session")
        try:
            snap = session.snapshot(args.tag)
        except SandboxConfigError as exc:
            raise UsageError(str(exc)) from None
        note = f"; not saved: {', '.join(snap.unsaved)}" if snap.unsaved else ""
        print(f"snapshot {snap.name}@{snap.tag}: {len(snap.saved)} variables{note}")

    @magic_arguments()
    @argument("name", nargs="?", help="the session")
    @argument("--all", action="store_true", help="every session of this kernel, kept ones too")
    @line_magic
    def sandbox_stop(self, line: str) -> None:
        """Remove a session's container: %sandbox_stop NAME, or --all."""
        from .. import sandbox as _session

        args = parse_argstring(self.sandbox_stop, line)
        if args.all:
            _session.close_sessions(kept=True)
            return
        if not args.name:
            raise UsageError("name a session, or --all")
        session = _session.get_session(args.name)
        if session is None:
            raise UsageError(f"no session {args.name!r}")
        session.close()
