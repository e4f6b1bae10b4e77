"""What a person reads in an ``%%orchestrate`` cell, in a real kernel: the value
once, the output in the order it was printed, an interrupt or a failure said in its own words
with the way to go on, and a big run in one line."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _display_samples import call, interrupted_record, trace_record
from _kernels import Kernel, Ran, kernel

from jupyter_sandbox.display import TRACE_MIME, bundle

FAIL = """
@tool
def fail(reason: str) -> int:
    raise ValueError(reason)

@tool(approve=True)
def remove(name: str) -> str:
    return f"removed {name}"
"""


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kernel]:
    with kernel(tmp_path_factory.mktemp("store") / "store.sqlite") as k:
        k.ok(FAIL)
        yield k


def displayed(ran: Ran) -> list[dict[str, Any]]:
    return [m for m in ran.outputs if m["msg_type"] == "display_data"]


def final(ran: Ran, mime: str) -> str:
    """The cell's display as it ended (the live one replaced in place), as ``mime``."""
    shown = [m for m in ran.outputs if m["msg_type"] in ("display_data", "update_display_data")]
    return str(shown[-1]["content"]["data"][mime])


def test_the_value_is_the_cells_result_only(lab: Kernel) -> None:
    ran = lab.ok("%%orchestrate\n[add(i, i) for i in range(1, 6)]")
    assert ran.value == "[2, 4, 6, 8, 10]"
    (record,) = ran.records(TRACE_MIME)[-1:]
    for text in (final(ran, "text/plain"), final(ran, "text/html")):
        assert "[2, 4, 6, 8, 10]" not in text and "value:" not in text
    assert record["summary"]["headline"].endswith(": 5 tool calls")  # no "0 failed"


@pytest.mark.parametrize(
    ("code", "value", "printed"),
    [("print('hi')", None, "hi\n"), ("1 + 1", "2", ""), ("x = 3", None, "")],
)
def test_a_cell_with_no_tool_call_reads_like_a_plain_cell(lab, code, value, printed) -> None:
    ran = lab.ok(f"%%orchestrate\n{code}")
    assert displayed(ran) == []  # no "0 tool calls", no run id
    assert ran.value == value
    streams = "".join(m["content"]["text"] for m in ran.outputs if m["msg_type"] == "stream")
    assert streams == printed


def test_the_header_comes_first_and_prints_show_where_they_happened(lab: Kernel) -> None:
    ran = lab.ok(
        "%%orchestrate\nprint('a')\nadd(1, 2)\nprint('b')\nprint('c')\nprint('d')\n"
        "add(3, 4)\nprint('e')"
    )
    kinds = [
        m["content"]["text"] if m["msg_type"] == "stream" else m["msg_type"]
        for m in ran.outputs
        if m["msg_type"] in ("stream", "display_data")
    ]
    assert kinds[0] == "display_data"  # the trace's header, then what was printed
    assert "".join(kinds[1:]) == "a\nb\nc\nd\ne\n"
    record = ran.records(TRACE_MIME)[-1]
    assert [c["printed"] for c in record["calls"]] == [1, 4] and record["printed"] == 5
    assert [c.get("printed_first") for c in record["calls"]] == [["a"], ["b", "c"]]
    summary = record["summary"]
    assert summary["marks"] == {
        "0": "printed: a",
        "1": "printed: b\n         c\n         \u2026 1 more line in the cell's output",
    }
    assert "after" not in summary
    for mime in ("text/plain", "text/html"):
        said = final(ran, mime)
        assert said.index("orchestrate ok") < said.index("printed: a") < said.index("printed: b")
        assert "output line" not in said and "after the last call" not in said
    text = final(ran, "text/plain")
    assert text.index("printed: a") < text.index("#0 ") < text.index("printed: b")
    assert text.index("printed: b") < text.index("#1 ")
    assert "printed: e" not in text  # after the last call: the output right below says it


def test_a_failed_cell_says_how_to_go_on_once(lab: Kernel) -> None:
    ran = lab.run("%%orchestrate\nadd(1, 2)\nadd(2, 3)\nfail('boom')")
    assert ran.status == "error"
    record = ran.records(TRACE_MIME)[-1]
    assert record["summary"]["headline"].endswith(": 3 tool calls, 1 failed")
    assert "%%orchestrate --resume" in record["advice"]
    assert "2 calls that finished are answered from the last run" in record["advice"]
    text = final(ran, "text/plain")
    assert text.count("--resume") == 1 and text.rstrip().endswith(record["advice"])
    resumed = lab.run("%%orchestrate --resume\nadd(1, 2)\nadd(2, 3)\nfail('boom')")
    calls = resumed.records(TRACE_MIME)[-1]["calls"]
    assert [c["replayed"] for c in calls] == [True, True, False]


def test_a_failure_before_any_call_advises_nothing(lab: Kernel) -> None:
    ran = lab.run("%%orchestrate\nfail('first')")
    assert "advice" not in ran.records(TRACE_MIME)[-1]


