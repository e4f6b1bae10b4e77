"""Small formatting helpers shared by the text and HTML renderers, so both say the same thing."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import cast

from jupyter_sandbox._shared._bounds import KEEP_EDGE, SUMMARY_MIN_CALLS, ToolStats
from jupyter_sandbox._shared._grammar import is_digest, is_run_id
from jupyter_sandbox._shared._text import ANSI
from jupyter_sandbox.records import (
    Answered,
    BuildRecord,
    CallRecord,
    FileLink,
    Record,
    RequestLogRecord,
    RequestRow,
    RunRecord,
    RunSummary,
    ToolRow,
    TraceRecord,
    TraceSummary,
    TypedValue,
)

ROWS_SHOWN = 40
"""Calls listed in text/HTML fallbacks (an export, a viewer without our extension): the first
ones, in call order; the labextension draws every call the record keeps. With the record's own
bounds (`_bounds`) this keeps a saved cell under `SAVED_BUDGET_BYTES` however many calls it made."""

SAVED_BUDGET_BYTES = 256 * 1024
"""Bytes a saved ``%%orchestrate`` cell's display may take in the ``.ipynb`` (record, HTML
and text as nbformat writes them), for any number of calls: the budget
``tests/display/test_reading.py`` checks with a 10,000-call cell."""

TRACEBACK_SHOWN = 1000
"""Characters of a call's host traceback the HTML fallback shows (its end; the record keeps
more)."""

_TRACE_ID = re.compile(r"[0-9a-f]{32}")
"""An OpenTelemetry trace id as the kernel writes it (``TRACE_ID`` in format.ts)."""

LOG_TAIL = 40
"""Build log lines a failed build shows in text: the failing step's end; the record has all."""


def seconds(value: float | None) -> str:
    """A duration people read at a glance: ``850 µs``, ``12 ms``, ``1.23 s``, ``2m05s``."""
    if value is None:
        return "-"
    if value < 1e-3:
        return f"{value * 1e6:.0f} µs"
    if value < 1:
        return f"{value * 1e3:.0f} ms"
    if value < 60:
        return f"{value:.2f} s"
    minutes, rest = divmod(value, 60)
    return f"{minutes:.0f}m{rest:02.0f}s"


def size_text(size: int) -> str:
    """Bytes people read at a glance: ``512 B``, ``12.3 KB``, ``4.0 MB``, ``1.2 GB`` (powers
    of 1024, as JupyterLab's file browser counts them; ``sizeText`` in format.ts)."""
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError  # the loop returns at GB


def link_size(link: FileLink) -> str:
    """A linked output's size in words; ``?`` for a saved record's size that is no number."""
    size = link.get("size")
    return size_text(size) if isinstance(size, int) else "?"


def file_label(value: TypedValue) -> str:
    """An output as a person reads it: a linked file's name, size and path beside the
    notebook, else its preview (and the note saying why it was not linked)."""
    link = value.get("link")
    if link:
        return f"{link.get('name')} ({link_size(link)}) at {link.get('path')}"
    note = value.get("note")
    return f"{value.get('preview')} ({note})" if note else str(value.get("preview"))


def plain(text: str) -> str:
    """``text`` without ANSI colour codes (docker build logs and tools emit them)."""
    return ANSI.sub("", text)


def clip(text: str, limit: int = 80) -> str:
    """One line of at most ``limit`` characters: previews must never blow up a table row.

    Line breaks become one space; spaces within a line stay (a preview is ``repr`` text, where
    ``'a  b'`` is not ``'a b'``)."""
    flat = " ".join(line.strip() for line in plain(text).splitlines() if line.strip())
    return flat if len(flat) <= limit else flat[: limit - 1] + "\u2026"


def call_signature(call: CallRecord) -> str:
    """``tool(arg, key=value)`` from a call record's previews."""
    parts = [*call.get("args", []), *(f"{k}={v}" for k, v in call.get("kwargs", {}).items())]
    return clip(f"{call.get('tool', '?')}({', '.join(parts)})", 120)


PENDING_SHOWN = 4_000
"""Characters of a paused call's arguments, all together, its text and HTML views show: a
list of a few dozen paths whole, so an approver reads every one Approve passes on (a view cut
to a table row's width showed the first of 13 paths, not the last). Past it each argument is
cut to its share (`shares`: the small ones never are) and the view says in words how much it
left out and the magic that shows all of it."""

