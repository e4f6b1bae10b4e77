"""A spare's interpreter, started ahead and waiting for its one program on the attach stream.

A spare container's own process is `SPARE_SCRIPT`, and its first act is to start ``python3``
with `WAITER`: the interpreter is up (its ~25 ms start paid while nobody waits) and blocks on
stdin, which the host holds through the engine's attach stream (`Attached`, attached before
the container's start). A run then costs no ``docker exec``: the host writes the program's
argv and environment on that stream, and reads its output from the same stream.

The exchange, each step on the same connection:

1. The waiter writes `UP` once started (`up`): only then is the container a spare.
2. At a run, the host asks (`probe`): the stream must be quiet (nothing written, not ended,
   `Attached.quiet`), then the waiter checks the container is as it left it: nothing in
   ``/tmp``, ``/dev/shm`` or ``/var/outputs``, no process but the script, its timer and
   itself (a ``docker exec`` leaves its trace there). It answers `READY`, or `REFUSED` and
   the reason. Only after `READY` does the host stage the run's files and send `header`
   (the environment carries the secrets): a spare that died, was tampered with or whose
   stream broke is removed, never used, and the run takes another container.
3. The waiter reads the header, sets the environment, points stdin at ``/dev/null`` (not for
   a session's server, `_session`, which reads its requests there) and runs
   the program: in this interpreter when it is one of our Python modes' programs and the
   environment changes nothing Python reads at its start (`runs_inside`), else by
   ``execvp`` (command mode, ``PYTHONPATH`` and the like: no exec of the engine's, still).
4. The script reads the rest of the header (the run's marker and output names) once the
   waiter's process ended, and ends as every run's script does (`STATUS`).

In this interpreter the program runs as ``python3 FILE`` would run it: a clean ``__main__``,
``sys.argv``, ``sys.path[0]``, an uncaught exception printed by ``sys.excepthook`` from the
program's own frames, exit status 1. The waiter imports nothing (``os`` and ``sys`` are
loaded by every start): the program finds the modules a plain start loads, and no others
(a test compares the two). What differs: ``sys.orig_argv`` and ``/proc/self/cmdline`` show
``python3 -c``, and the program's frame has the waiter's below it.
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING

from ._io import program_command
from ._scripts import MARKER_START, SPARE_SCRIPT, WRAPPER

if TYPE_CHECKING:
    from ._attach import Attached

UP = b"\x1ejupyter-sandbox up\x1e\n"
READY = b"\x1ejupyter-sandbox ready\x1e\n"
REFUSED = b"\x1ejupyter-sandbox refused\x1e "
PROBE = b"?\n"
START_ENV = {"HOME": "/tmp", "PYTHONUNBUFFERED": "1", "LOGNAME": "sandbox", "USER": "sandbox"}
"""What the waiter starts with, and every run's environment begins with (`Sandbox`):
``LOGNAME``/``USER`` name the user, since the container's uid has no ``/etc/passwd`` entry
(``getpass.getuser()``, which some libraries call for cache folders, reads them first)."""
_AT_START = re.compile(r"PYTHON.*|LC_.*|LD_.*|MALLOC_.*|LANG|LANGUAGE|PATH|HOME|TZ|GLIBC_TUNABLES")
"""Variables read when a process or Python starts (the interpreter, the dynamic loader, the C
library, the locale): a run that sets one other than as the waiter started has its program
started afresh."""
PROBE_WAIT = 5.0
"""Seconds the host waits for the waiter's answer: it is up already, but a loaded host may
take a while to schedule it. A stream that broke without ending fails after this."""

WAITER = (
    r"""
