"""Details a person meets in a cell: previews that read like ``Out[]``,
``%%codemode`` attempts as code and ``--insert`` that does not stack copies, and
containers that never outlive their kernel or their documented life."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker.errors
import nbformat
import pytest
from _jupyterlab import CHROMIUM, Lab, notebook_js, sources, wait_kernel_ready
from _jupyterlab import run_cell_waiting as run_cell
from _paths import SCREENSHOTS
from _processes import watchdog_of
from IPython.utils.capture import capture_output
from jupyter_client import BlockingKernelClient
from jupyter_client.manager import start_new_kernel

from jupyter_sandbox import ScriptedLLM, create, orchestrate
from jupyter_sandbox._shared._preview import ELLIPSIS, preview
from jupyter_sandbox.display import RUN_MIME, TRACE_MIME, _html
from jupyter_sandbox.sandbox import _pool, _watchdog
from jupyter_sandbox.sandbox._client import owner_labels
from jupyter_sandbox.sandbox._record import _describe

playwright = pytest.importorskip("playwright.sync_api")

SPACED = "two  spaces,   three and\ta tab"
"""A string whose runs of spaces HTML would collapse unless told not to."""


def unsorted() -> dict[str, object]:
    """Keys and set members out of sorted order: a sorting preview would reorder them."""
    return {"zeta": 1, "alpha": {"y": 2, "b": 3}, "mid": {30, 2, 100}, "text": SPACED}


# --- previews are repr ---------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        unsorted(),
        {3, 1, 2},
        frozenset({"b", "a", "c"}),
        [{"z": 1, "a": 2}, ({"y": 0, "x": 1},)],
        SPACED,
        {},
        set(),
    ],
)
def test_a_short_preview_is_exactly_repr(value: object) -> None:
    assert preview(value) == repr(value)


def test_a_long_preview_is_cut_with_an_ellipsis_and_keeps_order() -> None:
    value = {f"key{n:03d}": n for n in range(500, 0, -1)}  # descending: sorting would show key001
    shown = preview(value)
    assert shown.startswith("{'key500': 500, 'key499': 499, ")
    assert ELLIPSIS in shown and len(shown) <= 200
    assert preview(list(range(1000)), 20) == "[0, 1, 2, 3, 4, 5, " + ELLIPSIS


def test_the_value_line_of_a_run_reads_like_out() -> None:
    """The record's ``value:`` is what ``Out[]`` shows for the cell's value (a real Monty run)."""

    def fetch() -> dict[str, object]:
        return unsorted()

    result = orchestrate("fetch()", tools=[fetch])
    assert result.value == unsorted()
    assert result.to_record()["value"] == repr(unsorted())
    assert list(result.value) == ["zeta", "alpha", "mid", "text"]


def records() -> tuple[dict[str, object], dict[str, object]]:
    """A trace record from a real run and a run record's value table, both holding `SPACED`."""

    def echo(text: str) -> str:
        return text

    trace = orchestrate(f"echo({SPACED!r})\n{{'b': echo('b  b'), 'a': 1}}", tools=[echo])
    run = {
        "version": 1,
        "kind": "sandbox",
        "name": "demo",
        "image": "jupyter-sandbox/base:bookworm",
        "status": "ok",
        "inputs": _describe({"text": SPACED}, {}, set()),
        "outputs": _describe({"mapping": unsorted()}, {}, set()),
        "duration": 0.5,
        "stdout": "",
        "stderr": "",
    }
    return trace.to_record(), run


@pytest.fixture
def browser() -> Iterator[object]:
    with playwright.sync_playwright() as p:
        instance = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield instance
        instance.close()


def test_the_html_export_keeps_spaces_and_order(browser) -> None:
    """What a browser shows of the static export (nbconvert's HTML): ``innerText`` applies the
    page's CSS, so collapsed spaces would show here."""
    trace, run = records()
    page = browser.new_page()
    page.set_content(_html.render(trace) + _html.render(run))
    assert "value:" not in page.locator(".jsb").first.inner_text()  # the cell's Out says it
    shown = page.locator(".jsb td code").all_inner_texts()
    assert repr(SPACED) in shown and repr(unsorted()) in shown
    assert "echo('two  spaces,   three and\\ta tab')" in page.locator(".jsb-calls").inner_text()


