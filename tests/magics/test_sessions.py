"""``%%sandbox --session`` and its line magics in real kernels: state across cells, a refused
environment, snapshots and forks, interrupts, kept sessions re-attached by the same notebook
only, and a killed kernel leaving no session container behind."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from _kernels import Kernel, kernel
from _record_shapes import check_record

from jupyter_sandbox.records import RUN_MIME
from jupyter_sandbox.sandbox._client import client

pytestmark = pytest.mark.usefixtures("docker_engine")


def _env(folder: Path, notebook: str = "analysis.ipynb") -> dict[str, str]:
    return {"JUPYTER_SANDBOX_SESSION_DIR": str(folder), "JPY_SESSION_NAME": notebook}


def _running(label: str) -> list[str]:
    return [c["Id"] for c in client().api.containers(filters={"label": label})]


def test_cells_of_a_session_share_state_and_say_which_session_ran_them(tmp_path: Path) -> None:
    with kernel(tmp_path / "store.sqlite", _env(tmp_path / "s")) as k:
        k.ok("%%sandbox --session analysis\nrows = [1, 2, 3]\nprint('loaded')")
        ran = k.ok("%%sandbox --session analysis --out total\ntotal = sum(rows)\ntotal * 2")
        assert "loaded" not in ran.text
        assert "session analysis · cell 2" in ran.text
        assert "12" in ran.text
        (record,) = ran.records(RUN_MIME)
        check_record(record)
        assert (record["session"], record["session_cell"]) == ("analysis", 2)
        assert "session analysis · cell 2 ok" in record["summary"]["headline"]
        assert k.ok("total").value == "6"
        k.ok("n = 5")
        assert "[1, 2, 3, 5]" in k.ok("%%sandbox --session analysis --in n\nrows + [n]").text
        csv = tmp_path / "sales.csv"
        csv.write_text("item,amount\na,7\n")
        k.ok(f"from jupyter_sandbox import File\nsales = File({str(csv)!r})")
        read = k.ok("%%sandbox --session analysis --in sales\nopen(sales).read().split()[-1]")
        assert "'a,7'" in read.text  # the notebook's file, copied into the session
        failed = k.run("%%sandbox --session analysis\nrows[10]")
        assert failed.status == "error"
        assert "IndexError" in failed.text
        assert "<cell" in failed.text
        assert "3" in k.ok("%%sandbox --session analysis\nlen(rows)").text
        listed = k.ok("%sandbox_sessions").text
        assert "analysis" in listed and "rows" in listed
        k.ok("%sandbox_stop analysis")
        assert "no sandbox sessions" in k.ok("%sandbox_sessions").text


def test_a_cell_asking_for_another_environment_is_refused_naming_it(tmp_path: Path) -> None:
    with kernel(tmp_path / "store.sqlite", _env(tmp_path / "s")) as k:
        k.ok("%%sandbox --session env --memory 512m\nx = 1")
        refused = k.run("%%sandbox --session env --memory 256m\nx")
        assert refused.status == "error"
        assert "memory '256m' (the session has '512m')" in refused.text
        k.ok("%sandbox_stop --all")


def test_snapshot_then_fork_starts_from_the_snapshot_and_diverges(tmp_path: Path) -> None:
    with kernel(tmp_path / "store.sqlite", _env(tmp_path / "s")) as k:
        k.ok("%%sandbox --session base\nimport threading\ndata = {'a': 1}\nlock = threading.Lock()")
        said = k.ok("%sandbox_snapshot base --tag loaded").text
        assert "base@loaded" in said and "not saved: lock" in said
        k.ok("%%sandbox --session branch --from base@loaded\ndata['b'] = 2")
        assert "{'a': 1, 'b': 2}" in k.ok("%%sandbox --session branch\ndata").text
        assert "{'a': 1}" in k.ok("%%sandbox --session base\ndata").text
        k.ok("%sandbox_stop --all")


def test_an_interrupt_keeps_the_session_and_its_variables(tmp_path: Path) -> None:
    with kernel(tmp_path / "store.sqlite", _env(tmp_path / "s")) as k:
        k.ok("%%sandbox --session slow\nkept = 'yes'")
        msg_id = k.start("%%sandbox --session slow\nimport time\nwhile True: time.sleep(0.1)")
        time.sleep(2)
        k.km.interrupt_kernel()
        reply = k.client.get_shell_msg(timeout=60)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = k.client.get_shell_msg(timeout=60)
        assert reply["content"]["status"] == "error"
        time.sleep(0.5)  # past ipykernel's window that aborts requests queued behind an error
        after = k.run("%%sandbox --session slow\nkept")
        assert "yes" in after.text, [(m["msg_type"], m["content"]) for m in after.outputs]
        k.ok("%sandbox_stop --all")


def test_a_killed_kernel_leaves_no_session_container(tmp_path: Path) -> None:
    k = Kernel(tmp_path / "store.sqlite", _env(tmp_path / "s"))
    k.ok("%load_ext jupyter_sandbox")
    k.ok("%%sandbox --session doomed\nx = 1")
    pid = k.km.provisioner.pid  # type: ignore[union-attr]
    owned = f"jupyter-sandbox.owner-pid={pid}"
    assert _running(owned)
    k.kill()
    deadline = time.monotonic() + 30
    while _running(owned) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _running(owned)


def test_a_kept_session_is_reattached_by_the_same_notebook_only(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    with kernel(tmp_path / "store.sqlite", _env(folder)) as k:
        k.ok("%%sandbox --session keeper --keep\nstate = 41")
    assert _running("jupyter-sandbox.session=keeper")  # outlived its kernel
    with kernel(tmp_path / "store.sqlite", _env(folder, "other.ipynb")) as other:
        ran = other.run("%%sandbox --session keeper --keep\nstate")
        assert "NameError" in ran.text  # a new session of its own: the kept one is not its
        other.ok("%sandbox_stop --all")
    with kernel(tmp_path / "store.sqlite", _env(folder)) as k:
        ran = k.ok("%%sandbox --session keeper --keep\nstate + 1")
        assert "re-attached" in ran.text and "42" in ran.text
        k.ok("%sandbox_stop --all")
    assert not _running("jupyter-sandbox.session=keeper")


def test_a_forged_token_file_cannot_attach(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    with kernel(tmp_path / "store.sqlite", _env(folder)) as k:
        k.ok("%%sandbox --session guarded --keep\nsecret = 'mine'")
    (token,) = folder.glob("*/guarded.token")
    token.write_text("0" * 64)
    os.chmod(token, 0o600)
    try:
        with kernel(tmp_path / "store.sqlite", _env(folder)) as k:
            ran = k.run("%%sandbox --session guarded --keep\nsecret")
            assert "mine" not in ran.text
            k.ok("%sandbox_stop --all")
    finally:
        for cid in _running("jupyter-sandbox.session=guarded"):
            client().api.remove_container(cid, force=True)


def test_a_snapshot_is_restored_after_a_kernel_restart(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    with kernel(tmp_path / "store.sqlite", _env(folder)) as k:
        k.ok(
            "%%sandbox --session loaded\ntable = {'rows': 3}\nopen('t.csv', 'w').write('a\\n1\\n')"
        )
        k.ok("%sandbox_snapshot loaded --tag ready")
    with kernel(tmp_path / "store.sqlite", _env(folder)) as k:
        ran = k.ok("%%sandbox --session again --from loaded@ready\ntable, open('t.csv').read()")
        assert "started from loaded@ready" in ran.text
        assert "{'rows': 3}" in ran.text and "a\\n1\\n" in ran.text
        k.ok("%sandbox_stop --all")
    with kernel(tmp_path / "store.sqlite", _env(folder, "other.ipynb")) as k:
        ran = k.run("%%sandbox --session thief --from loaded@ready\ntable")
        assert "no snapshot 'loaded@ready'" in ran.text  # another notebook's are not its


def test_a_lost_session_starts_again_from_its_last_snapshot_saying_so(tmp_path: Path) -> None:
    with kernel(tmp_path / "store.sqlite", _env(tmp_path / "s")) as k:
        k.ok("%%sandbox --session fragile\nx = 7")
        k.ok("%sandbox_snapshot fragile --tag seven")
        k.ok("%%sandbox --session fragile\nx = 8")
        cid = k.ok(
            "from jupyter_sandbox.sandbox import get_session\nget_session('fragile').container_id"
        ).value
        assert cid is not None
        client().api.kill(cid.strip("'"))
        lost = k.run("%%sandbox --session fragile\nx")
        assert lost.status == "error" and "SessionLost" in lost.text
        assert "'fragile' was lost" in lost.text
        time.sleep(0.5)
        again = k.ok("%%sandbox --session fragile\nx")
        assert "started again from fragile@seven" in again.text
        assert "7" in again.text
        k.ok("%sandbox_stop --all")


def test_unload_ext_removes_the_kernels_sessions(tmp_path: Path) -> None:
    with kernel(tmp_path / "store.sqlite", _env(tmp_path / "s")) as k:
        k.ok("%%sandbox --session short\nx = 1")
        pid = k.ok("import os; os.getpid()").value
        k.ok("%unload_ext jupyter_sandbox")
        k.ok("from jupyter_sandbox.sandbox._pool import settle; settle()")
        owned = f"jupyter-sandbox.owner-pid={pid}"
        assert not _running(owned)
