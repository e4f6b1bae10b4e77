"""Durable runs in JupyterLab: a paused run's record shows its pending call, its run
id and Approve / Reject buttons; a click inserts a cell below that runs the magic in the
notebook's kernel; Reject asks for its reason inline; the answer survives a save and a reopen;
a fork says where it came from. Real JupyterLab in Debian's Chromium, light and dark.

Screenshots go to artifacts/screenshots/ (lab-paused-*, lab-forked-*).
"""

from __future__ import annotations

import ast
from pathlib import Path

import nbformat
import pytest
from _display_samples import forked_record, paused_record
from _durable_cells import GATED_NOTEBOOK
from _jupyterlab import (
    THEMES,
    assert_contrast,
    kernels_load_the_extension,
    notebook_js,
    opened,
    run_cell,
    save,
    set_theme,
    sources,
    wait_executed,
    wait_kernel_ready,
    write_notebook,
)
from _kernels import kernel
from _paths import SCREENSHOTS

from jupyter_sandbox.display import bundle

pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.browser

RUN_ID = paused_record()["run_id"]
PAUSED_CELL = "%%orchestrate\nn = delete(['a.txt', 'b.txt'])"


@pytest.fixture
def saved_records(tmp_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A notebook whose outputs are a paused and a forked record, saved as a kernel left them;
    the kernels Lab starts use a store of their own and load the extension at start (as a
    user's IPython profile would), so a magic a button inserts gives the extension's answer."""
    monkeypatch.setenv("JUPYTER_SANDBOX_STORE", str(tmp_home / "store.sqlite"))
    kernels_load_the_extension(tmp_home, monkeypatch)
    root = tmp_home / "root"
    root.mkdir()
    write_notebook(root / "paused.ipynb", [shown(paused_record()), shown(forked_record())])
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return root


def shown(record: dict, source: str = PAUSED_CELL) -> nbformat.NotebookNode:
    """A code cell whose saved output is ``record``, as the kernel displayed it."""
    cell = nbformat.v4.new_code_cell(source)
    cell.outputs = [nbformat.v4.new_output("display_data", data=bundle(record))]
    return cell


def test_paused_record_buttons_run_the_magic_below(saved_records: Path, tmp_home: Path, browser):
    with opened(browser, saved_records, tmp_home / "home", "paused.ipynb") as (_, page):
        paused = page.locator(".jp-Cell").nth(0).locator(".jp-OutputArea")
        panel = paused.locator(".jsb-approval")
        panel.wait_for(timeout=60_000)
        summary = paused.locator(".jsb-summary").inner_text()
        assert summary.endswith("2 tool calls, 1 waiting for approval")
        heading = panel.locator(".jsb-heading")
        assert panel.get_attribute("aria-labelledby") == heading.get_attribute("id")
        assert f"run {RUN_ID} waits for approval of 1 call:" in panel.inner_text()
        assert panel.locator(".jsb-arg-text").all_inner_texts() == ["['a.txt', 'b.txt']"]
        assert paused.locator(".jsb-call.jsb-waiting .jsb-state").inner_text() == "waiting"
        assert "session cleanup" in paused.locator(".jsb-origin").all_inner_texts()
        forked = page.locator(".jp-Cell").nth(1).locator(".jp-OutputArea")
        assert forked.locator(".jsb-origin").all_inner_texts() == [
            f"forked from run {RUN_ID} at call 2",
            "run b71c0e55a9d2",
        ]
        assert forked.locator("button:not(.jsb-sort):not(.jsb-more)").count() == 0

        # Reject by keyboard: the reason is asked inline, Escape closes it, Enter rejects
        reject = panel.locator("button.jsb-reject")
        assert reject.get_attribute("aria-expanded") == "false"
        panel.locator("button.jsb-approve").focus()
        page.keyboard.press("Tab")
        assert page.evaluate("() => document.activeElement.textContent") == "Reject\u2026"
        page.keyboard.press("Enter")
        field = panel.get_by_label("Reason (optional", exact=False)
        assert field.evaluate("n => n === document.activeElement")
        assert reject.get_attribute("aria-expanded") == "true"
        for theme, name in THEMES:
            set_theme(page, theme)
            measured = assert_contrast(page, errors=False)
            assert {"jsb-approve", "jsb-reject", "jsb-reject-confirm"} <= set(measured)
            paused.screenshot(path=SCREENSHOTS / f"lab-paused-{name}.png")
            forked.screenshot(path=SCREENSHOTS / f"lab-forked-{name}.png")
        page.keyboard.press("Escape")
        assert panel.locator("form.jsb-reason").is_hidden()
        assert page.evaluate("() => document.activeElement.textContent") == "Reject\u2026"
        page.keyboard.press("Enter")
        page.keyboard.insert_text("not these files")
        page.keyboard.press("Enter")

        page.wait_for_function(
            "() => window.jupyterapp.shell.currentWidget.content.widgets.length === 3"
        )
        assert sources(page)[1] == f'%orchestrate_reject --json {RUN_ID} "not these files"'
        wait_executed(page, 1)  # ran in the notebook's kernel (its output is the magic's)
        # the record is a sample: its run is not in this kernel's store, which the magic says
        inserted = page.locator(".jp-Cell").nth(1).locator(".jp-OutputArea").inner_text()
        assert f"no run '{RUN_ID}' in " in inserted and "%orchestrate_pending" in inserted
        answer = panel.locator(".jsb-answer")
        assert answer.get_attribute("role") == "status"
        assert answer.inner_text() == (
            f'Ran %orchestrate_reject --json {RUN_ID} "not these files" in a new cell below: '
            "the run continues there."
        )
        assert panel.locator("button").evaluate_all("bs => bs.every(b => b.disabled)")
        page.screenshot(path=SCREENSHOTS / "lab-paused-answered-dark.png")
        save(page)

    saved = nbformat.read(saved_records / "paused.ipynb", as_version=4)
    kept = saved.cells[0].outputs[0].metadata["jupyter-sandbox"]["answer"]
    assert kept == {
        "code": f'%orchestrate_reject --json {RUN_ID} "not these files"',
        "inserted": True,
    }

    with opened(
        browser, saved_records, tmp_home / "home-reopen", "paused.ipynb", starts_kernel=False
    ) as (_, page):
        panel = page.locator(".jp-Cell").nth(0).locator(".jsb-approval")
        panel.wait_for(timeout=60_000)
        assert panel.locator("button").evaluate_all("bs => bs.every(b => b.disabled)")
        assert "Ran %orchestrate_reject" in panel.locator(".jsb-answer").inner_text()


REASON = "-rf {6*7} $deleted \"it's\" 'q' \\ {} \u2028\t\u2713 why?\\"
"""A reason every parser on the way would once have changed: a leading dash,
IPython's ``{}``/``$`` expansion, unbalanced quotes, a line separator Python splits lines at,
a tab, a trailing ``?`` (IPython's help syntax), backslashes (one at the end)."""


def test_approve_and_reject_continue_the_real_run(tmp_home: Path, browser, monkeypatch):
    """The real thing: the kernel's durable run pauses, the Approve button's cell continues it
    (the tool runs, the value arrives); run again, Reject with a reason reaches the code."""
    monkeypatch.setenv("JUPYTER_SANDBOX_STORE", str(tmp_home / "store.sqlite"))
    root = tmp_home / "root"
    root.mkdir()
    write_notebook(root / "gated.ipynb", GATED_NOTEBOOK)
    with opened(browser, root, tmp_home / "home", "gated.ipynb") as (_, page):
        for index in (0, 1):
            run_cell(page, index)
            wait_executed(page, index)
        cells = page.locator(".jp-Cell")
        panel = cells.nth(1).locator(".jsb-approval")
        panel.wait_for(timeout=60_000)
        run_id = panel.locator(".jsb-heading").inner_text().split()[1]
        digest = panel.locator(".jsb-digest").inner_text()
        assert panel.locator(".jsb-arg-text").all_inner_texts() == ["['a.txt', 'b.txt']"]
        assert cells.nth(1).locator(".jsb-value").count() == 0  # no value line, ever
        cells.nth(1).locator(".jp-OutputArea").screenshot(path=SCREENSHOTS / "lab-paused-real.png")
        panel.locator("button.jsb-approve").click()
        wait_executed(page, 2)
        assert sources(page)[2] == f"%orchestrate_approve {run_id} --expect {digest}"
        continued = cells.nth(2).locator(".jp-OutputArea")
        continued.locator(".jsb-trace.jsb-status-ok").wait_for(timeout=60_000)
        assert continued.locator(".jp-OutputArea-output").last.inner_text().strip() == "2"
        page.screenshot(path=SCREENSHOTS / "lab-approved-real.png")

        run_cell(page, 1)  # again: a new run pauses; reject it with a reason
        wait_executed(page, 1)
        panel = cells.nth(1).locator(".jsb-approval")
        second = panel.locator(".jsb-heading").inner_text().split()[1]
        panel.locator("button.jsb-reject").click()
        panel.get_by_label("Reason (optional", exact=False).fill(REASON)
        panel.locator("button.jsb-reject-confirm").click()
        wait_executed(page, 2)
        assert sources(page)[2].startswith(f"%orchestrate_reject --json {second} ")
        rejected = cells.nth(2).locator(".jp-OutputArea")
        rejected.locator(".jsb-trace.jsb-status-ok").wait_for(timeout=60_000)
        value = rejected.locator(".jp-OutputArea-output").last.inner_text().strip()
        assert ast.literal_eval(value) == f"refused: {REASON}"  # byte for byte
        assert sources(page)[3:] == [f"%orchestrate_approve {run_id} --expect {digest}", "deleted"]
        run_cell(page, 4)  # the host side: only the approved call ran the tool
        wait_executed(page, 4)
        assert (
            cells.nth(4)
            .locator(".jp-OutputArea")
            .inner_text()
            .strip()
            .endswith("['a.txt', 'b.txt']")
        )


def test_html_export_shows_the_magics_and_no_buttons(saved_records: Path, browser) -> None:
    """nbconvert's HTML (no kernel, no extension): the exact magics to run, no dead button,
    readable in both themes."""
    from nbconvert import HTMLExporter

    nb = nbformat.read(saved_records / "paused.ipynb", as_version=4)
    for theme in ("light", "dark"):
        html, _ = HTMLExporter(theme=theme).from_notebook_node(nb)
        path = saved_records / f"export-{theme}.html"
        path.write_text(html)
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.goto(path.as_uri())
        paused = page.locator(".jsb-paused")
        assert f"%orchestrate_approve {RUN_ID}" in paused.inner_text()
        assert f"%orchestrate_reject {RUN_ID} REASON" in paused.inner_text()
        assert page.locator(".jsb button, .jsb input").count() == 0
        assert f"forked from run {RUN_ID} at call 2" in page.locator(".jsb").nth(1).inner_text()
        assert_contrast(page, errors=False)
        page.screenshot(path=SCREENSHOTS / f"export-paused-{theme}.png", full_page=True)
        page.close()


MARKUP = "<img src=x onerror=\"document.title='pwned'\">"


def hostile_notebook(root: Path, marker: Path) -> None:
    """A notebook as an attacker saves it: a paused record whose run id ends
    in IPython's ``{...}`` expansion of a command that writes ``marker``, one with ``$name``,
    and a fork whose origin says the same; all render, none offers a button."""
    forged = f"3f2a9c1d0b7e{{__import__('os').system('id > {marker}')}}"
    cells = []
    for run_id in (forged, "3f2a9c1d0b7e $deleted", "3F2A9C1D0B7E"):
        record = paused_record()
        record["run_id"] = run_id
        cells.append(shown(record))
    record = paused_record()  # a claimed answer whose reason is markup: shown as text
    record["answered"] = {"how": "rejected", "reason": MARKUP, "cell": 1}
    fork = forked_record()
    fork["forked_from"]["run_id"] = forged
    cells += [shown(record, "%%orchestrate\n1"), shown(fork, "%%orchestrate\n1")]
    cells.append(f"import os; os.path.exists({str(marker)!r})")
    write_notebook(root / "hostile.ipynb", cells)


def test_a_hostile_saved_notebook_offers_nothing_to_click(
    saved_records: Path, tmp_home: Path, browser
) -> None:
    """Opened in JupyterLab with a live kernel that has the extension: each forged record shows
    as text with a note and no button, no magic to copy; every button the page has is clicked
    (an old build's Approve ran the command); the marker file never appears and no cell is
    added."""
    marker = tmp_home / "pwned"
    hostile_notebook(saved_records, marker)
    with opened(browser, saved_records, tmp_home / "home-hostile", "hostile.ipynb") as (_, page):
        panels = page.locator(".jsb-approval")
        panels.first.wait_for(timeout=60_000)
        assert panels.count() == 4
        # the attacker's hope: a button to press. Press every one there is (sort headers aside)
        buttons = page.locator(".jsb-output button:not(.jsb-sort):not(.jsb-more)")
        for index in range(buttons.count()):
            if buttons.nth(index).is_enabled():
                buttons.nth(index).click()
        page.wait_for_timeout(5000)  # an inserted cell would have run by now
        check = len(sources(page)) - 1
        run_cell(page, check)
        wait_executed(page, check)
        said = page.locator(".jp-Cell").nth(check).locator(".jp-OutputArea-output").last
        assert said.inner_text().strip() == "False"
        assert not marker.exists(), "clicking in a hostile notebook ran its command"
        assert check == 5, sources(page)  # no cell was inserted
        claimed = page.locator(".jp-Cell").nth(3).locator(".jsb-summary").inner_text()
        assert claimed.endswith(f", rejected in cell [1]: {MARKUP}"), claimed
        assert page.locator(".jsb-output img").count() == 0 and page.title() != "pwned"
        forged = panels.first
        assert "3f2a9c1d0b7e{__import__('os')" in forged.locator(".jsb-heading").inner_text()
        for index in range(3):
            panel = panels.nth(index)
            assert "not one jupyter-sandbox issues" in panel.inner_text()
            assert "%orchestrate_" not in panel.inner_text()
            assert panel.locator("button, input, code").count() == 0
        for theme, name in THEMES:
            set_theme(page, theme)
            assert_contrast(page, errors=False)
            page.locator(".jp-Cell").nth(0).locator(".jp-OutputArea").screenshot(
                path=SCREENSHOTS / f"lab-paused-forged-{name}.png"
            )
    assert not marker.exists()


def answered_panel(page, index: int, said: str) -> None:
    """Cell ``index``'s paused record says ``said`` once, in its headline (which no longer
    says a call waits), and its panel offers no button."""
    output = page.locator(".jp-Cell").nth(index).locator(".jp-OutputArea")
    panel = output.locator(".jsb-approval")
    panel.locator("button").first.wait_for(state="detached", timeout=60_000)
    summary = output.locator(".jsb-summary").inner_text()
    assert summary.endswith(f": {said}") or summary.endswith(f", {said}"), summary
    assert output.inner_text().count(said) == 1, output.inner_text()
    assert panel.locator("button, input, code").count() == 0
    assert "waited for approval of 1 call" in panel.locator(".jsb-heading").inner_text()


def exported(path: Path, index: int) -> str:
    """The text nbconvert's HTML export shows for cell ``index``'s outputs (no extension)."""
    from nbconvert import HTMLExporter

    nb = nbformat.read(path, as_version=4)
    nb.cells = [nb.cells[index]]
    html, _ = HTMLExporter().from_notebook_node(nb)
    return html


def test_an_answered_run_looks_answered_after_a_later_cell_and_a_restart(
    tmp_home: Path, browser, monkeypatch
) -> None:
    """As 06-durable does it: the paused cell is answered by a magic typed in a later cell. In
    the same kernel, and again after a kernel restart (a kernel that never showed the record),
    the paused cell above loses its buttons and says how it was answered, and so does the
    saved notebook's HTML export."""
    monkeypatch.setenv("JUPYTER_SANDBOX_STORE", str(tmp_home / "store.sqlite"))
    root = tmp_home / "root"
    root.mkdir()
    write_notebook(root / "later.ipynb", [*GATED_NOTEBOOK[:2], "", GATED_NOTEBOOK[2]])
    with opened(browser, root, tmp_home / "home", "later.ipynb") as (_, page):

        def pause_and_answer(magic: str) -> int:
            run_cell(page, 1)
            wait_executed(page, 1)
            panel = page.locator(".jp-Cell").nth(1).locator(".jsb-approval")
            panel.locator("button.jsb-approve").wait_for(timeout=60_000)
            run_id = panel.locator(".jsb-heading").inner_text().split()[1]
            notebook_js(
                page,
                "panel.content.model.sharedModel.getCell(2).setSource(arg);",
                magic.format(run_id=run_id),
            )
            run_cell(page, 2)
            wait_executed(page, 2)
            return int(notebook_js(page, "return panel.content.widgets[2].model.executionCount;"))

        run_cell(page, 0)
        wait_executed(page, 0)
        cell = pause_and_answer("%orchestrate_approve {run_id}")
        answered_panel(page, 1, f"approved in cell [{cell}]")
        save(page)
        html = exported(root / "later.ipynb", 1)
        assert f"approved in cell [{cell}]" in html and "waits for approval" not in html

        notebook_js(page, "return panel.sessionContext.restartKernel();")
        wait_kernel_ready(page)
        run_cell(page, 0)
        wait_executed(page, 0)
        # pause, restart again (this kernel never showed it), then reject from a later cell
        run_cell(page, 1)
        wait_executed(page, 1)
        panel = page.locator(".jp-Cell").nth(1).locator(".jsb-approval")
        panel.locator("button.jsb-approve").wait_for(timeout=60_000)
        run_id = panel.locator(".jsb-heading").inner_text().split()[1]
        notebook_js(page, "return panel.sessionContext.restartKernel();")
        wait_kernel_ready(page)
        run_cell(page, 0)
        wait_executed(page, 0)
        notebook_js(
            page,
            "panel.content.model.sharedModel.getCell(2).setSource(arg);",
            f"%orchestrate_reject {run_id} not {{today}}",
        )
        run_cell(page, 2)
        wait_executed(page, 2)
        cell = int(notebook_js(page, "return panel.content.widgets[2].model.executionCount;"))
        answered_panel(page, 1, f"rejected in cell [{cell}]: not {{today}}")
        for theme, name in THEMES:
            set_theme(page, theme)
            assert_contrast(page, errors=False)
            page.locator(".jp-Cell").nth(1).locator(".jp-OutputArea").screenshot(
                path=SCREENSHOTS / f"lab-paused-answered-later-{name}.png"
            )
        save(page)
        html = exported(root / "later.ipynb", 1)
        assert f"rejected in cell [{cell}]: not {{today}}" in html
        assert "waits for approval" not in html

        # pause once more; another kernel (another notebook) approves it: asked, this
        # notebook's kernel says the run is no longer paused
        run_cell(page, 1)
        wait_executed(page, 1)
        panel = page.locator(".jp-Cell").nth(1).locator(".jsb-approval")
        panel.locator("button.jsb-approve").wait_for(timeout=60_000)
        run_id = panel.locator(".jsb-heading").inner_text().split()[1]
        with kernel(tmp_home / "store.sqlite") as other:
            other.ok(GATED_NOTEBOOK[0])
            other.ok(f"%orchestrate_approve {run_id}")
        run_cell(page, 3)
        wait_executed(page, 3)
        answered_panel(page, 1, "continued elsewhere (now ok)")


ALICE = "/home/alice/.ssh"

SEEN = [
    """%load_ext jupyter_sandbox
from jupyter_sandbox import tool
made = []

class Targets:
    def __init__(self, paths):
        self.paths = paths
    def __repr__(self):
        return f"Targets({self.paths!r})"

@tool(approve=True)
def delete(paths: list[str]) -> int:
    made.append(paths)
    return len(paths)

@tool(approve=True)
def send(body: str, to: str) -> int:
    '''Email body to the address to.

    Returns the characters sent.'''
    return len(body)

@tool(approve=True)
def wipe(targets: object) -> str:
    made.append(targets.paths)
    return "wiped"

paths = [f"/data/tmp/cache-{i}" for i in range(12)] + ["/home/alice/.ssh"]
targets = Targets(["/data/old"])""",
    "%%orchestrate --in paths\ndelete(paths)",
    "%%orchestrate\nsend('a very long body ' * 16_000, to='bob')",
    "%%orchestrate --in targets\nwipe(targets)",
    "targets = Targets(['/home/alice'])",
    "made",
]
"""Gated tools, three cells that pause at them (13 paths, a long body, a handle), a later cell
that rebinds the handle's variable, and what the tools really got on the host."""


def test_the_panel_shows_every_argument_and_approve_makes_the_call_shown(
    tmp_home: Path, browser, monkeypatch
):
    """Approving what you see, as a person meets it: the 13th path is on screen (a long
    argument in a box that scrolls, its "show all" reached by Tab and Enter), the digest is
    shown, what the record cannot carry is said in numbers; after `targets` is set to another
    object, Approve on the panel that showed Targets(['/data/old']) wipes /data/old."""
    monkeypatch.setenv("JUPYTER_SANDBOX_STORE", str(tmp_home / "store.sqlite"))
    root = tmp_home / "root"
    root.mkdir()
    write_notebook(root / "seen.ipynb", SEEN)
    with opened(browser, root, tmp_home / "home", "seen.ipynb", viewport=(1300, 1000)) as (_, page):
        for index in range(5):
            run_cell(page, index)
            wait_executed(page, index)
        cells = page.locator(".jp-Cell")
        listed, long, handle = (cells.nth(i).locator(".jsb-approval") for i in (1, 2, 3))
        for panel in (listed, long, handle):
            panel.wait_for(timeout=60_000)

        box = listed.locator(".jsb-arg-text")
        assert box.inner_text() == repr([f"/data/tmp/cache-{i}" for i in range(12)] + [ALICE])
        assert box.evaluate("n => n.scrollHeight <= n.clientHeight + 1")  # all of it in view
        assert listed.locator(".jsb-cut, button.jsb-show-all").count() == 0
        assert len(listed.locator(".jsb-digest").inner_text()) == 16

        box = long.locator(".jsb-arg-text").first
        toggle = long.locator("button.jsb-show-all")
        assert toggle.get_attribute("aria-expanded") == "false"
        assert box.evaluate("n => n.scrollHeight > n.clientHeight")  # collapsed: it scrolls
        long.locator("button.jsb-approve").focus()
        page.keyboard.press("Shift+Tab")  # back: the box of to='bob', then (the cut line is
        page.keyboard.press("Shift+Tab")  # text) the body's toggle
        assert toggle.evaluate("n => n === document.activeElement")
        page.keyboard.press("Shift+Tab")  # the box itself takes focus: a keyboard scrolls it
        assert box.evaluate("n => n === document.activeElement")
        page.keyboard.press("Tab")
        page.keyboard.press("Enter")
        assert toggle.get_attribute("aria-expanded") == "true"
        assert box.evaluate("n => n.scrollHeight <= n.clientHeight + 1")  # all of it in view
        page.keyboard.press("Enter")
        assert toggle.get_attribute("aria-expanded") == "false"
        cut = long.locator(".jsb-cut").inner_text()
        assert "Not shown: the last" in cut and "of its 272,002 characters" in cut
        assert long.locator(".jsb-arg-text").nth(1).inner_text() == "'bob'"
        # each argument named from the signature (body is passed by position), under the
        # docstring's first line; the digest is said in the grey hint, not above the buttons
        assert long.locator(".jsb-arg-name").all_inner_texts() == ["body=", "to="]
        assert long.locator(".jsb-tool-doc").inner_text() == "Email body to the address to."
        for panel in (listed, long, handle):
            assert panel.locator(".jsb-call-head .jsb-digest").count() == 0
            hint = panel.locator(".jsb-hint").inner_text()
            digest = panel.locator(".jsb-hint .jsb-digest").inner_text()
            assert hint.startswith(f"digest {digest}: Approve makes the call only if"), hint
            assert f"--expect {digest}" in hint

        note = handle.locator(".jsb-binding").inner_text()
        assert "notebook variable targets" in note
        assert handle.locator(".jsb-arg-text").inner_text() == "Targets(['/data/old'])"
        for theme, name in THEMES:
            set_theme(page, theme)
            assert_contrast(page, errors=False)
            for label, panel in (("list", listed), ("cut", long), ("handle", handle)):
                panel.screenshot(path=SCREENSHOTS / f"lab-approve-{label}-{name}.png")

        run_id = handle.locator(".jsb-heading").inner_text().split()[1]
        digest = handle.locator(".jsb-digest").inner_text()
        handle.locator("button.jsb-approve").click()
        wait_executed(page, 4)
        assert sources(page)[4] == f"%orchestrate_approve {run_id} --expect {digest}"
        cells.nth(4).locator(".jsb-trace.jsb-status-ok").wait_for(timeout=60_000)
        run_cell(page, 6)  # made: the object the panel showed, not what `targets` is now
        wait_executed(page, 6)
        assert (
            cells.nth(6).locator(".jp-OutputArea").inner_text().strip().endswith("[['/data/old']]")
        )


def test_a_record_with_a_forged_digest_renders_without_buttons(tmp_home: Path, browser) -> None:
    """A saved notebook is untrusted input: a digest that is not 16 hex digits (here one
    that would be code in a magic's line) is put into no magic; the panel has no buttons."""
    root = tmp_home / "root"
    root.mkdir()
    record = paused_record()
    record["pending"][0]["digest"] = "0{__import__('os').system('id')}"
    record["pending"][0]["bindings"] = 7  # other shapes than the kernel writes: drawn anyway
    record["pending"][0]["cut"] = {"0": "<img src=x onerror=alert(1)>"}
    record["pending"][0]["kwargs"] = {"note": "Sly('/data/\u202ehss./ecila/emoh')"}
    write_notebook(root / "forged.ipynb", [shown(record, "%%orchestrate\ndelete(['a.txt'])")])
    with opened(browser, root, tmp_home / "home", "forged.ipynb", starts_kernel=False) as (_, page):
        panel = page.locator(".jsb-approval")
        panel.wait_for(timeout=60_000)
        assert panel.locator("button").count() == 0
        hint = panel.locator(".jsb-hint").inner_text()
        assert "__import__" not in hint and "digest the kernel does not issue" in hint
        # a bidi override an object's own __repr__ returned is shown, not obeyed
        assert panel.locator(".jsb-arg-text").all_inner_texts() == [
            "['a.txt', 'b.txt']",
            "Sly('/data/\\u202ehss./ecila/emoh')",
        ]
        assert panel.locator("img, .jsb-cut").count() == 0