def in_both_themes(page: Any) -> Iterator[str]:
    """Switch JupyterLab to its light, then its dark theme; yields "light", "dark" once each
    theme is drawn (switching reloads the theme's CSS behind a splash screen)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for theme, name in (("JupyterLab Light", "light"), ("JupyterLab Dark", "dark")):
        notebook_js(
            page, "return app.commands.execute('apputils:change-theme', arg);", {"theme": theme}
        )
        page.wait_for_function(
            "(t) => document.body.dataset.jpThemeName === t", arg=theme, timeout=120_000
        )
        page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=120_000)
        yield name


def test_jupyterlab_renders_previews_as_repr(browser) -> None:
    """The saved records in JupyterLab (our MIME renderer, no kernel): the value tables and
    call signatures show repr's spaces and order, light and dark (the cell's value is its
    ``Out``, not repeated by the trace)."""
    trace, run = records()
    with tempfile.TemporaryDirectory(prefix="jupyter-sandbox-lab-") as tmp:
        root = Path(tmp) / "root"
        root.mkdir()
        nb = nbformat.v4.new_notebook()
        nb.cells = [
            nbformat.v4.new_code_cell(
                "%%orchestrate\n...",
                outputs=[nbformat.v4.new_output("display_data", data={TRACE_MIME: trace})],
            ),
            nbformat.v4.new_code_cell(
                "%%sandbox\n...",
                outputs=[nbformat.v4.new_output("display_data", data={RUN_MIME: run})],
            ),
        ]
        nbformat.write(nb, root / "previews.ipynb")
        lab = Lab(root, Path(tmp) / "home", starts_kernel=False)
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 700})
            lab.open(page, "previews.ipynb")
            page.wait_for_selector(".jsb-run .jsb-preview", timeout=120_000)
            assert page.locator(".jsb-value").count() == 0  # the value is the cell's Out, once
            shown = page.locator(".jsb-run .jsb-preview").all_inner_texts()
            assert shown == [repr(SPACED), repr(unsorted())]
            assert repr(SPACED) in page.locator(".jsb-trace .jsb-signature").first.inner_text()
            for name in in_both_themes(page):
                page.screenshot(path=SCREENSHOTS / f"lab-previews-{name}.png")
        finally:
            lab.stop()


# --- no container outlives its kernel, or its documented life ------------------------


def containers_of(engine: Any, pid: int) -> list[dict[str, Any]]:
    """Rows of the run containers labelled with owner ``pid`` (the list call only: containers
    may vanish meanwhile), except those the engine is removing already."""
    labels = ["jupyter-sandbox.kind=run", f"jupyter-sandbox.owner-pid={pid}"]
    rows = engine.api.containers(all=True, filters={"label": labels})
    return [row for row in rows if row["State"] != "removing"]


def wait_until(condition: Callable[[], bool], what: str) -> None:
    """Poll ``condition``; a generous bound only keeps a broken build from hanging the suite."""
    deadline = time.monotonic() + 120
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.2)


def spare_after_a_run(engine: Any, timeout: float = 10) -> dict[str, Any]:
    """Run a sandbox in this process; the spare started for the next run (its row)."""
    create("spare", code="print('hi')", timeout=timeout).run()
    _pool.quiesce()  # the used container is gone, the spare is up
    (row,) = containers_of(engine, os.getpid())
    return row


@pytest.mark.usefixtures("no_leaked_containers")
def test_a_spare_lives_no_longer_than_documented(docker_engine) -> None:
    """The README's numbers: a spare waits up to 5 min, and its own timer (the last resort
    should kernel and watchdog both be gone: the script's ``sleep`` argument) ends it 5 min +
    the run's timeout + 30 s after start."""
    row = spare_after_a_run(docker_engine, timeout=10)
    command = docker_engine.api.inspect_container(row["Id"])["Config"]["Cmd"]
    assert command[:2] == ["sh", "-c"]
    assert 'sleep "$1"' in command[2]
    assert command[4] == str(5 * 60 + 10 + 30)
    assert _pool._IDLE == 5 * 60


