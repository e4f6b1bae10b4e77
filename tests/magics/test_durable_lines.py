"""What reaches an ``%orchestrate_*`` magic's line is data, never code,
in a real kernel, as a person or a hostile saved notebook meets it:

- a run id is exactly what the store issues; ``{...}`` and ``$name`` are never expanded, so a
  forged run id cannot run code (IPython expands them in line-magic arguments by default);
- a Reject reason arrives byte for byte, typed or encoded by the button (``--json``);
- an unbalanced quote in any magic's options, or a ``--value`` nested 100,000 deep, is one
  line of ours (a `UsageError`), not a raw ``ValueError`` / ``RecursionError``.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from _durable_cells import CELL, GATED, made, paused_run
from _kernels import Kernel, kernel

from jupyter_sandbox.records import TRACE_MIME


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return tmp_path / "store.sqlite"


def one_usage_line(ran: object, line: str) -> str:
    """The cell failed with one `UsageError` line (IPython prints it alone); that line."""
    shown = ran.text.strip()  # type: ignore[attr-defined]
    assert ran.status == "error", (line[:80], shown)  # type: ignore[attr-defined]
    assert shown.startswith("UsageError: ") and "\n" not in shown, (line[:80], shown)
    assert "Traceback" not in shown
    return str(shown)


def test_a_forged_run_id_runs_no_code(store: Path, tmp_path: Path) -> None:
    """The issue's exploit by hand and as the old button built it: each magic refuses the run
    id in one line, and the command between the braces never runs."""
    marker = tmp_path / "pwned"
    payload = f"{{__import__('pathlib').Path('{marker}').touch()}}"  # no space: one word
    with kernel(store) as k:
        k.ok(GATED)
        real = paused_run(k.ok(CELL))
        assert "not a run id" in one_usage_line(k.run(f"%orchestrate_approve 0{payload}"), "")
        for line in (
            f"%orchestrate_approve 0{payload}",
            f"%orchestrate_approve {real}{payload}",
            f"%orchestrate_reject {real}{payload} why",
            f'%orchestrate_reject --json {real}{payload} "why"',
            f"%orchestrate_reject {real} {payload}",  # a reason is data too (rejects `real`)
            f"%orchestrate_fork {real}{payload} 0 --value 1",
            f"%orchestrate_fork {real} 0 --value {payload}",
            f"%orchestrate_reset {payload}",
            f"%orchestrate_pending {payload}",
            f"%orchestrate_sessions {payload}",
            "%orchestrate_approve $made",
        ):
            ran = k.run(line)
            if line == f"%orchestrate_reject {real} {payload}":
                assert ran.status == "ok", ran.text
                assert ast.literal_eval(ran.value or "") == (2, f"refused: {payload}")
                continue
            one_usage_line(ran, line)
        assert not marker.exists(), "a forged record field ran code"
        assert made(k) == "[('count', 2)]"  # nothing was approved


REASONS = [
    ("{6*7} is the answer", "{6*7} is the answer"),
    ("$made and \\back\\slash\\", "$made and \\back\\slash\\"),
    ("-rf / --now -h", "-rf / --now -h"),
    ('"it\'s" quoted', '"it\'s" quoted'),  # inner quotes are the reason's own
    ("'it is quoted'", "it is quoted"),  # one pair of outer quotes is dropped, as --value does
    ('"  keeps spaces  "', "  keeps spaces  "),
    ("why?", "why?"),  # IPython would read a trailing ? as a help request (%pinfo why)
    ("is it {ok}??", "is it {ok}??"),
    ("a # not a comment; %not !a shell", "a # not a comment; %not !a shell"),
]


def test_a_typed_reject_reason_arrives_as_typed(store: Path) -> None:
    with kernel(store) as k:
        k.ok(GATED)
        for typed, arrives in REASONS:
            run_id = paused_run(k.ok(CELL))
            rejected = k.ok(f"%orchestrate_reject {run_id} {typed}")
            assert ast.literal_eval(rejected.value or "") == (2, f"refused: {arrives}"), typed
        assert ast.literal_eval(made(k)) == [("count", 2)] * len(REASONS)  # none deleted


def test_the_buttons_encoded_reason_arrives_byte_for_byte(store: Path) -> None:
    """What the Reject button writes (``--json RUN_ID "..."``, see approval.ts): newlines,
    quotes, braces, dollars, backslashes, a leading dash and the line separators IPython would
    split a cell at, all as typed."""
    reason = "-x {6*7} $made \"q\" 's' \\ back\\\nline two\u2028\u0085 end\\"
    literal = json.dumps(reason, ensure_ascii=False).replace("\u2028", "\\u2028")
    literal = literal.replace("\u0085", "\\u0085")
    with kernel(store) as k:
        k.ok(GATED)
        run_id = paused_run(k.ok(CELL))
        rejected = k.ok(f"%orchestrate_reject --json {run_id} {literal}")
        assert ast.literal_eval(rejected.value or "") == (2, f"refused: {reason}")
        record = rejected.records(TRACE_MIME)[-1]
        assert record["status"] == "ok"
        for bad in ("not json", "3", '"unclosed'):
            again = paused_run(k.ok(CELL))
            one_usage_line(k.run(f"%orchestrate_reject --json {again} {bad}"), bad)


UNBALANCED = [
    '%%sandbox --in "x\nprint(1)',
    "%%orchestrate --in 'x\n1",
    '%%codemode --tools "x\nadd two numbers',
    "%orchestrate_sessions '",
    '%orchestrate_reset "a',
    "%orchestrate_pending '",
    "%orchestrate_approve '",
    '%orchestrate_approve "3f2a9c1d0b7e',
    "%orchestrate_reject '",
    "%orchestrate_fork 3f2a9c1d0b7e 0 --value '1",
]


def test_bad_input_is_one_line_of_ours(store: Path) -> None:
    with kernel(store) as k:
        k.ok(GATED)
        run_id = k.ok("%%orchestrate\ncount(1)").records(TRACE_MIME)[-1]["run_id"]
        for line in UNBALANCED:
            shown = one_usage_line(k.run(line), line)
            assert "ValueError" not in shown, shown
        deep = f"%orchestrate_fork {run_id} 0 --value " + "[" * 100_000
        shown = one_usage_line(k.run(deep), "--value [[[[...")
        assert "RecursionError" not in shown and len(shown) < 300, shown[:300]
        assert k.ok("1 + 1").value == "2"  # and the kernel goes on


def test_no_orchestrate_magic_expands_variables(store: Path) -> None:
    """IPython's ``{}``/``$`` expansion is off (``no_var_expand``) on every line magic of ours."""
    with kernel(store) as k:
        shown = k.ok(
            "line = get_ipython().magics_manager.magics['line']\n"
            "[n for n in sorted(line) if n.startswith('orchestrate_')"
            " and not getattr(line[n], '_ipython_magic_no_var_expand', False)]"
        )
        assert shown.value == "[]"


