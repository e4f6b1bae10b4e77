"""OS-level confinement of the Monty workers: defence in depth under the language-level sandbox.

Monty's interpreter has no file, network or process access to begin with; this makes a bug in
it worth less. When the host allows it, each worker starts through a small launcher that gives
it its own network namespace (no interfaces but a down loopback), runs it as ``nobody`` with no
capabilities and ``no_new_privs``. The strongest level that actually starts a worker here is
chosen once per process, by trying it: a launcher that cannot work on this machine (not root,
no user namespaces, a venv ``nobody`` cannot read) falls back to the next, never to an error.
"""

from __future__ import annotations

import atexit
import os
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass

from pydantic_monty._binary import find_monty_binary

NOBODY = 65534


@dataclass(frozen=True)
class Confinement:
    level: str
    """``nobody+netns`` (root hosts), ``userns+netns``, ``no-new-privs`` or ``none``."""
    binary: str
    """What the pool starts: the launcher script, or the plain ``monty`` binary."""


def _levels() -> list[tuple[str, list[str]]]:
    unshare, setpriv = shutil.which("unshare"), shutil.which("setpriv")
    levels: list[tuple[str, list[str]]] = []
    if unshare and setpriv and os.geteuid() == 0:
        drop = [
            setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
            "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--",
        ]  # fmt: skip
        levels.append(("nobody+netns", [unshare, "--net", "--ipc", "--uts", "--", *drop]))
    if unshare and setpriv:
        nnp = [setpriv, "--no-new-privs", "--"]
        levels.append(("userns+netns", [unshare, "--user", "--net", "--ipc", "--", *nnp]))
    if setpriv:
        levels.append(("no-new-privs", [setpriv, "--no-new-privs", "--"]))
    return levels


def _works(launcher: str) -> bool:
    try:
        done = subprocess.run(
            [launcher, "-c", "print(1 + 1)"], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and done.stdout.strip() == "2"


def choose() -> Confinement:
    """The strongest confinement that starts a worker on this machine."""
    monty = find_monty_binary()
    folder = tempfile.mkdtemp(prefix="jupyter-sandbox-monty-")
    atexit.register(shutil.rmtree, folder, True)
    for level, prefix in _levels():
        launcher = os.path.join(folder, f"monty-{level.replace('+', '-')}")
        with open(launcher, "w") as script:
            script.write(f'#!/bin/sh\nexec {shlex.join([*prefix, monty])} "$@"\n')
        os.chmod(launcher, 0o700)
        if _works(launcher):
            return Confinement(level, launcher)
    return Confinement("none", monty)