HIDING = re.compile("[\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]")
"""Characters that reorder or hide the text around them (bidirectional controls, zero-width
marks): an object's own ``__repr__`` may return them to make a path read as another one
(``HIDING`` in approval.ts)."""


def visible(text: str) -> str:
    """``text`` with `HIDING` characters as their escapes (as ``repr`` writes them in a
    string) and without ANSI codes: what an approver reads is what the call gets."""
    return HIDING.sub(lambda found: f"\\u{ord(found.group()):04x}", plain(text))


def shares(lengths: list[int], budget: int) -> list[int]:
    """How much of each of ``lengths`` fits in ``budget`` together: all of each when they
    fit, else the longest cut to one level and the shorter ones whole (a ``force=True``
    beside a huge list is always shown)."""
    left, waiting = budget, len(lengths)
    level = budget
    for length in sorted(lengths):
        if length * waiting > left:
            level = left // waiting
            break
        left -= length
        waiting -= 1
    return [min(length, level) for length in lengths]


@dataclass(frozen=True)
class Argument:
    """One argument of a paused call as its views show it."""

    label: str
    """``to=``: the parameter's name (from the tool's signature for a positional one), or
    ``1.`` for a positional one whose name the record does not say."""
    text: str
    """Its repr, whole up to its share of `PENDING_SHOWN`."""
    left_out: int
    """Characters of its repr not in ``text`` (cut by the view, or already by the record)."""


def pending_arguments(call: CallRecord) -> list[Argument]:
    """A paused call's arguments, each labelled and shown whole up to its share of
    `PENDING_SHOWN`. A saved record is untrusted: names that are no identifiers and lengths
    that are no numbers are not used."""
    args = call.get("args")
    kwargs = call.get("kwargs")
    positional = [str(a) for a in args] if isinstance(args, list) else []
    named = {str(k): str(v) for k, v in kwargs.items()} if isinstance(kwargs, dict) else {}
    params = call.get("params")
    names = [str(n) for n in params] if isinstance(params, list) else []
    labels = [
        f"{names[i]}=" if i < len(names) and names[i].isidentifier() else f"{i + 1}."
        for i in range(len(positional))
    ]
    keys = [str(i) for i in range(len(positional))] + list(named)
    texts = [visible(t) for t in [*positional, *named.values()]]
    cut = call.get("cut")
    whole = cut if isinstance(cut, dict) else {}
    fits = shares([len(t) for t in texts], PENDING_SHOWN)
    shown = []
    for label, key, text, fit in zip(
        [*labels, *(f"{k}=" for k in named)], keys, texts, fits, strict=True
    ):
        length = whole.get(key)
        length = length if isinstance(length, int) and length > len(text) else len(text)
        shown.append(Argument(label, text[:fit], length - fit))
    return shown


def tool_summary(call: CallRecord) -> str:
    """The first line of the tool's docstring the record carries (empty without one)."""
    doc = call.get("doc")
    return clip(visible(doc), 200) if isinstance(doc, str) else ""


def cut_note(arguments: list[Argument], run_id: object) -> str:
    """What a paused call's view left out, in words, and the magic that shows all of it;
    empty when every argument is whole."""
    left = sum(argument.left_out for argument in arguments)
    if not left:
        return ""
    which = ", ".join(
        a.label[:-1] if a.label.endswith("=") else f"argument {a.label[:-1]}"
        for a in arguments
        if a.left_out
    )
    run = f"{run_id} " if is_run_id(run_id) else ""
    return (
        f"... {left:,} more characters cut (of {which}): run `%orchestrate_pending {run}--full`"
        " to see them all"
    )


def call_status(call: CallRecord) -> str:
    """``queued``, ``running``, ``ok``, ``error`` or ``abandoned``: the rule of
    `ToolCall.status`, on a record (records from before ``queued`` existed count as running),
    in a person's words: a call the run stopped before it finished (``cancelled``: an interrupt,
    or the run failing meanwhile) was abandoned, it did not fail."""
    if call.get("end") is None:
        return "queued" if "queued" in call and call["queued"] is None else "running"
    if call.get("cancelled"):
        return "abandoned"
    return "error" if call.get("error") is not None else "ok"


def row_status(call: CallRecord, record: TraceRecord) -> str:
    """A call's status as a trace row shows it: in a paused run nothing unfinished is running,
    it ``waits`` until the run is approved or rejected and continues."""
    status = call_status(call)
    paused = record.get("status") == "paused"
    return "waiting" if paused and status in ("running", "queued") else status


