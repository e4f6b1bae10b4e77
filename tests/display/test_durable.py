"""Durable runs in the static fallbacks: a paused run's HTML and text show its
pending calls, its run id and the exact magics that answer it (no button: a static page has no
kernel a button could reach); a fork says which run and call it came from; a session run names
its session."""

from __future__ import annotations

from _display_samples import forked_record, paused_record, trace_record

from jupyter_sandbox.display import TRACE_MIME, bundle
from jupyter_sandbox.display._format import PENDING_SHOWN


def test_a_paused_run_shows_its_pending_call_run_id_and_the_magics_to_answer_it():
    data = bundle(paused_record())
    assert data[TRACE_MIME]["status"] == "paused"
    for text in (data["text/plain"], data["text/html"].replace("&#x27;", "'")):
        summary = "orchestrate paused in 250 ms: 2 tool calls, 1 waiting for approval"
        assert summary in text
        assert "run 3f2a9c1d0b7e waits for approval of 1 call:" in text
        assert "#2" in text and "delete" in text and "line 3" in text
        assert "paths=" in text and "['a.txt', 'b.txt']" in text
        assert "%orchestrate_approve 3f2a9c1d0b7e" in text
        assert "%orchestrate_reject 3f2a9c1d0b7e REASON" in text
        assert "PermissionError(REASON)" in text
        assert "session cleanup" in text


def test_the_paused_html_has_no_buttons_and_its_waiting_call_is_not_running():
    html = bundle(paused_record())["text/html"]
    assert "<button" not in html and "<input" not in html and "onclick" not in html
    assert html.count('class="jsb-call ') == 2
    assert 'class="jsb-call jsb-waiting"' in html
    assert "waiting for approval since 200 ms" in html  # the bar's text
    assert "still running" not in html
    text = bundle(paused_record())["text/plain"]
    listed, row = [line for line in text.splitlines() if line.startswith("  #2 ")]
    assert listed.endswith("  line 3")  # the pending list, then the table's row
    assert row.split()[1] == "waiting" and "->" not in row  # no result before it ran


def test_several_pending_calls_are_all_listed():
    record = paused_record()
    second = dict(record["pending"][0], call_id=3, args=["['c.txt']"], line=None)
    record["pending"].append(second)
    data = bundle(record)
    assert "waits for approval of 2 calls:" in data["text/plain"]
    assert "2 waiting for approval" in data["text/plain"]
    assert "  #3 delete\n      paths=['c.txt']\n" in data["text/plain"]
    assert data["text/html"].count('class="jsb-pending-call"') == 2


def test_a_fork_says_where_it_came_from_and_its_own_run_id():
    data = bundle(forked_record())
    for text in (data["text/plain"], data["text/html"]):
        assert "forked from run 3f2a9c1d0b7e at call 2" in text
        assert "run b71c0e55a9d2" in text
        assert "%orchestrate_approve" not in text  # not paused: nothing to answer


def test_records_without_durable_keys_read_as_before():
    data = bundle(trace_record())
    text = data["text/plain"]
    assert text.splitlines()[0] == "orchestrate ok in 400 ms: 3 tool calls, 1 failed"
    assert text.splitlines()[1].startswith("  #1 ")  # no origin line
    assert "forked from" not in data["text/html"] and "jsb-paused" not in data["text/html"]


def test_paused_text_is_escaped_in_html():
    record = paused_record()
    record["pending"][0]["args"] = ["'<img src=x onerror=alert(1)>'"]
    record["run_id"] = "<b>x</b>"
    html = bundle(record)["text/html"]
    assert "<img" not in html and "<b>x</b>" not in html
    assert "run &lt;b&gt;x&lt;/b&gt; waits" in html


def test_a_forged_run_id_offers_no_magic_to_run():
    """A saved record whose run id is not one the store issues (an edited notebook) shows its
    text and says why, with no line built from that id to copy into a cell."""
    record = paused_record()
    record["run_id"] = "3f2a9c1d0b7e{__import__('os').system('id')}"
    data = bundle(record)
    for shown in (data["text/html"], data["text/plain"]):
        assert "%orchestrate_approve" not in shown and "%orchestrate_reject" not in shown
        assert "not one jupyter-sandbox issues" in shown


def test_the_samples_fit_the_record_contract():
    """The hand-written durable records have exactly the keys records.py and records.ts declare."""
    from _record_shapes import check_record

    check_record(paused_record())
    check_record(forked_record())


