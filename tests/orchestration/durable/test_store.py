"""The durable store against a real SQLite file, with real processes writing it at once."""

from __future__ import annotations

import copyreg
import multiprocessing
import os
import sqlite3
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from jupyter_sandbox.errors import SandboxConfigError, StoreError
from jupyter_sandbox.orchestration.durable import _store
from jupyter_sandbox.orchestration.durable._store import (
    MONTY_VERSION,
    HandleMarker,
    Store,
    default_store_path,
)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    with Store(tmp_path / "store.sqlite") as opened:
        yield opened


def record(n: int, **extra: object) -> dict[str, object]:
    return {"tool": "f", "args": (n,), "kwargs": {}, "status": "ok", "result": n * 2, **extra}


def tamper(path: Path, sql: str) -> None:
    """Change the file as another program would: not through the store."""
    with sqlite3.connect(path) as db:
        db.execute(sql)


# --- what it keeps ---


def test_a_runs_prompt_number_is_kept_and_only_a_number_is_read_back(
    store: Store, tmp_path: Path
) -> None:
    """The prompt number (``In [n]``) a run's cell had is kept for a later kernel to name the
    cell by. The column is not sealed: only a plain int in range is kept or read back, so an
    edited store shows no cell number rather than its text."""
    run_id = store.new_run(scope="nb.ipynb", cell="c1", code="1", tools=[])
    assert store.prompt(run_id) is None
    for refused in (0, -3, True, 10**9, "7", 7.0):
        store.note_prompt(run_id, refused)  # type: ignore[arg-type]
        assert store.prompt(run_id) is None, refused
    store.note_prompt(run_id, 7)
    assert store.prompt(run_id) == 7 and store.prompt("0123456789ab") is None
    for forged in ("'7; rm -rf /'", "x'07'", "7.5", str(10**12)):
        tamper(tmp_path / "store.sqlite", f"UPDATE runs SET prompt = {forged}")
        assert store.prompt(run_id) is None, forged


def test_a_run_keeps_its_code_calls_checkpoint_and_status(store: Store) -> None:
    run_id = store.new_run(scope="nb.ipynb", cell="c1", code="f(1)\nf(2)", tools=["f", "g"])
    assert len(run_id) == 12 and int(run_id, 16) >= 0
    assert store.run(run_id).status == "running"
    store.record_call(run_id, 0, record(1))
    store.record_call(run_id, 2, record(3, status="error", error=ValueError("bad")))
    store.checkpoint(run_id, dump=b"first", call_index=1)
    store.checkpoint(run_id, dump=b"latest", call_index=2, pending=[{"tool": "g", "args": (1,)}])
    store.finish(run_id, "paused")

    run = store.run(run_id)
    assert (run.scope, run.cell, run.code, run.tools) == (
        "nb.ipynb",
        "c1",
        "f(1)\nf(2)",
        ["f", "g"],
    )
    assert run.status == "paused" and run.forked_from is None
    assert list(run.calls) == [0, 2]
    assert run.calls[0] == record(1)
    assert str(run.calls[2]["error"]) == "bad"
    assert run.checkpoint is not None
    assert (run.checkpoint.dump, run.checkpoint.call_index) == (b"latest", 2)
    assert run.checkpoint.pending == [{"tool": "g", "args": (1,)}]
    assert run.created <= run.updated


def test_runs_are_listed_newest_first_and_filtered(store: Store) -> None:
    first = store.new_run(scope="a", cell="c", code="1", tools=[])
    second = store.new_run(scope="a", cell="c", code="2", tools=[])
    other = store.new_run(scope="b", cell="c", code="3", tools=[], forked_from=(first, 4))
    store.record_call(second, 0, record(0))
    store.finish(second, "paused")

    assert [r.run_id for r in store.runs()] == [other, second, first]
    assert [r.run_id for r in store.runs(scope="a")] == [second, first]
    paused = store.runs(status="paused")
    assert [(r.run_id, r.calls, r.status) for r in paused] == [(second, 1, "paused")]
    assert store.runs(scope="b")[0].forked_from == (first, 4)
    assert store.run(other).forked_from == (first, 4)
    last = store.last_run("a", "c")
    assert last is not None and last.run_id == second
    assert store.last_run("a", "elsewhere") is None