def _wait(killer):
    import os, sys

    def exactly(size):
        data = b""
        while len(data) < size:
            chunk = os.read(0, size - len(data))
            if not chunk:
                os._exit(0)
            data += chunk
        return data

    os.write(1, UP)
    if exactly(len(PROBE)) != PROBE:
        os._exit(0)
    problem = b""
    for folder in ("/tmp", "/dev/shm", "/var/outputs"):
        try:
            if os.listdir(folder):
                problem = b"files in " + folder.encode()
        except FileNotFoundError:
            pass
    me = os.getpid()
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) in (1, me, killer):
            continue
        try:
            with open("/proc/" + pid + "/stat", "rb") as stat:
                parent = int(stat.read().rpartition(b")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        if parent != killer:
            problem = b"a process of its own, pid " + pid.encode()
    if problem:
        os.write(1, REFUSED + problem + b"\n")
        os._exit(0)
    os.write(1, READY)
    fields = exactly(int(exactly(10))).decode().split("\0")
    argv = fields[2 : 2 + int(fields[1])]
    for item in fields[2 + int(fields[1]) :]:
        name, _, value = item.partition("=")
        os.environ[name] = value
    if fields[0] != "2":  # a session's server keeps the stream (`_session`)
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
    if fields[0] == "0":
        try:
            os.execvp(argv[0], argv)
        except OSError as error:
            missing = isinstance(error, FileNotFoundError)
            why = b"not found" if missing else b"Permission denied"
            os.write(2, WRAPPER + b": 1: exec: " + argv[0].encode() + b": " + why + b"\n")
            os._exit(127 if missing else 126)
    path = argv[1]
    with open(path, "rb") as file:
        code = compile(file.read(), path, "exec", dont_inherit=True)
    namespace = sys.modules["__main__"].__dict__
    loader = sys.modules["_frozen_importlib_external"].SourceFileLoader("__main__", path)
    builtins = namespace["__builtins__"]
    namespace.clear()
    namespace.update(
        __name__="__main__", __doc__=None, __package__=None, __loader__=loader,
        __spec__=None, __annotations__={}, __builtins__=builtins, __file__=path,
        __cached__=None,
    )
    sys.argv[:] = argv[1:]
    sys.path[0] = os.path.dirname(path)
    try:
        exec(code, namespace)
    except SystemExit:
        raise
    except BaseException as error:
        error.__traceback__ = error.__traceback__.tb_next  # the hook prints this one
        sys.excepthook(type(error), error, error.__traceback__)
        sys.exit(1)


_wait(int(__import__("sys").argv[1]))
""".replace("UP", repr(UP))
    .replace("READY", repr(READY))
    .replace("REFUSED", repr(REFUSED))
    .replace("PROBE", repr(PROBE))
    .replace("WRAPPER", repr(WRAPPER.encode()))
)
"""The waiter (``python3 -c``, its argument the pid of the script's timer, whose ``sleep`` is
the one other process it may find). Everything it binds is local to `_wait`, and
``__main__``'s names are replaced before the program runs."""


def spare_command(lifetime: int) -> list[str]:
    """A spare's own process: `SPARE_SCRIPT`, its timer set to ``lifetime`` seconds."""
    start_env = " ".join(f"{name}={shlex.quote(value)}" for name, value in START_ENV.items())
    script = SPARE_SCRIPT.replace("{start_env}", start_env)
    return ["sh", "-c", script, WRAPPER, str(lifetime), WAITER, MARKER_START]


def up(attached: Attached, deadline: float) -> bool | None:
    """Whether the spare's waiter said it is up by ``deadline``; None if the image answered
    something else (anything on stderr, another line: an image without ``python3``, or whose
    ``python3`` warns as it starts), and no spare of it will ever be up. False, not None, for
    a stream that ended with nothing said: a container killed or an engine restarted from
    outside during the start says nothing about the image."""
    line = attached.line(deadline)
    if line == UP:
        return True
    if line is None and (attached.ended or time.monotonic() >= deadline):
        return False
    return None


def probe(attached: Attached) -> bool:
    """Whether the spare is as it was started and its waiter ready for the program (step 2)."""
    if not attached.quiet():
        return False
    try:
        attached.write(PROBE)
    except OSError:
        return False
    return attached.line(time.monotonic() + PROBE_WAIT) == READY


def runs_inside(command: list[str], env: Mapping[str, str]) -> bool:
    """Whether the waiter runs ``command`` itself: one of our Python modes' programs, and no
    variable read at start set other than as the waiter started (`_AT_START`)."""
    ours = command in (program_command("auto"), program_command("verbatim"))
    return ours and all(
        START_ENV.get(name) == value for name, value in env.items() if _AT_START.fullmatch(name)
    )


def header(
    command: list[str],
    env: Mapping[str, str],
    marker: bytes,
    names: Collection[str],
    *,
    keep_stdin: bool = False,
) -> bytes:
    """What the host writes after `READY`: for the waiter, its length in 10 digits, then
    whether it runs the program itself (``2``: and leaves it stdin, the attach stream, which a
    session's server reads its requests on: ``keep_stdin``), argc, argv and ``NAME=value``
    for each variable,
    NUL-separated (none can hold a NUL: `create` and `Sandbox` refuse them); for the script,
    the marker's line, then the number of output names and the names, one a line."""
    inside = "2" if keep_stdin else "1" if runs_inside(command, env) else "0"
    fields = [inside, str(len(command)), *command]
    fields += [f"{name}={value}" for name, value in env.items()]
    blob = "\0".join(fields).encode()
    lines = [str(len(names)), *names]
    return b"%010d" % len(blob) + blob + marker + b"\n" + "".join(f"{x}\n" for x in lines).encode()
