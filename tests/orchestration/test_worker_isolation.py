"""A Monty worker cannot see, signal, trace or read any other process.

The attacker is what an escape from Monty would give: arbitrary native code in a worker. It
runs as a Python program started by the very launcher the workers start through (same
namespaces, same uid scheme, same dropped privileges), while a real worker holds a secret input
in a running cell, blocked in a tool. Every attack is first run unconfined, as root, against
the same processes: it finds the secret there, so the payload works and a confined attacker's
failure means the wall held.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import subprocess
import sysconfig
import tempfile
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from pydantic_monty._binary import find_monty_binary

import jupyter_sandbox
from jupyter_sandbox import orchestrate
from jupyter_sandbox.orchestration._confine import UID_BASE, launcher_script
from jupyter_sandbox.orchestration._workers import confinement

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="the own-uid+pidns+netns level needs a root host"
)

PYTHON = "/usr/bin/python3"

ATTACKER = r"""
import ctypes, errno, json, os, signal, socket, sys

needle, targets, attack = bytes.fromhex(sys.argv[1]), sys.argv[2].split(","), sys.argv[3]
kernel_port = int(sys.argv[4])
libc = ctypes.CDLL(None, use_errno=True)
PTRACE_ATTACH, PTRACE_DETACH = 16, 17


def outcome(action):
    try:
        return action()
    except OSError as exc:
        return errno.errorcode[exc.errno]


def look(path):
    with open(path, "rb") as file:
        return "found" if needle in file.read() else "read"


def memory(pid):
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
        for line in maps:
            span, perms = line.split()[:2]
            start, end = (int(edge, 16) for edge in span.split("-"))
            if perms.startswith("r"):
                try:
                    mem.seek(start)
                    if needle in mem.read(end - start):
                        return "found"
                except OSError:
                    continue
    return "read"


def ptrace(pid):
    if libc.ptrace(PTRACE_ATTACH, int(pid), 0, 0) == 0:
        libc.ptrace(PTRACE_DETACH, int(pid), 0, 0)
        return "attached"
    return errno.errorcode[ctypes.get_errno()]


def kill(pid):
    os.kill(int(pid), signal.SIGKILL)
    return "killed"


def pidfd(pid):
    os.close(os.pidfd_open(int(pid)))
    return "opened"


def connect(family, address):
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        sock.connect(address)
    return "connected"


me = str(os.getpid())
report = {"pid": os.getpid(), "uid": os.getuid(), "targets": {}}
report["others"] = [pid for pid in os.listdir("/proc") if pid.isdigit() and pid != me]
for pid in targets:
    tried = report["targets"][pid] = {
        name: outcome(lambda: look(f"/proc/{pid}/{name}")) for name in ("cmdline", "environ")
    }
    tried["mem"] = outcome(lambda: memory(pid))
    if attack == "attack":
        tried["pidfd"] = outcome(lambda: pidfd(pid))
        tried["ptrace"] = outcome(lambda: ptrace(pid))
        tried["kill"] = outcome(lambda: kill(pid))
report["session"] = os.getsid(0) == os.getpgrp() == os.getpid()  # leads its own
if attack == "attack":
    report["kill -1"] = outcome(lambda: os.kill(-1, signal.SIGKILL) or "sent")
    # Its whole process group: SIGUSR1 (ignored here) kills any other member it reaches.
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    report["kill 0"] = outcome(lambda: os.kill(0, signal.SIGUSR1) or "sent")
report["kernel port"] = outcome(lambda: connect(socket.AF_INET, ("127.0.0.1", kernel_port)))
report["docker"] = outcome(lambda: connect(socket.AF_UNIX, "/var/run/docker.sock"))
print(json.dumps(report))
"""


@dataclass
class HeldSecret:
    """A cell running in a real worker, paused in a tool, with a secret input in its memory."""

    secret: str
    workers: list[int]
    """Every worker process of this kernel: the launchers the pool knows and the ``monty``
    processes under them."""
    release: threading.Event
    runner: threading.Thread
    result: list[object]

    def finish(self) -> list[object]:
        """Let the cell go on and return what it returned (nothing if it failed)."""
        self.release.set()
        self.runner.join(60)
        return self.result


def children(pid: int) -> list[int]:
    tasks = Path(f"/proc/{pid}/task")
    return [
        int(child) for task in tasks.iterdir() for child in (task / "children").read_text().split()
    ]


def pool_workers() -> list[int]:
    """Every process under this one: the pool's workers (launchers and the ``monty`` under
    each) are this test process's only descendants while no attacker runs."""
    found, queue = [], children(os.getpid())
    while queue:
        found.append(pid := queue.pop())
        queue += children(pid)
    return sorted(found)


