"""Adversarial review of a saved notebook's surfaces, as an outsider meets them: a hostile saved
notebook's renderer -> kernel paths (the ``jupyter_sandbox.run_state`` comm a frontend opens),
magic lines carrying ``{...}``, memory, disk. Each test is a break the review found, written
to fail before its fix, in a real kernel."""

from __future__ import annotations

import ast
import os
import pwd
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from _durable_cells import CELL, GATED, paused_run
from _kernels import Kernel, kernel

from jupyter_sandbox import File, create

RUN_STATE = "jupyter_sandbox.run_state"


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return tmp_path / "store.sqlite"


def ask(k: Kernel, data: Any, wait: float = 10) -> list[tuple[str, Any]]:
    """Open a ``run_state`` comm with ``data`` as a frontend (or a hostile one) would; what
    came back on it (``comm_msg`` data, ``comm_close``) and any stream or error output."""
    comm_id = uuid.uuid4().hex
    content = {"comm_id": comm_id, "target_name": RUN_STATE, "data": data}
    k.client.shell_channel.send(k.client.session.msg("comm_open", content))
    got: list[tuple[str, Any]] = []
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            msg = k.client.get_iopub_msg(timeout=0.5)
        except Exception:  # queue.Empty: nothing yet
            continue
        kind, body = msg["msg_type"], msg["content"]
        if kind in ("stream", "error"):
            got.append((kind, str(body)[:300]))
        elif kind in ("comm_msg", "comm_close") and body.get("comm_id") == comm_id:
            got.append((kind, body.get("data")))
            if kind == "comm_close":
                break
    return got


def test_run_state_answers_any_message_without_echoing_it(store: Path) -> None:
    """A frontend (a hostile notebook's extension, or any client of the kernel) may open the
    comm with anything: each open gets one reply naming the run only when it is a run id,
    and closes; no traceback on the kernel's stderr, and a 1 MB string is not sent back."""
    with kernel(store) as k:
        k.ok(GATED)
        real = paused_run(k.ok(CELL))
        assert ask(k, {"run_id": real}) == [
            ("comm_msg", {"run_id": real, "status": "paused"}),
            ("comm_close", {}),
        ]
        for data in ("text", [1, 2], None, 7, {"run_id": "x" * 1_000_000}, {"run_id": real + "\n"}):
            got = ask(k, data)
            assert got == [
                ("comm_msg", {"run_id": None, "status": None}),
                ("comm_close", {}),
            ], (repr(data)[:40], str(got)[:400])
        k.ok("1 + 1")  # the kernel is fine


def test_sandbox_doctor_expands_nothing(store: Path, tmp_path: Path) -> None:
    """``%sandbox_doctor {...}`` ran the code between the braces (IPython expands a line
    magic's line unless told not to): like the ``%orchestrate_*`` magics, it takes its line
    as written, and the stray word is one usage line."""
    marker = tmp_path / "pwned"
    with kernel(store) as k:
        ran = k.run(f"%sandbox_doctor {{__import__('pathlib').Path('{marker}').touch()}}")
        assert ran.status == "error"
        assert not marker.exists()
        assert k.run("%sandbox_doctor $HOME").status == "error"


def test_a_reason_no_text_can_carry_is_one_usage_line(store: Path) -> None:
    """``--json`` decodes ``"\\ud800"`` to a lone surrogate, which no UTF-8 text (a record, a
    message to the frontend, the store) can carry: it reached the run and failed later as a
    raw ``UnicodeEncodeError`` traceback. It is refused up front, the run still paused."""
    with kernel(store) as k:
        k.ok(GATED)
        run_id = paused_run(k.ok(CELL))
        for line in (
            f'%orchestrate_reject --json {run_id} "bad \\ud800 half"',
            f"%orchestrate_reject {run_id} bad \\ud800 half",  # typed: stays as written
        ):
            ran = k.run(line)
            if "--json" in line:
                shown = ran.text.strip()
                assert ran.status == "error" and shown.startswith("UsageError: "), shown[-400:]
                assert "surrogate" in shown and "\n" not in shown, shown
        assert "UnicodeEncodeError" not in ran.text