def test_sessions_are_kept_listed_replaced_and_dropped(store: Store) -> None:
    assert store.load_session("nb", "s") is None
    store.save_session("nb", "s", b"one", {"x": "int"})
    store.save_session("nb", "s", b"second", {"x": "int", "f": "function"})
    store.save_session("other", "s", b"elsewhere", {})
    assert store.load_session("nb", "s") == b"second"
    [info] = store.sessions("nb")
    assert (info.name, info.names, info.size) == ("s", {"f": "function", "x": "int"}, 6)
    assert store.drop_session("nb", "s") is True
    assert store.drop_session("nb", "s") is False
    assert store.load_session("nb", "s") is None
    assert store.load_session("other", "s") == b"elsewhere"


def test_a_value_pickle_cannot_store_becomes_a_handle_marker_and_nothing_else_does(
    store: Store,
) -> None:
    run_id = store.new_run(scope="nb", cell="c", code="", tools=["f"])
    lock = threading.Lock()
    store.record_call(
        run_id, 0, record(1, args=(1, lock, [2, lock]), result={"handle": "a real dict"})
    )
    call = store.run(run_id).calls[0]
    args = call["args"]
    assert args[0] == 1 and args[2][0] == 2
    assert args[1] == {"handle": "_thread.lock"} and isinstance(args[1], HandleMarker)
    assert isinstance(args[2][1], HandleMarker)
    assert call["result"] == {"handle": "a real dict"}
    assert not isinstance(call["result"], HandleMarker)  # a tool's own dict is not a marker


class QuotaExceeded(Exception):
    def __init__(self, used: int, limit: int) -> None:
        super().__init__(f"{used} > {limit}")