def call_duration(call: CallRecord) -> float | None:
    """The tool's own time: a sandbox call's wait for a concurrency slot is not in it."""
    end = call.get("end")
    return None if end is None else end - call.get("start", 0.0) - (call.get("queued") or 0.0)


def build_state(build: BuildRecord) -> str:
    """``cached``, ``built in 12.30 s (6 steps)`` or ``failed after 3.00 s at step 4 of 6``: the
    build's final word. A cached image ran no step, so it has no count to show. A live record's
    build that is still going: ``building: step 3 of 6``."""
    if build.get("running"):
        return f"building: step {len(build.get('steps', []))} of {build_steps(build)}"
    if build.get("error"):
        failed = f"failed after {seconds(build.get('seconds'))}"
        steps = build_steps(build)
        return f"{failed} at step {len(build.get('steps', []))} of {steps}" if steps else failed
    if build.get("cached"):
        return "cached"
    steps = build_steps(build)
    built = f"built in {seconds(build.get('seconds'))}"
    return f"{built} ({steps} steps)" if steps else built


def build_steps(build: BuildRecord) -> int:
    """Docker's step count (``m`` of ``Step n/m``); records from before it was kept: the steps
    reached."""
    return int(build.get("total_steps") or len(build.get("steps", [])))


def build_log_tail(build: BuildRecord) -> tuple[list[str], int]:
    """The last `LOG_TAIL` lines of a build log, and how many lines came before them."""
    lines = plain(str(build.get("log") or "")).splitlines()
    return lines[-LOG_TAIL:], max(len(lines) - LOG_TAIL, 0)


def orchestrate_summary(record: TraceRecord) -> str:
    """The headline: ``orchestrate ok in 400 ms: 3 tool calls, 1 failed`` (an orchestrator
    call's is titled by the call, ``sum_squares(1) ok in 16 ms: ...``). Only what happened
    is counted (no "0 failed", no calls for a run that made none); an interrupted run stopped
    ``after`` its time and its unfinished calls were abandoned, not failed."""
    if record.get("live"):  # a running cell's record (display._live) says its own headline
        return str(record["live"]["summary"])
    status = str(record.get("status", "?"))
    when = "after" if status == "interrupted" else "in"
    caller = record.get("caller")
    title = clip(str(caller.get("call")), 120) if caller else "orchestrate"
    head = f"{title} {status} {when} {seconds(record.get('duration'))}"
    total = call_count(record)
    counts = [f"{total:,} tool {'call' if total == 1 else 'calls'}"] if total else []
    errors = sum(row["errors"] for row in tool_rows(record))
    abandoned = sum(call_status(call) == "abandoned" for call in record.get("calls", []))
    counts += [f"{errors:,} failed"] if errors else []
    counts += [f"{abandoned:,} abandoned"] if abandoned else []
    if status == "paused":
        answered = record.get("answered")
        waiting = f"{len(record.get('pending', []))} waiting for approval"
        counts.append(answer_note(answered) if answered else waiting)
    headline = f"{head}: {', '.join(counts)}" if counts else head
    return headline + (caller_note(record) or "")


def caller_note(record: TraceRecord) -> str | None:
    """What an orchestrator call's headline adds when the cell called it again: the record is
    the first call's only (``show=None``), and a person must not read its one tool call as the
    whole cell's work: `` · first of 5 calls in this cell (show=True shows each)``."""
    caller = record.get("caller")
    calls = caller.get("calls") if caller else None
    if not isinstance(calls, int) or calls < 2:
        return None
    return f" \u00b7 first of {calls:,} calls in this cell (show=True shows each)"


def says_nothing(record: TraceRecord) -> bool:
    """Whether a finished run's record has nothing to add to the cell: no tool call, no pause,
    no fork, session or OpenTelemetry trace, and no error it shows (a raised one is the
    cell's error output). Such a cell reads like any other: its output and its value."""
    quiet_end = record.get("status") == "ok" or bool(record.get("raised"))
    told = ("pending", "forked_from", "session", "answer", "answered", "advice", "trace_id")
    return (
        not record.get("live")
        and call_count(record) == 0
        and quiet_end
        and not any(record.get(key) for key in told)
    )


def shown_value(record: TraceRecord) -> str | None:
    """The value a trace shows: none for a paused run, which has none yet (the cell that
    continues it shows the value)."""
    return None if record.get("status") == "paused" else record.get("value")