def test_a_huge_magic_line_is_refused_at_once(store: Path) -> None:
    """IPython's option parser is quadratic in the line (300,000 characters: 1.7 s; 3 MB:
    minutes, the kernel busy): a line too long for any option is one usage line, at once."""
    with kernel(store) as k:
        for magic in ("%orchestrate_approve 0123456789ab --expect", "%orchestrate_pending"):
            started = time.monotonic()
            ran = k.run(f"{magic} {'a' * 3_000_000}", timeout=60)
            took = time.monotonic() - started
            shown = ran.text.strip()
            assert ran.status == "error" and shown.startswith("UsageError: "), shown[:300]
            assert "characters" in shown and len(shown) < 400, shown[:400]
            assert took < 10, took
        k.ok("1 + 1")


PEER = "jupyter-sandbox-peer"


def as_peer(command: str) -> subprocess.CompletedProcess[str]:
    """``command`` as a second local user (created once per machine, as in test_store_files)."""
    if os.geteuid() != 0:
        pytest.fail("the second user needs root (the README's test command runs as root)")
    try:
        pwd.getpwnam(PEER)
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", PEER], check=True)
    return subprocess.run(
        ["runuser", "-u", PEER, "--", "sh", "-c", command],
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.usefixtures("no_leaked_containers")
def test_a_cached_file_output_a_peer_put_back_is_a_miss(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cached ``File`` output is kept as its path, in a temp folder whose name anyone can
    list in ``/tmp``. Once its kernel is gone the reaper removes that folder; a second local
    user can then make it again, with their own file at the same path, and the next identical
    run was served that file as the sandbox's output (``cached=True``). A path that is not
    ours, privately, is a miss: the run runs again."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    code = "open('/var/outputs/f', 'w').write('genuine')"
    cached = create("peer-cache", code=code, outputs={"f": File}, cache="auto")
    first = cached.execute({})
    path = Path(first.outputs["f"].path)
    assert path.read_text() == "genuine" and not first.cached
    shutil.rmtree(path.parent)  # its kernel died, and the next kernel's reaper removed it
    planted = as_peer(
        f"umask 022; mkdir {path.parent} && printf forged > {path} && chmod 755 {path.parent}"
    )
    assert planted.returncode == 0, planted.stderr
    try:
        again = cached.execute({})
        served = Path(again.outputs["f"].path)
        assert not again.cached, served
        assert served.read_text() == "genuine"
        assert served.stat().st_uid == os.geteuid()
    finally:
        shutil.rmtree(path.parent, ignore_errors=True)


def shaped(pending: Any = None, **fields: Any) -> dict[str, Any]:
    """A paused record as a hostile saved notebook may shape it: its ``pending`` (and any
    other field) replaced by ``pending`` / ``fields`` (wrong types, nulls)."""
    from _display_samples import paused_record

    record = paused_record()
    record["run_id"] = "0123456789ab"
    if pending is not None:
        record["pending"] = pending
    record.update(fields)
    return record


def unsealed() -> dict[str, Any]:
    """The sample's pending call with its digest dropped."""
    return {k: v for k, v in shaped()["pending"][0].items() if k != "digest"}


HOSTILE_SHAPES = [
    shaped("not a list"),
    shaped({"length": 3}),
    shaped([None]),
    shaped([7, "call"]),
    shaped([{"call_id": 1, "tool": "delete", "args": ["'x'"], "bindings": [None, 3]}]),
    shaped([{"call_id": 1, "tool": "delete", "args": "abc", "kwargs": None, "cut": 5}]),
    shaped([{"call_id": 1, "tool": "delete", "args": [None, {"a": 1}], "kwargs": [1]}]),
    shaped(answered={"how": None, "reason": {"a": 1}, "cell": "x"}),
    shaped([{**unsealed(), "args": ["'/tmp/harmless'"]}]),
    shaped([shaped()["pending"][0], shaped()["pending"][0]]),  # two calls, one seal each
]
"""Last two: well formed, but no single digest seals what Approve would approve (dropped by
whoever edited the record to show another call, or two calls listed): Reject only."""


@pytest.mark.browser
def test_a_hostile_record_shape_never_blanks_the_notebook(tmp_home: Path, browser) -> None:
    """A saved record is untrusted in its shape too: ``pending`` a string, an object, nulls in
    it, ``bindings`` holding null, an argument list that is not one. One such record made the
    renderer throw, and JupyterLab opened the notebook with no cells at all, marked changed
    (saving it kept an empty notebook). Now every cell is there, a record the renderer cannot
    read says so and shows its text with nothing to click, and the page logs no error.

    And Approve is sealed or absent: a record edited to show another call (its digest dropped,
    or two calls listed) offered an Approve that sent no ``--expect``, which approves whatever
    the run with that id really waits on."""
    pytest.importorskip("playwright.sync_api")
    import nbformat
    from _jupyterlab import Lab, notebook_js, wait_kernel_ready, write_notebook

    from jupyter_sandbox.display import bundle
    from jupyter_sandbox.records import TRACE_MIME

    root = tmp_home / "root"
    root.mkdir()
    cells = []
    for record in HOSTILE_SHAPES:
        cell = nbformat.v4.new_code_cell("%%orchestrate\n1")
        data = bundle(shaped())
        data[TRACE_MIME] = record
        cell.outputs = [nbformat.v4.new_output("display_data", data=data)]
        cells.append(cell)
    write_notebook(root / "shapes.ipynb", cells)
    lab = Lab(root, tmp_home / "home-shapes")
    errors: list[str] = []
    try:
        page = browser.new_page(viewport={"width": 1300, "height": 900})
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        lab.open(page, "shapes.ipynb")
        wait_kernel_ready(page)
        page.wait_for_timeout(3000)
        assert notebook_js(page, "return panel.content.widgets.length;") == len(HOSTILE_SHAPES)
        drawn = page.locator(".jsb-output")
        assert drawn.count() == len(HOSTILE_SHAPES)
        unreadable = page.locator(".jsb-unreadable")
        assert unreadable.count() >= 4  # the string, the object, [null], bindings [null, 3]
        assert "not in a shape jupyter-sandbox writes" in unreadable.first.inner_text()
        assert "waiting for approval" in unreadable.first.inner_text()  # its text
        assert unreadable.locator("button, input, code").count() == 0
        assert not [e for e in errors if "TypeError" in e], errors
        # no record here seals one call with a digest: none offers Approve, the last two
        # (well formed) offer Reject and say why there is no Approve
        assert page.locator("button.jsb-approve").count() == 0
        for index in (-2, -1):
            panel = page.locator(".jsb-approval").nth(index)
            assert panel.locator("button.jsb-reject").count() == 1
            assert "offers no Approve" in (panel.text_content() or "")
    finally:
        lab.stop()


COUNT_ASKS = """
import comm
_manager = comm.get_comm_manager()
_target = _manager.targets["jupyter_sandbox.run_state"]
asks = []
def _counted(c, msg):
    asks.append(msg["content"]["data"].get("run_id"))
    _target(c, msg)
_manager.register_target("jupyter_sandbox.run_state", _counted)
"""


@pytest.mark.browser
def test_forged_paused_records_are_asked_about_once(
    tmp_home: Path, browser, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each unanswered paused record in the notebook was asked about (a comm, a store look-up)
    after every cell a person ran: a hostile notebook of 120 forged records (well formed run
    ids no store has) cost the kernel 120 look-ups per cell, for ever. A run id the kernel said
    it does not know is not asked again, and at most 50 are asked per cell."""
    pytest.importorskip("playwright.sync_api")
    import nbformat
    from _jupyterlab import (
        kernels_load_the_extension,
        notebook_js,
        opened,
        run_cell,
        wait_cell_done,
        write_notebook,
    )

    from jupyter_sandbox.display import bundle

    monkeypatch.setenv("JUPYTER_SANDBOX_STORE", str(tmp_home / "store.sqlite"))
    kernels_load_the_extension(tmp_home, monkeypatch)
    root = tmp_home / "root"
    root.mkdir()
    forged, runs = 120, 5
    cells = []
    for index in range(forged):
        cell = nbformat.v4.new_code_cell("%%orchestrate\n1")
        data = bundle(shaped(run_id=f"{index:012x}"))
        cell.outputs = [nbformat.v4.new_output("display_data", data=data)]
        cells.append(cell)
    cells += [COUNT_ASKS, *["1"] * runs, "len(asks), len(set(asks))"]
    write_notebook(root / "many.ipynb", cells)
    with opened(browser, root, tmp_home / "home-many", "many.ipynb") as (_, page):
        page.wait_for_timeout(3000)
        for index in range(forged, forged + runs + 1):
            run_cell(page, index)
            wait_cell_done(page, index)
            page.wait_for_timeout(1500)  # the look after the cell
        last = forged + runs + 1
        run_cell(page, last)
        wait_cell_done(page, last)
        said = notebook_js(
            page,
            "const c = panel.content.widgets[arg];"
            " return c.model.outputs.get(0).data['text/plain'];",
            last,
        )
        asks, distinct = ast.literal_eval(said)
        assert asks == distinct, (asks, distinct)  # none asked twice
        assert asks <= forged