def test_a_value_that_pickles_but_cannot_be_rebuilt_becomes_a_marker(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Once Dask's distributed is imported, tblib has registered a reducer that rebuilds every
    # exception class defined before it (this one too): the test is of a process without.
    monkeypatch.delitem(copyreg.dispatch_table, QuotaExceeded, raising=False)
    run_id = store.new_run(scope="nb", cell="c", code="", tools=["f"])
    store.record_call(run_id, 0, record(1, status="error", error=QuotaExceeded(3, 2)))
    call = store.run(run_id).calls[0]
    assert call["error"] == {"handle": f"{__name__}.QuotaExceeded"}
    assert call["args"] == (1,)


def test_a_value_whose_class_this_process_lacks_is_named_in_the_error(tmp_path: Path) -> None:
    # The class lives in the subprocess's __main__ under a name no test module defines: a
    # class of the same name in this process's __main__ (test_orchestrate_magic's `Frame`
    # lands there) would let pickle rebuild it, and the test would depend on their order.
    path = tmp_path / "store.sqlite"
    script = (
        "import sys\nfrom jupyter_sandbox.orchestration.durable._store import Store\n"
        "class OnlyInTheWritersProcess:\n    pass\n"
        "s = Store(sys.argv[1])\nrun = s.new_run(scope='nb', cell='c', code='', tools=[])\n"
        "s.record_call(run, 0, {'result': OnlyInTheWritersProcess()})\nprint(run)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(path)], capture_output=True, text=True, check=True
    )
    import __main__

    assert not hasattr(__main__, "OnlyInTheWritersProcess")
    with Store(path) as store, pytest.raises(StoreError, match="OnlyInTheWritersProcess") as error:
        store.run(done.stdout.strip())
    assert "call 0 of run" in str(error.value) and "cannot rebuild" in str(error.value)


# --- what it refuses ---


@pytest.mark.parametrize(
    ("table", "column", "expected"),
    [
        ("calls", "payload", "call 0 of run"),
        ("checkpoints", "payload", "the checkpoint of run"),
        ("runs", "payload", "run"),  # the code and tools
        ("runs", "forked_call", "run"),
        ("calls", "idx", "call 1 of run"),  # a sealed record moved to another call
    ],
)
def test_a_blob_modified_outside_the_store_is_refused(
    store: Store, table: str, column: str, expected: str
) -> None:
    run_id = store.new_run(scope="nb", cell="c", code="f(1)", tools=["f"], forked_from=("x", 1))
    store.record_call(run_id, 0, record(5))
    store.checkpoint(run_id, dump=b"\x00" * 64, call_index=1)
    if column == "payload":  # flip one byte of the stored blob
        change = "payload = substr(payload, 1, 10) || x'ff' || substr(payload, 12)"
    else:
        change = f"{column} = {column} + 1"
    tamper(store.path, f"UPDATE {table} SET {change} WHERE run_id = '{run_id}'")
    with pytest.raises(StoreError) as error:
        store.run(run_id)
    message = str(error.value)
    assert message.startswith(expected)
    assert message.endswith(
        f"in {store.path} was modified outside jupyter-sandbox (signature mismatch): "
        "refusing to load it"
    )


def test_a_tampered_session_is_refused(store: Store) -> None:
    store.save_session("nb", "s", b"dump", {"x": "int"})
    tamper(store.path, 'UPDATE sessions SET names = \'{"x": "str"}\'')
    with pytest.raises(StoreError, match=r"session 's' .* \(signature mismatch\)"):
        store.load_session("nb", "s")


def test_a_blob_signed_with_another_key_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite"
    with Store(path) as store:
        run_id = store.new_run(scope="nb", cell="c", code="", tools=[])
    (tmp_path / "key").unlink()
    with Store(path) as store, pytest.raises(StoreError, match="signature mismatch"):
        store.run(run_id)


def test_another_monty_version_is_refused_naming_both(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as patch:
        patch.setattr(_store, "MONTY_VERSION", "0.9.1")
        run_id = store.new_run(scope="nb", cell="c", code="", tools=[])
        store.save_session("nb", "s", b"dump", {})
    with pytest.raises(StoreError) as error:
        store.run(run_id)
    assert str(error.value) == (
        f"run {run_id!r} was saved by pydantic-monty 0.9.1, this kernel has {MONTY_VERSION}: "
        "run it again with resume=False"
    )
    assert (error.value.parameter, error.value.hint) == ("resume", "with resume=False")
    with pytest.raises(StoreError, match=f"0.9.1, this kernel has {MONTY_VERSION}: Store.drop"):
        store.load_session("nb", "s")


def test_an_unknown_run_id_says_where_to_look(store: Store) -> None:
    expected = f"no run 'f00' in {store.path}; Store.runs() lists its runs"
    for attempt in (
        lambda: store.run("f00"),
        lambda: store.record_call("f00", 0, record(1)),
        lambda: store.checkpoint("f00", dump=b"", call_index=0),
        lambda: store.finish("f00", "ok"),
    ):
        with pytest.raises(StoreError) as error:
            attempt()
        assert str(error.value) == expected


def test_an_unknown_status_is_refused(store: Store) -> None:
    run_id = store.new_run(scope="nb", cell="c", code="", tools=[])
    with pytest.raises(SandboxConfigError, match="status must be one of running, paused"):
        store.finish(run_id, "done")  # type: ignore[arg-type]


# --- the key and the file ---


def test_a_key_others_can_read_is_refused_with_the_fix(tmp_path: Path) -> None:
    Store(tmp_path / "store.sqlite").close()
    key = tmp_path / "key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and len(key.read_bytes()) == 32
    key.chmod(0o644)
    with pytest.raises(StoreError) as error:
        Store(tmp_path / "store.sqlite")
    assert str(error.value) == (
        f"the store's key file {key} is readable or writable by others (mode 0644): "
        f"run chmod 600 {key}"
    )
    key.chmod(0o600)
    Store(tmp_path / "store.sqlite").close()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file away")
def test_a_key_another_user_owns_is_refused(tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_bytes(b"k" * 32)
    key.chmod(0o600)
    os.chown(key, 12345, 12345)
    with pytest.raises(StoreError, match="belongs to uid 12345, not to you"):
        Store(tmp_path / "store.sqlite")


def test_a_key_that_is_a_symlink_or_the_wrong_size_is_refused(tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_bytes(b"short")
    key.chmod(0o600)
    with pytest.raises(StoreError, match=f"holds 5 bytes, not 32: run rm {key}"):
        Store(tmp_path / "store.sqlite")
    key.unlink()
    (tmp_path / "elsewhere").write_bytes(b"k" * 32)
    key.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(StoreError, match=f"key file {key} is a symbolic link: run rm {key}"):
        Store(tmp_path / "store.sqlite")


def test_a_missing_parent_is_created_private(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        Store(tmp_path / "a" / "b" / "store.sqlite").close()
    finally:
        os.umask(old)
    for folder in (tmp_path / "a", tmp_path / "a" / "b"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "a" / "b" / "store.sqlite").stat().st_mode) == 0o600


def test_an_unusable_path_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    for path in (tmp_path / "file" / "store.sqlite", tmp_path):
        with pytest.raises(StoreError) as error:
            Store(path)
        assert str(error.value).startswith(f"cannot open the store at {path}: ")
        assert str(error.value).endswith(
            "point store= or $JUPYTER_SANDBOX_STORE at a writable path"
        )


def test_a_store_from_a_newer_release_is_refused(tmp_path: Path) -> None:
    Store(tmp_path / "store.sqlite").close()
    tamper(tmp_path / "store.sqlite", "UPDATE meta SET value = '99' WHERE key = 'schema'")
    with pytest.raises(StoreError, match="has schema version 99, written by a newer"):
        Store(tmp_path / "store.sqlite")


def test_the_default_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("JUPYTER_SANDBOX_STORE", str(tmp_path / "mine.sqlite"))
    assert default_store_path() == tmp_path / "mine.sqlite"
    monkeypatch.delenv("JUPYTER_SANDBOX_STORE")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_store_path() == tmp_path / ".local/share/jupyter-sandbox/store.sqlite"


# --- bounded growth ---


def test_prune_keeps_the_last_runs_of_each_cell_and_every_paused_run(store: Store) -> None:
    store.keep = 2
    paused = store.new_run(scope="nb", cell="c", code="", tools=[])
    store.checkpoint(paused, dump=b"d", call_index=0)
    store.finish(paused, "paused")
    runs = []
    for _ in range(4):
        runs.append(store.new_run(scope="nb", cell="c", code="", tools=[]))
        store.record_call(runs[-1], 0, record(1))
    other = store.new_run(scope="nb", cell="other", code="", tools=[])
    kept = {r.run_id for r in store.runs()}
    assert kept == {paused, runs[2], runs[3], other}  # new_run pruned its own cell
    assert store.prune(keep=1) == 1
    assert {r.run_id for r in store.runs()} == {paused, runs[3], other}
    assert store.prune(keep=1, total=1) == 1  # the older of the two runs that are not paused
    assert {r.run_id for r in store.runs()} == {paused, other}
    with sqlite3.connect(store.path) as db:  # a dropped run's calls went with it
        assert db.execute("SELECT count(*) FROM calls").fetchone() == (0,)


def test_prune_gives_the_space_back(store: Store) -> None:
    run_id = store.new_run(scope="nb", cell="c", code="", tools=[])
    store.checkpoint(run_id, dump=os.urandom(4 * 2**20), call_index=0)
    with sqlite3.connect(store.path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    assert store.path.stat().st_size > 4 * 2**20
    assert store.prune(keep=0) == 1
    with sqlite3.connect(store.path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    assert store.path.stat().st_size < 2**20


# --- several writers at once ---

_WRITER = """
import sys
from pathlib import Path
from jupyter_sandbox.orchestration.durable._store import Store

path, n, go = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
while not go.exists():
    pass
store = Store(path)  # every writer opens the fresh store at once: the key and schema race too
run = store.new_run(scope="nb", cell=f"cell{n}", code=f"writer {n}", tools=["f"])
for i in range(200):
    store.record_call(run, i, {"tool": "f", "args": (n, i), "result": "x" * i})
    if i % 20 == 0:
        store.checkpoint(run, dump=bytes([n]) * (i + 1), call_index=i)
        store.save_session("nb", f"s{n}", bytes([n]) * i, {"i": "int"})
store.finish(run, "ok")
print(run)
"""


def test_processes_writing_one_store_at_once_neither_lock_nor_corrupt_it(
    tmp_path: Path,
) -> None:
    path, go = tmp_path / "fresh" / "store.sqlite", tmp_path / "go"
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(path), str(n), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(4)
    ]
    go.touch()
    outcomes = [writer.communicate(timeout=300) for writer in writers]
    assert [writer.returncode for writer in writers] == [0] * 4, [err for _, err in outcomes]
    with Store(path) as store:
        for n, (out, _) in enumerate(outcomes):
            run = store.run(out.strip())  # verifies every seal of the run
            assert (run.cell, run.code, run.status) == (f"cell{n}", f"writer {n}", "ok")
            assert run.calls == {
                i: {"tool": "f", "args": (n, i), "result": "x" * i} for i in range(200)
            }
            assert run.checkpoint is not None
            assert run.checkpoint.dump == bytes([n]) * 181
            assert store.load_session("nb", f"s{n}") == bytes([n]) * 180
        with sqlite3.connect(path) as db:
            assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_threads_share_one_store(store: Store) -> None:
    run_id = store.new_run(scope="nb", cell="c", code="", tools=[])

    def write(first: int) -> None:
        for i in range(first, first + 50):
            store.record_call(run_id, i, record(i))

    threads = [threading.Thread(target=write, args=(k * 50,)) for k in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert store.run(run_id).calls == {i: record(i) for i in range(400)}


def _write_in_child(store: Store, run_id: str) -> None:
    store.record_call(run_id, 1, record(1))


def test_a_forked_child_writes_through_its_own_connection(store: Store) -> None:
    run_id = store.new_run(scope="nb", cell="c", code="", tools=[])
    store.record_call(run_id, 0, record(0))
    child = multiprocessing.get_context("fork").Process(
        target=_write_in_child, args=(store, run_id)
    )
    child.start()
    child.join()
    assert child.exitcode == 0
    store.record_call(run_id, 2, record(2))  # the parent's connection still works
    assert store.run(run_id).calls == {i: record(i) for i in range(3)}


_TAKE_OVER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], timeout=0)
try:
    db.execute("PRAGMA journal_mode = DELETE").fetchone()  # needs the file to itself
    print("taken")
except sqlite3.OperationalError as error:
    print(error)
"""


def test_a_second_store_of_an_open_path_keeps_the_first_ones_locks(tmp_path: Path) -> None:
    """Closing any descriptor of a database file drops every POSIX lock the process holds on
    it: a second `Store` of a path this process has open must not open the file, or another
    kernel could delete the WAL under the first (seen as "database disk image is malformed")."""
    path = tmp_path / "store.sqlite"
    first = Store(path)
    first.new_run(scope="s", cell="c", code="1", tools=[])
    Store(path).close()
    other = subprocess.run(
        [sys.executable, "-c", _TAKE_OVER, str(path)], capture_output=True, text=True, check=True
    )
    assert other.stdout.strip() == "database is locked"
    assert first.runs(scope="s")  # and the first store still reads
    first.close()