@pytest.fixture
def held_secret() -> Iterator[HeldSecret]:
    secret = "cell-input-" + secrets.token_hex(16)
    entered, release = threading.Event(), threading.Event()
    result: list[object] = []

    def hold() -> None:
        entered.set()
        release.wait(60)

    def cell() -> None:
        code = "kept = secret + '!'\nhold()\nlen(kept)"
        result.append(orchestrate(code, tools=[hold], inputs={"secret": secret}).value)

    runner = threading.Thread(target=cell)
    runner.start()
    held = HeldSecret(secret, [], release, runner, result)
    try:
        assert entered.wait(60), "the cell never reached its tool"
        held.workers = pool_workers()
        yield held
    finally:
        held.finish()


def run_attacker(command: list[str], held: HeldSecret, mode: str) -> dict[str, object]:
    """The attacker's report on every worker and on this process, which stands for the kernel
    (it holds every notebook variable)."""
    targets = ",".join(str(pid) for pid in [*held.workers, os.getpid()])
    with socket.create_server(("127.0.0.1", 0)) as kernel_port:  # like the kernel's ZMQ ports
        port = str(kernel_port.getsockname()[1])
        done = subprocess.run(
            [*command, "-I", "-c", ATTACKER, held.secret.encode().hex(), targets, mode, port],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 0, done.stderr
    report: dict[str, object] = json.loads(done.stdout)
    return report


@contextlib.contextmanager
def confined_like_a_worker(prefix: Sequence[str]) -> Iterator[list[str]]:
    """The attacker's command: the workers' own launcher script, written for ``python3``."""
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder, "attacker")
        script.write_text(launcher_script(prefix, PYTHON))
        script.chmod(0o700)
        yield [str(script)]


def targets_of(report: dict[str, object]) -> dict[str, dict[str, str]]:
    found = report["targets"]
    assert isinstance(found, dict)
    return found


def test_the_attack_finds_the_secret_when_run_unconfined(held_secret: HeldSecret) -> None:
    """The control: the same payload, as root on the host, reads the secret out of the
    worker's memory. Without this, a confined attacker's failure would prove nothing."""
    report = run_attacker([PYTHON], held_secret, "look")
    assert [pid for pid, tried in targets_of(report).items() if tried["mem"] == "found"]
    assert report["kernel port"] == "connected"


def test_a_worker_sees_signals_traces_and_reads_no_other_process(held_secret: HeldSecret) -> None:
    assert confinement().level == "own-uid+pidns+netns"
    with confined_like_a_worker(confinement().prefix) as command:
        report = run_attacker(command, held_secret, "attack")
    for pid, tried in targets_of(report).items():
        # Named by their host PIDs, the workers do not exist for the attacker.
        assert set(tried.values()) <= {"ENOENT", "ESRCH"}, (pid, tried)
    assert report["pid"] == 1 and report["others"] == []  # alone in its PID namespace
    assert isinstance(report["uid"], int) and report["uid"] >= UID_BASE
    assert report["kill -1"] == "ESRCH"  # nothing it may signal exists
    assert report["session"] is True  # so kill(0) reaches no one else, and no terminal
    assert report["kernel port"] == "ENETUNREACH"  # no network: only a loopback that is down
    assert report["docker"] in {"EACCES", "ENOENT"}
    assert held_secret.workers == pool_workers()  # none was killed
    assert held_secret.finish() == [len(held_secret.secret) + 1]  # and the cell carries on