@pytest.mark.usefixtures("no_leaked_containers")
def test_a_spare_nobody_takes_is_removed_when_its_wait_is_over(docker_engine, monkeypatch) -> None:
    monkeypatch.setattr(_pool, "_IDLE", 3.0)  # the README's 5 min, shortened for the test
    row = spare_after_a_run(docker_engine)
    wait_until(lambda: not containers_of(docker_engine, os.getpid()), "the idle spare went")
    assert not _pool.current().spares

    def gone() -> bool:  # "removing" first (the list above skips it), then gone (CI saw both)
        try:
            docker_engine.api.inspect_container(row["Id"])
        except docker.errors.NotFound:
            return True
        return False

    wait_until(gone, "the idle spare's removal ended")


@pytest.mark.usefixtures("no_leaked_containers")
def test_the_watchdog_removes_its_owners_containers_when_the_pipe_closes(docker_engine) -> None:
    """This process plays the kernel and stays alive: no reaper removes a live owner's
    containers, so only the watchdog can have removed them."""
    spare_after_a_run(docker_engine)
    read, write = os.pipe()
    watchdog = subprocess.Popen(
        _watchdog.command(owner_labels()), stdin=read, stderr=subprocess.PIPE, text=True
    )
    os.close(read)
    assert containers_of(docker_engine, os.getpid())
    os.close(write)  # what the operating system does when the kernel dies
    _, errors = watchdog.communicate(timeout=120)
    assert watchdog.returncode == 0, errors
    assert not containers_of(docker_engine, os.getpid())
    _pool.settle()  # forget the spare the watchdog removed


def kernel_pid(client: Any) -> int:
    """The kernel's own pid, asked from inside it (a reply: no wait for iopub to connect)."""
    reply = client.execute_interactive(
        "import os", user_expressions={"pid": "os.getpid()"}, timeout=120
    )
    return int(reply["content"]["user_expressions"]["pid"]["data"]["text/plain"])


def run_a_sandbox_cell(client: Any, engine: Any) -> int:
    """Load the extension and run a ``%%sandbox`` cell in the kernel; its pid, once the spare
    for the next run is up."""
    pid = kernel_pid(client)
    client.execute_interactive("%load_ext jupyter_sandbox", timeout=60)
    reply = client.execute_interactive("%%sandbox\nprint('hi')", timeout=300)
    assert reply["content"]["status"] == "ok"
    wait_until(lambda: containers_of(engine, pid), "the kernel's spare started")
    return pid