def test_a_new_kernel_refuses_the_forged_id_too(tmp_path: Path) -> None:
    """After a restart (a fresh kernel, no run of its own), the same: one line, no code run."""
    marker = tmp_path / "pwned"
    k = Kernel(tmp_path / "store.sqlite")
    try:
        k.ok("%load_ext jupyter_sandbox")
        ran = k.run(f"%orchestrate_approve 0{{__import__('os').system('touch {marker}')}}")
        one_usage_line(ran, "approve")
        assert not marker.exists()
    finally:
        k.close()


def updates_of(ran: object) -> list[dict]:
    """The display updates a cell sent (``update_display_data``): bundles, in order."""
    return [
        msg["content"]["data"]
        for msg in ran.outputs  # type: ignore[attr-defined]
        if msg["msg_type"] == "update_display_data"
    ]


def test_an_answered_run_is_redrawn_answered_in_the_cell_that_paused(store: Path) -> None:
    """Answered in the same kernel: ``%orchestrate_approve`` / ``_reject`` in a later cell
    redraws the paused record above as answered (``update_display``), so JupyterLab drops its
    buttons and the HTML and text an export keeps say how it was answered."""
    with kernel(store) as k:
        k.ok(GATED)
        for line, note in (
            ("%orchestrate_approve {run_id}", "approved in cell [{cell}]"),
            (
                "%orchestrate_reject {run_id} not {{today}}",
                "rejected in cell [{cell}]: not {{today}}",
            ),
        ):
            run_id = paused_run(k.ok(CELL))
            ran = k.ok(line.format(run_id=run_id))
            cell = ran.execution_count  # the prompt number JupyterLab shows for the line
            (update,) = [u for u in updates_of(ran) if u[TRACE_MIME].get("status") == "paused"]
            record = update[TRACE_MIME]
            assert record["run_id"] == run_id and record["answered"]["cell"] == cell
            said = note.format(cell=cell)
            assert record["summary"]["headline"].endswith(f", {said}")
            for text in (update["text/html"], update["text/plain"]):
                assert text.count(said) == 1, text  # in the headline, once
                assert "waits for approval" not in text and "waiting for" not in text, text
                assert "%orchestrate_approve" not in text
            continued = [r for r in ran.records(TRACE_MIME) if r["status"] != "paused"][-1]
            assert continued["status"] == "ok"
            assert continued["answer"]["how"] == record["answered"]["how"]


def test_a_notebook_run_without_jupyterlab_exports_the_answer(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nbclient (papermill, CI) runs the paused cell and then the approving line; the saved
    notebook's paused output is the answered one (nbclient applies the kernel's display update),
    so nbconvert's HTML of it says "approved in cell [3]" and offers no magic to run."""
    import nbformat
    from nbclient import NotebookClient
    from nbconvert import HTMLExporter

    monkeypatch.setenv("JUPYTER_SANDBOX_STORE", str(store))
    approve = "from jupyter_sandbox import Store\nrun_id = Store({!r}).runs()[0].run_id\n"
    approve += "get_ipython().run_line_magic('orchestrate_approve', run_id)"
    nb = nbformat.v4.new_notebook()
    sources = ["%load_ext jupyter_sandbox\n" + GATED, CELL, approve.format(str(store))]
    nb.cells = [nbformat.v4.new_code_cell(source) for source in sources]
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    record = nb.cells[1].outputs[-1]["data"][TRACE_MIME]
    assert record["status"] == "paused" and record["answered"]["how"] == "approved"
    assert record["answered"]["cell"] == nb.cells[2].execution_count == 3
    html, _ = HTMLExporter().from_notebook_node(nb)
    assert html.count("approved in cell [3]") == 1 and "waits for approval" not in html
    paused_part = html.split("jsb-paused")[-1]
    assert "%orchestrate_approve" not in paused_part