def test_a_worker_that_could_name_another_still_cannot_signal_trace_or_read_it(
    held_secret: HeldSecret,
) -> None:
    """The second wall behind the PID namespace: the worker's own uid. The attacker here keeps
    the host's PID namespace and ``/proc`` (the launcher without its ``unshare``), so it sees
    every worker and the kernel, and each attack must still be refused."""
    prefix = confinement().prefix
    after_unshare = next(i for i, word in enumerate(prefix) if word.endswith("/unshare"))
    uid_only = prefix[prefix.index("--", after_unshare) + 1 :]
    with confined_like_a_worker(uid_only) as command:
        report = run_attacker(command, held_secret, "attack")
    others = report["others"]
    assert isinstance(others, list)
    assert {str(pid) for pid in held_secret.workers} <= set(others)  # it can see them...
    for pid, tried in targets_of(report).items():
        assert tried["cmdline"] == "read", (pid, tried)  # (public, and holds no input)
        assert tried["environ"] == "EACCES" and tried["mem"] == "EACCES", (pid, tried)
        assert tried["ptrace"] == "EPERM" and tried["kill"] == "EPERM", (pid, tried)
    assert held_secret.workers == pool_workers()
    assert held_secret.finish() == [len(held_secret.secret) + 1]


UNPRIVILEGED = [
    "setpriv", f"--reuid={UID_BASE - 1}", f"--regid={UID_BASE - 1}", "--clear-groups", "--",
]  # fmt: skip
"""A kernel of a user who is not root: a uid of no one, below the workers' range."""

AS_A_USER_KERNEL = r"""
import json, os, socket, subprocess, sys, tempfile
from pathlib import Path

import pydantic_monty
from jupyter_sandbox.orchestration._confine import choose, launcher_script

secret, attacker = sys.argv[1], sys.argv[2]
confinement = choose()
script = Path(tempfile.mkdtemp(), "attacker")
script.write_text(launcher_script(confinement.prefix, sys.executable))
script.chmod(0o700)
with (
    pydantic_monty.Monty(binary_path=confinement.binary) as pool,
    pool.checkout() as session,
    socket.create_server(("127.0.0.1", 0)) as kernel_port,
):
    port = str(kernel_port.getsockname()[1])
    held = session.feed_start("kept = secret + '!'\nhold()\nlen(kept)", inputs={"secret": secret})
    launcher = session.worker_pid
    workers = [launcher, *Path(f"/proc/{launcher}/task/{launcher}/children").read_text().split()]
    targets = ",".join(str(pid) for pid in [*workers, os.getpid()])
    done = subprocess.run(
        [script, "-I", "-c", attacker, secret.encode().hex(), targets, "attack", port],
        capture_output=True, text=True, check=True,
    )
    report = json.loads(done.stdout)
    report["level"], report["after"] = confinement.level, held.resume({"return_value": None}).output
print(json.dumps(report))
"""


def user_kernel(*argv: str) -> subprocess.CompletedProcess[str]:
    """Run Python as `UNPRIVILEGED`, importing this checkout and its installed packages.

    The venv's own interpreter may live where that user cannot read (here under ``/root``),
    so the system ``python3`` of the same version runs it."""
    paths = [str(Path(jupyter_sandbox.__file__).parents[1]), sysconfig.get_paths()["purelib"]]
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(paths), "MONTY_BIN": find_monty_binary()}
    return subprocess.run(
        [*UNPRIVILEGED, PYTHON, *argv], capture_output=True, text=True, env=env, timeout=120
    )


def test_without_root_each_worker_still_gets_a_pid_namespace_no_attacker_can_see_out_of() -> None:
    """A kernel that is not root cannot give workers uids of their own: its workers share its
    uid, and the user + PID namespace alone must keep an attacker in one from the others."""
    probe = user_kernel("-c", "import pydantic_monty, jupyter_sandbox.orchestration._confine")
    if probe.returncode != 0:
        pytest.skip(f"a non-root user cannot import this checkout here: {probe.stderr[-300:]}")
    secret = "cell-input-" + secrets.token_hex(16)
    done = user_kernel("-c", AS_A_USER_KERNEL, secret, ATTACKER)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["level"] == "userns+pidns+netns"
    for pid, tried in report["targets"].items():
        assert set(tried.values()) <= {"ENOENT", "ESRCH"}, (pid, tried)
    assert report["pid"] == 1 and report["others"] == []
    assert report["kill -1"] == "ESRCH"
    assert report["session"] is True
    assert report["kernel port"] == "ENETUNREACH"
    assert report["after"] == len(secret) + 1