def test_an_interrupted_run_abandons_its_call_and_fails_none() -> None:
    """The words for a run Ctrl-C stopped: ``interrupted after``, the unfinished call
    ``abandoned`` (its own colour class, not ``error``), nothing counted as failed."""
    data = bundle(interrupted_record())
    headline = data[TRACE_MIME]["summary"]["headline"]
    assert headline == "orchestrate interrupted after 400 ms: 2 tool calls, 1 abandoned"
    assert "failed" not in data["text/plain"] and "error" not in data["text/plain"]
    assert 'class="jsb-call jsb-abandoned"' in data["text/html"]
    assert "jsb-interrupted" in data["text/html"]


def test_a_long_trace_says_in_one_line_what_it_lists() -> None:
    calls = [call(i, "add", i * 0.01, i * 0.01 + 0.005) for i in range(1, 201)]
    calls[150].update(error="ValueError: bad", result=None)  # a kept failure
    record = {**trace_record(1), "calls": calls, "dropped": 100, "duration": 3.0}
    record["tools"] = [
        {"tool": "add", "calls": 300, "errors": 1, "total": 1.5, "p50": 0.005, "p95": 0.005}
    ]
    note = bundle(record)[TRACE_MIME]["summary"]["kept"]
    assert note == (
        "showing 200 of 300 calls: the first 100, the last 100 and every failure "
        "(the counts cover all 300)"
    )
    record["tools"][0]["errors"] = 40  # 39 failures among the calls not kept
    assert "1 failures between them" in bundle(record)[TRACE_MIME]["summary"]["kept"]


def test_saved_words_are_kept_by_an_older_reader(tmp_path: Path) -> None:
    """A record without ``summary`` (saved before records carried it) is worded on the spot,
    the same words a new one carries."""
    old = trace_record()
    assert "summary" not in old
    assert bundle(old)["text/plain"] == bundle(bundle(old)[TRACE_MIME])["text/plain"]


def test_a_10000_call_cell_saves_within_the_budget(tmp_path: Path) -> None:
    """10,000 calls, one in 37 failing through 40 frames with a long message, printing every
    100th: the saved cell (record, HTML, text and its stream output, as nbformat writes it)
    stays within `SAVED_BUDGET_BYTES`, and its one line says what the record lists."""
    import json

    import nbformat
    from nbclient import NotebookClient

    from jupyter_sandbox.display._format import SAVED_BUDGET_BYTES

    setup = (
        "%load_ext jupyter_sandbox\nfrom jupyter_sandbox import tool\n"
        "def deep(k):\n    if k == 0:\n        raise ValueError('bad ' + 'x' * 300)\n"
        "    return deep(k - 1)\n"
        "@tool\ndef add(x: int, y: int) -> int:\n    if x % 37 == 0:\n        deep(40)\n"
        "    return x + y"
    )
    loop = (
        "%%orchestrate --no-store\nt = 0\nfor i in range(10000):\n    try:\n"
        "        t += add(i, 1)\n    except ValueError:\n        pass\n"
        "    if i % 100 == 0:\n        print(i)\nt"
    )
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(setup), nbformat.v4.new_code_cell(loop)]
    NotebookClient(nb, timeout=600, kernel_name="python3").execute()
    path = tmp_path / "big.ipynb"
    nbformat.write(nb, path)
    cell = nbformat.read(path, as_version=4).cells[1]
    assert len(json.dumps(cell, indent=1)) <= SAVED_BUDGET_BYTES
    (shown,) = [o for o in cell.outputs if o.output_type == "display_data"]
    record = shown.data[TRACE_MIME]
    assert record["summary"]["kept"].startswith("showing 300 of 10,000 calls: the first 100")
    assert record["summary"]["headline"].endswith("10,000 tool calls, 271 failed")


def test_pending_runs_name_a_cell_a_person_can_find(lab: Kernel) -> None:
    """``%orchestrate_pending`` named a run's cell by the store's key (``cell 5fb841cc-d42``);
    it says the cell's prompt number (when this kernel ran it) and its first line."""
    paused = lab.ok("%%orchestrate\n# tidy up\nadd(1, 2)\nremove('scratch.txt')")
    run_id = paused.records(TRACE_MIME)[-1]["run_id"]
    (line,) = [ln for ln in lab.ok("%orchestrate_pending").text.splitlines() if run_id in ln]
    assert f"{run_id}  cell [{paused.execution_count}] `add(1, 2)`  #1 remove(" in line
    assert lab.run(f"%orchestrate_reject {run_id}").status == "error"  # PermissionError


def test_after_a_restart_a_pending_run_is_named_by_the_prompt_its_cell_had(
    tmp_path: Path,
) -> None:
    """A kernel started after a restart names a run paused by the one before by the prompt
    number the saved notebook shows (kept in the store), not by a bare ``cell``."""
    store = tmp_path / "store.sqlite"
    with kernel(store) as before:
        before.ok(FAIL)
        before.ok("1 + 1")
        paused = before.ok("%%orchestrate\n# tidy up\nadd(1, 2)\nremove('scratch.txt')")
        run_id = paused.records(TRACE_MIME)[-1]["run_id"]
    with kernel(store) as after:  # the same store, a new kernel: its prompts start again
        (line,) = [ln for ln in after.ok("%orchestrate_pending").text.splitlines() if run_id in ln]
        assert paused.execution_count > 2
        assert f"{run_id}  cell [{paused.execution_count}] `add(1, 2)`  #1 remove(" in line
