"""Interactive sandbox sessions against the real Docker engine: one container that keeps its
Python state and files across cells, interrupts that keep it, faults that lose it loudly,
snapshots and forks, and nothing left behind."""

from __future__ import annotations

import _thread
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_sandbox.errors import SandboxConfigError, SessionCellError, SessionLost
from jupyter_sandbox.sandbox import _kept, _session
from jupyter_sandbox.sandbox._session import create_session


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


def _containers(docker_engine, session: _session.SandboxSession) -> list[str]:
    return [c["Id"] for c in docker_engine.api.containers(filters={"id": session.container_id})]


def test_variables_imports_functions_and_files_stay_across_cells() -> None:
    with create_session("state") as session:
        session.run("import math\ndef area(r):\n    return math.pi * r * r\nclass P: k = 3")
        session.run("open('notes.txt', 'w').write('kept'); big = [1, 2, 3]")
        assert session.run("round(area(1), 2), P.k, open('/tmp/notes.txt').read()") == [
            3.14,
            3,
            "kept",
        ]
        assert session.run("total = sum(big) + n", n=4, outputs=["total"]) == {"total": 10}
        assert session.run("object()").startswith("<object object at")
        assert session.cells == 5


def test_file_and_dir_inputs_arrive_as_paths_without_the_links_that_lead_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `File` or `Dir` input is copied in (its path is the variable, as in a one-shot run);
    sent again it replaces the last one; a link in a folder, which could lead to any host
    file, stays out; one over the ceiling is refused in one line before anything is sent."""
    from jupyter_sandbox import Dir, File

    host_secret = tmp_path / "host-secret"
    host_secret.write_text("never inside")
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    (data / "a.csv").write_text("x\n1\n")
    (data / "sub" / "b.txt").write_text("deep")
    (data / "leak").symlink_to(host_secret)
    (data / "leak-dir").symlink_to(tmp_path)
    one = tmp_path / "one.csv"
    one.write_text("first")
    (tmp_path / "named").symlink_to(one)  # a link the user names is the file it leads to
    listing = (
        "import os\n"
        "sorted(os.path.relpath(os.path.join(r, f), folder)"
        " for r, ds, fs in os.walk(folder) for f in fs + ds)"
    )
    with create_session("files") as session:
        assert session.run("open(csv).read(), csv", csv=File(tmp_path / "named")) == [
            "first",
            "/tmp/inputs/csv",
        ]
        one.write_text("second")
        assert session.run("open(csv).read()", csv=File(one)) == "second"
        assert session.run(listing, folder=Dir(data)) == ["a.csv", "sub", "sub/b.txt"]
        assert session.run("open(os.path.join(folder, 'sub/b.txt')).read()", folder=Dir(data))
        monkeypatch.setattr(_session, "INPUT_CEILING_BYTES", 3)
        with pytest.raises(SandboxConfigError, match="at most 3 per File or Dir") as refused:
            session.run("1", csv=File(one))
        assert "\n" not in str(refused.value)
        with pytest.raises(SandboxConfigError, match="no such file"):
            session.run("1", csv=File(tmp_path / "missing.csv"))
        assert session.run("open(csv).read()") == "second"  # the session is as it was


def test_a_cell_that_raises_shows_its_traceback_and_keeps_the_state() -> None:
    with create_session("errors") as session:
        session.run("x = 41")
        with pytest.raises(SessionCellError) as raised:
            session.run("x += 1\nraise ValueError('bad ' + str(x))")
        assert raised.value.type_name == "ValueError"
        assert 'File "<cell 2>", line 2' in raised.value.traceback
        assert "_session_server" not in raised.value.traceback
        assert session.run("x") == 42


def test_stdout_and_stderr_stream_while_the_cell_runs() -> None:
    seen: list[tuple[str, str, float]] = []
    with create_session("streams") as session:
        cell = session.execute(
            "import sys, time, os\nprint('first', flush=True)\ntime.sleep(1)\n"
            "os.write(2, b'from C\\n')\nprint('second')",
            on_stream=lambda name, text: seen.append((name, text, time.monotonic())),
        )
    assert cell.stdout == "first\nsecond\n"
    assert cell.stderr == "from C\n"
    first = next(at for name, text, at in seen if "first" in text)
    second = next(at for name, text, at in seen if "second" in text)
    assert second - first >= 0.9  # the first line came before the cell ended


def test_an_interrupt_raises_keyboard_interrupt_inside_and_keeps_the_namespace() -> None:
    with create_session("interrupt") as session:
        session.run("kept = 'yes'")
        timer = threading.Timer(1.0, _thread.interrupt_main)
        timer.start()
        started = time.monotonic()
        with pytest.raises(SessionCellError) as raised:
            session.run("import time\nwhile True: time.sleep(0.1)")
        assert raised.value.type_name == "KeyboardInterrupt"
        assert time.monotonic() - started < 10
        assert session.run("kept") == "yes"


def test_a_cell_past_its_timeout_is_interrupted_and_the_session_keeps_its_state() -> None:
    with create_session("slow") as session:
        session.run("a = 1")
        with pytest.raises(SessionCellError, match="KeyboardInterrupt"):
            session.run("import time; time.sleep(60)", timeout=1)
        assert session.run("a") == 1


def test_a_container_killed_from_outside_raises_session_lost_then_starts_fresh(
    docker_engine,
) -> None:
    session = create_session("killed")
    session.run("x = 1")
    docker_engine.api.kill(session.container_id)
    with pytest.raises(SessionLost, match="'killed' was lost") as lost:
        session.run("x")
    assert not lost.value.oom
    with pytest.raises(SessionLost):
        session.run("x")
    fresh = create_session("killed")
    with pytest.raises(SessionCellError, match="NameError"):
        fresh.run("x")
    fresh.close()


def test_a_session_killed_for_memory_says_so() -> None:
    with create_session("hungry", resources={"memory": "128m"}) as session:
        session.run("ok = 1")
        with pytest.raises(SessionLost, match="killed for memory") as lost:
            session.run("hog = bytearray(400 * 2**20)")
        assert lost.value.oom


def test_the_session_runs_confined_as_a_one_shot_run() -> None:
    with create_session("confined") as session:
        uid, caps, root_writable, net = session.run(
            "import os, socket\n"
            "caps = [l for l in open('/proc/self/status') if l.startswith('CapEff')][0]\n"
            "try:\n    open('/etc/x', 'w'); w = True\nexcept OSError:\n    w = False\n"
            "try:\n    socket.create_connection(('1.1.1.1', 53), timeout=2); n = True\n"
            "except OSError:\n    n = False\n"
            "os.getuid(), caps.split()[1], w, n"
        )
    assert uid != 0
    assert int(caps, 16) == 0
    assert root_writable is False
    assert net is False


def test_two_sessions_see_neither_each_others_processes_nor_files() -> None:
    with create_session("one") as one, create_session("two") as two:
        one.run("open('/tmp/secret', 'w').write('one')")
        assert two.run("import os; os.path.exists('/tmp/secret')") is False
        pids = two.run("sorted(int(p) for p in os.listdir('/proc') if p.isdigit())")
        assert len(pids) <= 3


def test_snapshot_and_fork_diverge_and_name_what_could_not_be_saved() -> None:
    with create_session("origin") as origin:
        origin.run("import threading\nrows = list(range(5))\nlock = threading.Lock()")
        origin.run("open('data.csv', 'w').write('a,b\\n1,2\\n')\ndef double(v): return 2 * v")
        snap = origin.snapshot("loaded")
        assert "rows" in snap.saved and "double" in snap.saved
        assert "lock" in snap.unsaved
        with origin.fork("branch", "loaded") as branch:
            branch.run("rows.append(99)")
            assert branch.run("double(len(rows)), open('data.csv').read()") == [12, "a,b\n1,2\n"]
            assert origin.run("len(rows)") == 5
        assert os.stat(snap.path).st_mode & 0o077 == 0


def test_a_second_session_of_the_same_name_is_refused() -> None:
    with create_session("twice"), pytest.raises(SandboxConfigError, match="running already"):
        create_session("twice")


def test_a_spec_that_differs_is_named() -> None:
    small = _session.session_spec(resources={"memory": "256m"})
    big = _session.session_spec(resources={"memory": "512m"})
    assert small.difference(big) == "memory '512m' (the session has '256m')"
    assert small.difference(small) is None


def test_token_files_are_private_and_one_others_could_read_is_refused(
    session_dir: Path,
) -> None:
    token_file = _kept.state_dir() / "probe.token"
    _kept._private_write(token_file, b"secret")
    assert token_file.stat().st_mode & 0o777 == 0o600
    assert _kept.state_dir().stat().st_mode & 0o777 == 0o700
    assert _kept.token_of("probe") == "secret"
    token_file.chmod(0o644)
    assert _kept.token_of("probe") is None


def test_a_session_runs_under_gvisor(docker_engine) -> None:
    with create_session("gvisor", isolation="gvisor") as session:
        session.run("x = 2")
        assert session.run("x * 21") == 42
        runtime = docker_engine.api.inspect_container(session.container_id)["HostConfig"]
        assert runtime["Runtime"] == "runsc"
        with pytest.raises(SessionCellError, match="KeyboardInterrupt"):
            session.run("import time; time.sleep(30)", timeout=1)
        assert session.run("x") == 2


def test_env_vars_reach_the_code_and_secrets_are_masked_in_all_it_sends_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SESSION_TOKEN", "hunter2-very-secret")
    streamed: list[str] = []
    with create_session(
        "secretive", env_vars={"MODE": "test"}, secrets=["SESSION_TOKEN"]
    ) as session:
        assert session.run("import os; os.environ['MODE']") == "test"
        cell = session.execute(
            "token = os.environ['SESSION_TOKEN']\n"
            "for ch in token: print(ch, end='', flush=True)\n"
            "print()\ntoken",
            outputs=["token"],
            on_stream=lambda _name, text: streamed.append(text),
        )
        with pytest.raises(SessionCellError) as raised:
            session.run("raise ValueError(token)")
    shown = "".join(streamed) + cell.stdout + str(cell.result) + str(cell.outputs)
    shown += str(raised.value) + raised.value.traceback
    assert "hunter2" not in shown
    assert "***" in cell.stdout


def test_a_flood_of_output_is_capped_and_interrupted_and_the_session_stays() -> None:
    from jupyter_sandbox.errors import OutputLimitExceeded

    streamed: list[str] = []
    with create_session("flood", resources={"output": "64k"}) as session:
        session.run("kept = 1")
        with pytest.raises(OutputLimitExceeded, match="output cap"):
            session.run(
                "while True: print('x' * 1000)",
                on_stream=lambda _name, text: streamed.append(text),
            )
        assert len("".join(streamed)) <= 64 * 1024
        assert session.run("kept") == 1


def test_a_cell_that_ignores_interrupts_is_killed_with_its_session_at_the_second() -> None:
    with create_session("stubborn") as session:
        for _ in range(2):
            threading.Timer(1.0 + 2 * _, _thread.interrupt_main).start()
        with pytest.raises(SessionLost, match="second interrupt"):
            session.run(
                "import time\nwhile True:\n    try:\n        time.sleep(0.1)\n"
                "    except KeyboardInterrupt:\n        pass"
            )
        assert session.lost


def test_a_session_as_a_tool_keeps_its_state_between_the_codes_calls() -> None:
    from jupyter_sandbox import orchestrate, tool

    with create_session("explore") as session:
        explore = tool(session)
        assert explore.name == "explore"
        result = orchestrate(
            "explore('rows = [3, 1, 2]')\nexplore('sorted(rows)')", tools=[explore]
        )
        assert result.value == [1, 2, 3]
        assert session.run("len(rows)") == 3


def test_a_snapshot_of_tens_of_megabytes_forks_whole() -> None:
    with create_session("heavy", resources={"memory": "1g"}) as heavy:
        heavy.run("import hashlib, os\nblob = os.urandom(40 * 2**20)")
        digest = heavy.run("hashlib.sha256(blob).hexdigest()")
        snap = heavy.snapshot("big")
        assert snap.path.stat().st_size > 40 * 2**20
        with heavy.fork("heavy_fork", "big") as fork:
            assert fork.run("import hashlib\nhashlib.sha256(blob).hexdigest()") == digest