def origin_notes(record: TraceRecord) -> list[str]:
    """Where a run's state came from, said under its headline: the run and call a fork branched
    off, the session whose variables it kept; and the OpenTelemetry trace its spans are in."""
    notes = []
    forked = record.get("forked_from")
    if forked:
        notes.append(f"forked from run {forked.get('run_id')} at call {forked.get('call')}")
    if record.get("session"):
        notes.append(f"session {record.get('session')}")
    made = call_count(record) > 0  # a run with no call has nothing to fork or resume
    if record.get("run_id") and made and record.get("status") != "paused":  # paused: below
        notes.append(f"run {record.get('run_id')}")
    traced = trace_note(record)
    if traced:
        notes.append(traced)
    return notes


def trace_note(record: Record) -> str | None:
    """The note naming a traced run's OpenTelemetry trace (``traceNote`` in format.ts); None
    without one, or with one the kernel does not write (a saved notebook may say anything)."""
    trace_id = record.get("trace_id")
    if isinstance(trace_id, str) and _TRACE_ID.fullmatch(trace_id):
        return f"OpenTelemetry trace {trace_id}"
    return None


def paused_heading(record: TraceRecord) -> str:
    """What a paused run waits for (waited for, once answered), in one line."""
    waiting = len(record.get("pending", []))
    noun = "call" if waiting == 1 else "calls"
    waits = "waited" if record.get("answered") else "waits"
    return f"run {record.get('run_id', '?')} {waits} for approval of {waiting} {noun}:"


def answer_note(answered: Answered) -> str:
    """How a paused run was answered, in a few words (``answerNote`` in approval.ts):
    ``approved in cell [4]``, ``rejected in cell [4]: REASON``, ``continued elsewhere``."""
    if answered.get("how") == "elsewhere":
        status = answered.get("status")
        return "continued elsewhere" + (f" (now {status})" if status else "")
    where = f" in cell [{answered['cell']}]" if answered.get("cell") is not None else ""
    if answered.get("how") == "approved":
        return f"approved{where}"
    reason = answered.get("reason")
    return f"rejected{where}" + (f": {reason}" if reason else " (no reason given)")


def line_of(call: CallRecord) -> str:
    """``line 4``: where in the cell a call was made (empty when Monty did not say)."""
    line = call.get("line")
    return "" if line is None else f"line {line}"


def approval_magics(record: TraceRecord) -> tuple[str, str] | None:
    """The two lines that answer a paused run from any cell, in this kernel or a later one:
    approve, and reject (``REASON`` optional; the code sees ``PermissionError(REASON)``).
    None when the record's run id is not one the store issues (an edited notebook): no line
    built from it is offered to run. Approve names the call's digest when the record has one
    (made only if it is still the call shown), and only if it is one the kernel issues."""
    run_id = record.get("run_id")
    if not is_run_id(run_id):
        return None
    digest = sealed_digest(record)
    sealed = f" --expect {digest}" if digest is not None else ""
    return f"%orchestrate_approve {run_id}{sealed}", f"%orchestrate_reject {run_id} REASON"


INVALID_RUN_NOTE = (
    "this record's run id is not one jupyter-sandbox issues (12 hex digits): the notebook was "
    "edited, so it offers no button and no magic to run"
)
"""What a paused record with a forged run id says instead of its magics (``INVALID_NOTE`` in
labextension/src/approval.ts)."""


REJECT_NOTE = "REASON is optional: the rejected call raises PermissionError(REASON) in the code"
"""How a rejection reaches the code, said beside the magics."""

SEALED_NOTE = "Approve makes the call only if it is still the one this digest seals"
"""What the digest a paused run's hint names promises (``SEALED`` in
labextension/src/approval.ts)."""


def sealed_digest(record: TraceRecord) -> str | None:
    """The digest approving ``record``'s run sends (its one pending call's, if the kernel
    issues it), said in the hint beside the magics; None when approving it sends none."""
    pending = record.get("pending", [])
    digest = pending[0].get("digest") if len(pending) == 1 else None
    return digest if is_digest(digest) else None