def test_a_live_view_ends_in_the_paused_state(tmp_path):
    """A real durable run that pauses at a gated call: the live view (which saw the gated call
    start) is replaced by the paused record, which lists the call as pending, not running."""
    from _shown import Shown

    from jupyter_sandbox import Store, orchestrate, tool
    from jupyter_sandbox.display import OrchestrateView

    @tool
    def add(x: int, y: int) -> int:
        return x + y

    @tool(approve=True)
    def delete(paths: list[str]) -> int:
        raise AssertionError("a gated call ran without approval")

    view = OrchestrateView(live=True)
    shown = Shown(view)
    code = "n = add(1, 2)\ndelete(['a.txt'])\nn"
    store = Store(tmp_path / "store.sqlite")
    result = orchestrate(code, tools=[add, delete], store=store, on_event=view.on_event)
    assert result.status == "paused" and result.run_id
    assert shown.last(TRACE_MIME)["status"] == "running"  # the live record saw delete start
    view.finish(result.to_record())
    record = shown.last(TRACE_MIME)
    assert record["status"] == "paused" and "live" not in record
    assert [c["tool"] for c in record["pending"]] == ["delete"]
    assert [c["tool"] for c in record["calls"]] == ["add"]
    text, html = shown.last("text/plain"), shown.last("text/html")
    assert text.splitlines()[0].endswith("1 tool call, 1 waiting for approval")
    assert "value:" not in text and "value:" not in html  # none yet
    assert f"%orchestrate_approve {result.run_id}" in text and "running" not in text
    assert "jsb-call jsb-running" not in html
    assert '"jsb-arg-name">paths=</td>' in html and ">[&#x27;a.txt&#x27;]</pre>" in html
    assert {kind for kind, _ in shown.sent[1:]} == {"update"}  # one display, replaced


def test_real_fork_and_session_records_say_where_they_came_from(tmp_path):
    """The engine's own records: a fork names its run and call, a session run its session."""
    from jupyter_sandbox import Store, fork_run, orchestrate, tool

    @tool
    def double(x: int) -> int:
        return 2 * x

    store = Store(tmp_path / "store.sqlite")
    first = orchestrate("a = double(1)\nb = double(a)\nb", tools=[double], store=store)
    fork = fork_run(first.run_id, 0, value=10, store=store, tools=[double])  # a = 10
    assert fork.value == 20
    text = bundle(fork.to_record())["text/plain"]
    assert f"forked from run {first.run_id} at call 0" in text
    assert f"run {fork.run_id}" in text

    kept = orchestrate("x = double(4)", tools=[double], store=store, session="prep")
    html = bundle(kept.to_record())["text/html"]
    assert '<div class="jsb-muted">session prep</div>' in html


def test_an_export_of_a_sealed_call_says_the_magic_with_its_digest():
    """The static views give the same magic the panel's Approve sends: sealed to the call."""
    record = paused_record()
    record["pending"][0]["digest"] = "0123456789abcdef"
    data = bundle(record)
    for text in (data["text/plain"], data["text/html"]):
        assert "%orchestrate_approve 3f2a9c1d0b7e --expect 0123456789abcdef" in text


def test_the_paused_html_says_the_digest_in_its_grey_hint():
    """The digest is named where the magics are explained, in the muted hint under them,
    with what it promises: not a line of its own above them. No digest, no such words."""
    record = paused_record()
    record["pending"][0]["digest"] = "0123456789abcdef"
    html = bundle(record)["text/html"]
    hint = html.split('<div class="jsb-muted">digest ')[1].split("</div>")[0]
    assert hint.startswith("0123456789abcdef: Approve makes the call only if it is still")
    assert hint.endswith("raises PermissionError(REASON) in the code")
    assert html.count("0123456789abcdef") == 2  # the magic's --expect, and the hint
    del record["pending"][0]["digest"]
    assert "digest" not in bundle(record)["text/html"]


def test_a_paused_call_shows_every_argument_by_name_whole_and_what_it_cut_in_words():
    """13 paths, the dangerous one last: each view shows the list whole, labelled by the
    tool's parameter, beside the tool's summary; an argument past `PENDING_SHOWN` is cut to
    its share, the small one beside it is whole, and the cut is said with the magic that
    shows it all."""
    paths = [f"/data/tmp/cache-{i}" for i in range(12)] + ["/home/alice/.ssh"]
    record = paused_record()
    call = record["pending"][0]
    call.update(args=[repr(paths)], kwargs={"force": "True"}, doc="Delete each of paths.")
    data = bundle(record)
    html = data["text/html"].replace("&#x27;", "'")
    assert f"      paths={paths!r}\n      force=True\n" in data["text/plain"]
    assert "  #2 delete  line 3  Delete each of paths.\n" in data["text/plain"]
    assert '<td class="jsb-arg-name">paths=</td><td><pre class="jsb-arg-text"' in html
    assert f">{paths!r}</pre>" in html and "Delete each of paths." in html
    for text in (data["text/plain"], html):
        assert "cut" not in text
    body = "x" * 20_000
    call.update(args=[repr(body)], cut={"0": 90_000})
    data = bundle(record)
    shown = PENDING_SHOWN - len("True")
    note = (
        f"... {90_000 - shown:,} more characters cut (of paths): run "
        "`%orchestrate_pending 3f2a9c1d0b7e --full` to see them all"
    )
    for text in (data["text/plain"], data["text/html"]):
        assert note in text.replace("&#x27;", "'")
        assert "x" * (shown - 1) in text and "x" * (shown + 1) not in text
    assert "      force=True\n" in data["text/plain"]


def test_a_saved_records_argument_names_and_text_are_not_trusted():
    """Names that are no identifiers are not used (the argument is numbered), a length that
    is no number is not believed, and characters that reorder the text are shown escaped."""
    record = paused_record()
    call = record["pending"][0]
    spoofed = "'/home/alice/\u202eharmless'"
    call.update(args=[spoofed, "2"], params=["x=1, y", "n"], cut={"0": "many"})
    text = bundle(record)["text/plain"]
    assert "      1. '/home/alice/\\u202eharmless'\n      n=2\n" in text
    assert "\u202e" not in text and "cut" not in text