def test_a_killed_kernels_containers_go_without_another_load(docker_engine) -> None:
    """The kernel's watchdog removes them. (Another session loading the extension meanwhile would
    reap them too: the watchdog's own test above is the one no reaper can pass.)"""
    manager, client = start_new_kernel(kernel_name="python3")
    try:
        pid = run_a_sandbox_cell(client, docker_engine)
        watchdog = watchdog_of(pid)
        assert watchdog is not None
        assert os.getsid(watchdog) == watchdog  # a session of its own: no Ctrl-C, no killpg
        held = {fd.name: os.readlink(fd) for fd in Path(f"/proc/{watchdog}/fd").iterdir()}
        assert held["0"].startswith("pipe:") and held["1"] == held["2"] == os.devnull
        assert set(held) == {"0", "1", "2"}, held  # nothing else of the kernel's
        os.kill(pid, signal.SIGKILL)  # no atexit handler runs; no kernel loads the extension
        wait_until(lambda: not containers_of(docker_engine, pid), "the dead kernel's spare went")
        wait_until(lambda: watchdog_of(pid) is None, "the watchdog saw the kernel die and ended")
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def test_jupyterlab_stopped_with_sigterm_leaves_no_container(docker_engine) -> None:
    with tempfile.TemporaryDirectory(prefix="jupyter-sandbox-lab-") as tmp:
        root, home = Path(tmp) / "root", Path(tmp) / "home"
        root.mkdir()
        lab = Lab(root, home)
        try:
            request = urllib.request.Request(
                f"{lab.url}/api/kernels",
                data=json.dumps({"name": "python3"}).encode(),
                headers={"Authorization": f"token {lab.token}"},
                method="POST",
            )
            with urllib.request.urlopen(request, timeout=60) as response:
                kernel_id = json.loads(response.read())["id"]
            client = BlockingKernelClient(
                connection_file=str(home / "runtime" / f"kernel-{kernel_id}.json")
            )
            client.load_connection_file()
            client.start_channels()
            # iopub connected before the first execute: else its idle can be missed (a slow
            # joiner) and `execute_interactive` waits out its timeout (CI, 1 run in 4)
            client.wait_for_ready(timeout=120)
            try:
                pid = run_a_sandbox_cell(client, docker_engine)
                assert watchdog_of(pid) is not None
            finally:
                client.stop_channels()
        finally:
            lab.stop()  # SIGTERM: the server shuts its kernels down
        wait_until(lambda: not containers_of(docker_engine, pid), "the kernel's spare went")
        wait_until(lambda: watchdog_of(pid) is None, "the watchdog saw the kernel end and ended")


# --- %%codemode attempts are code; --insert does not stack copies ---------------------

TOOL = "from jupyter_sandbox import tool\n@tool\ndef double(x: int) -> int:\n    return 2 * x"
LOOP = "total = 0\nfor n in [1, 2]:\n    total += double(n)\ntotal"


def reply(code: str) -> str:
    return f"Here you go:\n```python\n{code}\n```"


def run_codemode(shell: Any, replies: list[str], task: str) -> tuple[Any, list[Any], str]:
    """Run a ``%%codemode --insert`` cell with a scripted model: (result, displays, stdout)."""
    shell.user_ns["model"] = ScriptedLLM(replies)
    shell.rl_next_input = None
    with capture_output() as captured:
        result = shell.run_cell(f"%%codemode --llm model --tools double --insert\n{task}")
    return result, captured.outputs, captured.stdout


def test_attempts_are_markdown_code_blocks(shell) -> None:
    """A fenced ``python`` block (highlighted by every frontend) and no HTML, which JupyterLab
    would prefer and draw unhighlighted."""
    assert shell.run_cell(TOOL).success
    result, shown, _ = run_codemode(shell, [reply("double('x')"), reply(LOOP)], "Sum doubles.")
    assert result.result == 6
    attempts = [o.data for o in shown if "Attempt" in o.data.get("text/plain", "")]
    assert [a["text/markdown"].split("\n", 2)[2] for a in attempts[::2]] == [
        "```python\ndouble('x')\n```",
        f"```python\n{LOOP}\n```",
    ]
    assert not any("text/html" in a for a in attempts)


def test_rerunning_an_insert_cell_does_not_stack_copies(shell) -> None:
    assert shell.run_cell(TOOL).success
    task = "Sum the doubles of 1 and 2 (a task only this test asks)."
    run_codemode(shell, [reply(LOOP)], task)
    inserted = shell.rl_next_input
    header, mark, body = inserted.split("\n", 2)
    assert header == "%%orchestrate --tools double" and body == LOOP
    assert mark.startswith("# inserted by %%codemode, cell ")
    assert shell.run_cell(inserted).result == 6  # the inserted cell runs as is, mark and all

    _, _, printed = run_codemode(shell, [reply(LOOP)], task)  # the same code again
    assert shell.rl_next_input is None
    assert f"--insert: not inserted again: the cell below marked `{mark}` has this code" in printed

    _, _, printed = run_codemode(shell, [reply("double(3)")], task)  # new code
    assert shell.rl_next_input == f"{header}\n{mark}\ndouble(3)"
    assert f"in place of the older cell marked `{mark}`" in printed

    run_codemode(shell, [reply(LOOP)], task.replace("only", "just"))  # another cell: its own mark
    assert shell.rl_next_input.split("\n")[1] != mark