def stream_tails(record: Record) -> list[tuple[str, str]]:
    """``(label, text)`` of each stream a record keeps, for a run nested in a trace (a sandbox
    used as a tool): its output never streamed into the cell, so the record's tail is the only
    copy. The label says when the tail is not all of it."""
    tails = []
    streams = (
        ("stdout", record.get("stdout"), record.get("stdout_chars")),
        ("stderr", record.get("stderr"), record.get("stderr_chars")),
    )
    for name, kept, chars in streams:
        text = str(kept or "")
        size = chars if isinstance(chars, int) and chars else len(text)  # a trace has no stderr
        if text:
            cut = f" (last {len(text):,} of {size:,} characters)" if size > len(text) else ""
            tails.append((name + cut, text))
    return tails


def call_count(record: TraceRecord) -> int:
    """Every call the run made: those the record lists plus those it dropped (see `_bounds`); a
    live record lists the latest calls and counts them all."""
    if record.get("live"):
        return int(record["live"].get("calls") or 0)
    return len(record.get("calls", [])) + int(record.get("dropped") or 0)


def tool_rows(record: TraceRecord) -> list[ToolRow]:
    """The per-tool summary (calls, errors, total, p50, p95) over every call: the record's own,
    or computed from its calls for a record saved before records kept one."""
    if record.get("tools") is not None:
        return list(record["tools"])
    stats = ToolStats()
    for call in record.get("calls", []):
        stats.add(str(call.get("tool")), call_duration(call), call_status(call) == "error")
    return stats.rows()


TOOL_COLUMNS = ("tool", "calls", "errors", "total", "p50", "p95")


def tool_cells(row: ToolRow) -> list[str]:
    """A per-tool summary row as every renderer words it, in `TOOL_COLUMNS` order."""
    return [
        str(row.get("tool")),
        f"{row.get('calls', 0):,}",
        f"{row.get('errors', 0):,}",
        seconds(row.get("total")),
        seconds(row.get("p50")),
        seconds(row.get("p95")),
    ]


def shows_tools(record: TraceRecord) -> bool:
    """Whether a renderer shows the per-tool summary: a short trace's table says it all."""
    return call_count(record) >= SUMMARY_MIN_CALLS


def dropped_note(record: TraceRecord) -> str | None:
    """Which calls a bounded record lists, in one line a person reads at a glance (None when
    it lists them all): ``showing 200 of 300 calls: the first 100, the last 100 and every
    failure``."""
    dropped = int(record.get("dropped") or 0)
    if not dropped:
        return None
    calls = record.get("calls", [])
    total = call_count(record)
    unfinished = sum(row["errors"] for row in tool_rows(record)) + sum(
        call_status(call) == "abandoned" for call in calls
    )
    kept_bad = sum(call_status(call) not in ("ok", "running", "queued") for call in calls)
    bad = "every failure" if kept_bad >= unfinished else f"{kept_bad:,} failures between them"
    return (
        f"showing {len(calls):,} of {total:,} calls: the first {KEEP_EDGE}, the last "
        f"{KEEP_EDGE} and {bad} (the counts cover all {total:,})"
    )


def output_marks(record: TraceRecord) -> dict[str, str]:
    """By call id, what the cell printed just before that call (``printed_first`` on a cell's
    record), as the trace shows it above the call: ``printed: loading 3 files``, a second line
    under it, and how many more the cell's output holds. A record saved before
    records kept those lines has none: its line numbers said nothing a person could read."""
    marks: dict[str, str] = {}
    for call in record.get("calls", []):
        first = call.get("printed_first")
        if not first:
            continue
        more = int(call.get("printed_since") or 0) - len(first)
        noun = "line" if more == 1 else "lines"
        lines = [*first, *[f"\u2026 {more:,} more {noun} in the cell's output"] * (more > 0)]
        marks[str(call.get("call_id"))] = "printed: " + "\n         ".join(lines)
    return marks


def trace_summary(record: TraceRecord) -> TraceSummary:
    """Every renderer's words for a trace: the record's own (`summarised`), else worded now."""
    if record.get("summary") is not None:
        return record["summary"]
    return {
        "headline": orchestrate_summary(record),
        "notes": origin_notes(record),
        "kept": dropped_note(record),
        "tools": shows_tools(record),
        "marks": output_marks(record),
    }


def run_summary(record: RunRecord) -> RunSummary:
    """Every renderer's words for a sandbox run (see `trace_summary`)."""
    if record.get("summary") is not None:
        return record["summary"]
    build = record.get("build")
    summary: RunSummary = {
        "headline": sandbox_summary(record),
        "build": f"image {build.get('tag', '?')}: {build_state(build)}" if build else None,
        "error": record_error(record),
    }
    if record.get("requests") is not None:
        summary["requests"] = requests_line(record["requests"])
    return summary


