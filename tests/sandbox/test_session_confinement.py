"""A session's container is confined as a one-shot run's is, at each isolation level: the
one-shot run's probes (`test_sandbox_engine`) run as a session's cells, against the real
engine. What a session adds (its state lives across cells) is where an escape would keep
going, so the probes run after an earlier cell, in the same namespace."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from _probes import (
    CONFINEMENT_PROBE,
    NETWORK_PROBE,
    assert_confined,
    disk_fill,
    disk_filled,
)

from jupyter_sandbox.errors import IsolationUnavailable, SessionCellError, SessionLost
from jupyter_sandbox.sandbox import _kept, _session
from jupyter_sandbox.sandbox._session import create_session

pytestmark = [pytest.mark.docker]


@pytest.fixture(autouse=True)
def session_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_leaked_containers: None
) -> Iterator[Path]:
    """Tokens and snapshots in the test's own folder; every session closed after (and the
    ready one, before the check that nothing is left)."""
    folder = tmp_path / "sessions"
    monkeypatch.setenv(_kept.SESSION_DIR_ENV, str(folder))
    yield folder
    _session.close_sessions(kept=True)


def test_a_session_runs_without_root_capabilities_or_new_privileges(isolation, limit_holds):
    with create_session("confined") as session:
        session.run("earlier = 1")
        found = session.run(CONFINEMENT_PROBE, outputs=["uid", "caps", "nnp", "pids"])
        assert session.run("earlier") == 1
    uid, caps, nnp, pids = (found[name] for name in ("uid", "caps", "nnp", "pids"))
    assert_confined(uid, caps, nnp, pids, isolation, limit_holds)


def test_a_sessions_root_is_read_only_and_its_tmp_is_capped(isolation):
    with create_session("filled", resources={"disk": "16m"}, timeout=60) as session:
        cell = session.execute(disk_fill("/tmp"))
        assert cell.stdout.splitlines() == disk_filled(isolation, "/tmp")
        cell = session.execute(disk_fill("/tmp"))  # the space came back: the limit holds again
        assert cell.stdout.splitlines() == disk_filled(isolation, "/tmp")


def test_a_session_has_no_network_by_default(isolation):
    with create_session("offline") as session:
        assert session.run(NETWORK_PROBE, outputs=["result"])["result"] != "connected"
        assert session.run("import os; sorted(os.listdir('/sys/class/net'))") == ["lo"]


def test_a_session_past_its_memory_limit_is_lost_and_says_so(isolation, limit_holds):
    """Where the engine would drop the limit (rootless Podman on cgroup v1) the session is
    refused, naming the limit, as a one-shot run is."""
    if not limit_holds("memory"):
        with pytest.raises(IsolationUnavailable, match="drop the memory,"):
            create_session("hungry", resources={"memory": "128m"})
        return
    with create_session("hungry", resources={"memory": "128m"}, timeout=60) as session:
        session.run("ok = 1")
        with pytest.raises(SessionLost, match="'hungry' was lost: it was killed for memory"):
            session.run("chunks = []\nwhile True:\n    chunks.append(bytearray(10 * 2**20))")


FORK_UNTIL_REFUSED = """\
import os, time
children = 0
while children < 1000:
    try:
        pid = os.fork()
    except OSError:  # the pids limit: EAGAIN
        break
    if pid == 0:
        time.sleep(600)
        os._exit(0)
    children += 1
children
"""
"""Forks sleeping children until the kernel refuses one (at most 1000): how many it made."""


def test_a_fork_bomb_stops_at_the_pids_limit_and_the_session_still_answers(isolation, limit_holds):
    """The children outlive the cell (a session's processes do): the limit is what stops
    them, and the session's server, which needs no new process, still answers. Under gVisor
    the host counts the runtime's threads too: a session with a small limit starts all the
    same, and a bomb ends the sandbox, said so, before a fork fails inside."""
    if not limit_holds("pids"):
        with pytest.raises(IsolationUnavailable, match="pids"):
            create_session("forks", resources={"pids": 64})
        return
    with create_session("forks", resources={"pids": 64}, timeout=60) as session:
        assert session.run("1 + 1") == 2
        if isolation == "gvisor":
            with pytest.raises(SessionLost, match=r"reached the pids limit \(64; create it"):
                session.run(FORK_UNTIL_REFUSED)
            return
        children = session.run(FORK_UNTIL_REFUSED)
        assert 0 < children < 64
        assert session.run("1 + 1") == 2


def test_a_sessions_secret_is_masked_in_streams_results_and_tracebacks(isolation, monkeypatch):
    monkeypatch.setenv("SESSION_TOKEN", "hunter2-very-secret")
    monkeypatch.setenv("JSBX_HOST_ONLY", "leak-me")
    with create_session("secretive", secrets=["SESSION_TOKEN"]) as session:
        cell = session.execute(
            "import os\ntoken = os.environ['SESSION_TOKEN']\nprint(token)\ntoken"
        )
        assert session.run("len(token)") == len("hunter2-very-secret")
        assert session.run("'JSBX_HOST_ONLY' in os.environ") is False  # the host's stay out
        with pytest.raises(SessionCellError) as raised:
            session.run("raise ValueError(token)")
    shown = cell.stdout + str(cell.result) + str(raised.value) + raised.value.traceback
    assert "hunter2" not in shown
    assert "***" in cell.stdout


def test_a_session_sees_neither_anothers_processes_nor_its_files(isolation):
    with create_session("one") as one, create_session("two") as two:
        one.run(
            "import subprocess\nopen('/tmp/mine', 'w').write('one')\n"
            "waiting = subprocess.Popen(['sleep', '301'])"
        )
        assert two.run("import os; os.path.exists('/tmp/mine')") is False
        seen = two.run(
            "[open(f'/proc/{p}/cmdline', 'rb').read().decode(errors='replace')"
            " for p in os.listdir('/proc') if p.isdigit()]"
        )
        assert seen and not [line for line in seen if "301" in line], seen
        assert len(seen) <= 3  # its own script and server, nothing of the other's
        assert one.run("waiting.poll() is None") is True  # the other's process was there