def test_jupyterlab_highlights_the_attempts(shell, browser) -> None:
    """The attempts a real run displayed, saved and opened in JupyterLab (no kernel): the
    code's keywords are coloured apart from its plain text, light and dark."""
    assert shell.run_cell(TOOL).success
    _, shown, _ = run_codemode(shell, [reply(LOOP)], "Sum doubles for the browser.")
    outputs = [nbformat.v4.new_output("display_data", data=o.data) for o in shown]
    with tempfile.TemporaryDirectory(prefix="jupyter-sandbox-lab-") as tmp:
        root = Path(tmp) / "root"
        root.mkdir()
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell("%%codemode --llm model\nSum.", outputs=outputs)]
        nbformat.write(nb, root / "codemode.ipynb")
        lab = Lab(root, Path(tmp) / "home", starts_kernel=False)
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 600})
            lab.open(page, "codemode.ipynb")
            code = page.locator(".jp-OutputArea .jp-RenderedMarkdown pre code").first
            code.wait_for(timeout=120_000)
            for name in in_both_themes(page):
                assert code.inner_text() == LOOP
                colours = code.evaluate(
                    "(c) => Object.fromEntries([...c.querySelectorAll('span')].map("
                    "s => [s.textContent, getComputedStyle(s).color]).concat("
                    "[['(plain text)', getComputedStyle(c).color]]))"
                )
                assert colours["for"] != colours["(plain text)"], colours
                page.screenshot(path=SCREENSHOTS / f"lab-codemode-attempt-{name}.png")
        finally:
            lab.stop()


SETUP_CELL = """%load_ext jupyter_sandbox
from jupyter_sandbox import ScriptedLLM, tool
@tool
def double(x: int) -> int:
    return 2 * x
fence = "`" * 3
model = ScriptedLLM([f"{fence}python\\ndouble({n})\\n{fence}" for n in (1, 2, 2)])"""
CODEMODE_CELL = "%%codemode --llm model --tools double --insert\nDouble a number."


def test_jupyterlab_rerun_replaces_the_inserted_cell(browser) -> None:
    """A real kernel in JupyterLab: the second run's new code takes the first copy's place,
    the third run (the same code again) inserts nothing and says so."""
    with tempfile.TemporaryDirectory(prefix="jupyter-sandbox-lab-") as tmp:
        root = Path(tmp) / "root"
        root.mkdir()
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell(s) for s in (SETUP_CELL, CODEMODE_CELL)]
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
        nbformat.write(nb, root / "insert.ipynb")
        lab = Lab(root, Path(tmp) / "home")
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 800})
            lab.open(page, "insert.ipynb")
            wait_kernel_ready(page)
            run_cell(page, 0)
            run_cell(page, 1)
            first = sources(page)
            assert len(first) == 3 and first[2].endswith("\ndouble(1)")
            mark = first[2].split("\n")[1]
            run_cell(page, 1)  # new code: it replaces the copy below
            page.wait_for_function(
                "() => window.jupyterapp.shell.currentWidget.content.widgets.length === 3",
                timeout=30_000,
            )
            assert sources(page)[2] == first[2].replace("double(1)", "double(2)")
            run_cell(page, 1)  # the same code again: nothing inserted, one line says so
            assert len(sources(page)) == 3
            said = page.locator(".jp-Cell").nth(1).locator(".jp-OutputArea").inner_text()
            assert f"not inserted again: the cell below marked `{mark}`" in said
            for name in in_both_themes(page):
                page.screenshot(path=SCREENSHOTS / f"lab-codemode-insert-{name}.png")
        finally:
            lab.stop()