REFUSALS_NAMED = 3
"""Refused destinations the requests' line names; the table lists them all."""
REQUESTS_SHOWN = 20
"""Request rows the text fallback lists (the HTML and the labextension list every row kept)."""
REQUEST_COLUMNS = ("time", "method", "destination", "path", "status", "sent", "received", "")


def requests_line(log: RequestLogRecord) -> str:
    """``3 requests: 2 allowed, 1 refused: evil.example:443 not on the list``."""
    total = log.get("total", 0)
    if not total:
        return "no requests"
    refused = log.get("refused", 0)
    line = f"{total:,} request{'s' * (total != 1)}: {log.get('allowed', 0):,} allowed"
    if refused:
        named = [f"{target} {why}" for target, why in log.get("refusals", {}).items()]
        more = ", ..." if len(named) > REFUSALS_NAMED else ""
        line += f", {refused:,} refused: " + ", ".join(named[:REFUSALS_NAMED]) + more
    return line


def request_cells(row: RequestRow) -> list[str]:
    """A request as every renderer words it, in `REQUEST_COLUMNS` order (UTC clock time)."""
    host = str(row.get("host"))
    when = datetime.fromtimestamp(float(row.get("time", 0)), UTC).strftime("%H:%M:%S.%f")
    status = row.get("status", 0)
    why = row.get("why")
    result = ("allowed" if row.get("allowed") else "refused") + (f": {why}" if why else "")
    return [
        when[:-3],
        str(row.get("method")),
        f"[{host}]:{row.get('port')}" if ":" in host else f"{host}:{row.get('port')}",
        str(row.get("path") or ""),
        str(status) if status else "-",
        size_text(int(row.get("sent", 0))),
        size_text(int(row.get("received", 0))),
        result,
    ]


def summarised(record: Record) -> Record:
    """``record`` with its words (``summary``) for the renderers, nested records too: what a
    cell shows and a notebook saves, so the JupyterLab renderer draws them as given."""
    if record.get("kind") != "orchestrate":
        run = cast(RunRecord, record)
        return {**run, "summary": run_summary(run)}
    trace = cast(TraceRecord, record)
    calls: list[CallRecord] = [
        {**call, "children": [summarised(child) for child in call["children"]]}
        if call.get("children")
        else call
        for call in trace.get("calls", [])
    ]
    shown: TraceRecord = {**trace, "calls": calls}
    return {**shown, "summary": trace_summary(shown)}


OUR_IMAGES = ("jupyter-sandbox/", "?")
"""Image names a headline does not repeat: the base and built images (the build line names a
built one) and a live record's not-yet-known image."""


def sandbox_summary(record: RunRecord) -> str:
    """The headline: ``sandbox 'train' ok in 3.50 s``, then only what is news: a nonzero exit,
    retries, a cached result, an image the build line below does not name. An unnamed cell's
    run (named ``sandbox``) is not named twice."""
    if record.get("live"):
        return str(record["live"]["summary"])
    exit_code = record.get("exit_code")
    bits = []
    image = str(record.get("image") or "?")
    if record.get("build") is None and not image.startswith(OUR_IMAGES):  # one of ours: noise
        bits.append(f"image {image}")
    if exit_code not in (None, 0):
        bits.append(f"exit {exit_code}")
    if record.get("attempts", 1) > 1:  # 0 when the build failed: no run to count
        bits.append(f"{record.get('attempts')} attempts")
    if record.get("cached"):
        bits.append("result cached")
    traced = trace_note(record)
    if traced:
        bits.append(traced)
    name = record.get("name", "sandbox")
    named = "sandbox" if name == "sandbox" else f"sandbox {name!r}"
    if record.get("session"):  # a session's cell: which session, and which of its cells
        named = f"session {record['session']} · cell {record.get('session_cell', '?')}"
    extra = f" ({', '.join(bits)})" if bits else ""
    return f"{named} {record.get('status', '?')} in {seconds(record.get('duration'))}{extra}"


def record_error(record: RunRecord) -> str | None:
    """The error line a sandbox record shows, unless the magic raised it (``raised``: the
    cell's error output shows it, and the record does not repeat it): its build's (the
    heading of the build log below it), else the run's."""
    if record.get("raised"):
        return None
    build = record.get("build")
    error = (build.get("error") if build else None) or record.get("error")
    return str(error) if error else None
